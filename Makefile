# The course's commands.  Each one sets up .venv first (Python 3.11, requirements.txt, the package).
#   make book       build the site into _build/html
#   make test       every check CI runs: package tests, strict nbval, sync, workflow lint, site build with -W,
#                   the site opened in headless Chromium, every notebook run alone in a Colab-like environment
#   make notebooks  re-execute lessons_src/chapters/*.py into book/ (CHAPTERS="03 04" for some)
#   make bench      measure the course's speed and budgets (writes bench/results.json and book/performance.md)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NBVAL  := -p tests.nbval_plugin --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: setup book test test-package test-notebooks test-workflows test-site check-site check-colab notebooks bench clean

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

test: test-package test-notebooks test-workflows test-site check-site check-colab
	@echo "make test: all checks passed"

test-package: setup
	$(BIN)/python -m pytest tests

test-notebooks: setup
	$(BIN)/python -m pytest $(NBVAL) book

test-workflows: setup
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(BIN)/zizmor --offline --min-severity low .github/workflows

test-site: setup
	$(BIN)/jupyter-book build --all -W -n --keep-going .

# Every page in headless Chromium (Debian's chromium, installed when missing); screenshots in _build/screenshots.
check-site: test-site
	$(BIN)/python tools/check_site.py

# Every notebook alone, in a fresh venv with only Colab's packages, installing the package itself.
check-colab: setup
	$(BIN)/python tools/check_colab.py

notebooks: setup
	$(BIN)/python tools/build_notebooks.py $(CHAPTERS)

bench: setup
	$(BIN)/python bench/run.py

clean:
	rm -rf _build
