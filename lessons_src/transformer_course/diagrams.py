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


def _lookup(
    weights: list[float],
    query_label: str,
    output_label: str,
    weight_format: str,
    footer: str,
) -> Figure:
    """The layout shared by ``soft_lookup`` and ``hard_lookup``: a query, one
    slot (key, weight bar, value) per weight and the output.  An arrow runs
    from the query to every key with a non-zero weight, and from each such
    value to the output, as wide as its weight."""
    n = len(weights)
    row_h = 0.75
    height = 1.75 + n * row_h
    fig, ax = _canvas(MAX_WIDTH_IN, height)
    top = height - 1.45  # y of the first slot
    key_x, bar_x, value_x, out_x = 1.75, 2.25, 4.05, 5.3
    for x, label in (
        (key_x, "key"),
        (bar_x + 0.45, "weight"),
        (value_x, "value"),
        (out_x, "output"),
    ):
        _text(
            ax,
            x,
            height - 0.2,
            label,
            ha="center",
            va="top",
            fontweight="bold",
        )
    _box(
        ax,
        0.6,
        height - 0.45,
        1.05,
        0.55,
        query_label,
        COLORS["query"],
        weight="bold",
    )
    bottom = top - (n - 1) * row_h
    mid = (top + bottom) / 2
    _box(ax, out_x, mid, 1.25, 1.3, output_label, COLORS["io"], weight="bold")
    for i, w in enumerate(weights):
        y = top - i * row_h
        # one slot: a key, its weight and its value
        ax.add_patch(
            FancyBboxPatch(
                (key_x - 0.4, y - 0.31),
                value_x - key_x + 0.8,
                0.62,
                boxstyle="round,pad=0,rounding_size=0.1",
                facecolor="#f3f3f3",
                edgecolor="none",
                zorder=0,
            )
        )
        if w > 0:  # the query looks at this key
            _arrow(
                ax,
                (0.6, height - 0.73),
                (key_x - 0.35, y),
                connection="arc3,rad=0.15",
                width=1.0,
            )
        _box(ax, key_x, y, 0.6, 0.5, f"k{i + 1}", COLORS["key"])
        ax.add_patch(
            FancyBboxPatch(
                (bar_x, y - 0.17),
                w + 0.01,  # a bar of weight 1 is 1 unit long
                0.34,
                boxstyle="square,pad=0",
                facecolor=COLORS["attn"],
                edgecolor="#333333",
            )
        )
        _text(ax, bar_x + w + 0.06, y, format(w, weight_format), va="center")
        _box(ax, value_x, y, 0.6, 0.5, f"v{i + 1}", COLORS["value"])
        if w > 0:  # this value reaches the output, as strongly as its weight
            ax.add_patch(
                FancyArrowPatch(
                    (value_x + 0.32, y),
                    (
                        out_x - 0.64,
                        mid + 0.4 * (y - mid) / max(top - mid, 1e-9),
                    ),
                    arrowstyle="-|>",
                    mutation_scale=8 + 14 * w,
                    color="#2a7f62",
                    linewidth=0.6 + 6 * w,
                    shrinkA=0,
                    shrinkB=0,
                )
            )
    _text(ax, 0.1, bottom - 0.65, footer, va="center")
    return fig


def soft_lookup(
    scores: list[float] | tuple[float, ...] = (0.5, 2.5, 1.2, -0.5),
) -> Figure:
    """Attention as a soft dictionary lookup: one query, a key and a value per
    slot.

    ``scores`` are the (already scaled) scores ``q·k_i/√d_k`` of the slots; the
    weights drawn are their softmax, and the output is ``Σ w_i v_i``.  Every
    value flows into the output: its arrow's width is proportional to its
    weight.
    """
    if not 2 <= len(scores) <= 6:
        raise ValueError(
            f"soft_lookup draws 2 to 6 slots, got {len(scores)} scores; "
            "pass fewer scores"
        )
    weights = torch.softmax(
        torch.tensor(scores, dtype=torch.float64), dim=0
    ).tolist()
    return _lookup(
        weights,
        "query q",
        "Σ wᵢ vᵢ",
        ".2f",
        "weights = softmax(q·kᵢ/√dₖ);  value arrow width ∝ weight",
    )


HEAD_COLORS = ("#f4a6a6", "#9fd8cb", "#f6d186", "#b8c0ff")


def _feature_strip(
    ax: plt.Axes, x: float, y: float, width: float, d_model: int, h: int
) -> None:
    """The ``d_model`` features of a vector as a strip centred on (x, y), one
    colour per head: head i owns features i*d_head to (i+1)*d_head - 1."""
    d_head = d_model // h
    block = width / h
    left = x - width / 2
    for i in range(h):
        x0 = left + i * block
        ax.add_patch(
            FancyBboxPatch(
                (x0, y - 0.17),
                block,
                0.34,
                boxstyle="square,pad=0",
                facecolor=HEAD_COLORS[i % len(HEAD_COLORS)],
                edgecolor="#333333",
                linewidth=1.2,
            )
        )
        if d_model <= 16:  # thin lines between single features
            for j in range(1, d_head):
                fx = x0 + j * block / d_head
                ax.plot(
                    [fx, fx], [y - 0.17, y + 0.17], color="#777777", lw=0.6
                )
        if block >= 1.3:
            label = f"features {i * d_head}–{(i + 1) * d_head - 1}"
        else:
            label = f"head {i}" if block >= 0.9 else str(i)
        _text(
            ax,
            x0 + block / 2,
            y,
            label,
            ha="center",
            va="center",
            bbox={
                "facecolor": HEAD_COLORS[i % len(HEAD_COLORS)],
                "edgecolor": "none",
                "pad": 0.5,
            },
        )


