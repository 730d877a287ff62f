"""Tests of ``transformer_course.transformer``: parity with PyTorch's layers, shapes, parameter counts."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from transformer_course.masking import causal_mask, combine_masks, make_seq2seq_masks, padding_mask
from transformer_course.transformer import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    Transformer,
    TransformerConfig,
    copy_weights_to_torch,
)
from transformer_course.utils import count_parameters

D_MODEL, HEADS, D_FF, PAD = 16, 4, 40, 0
TOL = 1e-5

# Two sources and two targets with padding (id 0) at the end of the shorter ones.
SRC = torch.tensor([[5, 3, 8, 2, 0, 0], [7, 1, 4, 6, 9, 2]])
TGT = torch.tensor([[1, 4, 4, 0, 0], [1, 9, 2, 3, 5]])

SETTINGS = [(nf, act) for nf in (False, True) for act in ("relu", "gelu")]


def _ids(setting: tuple[bool, str]) -> str:
    return f"{'pre' if setting[0] else 'post'}norm-{setting[1]}"


def _randomise(module: nn.Module) -> None:
    """Give every parameter, LayerNorm gains and biases included, random values."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.3)


@pytest.mark.parametrize("setting", SETTINGS, ids=_ids)
@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "padding-mask"])
def test_encoder_layer_matches_torch(setting: tuple[bool, str], masked: bool) -> None:
    norm_first, activation = setting
    torch.manual_seed(0)
    ours = EncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation, norm_first=norm_first).eval()
    _randomise(ours)
    theirs = nn.TransformerEncoderLayer(
        D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation, norm_first=norm_first, batch_first=True
    ).eval()
    copy_weights_to_torch(ours, theirs)
    x = torch.randn(*SRC.shape, D_MODEL)
    mask = padding_mask(SRC, PAD) if masked else None
    # PyTorch's key padding mask is (batch, keys) and True means *blocked*: the opposite of ours.
    key_padding = ~mask[:, 0, 0, :] if masked else None
    for grad in (False, True):  # with and without autograd (PyTorch has a separate inference fast path)
        with torch.set_grad_enabled(grad):
            diff = (ours(x, mask) - theirs(x, src_key_padding_mask=key_padding)).abs().max().item()
        assert diff < TOL, f"max |ours - torch| = {diff:.2e}"


@pytest.mark.parametrize("setting", SETTINGS, ids=_ids)
@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "causal-and-padding-masks"])
def test_decoder_layer_matches_torch(setting: tuple[bool, str], masked: bool) -> None:
    norm_first, activation = setting
    torch.manual_seed(1)
    ours = DecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation, norm_first=norm_first).eval()
    _randomise(ours)
    theirs = nn.TransformerDecoderLayer(
        D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation, norm_first=norm_first, batch_first=True
    ).eval()
    copy_weights_to_torch(ours, theirs)
    x = torch.randn(*TGT.shape, D_MODEL)
    memory = torch.randn(*SRC.shape, D_MODEL)
    if masked:
        src_mask, tgt_mask, memory_mask = make_seq2seq_masks(SRC, TGT, PAD)
        torch_masks = dict(
            tgt_mask=~causal_mask(TGT.size(1))[0, 0],  # (L_tgt, L_tgt), True = blocked
            tgt_key_padding_mask=~padding_mask(TGT, PAD)[:, 0, 0],  # (batch, L_tgt), True = blocked
            memory_key_padding_mask=~src_mask[:, 0, 0],  # (batch, L_src), True = blocked
        )
    else:
        tgt_mask = memory_mask = None
        torch_masks = {}
    with torch.no_grad():
        diff = (ours(x, memory, tgt_mask, memory_mask) - theirs(x, memory, **torch_masks)).abs().max().item()
    assert diff < TOL, f"max |ours - torch| = {diff:.2e}"


def test_parity_needs_the_weights_copied() -> None:
    """The parity above is not an accident of initialisation: without the copy the layers differ."""
    torch.manual_seed(0)
    ours = EncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0).eval()
    theirs = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, batch_first=True).eval()
    x = torch.randn(2, 5, D_MODEL)
    with torch.no_grad():
        assert (ours(x) - theirs(x)).abs().max() > 1e-2


