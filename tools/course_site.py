"""A small Sphinx extension for the course site (loaded from _config.yml: sphinx.local_extensions).

* Jupyter Book 1 registers sphinx-thebe's and sphinx-togglebutton's inline scripts twice on every
  page; the second ``const THEBE_JS_URL`` then throws "Identifier has already been declared" in
  the browser.  This drops duplicate script entries (same file or same inline body) before a page
  is written, editing the page's script list in place (Sphinx's MathJax step adds its script to
  that same list later: a new list would lose it, and every formula would stay raw LaTeX).
* An exercise's solution is folded whole: its code, its output and the prose that explains the
  answer.  A markdown cell tagged ``solution`` (the explanation) is rendered inside a container
  that is then moved into the toggle of the solution code cell before it, so that the page shows
  only the exercise's question until the reader opens "Show the solution".
* What a page says about itself: the site's address (``html_baseurl``, for Open Graph links) is
  derived from the repository URL in ``_config.yml``; the home page's ``<title>`` is the course's
  name once, not "name — name"; each page carries one viewport tag (the themes wrote three); and
  the site's root ``index.html``, a bare redirect, gets the home page's title, description and
  Open Graph tags, so that a link to the site shows what it is.
* Adds the course's stylesheet and script (``tools/course_static/``): long code names wrap and
  wide tables scroll in their own box on a phone; bertviz's model view fits the column.
* A chapter's citations ("Vaswani et al., 2017") link to their entries in ``book/references.md``,
  which lists, next to each entry, the forms in which the chapters cite it (``LinkCitations``), and
  the chapter ends with a "References" section listing the works it cites, in the references
  page's alphabetical order, each with its links (``chapter_references``).
"""

from __future__ import annotations

import html
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docutils import nodes
from myst_nb.sphinx_ import SphinxNbRenderer
from sphinx import addnodes
from sphinx.search import IndexBuilder
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinxext.opengraph._description_parser import DescriptionParser

logger = logging.getLogger(__name__)
_original_render_markdown_cell = SphinxNbRenderer.render_nb_cell_markdown
_original_visit = DescriptionParser.dispatch_visit

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


SOLUTION_TAG = "solution"
EXPLANATION = "solution-explanation"


def _render_markdown_cell(self: Any, token: Any) -> None:
    """MyST-NB's markdown cell rendering, with a solution's explanation wrapped in a container."""
    tags = token.meta.get("metadata", {}).get("tags", [])
    if SOLUTION_TAG not in tags:
        _original_render_markdown_cell(self, token)
        return
    box = nodes.container(classes=[EXPLANATION])
    with self.current_node_context(box, append=True):
        _original_render_markdown_cell(self, token)


def _is_solution_cell(node: nodes.Node) -> bool:
    return (
        isinstance(node, nodes.container)
        and node.get("nb_element") == "cell_code"
        and f"tag_{SOLUTION_TAG}" in node.get("classes", [])
    )


class FoldSolutions(SphinxPostTransform):
    """Move each solution's explanation (and any further solution cell right after it) into the
    first solution cell, so that one toggle folds the whole answer.  Runs before MyST-NB's
    ``HideInputCells`` (priority 199), which wraps a cell's children in the toggle."""

    default_priority = 150
    formats = ("html",)

    def run(self, **kwargs: Any) -> None:
        for box in list(self.document.findall(nodes.container)):
            if EXPLANATION not in box.get("classes", []) or box.parent is None:
                continue
            parent = box.parent
            before = parent.index(box) - 1
            while before >= 0 and not _is_solution_cell(parent[before]):
                prev = parent[before]
                if not (isinstance(prev, nodes.container) and EXPLANATION in prev.get("classes", [])):
                    break
                before -= 1
            if before < 0 or not _is_solution_cell(parent[before]):
                logger.warning(
                    "a markdown cell tagged 'solution' must follow a solution code cell "
                    "(it is the explanation of that solution)",
                    location=box,
                )
                continue
            parent.remove(box)
            parent[before].append(box)


REFERENCES = Path(__file__).resolve().parents[1] / "book" / "references.md"
REFERENCES_DOC = "book/references"
CHAPTER_DOC = re.compile(r"book/\d\d_")


