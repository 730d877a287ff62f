"""Tests of ``transformer_course.masking`` and of masks as the models use them.

Besides the helpers' shapes and values, these are the chapter 08 proofs by experiment:
(1) padded source tokens change nothing at real positions, (2) a decoder output never depends
on later target tokens, (3) a query with every key masked gives finite (zero) output.
"""

from __future__ import annotations

import pytest
import torch

from transformer_course.attention import MultiHeadAttention, scaled_dot_product_attention
from transformer_course.masking import causal_mask, combine_masks, make_seq2seq_masks, padding_mask
from transformer_course.transformer import Encoder, EncoderLayer, Transformer, TransformerConfig

PAD = 0
SRC = torch.tensor([[5, 3, 8, 2, 0, 0], [7, 1, 4, 6, 9, 2], [4, 4, 0, 0, 0, 0]])
TGT_IN = torch.tensor([[1, 4, 4, 0, 0], [1, 9, 2, 3, 5], [1, 6, 0, 0, 0]])  # decoder input (shifted right)
V_SRC, V_TGT, D_MODEL, HEADS = 12, 11, 16, 4


def _model(seed: int = 0, **kw) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(V_SRC, V_TGT, D_MODEL, HEADS, 2, 2, 32, dropout=0.0, max_len=20, **kw)).eval()


# ---------------------------------------------------------------- the helpers


def test_padding_mask_is_true_at_real_tokens_and_broadcasts_over_heads_and_queries() -> None:
    m = padding_mask(SRC, PAD)
    assert m.dtype == torch.bool and m.shape == (3, 1, 1, 6)
    assert torch.equal(m[:, 0, 0], SRC != PAD)
    assert torch.broadcast_shapes(m.shape, (3, HEADS, 5, 6)) == (3, HEADS, 5, 6)


def test_padding_mask_uses_the_given_pad_id() -> None:
    assert padding_mask(torch.tensor([[3, 0, 3]]), pad_id=3)[0, 0, 0].tolist() == [False, True, False]


@pytest.mark.parametrize("bad", [torch.tensor([1, 2, 0]), torch.zeros(2, 3, 4, dtype=torch.long)])
def test_padding_mask_wants_a_batch_of_sequences(bad: torch.Tensor) -> None:
    with pytest.raises(ValueError, match=r"\(batch, length\)"):
        padding_mask(bad, PAD)


def test_padding_mask_rejects_float_tokens() -> None:
    with pytest.raises(TypeError, match="integer ids"):
        padding_mask(torch.zeros(2, 3), PAD)


@pytest.mark.parametrize("n", [1, 2, 7])
def test_causal_mask_lets_query_i_see_keys_up_to_i(n: int) -> None:
    m = causal_mask(n)
    assert m.dtype == torch.bool and m.shape == (1, 1, n, n)
    for i in range(n):
        for j in range(n):
            assert bool(m[0, 0, i, j]) == (j <= i)


@pytest.mark.parametrize("n", [0, -3])
def test_causal_mask_needs_a_positive_length(n: int) -> None:
    with pytest.raises(ValueError, match="positive length"):
        causal_mask(n)


def test_combine_masks_is_logical_and() -> None:
    pad, causal = padding_mask(TGT_IN, PAD), causal_mask(TGT_IN.size(1))
    both = combine_masks(pad, causal)
    assert both.shape == (3, 1, 5, 5)
    for b in range(3):
        for i in range(5):
            for j in range(5):
                assert bool(both[b, 0, i, j]) == (j <= i and TGT_IN[b, j].item() != PAD)
    assert combine_masks(None, pad, None) is pad
    assert combine_masks(None) is None


