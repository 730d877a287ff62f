"""Open every page of the built site in headless Chromium and check what a reader would see.

    python tools/check_site.py              # after `jupyter-book build` (make check-site does both)
    python tools/check_site.py --self-test  # only prove that each check catches its fault

The browser sees a page **as an online reader does**.  The scripts the pages load from CDNs
(MathJax, require.js, d3, jQuery) are served from local copies installed at pinned versions
from npm (``tools/site_assets``, ``make setup-browser``): every request to another host goes
through a small local HTTPS proxy (``OUTSIDE`` maps each address to its copy); nothing leaves
this machine, and a request for an outside address without a local copy is itself a failure.

Each page of ``_toc.yml`` is opened at 1280 px (desktop) and at 390 px (a phone, emulated as a
mobile device) and fails the check when:

* a formula is left untypeset (a math node without MathJax's rendered container, or raw LaTeX
  such as ``\\(`` or ``\\sqrt`` in the page's text, the contents sidebar included);
* a bertviz output draws nothing (no SVG, or none of the sentence's tokens as text), or its
  model view does not show every layer x head;
* there is a JavaScript error, an image that did not load, or a link inside the site whose page
  or anchor does not exist;
* at 390 px the page scrolls sideways (document wider than the viewport): wide tables and
  outputs must scroll inside their own box.

Before the real pages, ``self_test()`` builds one small page per fault and checks that each is
caught (and that a clean page passes), so a check that can no longer fail is noticed at once.
Full-page screenshots of every page at both widths go to ``_build/screenshots/`` (a CI artefact).
"""

from __future__ import annotations

import argparse
import functools
import html.parser
import http.server
import json
import mimetypes
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course_config

ROOT = course_config.ROOT
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
ASSETS = ROOT / "tools" / "site_assets" / "node_modules"

# Every outside address a page loads -> its local copy under ASSETS (a prefix ending in "/" maps a
# folder).  The versions are pinned in tools/site_assets/package.json.
OUTSIDE = {
    "https://cdn.jsdelivr.net/npm/mathjax@3/": "mathjax/",
    "https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.4/require.min.js": "requirejs-2.3.4/require.js",
    "https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js": "requirejs-2.3.6/require.js",
    "https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min.js": "d3/dist/d3.min.js",
    # bertviz asks for jQuery 2.0.0, which npm does not have; 2.1.0 (same API) stands in.
    "https://ajax.googleapis.com/ajax/libs/jquery/2.0.0/jquery.min.js": "jquery/dist/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/jquery/2.0.0/jquery.min.js": "jquery/dist/jquery.min.js",
}

DESKTOP = (1280, 900)
PHONE = (390, 844)
TILE = 4000  # px: a page is captured in tiles this tall, top to bottom, so that every pixel is seen

CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--ignore-certificate-errors",
    "--force-color-profile=srgb",
]


# ---------------------------------------------------------------------------------------------
# The browser and the outside scripts
# ---------------------------------------------------------------------------------------------


def find_chromium() -> tuple[str, str]:
    browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    driver = shutil.which("chromedriver")
    if not (browser and driver):
        raise SystemExit(
            "Chromium or chromedriver is missing: run `make setup-browser` "
            "(installs Debian's chromium and chromium-driver, and the pages' outside scripts)"
        )
    return browser, driver


def local_copy(url: str) -> Path | None:
    """The local file that stands in for an outside ``url``, or None when there is none."""
    url = url.split("#")[0].split("?")[0]
    for prefix, rel in OUTSIDE.items():
        if prefix.endswith("/") and url.startswith(prefix):
            path = (ASSETS / rel / url[len(prefix) :]).resolve()
            if ASSETS.resolve() in path.parents and path.is_file():
                return path
        elif url == prefix or url == prefix.removesuffix(".js"):  # require.js asks without ".js"
            return ASSETS / rel
    return None


