"""Diagrams of the Transformer's parts, drawn by code so that they stay true to
the package.

Each function returns a matplotlib ``Figure``.  The figures are narrow (at most
:data:`MAX_WIDTH_IN` inches) and use large fonts (at least :data:`MIN_FONT_PT`
points), so they stay readable at the book's page width (about 730 px) and when
a phone shrinks them to 390 px.  Where a diagram shows numbers (weights, tensor
shapes), they are computed from the arguments.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

MAX_WIDTH_IN = 6.0
MIN_FONT_PT = 13

COLORS = {
    "query": "#f4a261",
    "key": "#8ecae6",
    "value": "#b7e4c7",
    "attn": "#ffd166",
    "linear": "#d0bdf4",
    "norm": "#f7c6c7",
    "ffn": "#a8dadc",
    "io": "#e9ecef",
    "stream": "#6c757d",
}


def _canvas(width: float, height: float) -> tuple[Figure, plt.Axes]:
    """A figure whose data coordinates are inches: (0, 0) bottom left,
    (width, height) top right."""
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    return fig, ax


def _box(
    ax: plt.Axes,
    x: float,
    y: float,
    w: float,
    h: float,
    text: str,
    color: str,
    size: float = MIN_FONT_PT + 1,
    weight: str = "normal",
) -> None:
    """A rounded box centred on (x, y)."""
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=color,
            edgecolor="#333333",
            linewidth=1.2,
        )
    )
    ax.text(
        x, y, text, ha="center", va="center", fontsize=size, fontweight=weight
    )


def _arrow(
    ax: plt.Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    color: str = "#333333",
    width: float = 1.4,
    style: str = "-|>",
    connection: str = "arc3",
) -> None:
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle=style,
            mutation_scale=16,
            color=color,
            linewidth=width,
            connectionstyle=connection,
            shrinkA=0,
            shrinkB=0,
        )
    )


def _text(
    ax: plt.Axes,
    x: float,
    y: float,
    text: str,
    size: float = MIN_FONT_PT,
    **kwargs,
) -> None:
    ax.text(x, y, text, fontsize=size, **kwargs)


def soft_lookup(
    scores: list[float] | tuple[float, ...] = (0.5, 2.5, 1.2, -0.5),
) -> Figure:
    """Attention as a soft dictionary lookup: one query, a key and a value per
    slot.

    ``scores`` are the (already scaled) scores ``q·k_i/√d_k`` of the slots; the
    weights drawn are their softmax, and the output is ``Σ w_i v_i``.
    """
    if not 2 <= len(scores) <= 6:
        raise ValueError(
            f"soft_lookup draws 2 to 6 slots, got {len(scores)} scores; "
            "pass fewer scores"
        )
    weights = torch.softmax(
        torch.tensor(scores, dtype=torch.float64), dim=0
    ).tolist()
    n = len(scores)
    row_h = 0.75
    height = 2.4 + n * row_h
    fig, ax = _canvas(MAX_WIDTH_IN, height)
    top = height - 1.5
    _box(
        ax,
        0.75,
        top + 0.85,
        1.1,
        0.6,
        "query q",
        COLORS["query"],
        weight="bold",
    )
    _text(
        ax,
        2.05,
        height - 0.25,
        "key",
        ha="center",
        va="top",
        fontweight="bold",
    )
    _text(
        ax,
        3.15,
        height - 0.25,
        "weight",
        ha="center",
        va="top",
        fontweight="bold",
    )
    _text(
        ax,
        5.05,
        height - 0.25,
        "value",
        ha="center",
        va="top",
        fontweight="bold",
    )
    for i, (_s, w) in enumerate(zip(scores, weights)):
        y = top - i * row_h
        _box(ax, 2.05, y, 0.8, 0.5, f"k{i + 1}", COLORS["key"])
        _arrow(ax, (0.75, top + 0.55), (1.62, y), connection="arc3,rad=0.1")
        ax.add_patch(
            FancyBboxPatch(
                (2.6, y - 0.2),
                1.25 * w + 0.01,
                0.4,
                boxstyle="square,pad=0",
                facecolor=COLORS["attn"],
                edgecolor="#333333",
            )
        )
        _text(ax, 2.65 + 1.25 * w + 0.05, y, f"{w:.2f}", va="center")
        _box(ax, 5.05, y, 0.8, 0.5, f"v{i + 1}", COLORS["value"])
    bottom = top - (n - 1) * row_h
    _text(
        ax,
        0.1,
        bottom - 0.05,
        "weights =\nsoftmax(q·k/√d)",
        va="center",
        size=MIN_FONT_PT,
    )
    out_y = bottom - 0.95
    _box(
        ax,
        3.55,
        out_y,
        3.6,
        0.6,
        "output = Σ weightᵢ · vᵢ",
        COLORS["io"],
        weight="bold",
    )
    _arrow(ax, (5.05, bottom - 0.25), (5.05, out_y + 0.3))
    return fig


def multi_head(
    batch: int = 2, length: int = 10, d_model: int = 512, num_heads: int = 8
) -> Figure:
    """Multi-head attention as tensor shapes: project, split into heads, attend
    per head, concatenate, W_O."""
    for name, value in (
        ("batch", batch),
        ("length", length),
        ("d_model", d_model),
        ("num_heads", num_heads),
    ):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if d_model % num_heads:
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}; "
            "pick a divisor of d_model"
        )
    d_k = d_model // num_heads
    B, L, h = batch, length, num_heads
    height = 8.4
    fig, ax = _canvas(MAX_WIDTH_IN, height)
    cx = 2.4
    sx = 4.85  # x of the shape annotations

    def shape(y: float, dims: tuple[int, ...], names: str) -> None:
        _text(
            ax,
            sx,
            y + 0.08,
            str(dims),
            ha="center",
            va="bottom",
            fontweight="bold",
        )
        _text(
            ax,
            sx,
            y - 0.02,
            names,
            ha="center",
            va="top",
            size=MIN_FONT_PT,
            color="#555555",
        )

    ys = [7.8, 6.55, 5.3, 3.75, 2.2, 0.7]
    _box(ax, cx, ys[0], 2.6, 0.6, "input x", COLORS["io"], weight="bold")
    shape(ys[0], (B, L, d_model), "batch, L, d_model")
    for j, (name, color) in enumerate(
        (("Q", "query"), ("K", "key"), ("V", "value"))
    ):
        _box(
            ax,
            cx - 0.95 + 0.95 * j,
            ys[1],
            0.85,
            0.6,
            f"W_{name}",
            COLORS[color],
        )
        _arrow(ax, (cx, ys[0] - 0.3), (cx - 0.95 + 0.95 * j, ys[1] + 0.3))
    shape(ys[1], (B, L, d_model), "each of Q, K, V")
    _box(ax, cx, ys[2], 2.9, 0.6, f"split into {h} heads", COLORS["linear"])
    for j in range(3):
        _arrow(ax, (cx - 0.95 + 0.95 * j, ys[1] - 0.3), (cx, ys[2] + 0.3))
    shape(ys[2], (B, h, L, d_k), f"d_k = {d_model}/{h} = {d_k}")
    shown = min(h, 4)
    for j in range(shown):  # a stack of head boxes, front one labelled
        off = 0.12 * (shown - 1 - j)
        _box(ax, cx - off, ys[3] + off, 2.8, 0.8, "", COLORS["attn"])
    ax.text(
        cx,
        ys[3] + 0.12,
        "attention per head",
        ha="center",
        va="center",
        fontsize=MIN_FONT_PT + 1,
    )
    ax.text(
        cx,
        ys[3] - 0.2,
        "softmax(QKᵀ/√d_k) V",
        ha="center",
        va="center",
        fontsize=MIN_FONT_PT,
    )
    _arrow(ax, (cx, ys[2] - 0.3), (cx, ys[3] + 0.45 + 0.12 * (shown - 1)))
    shape(ys[3], (B, h, L, d_k), f"{h} heads at once")
    _box(ax, cx, ys[4], 2.9, 0.6, "concatenate heads", COLORS["linear"])
    _arrow(ax, (cx, ys[3] - 0.42), (cx, ys[4] + 0.3))
    shape(ys[4], (B, L, h * d_k), f"{h} × {d_k} = {d_model}")
    _box(ax, cx, ys[5], 2.6, 0.6, "W_O", COLORS["linear"], weight="bold")
    _arrow(ax, (cx, ys[4] - 0.3), (cx, ys[5] + 0.3))
    shape(ys[5], (B, L, d_model), "output, like x")
    return fig


def _block(ax: plt.Axes, x: float, pre_norm: bool, title: str) -> None:
    """One Transformer sublayer with its residual connection, post-norm or
    pre-norm, centred at x."""
    height = 7.2
    _text(
        ax,
        x,
        height - 0.2,
        title,
        ha="center",
        va="top",
        size=MIN_FONT_PT + 2,
        fontweight="bold",
    )
    stream_x = x - 0.6
    y_in, y_out = 0.35, height - 1.0
    # the residual stream: a thick grey line from input to output
    ax.plot(
        [stream_x, stream_x],
        [y_in + 0.3, y_out - 0.3],
        color=COLORS["stream"],
        linewidth=6,
        solid_capstyle="butt",
        zorder=0,
        alpha=0.6,
    )
    _box(ax, stream_x, y_in, 1.0, 0.55, "x", COLORS["io"], weight="bold")
    plus_y = 4.2 if pre_norm else 3.5
    ax.add_patch(
        plt.Circle(
            (stream_x, plus_y),
            0.24,
            facecolor="white",
            edgecolor="#333333",
            linewidth=1.5,
            zorder=3,
        )
    )
    ax.text(
        stream_x,
        plus_y,
        "+",
        ha="center",
        va="center",
        fontsize=MIN_FONT_PT + 5,
        zorder=4,
    )
    side = x + 0.7
    if pre_norm:
        _box(ax, side, 1.55, 1.4, 0.55, "LayerNorm", COLORS["norm"])
        _box(ax, side, 2.75, 1.4, 0.75, "sublayer\n+ dropout", COLORS["attn"])
        _arrow(
            ax,
            (stream_x, 1.05),
            (side - 0.7, 1.55),
            connection="arc3,rad=-0.3",
        )
        _arrow(ax, (side, 1.83), (side, 2.37))
        _arrow(
            ax,
            (side, 3.13),
            (stream_x + 0.24, plus_y),
            connection="arc3,rad=0.3",
        )
        _box(
            ax, stream_x, y_out, 1.0, 0.55, "out", COLORS["io"], weight="bold"
        )
        _text(
            ax,
            stream_x + 0.35,
            5.3,
            "x + f(LN(x))\nthe stream is\nnever normalised",
            ha="left",
            va="center",
            size=MIN_FONT_PT,
        )
    else:
        _box(ax, side, 1.95, 1.4, 0.75, "sublayer\n+ dropout", COLORS["attn"])
        _arrow(
            ax,
            (stream_x, 1.05),
            (side - 0.7, 1.95),
            connection="arc3,rad=-0.3",
        )
        _arrow(
            ax,
            (side, 2.33),
            (stream_x + 0.24, plus_y),
            connection="arc3,rad=0.3",
        )
        _box(ax, stream_x, 4.6, 1.4, 0.55, "LayerNorm", COLORS["norm"])
        _box(
            ax, stream_x, y_out, 1.0, 0.55, "out", COLORS["io"], weight="bold"
        )
        _text(
            ax,
            stream_x + 0.35,
            5.4,
            "LN(x + f(x))\nthe stream is\nnormalised",
            ha="left",
            va="center",
            size=MIN_FONT_PT,
        )


def norm_placement() -> Figure:
    """A sublayer with its residual connection: post-norm (2017 paper) next to
    pre-norm (GPT-2 on)."""
    fig, ax = _canvas(MAX_WIDTH_IN, 7.2)
    _block(ax, 1.5, pre_norm=False, title="post-norm")
    _block(ax, 4.5, pre_norm=True, title="pre-norm")
    ax.plot([3.0, 3.0], [0.2, 6.8], color="#bbbbbb", linewidth=1)
    return fig


def _stack(
    ax: plt.Axes,
    x: float,
    w: float,
    bottom: str,
    blocks: list[tuple[str, str]],
    top: str,
    num_layers: int,
) -> list[float]:
    """One stack drawn bottom-up: input, embedding, the repeated blocks (dashed
    frame, × N), the top.

    Returns the y of every box, bottom to top.
    """
    ys = [0.45, 1.5] + [2.95 + 1.15 * i for i in range(len(blocks))]
    frame_top = ys[-1] + 0.55
    ys.append(frame_top + 1.0)
    hs = [0.6, 0.75] + [0.75] * len(blocks) + [0.75 if "\n" in top else 0.6]
    _box(ax, x, ys[0], w, hs[0], bottom, COLORS["io"])
    _box(ax, x, ys[1], w, hs[1], "embedding\n+ position", COLORS["linear"])
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2 - 0.12, 2.3),
            w + 0.24,
            frame_top - 2.3,
            boxstyle="round,pad=0.02",
            facecolor="none",
            edgecolor="#333333",
            linestyle="--",
        )
    )
    for y, (text, kind) in zip(ys[2:-1], blocks):
        _box(
            ax,
            x,
            y,
            w - 0.2,
            0.75,
            text,
            COLORS[kind],
            weight="bold" if kind == "query" else "normal",
        )
    _text(
        ax,
        x + w / 2 + 0.1,
        frame_top + 0.05,
        f"× {num_layers}",
        ha="right",
        va="bottom",
        fontweight="bold",
    )
    is_memory = top == "memory"
    _box(
        ax,
        x,
        ys[-1],
        w,
        hs[-1],
        top,
        COLORS["value" if is_memory else "io"],
        weight="bold" if is_memory else "normal",
    )
    for (a, ha), (b, hb) in zip(zip(ys, hs), zip(ys[1:], hs[1:])):
        _arrow(ax, (x, a + ha / 2), (x, b - hb / 2))
    return ys


def encoder_decoder(num_layers: int = 6) -> Figure:
    """The encoder–decoder Transformer: the encoder's output is the keys and
    values of every decoder layer's cross-attention."""
    if num_layers <= 0:
        raise ValueError(f"num_layers must be positive, got {num_layers}")
    fig, ax = _canvas(MAX_WIDTH_IN, 7.9)
    ex, dx, w = 1.35, 4.45, 2.3
    enc = _stack(
        ax,
        ex,
        w,
        "source tokens",
        [("self-\nattention", "attn"), ("feed-forward", "ffn")],
        "memory",
        num_layers,
    )
    dec = _stack(
        ax,
        dx,
        w,
        "target so far",
        [
            ("masked self-\nattention", "attn"),
            ("cross-\nattention", "query"),
            ("feed-forward", "ffn"),
        ],
        "linear + softmax\nnext token",
        num_layers,
    )
    _text(
        ax,
        ex,
        7.85,
        "encoder",
        ha="center",
        va="top",
        size=MIN_FONT_PT + 2,
        fontweight="bold",
    )
    _text(
        ax,
        dx,
        7.85,
        "decoder",
        ha="center",
        va="top",
        size=MIN_FONT_PT + 2,
        fontweight="bold",
    )
    # memory -> every decoder layer's cross-attention, as keys and values
    _arrow(
        ax,
        (ex + w / 2, enc[-1]),
        (dx - (w - 0.2) / 2, dec[3]),
        color="#c1121f",
        width=2.2,
        connection="arc3,rad=-0.25",
    )
    _text(
        ax,
        3.0,
        enc[-1] + 0.1,
        "K, V",
        ha="center",
        va="bottom",
        color="#c1121f",
        fontweight="bold",
    )
    _text(
        ax,
        dx - 0.1,
        dec[3] - 0.57,
        "Q",
        ha="right",
        va="center",
        color="#c1121f",
        fontweight="bold",
    )
    return fig


def model_families(num_layers: int = 12) -> Figure:
    """Encoder-only (BERT) and decoder-only (GPT) stacks side by side: the same
    blocks, other masks."""
    if num_layers <= 0:
        raise ValueError(f"num_layers must be positive, got {num_layers}")
    fig, ax = _canvas(MAX_WIDTH_IN, 6.8)
    for x, title, attention, top in (
        (
            1.5,
            "encoder-only (BERT)",
            "self-attention\n(padding mask)",
            "a vector\nper token",
        ),
        (
            4.5,
            "decoder-only (GPT)",
            "masked self-\nattention",
            "next-token\nscores",
        ),
    ):
        _stack(
            ax,
            x,
            2.6,
            "tokens",
            [(attention, "attn"), ("feed-forward", "ffn")],
            top,
            num_layers,
        )
        _text(
            ax,
            x,
            6.75,
            title,
            ha="center",
            va="top",
            size=MIN_FONT_PT + 1,
            fontweight="bold",
        )
    return fig
