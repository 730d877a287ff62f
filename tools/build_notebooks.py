"""Execute the lesson sources into the notebooks the site shows and Colab opens.

    python tools/build_notebooks.py                      # every lessons_src/chapters/*.py
    python tools/build_notebooks.py 03 lessons_src/chapters/04_scaled_dot_product_attention.py

Each ``lessons_src/chapters/NN_slug.py`` (jupytext py:percent) becomes ``book/NN_slug.ipynb``:
the install cell (from ``_config.yml``) is put first, every cell is executed top to bottom in
a fresh kernel of this Python with the course's fixed environment (CPU, offline), and the
notebook is written with its outputs.  Cell ids are stable, timing metadata is dropped, so
re-running an unchanged source gives the same notebook up to what nbval's sanitizer ignores.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course_config

ROOT = course_config.ROOT
SOURCES = ROOT / "lessons_src" / "chapters"
BOOK = ROOT / "book"
INSTALL_TAG = "colab-install"
SOLUTION_TAG = "solution"
# An exercise's solution, code and output together, is folded behind a toggle that says what it is.
SOLUTION_METADATA = {"code_prompt_show": "Show the solution", "code_prompt_hide": "Hide the solution"}
# A cell that only lists the package's code (show_source) is folded too: the chapter shows the idea
# in a few lines, the package's full version (validation, options) is there for who wants it.  The
# toggle names what it lists, so that several listings in a row can be told apart.
SOURCE_PROMPT = "Show the package’s code: {}", "Hide the package’s code: {}"
# A cell whose code is folded but whose output shows (tag ``hide-input``: the drawing code of a
# figure, mostly) says what its toggle holds, like the two kinds above.
FIGURE_CODE_PROMPT = {
    "code_prompt_show": "Show the code that draws the figure",
    "code_prompt_hide": "Hide the code that draws the figure",
}
CODE_PROMPT = {"code_prompt_show": "Show the code", "code_prompt_hide": "Hide the code"}


# A cell of imports only (the top of every chapter) is folded as well: what a chapter uses shows
# in its code where it is used; the list of imports is there for who runs the code elsewhere.
def code_prompt(cell) -> dict[str, str]:
    """The toggle of a folded cell of code: "Show the code: what it does" where the cell's first
    line is a comment saying what it does, else "Show the code"."""
    first = cell.source.split("\n", 1)[0]
    if first.startswith("# ") and not first.startswith("# %%"):
        label = first[2:].strip().rstrip(".")
        return {"code_prompt_show": f"Show the code: {label}", "code_prompt_hide": "Hide the code"}
    return dict(CODE_PROMPT)


IMPORTS_PROMPT = {"code_prompt_show": "Show the imports", "code_prompt_hide": "Hide the imports"}
# A cell that draws a figure says what it shows: `# %% caption="..." alt="..."` in the source.  The
# page shows the caption under the figure (numbered, so that a reader can cite it) and gives the
# image the alt text (what the figure shows, for a reader who cannot see it).
FIGURE_KEYS = ("caption", "alt")
# In JupyterLab and Jupyter Notebook 7 the same cells (a solution, its explanation, a package
# listing) open collapsed, as on the site: a click on the bar beside a cell unfolds it.
COLLAPSED = {"source_hidden": True, "outputs_hidden": True}


def source_metadata(cell: nbformat.NotebookNode) -> dict[str, str]:
    """The toggle of a listing cell, naming what it lists (``show_source(GPT)`` -> ``GPT``)."""
    names = ", ".join(re.findall(r"show_source\(\s*([\w.]+)", cell.source))
    return {"code_prompt_show": SOURCE_PROMPT[0].format(names), "code_prompt_hide": SOURCE_PROMPT[1].format(names)}


def only_imports(cell: nbformat.NotebookNode) -> bool:
    """A code cell whose every statement is an import."""
    if cell.cell_type != "code":
        return False
    try:
        body = ast.parse(cell.source).body
    except SyntaxError:
        return False
    return bool(body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in body)


def only_lists_source(cell: nbformat.NotebookNode) -> bool:
    lines = [ln.strip() for ln in cell.source.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return cell.cell_type == "code" and bool(lines) and all(ln.startswith("show_source(") for ln in lines)


COURSE_ENV = course_config.COURSE_ENV
MIN_TEXT_PT = 8  # transformer_course.plotting.MIN_TEXT_PT


def install_cell_source() -> str:
    """The first code cell of every notebook: install the helper package where it is missing."""
    return (
        "# Installs the course's helper package where it is missing (in Colab, say); does nothing elsewhere.\n"
        "import importlib, importlib.util, os, subprocess, sys\n"
        'if importlib.util.find_spec("transformer_course") is None:\n'
        f'    spec = os.environ.get("TRANSFORMER_COURSE_PIP_SPEC", "{course_config.pip_spec()}")\n'
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", spec], check=True)\n'
        "    importlib.invalidate_caches()"
    )


def source_notebook(src: Path) -> nbformat.NotebookNode:
    """The notebook a source turns into, before execution: install cell + the source's cells."""
    nb = jupytext.read(src)
    cell = nbformat.v4.new_code_cell(install_cell_source(), metadata={"tags": ["remove-cell", INSTALL_TAG]})
    nb.cells.insert(0, cell)
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        "colab": {"provenance": []},
    }
    # the chapter's imports, at its top (a later import-only cell shows where a new tool comes in)
    first_imports = next(
        (
            c
            for c in nb.cells[1:]
            if only_imports(c) and not any(t.startswith("remove-") for t in c.metadata.get("tags", []))
        ),
        None,
    )
    for i, c in enumerate(nb.cells):
        c["id"] = f"c{i:03d}-{src.stem[:2]}"
        c.metadata.pop("lines_to_next_cell", None)
        tags = c.metadata.get("tags", [])
        if SOLUTION_TAG in tags and c.cell_type == "code":
            c.metadata["tags"] = [t for t in tags if t not in ("hide-input", "hide-cell")] + ["hide-cell"]
            c.metadata["mystnb"] = dict(SOLUTION_METADATA)
            c.metadata["jupyter"] = dict(COLLAPSED)
        elif SOLUTION_TAG in tags:  # the explanation of the solution
            c.metadata["jupyter"] = {"source_hidden": True}
        elif only_lists_source(c):
            c.metadata["tags"] = [t for t in tags if t not in ("hide-input", "hide-cell")] + ["hide-cell"]
            c.metadata["mystnb"] = source_metadata(c)
            c.metadata["jupyter"] = dict(COLLAPSED)
        elif only_imports(c) and c is first_imports:
            c.metadata["tags"] = [t for t in tags if t != "hide-input"] + ["hide-input"]
            c.metadata["mystnb"] = dict(IMPORTS_PROMPT)
        elif "hide-input" in tags and c.cell_type == "code":
            draws = any(k in c.metadata for k in FIGURE_KEYS)
            c.metadata["mystnb"] = dict(FIGURE_CODE_PROMPT if draws else code_prompt(c))
        if c.cell_type == "code":
            figure_metadata(c)
            c.outputs = []
            c.execution_count = None
    return nb


