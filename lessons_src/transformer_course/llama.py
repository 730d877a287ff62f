"""Llama: chapter 10's GPT with the four changes of a modern decoder
(chapter 11), in the style of ``gpt.py``.

* ``RMSNorm`` instead of ``LayerNorm``: no mean subtracted, no bias;
* rotary position embeddings (``rope``) instead of a learned position table:
  every attention layer turns its queries and keys by their position;
* grouped-query attention: ``n_kv_head`` key/value heads serve the
  ``n_head`` query heads (each one a group of ``n_head // n_kv_head``), so
  the KV cache (``attention.KVCache``, as in ``gpt.py``) is that many times
  smaller;
* ``SwiGLU`` instead of the GELU feed-forward: ``proj(silu(gate(x)) *
  fc(x))``.

No linear layer has a bias, and there is no dropout.  The rest is the GPT:
token embedding tied to the output head, pre-norm blocks with residual
connections, a final norm.  ``from_hf_llama`` loads the weights of a
``transformers.LlamaForCausalLM`` (SmolLM2 in chapter 11), and
``generation.generate`` runs the model with or without its cache.

``rope`` pairs feature ``j`` of a head with feature ``j + d_head / 2``, the
layout of Hugging Face's Llama (``rotate_half``); chapter 03 pairs
neighbouring features.  The two compute the same kind of rotation, on
features in another order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KVCache
from .gpt import GPT, check_context
from .masking import causal_mask
from .utils import (
    ModelConfig,
    check_all_used,
    check_hf_model,
    check_tied,
    hf_weights,
)

# -----------------------------------------------------------------------------
# The model
# -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LlamaConfig(ModelConfig):
    """Sizes of a Llama.  ``d_ff`` defaults to about ``8/3 * d_model``
    (rounded up to a multiple of 64), which gives SwiGLU's three matrices
    the parameters of a GELU feed-forward of width ``4 * d_model``.

    SmolLM2-135M is ``LlamaConfig(vocab_size=49152, block_size=8192,
    n_layer=30, n_head=9, n_kv_head=3, d_model=576, d_ff=1536,
    rope_base=100000.0)``.  ``block_size`` is the longest context the model
    is meant for: RoPE has no table that ends there.
    """

    vocab_size: int = 96
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int = 2
    d_model: int = 128
    # None asks for the default; __post_init__ replaces it with an int
    d_ff: int = None  # type: ignore[assignment]
    eps: float = 1e-5
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        if self.d_ff is None:
            n = -(-8 * self.d_model // (3 * 64))  # type: ignore[unreachable]
            object.__setattr__(self, "d_ff", 64 * n)  # 8/3 d, rounded up
        self.check_sizes(
            "vocab_size",
            "block_size",
            "n_layer",
            "n_head",
            "n_kv_head",
            "d_model",
            "d_ff",
            heads="n_head",
        )
        if self.n_head % self.n_kv_head:
            raise ValueError(
                f"LlamaConfig: n_head={self.n_head} is not divisible by "
                f"n_kv_head={self.n_kv_head}: every key/value head serves "
                "a group of the same number of query heads"
            )
        d_head = self.d_model // self.n_head
        if d_head % 2:
            raise ValueError(
                f"LlamaConfig: d_model / n_head = {d_head} is odd: "
                "RoPE turns the features of a head in pairs"
            )
        if self.rope_base <= 1 or self.eps < 0:
            raise ValueError(
                "LlamaConfig needs rope_base > 1 and eps >= 0, "
                f"got rope_base={self.rope_base}, eps={self.eps}"
            )


class RMSNorm(nn.Module):
    """``weight * x / sqrt(mean(x^2) + eps)`` over the last dimension:
    LayerNorm without the mean and without the bias."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ms = x.pow(2).mean(dim=-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(ms + self.eps))


def rope(x: torch.Tensor, start: int, base: float) -> torch.Tensor:
    """Rotary position embedding of queries or keys ``(batch, heads, T, d)``
    at positions ``start .. start + T - 1``.

    Feature ``j`` and feature ``j + d/2`` form a pair, turned by the angle
    ``position * base^(-2j/d)``: fast turns for the first pairs, slow ones
    for the last.
    """
    T, d = x.shape[-2:]
    pairs = torch.arange(0, d, 2, dtype=torch.float32, device=x.device)
    freqs = 1.0 / base ** (pairs / d)  # (d/2,)
    pos = torch.arange(start, start + T, dtype=torch.float32, device=x.device)
    angles = (pos[:, None] * freqs).repeat(1, 2)  # (T, d): j and j + d/2
    half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return x * angles.cos().to(x.dtype) + half * angles.sin().to(x.dtype)


class Attention(nn.Module):
    """Causal self-attention with RoPE and grouped-query attention.

    ``q`` makes ``n_head`` query heads, ``k`` and ``v`` only ``n_kv_head``
    key/value heads; the cache keeps those, and each is repeated for its
    group of query heads just before attending.
    """

    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv_head = c.n_head, c.n_kv_head
        self.d_head = c.d_model // c.n_head
        self.rope_base = c.rope_base
        kv_width = c.n_kv_head * self.d_head
        self.q = nn.Linear(c.d_model, c.d_model, bias=False)
        self.k = nn.Linear(c.d_model, kv_width, bias=False)
        self.v = nn.Linear(c.d_model, kv_width, bias=False)
        self.proj = nn.Linear(c.d_model, c.d_model, bias=False)

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None
    ) -> torch.Tensor:
        b, n, d = x.shape
        q = self.q(x).view(b, n, self.n_head, self.d_head).transpose(1, 2)
        k = self.k(x).view(b, n, self.n_kv_head, self.d_head).transpose(1, 2)
        v = self.v(x).view(b, n, self.n_kv_head, self.d_head).transpose(1, 2)
        past = 0 if cache is None else len(cache)
        q, k = rope(q, past, self.rope_base), rope(k, past, self.rope_base)
        if cache is not None:
            k, v = cache.update(k, v)
        group = self.n_head // self.n_kv_head
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        # new position past+i sees keys 0..past+i
        mask = causal_mask(past + n, device=x.device)[:, :, past:]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(y.transpose(1, 2).reshape(b, n, d))


