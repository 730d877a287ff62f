"""GPT: a decoder-only transformer in the GPT-2 design (chapter 10), in the
style of nanoGPT's ``model.py``.

* token embedding + *learned* position embedding (GPT-2 learns positions, no
  sinusoids);
* ``n_layer`` pre-norm blocks (``Block``): ``x = x + attn(norm1(x))``, then
  ``x = x + mlp(norm2(x))``, where ``attn`` is ``CausalSelfAttention``, a
  position attending only to itself and earlier positions;
* a final ``LayerNorm`` (pre-norm stacks leave the residual stream
  un-normalised);
* an output head whose weight is the token embedding matrix (tied weights).

A ``Block`` computes exactly what chapter 07's
``transformer.EncoderLayer(norm_first=True)`` computes with chapter 08's
``causal_mask`` (``tests/test_gpt.py`` checks it), written the way fast GPTs
are: one fused matrix for query, key and value, PyTorch's fused attention with
``is_causal=True`` instead of a mask tensor, and ``nn.LayerNorm`` (chapter 06
shows the course's ``LayerNorm`` equals it).

What a GPT is trained on and with lives next to it: the corpus in
``python_docs``, the character tokeniser in ``tokenization``, batches,
evaluation, training and checkpoints in ``train_gpt``, sampling in
``generation``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KVCache
from .layers import ACTIVATIONS
from .masking import causal_mask
from .utils import ModelConfig, check_token_ids

# -----------------------------------------------------------------------------
# The model
# -----------------------------------------------------------------------------


@dataclass(frozen=True)
class GPTConfig(ModelConfig):
    """Sizes of a GPT.  ``d_ff`` defaults to ``4 * d_model`` as in GPT-2.

    GPT-2 small is ``GPTConfig(vocab_size=50257, block_size=1024, n_layer=12,
    n_head=12, d_model=768, activation="gelu_tanh")``; the course trains much
    smaller ones with the exact GELU (``"gelu"``).  ``activation`` is any of
    ``layers.ACTIVATIONS``.
    """

    vocab_size: int = 96
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    d_ff: int | None = None
    dropout: float = 0.0
    eps: float = 1e-5
    activation: str = "gelu"

    def __post_init__(self) -> None:
        # the default, filled in once (the config is frozen afterwards)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        self.check_sizes(
            "vocab_size",
            "block_size",
            "n_layer",
            "n_head",
            "d_model",
            "d_ff",
            heads="n_head",
        )
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, "
                f"got {self.activation!r}"
            )


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position ``t`` sees positions
    ``0..t`` only.

    ``qkv`` computes queries, keys and values with one matrix of width
    ``3 * d_model``; ``proj`` mixes the heads' outputs.  With a ``cache`` the
    new keys and values are appended to the earlier ones, and the new queries
    (the last positions) attend to all of them.
    """

    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.n_head = c.n_head
        self.dropout = c.dropout
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model)
        self.proj = nn.Linear(c.d_model, c.d_model)

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None
    ) -> torch.Tensor:
        b, n, d = x.shape
        # (b, n, 3d) -> three (b, n, d) -> three (b, heads, n, d_head)
        q, k, v = (
            t.view(b, n, self.n_head, d // self.n_head).transpose(1, 2)
            for t in self.qkv(x).split(d, dim=2)
        )
        past = 0
        if cache is not None:
            past = len(cache)
            k, v = cache.update(k, v)
        p = self.dropout if self.training else 0.0
        if past == 0:
            # queries and keys are the same positions: the plain causal mask
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=p, is_causal=True
            )
        else:
            # new position past+i sees keys 0..past+i:
            # the last rows of the causal mask
            mask = (
                None
                if n == 1
                else causal_mask(past + n, device=x.device)[:, :, past:, :]
            )
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=p
            )
        return self.proj(y.transpose(1, 2).contiguous().view(b, n, d))