class OutsideProxy:
    """An HTTP(S) proxy on 127.0.0.1 that answers every outside request from ``local_copy``.

    HTTPS requests arrive as ``CONNECT host:443``; the proxy ends the TLS itself with a
    throw-away self-signed certificate (Chromium runs with --ignore-certificate-errors) and
    answers the request inside.  Nothing is ever forwarded; unknown addresses get a 404 and are
    remembered in ``missing``.
    """

    def __init__(self) -> None:
        self.missing: set[str] = set()
        self.served: set[str] = set()
        self._tmp = tempfile.mkdtemp(prefix="site-proxy-")
        cert, key = f"{self._tmp}/cert.pem", f"{self._tmp}/key.pem"
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=course-site-check",
                "-keyout",
                key,
                "-out",
                cert,
            ],
            check=True,
            capture_output=True,
        )
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(cert, key)
        self.tls.set_alpn_protocols(["http/1.1"])
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            tunnel_host: str | None = None

            def log_message(self, *args: object) -> None:
                pass

            def do_CONNECT(self) -> None:  # http.server's naming
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                try:
                    self.connection = proxy.tls.wrap_socket(self.connection, server_side=True)
                except (ssl.SSLError, OSError):
                    self.close_connection = True
                    return
                self.tunnel_host = self.path.split(":")[0]
                self.rfile = self.connection.makefile("rb", self.rbufsize)
                self.wfile = self.connection.makefile("wb", self.wbufsize)
                self.close_connection = False
                while not self.close_connection:
                    self.handle_one_request()

            def do_GET(self) -> None:  # http.server's naming
                url = f"https://{self.tunnel_host}{self.path}" if self.tunnel_host else self.path
                path = local_copy(url)
                if path is None:
                    proxy.missing.add(url)
                    body, status, ctype = b"no local copy of this outside address", 404, "text/plain"
                else:
                    proxy.served.add(url)
                    body, status = path.read_bytes(), 200
                    ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                    if path.suffix == ".js":
                        ctype = "application/javascript"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()
                self.wfile.write(body)

            do_HEAD = do_GET

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        shutil.rmtree(self._tmp, ignore_errors=True)


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def start_browser(proxy: OutsideProxy):  # -> selenium WebDriver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = find_chromium()
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    # Loopback (the site itself) is reached directly; every other host goes to the proxy.
    for flag in CHROMIUM_FLAGS + [
        f"--user-data-dir={profile}",
        f"--proxy-server=http://{proxy.address}",
        f"--window-size={DESKTOP[0]},{DESKTOP[1]}",
    ]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    driver.profile_dir = profile
    return driver


# ---------------------------------------------------------------------------------------------
# What is checked on a page
# ---------------------------------------------------------------------------------------------

