"""The course GPT as a Hugging Face GPT-2, GPT-2's byte-level BPE, and the real
GPT-2 (chapter 11).

* ``to_hf_config`` / ``to_hf`` turn a ``gpt.GPT`` into a
  ``transformers.GPT2LMHeadModel`` with the same weights (GPT-2 stores its
  linear layers as ``Conv1D``: the weight matrix is transposed, and query, key
  and value are one fused matrix ``c_attn``).
* ``hf_char_tokenizer`` expresses the course's character tokenizer as a 🤗 fast
  tokenizer, so the pair saves with ``save_pretrained`` and loads back with the
  ``Auto*`` classes.
* ``train_bpe`` trains a byte-level BPE tokenizer (GPT-2's kind) with 🤗
  ``tokenizers``.
* ``from_hf`` is the way back: a ``GPT2LMHeadModel``'s weights (GPT-2's own
  included) in the course's ``GPT``.  ``load_gpt2`` uses it to load the real
  ``gpt2`` from the Hub, when there is a network
  (``pretrained.hub_available``), into the model chapter 10 built.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch

from .gpt import GPT, GPTConfig
from .pretrained import ModelNotAvailableError, hub_available, offline_forced
from .tasks.python_docs import _TYPOGRAPHY, CHARS
from .utils import check_all_used, check_hf_model, hf_weights

GPT2_HUB_ID = "gpt2"
"""The smallest GPT-2 (124M parameters) on the Hugging Face Hub."""


def _quiet_transformers():
    """Import transformers without tqdm's "IProgress not found" warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        import transformers
    return transformers


# -----------------------------------------------------------------------------
# Our GPT -> GPT2LMHeadModel
# -----------------------------------------------------------------------------


_HF_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
"""Our activation names -> GPT-2's ``activation_function`` names."""


def to_hf_config(
    config: GPTConfig,
    attn_implementation: str | None = None,
    pad_token_id: int | None = None,
):  # -> transformers.GPT2Config
    """The ``GPT2Config`` of a model with the sizes of ``config``.

    Our feed-forward uses the exact GELU (``"gelu"``) unless the config asks
    for its tanh approximation (``"gelu_tanh"``), which GPT-2 calls
    ``"gelu_new"``.  No token is special in a character model, so the
    begin/end-of-text ids (50256 in GPT-2) are unset; ``pad_token_id`` is the
    id a batch is padded with (``hf_char_tokenizer``'s ``pad_token_id``), so
    that batched generation needs no more setting.  ``attn_implementation``
    is ``"eager"`` (explicit, can return attention weights), ``"sdpa"`` (fused)
    or ``None`` (the library's default).
    """
    tf = _quiet_transformers()
    extra = (
        {}
        if attn_implementation is None
        else {"attn_implementation": attn_implementation}
    )
    return tf.GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.block_size,
        n_embd=config.d_model,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_inner=config.d_ff,
        activation_function=_HF_ACTIVATION[config.activation],
        layer_norm_epsilon=config.eps,
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=pad_token_id,
        tie_word_embeddings=True,
        **extra,
    )


#: GPT-2's name of each part of a block -> the course's.  The Conv1D matrices
#: are transposed.
HF_BLOCK_NAMES = (
    ("ln_1", "norm1"),
    ("attn.c_attn", "attn.qkv"),
    ("attn.c_proj", "attn.proj"),
    ("ln_2", "norm2"),
    ("mlp.c_fc", "mlp.fc"),
    ("mlp.c_proj", "mlp.proj"),
)
TRANSPOSED = {"attn.qkv", "attn.proj", "mlp.fc", "mlp.proj"}


def hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """``model``'s weights under GPT-2's names and in GPT-2's layout.

    ``nn.Linear`` stores ``(out, in)`` and computes ``x @ W.T + b``; GPT-2's
    ``Conv1D`` stores ``(in, out)`` and computes ``x @ W + b``, so every
    ``Conv1D`` matrix is transposed (the embeddings are not).  The rest is
    renaming: both models compute query, key and value with one fused matrix
    (``qkv`` / ``c_attn``).
    """
    sd: dict[str, torch.Tensor] = {
        "transformer.wte.weight": model.tok_emb.weight,
        "transformer.wpe.weight": model.pos_emb.weight,
        "transformer.ln_f.weight": model.norm.weight,
        "transformer.ln_f.bias": model.norm.bias,
        "lm_head.weight": model.lm_head.weight,
    }
    for i, block in enumerate(model.blocks):
        for theirs, mine in HF_BLOCK_NAMES:
            weight = block.get_parameter(f"{mine}.weight")
            sd[f"transformer.h.{i}.{theirs}.weight"] = (
                weight.T if mine in TRANSPOSED else weight
            )
            sd[f"transformer.h.{i}.{theirs}.bias"] = block.get_parameter(
                f"{mine}.bias"
            )
    return {k: v.detach().clone().contiguous() for k, v in sd.items()}


