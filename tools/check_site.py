"""Open every page of the built site in headless Chromium and check what a reader would see.

    python tools/check_site.py        # after `jupyter-book build` (make check-site does both)

For every page in ``_toc.yml``: the title and the first heading are there, every image has
loaded (natural width > 0), no JavaScript error other than requests to outside hosts that this
offline machine cannot reach (CDNs), the Colab button links to that page's notebook, and on
pages with bertviz outputs the visualisation's container exists.  A screenshot of each page
is written to ``_build/screenshots/``.

Chromium is Debian's ``chromium`` and ``chromium-driver``; when missing, they are installed
with apt-get (as root), which is how CI gets them.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import course_config  # noqa: E402

ROOT = course_config.ROOT
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--window-size=1280,1600",
]


def ensure_chromium() -> tuple[str, str]:
    def find() -> tuple[str | None, str | None]:
        browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
        return browser, shutil.which("chromedriver")

    browser, driver = find()
    if browser and driver:
        return browser, driver
    if os.geteuid() != 0:
        raise SystemExit("Chromium is missing: install Debian's chromium and chromium-driver (apt-get, as root)")
    print("installing Debian's chromium and chromium-driver ...", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    browser, driver = find()
    if not (browser and driver):
        raise SystemExit("apt-get ran, but chromium / chromedriver are still not on PATH")
    return browser, driver


def pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return files


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def is_blocked_outside_request(message: str, base: str) -> bool:
    """A console error caused by this offline machine failing to reach another host."""
    offline_signs = ("net::ERR_", "Failed to load resource", "requirejs.org/docs/errors.html#scripterror",
                     "Script error for", "ERR_NAME_NOT_RESOLVED", "ERR_INTERNET_DISCONNECTED")
    return base not in message.split(" ")[0] and any(s in message for s in offline_signs)


def javascript_errors(messages: list[str], base: str) -> list[str]:
    """The console errors that are the page's own fault.

    Requests to other hosts that fail offline are not; nor is ``require is not defined`` when
    the page's request for require.js itself was one of them (the error is that failure's echo).
    """
    blocked = [m for m in messages if is_blocked_outside_request(m, base)]
    requirejs_blocked = any("require" in m.split(" ")[0] for m in blocked)
    return [m for m in messages if m not in blocked
            and not (requirejs_blocked and "require is not defined" in m)]


PAGE_PROBE = """
const imgs = Array.from(document.images);
const colab = Array.from(document.querySelectorAll('a[href^="https://colab.research.google.com/"]')).map(a => a.href);
return {
  title: document.title,
  h1: (document.querySelector('main h1, article h1, h1') || {}).textContent || '',
  images: imgs.length,
  broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80)),
  colab: colab,
  bertviz_outputs: document.querySelectorAll('.output, .cell_output').length,
  bertviz_containers: document.querySelectorAll('[id^="bertviz"]').length,
};
"""


def main() -> None:
    if not (HTML / "index.html").exists():
        raise SystemExit("no built site in _build/html: run `make book` first")
    browser, driver_path = ensure_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    SHOTS.mkdir(parents=True, exist_ok=True)
    server, base = serve(HTML)
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={profile}"]:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    driver.set_page_load_timeout(60)
    problems: list[str] = []
    report = []
    try:
        for page in pages():
            name = Path(page).name
            driver.get(f"{base}/{page}.html")
            info = driver.execute_script(PAGE_PROBE)
            src = (ROOT / f"{page}.ipynb")
            errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            js_errors = javascript_errors(errors, base)
            driver.save_screenshot(str(SHOTS / f"{name}.png"))
            where = f"{page}.html"
            if not info["title"].strip() or not info["h1"].strip():
                problems.append(f"{where}: no title or no first heading")
            if info["broken"]:
                problems.append(f"{where}: images that did not load: {info['broken']}")
            if js_errors:
                problems.append(f"{where}: JavaScript errors: {js_errors[:3]}")
            if src.exists():
                expected = course_config.colab_url(src.name)
                if expected not in info["colab"]:
                    problems.append(f"{where}: the Colab button links to {info['colab']}, expected {expected}")
                if "bertviz" in src.read_text(encoding="utf-8") and "head_view" in src.read_text(encoding="utf-8"):
                    if info["bertviz_containers"] == 0:
                        problems.append(f"{where}: a bertviz output is expected but no bertviz container is on the page")
            report.append({"page": page, "title": info["title"], "images": info["images"],
                           "bertviz_containers": info["bertviz_containers"], "js_errors": len(js_errors),
                           "blocked_outside_requests": len(errors) - len(js_errors)})
    finally:
        driver.quit()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    (SHOTS / "report.json").write_text(json.dumps(report, indent=1))
    for r in report:
        print(f"  {r['page']:45s} images={r['images']:3d} bertviz={r['bertviz_containers']} "
              f"blocked-outside={r['blocked_outside_requests']}")
    if problems:
        raise SystemExit("Site check failed:\n" + "\n".join(f"- {p}" for p in problems))
    print(f"Site check: {len(report)} pages opened in headless Chromium; screenshots in {SHOTS.relative_to(ROOT)}/")


if __name__ == "__main__":
    main()
