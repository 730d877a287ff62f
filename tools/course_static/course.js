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
// "..._subsequ|ent_mask"). One that fits a phone's line (a shape such as "(batch, 1, n, n)",
// "F.scaled_dot_product_attention") does not break at all: it moves to the next line whole.
(function () {
  const SHORT = 40;  // characters: about a phone's line of code
  const MARKS = /(?<=[_.,(\[])(?=\S)|(?<=[a-z0-9])(?=[A-Z])/;
  function split(code, wholeWords) {
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
        } else if (wholeWords && word.length <= SHORT) {
          const span = document.createElement("span");
          span.className = "course-nowrap";
          span.textContent = word;
          frag.appendChild(span);
        } else {
          word.split(MARKS).forEach(function (part, i) {
            if (i) frag.appendChild(document.createElement("wbr"));
            frag.appendChild(document.createTextNode(part));
          });
        }
      });
      node.parentNode.replaceChild(frag, node);
    });
  }
  function tooWide(code) {
    const box = code.closest("p, li, td, th, dt, dd, h1, h2, h3, h4, h5, h6, figcaption, div");
    return box !== null && code.getBoundingClientRect().width > box.clientWidth;
  }
  function breakable() {
    document.querySelectorAll(".bd-article code.literal").forEach(function (code) {
      if (code.dataset.courseBreaks) return;
      code.dataset.courseBreaks = "1";
      // in a table's narrow column even a short name may have to break (at its marks)
      const inTable = !!code.closest("table");
      if (!inTable && code.textContent.length <= SHORT) {
        code.classList.add("course-nowrap");
        if (!tooWide(code)) return;  // a large heading on a phone: it breaks at its marks after all
        code.classList.remove("course-nowrap");
        split(code, false);
        return;
      }
      split(code, !inTable);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", breakable);
  else breakable();
  window.addEventListener("load", function () {
    // once fonts are in, a name kept whole that no longer fits breaks at its marks
    document.querySelectorAll(".bd-article code.literal.course-nowrap").forEach(function (code) {
      if (tooWide(code)) {
        code.classList.remove("course-nowrap");
        split(code, false);
      }
    });
  });
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
      const next = math.nextSibling, prev = math.previousSibling;
      const after = next && next.nodeType === Node.TEXT_NODE ? next.nodeValue.match(/^[.,;:!?)’”%]+/) : null;
      const before = prev && prev.nodeType === Node.TEXT_NODE ? prev.nodeValue.match(/[(\[‘“]+$/) : null;
      if (!after && !before) return;
      const span = document.createElement("span");
      span.className = "course-glue";
      math.parentNode.insertBefore(span, math);
      if (before) {
        span.appendChild(document.createTextNode(before[0]));
        prev.nodeValue = prev.nodeValue.slice(0, -before[0].length);
      }
      span.appendChild(math);
      if (after) {
        span.appendChild(document.createTextNode(after[0]));
        next.nodeValue = next.nodeValue.slice(after[0].length);
      }
    });
  }
  function start() {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) MathJax.startup.promise.then(glue);
    setTimeout(glue, 1500);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

// On a phone, the lines of a printed output that are not part of a table (a label and its value, a
// sentence) wrap at the column's edge, each continuation indented under the value it continues, so
// that the value at the end of a long line is seen without scrolling; the lines of a table (three or
// more columns padded apart, a printed tensor, a grid of tokens) keep their layout, and the box
// scrolls sideways for them.
(function () {
  // the runs of two or more spaces between words of a line (after its indentation)
  function gaps(line) {
    return (line.trim().match(/\S\s{2,}(?=\S)/g) || []).length;
  }
  function tableLines(lines) {
    const keep = lines.map(function (l) {
      return gaps(l) >= 2 || /^\s*tensor\(|^\s+\[/.test(l);
    });
    // a grid: two or more neighbouring lines split into the same number (3+) of fields that start
    // in the same columns (at least half of them), padded apart somewhere: two sentences of the
    // same shape ("KV cache, 3 heads: …" over "KV cache, 9 heads: …") are not one
    function starts(l) {
      const at = [];
      l.replace(/\S+/g, function (w, i) { at.push(i); return w; });
      return at;
    }
    const fields = lines.map(starts);
    for (let i = 0; i + 1 < lines.length; i++) {
      const a = fields[i], b = fields[i + 1];
      if (a.length < 3 || a.length !== b.length) continue;
      if (!/\S\s{2,}\S/.test(lines[i]) && !/\S\s{2,}\S/.test(lines[i + 1])) continue;  // words, not columns
      const same = a.filter(function (x, k) { return k > 0 && x === b[k]; }).length;
      if (2 * same >= a.length - 1) keep[i] = keep[i + 1] = true;
    }
    return keep;
  }
  // where a wrapped line's continuation starts: under the value of "label   value", else under
  // the line's own indentation (two columns further for a continued sentence)
  function hang(line) {
    const m = line.match(/^(\s*\S.*?\S?\s{2,})\S/);
    if (m && gaps(line) === 1 && m[1].length <= 26) return m[1].length;
    return line.length - line.trimStart().length + 2;
  }
  function mark() {
    document.querySelectorAll(".bd-article div.cell_output pre").forEach(function (pre) {
      if (pre.dataset.courseWrap) return;
      pre.dataset.courseWrap = "1";
      if (pre.closest(".tag_wrap-output")) return;  // prose that wraps whole already
      // a listing of the package's code keeps its indentation
      if (/^\s*(class |def |async def |@)/.test(pre.textContent)) return;
      // coloured output (spans with text in them) is left as it is
      if (Array.from(pre.children).some(function (c) { return c.textContent; })) return;
      const lines = pre.textContent.split("\n");
      const keep = tableLines(lines);
      if (keep.every(Boolean)) return;  // all table: it scrolls as a whole
      pre.classList.add("course-wrap-phone");
      pre.textContent = "";
      lines.forEach(function (line, i) {
        const span = document.createElement("span");
        if (keep[i]) span.className = "course-keep";
        else if (line.trim()) {
          span.className = "course-hang";
          span.style.setProperty("--course-hang", hang(line) + "ch");
        }
        span.textContent = line;
        pre.appendChild(span);
        if (i + 1 < lines.length) pre.appendChild(document.createTextNode("\n"));
      });
    });
  }
  // on a phone, an output whose kept lines are a little too wide is set smaller until they fit
  // (down to 70 %), so that the numbers at their ends show; a wider one scrolls
  function fit() {
    if (window.innerWidth > 600) return;
    document.querySelectorAll(".bd-article div.cell_output pre").forEach(function (pre) {
      if (pre.dataset.courseFit) return;
      pre.dataset.courseFit = "1";
      const ratio = pre.clientWidth / pre.scrollWidth;
      if (ratio < 1 && ratio >= 0.7) {
        const size = parseFloat(getComputedStyle(pre).fontSize);
        pre.style.fontSize = (size * ratio * 0.98).toFixed(2) + "px";
      }
    });
  }
  function start() {
    mark();
    fit();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();

// A number and its unit stay on one line ("76.0 %", "65 M", "90 MiB", "2.5 s"): the space between
// them in the prose becomes a non-breaking one.
(function () {
  const UNIT = /(\d) (%|[kMG]i?B\b|[kMGT]\b|ms\b|s\b|px\b|pt\b)/g;
  function keep() {
    document.querySelectorAll(".bd-article p, .bd-article li, .bd-article figcaption, .bd-article td, .bd-article th").forEach(function (el) {
      const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT, {
        acceptNode: function (t) {
          return t.parentElement.closest("code, pre, mjx-container, .math, script, style") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT;
        },
      });
      let t;
      while ((t = walk.nextNode())) {
        if (UNIT.test(t.nodeValue)) t.nodeValue = t.nodeValue.replace(UNIT, "$1\u00a0$2");
        UNIT.lastIndex = 0;
      }
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", keep);
  else keep();
})();

// A result table (course-table): a value without a space (a number, a date, a name) stays whole on
// one line; text with spaces wraps between its words. A table still too wide scrolls in its box.
(function () {
  function keepWhole() {
    document.querySelectorAll(".bd-article table.course-table td, .bd-article table.course-table th").forEach(function (cell) {
      if (!/\s/.test(cell.textContent.trim())) cell.classList.add("course-whole");
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", keepWhole);
  else keepWhole();
})();

// On a narrow screen a display formula wider than the column is set smaller until it fits, down to
// 70 % of its size; one that would need more still scrolls, with its shadow at the edge.
(function () {
  function fitFormulas() {
    document.querySelectorAll('.bd-article mjx-container[display="true"]').forEach(function (m) {
      // MathJax sets the formula's own size (about 127 %, to match the text's letters): scale that
      if (m.dataset.courseSize === undefined) m.dataset.courseSize = m.style.fontSize || "";
      m.style.fontSize = m.dataset.courseSize;
      const box = m.closest("div.math") || m.parentElement;
      const avail = m.clientWidth || box.clientWidth;
      const need = m.scrollWidth;
      if (need > avail + 1) {
        const ratio = avail / need;
        const own = parseFloat(m.dataset.courseSize) || 100;
        if (ratio >= 0.7) m.style.fontSize = Math.floor(own * ratio * 0.98) + "%";
      }
    });
  }
  function start() {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) MathJax.startup.promise.then(fitFormulas);
    setTimeout(fitFormulas, 1200);
    window.addEventListener("resize", fitFormulas);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