def figure_metadata(cell: nbformat.NotebookNode) -> None:
    """Turn a source cell's ``caption`` and ``alt`` into what MyST-NB reads: the caption of the figure
    its image output is wrapped in, and the image's alt text."""
    caption, alt = (cell.metadata.pop(k, None) for k in FIGURE_KEYS)
    if caption is None and alt is None:
        return
    if not (caption and alt):
        raise SystemExit(
            f"a figure cell needs both caption= and alt= (got caption={caption!r}, alt={alt!r}):\n{cell.source[:200]}"
        )
    mystnb = cell.metadata.setdefault("mystnb", {})
    mystnb["figure"] = {"caption": caption}
    mystnb["image"] = {"alt": alt}


def settle_streams(outputs: list) -> list:
    """The outputs as a terminal would leave them: consecutive writes to the same stream joined
    into one output, and each line only what follows its last carriage return.

    A text progress bar (tqdm without widgets) redraws itself with ``\r`` a hundred times;
    stored as it comes, the page would show a hundred bars.  Settled, it shows the last one.
    Streams left empty (or stderr left blank) are dropped: the page would show an empty box.
    """
    settled: list = []
    for out in outputs:
        if (
            out.get("output_type") == "stream"
            and settled
            and settled[-1].get("output_type") == "stream"
            and settled[-1]["name"] == out["name"]
        ):
            settled[-1]["text"] += out["text"]
        else:
            settled.append(out)
    for out in settled:
        if out.get("output_type") == "stream" and "\r" in out["text"]:
            lines = out["text"].replace("\r\n", "\n").split("\n")
            out["text"] = "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines)
    return [
        out
        for out in settled
        if out.get("output_type") != "stream" or (out["text"].strip() if out["name"] == "stderr" else out["text"])
    ]


# Run after a chapter's last cell: the figures whose text would appear too small on the page
# (recorded by the course's figure defaults, transformer_course.plotting).
READABILITY_PROBE = "import json as _j\nfrom transformer_course import plotting as _p\nprint(_j.dumps(_p.UNREADABLE))"


