"""Plots shared by the chapters: the course's figure defaults, and attention
heatmaps with token labels.

Importing the package applies the course's figure defaults
(``use_course_style``): figures sized for the page's content column, with fonts
that stay readable there.  A figure wider than the column is shrunk by the
browser, and its text with it; ``smallest_text_pt`` says how large a figure's
smallest text appears on the page, and the book is built with a check that
every figure's text appears at least ``MIN_TEXT_PT`` points tall.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

# The page's content column is 688 CSS px wide at a 1280 px desktop window
# (measured in the site check); a figure saved at 100 dpi wider than that is
# shrunk to fit.
CONTENT_PX = 688
MIN_TEXT_PT = 8.0

COURSE_STYLE = {
    # 640 px at 100 dpi: fits the column unshrunk
    "figure.figsize": (6.4, 3.6),
    "figure.dpi": 100,
    "savefig.dpi": "figure",
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "figure.titlesize": 13,
    "figure.hooks": ["transformer_course.plotting:watch_readability"],
}

# Figures drawn so far whose smallest text appears below MIN_TEXT_PT on the
# page: (IPython cell number or None, smallest size in pt, that text).
UNREADABLE: list[tuple[int | None, float, str]] = []


def use_course_style() -> None:
    """Apply the course's figure defaults (done once when
    ``transformer_course`` is imported).

    In a notebook, figures are also stored at twice their resolution and
    shown at their size (``"retina"``): sharp on high-density screens.
    """
    # rcParams' keys are typed as literals
    matplotlib.rcParams.update(COURSE_STYLE)  # type: ignore[arg-type]
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:  # plain Python: no inline figures to format
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")


def smallest_text_pt(
    fig: Figure, content_px: int = CONTENT_PX
) -> tuple[float, str]:
    """The size, in points as a reader sees it, of ``fig``'s smallest visible
    text, and that text.

    The figure is saved like a notebook saves it (``bbox_inches="tight"``, at
    ``savefig.dpi``) and shown at most ``content_px`` CSS pixels wide; 1 pt is
    96/72 CSS px.
    """
    # Agg-based canvases (inline, Agg) have one
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    dpi = (
        fig.dpi
        if matplotlib.rcParams["savefig.dpi"] == "figure"
        else float(matplotlib.rcParams["savefig.dpi"])
    )
    width_px = (
        fig.get_tightbbox(renderer).width
        + 2 * matplotlib.rcParams["savefig.pad_inches"]
    ) * dpi
    shrink = min(1.0, content_px / width_px)
    smallest, which = float("inf"), ""
    for text in fig.findobj(matplotlib.text.Text):
        if (
            not text.get_visible()
            or not text.get_text().strip()
            or text.get_figure(root=True) is not fig
        ):
            continue
        bbox = text.get_window_extent(renderer)
        if bbox.width == 0 or not fig.bbox.overlaps(bbox):
            continue
        shown = cast(float, text.get_fontsize()) * dpi / 96 * shrink
        if shown < smallest:
            smallest, which = shown, text.get_text()
    return float(smallest), which


def _check_readability(event) -> None:
    fig = event.canvas.figure
    size, text = smallest_text_pt(fig)
    if size < MIN_TEXT_PT:
        try:
            cell = get_ipython().execution_count  # type: ignore[name-defined]
        except NameError:
            cell = None
        UNREADABLE.append((cell, round(float(size), 1), text))


def watch_readability(fig: Figure) -> None:
    """matplotlib figure hook: measure the text of every figure each time it is
    drawn."""
    fig.canvas.mpl_connect("draw_event", _check_readability)


def _to_2d(weights: torch.Tensor | np.ndarray) -> np.ndarray:
    arr = (
        weights.detach().cpu().float().numpy()
        if isinstance(weights, torch.Tensor)
        else np.asarray(weights)
    )
    if arr.ndim > 2:  # drop batch / head axes of size 1; keep a 1-row map
        arr = np.squeeze(arr)
    if arr.ndim != 2:
        raise ValueError(
            "plot_attention needs one (queries, keys) matrix, "
            f"got shape {arr.shape}; "
            "select a batch element and a head first, e.g. weights[0, head]"
        )
    return arr


def plot_attention(
    weights: torch.Tensor | np.ndarray,
    keys: Sequence[str] | None = None,
    queries: Sequence[str] | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool = False,
    cmap: str = "viridis",
    colorbar: bool = True,
    vmin: float | None = 0.0,
    vmax: float | None = None,
) -> Axes:
    """Heatmap of one attention matrix: rows are queries, columns are keys.

    ``keys``/``queries`` label the axes (``queries`` defaults to ``keys`` for a
    square self-attention matrix).  ``annotate=True`` writes each weight in its
    cell.
    """
    arr = _to_2d(weights)
    n_q, n_k = arr.shape
    if queries is None and keys is not None and n_q == n_k:
        queries = keys
    for name, labels, n in (("keys", keys, n_k), ("queries", queries, n_q)):
        if labels is not None and len(labels) != n:
            raise ValueError(
                f"{len(labels)} {name} labels for a matrix with {n} {name} "
                f"(shape {arr.shape})"
            )
    if ax is None:
        # at most 6.6 in wide: the page shows it unshrunk
        cell = min(0.45, 4.1 / max(n_k, 1))
        _, ax = plt.subplots(figsize=(cell * n_k + 2.5, cell * n_q + 1.5))
    im = ax.imshow(arr, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_k))
    ax.set_yticks(range(n_q))
    if keys is not None:
        ax.set_xticklabels(list(keys), rotation=90)
    if queries is not None:
        ax.set_yticklabels(list(queries))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if annotate:
        hi = arr.max() if arr.size else 1.0
        for i in range(n_q):
            for j in range(n_k):
                ax.text(
                    j,
                    i,
                    f"{arr[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="black" if arr[i, j] > 0.6 * hi else "white",
                )
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_attention_grid(
    attentions: Sequence[torch.Tensor],
    tokens: Sequence[str],
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    batch_index: int = 0,
    size: float | None = None,
    panels: Sequence[tuple[int, int]] | None = None,
    titles: Sequence[str] | None = None,
    ncols: int | None = None,
    vmax: float | None = 1.0,
    colorbar: bool = True,
) -> plt.Figure:
    """A static grid of attention maps on one colour scale.

    ``attentions`` is what Hugging Face models return with
    ``output_attentions=True``: one ``(batch, heads, L, L)`` tensor per layer.
    Either ``layers`` and ``heads`` (one row per layer, one column per head),
    or ``panels``, a list of ``(layer, head)`` pairs laid out ``ncols`` to a
    row (default 2); ``titles`` replaces the panels' "layer l, head h".

    Every map uses the colour scale 0 to ``vmax`` (``None``: the largest
    weight shown), so equal colours mean equal weights, and ``colorbar`` adds
    one bar for all.  The grid fills the page's width (``size``: each panel's
    width in inches).  Token labels are written on the left column and the
    bottom row only, at least ``MIN_TEXT_PT`` points and never overlapping: if
    the panels are too small for every token, every second (third, ...) one
    is labelled.
    """
    if panels is None:
        if layers is None or heads is None:
            raise ValueError(
                "pass layers and heads (a layers x heads grid), "
                "or panels=[(layer, head), ...]"
            )
        panels = [(layer, head) for layer in layers for head in heads]
        ncols = len(heads)
    elif layers is not None or heads is not None:
        raise ValueError("pass either layers and heads, or panels, not both")
    panels = list(panels)
    if not panels:
        raise ValueError("no panels to draw: give at least one layer and head")
    if titles is not None and len(titles) != len(panels):
        raise ValueError(
            f"{len(titles)} titles for {len(panels)} panels; "
            "pass one title per panel"
        )
    ncols = min(ncols or 2, len(panels))
    nrows = -(-len(panels) // ncols)
    n = len(tokens)
    maps = [
        _to_2d(attentions[layer][batch_index, head]) for layer, head in panels
    ]
    top = vmax if vmax is not None else max(float(m.max()) for m in maps)
    # inches: token labels on the left, gaps, the colour bar on the right
    label_w, gap, bar_w = 0.75, 0.12, 0.75 if colorbar else 0.0
    if size is None:
        room = CONTENT_PX / 100 - 0.1 - label_w - bar_w - gap * (ncols - 1)
        size = min(2.8, room / ncols)
    # the distance between two labels, in points; text needs about 1.2x its
    # size to stay clear of its neighbour
    pitch = size * 72 / max(n, 1)
    fontsize = min(10.0, pitch / 1.2)
    step = 1
    while fontsize < MIN_TEXT_PT:
        step += 1
        fontsize = min(10.0, step * pitch / 1.2)
    fontsize = max(fontsize, MIN_TEXT_PT)
    title_size = 10.0
    fig_w = label_w + ncols * size + gap * (ncols - 1) + bar_w + 0.1
    row_h = size + 0.45  # a panel and its title
    fig_h = nrows * row_h + label_w + 0.1
    fig = plt.figure(figsize=(fig_w, fig_h))
    ticks = list(range(0, n, step))
    labels = [str(tokens[i]) for i in ticks]
    im = None
    for idx, ((layer, head), arr) in enumerate(zip(panels, maps)):
        r, c = divmod(idx, ncols)
        left = (label_w + c * (size + gap)) / fig_w
        bottom = (fig_h - 0.05 - (r + 1) * row_h) / fig_h
        ax = fig.add_axes((left, bottom, size / fig_w, size / fig_h))
        im = ax.imshow(arr, cmap="viridis", vmin=0.0, vmax=top, aspect="auto")
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        last_in_column = idx + ncols >= len(panels)
        if last_in_column:
            ax.set_xticklabels(labels, rotation=90, fontsize=fontsize)
        else:
            ax.set_xticklabels([])
        if c == 0:
            ax.set_yticklabels(labels, fontsize=fontsize)
        else:
            ax.set_yticklabels([])
        ax.tick_params(length=2)
        if titles is not None:
            title = titles[idx]
        elif size >= 1.4:
            title = f"layer {layer}, head {head}"
        else:
            title = f"L{layer} H{head}"
        ax.set_title(title, fontsize=title_size)
    if colorbar and im is not None:
        x0 = (label_w + ncols * size + gap * (ncols - 1) + 0.12) / fig_w
        height = min(nrows * row_h - 0.45, 3.0)
        y0 = (fig_h - 0.05 - 0.45 - height) / fig_h
        cax = fig.add_axes((x0, y0, 0.12 / fig_w, height / fig_h))
        fig.colorbar(im, cax=cax, label="attention weight")
        cax.tick_params(labelsize=10)
    return fig
