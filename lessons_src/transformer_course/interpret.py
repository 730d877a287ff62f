"""Reading attention, and checking what it explains (chapters 05 and 12).

* ``plot_attention_flow``: attention as flow between tokens, a static picture
  that needs no JavaScript: the tokens twice, queries on the left and keys on
  the right, one line per link whose width and darkness are the attention
  weight.  One head, or the mean of a layer's heads.
* ``attention_rollout``: attention across layers (Abnar & Zuidema, 2020).  Each
  layer's head-averaged attention is mixed with the identity for the residual
  path, and the layers' matrices are multiplied: row ``i`` says how much of
  token ``i``'s final vector can be traced back to each input token, if
  information moved only along attention and the residual stream.
* ``leave_one_out``: a check that does not look at attention at all: delete one
  token, run the model again and measure how much the probability of its answer
  drops.
* ``top_k_overlap``: how many of the ``k`` highest-scoring positions two
  rankings share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.lines import Line2D

Weights = torch.Tensor | np.ndarray


def _as_tensor(weights: Weights, name: str) -> torch.Tensor:
    if isinstance(weights, np.ndarray):
        weights = torch.from_numpy(weights)
    if not isinstance(weights, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor or numpy array, "
            f"got {type(weights).__name__}"
        )
    return weights.detach().cpu().double()


def _check_rows(w: torch.Tensor, name: str, fix: str) -> None:
    """Attention rows are softmax outputs: non-negative, each summing to 1."""
    if (
        not torch.isfinite(w).all()
        or (w < 0).any()
        or not torch.allclose(w.sum(-1), torch.ones(()).double(), atol=1e-2)
    ):
        raise ValueError(
            f"{name} does not look like attention weights "
            f"(non-negative rows that sum to 1); {fix}"
        )


# -----------------------------------------------------------------------------
# Attention as flow between tokens


def plot_attention_flow(
    weights: Weights,
    tokens: Sequence[str],
    mask: Sequence[bool] | Sequence[int] | torch.Tensor | None = None,
    top_k: int | None = None,
    min_weight: float = 0.0,
    queries: Sequence[int] | None = None,
    pad_token: str | None = "[PAD]",
    ax: Axes | None = None,
    title: str | None = None,
    color: str = "C0",
    max_width: float = 7.0,
    fontsize: float = 12.0,
    legend: bool = True,
    highlight: Sequence[tuple[int, int]] = (),
    highlight_color: str = "C3",
) -> Axes:
    """Draw self-attention as lines from each query token (left) to each key
    token (right).

    ``weights`` is one ``(tokens, tokens)`` matrix (one head:
    ``attentions[layer][0, head]``) or a ``(heads, tokens, tokens)`` stack,
    which is averaged over the heads (a whole layer: ``attentions[layer][0]``).
    A line's width and opacity are proportional to its weight.

    * ``mask``: one entry per token, ``True`` (or 1, as in a tokenizer's
      ``attention_mask``) for real tokens.  Tokens where it is ``False``, and
      tokens equal to ``pad_token``, are left out of both columns.
    * ``top_k``: draw only each query's ``k`` strongest links; ``min_weight``:
      only links at least this heavy.  Both keep a busy head readable on a
      small screen.
    * ``queries``: positions whose lines are drawn (the others' labels are
      greyed out), like hovering over a token in bertviz's head view; default
      all.
    * ``highlight``: ``(query, key)`` position pairs drawn on top in
      ``highlight_color`` (whatever ``top_k`` and ``min_weight`` leave out),
      with their two tokens' labels in that colour: the link a figure is
      there to show.
    """
    w = _as_tensor(weights, "weights")
    if w.dim() == 3:
        w = w.mean(0)
    elif w.dim() != 2:
        raise ValueError(
            "plot_attention_flow needs one (tokens, tokens) matrix or a "
            "(heads, tokens, tokens) stack, got shape "
            f"{tuple(w.shape)}; select one sequence of the batch first, "
            "e.g. attentions[layer][0] (all heads) "
            "or attentions[layer][0, head]"
        )
    n = w.shape[-1]
    if w.shape[0] != n:
        raise ValueError(
            "self-attention weights must be square (tokens, tokens), "
            f"got shape {tuple(w.shape)}"
        )
    tokens = list(tokens)
    if len(tokens) != n:
        raise ValueError(
            f"{len(tokens)} tokens for attention over {n} positions; "
            "pass one label per position"
        )
    keep = torch.ones(n, dtype=torch.bool)
    if mask is not None:
        m = torch.as_tensor(mask).flatten()
        if m.numel() != n:
            raise ValueError(
                f"mask has {m.numel()} entries for {n} tokens; "
                "pass one sequence's mask, e.g. attention_mask[0]"
            )
        if m.dtype != torch.bool and not ((m == 0) | (m == 1)).all():
            raise ValueError(
                "mask must be boolean or 0/1 "
                "(True / 1 = a real token, the course's convention)"
            )
        keep &= m.bool()
    if pad_token is not None:
        keep &= torch.tensor([t != pad_token for t in tokens])
    if not keep.any():
        raise ValueError("every token is masked or padding: nothing to draw")
    _check_rows(
        w[keep],
        "weights",
        "pass the softmax output (output_attentions=True), not the scores",
    )
    if top_k is not None and top_k < 1:
        raise ValueError(
            f"top_k must be at least 1 (or None for all links), got {top_k}"
        )
    if not 0.0 <= min_weight <= 1.0:
        raise ValueError(
            "min_weight is an attention weight, between 0 and 1; "
            f"got {min_weight}"
        )
    if queries is not None:
        bad = [q for q in queries if not 0 <= q < n or not keep[q]]
        if bad:
            raise ValueError(
                f"queries {bad} are not real token positions "
                f"(0..{n - 1}, not padding)"
            )

    bad_pairs = [
        (q, k)
        for q, k in highlight
        if not (0 <= q < n and 0 <= k < n and keep[q] and keep[k])
    ]
    if bad_pairs:
        raise ValueError(
            f"highlight pairs {bad_pairs} are not (query, key) pairs of "
            f"real token positions (0..{n - 1}, not padding)"
        )

    # the positions that are drawn, in order
    idx = keep.nonzero().flatten().tolist()
    # position -> row of the drawing (top = 0)
    row = {p: r for r, p in enumerate(idx)}
    shown = set(idx if queries is None else queries)
    segments, widths, alphas, values = [], [], [], []
    for q in idx:
        if q not in shown:
            continue
        keys = torch.tensor(idx)
        ws = w[q, keys]
        order = ws.argsort(descending=True)
        if top_k is not None:
            order = order[:top_k]
        for o in order.tolist():
            value = ws[o].item()
            if value <= 0 or value < min_weight:
                continue
            segments.append([(0.0, -row[q]), (1.0, -row[idx[o]])])
            values.append(value)
    order_drawn = np.argsort(values)  # light lines first, heavy ones on top
    segments = [segments[i] for i in order_drawn]
    values = [values[i] for i in order_drawn]
    widths = [max_width * v for v in values]
    alphas = [0.15 + 0.85 * v for v in values]

    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 0.36 * len(idx) + 1.6))
    rgba = (
        plt.matplotlib.colors.to_rgba_array([color] * len(values))
        if values
        else np.zeros((0, 4))
    )
    rgba[:, 3] = alphas
    ax.add_collection(
        LineCollection(
            segments, linewidths=widths, colors=rgba, capstyle="round"
        )
    )
    for q, k in highlight:
        value = w[q, k].item()
        ax.plot(
            [0.0, 1.0],
            [-row[q], -row[k]],
            color=highlight_color,
            lw=max(1.5, max_width * value),
            solid_capstyle="round",
            zorder=3,
        )
    marked_queries = {q for q, _ in highlight}
    marked_keys = {k for _, k in highlight}
    for r, p in enumerate(idx):
        grey = "0.6" if p not in shown else "black"
        ax.text(
            -0.04,
            -r,
            tokens[p],
            ha="right",
            va="center",
            fontsize=fontsize,
            color=highlight_color if p in marked_queries else grey,
            fontweight="bold" if p in marked_queries else "normal",
        )
        ax.text(
            1.04,
            -r,
            tokens[p],
            ha="left",
            va="center",
            fontsize=fontsize,
            color=highlight_color if p in marked_keys else "black",
            fontweight="bold" if p in marked_keys else "normal",
        )
    ax.text(
        -0.04,
        1.1,
        "query",
        ha="right",
        va="bottom",
        fontsize=fontsize,
        style="italic",
    )
    ax.text(
        1.04,
        1.1,
        "key",
        ha="left",
        va="bottom",
        fontsize=fontsize,
        style="italic",
    )
    ax.set_xlim(-0.5, 1.5)
    ax.set_ylim(-len(idx) + 0.4, 1.9)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=fontsize)
    if legend:
        handles = [
            Line2D(
                [],
                [],
                color=color,
                lw=max_width * v,
                alpha=0.15 + 0.85 * v,
                label=f"{v:g}",
            )
            for v in (0.1, 0.5, 1.0)
        ]
        ax.legend(
            handles=handles,
            title="weight",
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            ncol=3,
            fontsize=fontsize - 1,
            title_fontsize=fontsize - 1,
            frameon=False,
            handlelength=2.2,
        )
    return ax


# -----------------------------------------------------------------------------
# Attention rollout


def attention_rollout(
    attentions: Sequence[Weights] | torch.Tensor, residual: float = 0.5
) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): how each token's last-layer
    vector mixes the inputs.

    ``attentions`` holds one tensor per layer, first layer first: what a
    Hugging Face model returns with ``output_attentions=True``
    (``(batch, heads, tokens, tokens)`` each), or ``(heads, tokens, tokens)`` /
    ``(tokens, tokens)`` per layer for one sequence.  For each layer, the heads
    are averaged, ``A``, and the residual connection is added as the identity:
    ``Â = residual · I + (1 - residual) · A`` (rows renormalised to sum to 1).
    The rollout is ``Â_L ··· Â_2 · Â_1``: its row ``i`` sums to 1 and gives
    token ``i``'s share of every input token.  Returns
    ``(batch, tokens, tokens)`` float32, or ``(tokens, tokens)`` when the
    layers had no batch dimension.

    Padding needs no special care: a real token gives padding keys weight 0 in
    every layer, so its row of the rollout is 0 at padding positions too.
    """
    if isinstance(attentions, torch.Tensor) and attentions.dim() >= 3:
        attentions = list(attentions)  # a stacked (layers, ...) tensor
    layers = [
        _as_tensor(a, f"attentions[{i}]") for i, a in enumerate(attentions)
    ]
    if not layers:
        raise ValueError(
            "attentions is empty: pass one attention tensor per layer "
            "(output_attentions=True)"
        )
    if not 0.0 <= residual <= 1.0:
        raise ValueError(
            "residual is the identity's share, between 0 and 1 "
            f"(the paper uses 0.5); got {residual}"
        )
    shape = layers[0].shape
    for i, a in enumerate(layers):
        if a.shape != shape:
            raise ValueError(
                "every layer needs the same shape; "
                f"layer 0 has {tuple(shape)}, layer {i} {tuple(a.shape)}"
            )
    if len(shape) not in (2, 3, 4) or shape[-1] != shape[-2]:
        raise ValueError(
            "each layer's attention must be (batch, heads, tokens, tokens), "
            "(heads, tokens, tokens) or "
            f"(tokens, tokens), got {tuple(shape)}"
        )
    for i, a in enumerate(layers):
        _check_rows(
            a,
            f"attentions[{i}]",
            "pass the softmax output (output_attentions=True), not the scores",
        )
    eye = torch.eye(shape[-1], dtype=torch.float64)
    rollout = None
    for a in layers:
        mean = a.mean(-3) if a.dim() >= 3 else a  # average over the heads
        mixed = residual * eye + (1.0 - residual) * mean
        mixed = mixed / mixed.sum(-1, keepdim=True)
        rollout = mixed if rollout is None else mixed @ rollout
    assert rollout is not None
    return rollout.float()