@dataclass(frozen=True)
class Cite:
    """One way a chapter cites an entry of the references page."""

    pattern: re.Pattern
    label: str  # the entry's target, ``ref-<label>``
    title: str  # the work's title (the link's tooltip)
    then: str = ""  # text that must follow the match (a title's start), to tell apart equal author-years
    once: bool = False  # a name without a year ("GPT-3"): linked at its first occurrence on a page


def _words(text: str) -> str:
    """A regex for ``text`` in which any run of whitespace matches any other (prose wraps lines),
    and a straight apostrophe the typographic one the site prints."""
    return r"\s+".join(re.escape(w).replace("'", "['’]") for w in text.split())


def citation_forms(text: str) -> list[Cite]:
    """The cite forms of a references page: after each entry ``(ref-LABEL)=`` a comment
    ``<!-- cites: FORM | FORM -->`` gives the forms in which the chapters cite it.

    * ``Authors, YEAR`` matches "Authors, YEAR", "Authors YEAR" and "Authors (YEAR)", and links the
      authors alone in "Authors (YEAR, *Title*)".  Authors of several people ("X et al.", "X and Y",
      "X & Y") that belong to one entry only are also linked without their year ("Xiong et al. predict").
    * ``Authors, YEAR + Title start``: only where the text goes on with that title (two works that
      the chapters both cite as "Liu et al., 2020").
    * Anything else (``GPT-3``, ``BERT paper``) is a name, linked at its first occurrence on a page.
    """
    cites: list[Cite] = []
    labels_of: dict[str, set[str]] = defaultdict(set)
    titles: dict[str, str] = {}
    for block in re.split(r"^(?=\(ref-)", text, flags=re.M)[1:]:
        label = re.match(r"\(ref-([\w-]+)\)=", block).group(1)
        forms = re.search(r"<!-- cites: (.+?) -->", block)
        title = re.search(r"\*(.+?)\*", block)
        if forms is None or title is None:
            raise ValueError(f"references entry {label!r} needs a *title* and a <!-- cites: ... --> comment")
        titles[label] = title.group(1).rstrip(".")
        for form in forms.group(1).split(" | "):
            cited, _, then = (part.strip() for part in form.partition(" + "))
            m = re.fullmatch(r"(.+?),? ((?:19|20)\d\d[a-z]?)", cited)
            if m is None:
                # not inside a longer name: "Llama 3" is not cited in "Llama 3.1"
                cites.append(
                    Cite(re.compile(rf"(?<!\w){_words(cited)}(?![\w-]|\.\d)"), label, titles[label], once=True)
                )
                continue
            authors, year = m.groups()
            who = _words(authors)
            year_after = rf"(?:,?\s+{year}\b|\s+\({year}\)|(?=\s+\({year}\b))"
            cites.append(Cite(re.compile(rf"(?<!\w){who}{year_after}"), label, titles[label], then=then))
            if re.search(r" et al\.| and | & ", authors):
                labels_of[authors].add(label)
    for authors, labels in labels_of.items():
        if len(labels) == 1:
            (label,) = labels
            cites.append(Cite(re.compile(rf"(?<!\w){_words(authors)}(?!\w)"), label, titles[label]))
    return cites


def find_citations(
    cites: list[Cite], text: str, rest: str = "", linked: set[str] | None = None
) -> list[tuple[re.Match, Cite]]:
    """Every citation in ``text``, left to right, as ``(match, cite)`` pairs.  At one place the longest
    match wins, and a form that needs a title start before one that does not; ``rest`` is the text
    that follows ``text`` (the rest of its paragraph); ``linked``: the names already linked on the page."""
    linked = set() if linked is None else linked
    found: list[tuple[re.Match, Cite]] = []
    pos = 0
    while True:
        best = None
        for cite in cites:
            if cite.once and cite.label in linked:
                continue
            for m in cite.pattern.finditer(text, pos):
                if cite.then and not re.match(r"[\s,(*]*" + _words(cite.then), text[m.end() :] + rest):
                    continue
                key = (m.start(), not cite.then, m.start() - m.end())
                if best is None or key < best[0]:
                    best = (key, m, cite)
                break
        if best is None:
            return found
        _, m, cite = best
        if cite.once:
            linked.add(cite.label)
        found.append((m, cite))
        pos = m.end()


