"""A small Sphinx extension for the course site (loaded from _config.yml: sphinx.local_extensions).

* Jupyter Book 1 registers sphinx-thebe's and sphinx-togglebutton's inline scripts twice on every
  page; the second ``const THEBE_JS_URL`` then throws "Identifier has already been declared" in
  the browser.  This drops duplicate script entries (same file or same inline body) before a page
  is written, editing the page's script list in place (Sphinx's MathJax step adds its script to
  that same list later: a new list would lose it, and every formula would stay raw LaTeX).
* Adds the course's stylesheet and script (``tools/course_static/``): long code names wrap and
  wide tables scroll in their own box on a phone; bertviz's model view fits the column.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STATIC = Path(__file__).resolve().parent / "course_static"


def _dedupe_scripts(
    app: Any, pagename: str, templatename: str, context: dict, doctree: Any
) -> None:  # Sphinx event signature
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple] = set()
    unique = []
    for js in scripts:
        key = (getattr(js, "filename", None) or "", tuple(sorted(getattr(js, "attributes", {}).items())))
        if key in seen:
            continue
        seen.add(key)
        unique.append(js)
    scripts[:] = unique


def _add_static(app: Any) -> None:
    app.config.html_static_path.append(str(STATIC))


def setup(app: Any) -> dict:
    app.connect("builder-inited", _add_static)
    app.add_css_file("course.css")
    app.add_js_file("course.js")
    app.connect("html-page-context", _dedupe_scripts, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