# Runs in the page once it has loaded: waits for MathJax's typesetting and for bertviz's
# drawings (require.js loads d3/jQuery first), then reports what a reader would see.
PAGE_PROBE = r"""
const done = arguments[arguments.length - 1];
const sleep = ms => new Promise(r => setTimeout(r, ms));
(async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    try { await MathJax.startup.promise; } catch (e) {}
  }
  const vizzes = () => Array.from(document.querySelectorAll('div[id^="bertviz-"]'))
                          .filter(v => /^bertviz-[0-9a-f]{32}$/.test(v.id));
  for (let i = 0; i < 100 && vizzes().some(v => !v.querySelector('svg text')); i++) await sleep(100);
  await sleep(300);

  const maths = Array.from(document.querySelectorAll('.math'));
  const untypeset = maths.filter(m => !m.querySelector('mjx-container'))
                         .map(m => m.textContent.trim().slice(0, 60));
  // Raw LaTeX left in the page's text (outside code, outputs and MathJax's own output).
  const skip = 'pre, code, script, style, textarea, mjx-container, .highlight, .output, .cell_output';
  const latex = /\\\(|\\\)|\\\[|\\\]|\$\$|\\(frac|sqrt|mathrm|mathbf|operatorname|cdot|sum|top|times|text)\b/;
  const raw = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    if (!el || el.closest(skip)) continue;
    if (latex.test(n.textContent)) raw.push(n.textContent.trim().slice(0, 60));
  }

  const viz = vizzes().map(v => {
    const texts = Array.from(v.querySelectorAll('svg text')).map(t => t.textContent.trim()).filter(Boolean);
    // A model view draws one small box per (layer, head): bertviz's rect.attn_background.
    const thumbs = Array.from(v.querySelectorAll('rect.attn_background'));
    let clipped = 0, offscreen = 0;
    for (const s of thumbs) {
      const r = s.getBoundingClientRect();
      for (let a = s.parentElement; a && a !== document.body; a = a.parentElement) {
        const ox = getComputedStyle(a).overflowX, ar = a.getBoundingClientRect();
        if (ox === 'visible') continue;
        if (r.right <= ar.right + 1 && r.left >= ar.left - 1) continue;
        if (ox === 'hidden' || ox === 'clip') clipped += 1;   // can never be seen
        else offscreen += 1;                                  // seen only by scrolling the box
        break;
      }
    }
    return {id: v.id, svgs: v.querySelectorAll('svg').length, texts: texts.slice(0, 200),
            thumbs: thumbs.length, clipped: clipped, offscreen: offscreen,
            width: Math.round(v.getBoundingClientRect().width)};
  });

  const imgs = Array.from(document.images);
  const links = Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href'));
  const colab = Array.from(document.querySelectorAll('a[href^="https://colab.research.google.com/"]')).map(a => a.href);
  const vw = document.documentElement.clientWidth;
  const wide = [];
  if (document.documentElement.scrollWidth > vw + 1) {
    for (const el of document.querySelectorAll('body *')) {
      const r = el.getBoundingClientRect();
      if (r.right > vw + 1 && r.width > 0 && !el.closest('.skip-link')
          && !Array.from(el.children).some(c => c.getBoundingClientRect().right > vw + 1)) {
        let scrolls = false;
        for (let a = el.parentElement; a; a = a.parentElement) {
          const ox = getComputedStyle(a).overflowX;
          if (ox === 'auto' || ox === 'scroll' || ox === 'hidden' || ox === 'clip') { scrolls = true; break; }
        }
        if (!scrolls) wide.push(el.tagName.toLowerCase()
          + (el.className && el.className.baseVal === undefined ? '.' + String(el.className).split(' ')[0] : '')
          + ': ' + (el.textContent || '').trim().slice(0, 50));
        if (wide.length >= 5) break;
      }
    }
  }
  // Boxes that hide part of their content sideways: each must scroll and show that it does
  // (a scrollbar that takes room, or the shadow course.js draws on the hidden edge).
  const article = document.querySelector('.bd-article') || document.querySelector('main') || document.body;
  const boxes = [], wideMath = [];
  for (const el of article.querySelectorAll('pre, div.math, mjx-container[display="true"], '
                                            + '.pst-scrollable-table-container, .cell_output, .output')) {
    const hidden = el.scrollWidth - el.clientWidth;
    if (hidden <= 1) continue;
    const st = getComputedStyle(el);
    const scrolls = st.overflowX === 'auto' || st.overflowX === 'scroll';
    const bar = el.offsetHeight - el.clientHeight - parseFloat(st.borderTopWidth) - parseFloat(st.borderBottomWidth);
    const shadow = st.boxShadow && st.boxShadow !== 'none' && el.scrollLeft + el.clientWidth < el.scrollWidth - 1;
    const what = el.tagName.toLowerCase() + ': ' + (el.textContent || '').trim().slice(0, 40);
    if (el.matches('div.math, mjx-container'))
      wideMath.push(what + ' (' + el.scrollWidth + ' px in ' + el.clientWidth + ')');
    if (!scrolls) boxes.push('hides content (overflow ' + st.overflowX + '): ' + what);
    else if (bar < 4 && !shadow) boxes.push('scrolls without a visible scrollbar or edge: ' + what);
  }
  // Figures: stored at twice the size they are shown at least, with alt text that says what they show.
  const figures = [];
  for (const img of article.querySelectorAll('img')) {
    if (img.closest('.bd-header-article, .navbar, header, .sidebar-primary-items__start')) continue;
    const r = img.getBoundingClientRect();
    if (!r.width) continue;
    const alt = (img.getAttribute('alt') || '').trim();
    figures.push({src: (img.getAttribute('src') || '').slice(-60), density: img.naturalWidth / r.width,
                  alt: alt, shown: Math.round(r.width),
                  distortion: (r.width / r.height) / (img.naturalWidth / img.naturalHeight)});
  }
  const meta = sel => { const m = document.querySelector(sel); return m ? (m.getAttribute('content') || '') : ''; };
  done({
    boxes: boxes.slice(0, 10), wide_math: wideMath.slice(0, 10), figures: figures,
    description: meta('meta[name="description"]'), og_title: meta('meta[property="og:title"]'),
    title: document.title,
    h1: (document.querySelector('main h1, article h1, h1') || {}).textContent || '',
    maths: maths.length, untypeset: untypeset, raw_latex: raw.slice(0, 10),
    viz: viz,
    images: imgs.length,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 100)),
    links: links, colab: colab,
    viewport: vw, doc_width: document.documentElement.scrollWidth, wide: wide,
    height: document.documentElement.scrollHeight,
  });
})();
"""