@pytest.mark.parametrize(
    "theirs, message",
    [
        (nn.TransformerEncoderLayer(D_MODEL, HEADS, 2 * D_FF, batch_first=True), "d_ff"),
        (nn.TransformerEncoderLayer(D_MODEL, 2, D_FF, batch_first=True), "num_heads"),
        (nn.TransformerEncoderLayer(2 * D_MODEL, HEADS, D_FF, batch_first=True), "d_model"),
        (nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, norm_first=True), "norm_first"),
        (nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, activation="gelu"), "activation"),
        (nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, layer_norm_eps=1e-6), "eps"),
    ],
)
def test_copy_weights_names_the_difference(theirs: nn.Module, message: str) -> None:
    ours = EncoderLayer(D_MODEL, HEADS, D_FF)
    before = [p.clone() for p in theirs.parameters()]
    with pytest.raises(ValueError, match=message):
        copy_weights_to_torch(ours, theirs)
    assert all(torch.equal(a, b) for a, b in zip(before, theirs.parameters(), strict=True)), "nothing may be copied"


def test_copy_weights_rejects_the_wrong_kind_of_layer() -> None:
    with pytest.raises(TypeError, match="DecoderLayer -> TransformerEncoderLayer"):
        copy_weights_to_torch(DecoderLayer(D_MODEL, HEADS, D_FF), nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF))


# ---------------------------------------------------------------- parameter counts, derived by hand


def _attention_params(d: int) -> int:
    return 4 * (d * d + d)  # W_q, W_k, W_v, W_o with biases


def _ffn_params(d: int, d_ff: int) -> int:
    return d * d_ff + d_ff + d_ff * d + d


def _encoder_layer_params(d: int, d_ff: int) -> int:
    return _attention_params(d) + _ffn_params(d, d_ff) + 2 * 2 * d  # two LayerNorms (gain + bias)


def _decoder_layer_params(d: int, d_ff: int) -> int:
    return 2 * _attention_params(d) + _ffn_params(d, d_ff) + 3 * 2 * d


@pytest.mark.parametrize("norm_first", [False, True])
def test_parameter_counts_match_the_formula(norm_first: bool) -> None:
    v_src, v_tgt, d, n_enc, n_dec, d_ff = 23, 19, 24, 3, 2, 56
    model = Transformer(TransformerConfig(v_src, v_tgt, d, 4, n_enc, n_dec, d_ff, max_len=64, norm_first=norm_first))
    final_norm = 2 * d if norm_first else 0  # pre-norm stacks end with one more LayerNorm
    expected = {
        "encoder": v_src * d + n_enc * _encoder_layer_params(d, d_ff) + final_norm,
        "decoder": v_tgt * d + n_dec * _decoder_layer_params(d, d_ff) + final_norm,
        "out": d * v_tgt + v_tgt,
    }
    for part, n in expected.items():
        assert count_parameters(getattr(model, part)) == n, part
    assert count_parameters(model) == sum(expected.values())
    # The positional table is a buffer, not a parameter.
    assert all("pe" not in name for name, _ in model.named_parameters())


def test_tied_embeddings_are_one_table_with_the_reference_init() -> None:
    """tie_embeddings: one V x d table for both embeddings and the output layer (paper, section 3.4),
    initialised N(0, 1/d) as in tensor2tensor, so that times sqrt(d) a token vector has unit-size entries."""
    v, d, d_ff = 300, 64, 96
    torch.manual_seed(0)
    tied = Transformer(TransformerConfig(v, v, d, 4, 1, 1, d_ff, max_len=16, tie_embeddings=True))
    torch.manual_seed(0)
    untied = Transformer(TransformerConfig(v, v, d, 4, 1, 1, d_ff, max_len=16))
    table = tied.encoder.embed.tok.weight
    assert table is tied.decoder.embed.tok.weight is tied.out.weight
    assert count_parameters(untied) - count_parameters(tied) == 2 * v * d
    assert abs(table.std().item() * math.sqrt(d) - 1) < 0.05
    # the untied default is unchanged: Glorot for every matrix, the embeddings included
    bound = math.sqrt(6 / (v + d))
    assert untied.encoder.embed.tok.weight.abs().max() <= bound
    logits = tied(SRC, TGT[:, :4], *make_seq2seq_masks(SRC, TGT[:, :4], PAD))
    assert logits.shape == (2, 4, v)
    tied.out.weight.grad = None
    logits.sum().backward()
    assert table.grad is not None  # one gradient, from all three uses


def test_tied_embeddings_need_one_vocabulary() -> None:
    with pytest.raises(ValueError, match=r"src_vocab_size \(12\) must equal tgt_vocab_size \(11\)"):
        TransformerConfig(12, 11, D_MODEL, HEADS, tie_embeddings=True)


def test_layer_parameter_counts_equal_torch() -> None:
    assert (
        count_parameters(EncoderLayer(D_MODEL, HEADS, D_FF))
        == count_parameters(nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF))
        == _encoder_layer_params(D_MODEL, D_FF)
    )
    assert (
        count_parameters(DecoderLayer(D_MODEL, HEADS, D_FF))
        == count_parameters(nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF))
        == _decoder_layer_params(D_MODEL, D_FF)
    )