class MLP(nn.Module):
    """The feed-forward network of a block: ``proj(act(fc(x)))``, width
    ``d_ff`` inside.
    """

    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        d_ff = c.d_ff or 4 * c.d_model  # GPT-2's width unless set
        self.fc = nn.Linear(c.d_model, d_ff)
        self.proj = nn.Linear(d_ff, c.d_model)
        self.act = ACTIVATIONS[c.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    """One GPT-2 block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``
    (pre-norm).
    """

    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(c.d_model, eps=c.eps)
        self.attn = CausalSelfAttention(c)
        self.norm2 = nn.LayerNorm(c.d_model, eps=c.eps)
        self.mlp = MLP(c)
        self.drop = nn.Dropout(c.dropout) if c.dropout > 0 else nn.Identity()

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None
    ) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x), cache))
        return x + self.drop(self.mlp(self.norm2(x)))


class GPT(nn.Module):
    """A GPT-2-style language model: ``logits = GPT(config)(tokens)``.

    ``forward(tokens, cache=None)`` takes token ids ``(batch, T)`` and returns
    next-token logits ``(batch, T, vocab_size)``: row ``t`` is the prediction
    for token ``t + 1``, made from tokens ``0..t`` only.  With ``cache`` (from
    ``new_cache()``) the keys and values of earlier calls are reused, and
    ``tokens`` holds only the *new* positions.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_emb = nn.Embedding(c.block_size, c.d_model)
        self.drop = nn.Dropout(c.dropout) if c.dropout > 0 else nn.Identity()
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.norm = nn.LayerNorm(c.d_model, eps=c.eps)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        # tied: one matrix reads and writes tokens
        self.lm_head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        # GPT-2: scale the projections that write into the residual stream
        # by 1/sqrt(2 n_layer), so the variance of the stream does not grow
        # with depth.
        for name, p in self.named_parameters():
            if name.endswith(("attn.proj.weight", "mlp.proj.weight")):
                nn.init.normal_(
                    p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer)
                )

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def new_cache(self) -> list[KVCache]:
        """An empty KV cache: one ``KVCache`` per block."""
        return [KVCache() for _ in self.blocks]

    def forward(
        self, tokens: torch.Tensor, cache: Sequence[KVCache] | None = None
    ) -> torch.Tensor:
        past = check_context(self, tokens, cache)  # cached positions
        n = tokens.size(1)
        # Positions past..past+n-1 are rows past..past+n-1 of the table:
        # a slice, the same as looking up torch.arange(past, past + n),
        # minus the lookup.
        x = self.drop(
            self.tok_emb(tokens) + self.pos_emb.weight[past : past + n]
        )
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[i])
        return self.lm_head(self.norm(x))


def check_context(
    model: nn.Module, tokens: torch.Tensor, cache: Sequence[KVCache] | None
) -> int:  # model: GPT or llama.Llama
    """The number of positions already in ``cache`` (0 without one), after
    checking what a decoder's ``forward`` needs: ``tokens`` are ids of the
    model's vocabulary, at least one per sequence; ``cache`` has one entry
    per block; the cached and new positions fit in ``block_size``."""
    c = cast(GPTConfig, model.config)  # or a LlamaConfig: the same sizes
    n = check_token_ids(tokens, c.vocab_size).size(1)
    n_blocks = len(cast(nn.ModuleList, model.blocks))
    if cache is not None and len(cache) != n_blocks:
        raise ValueError(
            f"cache has {len(cache)} entries for {n_blocks} blocks: make it "
            "with this model's new_cache()"
        )
    past = len(cache[0]) if cache is not None else 0
    if n == 0:
        raise ValueError(
            f"tokens has shape {tuple(tokens.shape)}: no positions to "
            "predict from; a model needs at least one token per sequence "
            "(start generation from a prompt of one token or more)"
        )
    if past + n > c.block_size:
        raise ValueError(
            f"{past} cached + {n} new positions exceed "
            f"block_size={c.block_size}, the longest context the model "
            "reads; crop the input to its last block_size tokens"
        )
    return past


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats per token) of next-token ``logits`` against
    ``targets``.
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and targets "
            f"{tuple(targets.shape)} disagree: targets must be "
            "logits.shape[:-1] (one target id per position)"
        )
    return F.cross_entropy(
        logits.reshape(-1, logits.size(-1)), targets.reshape(-1)
    )
