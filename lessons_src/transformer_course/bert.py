"""BERT as the course's own encoder, running real pretrained weights
(chapter 12).

BERT is the encoder of chapter 07 with four settings changed and one piece
added:

* post-norm layers (``norm_first=False``), GELU in the feed-forward network,
  and ``LayerNorm`` with ``eps=1e-12``: all three are arguments of
  ``transformer.EncoderLayer``;
* **learned** position embeddings instead of the sinusoidal table, plus
  **token-type** (segment) embeddings that tell sentence A from sentence B,
  summed with the token embeddings and normalised by one more ``LayerNorm``:
  that is ``BertEmbeddings`` below, the only new piece.

Sentence vectors are the mean of its token vectors over the real tokens
(``pretrained.mean_pool`` / ``pretrained.embed_sentences``);
``cosine_similarity`` and ``semantic_search`` compare them.

Masked-language modelling, BERT's pre-training objective: ``mask_tokens`` (15 %
of the positions; 80 / 10 / 10 ``[MASK]`` / random / kept), ``BertForMLM`` (the
encoder plus BERT's masked-LM head) and ``pretrain_mlm``.

Hugging Face's side (``hf_bert``): ``bert_from_hf`` puts a ``BertModel``'s
weights (MiniLM, ``bert-base-uncased``, ...) into a ``BertEncoder``,
``to_hf_masked_lm`` turns a ``BertForMLM`` into a ``BertForMaskedLM``;
WordPiece tokenisers come from there too.

Masks: the public API takes Hugging Face's ``attention_mask``
(``(batch, length)``, 1 = real token, 0 = padding) and turns it into the
course's boolean ``(batch, 1, 1, length)`` mask (``True`` = may attend).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .layers import LayerNorm
from .training import History, fit, param_groups, warmup_decay
from .transformer import EncoderLayer
from .utils import ModelConfig, check_token_ids


@dataclass(frozen=True)
class BertConfig(ModelConfig):
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

    def __post_init__(self) -> None:
        self.check_sizes(
            "vocab_size",
            "d_model",
            "num_layers",
            "num_heads",
            "d_ff",
            "max_len",
            "type_vocab_size",
            heads="num_heads",
        )

    @classmethod
    def from_hf(cls, hf_config: Any) -> BertConfig:
        """Read the sizes from a Hugging Face ``BertConfig``
        (``model.config``).

        Refuses configurations this encoder does not implement (another
        activation, relative position embeddings) instead of silently computing
        something else.
        """
        act = getattr(hf_config, "hidden_act", "gelu")
        if act != "gelu":
            raise ValueError(
                "BertEncoder implements hidden_act='gelu' "
                f"(exact, erf-based), got {act!r}"
            )
        pos = getattr(hf_config, "position_embedding_type", "absolute")
        if pos not in (None, "absolute"):
            raise ValueError(
                "BertEncoder implements absolute position embeddings, "
                f"got {pos!r}"
            )
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
    """Token + learned position + token-type embeddings, summed, then
    ``LayerNorm`` and dropout.

    Unlike the sinusoidal table of chapter 03, the position vectors are
    parameters learned in pre-training, one per position up to ``max_len``; a
    sequence can be no longer than that.  Token-type ids (0 for sentence A, 1
    for sentence B) add one of ``type_vocab_size`` learned vectors.  The token
    embeddings are *not* scaled by ``sqrt(d_model)``.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.word = nn.Embedding(config.vocab_size, config.d_model)
        self.position = nn.Embedding(config.max_len, config.d_model)
        self.token_type = nn.Embedding(config.type_vocab_size, config.d_model)
        self.norm = LayerNorm(config.d_model, eps=config.eps)
        self.dropout = nn.Dropout(config.dropout)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        check_token_ids(input_ids, self.config.vocab_size, "input_ids")
        n = input_ids.size(1)
        if n > self.config.max_len:
            raise ValueError(
                f"sequence of length {n} is longer than the "
                f"{self.config.max_len} learned positions; "
                "truncate it (tokenizer(..., truncation=True))"
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        check_token_ids(
            token_type_ids, self.config.type_vocab_size, "token_type_ids"
        )
        if token_type_ids.shape != input_ids.shape:
            raise ValueError(
                f"token_type_ids {tuple(token_type_ids.shape)} "
                "must have the shape of input_ids "
                f"{tuple(input_ids.shape)}"
            )
        positions = torch.arange(n, device=input_ids.device)
        x = (
            self.word(input_ids)
            + self.position(positions)
            + self.token_type(token_type_ids)
        )
        return self.dropout(self.norm(x))


class EncoderOutput(NamedTuple):
    """What ``BertEncoder`` returns (the field names match Hugging Face's
    outputs).
    """

    last_hidden_state: torch.Tensor  # (batch, length, d_model)
    # embeddings, then the output of every layer
    hidden_states: tuple[torch.Tensor, ...]
    # one (batch, heads, length, length) per layer
    attentions: tuple[torch.Tensor, ...]


def attention_mask_to_course_mask(
    attention_mask: torch.Tensor, input_ids: torch.Tensor
) -> torch.Tensor:
    """Hugging Face's ``(batch, length)`` 1/0 mask -> the course's boolean
    ``(batch, 1, 1, length)``.
    """
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask {tuple(attention_mask.shape)} "
            "must have the shape of input_ids "
            f"{tuple(input_ids.shape)} (batch, length)"
        )
    return attention_mask.bool()[:, None, None, :]