# ---------------------------------------------------------------- stacks and the full model


def test_embedding_is_scaled_by_sqrt_d_model_plus_positions() -> None:
    torch.manual_seed(0)
    enc = Encoder(vocab_size=12, d_model=D_MODEL, num_layers=1, num_heads=HEADS, d_ff=D_FF, max_len=20, dropout=0.0)
    x = enc.embed(SRC)
    expected = enc.embed.tok(SRC) * math.sqrt(D_MODEL) + enc.embed.pos.pe[: SRC.size(1)]
    torch.testing.assert_close(x, expected)


@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_apply_their_layers_in_order(norm_first: bool) -> None:
    torch.manual_seed(0)
    enc = Encoder(12, D_MODEL, 3, HEADS, D_FF, max_len=20, dropout=0.0, norm_first=norm_first).eval()
    dec = Decoder(11, D_MODEL, 2, HEADS, D_FF, max_len=20, dropout=0.0, norm_first=norm_first).eval()
    src_mask, tgt_mask, memory_mask = make_seq2seq_masks(SRC, TGT, PAD)
    x = enc.embed(SRC)
    for layer in enc.layers:
        x = layer(x, src_mask)
    memory = enc(SRC, src_mask)
    torch.testing.assert_close(memory, enc.norm(x))
    y = dec.embed(TGT)
    for layer in dec.layers:
        y = layer(y, memory, tgt_mask, memory_mask)
    torch.testing.assert_close(dec(TGT, memory, tgt_mask, memory_mask), dec.norm(y))
    assert isinstance(enc.norm, nn.Identity) != norm_first


def test_transformer_forward_is_encode_then_decode() -> None:
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(12, 11, D_MODEL, HEADS, 2, 2, D_FF, dropout=0.0, max_len=20)).eval()
    src_mask, tgt_mask, memory_mask = make_seq2seq_masks(SRC, TGT, PAD)
    logits = model(SRC, TGT, src_mask, tgt_mask, memory_mask)
    assert logits.shape == (TGT.size(0), TGT.size(1), 11)
    memory = model.encode(SRC, src_mask)
    assert memory.shape == (SRC.size(0), SRC.size(1), D_MODEL)
    torch.testing.assert_close(logits, model.decode(TGT, memory, tgt_mask, memory_mask))
    # forward() uses the source mask for cross-attention when no memory mask is given.
    torch.testing.assert_close(model(SRC, TGT, src_mask, tgt_mask), logits)


def test_decoder_layer_keeps_cross_attention_weights() -> None:
    layer = DecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0).eval()
    src_mask, tgt_mask, memory_mask = make_seq2seq_masks(SRC, TGT, PAD)
    layer(torch.randn(*TGT.shape, D_MODEL), torch.randn(*SRC.shape, D_MODEL), tgt_mask, memory_mask)
    assert layer.self_attn_weights.shape == (2, HEADS, TGT.size(1), TGT.size(1))
    assert layer.cross_attn_weights.shape == (2, HEADS, TGT.size(1), SRC.size(1))
    # cross-attention never looks at source padding: the first source ends in two pads
    assert layer.cross_attn_weights[0, :, :, 4:].abs().max() == 0


def test_dropout_acts_in_training_only() -> None:
    torch.manual_seed(0)
    layer = EncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.5)
    x = torch.randn(2, 5, D_MODEL)
    layer.train()
    assert not torch.allclose(layer(x), layer(x))
    layer.eval()
    torch.testing.assert_close(layer(x), layer(x))


def test_bad_token_shapes_are_reported() -> None:
    model = Transformer(TransformerConfig(12, 11, D_MODEL, HEADS, 1, 1, D_FF, max_len=20))
    with pytest.raises(ValueError, match=r"\(batch, length\)"):
        model.encode(SRC[0])
    with pytest.raises(ValueError, match="max_len=20"):
        model.encode(torch.ones(1, 21, dtype=torch.long))


def test_mask_for_the_wrong_target_length_is_reported() -> None:
    """A mask built for the full target, used with the shifted decoder input, names both shapes."""
    model = Transformer(TransformerConfig(12, 11, D_MODEL, HEADS, 1, 1, D_FF, max_len=20))
    tgt_mask = combine_masks(padding_mask(TGT, PAD), causal_mask(TGT.size(1)))
    memory = model.encode(SRC, padding_mask(SRC, PAD))
    with pytest.raises(ValueError, match=r"\(2, 1, 5, 5\).*\(2, 4, 4, 4\)"):
        model.decode(TGT[:, :-1], memory, tgt_mask, padding_mask(SRC, PAD))
