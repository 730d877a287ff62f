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
    layers: Sequence[int],
    heads: Sequence[int],
    batch_index: int = 0,
    size: float | None = None,
) -> plt.Figure:
    """A static grid of attention maps: one row per layer, one column per head.

    ``attentions`` is what Hugging Face models return with
    ``output_attentions=True``: one ``(batch, heads, L, L)`` tensor per layer.
    The page shows this even without JavaScript.  ``size`` is each panel's side
    in inches (default: the grid fills the page's width).
    """
    if size is None:
        size = min(2.6, 6.6 / max(len(heads), 1))
    fig, axes = plt.subplots(
        len(layers),
        len(heads),
        figsize=(size * len(heads), size * len(layers)),
        squeeze=False,
    )
    for r, layer in enumerate(layers):
        for c, head in enumerate(heads):
            ax = axes[r][c]
            plot_attention(
                attentions[layer][batch_index, head],
                tokens,
                ax=ax,
                colorbar=False,
            )
            ax.set_title(f"layer {layer}, head {head}", fontsize=10)
            ax.tick_params(labelsize=9)
            ax.set_xlabel("")
            ax.set_ylabel("")
            if c:
                ax.set_yticklabels([])
            if r < len(layers) - 1:
                ax.set_xticklabels([])
    fig.tight_layout()
    return fig