def unreadable_figures(nb: nbformat.NotebookNode, probe: nbformat.NotebookNode) -> list[str]:
    text = "".join(o.get("text", "") for o in probe.outputs if o.get("output_type") == "stream")
    found = json.loads(text.strip().splitlines()[-1]) if text.strip() else []
    found = list(dict.fromkeys(tuple(f) for f in found))  # a figure is drawn more than once when saved
    # IPython has already counted the cell when the inline backend draws its figures: n - 1 is the cell.
    where = {c.execution_count + 1: i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count}
    return [
        f"cell {where.get(n, '?')} ({nb.cells[where[n]].source.splitlines()[0][:50] if n in where else ''}...): "
        f"text {t!r} appears {size} pt tall"
        for n, size, t in found
    ]


def execute(src: Path, timeout: int = 1200) -> float:
    nb = source_notebook(src)
    probe = nbformat.v4.new_code_cell(READABILITY_PROBE)
    nb.cells.append(probe)
    os.environ.update(COURSE_ENV)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(BOOK)}},
    )
    t0 = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as err:
        raise SystemExit(f"{src.name}: a cell failed\n{err}") from None
    seconds = time.perf_counter() - t0
    nb.cells.pop()
    small = unreadable_figures(nb, probe)
    if small:
        raise SystemExit(
            f"{src.name}: figure text too small to read at the page's width (under "
            f"{MIN_TEXT_PT:g} pt as shown):\n  " + "\n  ".join(small) + "\nMake the figure narrower "
            "(the column shows 6.9 in at 100 dpi unshrunk) or its text larger."
        )
    for c in nb.cells:
        c.metadata.pop("execution", None)
        if c.cell_type == "code":
            c.outputs = settle_streams(c.outputs)
    out = BOOK / f"{src.stem}.ipynb"
    nbformat.validate(nb)
    out.write_text(json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    return seconds


def refresh_metadata(src: Path) -> bool:
    """Give the stored notebook the cell tags and metadata its source now makes, its markdown cells'
    text, and the install cell ``install_cell_source()`` now writes, without executing it.

    Only when every other code cell's source and every cell's type are unchanged (tags decide how a
    cell is folded on the page and prose is not executed, so neither changes what the code prints;
    the install cell does nothing where the package is installed, as when the notebooks are
    executed); returns False, changing nothing, otherwise.
    """
    out = BOOK / f"{src.stem}.ipynb"
    if not out.exists():
        return False
    fresh, stored = source_notebook(src), nbformat.read(out, as_version=4)
    if not stored.cells or INSTALL_TAG not in stored.cells[0].metadata.get("tags", []):
        return False

    def code(cells: list) -> list:
        return [(c.cell_type, c.source if c.cell_type == "code" else "") for c in cells[1:]]

    if code(fresh.cells) != code(stored.cells):
        return False
    stored.cells[0].source = fresh.cells[0].source
    for new, old in zip(fresh.cells, stored.cells, strict=True):
        old.metadata = new.metadata
        if new.cell_type == "markdown":
            old.source = new.source
    out.write_text(json.dumps(stored, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    return True


def pick(args: list[str]) -> list[Path]:
    every = sorted(SOURCES.glob("[0-9][0-9]_*.py"))
    if not args:
        return every
    chosen = []
    for a in args:
        p = Path(a)
        hits = [p.resolve()] if p.suffix == ".py" and p.exists() else [s for s in every if s.name.startswith(a)]
        if not hits:
            raise SystemExit(f"no lesson source matches {a!r} in {SOURCES.relative_to(ROOT)}")
        chosen += hits
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapter numbers (e.g. 03) or source paths; default: all")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds allowed per cell")
    parser.add_argument(
        "--metadata-only",
        action="store_true",
        help="only refresh cell tags/metadata, markdown text and the install cell of notebooks whose code is unchanged",
    )
    args = parser.parse_args()
    BOOK.mkdir(exist_ok=True)
    if args.metadata_only:
        for src in pick(args.chapters):
            done = refresh_metadata(src)
            print(f"  book/{src.stem}.ipynb: {'metadata refreshed' if done else 'cells changed: execute it instead'}")
        return
    total = 0.0
    for src in pick(args.chapters):
        print(f"executing {src.relative_to(ROOT)} ...", flush=True)
        s = execute(src, args.timeout)
        total += s
        print(f"  wrote book/{src.stem}.ipynb in {s:.1f} s", flush=True)
    print(f"done in {total:.1f} s")


if __name__ == "__main__":
    main()