@dataclass(frozen=True)
class Entry:
    """One entry of the references page, as a chapter's reference list shows it."""

    label: str
    before: str  # "Vaswani, A., Shazeer, N., ... (2017)."
    title: str
    rest: str  # the rest of the entry's line, in markdown: where it appeared, its links


def reference_entries(text: str) -> dict[str, Entry]:
    """The entries of a references page (``(ref-LABEL)=`` then one line: authors (year). *Title.*
    venue. [name](address) · [name](address)), by label."""
    entries = {}
    for label, body in re.findall(r"^\(ref-([\w-]+)\)=\n(.+?)$", text, flags=re.M):
        m = re.match(r"(.*?)\*(.+?)\*(.*)", body.rstrip("\\"))
        if m is None:
            raise ValueError(f"references entry {label!r} has no *title*")
        before, title, rest = m.groups()
        entries[label] = Entry(label, before.strip(), title.strip(), " ".join(rest.split()))
    return entries


_INLINE = re.compile(r"\[([^]]+)\]\((https?://[^)\s]+)\)|\*([^*]+)\*|`([^`]+)`")


def _inline(text: str) -> list[nodes.Node]:
    """A line of the references page as nodes: its links, *emphasis* and `code`, and the text between."""
    out: list[nodes.Node] = []
    done = 0
    for m in _INLINE.finditer(text):
        if m.start() > done:
            out.append(nodes.Text(text[done : m.start()]))
        if m.group(1):
            out.append(nodes.reference("", m.group(1), refuri=m.group(2)))
        elif m.group(3):
            out.append(nodes.emphasis("", m.group(3)))
        else:
            out.append(nodes.literal(m.group(4), m.group(4)))
        done = m.end()
    if done < len(text):
        out.append(nodes.Text(text[done:]))
    return out


def chapter_references(entries: list[Entry], page: str) -> nodes.section:
    """The "References" section that closes a chapter: each work it cites, its title linking to the
    work's entry on the references page (``page``), then where it appeared and its own links."""
    section = nodes.section(ids=["references-cited"], names=["references cited"])
    section += nodes.title("", "References")
    items = nodes.bullet_list()
    for e in entries:
        para = nodes.paragraph()
        para += nodes.Text(e.before + " ")
        title = nodes.reference("", "", internal=True, refuri=f"{page}#ref-{e.label}")
        title += nodes.emphasis("", e.title)
        para += title
        if e.rest:
            para += nodes.Text(" ")
            para.extend(_inline(e.rest))
        items += nodes.list_item("", para)
    section += items
    return section


