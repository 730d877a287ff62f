"""A small Sphinx extension for the course site (loaded from _config.yml: sphinx.local_extensions).

Jupyter Book 1 registers sphinx-thebe's and sphinx-togglebutton's inline scripts twice on every
page; the second ``const THEBE_JS_URL`` then throws "Identifier has already been declared" in
the browser.  This drops duplicate script entries (same file or same inline body) before a page is written.
"""

from __future__ import annotations

from typing import Any


def _dedupe_scripts(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:  # noqa: ARG001
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
    context["script_files"] = unique


def setup(app: Any) -> dict:
    app.connect("html-page-context", _dedupe_scripts, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