def test_combine_masks_rejects_non_boolean_and_unbroadcastable_masks() -> None:
    with pytest.raises(TypeError, match=r"boolean.*\(1, 1, 6, 6\).*m == 0 if 1 means blocked"):
        combine_masks(padding_mask(SRC, PAD), causal_mask(6).float())
    with pytest.raises(ValueError, match=r"\(3, 1, 1, 6\).*\(1, 1, 5, 5\)"):
        combine_masks(padding_mask(SRC, PAD), causal_mask(5))


def test_make_seq2seq_masks_is_built_for_exactly_these_tensors() -> None:
    src_mask, tgt_mask, memory_mask = make_seq2seq_masks(SRC, TGT_IN, PAD)
    assert src_mask.shape == memory_mask.shape == (3, 1, 1, 6)
    assert tgt_mask.shape == (3, 1, 5, 5)
    assert torch.equal(tgt_mask, combine_masks(padding_mask(TGT_IN, PAD), causal_mask(5)))
    with pytest.raises(ValueError, match="batch sizes"):
        make_seq2seq_masks(SRC, TGT_IN[:2], PAD)


# ---------------------------------------------------------------- masks inside attention


def test_masked_weights_are_exactly_zero_and_the_rest_sum_to_one() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(3, HEADS, 5, 8), torch.randn(3, HEADS, 5, 8), torch.randn(3, HEADS, 5, 8)
    mask = combine_masks(padding_mask(TGT_IN, PAD), causal_mask(5))
    _, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.all(w.masked_select(~mask.expand_as(w)) == 0.0)
    torch.testing.assert_close(w.sum(-1), torch.ones(3, HEADS, 5))  # every query here has a real key


def test_a_broadcast_mask_equals_the_expanded_one() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, HEADS).eval()
    x = torch.randn(3, 6, D_MODEL)
    m = padding_mask(SRC, PAD)
    out, _ = mha(x, mask=m)
    out_full, _ = mha(x, mask=m.expand(3, HEADS, 6, 6).contiguous())
    torch.testing.assert_close(out, out_full)


def test_a_mask_that_cannot_broadcast_names_both_shapes() -> None:
    mha = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(3, 4, D_MODEL)
    bad = combine_masks(padding_mask(TGT_IN, PAD), causal_mask(5))  # built for length 5, input has 4
    with pytest.raises(ValueError, match=r"\(3, 1, 5, 5\).*\(3, 4, 4, 4\)"):
        mha(x, mask=bad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.long, torch.uint8])
def test_non_boolean_masks_are_rejected(dtype: torch.dtype) -> None:
    q = torch.randn(1, 1, 3, 4)
    with pytest.raises(TypeError, match="boolean"):
        scaled_dot_product_attention(q, q, q, torch.ones(1, 1, 3, 3, dtype=dtype))


def test_our_mask_means_the_same_as_pytorchs_sdpa_boolean_mask() -> None:
    """F.scaled_dot_product_attention's boolean mask is True = take part, like ours."""
    torch.manual_seed(0)
    q, k, v = torch.randn(3, HEADS, 5, 8), torch.randn(3, HEADS, 5, 8), torch.randn(3, HEADS, 5, 8)
    mask = combine_masks(padding_mask(TGT_IN, PAD), causal_mask(5))
    ours, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(ours, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask))


# ---------------------------------------------------------------- proofs by experiment