class _Ids(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        for k, v in attrs:
            if k in ("id", "name") and v:
                self.ids.add(v)


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    p = _Ids()
    p.feed(path.read_text(encoding="utf-8", errors="replace"))
    return frozenset(p.ids)


def broken_links(links: list[str], page_file: Path, site: Path) -> list[str]:
    """Links inside the site whose page or #anchor does not exist."""
    bad = []
    for href in links:
        parts = urllib.parse.urlsplit(href)
        if parts.scheme or parts.netloc or href.startswith(("mailto:", "javascript:")):
            continue
        target = page_file if not parts.path else (page_file.parent / urllib.parse.unquote(parts.path)).resolve()
        if target.is_dir():
            target = target / "index.html"
        if site.resolve() not in target.parents and target != site.resolve():
            bad.append(f"{href} (outside the site)")
        elif not target.exists():
            bad.append(href)
        elif parts.fragment and target.suffix == ".html" and parts.fragment not in anchors(target):
            bad.append(f"{href} (no such anchor)")
    return sorted(set(bad))


def set_width(driver, size: tuple[int, int], mobile: bool) -> None:
    w, h = size
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": w, "height": h, "deviceScaleFactor": 1, "mobile": mobile}
    )


def screenshot(driver, path: Path, height: int, size: tuple[int, int], mobile: bool) -> list[Path]:
    """The whole page at the page's own width, every pixel of it: tiles of at most TILE px
    (``path`` with ``-00``, ``-01``, ... before its suffix), each the viewport scrolled to its
    place, as a reader scrolling down sees it."""
    import base64

    tiles = []
    for old in path.parent.glob(f"{path.stem}-[0-9][0-9].png"):
        old.unlink()
    top, k = 0, 0
    height = max(height, 1)
    while top < height:
        h = min(TILE, height - top)
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": size[0], "height": h, "deviceScaleFactor": 1, "mobile": mobile},
        )
        driver.execute_script(f"window.scrollTo(0, {top})")
        time.sleep(0.25)
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
        tile = path.with_name(f"{path.stem}-{k:02d}.png")
        tile.write_bytes(base64.b64decode(shot["data"]))
        tiles.append(tile)
        top += h
        k += 1
    set_width(driver, size, mobile)
    driver.execute_script("window.scrollTo(0, 0)")
    return tiles


