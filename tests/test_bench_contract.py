"""The bench reads each training chapter's headline figures by name: those names must exist.

``bench/run.py``'s ``CHAPTER_METRICS`` holds Python expressions evaluated in a chapter's kernel after
its last cell.  A renamed variable in a chapter would only show up as an error in ``make bench``;
this test finds it at once, by reading the chapter's source.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "lessons_src" / "chapters"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def top_level_names(source: str) -> set[str]:
    """Names bound by the chapter's top-level statements (assignments, loops, imports, defs, with)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        else:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    names.add(sub.id)
    return names


def names_read(expression: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(expression, mode="eval")) if isinstance(n, ast.Name)}


def test_top_level_names_sees_unpacking_loops_and_imports():
    src = (
        "import numpy as np\nfrom x import y\na, (b, c) = 1, (2, 3)\n"
        "for d in []: pass\nwith f() as g: pass\ndef h(): k = 1\n"
    )
    assert top_level_names(src) == {"np", "y", "a", "b", "c", "d", "g", "h"}


BENCH = _bench()


@pytest.mark.parametrize("chapter", sorted(BENCH.CHAPTER_METRICS))
def test_every_metric_reads_names_the_chapter_defines(chapter):
    (source,) = CHAPTERS.glob(f"{chapter}_*.py")
    defined = top_level_names(source.read_text(encoding="utf-8")) | set(dir(builtins))
    for name, value, seconds in BENCH.CHAPTER_METRICS[chapter]:
        for expression in filter(None, (value, seconds)):
            missing = names_read(expression) - defined
            assert not missing, (
                f"{source.name}: bench metric {name!r} reads {sorted(missing)}, which the chapter never assigns"
            )


def test_the_bench_imports_what_the_package_has():
    """Every ``from transformer_course... import name`` in bench/ names a module and an attribute that exist
    (the bench skips a measurement on ImportError, so a renamed module would silently drop it)."""
    for path in sorted((ROOT / "bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformer_course"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    found = hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}")
                    assert found, f"{path.name}: {node.module} has no {alias.name}"