class LinkCitations(SphinxPostTransform):
    """On a chapter's page, make each citation in its prose ("Vaswani et al. (2017)", "Müller, Kornblith
    and Hinton, 2019", "the BERT paper") a link to the work's entry on the references page.  Text in
    code, formulas, titles and existing links is left alone."""

    default_priority = 800
    formats = ("html",)
    SKIP = (nodes.literal, nodes.literal_block, nodes.math, nodes.math_block, nodes.reference, nodes.raw, nodes.title)

    def run(self, **kwargs: Any) -> None:
        docname = self.env.docname
        if not CHAPTER_DOC.match(docname) or not REFERENCES.exists():
            return
        text = REFERENCES.read_text(encoding="utf-8")
        cites = citation_forms(text)
        page = self.app.builder.get_relative_uri(docname, REFERENCES_DOC)
        linked_once: set[str] = set()
        cited: list[str] = []  # the labels of the works the page cites
        for parent in list(self.document.findall(nodes.Element)):
            if not self._in_prose(parent):
                continue
            # A line break in the source is a Text node of its own: join each run of Text nodes.
            i = 0
            while i < len(parent.children):
                j = i
                while j < len(parent.children) and isinstance(parent[j], nodes.Text):
                    j += 1
                if j == i:
                    i += 1
                    continue
                source = "".join(str(t) for t in parent.children[i:j])
                rest = "".join(sibling.astext() for sibling in parent.children[j:])
                found = find_citations(cites, source, rest, linked_once)
                if not found:
                    i = j
                    continue
                pieces: list[nodes.Node] = []
                done = 0
                for m, cite in found:
                    if cite.label not in cited:
                        cited.append(cite.label)
                    if m.start() > done:
                        pieces.append(nodes.Text(source[done : m.start()]))
                    ref = nodes.reference("", "", internal=True, refuri=f"{page}#ref-{cite.label}", reftitle=cite.title)
                    ref += nodes.Text(m.group(0))
                    pieces.append(ref)
                    done = m.end()
                if done < len(source):
                    pieces.append(nodes.Text(source[done:]))
                parent[i:j] = pieces
                i += len(pieces)
        sections = [n for n in self.document.children if isinstance(n, nodes.section)]
        if cited and sections:
            entries = reference_entries(text)  # in the references page's (alphabetical) order
            sections[-1] += chapter_references([e for label, e in entries.items() if label in cited], page)
            self._list_in_page_toc(docname)

    def _list_in_page_toc(self, docname: str) -> None:
        """The page's own table of contents ("On this page") lists the References section too: the
        section is added after Sphinx collected the page's headings, so its entry is added here."""
        toc = self.env.tocs.get(docname)
        top = next(iter(toc.findall(nodes.list_item)), None) if toc is not None else None
        if top is None or any(r.get("anchorname") == "#references-cited" for r in toc.findall(nodes.reference)):
            return
        inner = next((c for c in top.children if isinstance(c, nodes.bullet_list)), None)
        if inner is None:
            inner = nodes.bullet_list()
            top += inner
        ref = nodes.reference("", "", internal=True, refuri=docname, anchorname="#references-cited")
        ref += nodes.Text("References")
        inner += nodes.list_item("", addnodes.compact_paragraph("", "", ref))

    def _in_prose(self, element: nodes.Element) -> bool:
        """Whether the element is (inside) a paragraph or a caption, and not inside code, a formula,
        a title or a link."""
        node: nodes.Node | None = element
        prose = False
        while node is not None:
            if isinstance(node, self.SKIP):
                return False
            prose = prose or isinstance(node, (nodes.paragraph, nodes.caption))
            node = node.parent
        return prose


def _note_references(app: Any, doctree: Any) -> None:
    """A chapter's links depend on the references page: rebuild the chapter when it changes."""
    if CHAPTER_DOC.match(app.env.docname):
        app.env.note_dependency(str(REFERENCES))


def _visit_keeping_spaces(self: Any, node: nodes.Node) -> None:
    """sphinxext-opengraph strips each piece of text before it joins them, so a line break
    before a parenthesis ("table\n(chapter 02)") vanished: "table(chapter 02)"."""
    if (
        isinstance(node, nodes.Text)
        and node.astext()[:1].isspace()
        and self.description
        and not self.description[-1].isspace()
    ):
        self.description += " "
    _original_visit(self, node)


def _site_address(app: Any, config: Any) -> None:
    """``html_baseurl`` (the published site: GitHub Pages of the repository), unless set."""
    if not config.html_baseurl:
        url = (config.html_theme_options or {}).get("repository_url", "")
        m = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+?)/?", url)
        if m:
            config.html_baseurl = f"https://{m.group(1).lower()}.github.io/{m.group(2)}/"
    if not getattr(config, "ogp_site_url", None):
        config.ogp_site_url = config.html_baseurl


_VIEWPORT = re.compile(r"\s*<meta name=\"viewport\"[^>]*>")


def _single_title(text: str) -> str:
    """``<title>X — X</title>`` (the home page, whose title is the site's name) -> ``X``."""
    return re.sub(r"<title>(.+?) &#8212; \1</title>", r"<title>\1</title>", text, count=1)


def _chapter_of(page: Path) -> str | None:
    """A chapter page's number as a reader writes it ("5" for 05_...), or None for another page."""
    m = re.match(r"(\d\d)_", page.name)
    return str(int(m.group(1))) if m else None


def _chapter_figures(text: str, page: Path) -> str:
    """ "Fig. 3" on chapter 05's page -> "Fig. 5.3": a figure number a reader can cite across the
    book."""
    if page.stem == "intro":  # the front page's one picture needs no number
        return re.sub(r'<span class="caption-number">Fig\. [\d.]+ </span>', "", text)
    chapter = _chapter_of(page) or ("A" if page.stem == "performance" else None)  # the appendix: "Fig. A.1"
    if chapter is None:
        return text
    count = iter(range(1, 10_000))
    return re.sub(
        r'<span class="caption-number">Fig\. [\d.]+ </span>',
        lambda f: f'<span class="caption-number">Fig. {chapter}.{next(count)} </span>',
        text,
    )