def to_hf(
    model: GPT,
    attn_implementation: str | None = None,
    pad_token_id: int | None = None,
):  # -> transformers.GPT2LMHeadModel
    """A ``GPT2LMHeadModel`` computing the same function as ``model``, in eval
    mode; ``pad_token_id`` as in ``to_hf_config``.

    Every tensor of GPT-2 must be filled: a missing or unexpected name is an
    error.
    """
    tf = _quiet_transformers()
    hf = tf.GPT2LMHeadModel(
        to_hf_config(model.config, attn_implementation, pad_token_id)
    )
    hf.generation_config.pad_token_id = pad_token_id
    expected = set(hf.state_dict())
    sd = hf_state_dict(model)
    missing, unexpected = expected - set(sd), set(sd) - expected
    if missing or unexpected:
        raise KeyError(
            "weight names do not match GPT-2's: "
            f"missing {sorted(missing)}, unexpected {sorted(unexpected)}"
        )
    for name, tensor in hf.state_dict().items():
        if tensor.shape != sd[name].shape:
            raise ValueError(
                f"{name}: GPT-2 expects shape {tuple(tensor.shape)}, "
                f"got {tuple(sd[name].shape)}"
            )
    hf.load_state_dict(sd, strict=True)
    hf.tie_weights()
    return hf.to(next(model.parameters()).device).eval()


# -----------------------------------------------------------------------------
# Tokenizers
# -----------------------------------------------------------------------------


def hf_char_tokenizer(
    chars: str = CHARS,
    model_max_length: int | None = None,
    pad_token: str | None = "\n",
):
    """The course's ``CharTokenizer`` as a ``PreTrainedTokenizerFast`` (one
    token per character).

    A ``WordLevel`` model whose words are single characters: the pre-tokenizer
    splits the text into characters, the normaliser applies the same clean-up
    as ``python_docs.normalize_text`` (typographic quotes and dashes to ASCII,
    accents dropped), anything else becomes ``"?"``, and the decoder joins the
    characters back without spaces.

    A character model has no special tokens, but a batch of prompts of
    different lengths must be padded: ``pad_token`` (a newline by default)
    fills the left of the shorter prompts, where the attention mask hides it,
    so that generation continues every prompt from its own last character
    (``pipeline("text-generation", batch_size=...)`` needs this).
    """
    from tokenizers import (
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
    )

    tf = _quiet_transformers()
    unk = "?" if "?" in chars else chars[0]
    tok = Tokenizer(
        models.WordLevel(
            vocab={c: i for i, c in enumerate(chars)}, unk_token=unk
        )
    )
    tok.normalizer = normalizers.Sequence(
        [normalizers.Replace(a, b) for a, b in _TYPOGRAPHY.items()]
        + [normalizers.NFKD(), normalizers.StripAccents()]
    )
    tok.pre_tokenizer = pre_tokenizers.Split(
        Regex(r"[\s\S]"), behavior="isolated"
    )
    tok.decoder = decoders.Fuse()
    kwargs: dict[str, Any] = {"clean_up_tokenization_spaces": False}
    if pad_token is not None:
        if pad_token not in chars:
            raise ValueError(
                f"pad_token {pad_token!r} is not one of the model's "
                "characters; pick one that is, or pad_token=None"
            )
        kwargs.update(pad_token=pad_token, padding_side="left")
    if model_max_length is not None:
        kwargs["model_max_length"] = model_max_length
    return tf.PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)


def train_bpe(
    text: str,
    vocab_size: int = 1000,
    min_frequency: int = 2,
    special_tokens: tuple[str, ...] = ("<|endoftext|>",),
):
    """A byte-level BPE tokenizer (GPT-2's kind) trained on ``text`` with 🤗
    ``tokenizers``.

    It starts from the 256 byte values, so any text can be encoded, and learns
    up to ``vocab_size - 256 - len(special_tokens)`` merges of the most
    frequent adjacent pairs (a pair seen fewer than ``min_frequency`` times is
    never merged).  Returns a ``tokenizers.Tokenizer``.
    """
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        trainers,
    )

    if vocab_size <= 256 + len(special_tokens):
        raise ValueError(
            "vocab_size must exceed the 256 bytes + "
            f"{len(special_tokens)} special tokens, got {vocab_size}"
        )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=list(special_tokens),
        show_progress=False,
    )
    # Train on lines, so the result does not depend on how the text is chunked.
    tok.train_from_iterator(text.splitlines(keepends=True), trainer=trainer)
    return tok


