"""BERT between the course and Hugging Face (chapter 12): weights both ways,
WordPiece tokenisers.

* ``bert_from_hf`` / ``load_bert_weights`` / ``hf_to_course_state_dict``: a
  Hugging Face ``BertModel`` (MiniLM, ``bert-base-uncased``, ...) into the
  course's ``bert.BertEncoder``;
* ``hf_bert_config`` and ``to_hf_masked_lm``: the course's ``bert.BertForMLM``
  into a ``BertForMaskedLM`` (for ``pipeline("fill-mask")``);
* ``train_wordpiece`` (a new vocabulary) and ``wordpiece_subset`` (BERT's own
  pieces, restricted to a text), both as ``BertTokenizerFast``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from .bert import BertConfig, BertEncoder, BertForMLM

# Hugging Face name (regular expression) -> course name.  Everything the
# encoder needs is here; ``_HF_IGNORED`` lists what a BERT checkpoint may hold
# besides (the pooler, heads).
_HF_TO_COURSE = [
    (r"embeddings\.word_embeddings\.", "embeddings.word."),
    (r"embeddings\.position_embeddings\.", "embeddings.position."),
    (r"embeddings\.token_type_embeddings\.", "embeddings.token_type."),
    (r"embeddings\.LayerNorm\.", "embeddings.norm."),
    (
        r"encoder\.layer\.(\d+)\.attention\.self\.query\.",
        r"layers.\1.self_attn.W_q.",
    ),
    (
        r"encoder\.layer\.(\d+)\.attention\.self\.key\.",
        r"layers.\1.self_attn.W_k.",
    ),
    (
        r"encoder\.layer\.(\d+)\.attention\.self\.value\.",
        r"layers.\1.self_attn.W_v.",
    ),
    (
        r"encoder\.layer\.(\d+)\.attention\.output\.dense\.",
        r"layers.\1.self_attn.W_o.",
    ),
    (
        r"encoder\.layer\.(\d+)\.attention\.output\.LayerNorm\.",
        r"layers.\1.norm1.",
    ),
    (
        r"encoder\.layer\.(\d+)\.intermediate\.dense\.",
        r"layers.\1.ff.linear1.",
    ),
    (r"encoder\.layer\.(\d+)\.output\.dense\.", r"layers.\1.ff.linear2."),
    (r"encoder\.layer\.(\d+)\.output\.LayerNorm\.", r"layers.\1.norm2."),
]
_HF_IGNORED = re.compile(
    r"(embeddings\.position_ids|embeddings\.token_type_ids|pooler\.|"
    r"cls\.|classifier\.)"
)


def _course_name(hf_name: str) -> str | None:
    """The ``BertEncoder`` name of one Hugging Face encoder weight (without
    ``bert.``), or None.
    """
    for pattern, repl in _HF_TO_COURSE:
        if re.match(pattern, hf_name):
            return re.sub(pattern, repl, hf_name, count=1)
    return None


def hf_to_course_state_dict(
    hf_state_dict: Mapping[str, torch.Tensor],
) -> dict[str, torch.Tensor]:
    """Rename a Hugging Face BERT state dict to ``BertEncoder``'s parameter
    names.

    Accepts the state dict of a ``BertModel`` or of a task model
    (``BertFor...``, whose keys start with ``bert.``).  The pooler and task
    heads are dropped; any other key it does not know is an error, so a
    checkpoint of a different architecture is not half-loaded.
    """
    out: dict[str, torch.Tensor] = {}
    unknown = []
    for key, value in hf_state_dict.items():
        name = key[len("bert.") :] if key.startswith("bert.") else key
        if _HF_IGNORED.match(name):
            continue
        course = _course_name(name)
        if course is None:
            unknown.append(key)
        else:
            out[course] = value
    if unknown:
        raise KeyError(
            f"{len(unknown)} keys are not BERT encoder weights, "
            f"e.g. {unknown[:3]}"
        )
    return out


def load_bert_weights(
    model: BertEncoder, hf_state_dict: Mapping[str, torch.Tensor]
) -> BertEncoder:
    """Copy a Hugging Face BERT state dict into ``model`` (every parameter must
    be covered).
    """
    state = hf_to_course_state_dict(hf_state_dict)
    expected = set(model.state_dict())
    missing = sorted(expected - set(state))
    extra = sorted(set(state) - expected)
    if missing or extra:
        raise KeyError(
            "the checkpoint does not fit this BertEncoder: "
            f"missing {missing[:3]} ({len(missing)} in all), "
            f"unexpected {extra[:3]} ({len(extra)} in all); "
            "do the configurations agree?"
        )
    for name, tensor in model.state_dict().items():
        if state[name].shape != tensor.shape:
            raise ValueError(
                f"{name}: the checkpoint has shape "
                f"{tuple(state[name].shape)}, the model {tuple(tensor.shape)}"
            )
    model.load_state_dict(state, strict=True)
    return model


def bert_from_hf(hf_model: nn.Module) -> BertEncoder:
    """A ``BertEncoder`` with the configuration and weights of a Hugging Face
    BERT model.

    ``hf_model`` is a ``BertModel`` or a ``BertFor...`` task model; the result
    is in eval mode (no dropout), ready to compare with ``hf_model``.
    """
    config = getattr(hf_model, "config", None)
    if config is None or getattr(config, "model_type", None) != "bert":
        raise TypeError(
            "expected a Hugging Face BERT model, "
            f"got {type(hf_model).__name__}"
        )
    model = BertEncoder(BertConfig.from_hf(config))
    return load_bert_weights(model, hf_model.state_dict()).eval()


BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def _as_bert_tokenizer(tok: Any) -> Any:
    """A ``tokenizers.Tokenizer`` as BERT's ``BertTokenizerFast``:
    ``[CLS] A [SEP]`` (``B [SEP]`` for a pair) and BERT's special tokens.
    """
    from tokenizers import processors
    from transformers import BertTokenizerFast

    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
        do_lower_case=True,
    )


def train_wordpiece(texts: Sequence[str], vocab_size: int = 4000) -> Any:
    """Train an uncased WordPiece vocabulary on ``texts``; returns a Hugging
    Face ``BertTokenizerFast``.

    The same recipe as BERT's tokenizer (lower-casing, accents stripped, split
    at spaces and punctuation, ``##`` continuation pieces, ``[CLS] ... [SEP]``
    around every input), with a vocabulary learned from ``texts``.  Ids 0-4 are
    ``[PAD] [UNK] [CLS] [SEP] [MASK]``.
    """
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )

    if isinstance(texts, str) or not texts:
        raise ValueError(
            "texts must be a non-empty list of strings (not one string)"
        )
    if vocab_size <= len(BERT_SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size must exceed the {len(BERT_SPECIAL_TOKENS)} "
            f"special tokens, got {vocab_size}"
        )
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(
        lowercase=True, strip_accents=True
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(
        list(texts),
        trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=list(BERT_SPECIAL_TOKENS)
        ),
    )
    return _as_bert_tokenizer(tok)


def hf_bert_config(config: BertConfig, **kwargs: Any) -> Any:
    """The Hugging Face ``BertConfig`` of a course ``BertConfig`` (exact GELU,
    absolute positions).
    """
    from transformers import BertConfig as HFBertConfig

    return HFBertConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        intermediate_size=config.d_ff,
        hidden_act="gelu",
        hidden_dropout_prob=config.dropout,
        attention_probs_dropout_prob=config.dropout,
        max_position_embeddings=config.max_len,
        type_vocab_size=config.type_vocab_size,
        layer_norm_eps=config.eps,
        pad_token_id=0,
        **kwargs,
    )


_HF_MLM_HEAD = {
    "cls.predictions.transform.dense.weight": "head.dense.weight",
    "cls.predictions.transform.dense.bias": "head.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "head.norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "head.norm.bias",
    # tied: the word embeddings
    "cls.predictions.decoder.weight": "head.decoder.weight",
    "cls.predictions.decoder.bias": "head.decoder.bias",
    # the same tensor under its second name
    "cls.predictions.bias": "head.decoder.bias",
}


def to_hf_masked_lm(model: BertForMLM) -> nn.Module:
    """A Hugging Face ``BertForMaskedLM`` with the configuration and weights of
    ``model``.

    The inverse of :func:`bert_from_hf` plus the masked-LM head; every Hugging
    Face tensor must receive a course tensor of the same shape.  The result is
    in eval mode; it works with
    ``pipeline("fill-mask", model=..., tokenizer=...)`` and
    ``save_pretrained``.
    """
    from transformers import BertForMaskedLM

    if not isinstance(model, BertForMLM):
        raise TypeError(f"expected a BertForMLM, got {type(model).__name__}")
    hf = BertForMaskedLM(
        hf_bert_config(model.config, tie_word_embeddings=True)
    )
    ours = model.state_dict()
    state = {}
    for key, tensor in hf.state_dict().items():
        if key in _HF_MLM_HEAD:
            name = _HF_MLM_HEAD[key]
        elif (
            key.startswith("bert.")
            and (c := _course_name(key[len("bert.") :])) is not None
        ):
            name = "bert." + c
        elif key in (
            "bert.embeddings.position_ids",
            "bert.embeddings.token_type_ids",
        ):
            continue  # buffers, not weights
        else:
            raise KeyError(f"{key}: no BertForMLM weight corresponds to it")
        if ours[name].shape != tensor.shape:
            raise ValueError(
                f"{key}: BertForMLM has shape {tuple(ours[name].shape)}, "
                f"Hugging Face {tuple(tensor.shape)}"
            )
        state[key] = ours[name]
    hf.load_state_dict(state, strict=False)
    missing = [
        k
        for k in hf.state_dict()
        if k not in state
        and not k.endswith(("position_ids", "token_type_ids"))
    ]
    if missing:
        raise KeyError(f"not loaded: {missing[:3]}")
    return hf.eval()


def wordpiece_subset(tokenizer: Any, texts: Sequence[str]) -> Any:
    """BERT's WordPiece tokenizer restricted to the pieces that occur in
    ``texts`` (plus the specials).

    Deterministic (unlike training a vocabulary, whose ties are broken
    differently from run to run): the pieces keep ``tokenizer``'s order, after
    ``[PAD] [UNK] [CLS] [SEP] [MASK]`` (ids 0-4).  A word of new text whose
    pieces are not all kept becomes ``[UNK]``.
    """
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
    )

    if isinstance(texts, str) or not texts:
        raise ValueError(
            "texts must be a non-empty list of strings (not one string)"
        )
    encoded = tokenizer(list(texts), add_special_tokens=False)
    used = sorted({i for ids in encoded["input_ids"] for i in ids})
    pieces = list(BERT_SPECIAL_TOKENS) + [
        t
        for t in tokenizer.convert_ids_to_tokens(used)
        if t not in BERT_SPECIAL_TOKENS
    ]
    tok = Tokenizer(
        models.WordPiece(
            {t: i for i, t in enumerate(pieces)}, unk_token="[UNK]"
        )
    )
    tok.normalizer = normalizers.BertNormalizer(
        lowercase=True, strip_accents=True
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    return _as_bert_tokenizer(tok)