def multi_head(
    batch: int = 2, length: int = 10, d_model: int = 512, num_heads: int = 8
) -> Figure:
    """Multi-head attention as tensor shapes: project, split the features into
    heads (coloured by head), attend per head, concatenate, W^O."""
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
    d_head = d_model // num_heads
    B, L, h = batch, length, num_heads
    height = 8.7
    fig, ax = _canvas(MAX_WIDTH_IN, height)
    cx = 2.25
    sx = 4.95  # x of the shape annotations
    wide = 3.3  # width of the split and concatenate boxes

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
            color="#555555",
        )

    ys = [8.2, 6.95, 5.5, 3.95, 2.3, 0.6]
    _box(ax, cx, ys[0], 2.6, 0.55, "input x", COLORS["io"], weight="bold")
    shape(ys[0], (B, L, d_model), "batch, L, d_model")
    xs = (cx - 1.05, cx, cx + 1.05)
    for x, (name, color) in zip(
        xs, (("Q", "query"), ("K", "key"), ("V", "value"))
    ):
        _box(ax, x, ys[1], 0.9, 0.55, f"$W^{name}$", COLORS[color])
        _arrow(ax, (cx, ys[0] - 0.28), (x, ys[1] + 0.28))
        # q, k and v each go through the split on their own
        _arrow(ax, (x, ys[1] - 0.28), (x, ys[2] + 0.5))
    shape(ys[1], (B, L, d_model), "each of q, k, v")
    _box(ax, cx, ys[2], wide, 1.0, "", COLORS["linear"])
    _text(ax, cx, ys[2] + 0.25, "split the features", ha="center", va="center")
    _feature_strip(ax, cx, ys[2] - 0.2, wide - 0.3, d_model, h)
    shape(ys[2], (B, h, L, d_head), f"d_head = {d_model}/{h} = {d_head}")
    if h <= len(HEAD_COLORS):  # one box per head, side by side
        slot = wide / h
        for i in range(h):
            x = cx - wide / 2 + slot * (i + 0.5)
            _box(
                ax,
                x,
                ys[3] + 0.2,
                slot - 0.12,
                0.6,
                f"head {i}" if slot >= 0.9 else str(i),
                HEAD_COLORS[i],
            )
            _arrow(ax, (x, ys[2] - 0.5), (x, ys[3] + 0.5))
            _arrow(ax, (x, ys[3] - 0.1), (x, ys[4] + 0.5))
    else:  # a stack of head boxes
        shown = 4
        for j in range(shown):
            off = 0.12 * (shown - 1 - j)
            _box(ax, cx - off, ys[3] + 0.2 + off, wide - 0.4, 0.6, "", "w")
        _text(ax, cx, ys[3] + 0.2, f"{h} heads", ha="center", va="center")
        _arrow(ax, (cx, ys[2] - 0.5), (cx, ys[3] + 0.5 + 0.12 * 3))
        _arrow(ax, (cx, ys[3] - 0.1), (cx, ys[4] + 0.5))
    _text(
        ax,
        cx,
        ys[3] - 0.35,
        "softmax(QᵢKᵢᵀ/√d_head) Vᵢ",
        ha="center",
        va="center",
        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
    )
    shape(ys[3], (B, h, L, d_head), "attention per head")
    _box(ax, cx, ys[4], wide, 1.0, "", COLORS["linear"])
    _text(ax, cx, ys[4] + 0.25, "concatenate", ha="center", va="center")
    _feature_strip(ax, cx, ys[4] - 0.2, wide - 0.3, d_model, h)
    shape(ys[4], (B, L, h * d_head), f"{h} × {d_head} = {d_model}")
    _box(ax, cx, ys[5], 2.6, 0.55, "$W^O$", COLORS["linear"], weight="bold")
    _arrow(ax, (cx, ys[4] - 0.5), (cx, ys[5] + 0.28))
    shape(ys[5], (B, L, d_model), "output, like x")
    return fig


def _plus(
    ax: plt.Axes, x: float, y: float, r: float, linewidth: float, size: float
) -> None:
    """The circled "+" where a residual connection adds back in."""
    ax.add_patch(
        plt.Circle(
            (x, y),
            r,
            facecolor="white",
            edgecolor="#333333",
            linewidth=linewidth,
            zorder=3,
        )
    )
    ax.text(x, y, "+", ha="center", va="center", fontsize=size, zorder=4)


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
    _plus(ax, stream_x, plus_y, 0.24, linewidth=1.5, size=MIN_FONT_PT + 5)
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
            "x + f(LN(x))\nthe stream is not\nnormalised here",
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


BLOCK_H, TAB_H, BLOCK_STEP = 0.7, 0.32, 1.42