def _chapter_equations(text: str, page: Path) -> str:
    """A chapter's equations numbered in order on its page, like its figures: the third on chapter
    05's page is "(5.3)" (Sphinx numbers them across the whole book); a link to one reads the same."""
    chapter = _chapter_of(page)
    if chapter is None:
        return text
    number: dict[str, str] = {}  # Sphinx's number -> the page's

    def renumber(eq: re.Match) -> str:
        number[eq.group(2)] = f"{chapter}.{len(number) + 1}"
        return f"{eq.group(1)}({number[eq.group(2)]})"

    text = re.sub(r'(<span class="eqno">)\((\d+)\)', renumber, text)
    return re.sub(
        r'(<a class="reference internal" href="#equation-[^"]+">(?:<span[^>]*>)?)\((\d+)\)',
        lambda ref: f"{ref.group(1)}({number.get(ref.group(2), ref.group(2))})",
        text,
    )


def _chapter_tables(text: str, page: Path) -> str:
    """A chapter's captioned result tables (``transformer_course.utils.Table``) numbered in order, like
    its figures: "Table 5.2", then the caption, from a capital letter where it starts with a word."""
    chapter = _chapter_of(page)
    if chapter is None:
        return text
    count = iter(range(1, 10_000))

    def number(t: re.Match) -> str:
        if not t.group(2):  # a table the prose introduces, without a caption of its own
            return t.group(0)
        label = f'<span class="caption-number">Table {chapter}.{next(count)} </span>'
        caption = t.group(2)
        if re.match(r"[a-z]+(?:[\s,;:]|$)", caption):  # a word, not a name such as "dim=4"
            caption = caption[:1].upper() + caption[1:]
        return f'{t.group(1)}<caption>{label}<span class="caption-text">{caption}</span></caption>'

    return re.sub(r'(<table class="course-table">)(?:<caption>(.*?)</caption>)?', number, text)


def figure_ids(text: str) -> dict[str, str]:
    """A page's figures, as numbered on it ("10.3"), to their element ids: each numbered caption
    closes the last ``<figure ... id=...>`` opened before it."""
    ids: dict[str, str] = {}
    last_id = None
    for m in re.finditer(r'<figure\b[^>]*\bid="([^"]+)"|<span class="caption-number">Fig\. ([\w.]+) </span>', text):
        if m.group(1):
            last_id = m.group(1)
        elif last_id is not None:
            ids[m.group(2)] = last_id
            last_id = None
    return ids


_NO_LINKS = {"a", "code", "pre", "figcaption", "script", "style", "title", "head", "h1", "h2", "h3", "h4"}


def link_figures(text: str, targets: dict[str, str]) -> str:
    """Make each "Fig. N.M" of a page's prose (paragraphs and list items, not captions, code, titles
    or existing links) a link to that figure: ``targets`` maps "N.M" to an address ("#id2" on the
    same page, "10_gpt_from_scratch.html#id4" on another)."""
    parts = re.split(r"(<[^>]+>)", text)
    open_tags: list[str] = []
    prose = 0
    for i, part in enumerate(parts):
        if part.startswith("<"):
            m = re.match(r"<(/?)([a-zA-Z0-9]+)", part)
            if m is None or part.endswith("/>"):
                continue
            closing, tag = m.group(1) == "/", m.group(2).lower()
            if tag in ("p", "li"):
                prose += -1 if closing else 1
            elif tag in _NO_LINKS:
                if closing and tag in open_tags:
                    open_tags.remove(tag)
                elif not closing:
                    open_tags.append(tag)
            continue
        if prose > 0 and not open_tags and "Fig." in part:
            parts[i] = re.sub(
                r"\bFig\.\s+(\d+\.\d+|A\.\d+)\b",  # a line of the source may end after "Fig."
                lambda f: (
                    f'<a class="reference internal" href="{targets[f.group(1)]}">Fig.&#160;{f.group(1)}</a>'
                    if f.group(1) in targets
                    else f.group(0)
                ),
                part,
            )
    return "".join(parts)