def _replace_padding(tokens: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    noise = torch.randint(1, V_SRC, tokens.shape, generator=g)
    return torch.where(tokens == PAD, noise, tokens)


@pytest.mark.parametrize("norm_first", [False, True])
def test_padded_source_tokens_change_nothing_at_real_positions(norm_first: bool) -> None:
    model = _model(norm_first=norm_first)
    src_mask, tgt_mask, memory_mask = make_seq2seq_masks(SRC, TGT_IN, PAD)
    real = SRC != PAD
    other = _replace_padding(SRC, seed=1)
    assert not torch.equal(other, SRC)
    with torch.no_grad():
        mem, mem2 = model.encode(SRC, src_mask), model.encode(other, src_mask)  # same mask: same positions
        assert torch.allclose(mem[real], mem2[real], atol=1e-6)
        assert not torch.allclose(mem[~real], mem2[~real], atol=1e-3)  # the padded rows themselves differ
        logits = model.decode(TGT_IN, mem, tgt_mask, memory_mask)
        logits2 = model.decode(TGT_IN, mem2, tgt_mask, memory_mask)
        assert torch.allclose(logits, logits2, atol=1e-6)  # every target position: cross-attention skips padding
        # Control: without the masks, the padding leaks into everything.
        leaky = model.encode(SRC), model.encode(other)
        assert not torch.allclose(leaky[0][real], leaky[1][real], atol=1e-3)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_outputs_never_depend_on_later_target_tokens(norm_first: bool) -> None:
    model = _model(norm_first=norm_first)
    src_mask, tgt_mask, memory_mask = make_seq2seq_masks(SRC, TGT_IN, PAD)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        memory = model.encode(SRC, src_mask)
        logits = model.decode(TGT_IN, memory, tgt_mask, memory_mask)
        n = TGT_IN.size(1)
        for t in range(n - 1):
            changed = TGT_IN.clone()
            changed[:, t + 1 :] = torch.randint(1, V_TGT, (TGT_IN.size(0), n - t - 1), generator=g)
            # the mask is rebuilt for the changed input, as training would do
            _, tgt_mask2, _ = make_seq2seq_masks(SRC, changed, PAD)
            logits2 = model.decode(changed, memory, tgt_mask2, memory_mask)
            assert torch.allclose(logits[:, : t + 1], logits2[:, : t + 1], atol=1e-6), f"leak into t <= {t}"
            assert not torch.allclose(logits[:, t + 1 :], logits2[:, t + 1 :], atol=1e-3)
        # Control: without the causal mask the first position sees the future.
        only_pad = padding_mask(changed, PAD)
        assert not torch.allclose(
            model.decode(TGT_IN, memory, padding_mask(TGT_IN, PAD), memory_mask)[:, 0],
            model.decode(changed, memory, only_pad, memory_mask)[:, 0],
            atol=1e-3,
        )


def test_an_encoder_layer_with_a_causal_mask_is_a_decoder_only_block() -> None:
    torch.manual_seed(0)
    block = EncoderLayer(D_MODEL, HEADS, 32, dropout=0.0).eval()
    x = torch.randn(2, 6, D_MODEL)
    y = x.clone()
    y[:, 4:] = torch.randn(2, 2, D_MODEL)
    with torch.no_grad():
        a, b = block(x, causal_mask(6)), block(y, causal_mask(6))
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)


def test_a_query_with_every_key_masked_gives_zero_weights_and_zero_output() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 3, 4, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[True, False, True], [False, False, False], [True, True, True]])[None, None]
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert torch.all(w[..., 1, :] == 0) and torch.all(out[..., 1, :] == 0)
    torch.testing.assert_close(w[..., 0, :].sum(-1), torch.ones(1, 2))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@pytest.mark.parametrize("use_sdpa", [False, True])
def test_fully_masked_rows_stay_finite_through_a_whole_encoder(use_sdpa: bool) -> None:
    """Query padding AND key padding blocks whole rows; nothing may turn into NaN downstream."""
    torch.manual_seed(0)
    enc = Encoder(V_SRC, D_MODEL, 3, HEADS, 32, max_len=20, dropout=0.0).eval()
    for layer in enc.layers:
        layer.self_attn.use_sdpa = use_sdpa
    real = padding_mask(SRC, PAD)  # (batch, 1, 1, L)
    both_ways = real & real.transpose(-1, -2)  # (batch, 1, L, L): padded queries see nothing
    out = enc(SRC, both_ways)
    assert torch.isfinite(out).all()
    with torch.no_grad():
        torch.testing.assert_close(out[SRC != PAD], enc(SRC, real)[SRC != PAD])  # real positions agree