def check_page(
    driver,
    url: str,
    page_file: Path,
    site: Path,
    size: tuple[int, int],
    mobile: bool,
    shot: Path | None,
    expect_viz: dict[str, dict] | None = None,
) -> tuple[list[str], dict]:
    """Open ``url`` at ``size`` and return (problems, probe result)."""
    set_width(driver, size, mobile)
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(url)
    info = driver.execute_async_script(PAGE_PROBE)
    logs = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    problems = []
    label = "phone" if mobile else "desktop"
    if not info["title"].strip() or not info["h1"].strip():
        problems.append("no title or no first heading")
    if info["untypeset"]:
        problems.append(
            f"{len(info['untypeset'])} of {info['maths']} formulas left untypeset, e.g. {info['untypeset'][:3]}"
        )
    if info["raw_latex"]:
        problems.append(f"raw LaTeX in the page's text: {info['raw_latex'][:3]}")
    if info["broken"]:
        problems.append(f"images that did not load: {info['broken'][:3]}")
    if logs:
        problems.append(f"JavaScript errors: {logs[:3]}")
    bad = broken_links(info["links"], page_file, site)
    if bad:
        problems.append(f"links inside the site that do not resolve: {bad[:5]}")
    if not info["description"].strip() or not info["og_title"].strip():
        problems.append("the page has no description or no Open Graph title (what a shared link shows)")
    if not mobile and info["wide_math"]:
        problems.append(f"display formula wider than the column at {size[0]} px: {info['wide_math'][:3]}")
    if info["boxes"]:
        problems.append(f"a box hides content past its edge: {info['boxes'][:3]}")
    for fig in info["figures"]:
        if fig["density"] < 1.95:
            problems.append(
                f"figure under 2x density ({fig['density']:.2f} image px per shown px, {fig['shown']} px wide): "
                f"{fig['src']}"
            )
        if fig["distortion"] is not None and abs(fig["distortion"] - 1) > 0.02:
            problems.append(
                f"a figure squashed out of its proportions (shown width:height is {fig['distortion']:.2f}x "
                f"the image's): {fig['src']}"
            )
        if len(fig["alt"].split()) < 3 or re.search(r"\.(png|jpe?g|svg|gif)\b|^[\w./-]+$", fig["alt"]):
            problems.append(f"an image whose alt text does not say what it shows: {fig['alt']!r} ({fig['src']})")
    if mobile and info["doc_width"] > info["viewport"] + 1:
        problems.append(
            f"at {size[0]} px the page scrolls sideways (document {info['doc_width']} px wide); "
            f"too wide: {info['wide'][:3]}"
        )
    for v in info["viz"]:
        if v["svgs"] == 0 or not (v["texts"] or v["thumbs"]):
            problems.append(
                f"bertviz output {v['id']} draws nothing (svg: {v['svgs']}, token texts: {len(v['texts'])})"
            )
            continue
        expected = (expect_viz or {}).get(v["id"])
        if expect_viz is not None and expected is None:
            problems.append(f"bertviz output {v['id']} is on the page but not in the notebook")
        if expected is not None:
            tokens = expected["tokens"]
            if tokens and not v["thumbs"] and not set(tokens) & set(v["texts"]):
                problems.append(f"bertviz output {v['id']} shows none of the sentence's tokens")
            cells = expected["model_cells"]
            if cells and v["thumbs"] != cells:
                problems.append(f"bertviz model view {v['id']} shows {v['thumbs']} of {cells} layer x head views")
        if v["clipped"] or (not mobile and v["offscreen"]):
            problems.append(
                f"bertviz output {v['id']}: {v['clipped'] + (0 if mobile else v['offscreen'])} of its "
                f"{v['thumbs']} layer x head views are cut off (at {size[0]} px every view must show; "
                "on a phone it may scroll inside its box)"
            )
    if shot is not None:
        screenshot(driver, shot, info["height"], size, mobile)
    return [f"[{label}] {p}" for p in problems], info


