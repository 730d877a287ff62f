"""Scaled dot-product attention and multi-head attention (chapters 04 and 05).

The mask convention of the whole course: a **boolean** tensor, ``True`` where a
query *may attend* to a key.  It must broadcast to the score matrix
``(..., L_q, L_k)``; ``transformer_course.masking`` builds such masks.  Note
that ``torch.nn.MultiheadAttention`` uses the opposite convention (``True`` =
blocked), so its masks are ``~mask``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def _check_mask(mask: torch.Tensor, scores_shape: torch.Size) -> torch.Tensor:
    """Validate a course mask against the score shape and return it
    unchanged.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"mask must be a torch.Tensor, got {type(mask).__name__}"
        )
    if mask.dtype != torch.bool:
        raise TypeError(
            "mask must be boolean (True = may attend), "
            f"got dtype {mask.dtype}; convert it explicitly: "
            "mask.bool() if 1 means may attend, mask == 0 if 1 means blocked"
        )
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != scores_shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} cannot broadcast to "
            f"the attention scores of shape {tuple(scores_shape)} "
            "(..., queries, keys)"
        )
    return mask


def _check_2d_mask(mask: torch.Tensor, batch: int, l_q: int, l_k: int) -> None:
    """Refuse a 2-D mask that could mean two things.

    A ``(L_q, L_k)`` mask (the same for every sentence, e.g. causal) and a
    Hugging Face-style ``(batch, L_k)`` padding mask have the same shape when
    ``batch == L_q``; read the wrong way, the result is silently wrong.
    """
    if mask.dim() == 2 and batch > 1 and mask.shape == (batch, l_k):
        meaning = (
            "could be a (queries, keys) pattern or a (batch, keys) padding "
            "mask"
            if batch == l_q
            else "looks like a (batch, keys) padding mask"
        )
        raise ValueError(
            f"a 2-D mask of shape {tuple(mask.shape)} {meaning} (batch="
            f"{batch}, {l_q} queries, {l_k} keys); masks are read as "
            "(..., queries, keys). Say which you mean: mask[:, None, None, :] "
            "for one row of keys per sentence (padding), or mask[None, None] "
            "for one (queries, keys) pattern shared by every sentence"
        )


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q k^T / sqrt(d_k)) v``, returning ``(output, weights)``.

    Shapes: ``q`` is ``(..., L_q, d_k)``, ``k`` is ``(..., L_k, d_k)``, ``v``
    is ``(..., L_k, d_v)``; the output is ``(..., L_q, d_v)`` and the weights
    ``(..., L_q, L_k)``.

    ``mask`` is boolean, ``True`` = may attend.  Blocked keys get weight
    exactly 0.  A query whose keys are *all* blocked (a row of padding, say)
    gets all-zero weights and a zero output instead of the NaN a naive ``-inf``
    fill produces.
    """
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(
            "q, k and v need at least 2 dimensions (length, features), "
            f"got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.size(-1) != k.size(-1):
        raise ValueError(
            "queries and keys must have the same feature size d_k, "
            f"got q {tuple(q.shape)} and k {tuple(k.shape)}"
        )
    if k.size(-2) != v.size(-2):
        raise ValueError(
            "keys and values must have the same length, "
            f"got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    for name, other in (("k", k), ("v", v)):
        try:
            torch.broadcast_shapes(q.shape[:-2], other.shape[:-2])
        except RuntimeError:
            raise ValueError(
                "the leading (batch, heads) dimensions of "
                f"q {tuple(q.shape)} and {name} {tuple(other.shape)} "
                "do not broadcast together"
            ) from None
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        mask = _check_mask(mask, scores.shape)
        # The most negative finite number, not -inf: exp() of it is exactly 0,
        # and a row with every key blocked stays finite (uniform) instead of
        # becoming NaN ...
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        # ... and is then set to zero: a query that may attend to nothing
        # receives nothing.
        weights = weights * mask.any(dim=-1, keepdim=True)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights


class KVCache:
    """Keys and values of the positions seen so far, for one attention layer.

    During generation each new token only needs its own query; its keys and
    values are appended here, so earlier positions are never projected twice.
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def update(
        self, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append ``k``, ``v`` of shape ``(batch, heads, new, d_head)``; return
        all so far.
        """
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-2)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.size(-2)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: project, split into heads, attend per head, merge,
    project.

    ``forward(query, key, value, mask)`` with ``query`` of shape
    ``(batch, L_q, d_model)`` and ``key``/``value`` of shape
    ``(batch, L_k, d_model)`` (omit them for self-attention).  ``mask`` is
    boolean, ``True`` = may attend, broadcastable to
    ``(batch, heads, L_q, L_k)``.

    Returns ``(output, weights)`` with weights of shape
    ``(batch, heads, L_q, L_k)``.

    ``use_sdpa=True`` computes the same result with PyTorch's fused
    ``torch.nn.functional.scaled_dot_product_attention`` (faster; weights are
    then only computed when ``need_weights=True``, by the explicit path).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        use_sdpa: bool = False,
    ) -> None:
        super().__init__()
        if d_model <= 0 or num_heads <= 0:
            raise ValueError(
                "d_model and num_heads must be positive, "
                f"got {d_model} and {num_heads}"
            )
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by "
                f"num_heads={num_heads}: "
                f"each head needs d_model / num_heads features"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.dropout = dropout
        self.use_sdpa = use_sdpa
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, L, d_model)`` -> ``(batch, heads, L, d_head)``."""
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.d_head).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, heads, L, d_head)`` -> ``(batch, L, d_model)``."""
        b, _, n, _ = x.shape
        return x.transpose(1, 2).contiguous().view(b, n, self.d_model)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        key = query if key is None else key
        value = key if value is None else value
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dim() != 3 or t.size(-1) != self.d_model:
                raise ValueError(
                    f"{name} must have shape "
                    f"(batch, length, d_model={self.d_model}), "
                    f"got {tuple(t.shape)}"
                )
        if key.shape[:2] != value.shape[:2] or query.size(0) != key.size(0):
            raise ValueError(
                f"query {tuple(query.shape)}, key {tuple(key.shape)} and "
                f"value {tuple(value.shape)} must share the batch size, "
                "and key and value the length"
            )
        dtype = self.W_q.weight.dtype
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dtype != dtype:
                raise TypeError(
                    f"{name} has dtype {t.dtype} but the layer's weights are "
                    f"{dtype}; convert one to the other: x.to({dtype}) or "
                    f"layer.to({t.dtype})"
                )
        if mask is not None:
            _check_2d_mask(mask, query.size(0), query.size(1), key.size(1))
        q = self.split_heads(self.W_q(query))
        k = self.split_heads(self.W_k(key))
        v = self.split_heads(self.W_v(value))
        if cache is not None:
            k, v = cache.update(k, v)
        p = self.dropout if self.training else 0.0
        if self.use_sdpa and not need_weights:
            if mask is not None:
                shape = (q.size(0), self.num_heads, q.size(2), k.size(2))
                mask = _check_mask(mask, torch.Size(shape))
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=p
            )
            # same rule as the explicit path: a fully blocked query gets 0
            if mask is not None:
                out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
            weights = None
        else:
            out, weights = scaled_dot_product_attention(
                q, k, v, mask, dropout_p=p
            )
        return self.W_o(self.merge_heads(out)), weights
