"""The course GPT as a Hugging Face GPT-2, GPT-2's byte-level BPE, and the real GPT-2 (chapter 11).

* ``to_hf_config`` / ``to_hf`` turn a ``gpt.GPT`` into a ``transformers.GPT2LMHeadModel``
  with the same weights (GPT-2 stores its linear layers as ``Conv1D``: the weight matrix is
  transposed, and query, key and value are one fused matrix ``c_attn``).
* ``hf_char_tokenizer`` expresses the course's character tokenizer as a 🤗 fast tokenizer,
  so the pair saves with ``save_pretrained`` and loads back with the ``Auto*`` classes.
* ``train_bpe`` trains a byte-level BPE tokenizer (GPT-2's kind) with 🤗 ``tokenizers``.
* ``load_gpt2`` loads the real ``gpt2`` from the Hub when it can, and the course's converted
  model otherwise; ``gpt2_source`` is its decision, ``pretrained.hub_available`` its switch.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .gpt import _TYPOGRAPHY, CHARS, GPT, GPTConfig, load_checkpoint
from .pretrained import hub_available, offline_forced

GPT2_HUB_ID = "gpt2"
"""The smallest GPT-2 (124M parameters) on the Hugging Face Hub."""


def _quiet_transformers():
    """Import transformers without tqdm's "IProgress not found" warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        import transformers
    return transformers


# ----------------------------------------------------------------------------------------------
# Our GPT -> GPT2LMHeadModel
# ----------------------------------------------------------------------------------------------


def to_hf_config(config: GPTConfig, attn_implementation: str | None = None):  # -> transformers.GPT2Config
    """The ``GPT2Config`` of a model with the sizes of ``config``.

    Our feed-forward uses the exact GELU (``"gelu"``); the original GPT-2 used its tanh
    approximation (``"gelu_new"``).  No token is special in a character model, so the
    begin/end-of-text ids (50256 in GPT-2) are unset.  ``attn_implementation`` is
    ``"eager"`` (explicit, can return attention weights), ``"sdpa"`` (fused) or ``None``
    (the library's default).
    """
    tf = _quiet_transformers()
    extra = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    return tf.GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.block_size,
        n_embd=config.d_model,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_inner=config.d_ff,
        activation_function="gelu",
        layer_norm_epsilon=config.eps,
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=True,
        **extra,
    )


def hf_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """``model``'s weights under GPT-2's names and in GPT-2's layout.

    ``nn.Linear`` stores ``(out, in)`` and computes ``x @ W.T + b``; GPT-2's ``Conv1D`` stores
    ``(in, out)`` and computes ``x @ W + b``, so every matrix is transposed.  GPT-2 also fuses
    the query, key and value projections into one ``c_attn`` of width ``3 * d_model``.
    """
    sd: dict[str, torch.Tensor] = {
        "transformer.wte.weight": model.tok_emb.weight,
        "transformer.wpe.weight": model.pos_emb.weight,
        "transformer.ln_f.weight": model.norm.weight,
        "transformer.ln_f.bias": model.norm.bias,
        "lm_head.weight": model.lm_head.weight,
    }
    for i, block in enumerate(model.blocks):
        p = f"transformer.h.{i}."
        attn, ff = block.self_attn, block.ff
        sd[p + "ln_1.weight"], sd[p + "ln_1.bias"] = block.norm1.weight, block.norm1.bias
        sd[p + "ln_2.weight"], sd[p + "ln_2.bias"] = block.norm2.weight, block.norm2.bias
        sd[p + "attn.c_attn.weight"] = torch.cat([attn.W_q.weight.T, attn.W_k.weight.T, attn.W_v.weight.T], dim=1)
        sd[p + "attn.c_attn.bias"] = torch.cat([attn.W_q.bias, attn.W_k.bias, attn.W_v.bias])
        sd[p + "attn.c_proj.weight"] = attn.W_o.weight.T
        sd[p + "attn.c_proj.bias"] = attn.W_o.bias
        sd[p + "mlp.c_fc.weight"] = ff.linear1.weight.T
        sd[p + "mlp.c_fc.bias"] = ff.linear1.bias
        sd[p + "mlp.c_proj.weight"] = ff.linear2.weight.T
        sd[p + "mlp.c_proj.bias"] = ff.linear2.bias
    return {k: v.detach().clone().contiguous() for k, v in sd.items()}


