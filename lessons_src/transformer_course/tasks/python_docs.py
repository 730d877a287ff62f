"""A text corpus: Python's own reference documentation (chapters 11, 12 and
14, and the Performance appendix), and the course's character set.

Every Python ships it in ``pydoc_data.topics``, so the course has a real
English-and-code text of about a million characters without downloading
anything.  ``load_python_docs`` returns it mapped onto ``CHARS`` (newline and
printable ASCII: the GPT's character vocabulary); ``train_val_split`` cuts it
into training and validation text; ``python_docs_prose`` keeps the prose
paragraphs (the masked-language-model corpus of chapter 12).
"""

from __future__ import annotations

import re
import unicodedata

#: The character vocabulary: newline and the 95 printable ASCII characters.
#: It is fixed (not read off the corpus) so a checkpoint works with any
#: Python's copy of the documentation.
CHARS = "\n" + "".join(chr(i) for i in range(32, 127))

_TYPOGRAPHY = {
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u2013": "-",
    "\u2014": "--",
    "\u2026": "...",
    "\u00df": "ss",
    "\u00b0": " degrees",
    "\t": "    ",
    "\r": "",
}


def normalize_text(text: str) -> str:
    """Map ``text`` onto ``CHARS``: typographic quotes and dashes to ASCII,
    accents dropped, anything else left outside the vocabulary becomes
    ``"?"``."""
    text = "".join(_TYPOGRAPHY.get(ch, ch) for ch in text)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    allowed = set(CHARS)
    return "".join(ch if ch in allowed else "?" for ch in text)


def load_python_docs() -> str:
    """Python's reference documentation (``pydoc_data.topics``) as one
    normalised text.

    The topics (one per statement, operator, built-in type ...) are joined in
    sorted order of their names, separated by a blank line.  The text differs a
    little between Python versions.
    """
    from pydoc_data.topics import topics

    return normalize_text(
        "\n\n".join(topics[name].strip("\n") for name in sorted(topics)) + "\n"
    )


def corpus_fingerprint(text: str) -> str:
    """A short SHA-256 of ``text``: tells whether two Pythons gave the same
    documentation."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def train_val_split(text: str, val_fraction: float = 0.1) -> tuple[str, str]:
    """The first ``1 - val_fraction`` of ``text`` for training, the rest for
    validation."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    cut = int(len(text) * (1.0 - val_fraction))
    return text[:cut], text[cut:]


def python_docs_prose(min_words: int = 8) -> list[str]:
    """The prose paragraphs of Python's documentation, one string each (the
    masked-language-model corpus of chapter 12).

    Keeps paragraphs that start like a sentence and have at least ``min_words``
    words; drops grammar rules, code examples and the ``****`` lines under
    headings, whose tokens would be trivial to predict.  Whitespace is
    collapsed to single spaces.
    """
    paragraphs = (
        re.sub(r"\s+", " ", p).strip()
        for p in load_python_docs().split("\n\n")
    )
    return [
        p
        for p in paragraphs
        if re.match(r"[A-Z][a-z]", p)
        and len(p.split()) >= min_words
        and not re.search(r"[*=]{3}|>>>|::=", p)
    ]