def _stack(
    ax: plt.Axes,
    x: float,
    w: float,
    bottom: str,
    blocks: list[tuple[str, str]],
    top: str,
    num_layers: int,
    add_norm: bool = True,
) -> list[float]:
    """One stack drawn bottom-up: input, embedding, the repeated blocks (dashed
    frame, × N), the top.

    With ``add_norm``, every block (a sub-layer) has its "add & norm" tab on
    top, fed by the block and by a residual connection that bypasses it on
    the right (post-norm, as in the paper's figure).  Returns the y of every
    box, bottom to top.
    """
    step = BLOCK_STEP if add_norm else BLOCK_STEP - TAB_H - 0.1
    ys = [0.45, 1.5] + [2.85 + step * i for i in range(len(blocks))]
    # from a block's centre to its tab's, and to the top of what it draws
    tab_dy = BLOCK_H / 2 + 0.05 + TAB_H / 2
    top_dy = tab_dy + TAB_H / 2 if add_norm else BLOCK_H / 2
    frame_top = ys[-1] + top_dy + 0.15
    ys.append(frame_top + 0.95)
    hs = [0.6, 0.75] + [BLOCK_H] * len(blocks)
    hs.append(0.75 if "\n" in top else 0.6)
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
    bw, tw = w - 0.2, w - 0.6  # widths of a block and of its tab
    for y, (text, kind) in zip(ys[2:-1], blocks):
        _box(
            ax,
            x,
            y,
            bw,
            BLOCK_H,
            text,
            COLORS[kind],
            weight="bold" if kind == "query" else "normal",
        )
        if not add_norm:
            continue
        _box(ax, x, y + tab_dy, tw, TAB_H, "add & norm", COLORS["norm"], 13)
        # the residual connection: from below the block to its tab
        y0, xr = y - BLOCK_H / 2 - 0.17, x + w / 2
        ax.plot(
            [x, xr, xr],
            [y0, y0, y + tab_dy],
            color=COLORS["stream"],
            linewidth=1.6,
        )
        _arrow(
            ax,
            (xr, y + tab_dy),
            (x + tw / 2, y + tab_dy),
            color=COLORS["stream"],
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
    # arrows between boxes; above a block, from the top of its tab
    starts = [y + h / 2 for y, h in zip(ys, hs)]
    for i in range(2, len(ys) - 1):
        starts[i] = ys[i] + top_dy
    for a, (b, hb) in zip(starts, zip(ys[1:], hs[1:])):
        _arrow(ax, (x, a), (x, b - hb / 2))
    return ys


def encoder_decoder(num_layers: int = 6) -> Figure:
    """The encoder–decoder Transformer: the encoder's output is the keys and
    values of every decoder layer's cross-attention."""
    if num_layers <= 0:
        raise ValueError(f"num_layers must be positive, got {num_layers}")
    height = 8.6
    fig, ax = _canvas(MAX_WIDTH_IN, height)
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
    for x, title in ((ex, "encoder"), (dx, "decoder")):
        _text(
            ax,
            x,
            height - 0.05,
            title,
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
        dec[3] - BLOCK_H / 2 - 0.2,
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
    height = 6.2
    fig, ax = _canvas(MAX_WIDTH_IN, height)
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
            add_norm=False,
        )
        _text(
            ax,
            x,
            height - 0.05,
            title,
            ha="center",
            va="top",
            size=MIN_FONT_PT + 1,
            fontweight="bold",
        )
    return fig


def recurrence_vs_attention(
    num_tokens: int = 6, first_index: int = 1
) -> Figure:
    """How the first token reaches the last position: through every hidden
    state of a recurrent network (top), in one step of self-attention
    (bottom).

    The path from the first token is drawn in red; the top panel numbers its
    ``num_tokens - 1`` steps. Positions are numbered from ``first_index``
    (``x_1`` or, with 0, ``x_0`` is the first token).
    """
    if not isinstance(num_tokens, int) or not 2 <= num_tokens <= 7:
        raise ValueError(
            f"recurrence_vs_attention draws 2 to 7 tokens, got {num_tokens!r}"
        )
    n = num_tokens
    red, grey = "#c1121f", "#8d99ae"
    width, height = MAX_WIDTH_IN, 6.25
    fig, ax = _canvas(width, height)
    gap = min(0.95, (width - 1.0) / (n - 1))
    xs = [width / 2 + gap * (i - (n - 1) / 2) for i in range(n)]
    bw, bh = 0.6, 0.5

    def row(y: float, name: str, color: str) -> None:
        for i, x in enumerate(xs):
            label = f"${name}_{{{i + first_index}}}$"
            _box(ax, x, y, bw, bh, label, color)

    # top panel: the recurrent chain
    _text(
        ax,
        width / 2,
        height - 0.1,
        "recurrent network: one step at a time",
        ha="center",
        va="top",
        size=MIN_FONT_PT + 2,
        fontweight="bold",
    )
    y_tok, y_hid = 3.95, 5.15
    row(y_tok, "x", COLORS["io"])
    row(y_hid, "h", COLORS["linear"])
    for i, x in enumerate(xs):
        _arrow(
            ax,
            (x, y_tok + bh / 2),
            (x, y_hid - bh / 2),
            color=red if i == 0 else grey,
            width=2.4 if i == 0 else 1.4,
        )
    for i in range(n - 1):
        _arrow(
            ax,
            (xs[i] + bw / 2, y_hid),
            (xs[i + 1] - bw / 2, y_hid),
            color=red,
            width=2.4,
        )
        _text(
            ax,
            (xs[i] + xs[i + 1]) / 2,
            y_hid + 0.08,
            str(i + 1),
            ha="center",
            va="bottom",
            color=red,
            fontweight="bold",
        )
    _text(
        ax,
        width / 2,
        y_tok - bh / 2 - 0.12,
        f"$x_{first_index}$ reaches the last position in {n - 1} steps",
        ha="center",
        va="top",
        color=red,
    )
    ax.plot([0.2, width - 0.2], [3.2, 3.2], color="#bbbbbb", linewidth=1)

    # bottom panel: every position reads every position
    _text(
        ax,
        width / 2,
        3.0,
        "self-attention: all positions at once",
        ha="center",
        va="top",
        size=MIN_FONT_PT + 2,
        fontweight="bold",
    )
    y_in, y_out = 0.95, 2.2
    row(y_in, "x", COLORS["io"])
    row(y_out, "y", COLORS["attn"])
    for xi in xs:
        for xo in xs:
            ax.plot(
                [xi, xo],
                [y_in + bh / 2, y_out - bh / 2],
                color=grey,
                linewidth=0.9,
                alpha=0.7,
                zorder=0,
            )
    _arrow(
        ax,
        (xs[0], y_in + bh / 2),
        (xs[-1], y_out - bh / 2),
        color=red,
        width=2.6,
    )
    _text(
        ax,
        width / 2,
        y_in - bh / 2 - 0.12,
        f"$x_{first_index}$ reaches the last position in 1 step",
        ha="center",
        va="top",
        color=red,
    )
    return fig


def encoder_decoder_attention(
    scores: list[float] | tuple[float, ...] = (-1.0, 0.2, 2.0),
    source: tuple[str, ...] = ("the", "black", "cat"),
    written: tuple[str, ...] = ("le", "chat"),
) -> Figure:
    """A recurrent encoder–decoder with attention (Bahdanau et al., 2014),
    as the decoder writes one word.

    The encoder reads ``source`` into states ``h_j``; before writing the
    last word of ``written``, the decoder scores every ``h_j`` against its
    state, and the weights (the softmax of ``scores``, drawn as the width of
    the arrows) average the states into a context vector.  Without
    attention, only the encoder's last state reached the decoder.
    """
    if len(scores) != len(source) or not 2 <= len(source) <= 4:
        raise ValueError(
            f"one score per source word, 2 to 4 words: got {len(scores)} "
            f"scores for {len(source)} words"
        )
    if len(written) < 1:
        raise ValueError("written needs at least the word being written")
    weights = torch.softmax(
        torch.tensor(scores, dtype=torch.float64), dim=0
    ).tolist()
    red = "#c1121f"
    width, height = MAX_WIDTH_IN, 5.9
    fig, ax = _canvas(width, height)
    n = len(source)
    xs = [0.75 + 1.2 * j for j in range(n)]
    y_word, y_h, y_ctx = 0.4, 1.55, 3.75
    _text(
        ax,
        width / 2,
        height - 0.1,
        f"writing “{written[-1]}”: attention over the encoder",
        ha="center",
        va="top",
        size=MIN_FONT_PT + 2,
        fontweight="bold",
    )
    for j, (x, word) in enumerate(zip(xs, source)):
        _box(ax, x, y_word, 0.95, 0.5, word, COLORS["io"])
        _box(ax, x, y_h, 0.7, 0.5, f"$h_{{{j + 1}}}$", COLORS["linear"])
        _arrow(ax, (x, y_word + 0.25), (x, y_h - 0.25))
        if j:
            _arrow(ax, (xs[j - 1] + 0.35, y_h), (x - 0.35, y_h))
    _text(
        ax,
        xs[-1] + 0.45,
        y_h,
        "encoder",
        ha="left",
        va="center",
        fontweight="bold",
    )
    x_ctx = sum(xs) / n
    _box(ax, x_ctx, y_ctx, 1.9, 0.55, "context Σ $a_j h_j$", COLORS["attn"])
    for j, (x, a) in enumerate(zip(xs, weights)):
        end = (x_ctx + 0.55 * (j - (n - 1) / 2), y_ctx - 0.28)
        _arrow(ax, (x, y_h + 0.25), end, color=red, width=0.8 + 5 * a)
        mid_x = (x + end[0]) / 2
        _text(
            ax,
            mid_x + 0.12,
            (y_h + 0.25 + end[1]) / 2,
            f"{a:.2f}",
            ha="left",
            va="center",
            color=red,
            fontweight="bold",
        )
    _text(
        ax,
        x_ctx,
        y_ctx + 0.38,
        "$a_j$ = softmax of score(decoder state, $h_j$)",
        ha="center",
        va="bottom",
        color=red,
        size=MIN_FONT_PT + 2,
    )
    # the decoder, writing the last word of `written`
    x_dec = width - 0.8
    _box(ax, x_dec, y_ctx, 1.2, 0.55, "decoder", COLORS["query"])
    _arrow(ax, (x_ctx + 0.95, y_ctx), (x_dec - 0.6, y_ctx))
    _box(ax, x_dec, y_ctx + 1.1, 1.1, 0.5, written[-1], COLORS["io"])
    _arrow(ax, (x_dec, y_ctx + 0.28), (x_dec, y_ctx + 0.85))
    before = " ".join(written[:-1]) or "(start)"
    _box(ax, x_dec, y_ctx - 1.3, 1.1, 0.5, before, COLORS["io"])
    _arrow(ax, (x_dec, y_ctx - 1.05), (x_dec, y_ctx - 0.28))
    _text(
        ax,
        x_dec,
        y_ctx - 1.62,
        "written\nso far",
        ha="center",
        va="top",
        size=MIN_FONT_PT + 2,
    )
    return fig


def feed_forward(d_model: int = 4, d_ff: int = 16, seed: int = 1) -> Figure:
    """The position-wise feed-forward network for one position: ``d_model``
    numbers widened to ``d_ff``, the ReLU, narrowed back to ``d_model``.

    The hidden units set to zero by the ReLU (drawn white) write nothing to
    the output; which ones they are comes from a random layer drawn with
    ``seed``.
    """
    if d_model <= 0 or d_ff <= 0:
        raise ValueError(
            "d_model and d_ff must be positive, "
            f"got d_model={d_model}, d_ff={d_ff}"
        )
    if d_ff > 20 or d_model > d_ff:
        raise ValueError(
            "feed_forward draws d_model <= d_ff <= 20 units, "
            f"got d_model={d_model}, d_ff={d_ff}"
        )
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(d_model, generator=gen)
    pre = x @ torch.randn(d_model, d_ff, generator=gen)
    active = (pre > 0).tolist()
    width, height = MAX_WIDTH_IN, 4.3
    fig, ax = _canvas(width, height)
    label_room = 1.55  # right of the hidden row: its label
    gap = min(0.34, (width - 0.5 - label_room) / d_ff)
    r = gap * 0.4
    centre = (width - label_room) / 2 + 0.1

    def xs(n: int, centre: float) -> list[float]:
        return [centre + gap * (i - (n - 1) / 2) for i in range(n)]

    y_in, y_hid, y_out = 0.4, 2.0, 3.6
    x_in, x_hid = xs(d_model, centre), xs(d_ff, centre)
    x_out = x_in
    for a in x_in:
        for b in x_hid:
            ax.plot([a, b], [y_in, y_hid], color="#bbbbbb", lw=0.6, zorder=0)
    for b, on in zip(x_hid, active):
        if on:
            for c in x_out:
                ax.plot(
                    [b, c], [y_hid, y_out], color="#888888", lw=0.8, zorder=0
                )

    def circle(x: float, y: float, color: str) -> None:
        ax.add_patch(
            plt.Circle(
                (x, y), r, facecolor=color, edgecolor="#333333", zorder=2
            )
        )

    for a in x_in:
        circle(a, y_in, COLORS["io"])
    for b, on in zip(x_hid, active):
        circle(b, y_hid, COLORS["ffn"] if on else "white")
    for c in x_out:
        circle(c, y_out, COLORS["io"])
    left = x_in[0] - gap
    right = x_in[-1] + gap
    white = {"facecolor": "white", "edgecolor": "none", "pad": 1}
    _text(ax, right, y_in, f"x: {d_model} numbers", va="center")
    _text(ax, right, y_out, f"FFN(x): {d_model} numbers", va="center")
    _text(
        ax,
        x_hid[-1] + r + 0.12,
        y_hid,
        f"{d_ff} hidden units\nReLU(xW\u2081 + b\u2081)\nwhite = 0",
        va="center",
        linespacing=1.2,
    )
    _text(
        ax,
        left,
        (y_in + y_hid) / 2 - 0.15,
        "W\u2081 widens",
        ha="right",
        bbox=white,
    )
    _text(
        ax,
        left,
        (y_hid + y_out) / 2,
        "W\u2082 narrows",
        ha="right",
        bbox=white,
    )
    _text(
        ax,
        width / 2,
        height - 0.1,
        "one position (every position: the same weights)",
        ha="center",
        va="top",
        size=MIN_FONT_PT + 1,
        fontweight="bold",
    )
    return fig


def norm_axes(tokens: int = 6, features: int = 6) -> Figure:
    """Which numbers a normalisation averages over, in a batch of token
    vectors (rows) by features (columns): layer norm one row, batch norm one
    column."""
    if not (2 <= tokens <= 8 and 2 <= features <= 8):
        raise ValueError(
            "norm_axes draws 2 to 8 tokens and features, "
            f"got tokens={tokens}, features={features}"
        )
    width, height = MAX_WIDTH_IN, 3.9
    fig, ax = _canvas(width, height)
    cell = 0.3
    top = height - 0.75
    for x0, title, row in (
        (0.55, "LayerNorm", True),
        (3.55, "BatchNorm", False),
    ):
        gw = features * cell
        _text(
            ax,
            x0 + gw / 2,
            height - 0.1,
            title,
            ha="center",
            va="top",
            size=MIN_FONT_PT + 1,
            fontweight="bold",
        )
        for i in range(tokens):
            for j in range(features):
                hit = i == 1 if row else j == 2
                ax.add_patch(
                    plt.Rectangle(
                        (x0 + j * cell, top - (i + 1) * cell),
                        cell,
                        cell,
                        facecolor=COLORS["norm"] if hit else "white",
                        edgecolor="#555555",
                        linewidth=0.8,
                    )
                )
        bottom = top - tokens * cell
        _text(
            ax,
            x0 + gw / 2,
            bottom - 0.08,
            "features \u2192",
            ha="center",
            va="top",
        )
        _text(
            ax,
            x0 - 0.1,
            top - tokens * cell / 2,
            "tokens",
            ha="right",
            va="center",
            rotation=90,
        )
        note = (
            "one token:\nmean and variance\nover its features"
            if row
            else "one feature:\nmean and variance\nover the whole batch"
        )
        _text(ax, x0 + gw / 2, bottom - 0.5, note, ha="center", va="top")
    return fig


def _block_stack(
    ax: plt.Axes,
    x: float,
    w: float,
    ys: list[float],
    labels: list[str],
    layers: int,
    head: str,
    weight: str = "normal",
) -> None:
    """One decoder-only model drawn bottom-up in a column centred on ``x``:
    tokens, embedding, a pre-norm block (norm, attention, +, norm, MLP, +) in
    a dashed frame marked "× layers", a final norm and the output head.
    ``ys`` are the centres of tokens, embedding, norm, attention, +, norm, MLP,
    +, norm and head; ``labels`` name the embedding, the two block norms, the
    attention, the MLP and the final norm, drawn in ``weight``."""
    emb, norm1, attn, norm2, mlp, final = labels
    boxes = [
        (ys[0], 0.5, "tokens", "io", "normal"),
        (ys[1], 0.7, emb, "linear", weight),
        (ys[2], 0.42, norm1, "norm", weight),
        (ys[3], 0.75, attn, "attn", weight),
        (ys[5], 0.42, norm2, "norm", weight),
        (ys[6], 0.5, mlp, "ffn", weight),
        (ys[8], 0.42, final, "norm", weight),
        (ys[9], 0.5, head, "io", "normal"),
    ]
    for y, h, text, kind, wt in boxes:
        bw = w - (0.3 if kind != "io" else 0)
        _box(ax, x, y, bw, h, text, COLORS[kind], size=MIN_FONT_PT, weight=wt)
    # the main path: box to box, through the two additions
    path = [
        (ys[0] + 0.25, ys[1] - 0.35),
        (ys[1] + 0.35, ys[2] - 0.21),
        (ys[2] + 0.21, ys[3] - 0.375),
        (ys[3] + 0.375, ys[4] - 0.2),
        (ys[4] + 0.2, ys[5] - 0.21),
        (ys[5] + 0.21, ys[6] - 0.25),
        (ys[6] + 0.25, ys[7] - 0.2),
        (ys[7] + 0.2, ys[8] - 0.21),
        (ys[8] + 0.21, ys[9] - 0.25),
    ]
    for a, b in path:
        _arrow(ax, (x, a), (x, b))
    # residual connections: around each sub-layer, on the left
    xl = x - w / 2 + 0.05
    for start, plus in ((ys[1] + 0.55, ys[4]), (ys[4] + 0.3, ys[7])):
        ax.plot(
            [x, xl, xl],
            [start, start, plus],
            color=COLORS["stream"],
            linewidth=1.6,
        )
        _arrow(ax, (xl, plus), (x - 0.2, plus), color=COLORS["stream"])
    for plus in (ys[4], ys[7]):
        _plus(ax, x, plus, 0.2, linewidth=1.4, size=MIN_FONT_PT + 3)
    top = ys[7] + 0.3
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2 - 0.05, ys[1] + 0.45),
            w + 0.1,
            top - ys[1] - 0.45,
            boxstyle="round,pad=0.02",
            facecolor="none",
            edgecolor="#333333",
            linestyle="--",
        )
    )
    _text(
        ax,
        x + w / 2,
        top + 0.03,
        f"× {layers}",
        ha="right",
        va="bottom",
        fontweight="bold",
    )


