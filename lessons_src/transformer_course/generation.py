"""Generating text with a causal language model (chapter 10): greedy decoding
and sampling.

``generate`` continues a batch of token ids with any model that maps ids
``(batch, T)`` to logits ``(batch, T, vocab)`` and has ``config.block_size``
and ``new_cache()`` (the course's ``gpt.GPT``), with or without a KV cache
(``attention.KVCache``): both paths give the same tokens.  Sampling goes
through ``next_token_probs``: temperature, then top-k and top-p (nucleus)
filtering.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .gpt import GPT


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row, set the others to ``-inf``.

    Exactly ``k`` survive even when there are ties at the boundary.
    """
    if k < 1:
        raise ValueError(f"top_k must be at least 1, got {k}")
    k = min(k, logits.size(-1))
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(
        -1, logits.topk(k, dim=-1).indices, True
    )
    return logits.masked_fill(~keep, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering: keep the smallest set of most likely tokens whose
    probability reaches ``p``; set the other logits to ``-inf``.  The most
    likely token always stays."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    if p == 1.0:
        # everything: a cumulative sum in floating point can reach 1 before
        # the last token, which would drop it
        return logits
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    # Probability of everything ranked strictly above each token: keep a token
    # while that is < p.
    before = probs.cumsum(dim=-1) - probs
    keep_sorted = before < p
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def next_token_probs(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """The sampling distribution for next-token ``logits`` ``(..., vocab)``:
    divide by the temperature, then apply the top-k and top-p filters, then
    softmax."""
    if temperature <= 0:
        raise ValueError(
            "temperature must be positive (use greedy decoding for 'zero'), "
            f"got {temperature}"
        )
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits.softmax(dim=-1)


@torch.no_grad()
def generate(
    model: GPT,
    tokens: torch.Tensor,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Continue ``tokens`` ``(batch, T)`` by ``max_new_tokens`` tokens; returns
    ``(batch, T + new)``.

    ``do_sample=False`` is greedy decoding (the most likely token every step);
    with ``do_sample=True`` each token is drawn from
    ``next_token_probs(logits, temperature, top_k, top_p)`` using
    ``generator``.  ``use_cache=True`` feeds only the newest token through the
    model and keeps the keys and values of the earlier ones in a ``KVCache``;
    once the text is longer than ``block_size``, the window slides and every
    step re-reads the last ``block_size`` tokens, exactly as without the
    cache.  The model is run in eval mode.
    """
    if tokens.dim() != 2 or tokens.size(1) == 0:
        raise ValueError(
            "tokens must have shape (batch, length >= 1), "
            f"got {tuple(tokens.shape)}"
        )
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    block = model.config.block_size
    was_training = model.training
    model.eval()
    out = tokens
    cache = model.new_cache() if use_cache else None
    step_input = tokens[:, -block:]
    for _ in range(max_new_tokens):
        if cache is not None:
            # window full: re-read the last block
            if len(cache[0]) + step_input.size(1) > block:
                cache = model.new_cache()
                step_input = out[:, -block:]
            logits = model(step_input, cache=cache)[:, -1, :]
        else:
            logits = model(out[:, -block:])[:, -1, :]
        if do_sample:
            probs = next_token_probs(logits.float(), temperature, top_k, top_p)
            nxt = torch.multinomial(probs, 1, generator=generator)
        else:
            nxt = logits.argmax(dim=-1, keepdim=True)
        out = torch.cat([out, nxt], dim=1)
        step_input = nxt
    model.train(was_training)
    return out
