"""Plots shared by the chapters: attention heatmaps with token labels."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes


def _to_2d(weights: torch.Tensor | np.ndarray) -> np.ndarray:
    arr = weights.detach().cpu().float().numpy() if isinstance(weights, torch.Tensor) else np.asarray(weights)
    arr = np.squeeze(arr)
    if arr.ndim != 2:
        raise ValueError(
            f"plot_attention needs one (queries, keys) matrix, got shape {arr.shape}; "
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

    ``keys``/``queries`` label the axes (``queries`` defaults to ``keys`` for a square
    self-attention matrix).  ``annotate=True`` writes each weight in its cell.
    """
    arr = _to_2d(weights)
    n_q, n_k = arr.shape
    if queries is None and keys is not None and n_q == n_k:
        queries = keys
    for name, labels, n in (("keys", keys, n_k), ("queries", queries, n_q)):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{len(labels)} {name} labels for a matrix with {n} {name} (shape {arr.shape})")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.45 * n_k + 2.5, 0.45 * n_q + 1.5))
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
                ax.text(j, i, f"{arr[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if arr[i, j] > 0.6 * hi else "white")
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def plot_attention_grid(
    attentions: Sequence[torch.Tensor],
    tokens: Sequence[str],
    layers: Sequence[int],
    heads: Sequence[int],
    batch_index: int = 0,
    size: float = 2.6,
) -> plt.Figure:
    """A static grid of attention maps: one row per layer, one column per head.

    ``attentions`` is what Hugging Face models return with ``output_attentions=True``: one
    ``(batch, heads, L, L)`` tensor per layer.  The page shows this even without JavaScript.
    """
    fig, axes = plt.subplots(len(layers), len(heads), figsize=(size * len(heads), size * len(layers)), squeeze=False)
    for r, layer in enumerate(layers):
        for c, head in enumerate(heads):
            ax = axes[r][c]
            plot_attention(attentions[layer][batch_index, head], tokens, ax=ax, colorbar=False)
            ax.set_title(f"layer {layer}, head {head}", fontsize=9)
            ax.tick_params(labelsize=6)
            ax.set_xlabel("")
            ax.set_ylabel("")
            if c:
                ax.set_yticklabels([])
            if r < len(layers) - 1:
                ax.set_xticklabels([])
    fig.tight_layout()
    return fig
