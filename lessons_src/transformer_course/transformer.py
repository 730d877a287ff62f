"""Encoder and decoder layers, their stacks, and the full encoder-decoder
Transformer (chapter 07).

Each sub-layer (attention or feed-forward) is wrapped in a residual connection
and a layer norm, with dropout on the sub-layer's output:

* post-norm (the 2017 paper, BERT; ``norm_first=False``):
  ``x = norm(x + dropout(sublayer(x)))``
* pre-norm (GPT-2 and most models since; ``norm_first=True``):
  ``x = x + dropout(sublayer(norm(x)))``

Masks follow the course convention (boolean, ``True`` = may attend; see
``masking``).  ``copy_weights_to_torch`` copies a layer's weights into
PyTorch's ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``, for
the parity checks of chapter 07 and ``tests/test_transformer.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention
from .layers import LayerNorm, PositionwiseFeedForward
from .positional import PositionalEncoding
from .utils import ModelConfig, check_token_ids


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each with residual + norm.

    Its attention weights from the last call are kept in ``self.attn_weights``
    (``(batch, heads, L, L)``, detached) for plotting.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        eps: float = 1e-5,
        use_sdpa: bool = False,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            d_model, num_heads, dropout=dropout, use_sdpa=use_sdpa
        )
        self.ff = PositionwiseFeedForward(
            d_model, d_ff, dropout=dropout, activation=activation
        )
        self.norm1 = LayerNorm(d_model, eps=eps)
        self.norm2 = LayerNorm(d_model, eps=eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.norm_first = norm_first
        self.attn_weights: torch.Tensor | None = None

    def _sa(
        self, x: torch.Tensor, mask: torch.Tensor | None, cache: KVCache | None
    ) -> torch.Tensor:
        out, w = self.self_attn(
            x, mask=mask, need_weights=not self.self_attn.use_sdpa, cache=cache
        )
        self.attn_weights = None if w is None else w.detach()
        return self.dropout1(out)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        if self.norm_first:
            x = x + self._sa(self.norm1(x), mask, cache)
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self._sa(x, mask, cache))
        return self.norm2(x + self.dropout2(self.ff(x)))


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder output,
    feed-forward.

    Keeps the last weights in ``self.self_attn_weights`` and
    ``self.cross_attn_weights``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        activation: str = "relu",
        norm_first: bool = False,
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            d_model, num_heads, dropout=dropout
        )
        self.cross_attn = MultiHeadAttention(
            d_model, num_heads, dropout=dropout
        )
        self.ff = PositionwiseFeedForward(
            d_model, d_ff, dropout=dropout, activation=activation
        )
        self.norm1 = LayerNorm(d_model, eps=eps)
        self.norm2 = LayerNorm(d_model, eps=eps)
        self.norm3 = LayerNorm(d_model, eps=eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        self.norm_first = norm_first
        self.self_attn_weights: torch.Tensor | None = None
        self.cross_attn_weights: torch.Tensor | None = None

    def _sa(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        out, w = self.self_attn(x, mask=mask)
        self.self_attn_weights = None if w is None else w.detach()
        return self.dropout1(out)

    def _ca(
        self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        out, w = self.cross_attn(x, memory, memory, mask=mask)
        self.cross_attn_weights = None if w is None else w.detach()
        return self.dropout2(out)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self.norm_first:
            x = x + self._sa(self.norm1(x), tgt_mask)
            x = x + self._ca(self.norm2(x), memory, memory_mask)
            return x + self.dropout3(self.ff(self.norm3(x)))
        x = self.norm1(x + self._sa(x, tgt_mask))
        x = self.norm2(x + self._ca(x, memory, memory_mask))
        return self.norm3(x + self.dropout3(self.ff(x)))


class TokenAndPositionEmbedding(nn.Module):
    """Token embedding scaled by sqrt(d_model), plus sinusoidal positions,
    then dropout."""

    def __init__(
        self, vocab_size: int, d_model: int, max_len: int, dropout: float
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = PositionalEncoding(
            d_model, max_len=max_len, dropout=dropout
        )
        self.scale = math.sqrt(d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_token_ids(tokens, self.vocab_size)
        return self.pos(self.tok(tokens) * self.scale)


class LayerStack(nn.Module):
    """Token embedding + positional encoding, then ``num_layers`` layers of
    one kind (each with its own weights), then, in a pre-norm stack, one more
    layer norm.  ``Encoder`` and ``Decoder`` differ only in their layer and in
    what it reads."""

    layer_type: type[nn.Module]

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_layers: int,
        num_heads: int,
        d_ff: int,
        max_len: int = 512,
        dropout: float = 0.1,
        norm_first: bool = False,
    ) -> None:
        super().__init__()
        self.embed = TokenAndPositionEmbedding(
            vocab_size, d_model, max_len, dropout
        )
        self.layers = nn.ModuleList(
            self.layer_type(
                d_model, num_heads, d_ff, dropout, norm_first=norm_first
            )
            for _ in range(num_layers)
        )
        # Pre-norm stacks leave the residual stream un-normalised, so they end
        # with one more norm.
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()


class Encoder(LayerStack):
    """A stack of encoder layers: each reads the source (self-attention under
    ``src_mask``)."""

    layer_type = EncoderLayer

    def forward(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.embed(src)
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)


class Decoder(LayerStack):
    """A stack of decoder layers: each reads the target so far and the
    encoder's ``memory``."""

    layer_type = DecoderLayer

    def forward(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = self.embed(tgt_in)
        for layer in self.layers:
            x = layer(x, memory, tgt_mask, memory_mask)
        return self.norm(x)


@dataclass(frozen=True)
class TransformerConfig(ModelConfig):
    """Sizes of an encoder-decoder Transformer (defaults: the base model of
    "Attention Is All You Need", except that the paper ties its embeddings:
    ``tie_embeddings=True`` with one shared vocabulary)."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    num_heads: int = 8
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 512
    norm_first: bool = False
    tie_embeddings: bool = False

    def __post_init__(self) -> None:
        self.check_sizes(
            "src_vocab_size",
            "tgt_vocab_size",
            "d_model",
            "num_heads",
            "num_encoder_layers",
            "num_decoder_layers",
            "d_ff",
            "max_len",
            heads="num_heads",
        )
        if self.tie_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                "tie_embeddings shares one table between the source, the "
                "target and the output layer, so src_vocab_size "
                f"({self.src_vocab_size}) must equal tgt_vocab_size "
                f"({self.tgt_vocab_size})"
            )


class Transformer(nn.Module):
    """The encoder-decoder Transformer of "Attention Is All You Need", built
    from a :class:`TransformerConfig`.

    ``encode(src, src_mask)`` runs once per source;
    ``decode(tgt_in, memory, tgt_mask, memory_mask)`` returns next-token
    logits ``(batch, L_tgt, tgt_vocab_size)`` and is called once per training
    step (teacher forcing) or once per generated token (greedy decoding).
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(
                "Transformer takes a TransformerConfig, got "
                f"{type(config).__name__}; write Transformer(TransformerConfig"
                "(src_vocab_size, tgt_vocab_size, d_model=...))"
            )
        c = self.config = config
        self.encoder = Encoder(
            c.src_vocab_size,
            c.d_model,
            c.num_encoder_layers,
            c.num_heads,
            c.d_ff,
            c.max_len,
            c.dropout,
            c.norm_first,
        )
        self.decoder = Decoder(
            c.tgt_vocab_size,
            c.d_model,
            c.num_decoder_layers,
            c.num_heads,
            c.d_ff,
            c.max_len,
            c.dropout,
            c.norm_first,
        )
        self.out = nn.Linear(c.d_model, c.tgt_vocab_size)
        # Glorot initialisation of every matrix, as in the reference code
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if c.tie_embeddings:
            # One table for both embeddings and the output layer (paper,
            # section 3.4), N(0, 1/d_model) as in the reference code: times
            # sqrt(d_model), a token vector has entries of about unit size.
            shared = self.encoder.embed.tok.weight
            nn.init.normal_(shared, std=c.d_model**-0.5)
            self.decoder.embed.tok.weight = shared
            self.out.weight = shared

    def encode(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.encoder(src, src_mask)

    def decode(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.out(self.decoder(tgt_in, memory, tgt_mask, memory_mask))

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        memory = self.encode(src, src_mask)
        return self.decode(
            tgt_in,
            memory,
            tgt_mask,
            src_mask if memory_mask is None else memory_mask,
        )


def _copy_attention(
    ours: MultiHeadAttention, theirs: nn.MultiheadAttention
) -> None:
    """Our four projections into PyTorch's ``in_proj`` (W_q, W_k, W_v
    stacked) and ``out_proj``."""
    theirs.in_proj_weight.copy_(
        torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight])
    )
    theirs.in_proj_bias.copy_(
        torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias])
    )
    theirs.out_proj.weight.copy_(ours.W_o.weight)
    theirs.out_proj.bias.copy_(ours.W_o.bias)