def to_hf(model: GPT, attn_implementation: str | None = None):  # -> transformers.GPT2LMHeadModel
    """A ``GPT2LMHeadModel`` computing the same function as ``model``, in eval mode.

    Every tensor of GPT-2 must be filled: a missing or unexpected name is an error.
    """
    tf = _quiet_transformers()
    if model.blocks[0].self_attn.W_q.bias is None:
        raise ValueError("GPT-2's attention has biases; this model was built without them")
    hf = tf.GPT2LMHeadModel(to_hf_config(model.config, attn_implementation))
    expected = set(hf.state_dict())
    sd = hf_state_dict(model)
    missing, unexpected = expected - set(sd), set(sd) - expected
    if missing or unexpected:
        raise KeyError(f"weight names do not match GPT-2's: missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    for name, tensor in hf.state_dict().items():
        if tensor.shape != sd[name].shape:
            raise ValueError(f"{name}: GPT-2 expects shape {tuple(tensor.shape)}, got {tuple(sd[name].shape)}")
    hf.load_state_dict(sd, strict=True)
    hf.tie_weights()
    return hf.to(next(model.parameters()).device).eval()


# ----------------------------------------------------------------------------------------------
# Tokenizers
# ----------------------------------------------------------------------------------------------


def hf_char_tokenizer(chars: str = CHARS, model_max_length: int | None = None):
    """The course's ``CharTokenizer`` as a ``PreTrainedTokenizerFast`` (one token per character).

    A ``WordLevel`` model whose words are single characters: the pre-tokenizer splits the text
    into characters, the normaliser applies the same clean-up as ``gpt.normalize_text``
    (typographic quotes and dashes to ASCII, accents dropped), anything else becomes ``"?"``,
    and the decoder joins the characters back without spaces.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    tf = _quiet_transformers()
    unk = "?" if "?" in chars else chars[0]
    tok = Tokenizer(models.WordLevel(vocab={c: i for i, c in enumerate(chars)}, unk_token=unk))
    tok.normalizer = normalizers.Sequence(
        [normalizers.Replace(a, b) for a, b in _TYPOGRAPHY.items()] + [normalizers.NFKD(), normalizers.StripAccents()]
    )
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    kwargs: dict[str, Any] = {"clean_up_tokenization_spaces": False}
    if model_max_length is not None:
        kwargs["model_max_length"] = model_max_length
    return tf.PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)


def train_bpe(
    text: str, vocab_size: int = 1000, min_frequency: int = 2, special_tokens: tuple[str, ...] = ("<|endoftext|>",)
):
    """A byte-level BPE tokenizer (GPT-2's kind) trained on ``text`` with 🤗 ``tokenizers``.

    It starts from the 256 byte values, so any text can be encoded, and learns
    up to ``vocab_size - 256 - len(special_tokens)`` merges of the most frequent adjacent pairs
    (a pair seen fewer than ``min_frequency`` times is never merged).  Returns a ``tokenizers.Tokenizer``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size <= 256 + len(special_tokens):
        raise ValueError(f"vocab_size must exceed the 256 bytes + {len(special_tokens)} special tokens, got {vocab_size}")
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
    """The merges of a BPE ``tokenizers.Tokenizer``, in the order they were learned."""
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in merges]


# ----------------------------------------------------------------------------------------------
# The real GPT-2 when online, the course's model otherwise
# ----------------------------------------------------------------------------------------------


def gpt2_source(env: Mapping[str, str] | None = None, probe: Callable[[], bool] | None = None) -> str:
    """Where ``load_gpt2`` takes its model from: ``"hub"`` or ``"course"``.

    ``"course"`` when offline use is forced (``TRANSFORMER_COURSE_OFFLINE`` or
    ``HF_HUB_OFFLINE``, checked before any network use) or when the Hub does not answer;
    ``"hub"`` otherwise.  ``probe`` replaces the network check (tests pass a fake one).
    """
    return "hub" if hub_available(probe=probe, env=env) else "course"


def load_gpt2(
    name: str = GPT2_HUB_ID,
    env: Mapping[str, str] | None = None,
    probe: Callable[[], bool] | None = None,
    verbose: bool = True,
):  # -> tuple[PreTrainedModel, PreTrainedTokenizerBase, str]
    """``(model, tokenizer, source)``: the real GPT-2 from the Hub when a network is there,
    otherwise the course's trained character GPT converted to a ``GPT2LMHeadModel``.

    ``source`` is ``"hub"`` or ``"course"`` (see ``gpt2_source``); which one was loaded is
    printed.  Both are ``GPT2LMHeadModel``s in eval mode, so the same code runs on either.
    """
    source = gpt2_source(env, probe)
    if source == "hub":
        tf = _quiet_transformers()
        try:
            tokenizer = tf.AutoTokenizer.from_pretrained(name)
            model = tf.AutoModelForCausalLM.from_pretrained(name).eval()
            if getattr(model, "generation_config", None) is not None and tokenizer.eos_token_id is not None:
                model.generation_config.pad_token_id = tokenizer.eos_token_id  # GPT-2 has no padding token
        except Exception as err:  # noqa: BLE001 - the Hub answered the probe but the download failed
            if verbose:
                print(f"downloading {name!r} failed ({type(err).__name__}); using the course's model instead")
            source = "course"
        else:
            if verbose:
                n = sum(p.numel() for p in model.parameters())
                print(f"loaded {name!r} from the Hugging Face Hub ({n / 1e6:.0f}M parameters)")
            return model, tokenizer, source
    gpt, char_tok, _ = load_checkpoint()
    model = to_hf(gpt)
    tokenizer = hf_char_tokenizer(char_tok.chars, model_max_length=gpt.config.block_size)
    if verbose:
        n = sum(p.numel() for p in model.parameters())
        print(f"offline: loaded the course's character-level GPT as a GPT2LMHeadModel ({n / 1e6:.1f}M parameters)")
    return model, tokenizer, source