# -----------------------------------------------------------------------------
# Leave-one-out occlusion


@torch.no_grad()
def leave_one_out(
    model: Callable[..., Any],
    input_ids: torch.Tensor,
    target: int | None = None,
    positions: Sequence[int] | None = None,
    batch_size: int = 64,
) -> torch.Tensor:
    """How much each token matters to a classifier: the drop in probability
    when it is deleted.

    ``input_ids`` is one tokenized text without padding, ``(tokens,)`` or
    ``(1, tokens)``.  For each position in ``positions`` (default: all but the
    first and last, i.e. not ``[CLS]`` and ``[SEP]``) the token is deleted, the
    shorter text is classified, and the result is
    ``P(target | text) - P(target | text without that token)``: positive where
    the token supported the answer.  ``target`` defaults to the class the model
    predicts for the whole text.  ``model(input_ids=...)`` must return logits
    ``(batch, classes)`` or an object with ``.logits`` (a Hugging Face sequence
    classifier).  Returns ``(tokens,)`` with NaN at the positions that were not
    deleted.
    """
    if not isinstance(input_ids, torch.Tensor) or (
        input_ids.dtype not in (torch.int64, torch.int32)
    ):
        raise TypeError(
            "input_ids must be a tensor of token ids, e.g. "
            "tokenizer(text, return_tensors='pt')['input_ids']"
        )
    if input_ids.dim() == 2 and input_ids.shape[0] == 1:
        input_ids = input_ids[0]
    if input_ids.dim() != 1:
        raise ValueError(
            "leave_one_out takes one text, shape (tokens,) or (1, tokens); "
            f"got {tuple(input_ids.shape)}: "
            "call it once per text "
            "(tokenize each text alone, without padding)"
        )
    n = input_ids.shape[0]
    positions = list(range(1, n - 1)) if positions is None else list(positions)
    if not positions:
        raise ValueError(
            f"no position to delete in a text of {n} tokens "
            "([CLS] and [SEP] are kept by default)"
        )
    if any(not 0 <= p < n for p in positions):
        raise ValueError(
            f"positions {[p for p in positions if not 0 <= p < n]} lie "
            f"outside the text's {n} tokens"
        )
    if n < 2:
        raise ValueError(
            "a text of one token has nothing left once that token is deleted"
        )

    def probs(ids: torch.Tensor) -> torch.Tensor:
        out = model(input_ids=ids)
        logits = out.logits if hasattr(out, "logits") else out
        if (
            not isinstance(logits, torch.Tensor)
            or logits.dim() != 2
            or logits.shape[0] != ids.shape[0]
        ):
            raise ValueError(
                "model(input_ids=...) must return (batch, classes) logits "
                "or an object with .logits"
            )
        return torch.softmax(logits.float(), dim=-1).cpu()

    param = (
        next(model.parameters(), None)
        if isinstance(model, torch.nn.Module)
        else None
    )
    device = param.device if param is not None else input_ids.device
    ids = input_ids.to(device)
    full = probs(ids[None])[0]
    if target is None:
        target = int(full.argmax())
    if not 0 <= target < full.shape[0]:
        raise ValueError(
            f"target must be a class id in 0..{full.shape[0] - 1}, "
            f"got {target}"
        )
    # (len(positions), n - 1)
    without = torch.stack(
        [torch.cat([ids[:p], ids[p + 1 :]]) for p in positions]
    )
    p_without = torch.cat(
        [
            probs(without[i : i + batch_size])
            for i in range(0, len(positions), batch_size)
        ]
    )
    drop = torch.full((n,), float("nan"))
    drop[positions] = full[target] - p_without[:, target]
    return drop


def top_k_overlap(
    scores_a: torch.Tensor, scores_b: torch.Tensor, k: int
) -> float:
    """Fraction of the ``k`` highest-scoring positions of ``scores_a`` that are
    also in ``scores_b``'s top ``k``.

    Both are 1-D scores over the same positions (slice off positions you do not
    want ranked, such as ``[CLS]`` and ``[SEP]``).  1.0: the same ``k``
    positions; a random ranking of ``n`` positions scores ``k / n`` on average.
    """
    a, b = (
        torch.as_tensor(scores_a).flatten(),
        torch.as_tensor(scores_b).flatten(),
    )
    if a.shape != b.shape:
        raise ValueError(
            f"the two rankings cover {a.numel()} and {b.numel()} positions; "
            "score the same positions"
        )
    if not 1 <= k <= a.numel():
        raise ValueError(
            f"k must lie in 1..{a.numel()} (the number of positions), got {k}"
        )
    if torch.isnan(a).any() or torch.isnan(b).any():
        raise ValueError(
            "the scores contain NaN "
            "(positions leave_one_out did not delete?); slice them off first"
        )
    top_a = set(a.topk(k).indices.tolist())
    top_b = set(b.topk(k).indices.tolist())
    return len(top_a & top_b) / k