@torch.no_grad()
def copy_weights_to_torch(
    ours: EncoderLayer | DecoderLayer,
    theirs: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer,
) -> nn.Module:
    """Copy our layer's weights into PyTorch's equivalent layer and return it.

    ``EncoderLayer`` -> ``nn.TransformerEncoderLayer``, ``DecoderLayer`` ->
    ``nn.TransformerDecoderLayer``.  Both must be built alike (``d_model``,
    heads, ``d_ff``, ``norm_first``, activation); a difference is reported
    before anything is copied.
    """
    expected = {
        EncoderLayer: nn.TransformerEncoderLayer,
        DecoderLayer: nn.TransformerDecoderLayer,
    }
    if not isinstance(theirs, expected.get(type(ours), ())):
        raise TypeError(
            "copy EncoderLayer -> nn.TransformerEncoderLayer or "
            "DecoderLayer -> nn.TransformerDecoderLayer, got "
            f"{type(ours).__name__} -> {type(theirs).__name__}"
        )
    # a function's name: relu / gelu
    their_act = getattr(theirs.activation, "__name__", ours.ff.activation)
    settings = {
        "d_model": (ours.self_attn.d_model, theirs.self_attn.embed_dim),
        "num_heads": (ours.self_attn.num_heads, theirs.self_attn.num_heads),
        "d_ff": (ours.ff.linear1.out_features, theirs.linear1.out_features),
        "norm_first": (ours.norm_first, theirs.norm_first),
        "activation": (ours.ff.activation, their_act),
        "eps": (ours.norm1.eps, theirs.norm1.eps),
    }
    for name, (mine, its) in settings.items():
        if mine != its:
            raise ValueError(
                f"the layers differ in {name}: "
                f"ours {mine!r}, PyTorch's {its!r}"
            )
    _copy_attention(ours.self_attn, theirs.self_attn)
    if isinstance(ours, DecoderLayer):
        _copy_attention(
            ours.cross_attn,
            cast(nn.TransformerDecoderLayer, theirs).multihead_attn,
        )
    same = {
        "ff.linear1": "linear1",
        "ff.linear2": "linear2",
        "norm1": "norm1",
        "norm2": "norm2",
    }
    if isinstance(ours, DecoderLayer):
        same["norm3"] = "norm3"
    for mine, its in same.items():
        theirs.get_parameter(f"{its}.weight").copy_(
            ours.get_parameter(f"{mine}.weight")
        )
        theirs.get_parameter(f"{its}.bias").copy_(
            ours.get_parameter(f"{mine}.bias")
        )
    return theirs