def gpt2_vs_llama(
    gpt2_heads: int = 12,
    gpt2_layers: int = 12,
    llama_heads: int = 9,
    llama_kv_heads: int = 3,
    llama_layers: int = 30,
    llama_title: str = "Llama",
) -> Figure:
    """A GPT-2 model next to a Llama, bottom-up: the same skeleton (pre-norm
    blocks with residual connections, tied output head); the Llama's changed
    parts in bold.  ``llama_title`` heads the right column."""
    n = (gpt2_heads, gpt2_layers, llama_heads, llama_kv_heads, llama_layers)
    if min(n) <= 0:
        raise ValueError(f"heads and layers must be positive, got {n}")
    if llama_heads % llama_kv_heads:
        raise ValueError(
            f"llama_heads={llama_heads} is not divisible by "
            f"llama_kv_heads={llama_kv_heads}"
        )
    height = 8.45
    fig, ax = _canvas(MAX_WIDTH_IN, height)
    w = 2.5
    gqa = f"{llama_heads} q, {llama_kv_heads} kv heads"
    columns = (
        (
            1.5,
            "GPT-2",
            False,
            [
                "token + position\nembedding",
                "LayerNorm",
                f"attention\n{gpt2_heads} q, {gpt2_heads} kv heads",
                "LayerNorm",
                "MLP (GELU)",
                "LayerNorm",
            ],
            gpt2_layers,
        ),
        (
            4.5,
            llama_title,
            True,
            [
                "token\nembedding",
                "RMSNorm",
                f"attention + RoPE\n{gqa}",
                "RMSNorm",
                "SwiGLU MLP",
                "RMSNorm",
            ],
            llama_layers,
        ),
    )
    # y of: tokens, embedding, norm, attention, +, norm, MLP, +, norm, head
    ys = [0.35, 1.25, 2.45, 3.3, 4.05, 4.7, 5.4, 6.05, 6.95, 7.75]
    for x, title, bold, labels, layers in columns:
        _block_stack(
            ax,
            x,
            w,
            ys,
            labels,
            layers,
            "output head (tied)",
            "bold" if bold else "normal",
        )
        # the title heads the column, clear of the frame and its "× N"
        _text(
            ax,
            x,
            ys[9] + 0.32,
            title,
            ha="center",
            va="bottom",
            size=MIN_FONT_PT + 2,
            fontweight="bold",
        )
    return fig


