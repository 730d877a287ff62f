// The course site's own script (added by tools/course_site.py).
//
// bertviz's model view is one SVG of fixed width (about 970 px for 12 heads): in a page's
// content column it would show only the first heads.  Once bertviz has drawn it, scale it to
// the column's width (when that keeps it at least half size), so that every layer x head shows;
// on narrower screens it keeps its size and its box scrolls sideways.
(function () {
  function fit(svg) {
    const w = parseFloat(svg.getAttribute("width"));
    const h = parseFloat(svg.getAttribute("height"));
    if (!w || !h || String(svg.getAttribute("width")).includes("%")) return;
    const box = svg.closest(".output, .cell_output") || svg.parentElement;
    const avail = box.clientWidth;
    if (avail / w < 0.5) {  // a phone: full size, the box scrolls sideways
      svg.removeAttribute("viewBox");
      svg.style.width = "";
      svg.style.height = "";
      return;
    }
    const shown = Math.min(w, avail);
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    svg.setAttribute("preserveAspectRatio", "xMinYMin meet");
    svg.style.width = shown + "px";
    svg.style.height = Math.ceil((h * shown) / w) + "px";
  }
  function fitAll() {
    document.querySelectorAll('div[id^="bertviz-"] svg').forEach(fit);
  }
  function watch() {
    document.querySelectorAll('div[id^="bertviz-"]').forEach(function (root) {
      new MutationObserver(fitAll).observe(root, { childList: true, subtree: true, attributes: true,
                                                  attributeFilter: ["width", "height"] });
    });
    fitAll();
    window.addEventListener("resize", fitAll);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watch);
  else watch();
})();