# ---------------------------------------------------------------------------------------------
# Proof that every check can fail
# ---------------------------------------------------------------------------------------------


DESCRIBED = "<meta name='description' content='A fixture page.'><meta property='og:title' content='Fixture'>"


def _fixture(body: str, head: str = "", described: bool = True) -> str:
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'><title>fixture</title>"
        "<link rel='icon' href='data:,'>" + (DESCRIBED if described else "") + f"{head}</head>"
        f"<body><main><h1>Fixture</h1>{body}</main></body></html>"
    )


def _png(side: int) -> str:
    """A data: URL of a grey square PNG ``side`` pixels wide."""
    import base64
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x80" * side for _ in range(side))
    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )
    return "data:image/png;base64," + base64.b64encode(png).decode()


# A box that scrolls and shows it (the course's stylesheet draws this shadow on the hidden edge).
EDGE = "box-shadow: inset -14px 0 10px -10px rgba(0,0,0,.35)"


MATHJAX = (
    "<script>MathJax = {options: {processHtmlClass: 'math'}};</script>"
    "<script defer src='https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js'></script>"
)

FIXTURES = {
    # name: (html, the problem text that must be reported, or None for a page that must pass)
    "clean": (
        _fixture(
            "<p>Score <span class='math notranslate nohighlight'>\\(q k^\\top / \\sqrt{d_k}\\)</span>"
            " and <a href='clean.html#ok'>a link</a>.</p><p id='ok'>ok</p>"
            f"<div style='overflow-x:auto;{EDGE}'><table><tr><td style='white-space:nowrap'>"
            + "wide_table_cell " * 60
            + "</td></tr></table></div>"
            + f"<figure><img src='{_png(200)}' width='100' alt='A grey square, the whole figure.'></figure>",
            MATHJAX,
        ),
        None,
    ),
    "no_description": (_fixture("<p>text</p>", described=False), "no description"),
    "wide_formula": (
        _fixture(
            "<div class='math'><mjx-container display='true' style='display:block;overflow-x:auto'>"
            "<span style='display:inline-block;width:3000px'>x</span></mjx-container></div>"
        ),
        "display formula wider than the column",
    ),
    "hidden_output": (
        _fixture("<div class='cell_output'><pre style='overflow:hidden'>" + "long_output " * 200 + "</pre></div>"),
        "hides content",
    ),
    "no_scrollbar": (
        _fixture(
            "<style>pre::-webkit-scrollbar{display:none}</style><div class='cell_output'>"
            "<pre style='overflow-x:auto;scrollbar-width:none'>" + "long_output " * 200 + "</pre></div>"
        ),
        "without a visible scrollbar",
    ),
    "blurry_figure": (
        _fixture(f"<img src='{_png(100)}' width='100' alt='A grey square, the whole figure.'>"),
        "under 2x density",
    ),
    "squashed_figure": (
        _fixture(f"<img src='{_png(200)}' style='width:100px;height:40px' alt='A grey square, the whole figure.'>"),
        "squashed",
    ),
    "path_alt": (_fixture(f"<img src='{_png(200)}' width='100' alt='book/figures/square.png'>"), "alt text"),
    "no_mathjax": (
        _fixture("<p><span class='math notranslate nohighlight'>\\(\\sqrt{d_k}\\)</span></p>"),
        "left untypeset",
    ),
    "raw_latex": (_fixture("<p>Why divide by \\(\\sqrt{d_k}\\)?</p>"), "raw LaTeX"),
    "js_error": (_fixture("<script>undefined_function_of_the_page();</script>"), "JavaScript errors"),
    "broken_image": (_fixture("<img src='missing.png' alt='x'>"), "images that did not load"),
    "broken_link": (_fixture("<a href='nowhere.html'>x</a> <a href='#no-anchor'>y</a>"), "do not resolve"),
    "sideways": (
        _fixture("<p><code style='white-space:nowrap'>" + "a_very_long_name_" * 40 + "</code></p>"),
        "scrolls sideways",
    ),
    "empty_viz": (_fixture(f"<div id='bertviz-{'0' * 32}'></div>"), "draws nothing"),
    "cut_viz": (
        _fixture(
            "<div style='width:300px;overflow:hidden'><div id='bertviz-" + "1" * 32 + "'>"
            "<div style='width:700px'>"
            + "".join(
                f"<svg width='100' height='60'><text x='5' y='20'>{i}</text>"
                "<rect class='attn_background' x='0' y='0' width='90' height='50'/></svg>"
                for i in range(6)
            )
            + "</div></div></div>"
        ),
        "cut off",
    ),
}