def _one_viewport(text: str) -> str:
    """Keep the first viewport tag of a page, drop the others."""
    seen = False

    def keep_first(m: re.Match) -> str:
        nonlocal seen
        if seen:
            return ""
        seen = True
        return m.group(0)

    return _VIEWPORT.sub(keep_first, text)


def _root_page(out: Path, root_doc: str) -> str | None:
    """The site's ``index.html``: a redirect to the home page, with its head (title, description,
    Open Graph tags), so that a shared link to the site shows the course."""
    home = out / f"{root_doc}.html"
    if not home.exists():
        return None
    head = home.read_text(encoding="utf-8")
    keep = [
        m.group(0)
        for m in re.finditer(
            r'<title>.*?</title>|<meta (?:name|property)="(?:description|og:[^"]+|twitter:[^"]+)"[^>]*>', head
        )
    ]
    target = f"{root_doc}.html"
    canonical = re.search(r'<link rel="canonical" href="([^"]+)"', head)
    canonical_url = canonical.group(1) if canonical else target
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8" />\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1" />\n'
        + "\n".join(keep)
        + f'\n<link rel="canonical" href="{html.escape(canonical_url)}" />\n'
        + f'<meta http-equiv="Refresh" content="0; url={html.escape(target)}" />\n'
        + f'</head>\n<body><p><a href="{html.escape(target)}">Go to the course</a></p></body>\n</html>\n'
    )


def _finish_pages(app: Any, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    pages = {}
    for page in out.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        fixed = _chapter_tables(
            _chapter_equations(_chapter_figures(_single_title(_one_viewport(text)), page), page), page
        )
        pages[page] = (text, fixed)
    # every "Fig. N.M" in the prose links to its figure, on the same page or another chapter's
    where = {num: (page, fig_id) for page, (_, fixed) in pages.items() for num, fig_id in figure_ids(fixed).items()}
    for page, (text, fixed) in pages.items():
        targets = {
            num: (f"#{fig_id}" if there == page else f"{os.path.relpath(there, page.parent)}#{fig_id}")
            for num, (there, fig_id) in where.items()
        }
        fixed = link_figures(fixed, targets)
        if fixed != text:
            page.write_text(fixed, encoding="utf-8")
    # Sphinx 7.4 leaves a static file alone once the output has one: an incremental build would
    # keep an old stylesheet.  The course's own are always copied afresh.
    for asset in STATIC.iterdir():
        (out / "_static" / asset.name).write_bytes(asset.read_bytes())
    index = _root_page(out, app.config.root_doc)
    if index is not None:
        (out / "index.html").write_text(index, encoding="utf-8")


def _add_static(app: Any) -> None:
    app.config.html_static_path.append(str(STATIC))


_collect_words = IndexBuilder._word_collector


def _in_cell_output(node: nodes.Node) -> bool:
    parent = node.parent
    while parent is not None:
        if "cell_output" in parent.get("classes", ()):
            return True
        parent = parent.parent
    return False


def _prose_words(self: IndexBuilder, doctree: nodes.document) -> Any:
    """Search indexes the pages' prose, titles and inline code, not their code cells and printed
    outputs (code blocks, and HTML such as a displayed listing): a search for "layer norm" should
    find the chapter about it, not every cell that calls ``.norm()``."""
    doctree = doctree.deepcopy()
    code = list(doctree.findall(nodes.literal_block))
    code += [raw for raw in doctree.findall(nodes.raw) if _in_cell_output(raw)]
    for node in code:
        node.parent.remove(node)
    return _collect_words(self, doctree)


def setup(app: Any) -> dict:
    IndexBuilder._word_collector = _prose_words  # type: ignore[method-assign]
    SphinxNbRenderer.render_nb_cell_markdown = _render_markdown_cell  # type: ignore[method-assign]
    DescriptionParser.dispatch_visit = _visit_keeping_spaces  # type: ignore[method-assign]
    app.add_post_transform(FoldSolutions)
    app.add_post_transform(LinkCitations)
    app.connect("doctree-read", _note_references)
    app.connect("config-inited", _site_address)
    # after sphinx-external-toc has written its redirect (priority 500)
    app.connect("build-finished", _finish_pages, priority=900)
    app.connect("builder-inited", _add_static)
    app.add_css_file("course.css")
    app.add_js_file("course.js")
    app.connect("html-page-context", _dedupe_scripts, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
