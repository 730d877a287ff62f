"""Every dependency is declared where the install that needs it finds it, and requirements.txt is compiled.

In Colab the first cell installs ``transformer_course`` with the extras of
``course_config.NOTEBOOK_EXTRAS`` and nothing else, so whatever a chapter imports must be either
preinstalled in Colab (and listed in ``tools/check_colab.py``) or a dependency of the package or
of those extras in ``pyproject.toml``; what the package's own modules import must be one of its
``dependencies``.  Locally, ``pip install -e .`` must be enough for the package.

requirements.txt is what ``make requirements`` (uv pip compile) makes of requirements.in and
pyproject.toml: checked here statically (no network); ``make check-requirements`` recompiles it.
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
import course_config  # noqa: E402

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Modules the Jupyter kernel itself brings (Colab and every local Jupyter have them).
KERNEL_MODULES = {"IPython"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _name(requirement: str) -> str:
    return _norm(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0))


def _declared(extras=None) -> set[str]:
    """The package's dependencies and those of ``extras`` (default: every extra)."""
    reqs = list(PYPROJECT["project"]["dependencies"])
    for name, extra in PYPROJECT["project"].get("optional-dependencies", {}).items():
        if extras is None or name in extras:
            reqs += extra
    return {_name(r) for r in reqs}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


CHAPTERS = sorted((ROOT / "lessons_src" / "chapters").glob("[0-9][0-9]_*.py"))
MODULES = sorted((ROOT / "lessons_src" / "transformer_course").rglob("*.py"))


def _undeclared(path: Path, declared: set[str]) -> list[str]:
    dists = importlib.metadata.packages_distributions()
    missing = []
    for module in sorted(_imports(path)):
        if module in sys.stdlib_module_names or module == "transformer_course" or module in KERNEL_MODULES:
            continue
        owners = {_norm(d) for d in dists.get(module, [])}
        if not owners:
            missing.append(f"{module} (not installed at all)")
        elif not owners & declared:
            missing.append(f"{module} (from {', '.join(sorted(owners))})")
    return missing


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_import_of_a_chapter_is_declared(path):
    missing = _undeclared(path, _declared(course_config.NOTEBOOK_EXTRAS))
    assert not missing, (
        f"{path.name} imports modules that neither the package's dependencies nor the extras the install cell "
        f"asks for ({', '.join(course_config.NOTEBOOK_EXTRAS)}) declare: {', '.join(missing)}. "
        "Add them to pyproject.toml: to the `course` extra when only chapters import them, "
        "or a learner's install will not have them."
    )


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_every_import_of_the_package_is_a_dependency(path):
    missing = _undeclared(path, _declared(extras=()))
    assert not missing, (
        f"transformer_course/{path.name} imports modules pyproject.toml's [project] dependencies do not "
        f"declare: {', '.join(missing)}. Add them there (an extra is not enough: `pip install transformer_course` "
        "must give the package everything it imports)."
    )


def test_the_install_cell_asks_for_every_extra():
    """The notebooks' install cell and the Colab check install the package with every extra."""
    extras = set(PYPROJECT["project"].get("optional-dependencies", {}))
    asked = set(course_config.NOTEBOOK_EXTRAS)
    assert asked == extras, (
        f"tools/course_config.py NOTEBOOK_EXTRAS asks for {sorted(asked)}, pyproject.toml declares the extras "
        f"{sorted(extras)}: a learner's install must ask for each extra the chapters need, and only those"
    )
    spec = course_config.pip_spec()
    assert spec.startswith(f"transformer_course[{','.join(course_config.NOTEBOOK_EXTRAS)}] @ "), spec
    assert course_config.pip_spec("file:///w.whl").endswith(" @ file:///w.whl")


def test_colab_environment_is_only_colab_preinstalls():
    """The Colab check's environment must not hand a notebook something the package does not declare."""
    declared = _declared()
    undeclared = [p for p in check_colab.COLAB_PACKAGES if _norm(p) not in declared]
    assert not undeclared, f"check_colab.COLAB_PACKAGES lists packages pyproject.toml does not declare: {undeclared}"


# --- requirements.txt: compiled from requirements.in and pyproject.toml ------------------------------

COMPILE_COMMAND = "make requirements"
# PyPI's Linux torch is the CUDA build; the course installs the CPU build of the pinned version, which
# needs none of these (requirements-excludes.txt keeps them out of the compiled file).
CUDA_PACKAGES = re.compile(r"^(nvidia-.*|cuda-.*|triton)$")


def _compiled(path: Path = ROOT / "requirements.txt") -> dict[str, tuple[str, list[str]]]:
    """``name -> (version, what it is pinned via)`` of a file uv pip compile wrote."""
    pins: dict[str, tuple[str, list[str]]] = {}
    current = None
    via_block = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        pin = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line)
        if pin:
            current = _norm(pin.group(1))
            assert current not in pins, f"{path.name} line {number}: {pin.group(1)} is pinned twice"
            pins[current] = (pin.group(2), [])
            via_block = False
        elif m := re.fullmatch(r"    # via(?: (.+))?", line):
            assert current is not None, f"{path.name} line {number}: a '# via' line before any pin"
            if m.group(1):
                pins[current][1].append(m.group(1))
            via_block = m.group(1) is None
        elif via_block and (m := re.fullmatch(r"    #   (.+)", line)):
            pins[current][1].append(m.group(1))
        else:
            assert line.startswith("#") or not line.strip(), (
                f"{path.name} line {number} is neither a pin (name==version), nor an annotation, nor a comment: "
                f"{line!r}. requirements.txt is generated: edit requirements.in and run `{COMPILE_COMMAND}`"
            )
            via_block = False
    return pins