def bpe_merges(tokenizer) -> list[tuple[str, str]]:
    """The merges of a BPE ``tokenizers.Tokenizer``, in the order they were
    learned.
    """
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    return [
        tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1))
        for m in merges
    ]


# -----------------------------------------------------------------------------
# GPT2LMHeadModel -> our GPT, and the real GPT-2
# -----------------------------------------------------------------------------


def from_hf_config(hf_config) -> GPTConfig:
    """The ``GPTConfig`` of a ``GPT2Config`` (the reverse of
    ``to_hf_config``).
    """
    ours = {v: k for k, v in _HF_ACTIVATION.items()}
    # the same function, computed by PyTorch
    ours["gelu_pytorch_tanh"] = "gelu_tanh"
    act = hf_config.activation_function
    if act not in ours:
        raise ValueError(
            f"GPT-2 activation {act!r} has no counterpart in the course's "
            f"GPT (known: {sorted(ours)})"
        )
    if not getattr(hf_config, "tie_word_embeddings", True):
        raise ValueError(
            "the course's GPT ties its output head to the token embedding; "
            "this GPT-2 does not"
        )
    return GPTConfig(
        vocab_size=hf_config.vocab_size,
        block_size=hf_config.n_positions,
        n_layer=hf_config.n_layer,
        n_head=hf_config.n_head,
        d_model=hf_config.n_embd,
        d_ff=hf_config.n_inner or 4 * hf_config.n_embd,
        eps=hf_config.layer_norm_epsilon,
        activation=ours[act],
    )


def from_hf(hf_model) -> GPT:
    """The course's ``GPT`` with the weights of a ``GPT2LMHeadModel``, in eval
    mode.

    The reverse of ``hf_state_dict``: every ``Conv1D`` matrix is transposed
    back to ``nn.Linear``'s ``(out, in)``.  Loading is strict: a weight without
    a place, or a place without a weight, is an error.
    """
    check_hf_model(hf_model, "gpt2")  # a GPT2LMHeadModel
    config = from_hf_config(hf_model.config)
    model = GPT(config)
    sd = hf_weights(hf_model)  # name -> tensor
    sd.pop("lm_head.weight", None)  # tied to transformer.wte.weight
    ours: dict[str, torch.Tensor] = {
        "tok_emb.weight": sd.pop("transformer.wte.weight"),
        "pos_emb.weight": sd.pop("transformer.wpe.weight"),
        "norm.weight": sd.pop("transformer.ln_f.weight"),
        "norm.bias": sd.pop("transformer.ln_f.bias"),
    }
    for i in range(config.n_layer):
        for theirs, mine in HF_BLOCK_NAMES:
            weight = sd.pop(f"transformer.h.{i}.{theirs}.weight")
            ours[f"blocks.{i}.{mine}.weight"] = (
                weight.T if mine in TRANSPOSED else weight
            )
            ours[f"blocks.{i}.{mine}.bias"] = sd.pop(
                f"transformer.h.{i}.{theirs}.bias"
            )
    # older files also hold each block's causal mask: not a weight
    masks = (".attn.bias", ".attn.masked_bias")
    check_all_used(k for k in sd if not k.endswith(masks))
    ours["lm_head.weight"] = ours["tok_emb.weight"]
    model.load_state_dict(
        {k: v.contiguous() for k, v in ours.items()}, strict=True
    )
    return model.to(next(hf_model.parameters()).device).eval()


def load_gpt2(
    name: str = GPT2_HUB_ID, probe: Callable[[], bool] | None = None
):  # -> tuple[GPT, tokenizer]
    """``(model, tokenizer)``: the real GPT-2 ``name`` from the Hugging Face
    Hub, its weights in the course's ``GPT`` (``from_hf``), and its byte-level
    BPE tokenizer.

    Needs a network: with offline use forced (``TRANSFORMER_COURSE_OFFLINE`` /
    ``HF_HUB_OFFLINE``) or no answer from the Hub
    (``pretrained.hub_available(probe)``) it raises ``ModelNotAvailableError``
    without downloading anything.  The download is about 0.5 GB.
    """
    if not hub_available(probe=probe):
        why = (
            "offline mode is forced"
            if offline_forced()
            else "the Hugging Face Hub is not reachable"
        )
        raise ModelNotAvailableError(
            f"loading {name!r} needs the Hugging Face Hub and {why}; "
            "run where huggingface.co is reachable, "
            "with TRANSFORMER_COURSE_OFFLINE and HF_HUB_OFFLINE unset"
        )
    tf = _quiet_transformers()
    tokenizer = tf.AutoTokenizer.from_pretrained(name)
    hf = tf.GPT2LMHeadModel.from_pretrained(name)
    return from_hf(hf), tokenizer