class SwiGLU(nn.Module):
    """The gated feed-forward: ``proj(silu(gate(x)) * fc(x))``, width ``d_ff``
    inside."""

    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.fc = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.proj = nn.Linear(c.d_ff, c.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.silu(self.gate(x)) * self.fc(x))


class Block(nn.Module):
    """One Llama block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, c: LlamaConfig) -> None:
        super().__init__()
        self.norm1 = RMSNorm(c.d_model, c.eps)
        self.attn = Attention(c)
        self.norm2 = RMSNorm(c.d_model, c.eps)
        self.mlp = SwiGLU(c)

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None
    ) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cache)
        return x + self.mlp(self.norm2(x))


class Llama(nn.Module):
    """A Llama-style language model: ``logits = Llama(config)(tokens)``.

    The interface of ``gpt.GPT``: ``forward(tokens, cache=None)`` maps
    token ids ``(batch, T)`` to next-token logits ``(batch, T, vocab_size)``;
    with ``cache`` (from ``new_cache()``) ``tokens`` holds only the new
    positions.  There is no position table: the positions enter through
    ``rope`` in every attention layer.
    """

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.norm = RMSNorm(c.d_model, c.eps)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # tied
        self.apply(GPT._init_weights)

    new_cache = GPT.new_cache  # one KVCache per block, as in the GPT

    def forward(
        self, tokens: torch.Tensor, cache: Sequence[KVCache] | None = None
    ) -> torch.Tensor:
        check_context(self, tokens, cache)  # ids, cache, context length
        x = self.tok_emb(tokens)
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[i])
        return self.lm_head(self.norm(x))


# -----------------------------------------------------------------------------
# LlamaForCausalLM -> our Llama
# -----------------------------------------------------------------------------

#: Hugging Face's name of each part of a block -> ours.
HF_BLOCK_NAMES = (
    ("input_layernorm", "norm1"),
    ("self_attn.q_proj", "attn.q"),
    ("self_attn.k_proj", "attn.k"),
    ("self_attn.v_proj", "attn.v"),
    ("self_attn.o_proj", "attn.proj"),
    ("post_attention_layernorm", "norm2"),
    ("mlp.gate_proj", "mlp.gate"),
    ("mlp.up_proj", "mlp.fc"),
    ("mlp.down_proj", "mlp.proj"),
)


def from_hf_llama_config(hf_config) -> LlamaConfig:
    """The ``LlamaConfig`` of a ``transformers.LlamaConfig``; an error for
    every setting our Llama does not compute."""
    c = hf_config
    rope_params = getattr(c, "rope_parameters", None) or {
        "rope_theta": getattr(c, "rope_theta", 10000.0),
        **(getattr(c, "rope_scaling", None) or {}),
    }
    rope_type = rope_params.get("rope_type", rope_params.get("type"))
    unsupported = {
        "hidden_act": (c.hidden_act, "silu"),
        "attention_bias": (c.attention_bias, False),
        "mlp_bias": (getattr(c, "mlp_bias", False), False),
        "tie_word_embeddings": (c.tie_word_embeddings, True),
        "rope type": (rope_type or "default", "default"),
        "head_dim": (
            getattr(c, "head_dim", None)
            or c.hidden_size // c.num_attention_heads,
            c.hidden_size // c.num_attention_heads,
        ),
    }
    for name, (got, ours) in unsupported.items():
        if got != ours:
            raise ValueError(
                f"this Llama has {name}={got!r}; the course's Llama computes "
                f"{name}={ours!r} only (extend llama.py to load it)"
            )
    return LlamaConfig(
        vocab_size=c.vocab_size,
        block_size=c.max_position_embeddings,
        n_layer=c.num_hidden_layers,
        n_head=c.num_attention_heads,
        n_kv_head=c.num_key_value_heads,
        d_model=c.hidden_size,
        d_ff=c.intermediate_size,
        eps=c.rms_norm_eps,
        rope_base=float(rope_params["rope_theta"]),
    )


def from_hf_llama(hf_model) -> Llama:
    """The course's ``Llama`` with the weights of a ``LlamaForCausalLM``, in
    eval mode, on its device.

    Only names change (``nn.Linear`` on both sides, no transposes).  Loading
    is strict: a weight without a place, or a place without a weight, is an
    error.
    """
    check_hf_model(hf_model, "llama")  # a LlamaForCausalLM
    config = from_hf_llama_config(hf_model.config)
    sd = hf_weights(hf_model)  # name -> tensor
    ours = {
        "tok_emb.weight": sd.pop("model.embed_tokens.weight"),
        "norm.weight": sd.pop("model.norm.weight"),
    }
    check_tied(sd.pop("lm_head.weight", None), ours["tok_emb.weight"])
    for i in range(config.n_layer):
        for theirs, mine in HF_BLOCK_NAMES:
            ours[f"blocks.{i}.{mine}.weight"] = sd.pop(
                f"model.layers.{i}.{theirs}.weight"
            )
    check_all_used(sd)
    ours["lm_head.weight"] = ours["tok_emb.weight"]
    model = Llama(config)
    model.load_state_dict(ours, strict=True)
    return model.to(next(hf_model.parameters()).device).eval()