def _requirements_in() -> list[str]:
    reqs = []
    for line in (ROOT / "requirements.in").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            assert not line.startswith("-"), f"requirements.in: options are not expected here: {line!r}"
            reqs.append(line)
    return reqs


def test_requirements_txt_says_how_it_is_made():
    head = (ROOT / "requirements.txt").read_text().splitlines()[:2]
    assert head == ["# This file was autogenerated by uv via the following command:", f"#    {COMPILE_COMMAND}"], (
        f"requirements.txt must begin with the header `{COMPILE_COMMAND}` writes: it is compiled from requirements.in "
        f"and pyproject.toml, never edited by hand; found {head}"
    )
    makefile = (ROOT / "Makefile").read_text()
    rule = re.search(r"^requirements:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert rule, "the Makefile has no `requirements` target (the command requirements.txt names)"
    assert re.search(r"uv pip compile pyproject\.toml requirements\.in ", makefile), (
        "`make requirements` must compile pyproject.toml and requirements.in with uv pip compile"
    )
    assert f'--custom-compile-command "{COMPILE_COMMAND}"' in makefile


def test_every_pin_says_what_needs_it():
    """Nothing is pinned that nothing uses: each pin names requirements.in, pyproject.toml or a pinned package."""
    pins = _compiled()
    assert pins, "requirements.txt pins nothing"
    for name, (version, via) in pins.items():
        assert via, (
            f"requirements.txt pins {name}=={version} with no '# via' line: nothing asks for it. "
            f"Remove it from requirements.in (or add it there) and run `{COMPILE_COMMAND}`"
        )
        for source in via:
            assert source in ("-r requirements.in", "transformer-course (pyproject.toml)") or _norm(source) in pins, (
                f"requirements.txt: {name}=={version} is pinned via {source!r}, which is not pinned: "
                f"run `{COMPILE_COMMAND}`"
            )


def test_every_requirement_is_pinned_within_its_range():
    from packaging.requirements import Requirement

    pins = _compiled()
    wanted = [(r, "requirements.in") for r in _requirements_in()]
    wanted += [(r, "pyproject.toml") for r in PYPROJECT["project"]["dependencies"]]
    for extra in PYPROJECT["project"].get("optional-dependencies", {}).values():
        wanted += [(r, "pyproject.toml") for r in extra]
    for text, where in wanted:
        req = Requirement(text)
        name = _norm(req.name)
        assert name in pins, (
            f"{where} asks for {req.name}, which requirements.txt does not pin: run `{COMPILE_COMMAND}`"
        )
        version = pins[name][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements.txt pins {req.name}=={version}, outside what {where} allows ({text}): "
            f"run `{COMPILE_COMMAND}`"
        )
        source = "-r requirements.in" if where == "requirements.in" else "transformer-course (pyproject.toml)"
        assert source in pins[name][1], f"requirements.txt does not say that {req.name} is pinned via {where}"


def test_the_build_backend_is_pinned():
    """make setup installs the package with --no-build-isolation: its build backend must be in requirements.txt."""
    from packaging.requirements import Requirement

    pins = _compiled()
    for text in PYPROJECT["build-system"]["requires"]:
        req = Requirement(text)
        assert _norm(req.name) in pins and req.specifier.contains(pins[_norm(req.name)][0]), (
            f"pyproject.toml builds with {text}, which requirements.txt does not pin in that range: "
            f"`pip install --no-build-isolation -e .` would fail. Add it to requirements.in, run `{COMPILE_COMMAND}`"
        )
        assert "-r requirements.in" in pins[_norm(req.name)][1], f"requirements.in must name {req.name} itself"


def test_no_cuda_build_of_torch():
    cuda = sorted(n for n in _compiled() if CUDA_PACKAGES.match(n))
    assert not cuda, (
        f"requirements.txt pins {', '.join(cuda)}: the CUDA dependencies of PyPI's torch, which the CPU build the "
        f"course installs does not need. Add them to requirements-excludes.txt and run `{COMPILE_COMMAND}`"
    )


def test_compiled_file_parser_catches_what_it_must(tmp_path):
    """The checks above read requirements.txt through _compiled(): it must see a pin without a '# via'."""
    f = tmp_path / "requirements.txt"
    f.write_text("a==1\n    # via -r requirements.in\nb==2\nc==3\n    # via\n    #   a\n    #   b\n")
    assert _compiled(f) == {"a": ("1", ["-r requirements.in"]), "b": ("2", []), "c": ("3", ["a", "b"])}
    f.write_text("-e .\n")
    with pytest.raises(AssertionError, match="neither a pin"):
        _compiled(f)