def grouped_query_heads(n_heads: int = 9, n_kv_heads: int = 3) -> Figure:
    """Grouped-query attention: a row of ``n_heads`` query heads above a row
    of ``n_kv_heads`` key/value heads, each query head joined to the
    key/value head of its group; the KV cache keeps only the lower row."""
    if min(n_heads, n_kv_heads) <= 0 or n_heads % n_kv_heads:
        raise ValueError(
            f"n_heads={n_heads} must be a positive multiple of "
            f"n_kv_heads={n_kv_heads}"
        )
    width, height = MAX_WIDTH_IN, 2.9
    fig, ax = _canvas(width, height)
    group = n_heads // n_kv_heads
    step = (width - 0.4) / n_heads
    q_y, kv_y, q_h, kv_h = 2.05, 0.95, 0.42, 0.5
    _text(
        ax, width / 2, 2.5, f"{n_heads} query heads", ha="center", va="bottom"
    )
    for i in range(n_heads):
        x = 0.2 + step * (i + 0.5)
        _box(ax, x, q_y, step - 0.12, q_h, f"q{i + 1}", COLORS["query"])
        kv_x = 0.2 + step * group * (i // group + 0.5)
        ax.plot(
            [x, kv_x],
            [q_y - q_h / 2 - 0.02, kv_y + kv_h / 2 + 0.02],
            color="#333333",
            linewidth=1.2,
        )
    for j in range(n_kv_heads):
        kv_x = 0.2 + step * group * (j + 0.5)
        _box(
            ax,
            kv_x,
            kv_y,
            step * group - 0.3,
            kv_h,
            f"k{j + 1}, v{j + 1}",
            COLORS["key"],
        )
    _text(
        ax,
        width / 2,
        0.35,
        f"{n_kv_heads} key/value heads: all the KV cache stores",
        ha="center",
        va="top",
    )
    return fig


def attention_steps() -> Figure:
    """Scaled dot-product attention as a pipeline of matrix operations, with
    the shape of each intermediate result (in math type) to the right of the
    steps; V's path to the last product runs between the steps and the
    shapes, so it crosses no label."""
    height = 8.2
    fig, ax = _canvas(MAX_WIDTH_IN, height)
    cx, w, h = 1.6, 2.9, 0.62  # the column of steps
    vx = 3.45  # x of V's path down to the last product
    sx = 3.8  # left edge of the shape annotations

    def shape(y: float, dims: str, note: str) -> None:
        _text(ax, sx, y + 0.06, dims, ha="left", va="bottom")
        _text(ax, sx, y - 0.04, note, ha="left", va="top", color="#555555")

    top = 7.55
    for x, name, dims, color in (
        (cx - 0.8, "Q", r"$L_q \times d_k$", "query"),
        (cx + 0.8, "K", r"$L_k \times d_k$", "key"),
        (vx, "V", r"$L_k \times d_v$", "value"),
    ):
        _box(ax, x, top, 0.75, 0.55, name, COLORS[color], weight="bold")
        _text(ax, x, top + 0.36, dims, ha="center", va="bottom")
    ys = [6.2, 5.05, 3.9, 2.75, 1.6, 0.45]
    square = r"$L_q \times L_k$"
    steps = (
        (
            r"scores  $QK^{\mathsf{T}}$",
            square,
            "one per (query, key)",
            "linear",
        ),
        (r"scale  ÷ $\sqrt{d_k}$", square, "spread kept steady", "linear"),
        ("mask (optional)", square, "blocked → −∞", "io"),
        ("softmax per row", square, "weights, rows sum to 1", "attn"),
        ("weights · V", r"$L_q \times d_v$", "each row mixes values", "value"),
    )
    for x in (cx - 0.8, cx + 0.8):
        _arrow(ax, (x, top - 0.28), (x, ys[0] + h / 2))
    for i, (label, dims, note, color) in enumerate(steps):
        _box(ax, cx, ys[i], w, h, label, COLORS[color])
        shape(ys[i], dims, note)
        if i + 1 < len(steps):
            _arrow(ax, (cx, ys[i] - h / 2), (cx, ys[i + 1] + h / 2))
    # V bypasses the score steps and joins at the last product
    _arrow(ax, (vx, top - 0.28), (vx, ys[4]), style="-")
    _arrow(ax, (vx, ys[4]), (cx + w / 2, ys[4]))
    _box(ax, cx, ys[5], 1.6, 0.55, "output", COLORS["io"], weight="bold")
    _arrow(ax, (cx, ys[4] - h / 2), (cx, ys[5] + 0.28))
    shape(ys[5], r"$L_q \times d_v$", "one row per query")
    return fig


def hard_lookup(n: int = 4, match: int = 1) -> Figure:
    """A dictionary's hard lookup drawn like ``soft_lookup``: the query
    equals key ``match`` (0-based), that slot gets weight 1 and every other
    slot 0, and the output is that slot's value alone."""
    if not 2 <= n <= 6 or not 0 <= match < n:
        raise ValueError(
            f"hard_lookup draws 2 to 6 slots with 0 <= match < n, got n={n}, "
            f"match={match}"
        )
    return _lookup(
        [1.0 if i == match else 0.0 for i in range(n)],
        f"q = k{match + 1}",
        f"v{match + 1}",
        ".0f",
        "weight 1 on the key equal to the query, 0 on all others",
    )


def gpt_model(
    n_layer: int = 4,
    n_head: int = 4,
    d_model: int = 128,
    block_size: int = 64,
    vocab_size: int = 96,
) -> Figure:
    """A GPT drawn bottom-up, sizes from the arguments: token and learned
    position embeddings, ``n_layer`` pre-norm blocks with their residual
    connections, a final LayerNorm and the output head tied to the token
    embedding; notes on the right say what each part holds."""
    sizes = (n_layer, n_head, d_model, block_size, vocab_size)
    if min(sizes) <= 0:
        raise ValueError(f"sizes must be positive, got {sizes}")
    height = 8.1
    fig, ax = _canvas(MAX_WIDTH_IN, height)
    x, w = 1.55, 2.6  # the column
    # y of: tokens, embedding, norm, attention, +, norm, MLP, +, norm, head
    ys = [0.35, 1.25, 2.45, 3.3, 4.05, 4.7, 5.4, 6.05, 6.95, 7.7]
    labels = [
        "token + position\nembedding",
        "LayerNorm",
        f"causal self-\nattention, {n_head} heads",
        "LayerNorm",
        "MLP (GELU)",
        "LayerNorm",
    ]
    _block_stack(ax, x, w, ys, labels, n_layer, "output head")
    # notes: what each part holds, computed from the sizes
    nx = x + w / 2 + 0.5
    notes = (
        (
            ys[9],
            (
                f"a score for each of the\n{vocab_size} tokens, with the\n"
                "token embedding"
            ),
        ),
        (ys[8], "normalises the stream\nonce, at the end"),
        (
            ys[7] - 0.15,
            f"x + MLP(LN(x))\n{d_model} → {4 * d_model} → {d_model} wide",
        ),
        (
            ys[4] - 0.05,
            (
                "x + attention(LN(x))\neach position sees\nitself and the\n"
                "positions before it"
            ),
        ),
        (
            ys[1],
            (
                f"{vocab_size} token and\n{block_size} learned position\n"
                f"vectors, {d_model} wide"
            ),
        ),
    )
    for y, text in notes:
        _text(ax, nx, y, text, ha="left", va="center")
    # the tied weights: the head reuses the token embedding's matrix
    xr = x + w / 2 + 0.28
    tie = "#c1121f"
    ax.plot(
        [x + w / 2, xr, xr, x + w / 2 - 0.15],
        [ys[9], ys[9], ys[1], ys[1]],
        color=tie,
        linewidth=1.6,
        linestyle="--",
    )
    _text(
        ax,
        xr,
        (ys[1] + ys[9]) / 2 + 0.55,
        "tied: one matrix",
        ha="center",
        va="center",
        rotation=90,
        color=tie,
        backgroundcolor="white",
    )
    return fig


def kv_cache(steps: int = 4) -> Figure:
    """Generation with a KV cache, one row per step, for one attention
    layer: the new token's key and value are appended to the cache (red
    frame), and its query reads every cached key."""
    if not 1 <= steps <= 5:
        raise ValueError(f"kv_cache draws 1 to 5 steps, got {steps}")
    row_h, box = 1.5, 0.5
    height = 0.85 + steps * row_h
    fig, ax = _canvas(MAX_WIDTH_IN, height)
    qx, cx, step_x, rx = 1.25, 2.3, 0.58, 5.0  # query, cache, notes
    new = "#c1121f"
    for header, hx, ha in (
        ("query", qx, "center"),
        ("key and value cache", cx - box / 2, "left"),
        ("query reads", rx, "center"),
    ):
        _text(ax, hx, height - 0.12, header, ha=ha, va="top", weight="bold")
    for i in range(steps):
        t = i + 1
        yc = height - 0.45 - row_h * (i + 0.5)
        ky, vy = yc + 0.1, yc - 0.45
        bus = ky + box / 2 + 0.22
        _text(ax, 0.1, ky, f"step {t}", ha="left", va="center")
        _box(ax, qx, ky, box + 0.1, box, f"q{t}", COLORS["query"])
        for j in range(t):
            x = cx + step_x * j
            for y, name, kind in ((ky, "k", "key"), (vy, "v", "value")):
                _box(ax, x, y, box, box - 0.08, f"{name}{j + 1}", COLORS[kind])
            # the query reads every cached key, along a line above them
            _arrow(ax, (x, bus), (x, ky + box / 2 - 0.02), width=1.2)
        ax.plot(
            [qx, qx, cx + step_x * i],
            [ky + box / 2, bus, bus],
            color="#333333",
            linewidth=1.2,
        )
        x_new = cx + step_x * i
        ax.add_patch(
            FancyBboxPatch(
                (x_new - box / 2 - 0.06, vy - box / 2 - 0.02),
                box + 0.12,
                ky - vy + box + 0.04,
                boxstyle="round,pad=0.02",
                facecolor="none",
                edgecolor=new,
                linewidth=2.2,
            )
        )
        _text(
            ax,
            rx,
            ky,
            f"{t} key{'s' if t > 1 else ''}",
            ha="center",
            va="center",
        )
    _text(
        ax,
        0.1,
        0.2,
        "red frame: the key and value appended at this step",
        ha="left",
        va="center",
        color=new,
    )
    return fig


def bert_input(
    tokens: list[str],
    token_ids: list[int],
    token_type_ids: list[int],
    num_layers: int = 6,
) -> Figure:
    """BERT's input, bottom-up: each token's row of the token table (its
    id), plus the token-type vector of its segment (A or B), plus the vector
    of its position; the sum goes through LayerNorm into the encoder."""
    n = len(tokens)
    if not n or len(token_ids) != n or len(token_type_ids) != n:
        raise ValueError(
            "need as many token ids and token type ids as tokens (at least "
            f"one); got {n} tokens, {len(token_ids)} ids, "
            f"{len(token_type_ids)} token type ids"
        )
    if any(t not in (0, 1) for t in token_type_ids):
        raise ValueError(
            f"token type ids must be 0 or 1, got {token_type_ids}"
        )
    if num_layers <= 0:
        raise ValueError(f"num_layers must be positive, got {num_layers}")
    label_w = 1.45
    col = (MAX_WIDTH_IN - label_w - 0.1) / n
    if col < 0.5:
        raise ValueError(
            f"{n} tokens do not fit the figure's width: at most "
            f"{int((MAX_WIDTH_IN - label_w - 0.1) / 0.5)}"
        )
    height = 4.3
    fig, ax = _canvas(MAX_WIDTH_IN, height)
    xs = [label_w + col * (i + 0.5) for i in range(n)]
    bw, bh = col * 0.9, 0.42
    rows = (  # y, label, colour, text of each box
        (1.05, "token (id)", COLORS["query"], [str(i) for i in token_ids]),
        (
            1.65,
            "+ token type",
            COLORS["key"],
            ["AB"[t] for t in token_type_ids],
        ),
        (2.25, "+ position", COLORS["value"], [str(i) for i in range(n)]),
    )
    for x, token in zip(xs, tokens):
        _text(ax, x, 0.4, token, ha="center", va="center")
        _arrow(ax, (x, 0.58), (x, 1.05 - bh / 2))
    for y, label, color, labels in rows:
        _text(ax, 0.1, y, label, va="center")
        for x, text in zip(xs, labels):
            _box(ax, x, y, bw, bh, text, color, size=MIN_FONT_PT)
    mid = (xs[0] + xs[-1]) / 2
    span = xs[-1] - xs[0] + bw
    for x in xs:
        _arrow(ax, (x, 2.25 + bh / 2), (x, 2.95 - 0.2))
    _box(
        ax,
        mid,
        2.95,
        span,
        0.4,
        "the sum, then LayerNorm and dropout",
        COLORS["norm"],
    )
    _arrow(ax, (mid, 3.15), (mid, 3.5))
    _box(
        ax, mid, 3.8, span, 0.55, f"{num_layers} encoder layers", COLORS["io"]
    )
    return fig
