"""Every third-party module a chapter or the package imports is declared where a learner's install finds it.

In Colab the first cell installs ``transformer_course`` and nothing else, so whatever a chapter
imports must be either preinstalled in Colab (and listed in ``tools/check_colab.py``) or a
dependency of the package in ``pyproject.toml``.  Locally, ``pip install -e .`` must be enough too.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import check_colab  # noqa: E402

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Modules the Jupyter kernel itself brings (Colab and every local Jupyter have them).
KERNEL_MODULES = {"IPython"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    reqs = list(PYPROJECT["project"]["dependencies"])
    for extra in PYPROJECT["project"].get("optional-dependencies", {}).values():
        reqs += extra
    return {_norm(re.match(r"[A-Za-z0-9_.-]+", r).group(0)) for r in reqs}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


FILES = sorted((ROOT / "lessons_src" / "chapters").glob("[0-9][0-9]_*.py")) + sorted(
    (ROOT / "lessons_src" / "transformer_course").rglob("*.py")
)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT / "lessons_src")))
def test_every_import_is_declared(path):
    dists = importlib.metadata.packages_distributions()
    declared = _declared()
    missing = []
    for module in sorted(_imports(path)):
        if module in sys.stdlib_module_names or module == "transformer_course" or module in KERNEL_MODULES:
            continue
        owners = {_norm(d) for d in dists.get(module, [])}
        if not owners:
            missing.append(f"{module} (not installed at all)")
        elif not owners & declared:
            missing.append(f"{module} (from {', '.join(sorted(owners))})")
    assert not missing, (
        f"{path.name} imports modules pyproject.toml does not declare: {', '.join(missing)}. "
        "Add them to [project] dependencies (or an extra), or a learner's install will not have them."
    )


def test_colab_environment_is_only_colab_preinstalls():
    """The Colab check's environment must not hand a notebook something the package does not declare."""
    declared = _declared()
    undeclared = [p for p in check_colab.COLAB_PACKAGES if _norm(p) not in declared]
    assert not undeclared, f"check_colab.COLAB_PACKAGES lists packages pyproject.toml does not declare: {undeclared}"
