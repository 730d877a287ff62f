"""The site's structure: the TOC, the intro's course map, the Colab links."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import course_config  # noqa: E402

_toc_files = course_config.toc_files


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


def test_site_check_serves_every_outside_script_from_a_local_copy():
    import check_site
    import pytest

    if not (check_site.ASSETS / "mathjax").is_dir():
        pytest.skip("the outside scripts are not installed (make setup-browser)")
    for url in check_site.OUTSIDE:
        probe = url + "es5/tex-mml-chtml.js" if url.endswith("/") else url
        path = check_site.local_copy(probe)
        assert path is not None and path.is_file(), f"no local copy of {probe}"
    assert check_site.local_copy("https://cdnjs.cloudflare.com/ajax/libs/d3/7.0.0/d3.min.js") is None  # not mapped
    assert check_site.local_copy("https://cdn.jsdelivr.net/npm/mathjax@3/../../package.json") is None  # stays inside


def test_site_check_finds_broken_links(tmp_path):
    import check_site

    (tmp_path / "book").mkdir()
    page = tmp_path / "book" / "a.html"
    page.write_text("<h1 id='top'>A</h1><p id='here'>x</p>")
    (tmp_path / "index.html").write_text("<p>index</p>")
    links = [
        "#here",
        "a.html#top",
        "../index.html",
        "https://example.org/x",
        "mailto:x@y",
        "#missing",
        "b.html",
        "a.html#nowhere",
    ]
    assert check_site.broken_links(links, page, tmp_path) == sorted(
        ["#missing (no such anchor)", "a.html#nowhere (no such anchor)", "b.html"]
    )


def test_course_map_times_are_measured_from_the_pages():
    """Each chapter's time in the course map is what its page measures (course_config.reading_minutes:
    prose words and shown code lines at the pace book/running.md states), not a guess."""
    intro = (ROOT / "book" / "intro.md").read_text()
    rows = re.findall(r"^\| (\d\d) \| \[[^]]+\]\(([\w.-]+)\.ipynb\) \|.*\| (\d+) min \|$", intro, re.M)
    assert rows, "no chapter rows with a time found in the course map"
    for _, stem, minutes in rows:
        measured = course_config.reading_minutes(ROOT / "book" / f"{stem}.ipynb")
        assert int(minutes) == measured, f"the course map says {minutes} min for {stem}; its page measures {measured}"
    pace = (ROOT / "book" / "running.md").read_text()
    assert f"{course_config.PROSE_WPM} words" in pace and f"{course_config.CODE_LPM} lines" in pace
    total = sum(int(m) for *_, m in rows)
    stated = re.search(r"come to about (\d+) hours of reading", intro)
    assert stated and int(stated.group(1)) == round(total / 60), (
        f"the intro's total reading time should be about {round(total / 60)} hours ({total} min in the map)"
    )


def test_intro_samples_are_printed_by_their_chapters():
    """The intro's "Two of the course's models at work" quotes model outputs: every quoted line is a line that
    chapter 09's or chapter 10's notebook printed, verbatim."""
    import json

    intro = (ROOT / "book" / "intro.md").read_text()
    section = intro.split("## Two of the course's models at work", 1)[1].split("\n## ", 1)[0]
    # a plain ```text block, or a {code-block} text with options (the sample that wraps on a phone)
    blocks = re.findall(r"```(?:text|\{code-block\} text(?:\n:[^\n]*)*\n)\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2, "expected the chapter 09 and chapter 10 samples"
    for block, stem in zip(blocks, ("09_training", "10_gpt_from_scratch"), strict=True):
        nb = json.loads((ROOT / "book" / f"{stem}.ipynb").read_text())
        printed = {
            line.strip()
            for c in nb["cells"]
            if c["cell_type"] == "code"
            for o in c.get("outputs", [])
            for line in "".join(o.get("text", "")).splitlines()
        }
        for line in block.strip().splitlines():
            assert line.strip() in printed, f"the intro quotes {line!r}, which book/{stem}.ipynb does not print"


# ---- the references page and the chapters' citations --------------------------------------------

# "Authors, YEAR", "Authors (YEAR" and, for several authors, "Authors YEAR": the author-year citations
# that a chapter's prose can make.
AUTHOR_YEAR = re.compile(
    r"(?<![\w.])(?:[A-Z][\w'-]+,\s+)*[A-Z][\w'-]+"
    r"(?:(?:\s+(?:and|&)\s+[A-Z][\w'-]+|\s+et\s+al\.)(?:,?\s+|\s+\()|,\s+|\s+\()(?:19|20)\d\d\b"
)
# Years after a name that are not citations.
NOT_CITATIONS = {"Transformer (2017"}  # chapter 01's summary: the model's year


def _chapter_prose() -> dict[str, str]:
    """Each chapter's prose, by chapter number: its markdown cells and figure captions as the source
    writes them, without inline code and formulas."""
    prose = {}
    for source in sorted((ROOT / "lessons_src" / "chapters").glob("[0-9][0-9]_*.py")):
        parts, in_markdown = [], False
        for line in source.read_text(encoding="utf-8").splitlines():
            if line.startswith("# %%"):
                in_markdown = "[markdown]" in line
                parts += re.findall(r'caption="([^"]*)"', line)
            elif in_markdown:
                parts.append(line.removeprefix("#").removeprefix(" "))
        text = "\n".join(parts)
        prose[source.name[:2]] = re.sub(r"`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$", " ", text, flags=re.S)
    return prose


def _references() -> tuple[str, list]:
    import course_site

    text = course_site.REFERENCES.read_text(encoding="utf-8")
    return text, course_site.citation_forms(text)


def _citations(cites: list, text: str) -> list:
    import course_site

    return course_site.find_citations(cites, text)


def test_every_author_year_citation_in_the_chapters_has_a_reference():
    _, cites = _references()
    missing = []
    for chapter, text in _chapter_prose().items():
        found = _citations(cites, text)
        for m in AUTHOR_YEAR.finditer(text):
            if m.group(0) in NOT_CITATIONS:
                continue
            covered = any(c.start() < m.end() and m.start() < c.end() for c, _ in found)
            if not covered:
                missing.append(f"chapter {chapter}: {' '.join(m.group(0).split())!r}")
    assert not missing, "no entry of book/references.md has a cite form for " + "; ".join(missing)


def test_every_reference_is_cited_and_lists_the_chapters_that_cite_it():
    text, cites = _references()
    prose = _chapter_prose()
    entries = dict(re.findall(r"^\(ref-([\w-]+)\)=\n(.*?)(?=^\(ref-|\Z)", text, flags=re.M | re.S))
    assert entries, "book/references.md has no entries"
    cited_by = {ch: {cite.label for _, cite in _citations(cites, t)} for ch, t in prose.items()}
    for label, entry in entries.items():
        citing = {ch for ch, labels in cited_by.items() if label in labels}
        assert citing, f"no chapter cites the reference {label!r} in a form its entry lists"
        listed = set(re.findall(r"\[(\d\d)\]\(\1_[\w]+\.ipynb\)", entry.split("Cited in", 1)[-1]))
        assert citing <= listed, f"{label}: cited in chapters {sorted(citing - listed)}, which its entry does not list"
        for chapter in listed:
            assert chapter in prose, f"{label}: lists chapter {chapter}, which does not exist"


def test_every_reference_links_to_the_work():
    text, _ = _references()
    for label, entry in re.findall(r"^\(ref-([\w-]+)\)=\n(.*?)(?=^\(ref-|\Z)", text, flags=re.M | re.S):
        assert re.search(r"\]\(https?://[^)\s]+\)", entry), f"the reference {label!r} has no http(s) link"


def test_references_are_in_alphabetical_order():
    text, _ = _references()
    # first author's surname, then year
    keys = [
        (a.replace("ü", "u").casefold(), int(y))
        for a, y in re.findall(r"^\(ref-[\w-]+\)=\n([^,(]+).*? \((\d{4})\)", text, flags=re.M)
    ]
    assert keys and keys == sorted(keys), "book/references.md lists its entries out of alphabetical order"


def test_a_cite_form_with_an_apostrophe_matches_the_typographic_one_the_site_prints():
    import course_site

    text = "(ref-x)=\nX. (2023). *A Lecture.* [link](https://example.org)\n\n<!-- cites: Karpathy's lecture -->\n"
    cites = course_site.citation_forms(text)
    for page_text in ("Karpathy's lecture builds", "Karpathy\u2019s lecture builds"):
        found = course_site.find_citations(cites, page_text)
        assert [m.group(0) for m, _ in found] == [page_text[:18]]
    assert not course_site.find_citations(cites, "Karpathys lecture")


def test_every_reference_entry_parses_for_the_chapters_reference_lists():
    import course_site

    text, _ = _references()
    entries = course_site.reference_entries(text)
    labels = re.findall(r"^\(ref-([\w-]+)\)=", text, flags=re.M)
    assert list(entries) == labels
    for e in entries.values():
        assert e.title and re.search(r"\(\d{4}[a-z]?\)", e.before), e
        shown = course_site.chapter_references([e], "references.html")
        links = [r["refuri"] for r in shown.findall(course_site.nodes.reference)]
        assert len(links) >= 2 and all(u.startswith("http") for u in links[1:]), e
        assert not re.search(r"[\[\]*`]|\. \.", shown.astext()), shown.astext()  # no markdown left


def test_a_chapters_reference_list_links_each_work_and_its_entry():
    import course_site

    text = (
        "(ref-x2020)=\nX, A. and Y, B. (2020). *A Title.* Proceedings of *Z* 2020, file `a.py`. "
        "[arXiv:1](https://arxiv.org/abs/1) · [code](https://example.org/c)\\\nCited in chapter 01.\n"
    )
    (entry,) = course_site.reference_entries(text).values()
    assert (entry.before, entry.title) == ("X, A. and Y, B. (2020).", "A Title.")
    section = course_site.chapter_references([entry], "references.html")
    assert section.astext() == (
        "References\n\nX, A. and Y, B. (2020). A Title. Proceedings of Z 2020, file a.py. arXiv:1 · code"
    )
    assert [n.astext() for n in section.findall(course_site.nodes.literal)] == ["a.py"]
    refs = [r["refuri"] for r in section.findall(course_site.nodes.reference)]
    assert refs == ["references.html#ref-x2020", "https://arxiv.org/abs/1", "https://example.org/c"]


def test_figure_numbers_in_the_prose_link_to_their_figures():
    import course_site

    page = (
        '<figure class="align-default" id="id7"><img alt="x" src="a.png">'
        '<figcaption><p><span class="caption-number">Fig. 4.2 </span>A figure.</p></figcaption></figure>'
        "<p>As Fig. 4.2 shows, and Fig.\n7.6 too, but not Fig. 9.9.</p>"
        "<p>In <code>Fig. 4.2</code> and <a href='x'>Fig. 4.2</a> nothing changes.</p>"
    )
    ids = course_site.figure_ids(page)
    assert ids == {"4.2": "id7"}
    linked = course_site.link_figures(page, {"4.2": "#id7", "7.6": "07_x.html#id3"})
    assert '<a class="reference internal" href="#id7">Fig.&#160;4.2</a> shows' in linked
    assert '<a class="reference internal" href="07_x.html#id3">Fig.&#160;7.6</a> too' in linked  # across a line
    assert "not Fig. 9.9." in linked  # no such figure: left as text
    assert linked.count('href="#id7"') == 1  # not in the caption, the code or the existing link


def test_a_chapter_numbers_its_equations_in_order():
    import course_site

    page = (
        '<div class="math" id="equation-eq-05-1"><span class="eqno">(12)</span>a</div>'
        '<div class="math" id="equation-eq-05-2"><span class="eqno">(13)</span>b</div>'
        '<p>By <a class="reference internal" href="#equation-eq-05-2"><span class="std">(13)</span></a>.</p>'
    )
    out = course_site._chapter_equations(page, Path("05_multi_head_attention.html"))
    assert '<span class="eqno">(5.1)</span>' in out and '<span class="eqno">(5.2)</span>' in out
    assert '<span class="std">(5.2)</span></a>' in out
    assert course_site._chapter_equations(page, Path("references.html")) == page


def test_a_chapter_numbers_its_result_tables():
    import course_site

    page = (
        '<table class="course-table"><caption>dev accuracy by k</caption><thead></thead></table>'
        '<table class="course-table"><thead></thead></table>'
    )
    out = course_site._chapter_tables(page, Path("12_hugging_face_bert.html"))
    assert '<span class="caption-number">Table 12.1 </span><span class="caption-text">Dev accuracy by k' in out
    assert out.count("Table 12.") == 1  # the table without a caption gets no number
    assert course_site._chapter_tables(page, Path("intro.html")) == page


def test_a_table_caption_that_starts_with_a_name_keeps_its_case():
    import course_site

    page = '<table class="course-table"><caption>dim=4, trained twice</caption></table>'
    out = course_site._chapter_tables(page, Path("02_embeddings.html"))
    assert '<span class="caption-text">dim=4, trained twice</span>' in out


def test_a_name_is_not_cited_inside_a_longer_name():
    import course_site

    text = (
        "(ref-meta2024)=\nMeta (2024). *The Llama 3 Herd of Models.* [x](https://example.org)\n"
        "<!-- cites: Llama 3 -->\n"
    )
    cites = course_site.citation_forms(text)
    assert course_site.find_citations(cites, "Llama 3 and Llama 3.1")[0][0].group(0) == "Llama 3"
    assert len(course_site.find_citations(cites, "Llama 3.1 only")) == 0
