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

// A box that scrolls sideways (a wide output, table or formula) gets a shadow on its right edge
// while content is hidden there, so a reader sees that there is more (its scrollbar is always
// drawn too, by course.css).
(function () {
  const BOXES = [
    ".bd-article div.math",
    '.bd-article mjx-container[display="true"]',
    ".bd-article div.cell_output pre",
    ".bd-article div.highlight pre",
    ".bd-article .pst-scrollable-table-container",
    ".bd-article .cell_output .output",
    ".bd-article div.cell_output",
  ].join(", ");
  function mark(box) {
    const hidden = box.scrollWidth - box.clientWidth - box.scrollLeft > 1;
    box.classList.toggle("course-more-right", hidden);
  }
  function markAll() {
    document.querySelectorAll(BOXES).forEach(function (box) {
      if (!box.dataset.courseScroll) {
        box.dataset.courseScroll = "1";
        box.addEventListener("scroll", function () { mark(box); }, { passive: true });
      }
      mark(box);
    });
  }
  function start() {
    markAll();
    window.addEventListener("resize", markAll);
    // outputs drawn later by their own scripts (bertviz) are marked once they appear
    let pending = false;
    new MutationObserver(function () {
      if (pending) return;
      pending = true;
      requestAnimationFrame(function () { pending = false; markAll(); });
    }).observe(document.querySelector(".bd-article") || document.body, { childList: true, subtree: true });
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      MathJax.startup.promise.then(markAll);
    }
    setTimeout(markAll, 1500);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

// Search results quote the page's text; a formula there is its LaTeX source ("\\(\\sqrt{d_k}\\)").
// Before the quote is made, each formula is turned into plain reading text ("√d_k").
(function () {
  function readable(tex) {
    let t = tex.trim().replace(/^\\[(\[]|\\[)\]]$/g, "");
    // environments and line breaks of a display formula are layout, not text
    t = t.replace(/\\(?:begin|end)\{[^{}]*\}/g, " ").replace(/\\\\/g, " ");
    t = t.replace(/\^\{\s*\\mathsf\s*(?:T|\{T\})\s*\}|\^\\mathsf\s*(?:T|\{T\})/g, "ᵀ").replace(/\\mathbb\{R\}/g, "ℝ");
    const words = { top: "ᵀ", cdot: "·", times: "×", sum: "Σ", infty: "∞", le: "≤", ge: "≥",
                    approx: "≈", ldots: "…", dots: "…", alpha: "α", beta: "β", gamma: "γ", mu: "μ",
                    sigma: "σ", epsilon: "ε", varepsilon: "ε", theta: "θ", odot: "⊙", in: "∈",
                    to: "→", quad: " ", qquad: " ", left: "", right: "" };
    // innermost groups first, until nothing changes: \frac{a}{b} -> (a)/(b), \sqrt{x} -> √(x)
    for (let k = 0; k < 5; k++) {
      const before = t;
      t = t.replace(/\\frac\{([^{}]*)\}\{([^{}]*)\}/g, "($1)/($2)");
      t = t.replace(/\\frac\s*(\w)\s*(\w)/g, "$1/$2");
      t = t.replace(/\\sqrt\{([^{}]*)\}/g, (m, x) => (x.length > 1 ? "√(" + x + ")" : "√" + x));
      t = t.replace(/\\(?:text|mathrm|mathbf|operatorname|mathit|boldsymbol)\{([^{}]*)\}/g, "$1");
      t = t.replace(/([_^])\{([^{}]*)\}/g, (m, op, x) => op + (x.length > 1 ? "(" + x + ")" : x));
      if (t === before) break;
    }
    t = t.replace(/\\([A-Za-z]+)/g, (m, w) => (w in words ? words[w] : w));
    t = t.replace(/\\[,;!: ]/g, " ").replace(/[{}]/g, "").replace(/\\/g, "").replace(/&/g, "");
    return t.replace(/\s+/g, " ").trim();
  }
  function patch() {
    if (typeof Search === "undefined" || !Search.htmlToText || Search._coursePatched) return;
    const original = Search.htmlToText;
    Search.htmlToText = function (htmlString, anchor) {
      const doc = new DOMParser().parseFromString(htmlString, "text/html");
      doc.querySelectorAll(".math").forEach(function (m) {
        const text = readable(m.textContent);
        // a long display formula reads badly as one line of text: the quote names it instead
        m.textContent = m.tagName === "DIV" && text.length > 60 ? " (a formula) " : text;
      });
      // Quote the chapter's own text: the theme's [role=main] also holds the header's buttons
      // ("Colab", "Repository") and the contents list, which would open every quote.
      const main = doc.querySelector('[role="main"]');
      const article = doc.querySelector(".bd-article");
      if (main && article && main !== article) {
        main.removeAttribute("role");
        article.setAttribute("role", "main");
      }
      const text = original(doc.documentElement.outerHTML, anchor);
      return text.replace(/\s+/g, " ");
    };
    // The quote starts at a query word found in the text; Sphinx looks for the *stemmed* words
    // ("rotari" for "rotary"), which the text rarely contains, and then quotes the page's opening.
    // Look for the words as typed as well.
    const summary = Search.makeSearchSummary;
    if (summary) {
      Search.makeSearchSummary = function (htmlText, keywords, anchor) {
        const typed = (new URLSearchParams(window.location.search).get("q") || "")
          .toLowerCase().split(/\s+/).filter(function (w) { return w.length > 1; });
        return summary(htmlText, new Set([...keywords, ...typed]), anchor);
      };
    }
    Search._coursePatched = true;
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", patch);
  else patch();
})();

// A figure scaled down to a phone's width can be opened at full size: a tap on it opens the
// image itself (stored at twice its shown size), which the phone can then zoom.
(function () {
  function link() {
    document.querySelectorAll(".bd-article .cell_output img, .bd-article figure img").forEach(
      function (img) {
        if (img.closest("a") || !img.getAttribute("src")) return;
        const a = document.createElement("a");
        a.href = img.getAttribute("src");
        a.className = "course-figure-link";
        a.title = "Open the figure at full size";
        img.parentNode.insertBefore(a, img);
        a.appendChild(img);
      });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", link);
  else link();
})();

// Code names may break only where a reader would split them: after an underscore, a dot, a comma
// or an opening bracket, and between the words of a CamelCase name; never in the middle of a word
// ("PositionwiseFeed|Forward", not "...FeedFor|ward"; "generate_square_|subsequent_mask", not
// "..._subsequ|ent_mask"). A short one (a shape such as "(batch, 1, n, n)") does not break at all.
(function () {
  const SHORT = 24;  // characters
  function breakable() {
    document.querySelectorAll(".bd-article code.literal").forEach(function (code) {
      if (code.dataset.courseBreaks) return;
      code.dataset.courseBreaks = "1";
      // in a table's narrow column even a short name may have to break (at its marks)
      const inTable = !!code.closest("table");
      if (!inTable && code.textContent.length <= SHORT) {
        code.classList.add("course-nowrap");
        return;
      }
      const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
      const texts = [];
      while (walker.nextNode()) texts.push(walker.currentNode);
      texts.forEach(function (node) {
        // words (split at spaces, which stay break points): a short one never breaks (a flag such
        // as "--n-layer" would read as "-n-layer" on the next line), a long one at the marks
        const frag = document.createDocumentFragment();
        node.nodeValue.split(/(\s+)/).forEach(function (word) {
          if (!word) return;
          if (/^\s+$/.test(word)) {
            frag.appendChild(document.createTextNode(word));
          } else if (!inTable && word.length <= SHORT) {
            const span = document.createElement("span");
            span.className = "course-nowrap";
            span.textContent = word;
            frag.appendChild(span);
          } else {
            word.split(/(?<=[_.,(\[])(?=\S)|(?<=[a-z0-9])(?=[A-Z])/).forEach(function (part, i) {
              if (i) frag.appendChild(document.createElement("wbr"));
              frag.appendChild(document.createTextNode(part));
            });
          }
        });
        node.parentNode.replaceChild(frag, node);
      });
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", breakable);
  else breakable();
})();

// A punctuation mark right after an inline formula stays on the formula's line ("... reads j."
// rather than a lone "." starting the next line).
(function () {
  function glue() {
    document.querySelectorAll('.bd-article mjx-container:not([display="true"])').forEach(function (container) {
      // the formula's own box: the span the page wrote it in (span.math), if MathJax drew inside one
      const outer = container.parentNode;
      const math = outer.classList && outer.classList.contains("math") && outer.childElementCount === 1 ? outer : container;
      if (math.parentNode.classList && math.parentNode.classList.contains("course-glue")) return;
      const next = math.nextSibling;
      if (!next || next.nodeType !== Node.TEXT_NODE) return;
      const m = next.nodeValue.match(/^[.,;:!?)’”]+/);
      if (!m) return;
      const span = document.createElement("span");
      span.className = "course-glue";
      math.parentNode.insertBefore(span, math);
      span.appendChild(math);
      span.appendChild(document.createTextNode(m[0]));
      next.nodeValue = next.nodeValue.slice(m[0].length);
    });
  }
  function start() {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) MathJax.startup.promise.then(glue);
    setTimeout(glue, 1500);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

// On a phone, a printed output that is not a table (a line of a label and its value, a sentence)
// wraps at the column's edge, so that the value at the end of a long line is seen without
// scrolling; a table (three or more columns, aligned over several lines) keeps its layout and
// scrolls in its box.
(function () {
  function isTable(text) {
    const lines = text.split("\n").filter(function (l) { return l.trim(); });
    if (lines.length < 3) return false;
    const columned = lines.filter(function (l) {
      return (l.trim().match(/\S\s{2,}(?=\S)/g) || []).length >= 2;
    });
    return columned.length >= lines.length / 2;
  }
  function mark() {
    document.querySelectorAll(".bd-article div.cell_output pre").forEach(function (pre) {
      if (pre.dataset.courseWrap) return;
      pre.dataset.courseWrap = "1";
      if (!isTable(pre.textContent)) pre.classList.add("course-wrap-phone");
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mark);
  else mark();
})();