class BertEncoder(nn.Module):
    """BERT: ``BertEmbeddings`` then ``num_layers`` post-norm GELU
    ``EncoderLayer``s.

    ``forward(input_ids, attention_mask=None, token_type_ids=None)`` takes the
    tensors a Hugging Face tokenizer returns (so ``model(**batch)`` works) and
    returns an ``EncoderOutput``.  There is no final norm: in a post-norm stack
    every layer already ends with one.  Padding keys are masked out; padding
    *queries* still get (meaningless) vectors, exactly as in Hugging Face's
    ``BertModel``.
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
        mask = (
            None
            if attention_mask is None
            else attention_mask_to_course_mask(attention_mask, input_ids)
        )
        x = self.embeddings(input_ids, token_type_ids)
        hidden, attentions = [x], []
        for layer in self.layers:
            x = layer(x, mask)
            hidden.append(x)
            attentions.append(layer.attn_weights)
        return EncoderOutput(
            x,
            tuple(hidden),
            tuple(attentions),  # type: ignore[arg-type]
        )


def cosine_similarity(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """All pairwise cosines: ``a`` ``(n, d)`` and ``b`` ``(m, d)`` give
    ``(n, m)``.

    The cosine of two vectors is their dot product after each is scaled to
    length 1: 1 for the same direction, 0 for orthogonal, -1 for opposite.
    """
    if a.dim() == 1:
        a = a.unsqueeze(0)
    if b.dim() == 1:
        b = b.unsqueeze(0)
    if a.dim() != 2 or b.dim() != 2 or a.size(1) != b.size(1):
        raise ValueError(
            "expected (n, d) and (m, d) with the same d, "
            f"got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def semantic_search(
    query_embeddings: torch.Tensor,
    corpus_embeddings: torch.Tensor,
    top_k: int = 3,
) -> list[list[tuple[int, float]]]:
    """For each query, the ``top_k`` most similar corpus entries as
    ``(index, cosine)``, best first.
    """
    if query_embeddings.dim() == 1:
        query_embeddings = query_embeddings.unsqueeze(0)
    if not 1 <= top_k <= corpus_embeddings.size(0):
        raise ValueError(
            "top_k must be between 1 and the corpus size "
            f"{corpus_embeddings.size(0)}, got {top_k}"
        )
    scores = cosine_similarity(query_embeddings, corpus_embeddings)
    values, indices = scores.topk(top_k, dim=-1)
    return [
        [(int(i), float(v)) for i, v in zip(row_i, row_v)]
        for row_i, row_v in zip(indices.tolist(), values.tolist())
    ]


# -----------------------------------------------------------------------------
# Masked-language modelling: BERT's pre-training objective


class BertMLMHead(nn.Module):
    """BERT's masked-LM head: dense + GELU + ``LayerNorm``, then scores over
    the vocabulary.

    The output layer shares its weight matrix with the token embeddings
    (``decoder.weight`` *is* ``embeddings.word.weight``, as in BERT) and has a
    bias of its own.
    """

    def __init__(
        self, config: BertConfig, word_embeddings: nn.Embedding
    ) -> None:
        super().__init__()
        self.dense = nn.Linear(config.d_model, config.d_model)
        self.norm = LayerNorm(config.d_model, eps=config.eps)
        self.decoder = nn.Linear(config.d_model, config.vocab_size)
        self.decoder.weight = word_embeddings.weight  # tied

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(F.gelu(self.dense(hidden))))


class BertForMLM(nn.Module):
    """``BertEncoder`` + ``BertMLMHead``: scores for every vocabulary entry at
    every position.

    ``forward`` returns logits ``(batch, length, vocab)``;
    ``loss(input_ids, labels, ...)`` scores only the positions whose label is
    not ``-100`` (the masked ones), which is what pre-training needs: the
    output layer then does about a seventh of the work of scoring every
    position (the encoder's work is unchanged).
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertEncoder(config)
        self.head = BertMLMHead(config, self.bert.embeddings.word)
        self.apply(_init_bert_weights)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        out = self.bert(input_ids, attention_mask, token_type_ids)
        return self.head(out.last_hidden_state)

    def loss(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Cross-entropy at the positions with ``labels != -100``."""
        if labels.shape != input_ids.shape:
            raise ValueError(
                f"labels {tuple(labels.shape)} must have the shape of "
                f"input_ids {tuple(input_ids.shape)}"
            )
        hidden = self.bert(input_ids, attention_mask).last_hidden_state
        scored = labels != IGNORE_INDEX
        if not scored.any():
            raise ValueError(
                "no position has a label: mask some tokens first (mask_tokens)"
            )
        return F.cross_entropy(self.head(hidden[scored]), labels[scored])


IGNORE_INDEX = -100
"""Label of a position that is not scored (PyTorch's and Hugging Face's
convention)."""


def _init_bert_weights(module: nn.Module) -> None:
    """BERT's initialisation: normal(0, 0.02) weights, zero biases, LayerNorm
    at (1, 0).
    """
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def mask_tokens(
    input_ids: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    special: torch.Tensor | None = None,
    prob: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: ``(inputs, labels)`` for masked-language modelling.

    Each position that is not ``special`` (``[CLS]``, ``[SEP]``, ``[PAD]``: a
    boolean tensor the shape of ``input_ids``) is chosen with probability
    ``prob``.  A chosen token is replaced by ``[MASK]`` 80 % of the time, by a
    random token 10 % of the time, and left as it is 10 % of the time; its
    label is the original token.  Positions not chosen get the label ``-100``.
    """
    if not 0.0 < prob < 1.0:
        raise ValueError(f"prob must be in (0, 1), got {prob}")
    if special is None:
        special = torch.zeros_like(input_ids, dtype=torch.bool)
    if special.shape != input_ids.shape or special.dtype != torch.bool:
        raise ValueError(
            "special must be a boolean tensor of shape "
            f"{tuple(input_ids.shape)}"
        )
    u = torch.rand(input_ids.shape, generator=generator)
    chosen = (u < prob) & ~special
    labels = torch.where(
        chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX)
    )
    # one more uniform number per position decides what happens to a
    # chosen token
    v = torch.rand(input_ids.shape, generator=generator)
    random_ids = torch.randint(
        vocab_size, input_ids.shape, generator=generator
    )
    inputs = input_ids.clone()
    inputs[chosen & (v < 0.8)] = mask_id
    swap = chosen & (v >= 0.8) & (v < 0.9)
    inputs[swap] = random_ids[swap]
    return inputs, labels


def mlm_windows(
    ids: torch.Tensor, starts: torch.Tensor, length: int, cls_id: int
) -> torch.Tensor:
    """``[CLS]`` followed by the ``length - 1`` tokens of ``ids`` from each
    start: ``(len(starts), length)``.
    """
    if ids.dim() != 1 or starts.dim() != 1:
        raise ValueError("ids and starts must be 1-D tensors")
    if len(starts) and int(starts.max()) + length - 1 > ids.numel():
        raise ValueError(
            f"a window of {length - 1} tokens from {int(starts.max())} "
            f"runs past the {ids.numel()} tokens"
        )
    body = ids[starts[:, None] + torch.arange(length - 1)]
    return torch.cat(
        [torch.full((len(starts), 1), cls_id, dtype=ids.dtype), body], dim=1
    )


def pretrain_mlm(
    model: BertForMLM,
    ids: torch.Tensor,
    tokenizer: Any,
    steps: int,
    batch_size: int = 32,
    lr: float = 1e-3,
    warmup: int = 50,
    generator: torch.Generator | None = None,
    mask_prob: float = 0.15,
    betas: tuple[float, float] = (0.9, 0.999),
    evaluate: Callable[[], dict[str, float]] | None = None,
    eval_every: int = 0,
    show_progress: bool = True,
) -> History:
    """Masked-language-model pre-training on one long 1-D tensor of token ids;
    returns the :class:`~transformer_course.training.History` (the loss of
    every step).

    Each step takes ``batch_size`` random windows of ``model.config.max_len``
    tokens (``[CLS]`` + text; ``[SEP]`` ends each paragraph inside ``ids``),
    masks them with :func:`mask_tokens` (``prob=mask_prob``) and takes an
    AdamW step (``betas``; linear warm-up, cosine decay, gradient clipping).
    ``evaluate``, ``eval_every`` and ``show_progress`` go to
    :func:`~transformer_course.training.fit`.
    """
    if steps < 1 or batch_size < 1:
        raise ValueError(
            "steps and batch_size must be positive, "
            f"got {steps} and {batch_size}"
        )
    if not 0.0 < mask_prob < 1.0:
        raise ValueError(
            f"mask_prob must be in (0, 1), got {mask_prob}; BERT masks 0.15"
        )
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(
            "betas must be two numbers in [0, 1) (AdamW's decay rates), "
            f"got {betas!r}; the default is (0.9, 0.999)"
        )
    length = model.config.max_len
    special_ids = torch.tensor(tokenizer.all_special_ids)
    opt = torch.optim.AdamW(
        param_groups(model, 0.01), lr=lr, betas=(betas[0], betas[1])
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: warmup_decay(s, warmup, steps)
    )

    def step_loss(step: int) -> torch.Tensor:
        starts = torch.randint(
            ids.numel() - length + 1, (batch_size,), generator=generator
        )
        x = mlm_windows(ids, starts, length, tokenizer.cls_token_id)
        special = torch.isin(x, special_ids)
        inputs, labels = mask_tokens(
            x,
            tokenizer.mask_token_id,
            len(tokenizer),
            special,
            prob=mask_prob,
            generator=generator,
        )
        return model.loss(inputs, labels)

    return fit(
        model,
        step_loss,
        steps,
        opt,
        sched,
        clip_norm=1.0,
        evaluate=evaluate,
        eval_every=eval_every,
        desc="MLM pre-training",
        show_progress=show_progress,
    )