def self_test(driver) -> list[str]:
    """Build one small page per fault, check each, and return what the check failed to catch."""
    misses = []
    site = Path(tempfile.mkdtemp(prefix="site-fixtures-"))
    try:
        for name, (page, _) in FIXTURES.items():
            (site / f"{name}.html").write_text(page, encoding="utf-8")
        server, base = serve(site)
        try:
            for name, (_, expected) in FIXTURES.items():
                mobile = name == "sideways" or name == "clean"
                size = PHONE if mobile else DESKTOP
                problems, _ = check_page(driver, f"{base}/{name}.html", site / f"{name}.html", site, size, mobile, None)
                if expected is None and problems:
                    misses.append(f"{name}: a clean page was reported: {problems}")
                elif expected is not None and not any(expected in p for p in problems):
                    misses.append(f"{name}: the fault was not caught (expected '{expected}', got {problems})")
        finally:
            server.shutdown()
    finally:
        shutil.rmtree(site, ignore_errors=True)
    return misses


# ---------------------------------------------------------------------------------------------
# The course's pages
# ---------------------------------------------------------------------------------------------

pages = course_config.toc_files


def expected_bertviz(notebook: Path) -> dict[str, dict]:
    """What each bertviz output of a notebook must show, by its container's id: the tokens, and
    for a model view the number of (layer, head) views.  Read from the parameters bertviz stored
    in the output (``const params = {...}``)."""
    import re

    if not notebook.exists():
        return {}
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    found: dict[str, dict] = {}
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            for value in out.get("data", {}).values():
                text = "".join(value) if isinstance(value, list) else str(value)
                m = re.search(r"const params = ", text)
                if not m:
                    continue
                params, _ = json.JSONDecoder().raw_decode(text[m.end() :])
                model = "include_heads" in params
                cells = len(params["include_layers"]) * len(params["include_heads"]) if model else 0
                found[params["root_div_id"]] = {"tokens": params["attention"][0]["left_text"], "model_cells": cells}
    return found


