"""book/ must be what `make notebooks` makes of lessons_src/: same cells, executed, nothing private."""

from __future__ import annotations

import copy
import json
import re
import socket
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import build_notebooks  # noqa: E402

SOURCES = sorted((ROOT / "lessons_src" / "chapters").glob("[0-9][0-9]_*.py"))
NOTEBOOKS = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


def _cells(nb):
    return [
        (
            c.cell_type,
            c.source.strip(),
            sorted(c.metadata.get("tags", [])),
            c.metadata.get("mystnb"),
            c.metadata.get("jupyter"),
        )
        for c in nb.cells
    ]


def test_every_source_has_a_notebook_and_back():
    assert SOURCES, "no lesson sources found"
    assert {p.stem for p in SOURCES} == {p.stem for p in NOTEBOOKS}, (
        "lessons_src/chapters and book/ hold different chapters: run `make notebooks`"
    )


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_notebook_cells_match_source(src):
    nb_path = ROOT / "book" / f"{src.stem}.ipynb"
    if not nb_path.exists():
        pytest.fail(f"book/{nb_path.name} is missing: run `make notebooks CHAPTERS={src.stem[:2]}`")
    expected = build_notebooks.source_notebook(src)
    actual = jupytext.read(nb_path)
    assert _cells(actual) == _cells(expected), (
        f"book/{nb_path.name} differs from {src.relative_to(ROOT)}: run `make notebooks CHAPTERS={src.stem[:2]}`"
    )


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_executed_and_shows_nothing_private(nb_path):
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    first = nb["cells"][0]
    assert build_notebooks.INSTALL_TAG in first["metadata"].get("tags", []), "the install cell must come first"
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or i == 0:
            continue
        tags = cell["metadata"].get("tags", [])
        if "skip-execution" in tags:  # code that needs the Hub: shown, run by the reader
            assert "nbval-skip" in tags, f"{nb_path.name} cell {i}: skip-execution without nbval-skip"
            assert not cell["outputs"], f"{nb_path.name} cell {i} is skipped but has outputs"
            continue
        assert cell["execution_count"] is not None, f"{nb_path.name} cell {i} was not executed"
        assert not any(o.get("output_type") == "error" for o in cell["outputs"]), f"{nb_path.name} cell {i} failed"
    text = json.dumps([c.get("outputs", []) for c in nb["cells"]])
    private = re.compile(r"(/root/|/home/[\w.-]+|/Users/[\w.-]+|(?:[0-9a-f]{2}:){5}[0-9a-f]{2})", re.I)
    assert not private.search(text), f"{nb_path.name} prints a local path or a MAC address: {private.search(text)}"
    host = socket.gethostname()
    assert not host or len(host) < 4 or host not in text, f"{nb_path.name} prints this machine's host name"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_streams_are_settled(nb_path):
    """Progress bars show as their last state on the page, not as a hundred redraws."""
    nb = nbformat.read(nb_path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert build_notebooks.settle_streams(copy.deepcopy(cell.outputs)) == cell.outputs, (
                f"{nb_path.name} cell {i} stores unsettled stream output: "
                f"run `make notebooks CHAPTERS={nb_path.stem[:2]}`"
            )


def test_settle_streams_keeps_what_a_terminal_shows():
    out = [
        nbformat.v4.new_output("stream", name="stderr", text="\rtraining:   0%"),
        nbformat.v4.new_output("stream", name="stderr", text="\rtraining: 100%\n"),
        nbformat.v4.new_output("stream", name="stdout", text="done\r\n"),
    ]
    assert build_notebooks.settle_streams(out) == [
        nbformat.v4.new_output("stream", name="stderr", text="training: 100%\n"),
        nbformat.v4.new_output("stream", name="stdout", text="done\n"),
    ]


def test_install_cell_installs_from_the_configured_repository():
    import course_config

    url, _, _ = course_config.repository()
    src = build_notebooks.install_cell_source()
    assert f"git+{url}.git@{course_config.branch()}" in src
    assert "TRANSFORMER_COURSE_PIP_SPEC" in src
    assert 'find_spec("transformer_course") is None' in src


# --- What a reader sees in the stored outputs --------------------------------------------------

ADDRESS_REPR = re.compile(r"<[^<>\n]* at 0x[0-9a-fA-F]+>")
PROGRESS_BAR = re.compile(r"\d+%\|")


def _output_texts(output) -> list[str]:
    texts = [output.get("text", "")]
    for mime in ("text/plain", "text/html", "text/markdown"):
        value = output.get("data", {}).get(mime, "")
        texts.append("".join(value) if isinstance(value, list) else value)
    return ["".join(t) if isinstance(t, list) else t for t in texts]


def test_the_address_pattern_catches_an_object_repr():
    assert ADDRESS_REPR.search("<torch._C.Generator at 0x7fd7398a39d0>")
    assert ADDRESS_REPR.search("<Figure size 640x480 with 1 Axes> <function f at 0x10ab>")
    assert not ADDRESS_REPR.search("tensor([1, 2]) and 0x1F as a number")


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_output_is_an_object_repr_with_a_memory_address(nb_path):
    """A value like ``<torch._C.Generator at 0x7f...>`` is noise to a reader (and differs run to run)."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            for text in _output_texts(out):
                m = ADDRESS_REPR.search(text)
                assert not m, (
                    f"{nb_path.name} cell {i} shows {m.group(0)!r}: don't end a cell with an expression "
                    "whose value is an object (assign it, or end the line with ';')"
                )


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_empty_streams_and_no_progress_bars_on_stderr(nb_path):
    """The theme draws stderr like an error: progress bars belong on stdout; empty boxes nowhere."""
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            if out.get("output_type") != "stream":
                continue
            text = "".join(out["text"]) if isinstance(out["text"], list) else out["text"]
            assert text.strip(), f"{nb_path.name} cell {i} stores an empty {out['name']} block"
            if out["name"] == "stderr":
                assert not PROGRESS_BAR.search(text), (
                    f"{nb_path.name} cell {i} shows a progress bar on stderr: use transformer_course.utils.progress"
                )


def _exercise_code_cells(nb):
    heading = next(
        (
            i
            for i, c in enumerate(nb.cells)
            if c.cell_type == "markdown" and re.search(r"^## Exercises", c.source, re.M)
        ),
        None,
    )
    # the code cells a reader sees there (a hidden check of a solution's result is not one)
    shown = [
        c
        for c in nb.cells[(heading or 0) :]
        if c.cell_type == "code" and "remove-cell" not in c.metadata.get("tags", [])
    ]
    return heading, shown if heading else []


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_exercise_solutions_are_folded(src):
    """Each solution, code and output, is folded behind a toggle that says it is the solution."""
    nb = build_notebooks.source_notebook(src)
    heading, cells = _exercise_code_cells(nb)
    assert heading is not None, f"{src.name} has no '## Exercises' section"
    assert cells, f"{src.name}: the exercises have no solutions"
    for c in cells:
        tags = c.metadata.get("tags", [])
        assert build_notebooks.SOLUTION_TAG in tags, (
            f"{src.name}: a code cell of the exercises is not tagged 'solution': {c.source[:60]!r}"
        )
        assert "hide-cell" in tags and "hide-input" not in tags
        assert build_notebooks.SOLUTION_METADATA.items() <= c.metadata["mystnb"].items()


def test_settle_streams_drops_empty_blocks():
    out = [
        nbformat.v4.new_output("stream", name="stderr", text="\n"),
        nbformat.v4.new_output("stream", name="stdout", text=""),
        nbformat.v4.new_output("stream", name="stdout", text="\n"),
    ]
    assert build_notebooks.settle_streams(out) == [nbformat.v4.new_output("stream", name="stdout", text="\n")]


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_package_listings_are_folded(src):
    """A cell that only lists the package's code is folded behind "Show the package's code: NAME"."""
    nb = build_notebooks.source_notebook(src)
    for c in nb.cells:
        if build_notebooks.only_lists_source(c):
            assert "hide-cell" in c.metadata["tags"] and c.metadata["mystnb"] == build_notebooks.source_metadata(c)
            listed = [
                line.split("show_source(", 1)[1].split(")", 1)[0].split(",")[0].strip()
                for line in c.source.splitlines()
                if "show_source(" in line
            ]
            assert c.metadata["mystnb"]["code_prompt_show"] == f"Show the package’s code: {', '.join(listed)}"


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_folded_code_says_what_it_holds(src):
    """A cell whose code is folded and output shown (hide-input) has a toggle that names its content,
    not the theme's generic "Show code cell source"."""
    nb = build_notebooks.source_notebook(src)
    for c in nb.cells:
        if c.cell_type == "code" and "hide-input" in c.metadata.get("tags", []):
            prompts = {k: c.metadata["mystnb"][k] for k in ("code_prompt_show", "code_prompt_hide")}
            if "figure" in c.metadata["mystnb"]:
                expected = build_notebooks.FIGURE_CODE_PROMPT
            elif build_notebooks.only_imports(c):
                expected = build_notebooks.IMPORTS_PROMPT
            else:
                expected = build_notebooks.code_prompt(c)
            assert prompts == expected, c.source[:80]


def test_a_folded_cell_is_named_by_its_first_comment():
    code = nbformat.v4.new_code_cell
    named = build_notebooks.code_prompt(code("# the 25 training runs.\nruns = []"))
    assert named["code_prompt_show"] == "Show the code: the 25 training runs"
    assert build_notebooks.code_prompt(code("runs = []  # a comment")) == build_notebooks.CODE_PROMPT


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_a_chapter_folds_its_imports(src):
    """The imports at the top of a chapter are folded behind a toggle that says so."""
    nb = build_notebooks.source_notebook(src)
    imports = [
        c
        for c in nb.cells
        if build_notebooks.only_imports(c) and not any(t.startswith("remove-") for t in c.metadata.get("tags", []))
    ]
    assert imports, f"{src.name}: no cell of imports only (set-up lines go in a cell of their own)"
    first, *later = imports
    assert "hide-input" in first.metadata["tags"], first.source[:80]
    assert first.metadata["mystnb"]["code_prompt_show"] == "Show the imports", first.source[:80]
    for c in later:  # a later import shows where a new tool comes in
        assert "hide-input" not in c.metadata.get("tags", []), c.source[:80]


def test_only_imports():
    code = nbformat.v4.new_code_cell
    assert build_notebooks.only_imports(code("import math\nfrom torch import nn"))
    assert not build_notebooks.only_imports(code("import math\n\ng = set_seed(0)"))
    assert not build_notebooks.only_imports(code(""))


def test_only_lists_source():
    code = nbformat.v4.new_code_cell
    assert build_notebooks.only_lists_source(code("# the package's version\nshow_source(GPT)\nshow_source(KVCache)"))
    assert not build_notebooks.only_lists_source(code("from x import f\n\nshow_source(f)"))
    assert not build_notebooks.only_lists_source(nbformat.v4.new_markdown_cell("show_source(f)"))


def _listing_namespace(nb: nbformat.NotebookNode) -> dict:
    """The names a chapter's listings refer to: every import statement of its code cells, run."""
    import ast

    namespace: dict = {}
    for c in nb.cells:
        if c.cell_type != "code" or c.source.lstrip().startswith(("%", "!")):
            continue
        try:
            tree = ast.parse(c.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                exec(compile(ast.Module(body=[node], type_ignores=[]), "<imports>", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_package_listings_show_the_package_as_it_is(nb_path):
    """A page's package listing (a cell that only calls show_source) prints what show_source gives
    for today's package: a change to listed code, or to show_source, is rebuilt into every page
    that lists it (make notebooks CHAPTERS="..."), or strict nbval fails that page in CI."""
    nb = nbformat.read(nb_path, as_version=4)
    listings = [c for c in nb.cells if build_notebooks.only_lists_source(c)]
    if not listings:
        return
    namespace = _listing_namespace(nb)
    stale = []
    for c in listings:
        calls = [line.strip() for line in c.source.splitlines() if line.strip().startswith("show_source(")]
        shown = ["".join(o["data"]["text/plain"]) for o in c.outputs if "text/plain" in o.get("data", {})]
        assert len(calls) == len(shown), c.source
        for call, text in zip(calls, shown, strict=True):
            if eval(call, namespace).data.rstrip() != text.rstrip():  # the page's own call
                stale.append(call)
    assert not stale, f"{nb_path.name}: listings older than the package: {stale}; rebuild the page"
