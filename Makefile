# The course's commands.  Each one sets up .venv first (Python 3.11, requirements.txt, the package).
#   make book       build the site into _build/html
#   make test       every check CI runs: lint and type check, package tests (sync included), every notebook
#                   run once, alone, in a Colab-like clean environment under strict nbval, workflow lint, site
#                   build with -W, the site opened in headless Chromium
#   make lint       ruff (lint and format check) and mypy on the package; seconds
#   make notebooks  re-execute lessons_src/chapters/*.py into book/ (CHAPTERS="03 04" for some)
#   make bench      measure the course's speed and budgets (writes bench/results.json and book/performance.md)
#   make test-lowest  the loose ranges of pyproject.toml: the lowest versions they allow, in a fresh venv,
#                   running the package tests and notebooks 04 and 07 (needs the network; CI runs it)
#   make requirements        compile requirements.txt from requirements.in and pyproject.toml (uv; network)
#   make check-requirements  check that requirements.txt is what `make requirements` gives (network)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NBVAL  := -p tests.nbval_plugin --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

ASSETS := tools/site_assets
.PHONY: setup setup-browser book test lint test-package test-notebooks test-notebooks-here test-workflows test-site check-site check-colab test-lowest requirements check-requirements notebooks bench clean

# requirements.txt: every package of .venv pinned, compiled from requirements.in (hand-written) and
# pyproject.toml (the package's dependencies and every extra); versions already pinned are kept.
# torch's CUDA dependencies are kept out (requirements-excludes.txt): the course installs its CPU build.
# Python 3.11.5: the oldest 3.11 that every pinned package supports.
COMPILE := $(BIN)/uv pip compile pyproject.toml requirements.in --all-extras --python-version 3.11.5 \
           --excludes requirements-excludes.txt --custom-compile-command "make requirements"

setup: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	$(BIN)/python -m pip install -q --no-deps -r requirements-nodeps.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

book: setup
	$(BIN)/jupyter-book build --all -W -n --keep-going .
	@echo "The site is built: open $(CURDIR)/_build/html/index.html"

test: lint test-package test-notebooks test-workflows test-site check-site
	@echo "make test: all checks passed"

# Lint (ruff check), formatting (ruff format --check) and types (mypy on the package, which ships
# py.typed); settings in pyproject.toml. First in `make test`: it takes seconds. CONTRIBUTING.md
# says how to fix what it finds.
lint: setup
	$(BIN)/ruff check
	$(BIN)/ruff format --check
	$(BIN)/mypy

test-package: setup
	$(BIN)/python -m pytest tests

# The lowest versions pyproject.toml's ranges allow (uv pip install --resolution lowest-direct) in a
# fresh venv on requires-python's floor (Python 3.10: on PATH, or LOWEST_PYTHON=/path/to/python),
# each range checked to be installed at its lower bound, then the package tests (less the checks of
# the repository's pinned tool chain) and notebooks 04 and 07 under strict nbval.
# See tools/test_lowest.py.
test-lowest: setup
	$(BIN)/python tools/test_lowest.py

requirements: setup
	$(COMPILE) -o requirements.txt

check-requirements: setup
	mkdir -p _build
	cp requirements.txt _build/requirements.compiled.txt
	$(COMPILE) -q -o _build/requirements.compiled.txt
	@diff -u requirements.txt _build/requirements.compiled.txt || \
	  { echo "requirements.txt is not what \`make requirements\` compiles from requirements.in and pyproject.toml (diff above): run it"; exit 1; }

# Every notebook executed once, two at a time: alone in a clean Colab-like environment that its
# first cell installs the package into, every output compared strictly with the page (nbval).
test-notebooks: setup
	$(BIN)/python tools/check_colab.py

# Strict nbval in the course's own .venv (quicker while writing a chapter; no clean environment).
test-notebooks-here: setup
	$(BIN)/python -m pytest $(NBVAL) book

test-workflows: setup
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(BIN)/zizmor --offline --min-severity low .github/workflows

test-site: setup
	$(BIN)/jupyter-book build --all -W -n --keep-going .

# Debian's chromium and chromium-driver (apt-get, as root, when missing), and local copies of the
# scripts the pages load from CDNs (MathJax, require.js, d3, jQuery; npm, versions pinned in
# $(ASSETS)/package-lock.json) for the browser check.
setup-browser: $(ASSETS)/node_modules/.installed
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  echo "installing Debian's chromium and chromium-driver ..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	fi

$(ASSETS)/node_modules/.installed: $(ASSETS)/package.json $(ASSETS)/package-lock.json
	cd $(ASSETS) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

# Every page in headless Chromium at 1280 px and 390 px, as an online reader sees it (outside
# scripts served from the local copies); fails on untypeset math, empty bertviz views, JS errors,
# broken images or links, sideways scrolling on a phone. Screenshots in _build/screenshots.
check-site: test-site setup-browser
	$(BIN)/python tools/check_site.py

check-colab: test-notebooks

notebooks: setup
	$(BIN)/python tools/build_notebooks.py $(CHAPTERS)

bench: setup
	$(BIN)/python bench/run.py

clean:
	rm -rf _build
