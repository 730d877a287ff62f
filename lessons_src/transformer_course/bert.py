"""BERT as the course's own encoder, running real pretrained weights (chapter 12).

BERT is the encoder of chapter 07 with four settings changed and one piece added:

* post-norm layers (``norm_first=False``), GELU in the feed-forward network, and
  ``LayerNorm`` with ``eps=1e-12``: all three are arguments of ``transformer.EncoderLayer``;
* **learned** position embeddings instead of the sinusoidal table, plus **token-type**
  (segment) embeddings that tell sentence A from sentence B, summed with the token embeddings
  and normalised by one more ``LayerNorm``: that is ``BertEmbeddings`` below, the only new piece.

``bert_from_hf(model)`` copies the weights of a Hugging Face ``BertModel`` (MiniLM,
``bert-base-uncased``, ...) into a ``BertEncoder``.  Sentence vectors are the mean of its
token vectors over the real tokens (``pretrained.mean_pool`` / ``pretrained.embed_sentences``);
``cosine_similarity`` and ``semantic_search`` compare them.

Masks: the public API takes Hugging Face's ``attention_mask`` (``(batch, length)``, 1 = real
token, 0 = padding) and turns it into the course's boolean ``(batch, 1, 1, length)`` mask
(``True`` = may attend).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .layers import LayerNorm
from .transformer import EncoderLayer


@dataclass(frozen=True)
class BertConfig:
    """The sizes of a BERT encoder (defaults: ``bert-base-uncased``)."""

    vocab_size: int = 30522
    d_model: int = 768
    num_layers: int = 12
    num_heads: int = 12
    d_ff: int = 3072
    max_len: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    eps: float = 1e-12

    @classmethod
    def from_hf(cls, hf_config: Any) -> BertConfig:
        """Read the sizes from a Hugging Face ``BertConfig`` (``model.config``).

        Refuses configurations this encoder does not implement (another activation, relative
        position embeddings) instead of silently computing something else.
        """
        act = getattr(hf_config, "hidden_act", "gelu")
        if act != "gelu":
            raise ValueError(f"BertEncoder implements hidden_act='gelu' (exact, erf-based), got {act!r}")
        pos = getattr(hf_config, "position_embedding_type", "absolute")
        if pos not in (None, "absolute"):
            raise ValueError(f"BertEncoder implements absolute position embeddings, got {pos!r}")
        return cls(
            vocab_size=hf_config.vocab_size,
            d_model=hf_config.hidden_size,
            num_layers=hf_config.num_hidden_layers,
            num_heads=hf_config.num_attention_heads,
            d_ff=hf_config.intermediate_size,
            max_len=hf_config.max_position_embeddings,
            type_vocab_size=hf_config.type_vocab_size,
            dropout=hf_config.hidden_dropout_prob,
            eps=hf_config.layer_norm_eps,
        )


class BertEmbeddings(nn.Module):
    """Token + learned position + token-type embeddings, summed, then ``LayerNorm`` and dropout.

    Unlike the sinusoidal table of chapter 03, the position vectors are parameters learned in
    pre-training, one per position up to ``max_len``; a sequence can be no longer than that.
    Token-type ids (0 for sentence A, 1 for sentence B) add one of ``type_vocab_size``
    learned vectors.  The token embeddings are *not* scaled by ``sqrt(d_model)``.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.word = nn.Embedding(config.vocab_size, config.d_model)
        self.position = nn.Embedding(config.max_len, config.d_model)
        self.token_type = nn.Embedding(config.type_vocab_size, config.d_model)
        self.norm = LayerNorm(config.d_model, eps=config.eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        if input_ids.dim() != 2 or input_ids.is_floating_point():
            raise ValueError(
                f"input_ids must be integer ids of shape (batch, length), got {tuple(input_ids.shape)} "
                f"of dtype {input_ids.dtype}"
            )
        n = input_ids.size(1)
        if n > self.config.max_len:
            raise ValueError(
                f"sequence of length {n} is longer than the {self.config.max_len} learned positions; "
                "truncate it (tokenizer(..., truncation=True))"
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if token_type_ids.shape != input_ids.shape:
            raise ValueError(
                f"token_type_ids {tuple(token_type_ids.shape)} must have the shape of input_ids "
                f"{tuple(input_ids.shape)}"
            )
        positions = torch.arange(n, device=input_ids.device)
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)
        return self.dropout(self.norm(x))


class EncoderOutput(NamedTuple):
    """What ``BertEncoder`` returns (the field names match Hugging Face's outputs)."""

    last_hidden_state: torch.Tensor  # (batch, length, d_model)
    hidden_states: tuple[torch.Tensor, ...]  # embeddings, then the output of every layer
    attentions: tuple[torch.Tensor, ...]  # one (batch, heads, length, length) per layer


def attention_mask_to_course_mask(attention_mask: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Hugging Face's ``(batch, length)`` 1/0 mask -> the course's boolean ``(batch, 1, 1, length)``."""
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask {tuple(attention_mask.shape)} must have the shape of input_ids "
            f"{tuple(input_ids.shape)} (batch, length)"
        )
    return attention_mask.bool()[:, None, None, :]


class BertEncoder(nn.Module):
    """BERT: ``BertEmbeddings`` then ``num_layers`` post-norm GELU ``EncoderLayer``s.

    ``forward(input_ids, attention_mask=None, token_type_ids=None)`` takes the tensors a
    Hugging Face tokenizer returns (so ``model(**batch)`` works) and returns an
    ``EncoderOutput``.  There is no final norm: in a post-norm stack every layer already ends
    with one.  Padding keys are masked out; padding *queries* still get (meaningless)
    vectors, exactly as in Hugging Face's ``BertModel``.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList(
            EncoderLayer(
                config.d_model,
                config.num_heads,
                config.d_ff,
                dropout=config.dropout,
                activation="gelu",
                norm_first=False,
                eps=config.eps,
            )
            for _ in range(config.num_layers)
        )

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> EncoderOutput:
        mask = None if attention_mask is None else attention_mask_to_course_mask(attention_mask, input_ids)
        x = self.embeddings(input_ids, token_type_ids)
        hidden, attentions = [x], []
        for layer in self.layers:
            x = layer(x, mask)
            hidden.append(x)
            attentions.append(layer.attn_weights)
        return EncoderOutput(x, tuple(hidden), tuple(attentions))


# Hugging Face name (regular expression) -> course name.  Everything the encoder needs is
# here; ``_HF_IGNORED`` lists what a BERT checkpoint may hold besides (the pooler, heads).
_HF_TO_COURSE = [
    (r"embeddings\.word_embeddings\.", "embeddings.word."),
    (r"embeddings\.position_embeddings\.", "embeddings.position."),
    (r"embeddings\.token_type_embeddings\.", "embeddings.token_type."),
    (r"embeddings\.LayerNorm\.", "embeddings.norm."),
    (r"encoder\.layer\.(\d+)\.attention\.self\.query\.", r"layers.\1.self_attn.W_q."),
    (r"encoder\.layer\.(\d+)\.attention\.self\.key\.", r"layers.\1.self_attn.W_k."),
    (r"encoder\.layer\.(\d+)\.attention\.self\.value\.", r"layers.\1.self_attn.W_v."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"layers.\1.self_attn.W_o."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.", r"layers.\1.norm1."),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.", r"layers.\1.ff.linear1."),
    (r"encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.ff.linear2."),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.norm2."),
]
_HF_IGNORED = re.compile(r"(embeddings\.position_ids|embeddings\.token_type_ids|pooler\.|cls\.|classifier\.)")


def hf_to_course_state_dict(hf_state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a Hugging Face BERT state dict to ``BertEncoder``'s parameter names.

    Accepts the state dict of a ``BertModel`` or of a task model (``BertFor...``, whose keys
    start with ``bert.``).  The pooler and task heads are dropped; any other key it does not
    know is an error, so a checkpoint of a different architecture is not half-loaded.
    """
    out: dict[str, torch.Tensor] = {}
    unknown = []
    for key, value in hf_state_dict.items():
        name = key[len("bert.") :] if key.startswith("bert.") else key
        if _HF_IGNORED.match(name):
            continue
        for pattern, repl in _HF_TO_COURSE:
            if re.match(pattern, name):
                out[re.sub(pattern, repl, name, count=1)] = value
                break
        else:
            unknown.append(key)
    if unknown:
        raise KeyError(f"{len(unknown)} keys are not BERT encoder weights, e.g. {unknown[:3]}")
    return out


def load_bert_weights(model: BertEncoder, hf_state_dict: Mapping[str, torch.Tensor]) -> BertEncoder:
    """Copy a Hugging Face BERT state dict into ``model`` (every parameter must be covered)."""
    state = hf_to_course_state_dict(hf_state_dict)
    expected = set(model.state_dict())
    missing, extra = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or extra:
        raise KeyError(
            f"the checkpoint does not fit this BertEncoder: missing {missing[:3]} ({len(missing)} in all), "
            f"unexpected {extra[:3]} ({len(extra)} in all); do the configurations agree?"
        )
    for name, tensor in model.state_dict().items():
        if state[name].shape != tensor.shape:
            raise ValueError(
                f"{name}: the checkpoint has shape {tuple(state[name].shape)}, the model {tuple(tensor.shape)}"
            )
    model.load_state_dict(state, strict=True)
    return model


def bert_from_hf(hf_model: nn.Module) -> BertEncoder:
    """A ``BertEncoder`` with the configuration and weights of a Hugging Face BERT model.

    ``hf_model`` is a ``BertModel`` or a ``BertFor...`` task model; the result is in eval mode
    (no dropout), ready to compare with ``hf_model``.
    """
    config = getattr(hf_model, "config", None)
    if config is None or getattr(config, "model_type", None) != "bert":
        raise TypeError(f"expected a Hugging Face BERT model, got {type(hf_model).__name__}")
    model = BertEncoder(BertConfig.from_hf(config))
    return load_bert_weights(model, hf_model.state_dict()).eval()


def cosine_similarity(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """All pairwise cosines: ``a`` ``(n, d)`` and ``b`` ``(m, d)`` give ``(n, m)``.

    The cosine of two vectors is their dot product after each is scaled to length 1: 1 for
    the same direction, 0 for orthogonal, -1 for opposite.
    """
    if a.dim() == 1:
        a = a.unsqueeze(0)
    if b.dim() == 1:
        b = b.unsqueeze(0)
    if a.dim() != 2 or b.dim() != 2 or a.size(1) != b.size(1):
        raise ValueError(f"expected (n, d) and (m, d) with the same d, got {tuple(a.shape)} and {tuple(b.shape)}")
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def semantic_search(
    query_embeddings: torch.Tensor, corpus_embeddings: torch.Tensor, top_k: int = 3
) -> list[list[tuple[int, float]]]:
    """For each query, the ``top_k`` most similar corpus entries as ``(index, cosine)``, best first."""
    if query_embeddings.dim() == 1:
        query_embeddings = query_embeddings.unsqueeze(0)
    if not 1 <= top_k <= corpus_embeddings.size(0):
        raise ValueError(f"top_k must be between 1 and the corpus size {corpus_embeddings.size(0)}, got {top_k}")
    scores = cosine_similarity(query_embeddings, corpus_embeddings)
    values, indices = scores.topk(top_k, dim=-1)
    return [
        [(int(i), float(v)) for i, v in zip(row_i, row_v)] for row_i, row_v in zip(indices.tolist(), values.tolist())
    ]