def code_words_in_search(site: Path = HTML) -> list[str]:
    """Pages whose search entry lists a word that stands only in their code cells: search indexes the
    prose (titles, text, captions, inline code), so that a search for a concept finds the chapter
    that explains it rather than every cell that calls a function of that name."""
    from sphinx.search.en import SearchEnglish

    text = (site / "searchindex.js").read_text(encoding="utf-8")
    index = json.loads(text[text.index("(") + 1 : text.rindex(")")])
    stem = functools.cache(lambda w: SearchEnglish({}).stem(w).lower())
    words = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    prose_stems: set[str] = set()
    code: dict[str, set[str]] = {}
    for page in pages():
        source = ROOT / f"{page}.ipynb"
        if not source.exists():
            prose_stems |= {stem(w.lower()) for w in words.findall((ROOT / f"{page}.md").read_text())}
            continue
        cells = json.loads(source.read_text(encoding="utf-8"))["cells"]
        for cell in cells:
            body = "".join(cell["source"])
            if cell["cell_type"] == "code":
                code.setdefault(page, set()).update(w.lower() for w in words.findall(body) if len(w) > 3)
                body = json.dumps(cell.get("metadata", {}))  # captions and alt text are prose
            prose_stems |= {stem(w.lower()) for w in words.findall(body)}
    problems = []
    for page, names in code.items():
        doc = index["docnames"].index(page)
        hits = []
        for name in sorted(names):
            docs = index["terms"].get(stem(name), [])
            if stem(name) not in prose_stems and doc in (docs if isinstance(docs, list) else [docs]):
                hits.append(name)
        if hits:
            problems.append(f"{page}: search lists words that stand only in its code: {hits[:5]}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--self-test", action="store_true", help="only prove that each check catches its fault")
    args = parser.parse_args()
    if not (ASSETS / "mathjax").is_dir():
        raise SystemExit("the pages' outside scripts are not installed: run `make setup-browser`")
    if not args.self_test and not (HTML / "index.html").exists():
        raise SystemExit("no built site in _build/html: run `make book` first")
    proxy = OutsideProxy()
    driver = start_browser(proxy)
    problems: list[str] = [] if args.self_test else code_words_in_search()
    report = []
    try:
        misses = self_test(driver)
        if misses:
            raise SystemExit(
                "The site check's self-test failed (a check that cannot fail):\n" + "\n".join(f"- {m}" for m in misses)
            )
        print(f"Self-test: each of the {len(FIXTURES) - 1} faults is caught, a clean page passes")
        if args.self_test:
            return
        proxy.missing.clear()
        SHOTS.mkdir(parents=True, exist_ok=True)
        server, base = serve(HTML)
        try:
            for page in pages():
                name = Path(page).name
                nb = ROOT / f"{page}.ipynb"
                viz = expected_bertviz(nb)
                row = {"page": page}
                for size, mobile, tag in ((DESKTOP, False, "desktop"), (PHONE, True, "phone")):
                    found, info = check_page(
                        driver,
                        f"{base}/{page}.html",
                        HTML / f"{page}.html",
                        HTML,
                        size,
                        mobile,
                        SHOTS / f"{name}-{tag}.png",
                        viz,
                    )
                    problems += [f"{page}.html {p}" for p in found]
                    row[tag] = {
                        "maths": info["maths"],
                        "images": info["images"],
                        "problems": len(found),
                        "viz": [(v["id"], v["thumbs"], len(v["texts"])) for v in info["viz"]],
                    }
                    if not mobile and nb.exists():
                        expected = course_config.colab_url(nb.name)
                        if expected not in info["colab"]:
                            problems.append(
                                f"{page}.html: the Colab button links to {info['colab']}, expected {expected}"
                            )
                    shown = {v["id"] for v in info["viz"]}
                    if not mobile and set(viz) - shown:
                        problems.append(
                            f"{page}.html: bertviz outputs of the notebook missing on the page: "
                            f"{sorted(set(viz) - shown)}"
                        )
                report.append(row)
        finally:
            server.shutdown()
    finally:
        driver.quit()
        proxy.close()
        shutil.rmtree(driver.profile_dir, ignore_errors=True)
    if proxy.missing:
        problems.append(
            "pages asked for outside addresses with no local copy (add them to OUTSIDE and "
            f"tools/site_assets/package.json): {sorted(proxy.missing)}"
        )
    (SHOTS / "report.json").write_text(json.dumps(report, indent=1))
    for r in report:
        d = r["desktop"]
        print(f"  {r['page']:45s} formulas={d['maths']:3d} images={d['images']:3d} bertviz={[v[1] for v in d['viz']]}")
    if problems:
        raise SystemExit("Site check failed:\n" + "\n".join(f"- {p}" for p in problems))
    print(
        f"Site check: {len(report)} pages at {DESKTOP[0]} px and {PHONE[0]} px, outside scripts served "
        f"from local copies ({len(proxy.served)} addresses); screenshots in {SHOTS.relative_to(ROOT)}/"
    )


if __name__ == "__main__":
    main()
