"""The site's structure: the TOC, the intro's course map, the Colab links."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import course_config  # noqa: E402


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return files


def test_every_toc_entry_exists():
    for f in _toc_files():
        assert any((ROOT / f"{f}{ext}").exists() for ext in (".md", ".ipynb")), f"_toc.yml lists {f}, which is missing"


def test_every_chapter_is_in_the_toc():
    listed = set(_toc_files())
    for nb in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"):
        assert f"book/{nb.stem}" in listed, f"book/{nb.name} is not in _toc.yml"


def test_intro_course_map_links_every_chapter():
    intro = (ROOT / "book" / "intro.md").read_text()
    linked = set(re.findall(r"\]\(([\w.-]+)\.(?:ipynb|md)\)", intro))
    for f in _toc_files()[1:]:
        assert Path(f).name in linked, f"the course map in book/intro.md does not link {f}"


def test_colab_links_point_at_book_notebooks():
    url = course_config.colab_url("01_why_attention.ipynb")
    assert re.fullmatch(
        r"https://colab\.research\.google\.com/github/[^/]+/[^/]+/blob/main/book/01_why_attention\.ipynb", url
    )


def test_config_keeps_stored_outputs_and_requirejs():
    cfg = course_config.load()
    assert cfg["execute"]["execute_notebooks"] == "off"
    assert cfg["only_build_toc_files"] is True
    assert any("require" in js for js in cfg["sphinx"]["config"]["html_js_files"])
    assert cfg["launch_buttons"]["colab_url"] == "https://colab.research.google.com"


def test_site_check_tells_offline_echoes_from_real_javascript_errors():
    import check_site

    base = "http://127.0.0.1:8000"
    require_blocked = ("https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.4/require.min.js - "
                       "Failed to load resource: net::ERR_NAME_NOT_RESOLVED")
    echo = f"{base}/book/05_multi_head_attention.html 1013:0 Uncaught ReferenceError: require is not defined"
    own = f"{base}/book/05_multi_head_attention.html 20:3 Uncaught TypeError: x is undefined"
    assert check_site.javascript_errors([require_blocked, echo], base) == []
    assert check_site.javascript_errors([echo], base) == [echo]  # require.js was not blocked: a real error
    assert check_site.javascript_errors([require_blocked, own], base) == [own]
