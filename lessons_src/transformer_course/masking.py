"""Attention masks (chapter 08).

One convention for the whole course: a mask is a **boolean** tensor and
``True`` means *this query may attend to this key*.  Masks are shaped to
broadcast over the attention scores ``(batch, heads, queries, keys)``:

* ``padding_mask(tokens, pad_id)`` -> ``(batch, 1, 1, keys)``:
  real keys are ``True``.
* ``causal_mask(n)``               -> ``(1, 1, n, n)``:
  query ``i`` sees keys ``0..i``.
* ``combine_masks(a, b, ...)``     -> their logical AND
  (a key must be allowed by every mask).
"""

from __future__ import annotations

import torch


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """``True`` at real tokens, ``False`` at padding; shape
    ``(batch, 1, 1, length)``."""
    if tokens.dim() != 2:
        raise ValueError(
            "tokens must have shape (batch, length), "
            f"got {tuple(tokens.shape)}"
        )
    if tokens.is_floating_point():
        raise TypeError(
            f"tokens must be integer ids, got dtype {tokens.dtype}"
        )
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(
    n: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """Lower-triangular ``(1, 1, n, n)`` mask: position ``i`` may attend to
    ``0..i`` only."""
    if n <= 0:
        raise ValueError(f"causal_mask needs a positive length, got {n}")
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()[None, None]


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of boolean masks (``None`` entries are skipped), broadcast
    together.

    Combining must keep the convention: with ``True`` = may attend, a key is
    visible only if *every* mask allows it, which is AND.  (Taking a ``max`` of
    masks written in opposite conventions, a common pitfall, gives a mask that
    shows each position only the future when read as "1 = blocked", and lets
    padding through when read as "1 = may attend".)
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    for m in present:
        if m.dtype != torch.bool:
            raise TypeError(
                "masks must be boolean (True = may attend), got dtype "
                f"{m.dtype} for the mask of shape {tuple(m.shape)}; "
                "convert it explicitly: m.bool() if 1 means may attend, "
                "m == 0 if 1 means blocked"
            )
    try:
        torch.broadcast_shapes(*(m.shape for m in present))
    except RuntimeError as err:
        shapes = ", ".join(str(tuple(m.shape)) for m in present)
        raise ValueError(
            f"masks of shapes {shapes} do not broadcast together"
        ) from err
    out = present[0]
    for m in present[1:]:
        out = out & m
    return out


def make_seq2seq_masks(
    src: torch.Tensor, tgt_in: torch.Tensor, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The three masks of an encoder-decoder step, built for exactly these
    tensors.

    ``src`` is ``(batch, L_src)``; ``tgt_in`` is the decoder *input* (the
    target shifted right), ``(batch, L_tgt)``.  Returns

    * ``src_mask``    ``(batch, 1, 1, L_src)``     encoder self-attention:
      skip source padding;
    * ``tgt_mask``    ``(batch, 1, L_tgt, L_tgt)`` decoder self-attention:
      causal AND skip target padding;
    * ``memory_mask`` ``(batch, 1, 1, L_src)``     cross-attention:
      skip source padding.
    """
    if src.size(0) != tgt_in.size(0):
        raise ValueError(
            f"src {tuple(src.shape)} and tgt_in {tuple(tgt_in.shape)} "
            "have different batch sizes"
        )
    src_mask = padding_mask(src, pad_id)
    # not padding AND not in the future: (batch, 1, 1, L) & (1, 1, L, L)
    tgt_mask = padding_mask(tgt_in, pad_id) & causal_mask(
        tgt_in.size(1), device=tgt_in.device
    )
    return src_mask, tgt_mask, src_mask
