"""Tests of ``transformer_course.attention``: parity with PyTorch, masks, errors, the KV cache."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course.attention import KVCache, MultiHeadAttention, scaled_dot_product_attention

ATOL = 1e-6


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def reference_weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Attention weights written independently of the package (-inf fill, NaN rows -> 0)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0)


def random_mask(*shape: int, p: float = 0.6) -> torch.Tensor:
    """A random boolean mask in which every query keeps at least one key."""
    mask = torch.rand(*shape) < p
    mask[..., 0] = True
    return mask


# --------------------------------------------------------------------------- scaled dot-product


def test_seed_worked_example() -> None:
    q = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    k = torch.tensor([[1.0, 2.0, 1.0], [2.0, 1.0, 0.0]])
    v = torch.tensor([[0.5, 0.8], [0.2, 0.3]])
    out, w = scaled_dot_product_attention(q, k, v)
    p = 1 / (1 + math.exp(-2 / math.sqrt(3)))  # row 2: scores 3/sqrt(3) and 1/sqrt(3)
    expected_w = torch.tensor([[0.5, 0.5], [p, 1 - p]])
    torch.testing.assert_close(w, expected_w)
    torch.testing.assert_close(out, expected_w @ v)
    assert round(p, 4) == 0.7604


@pytest.mark.parametrize("shape", [(5, 8), (2, 5, 8), (2, 3, 5, 8)])
def test_matches_torch_without_mask(shape: tuple[int, ...]) -> None:
    *lead, n_q, d = shape
    q = torch.randn(*lead, n_q, d)
    k = torch.randn(*lead, 7, d)
    v = torch.randn(*lead, 7, 6)
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.shape == (*lead, n_q, 6) and w.shape == (*lead, n_q, 7)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=ATOL, rtol=0)
    torch.testing.assert_close(w, reference_weights(q, k), atol=ATOL, rtol=0)
    torch.testing.assert_close(w.sum(-1), torch.ones(*lead, n_q), atol=ATOL, rtol=0)


@pytest.mark.parametrize("mask_shape", [(2, 3, 5, 7), (2, 1, 5, 7), (2, 1, 1, 7), (5, 7)])
def test_matches_torch_with_boolean_mask(mask_shape: tuple[int, ...]) -> None:
    q, k, v = torch.randn(2, 3, 5, 16), torch.randn(2, 3, 7, 16), torch.randn(2, 3, 7, 4)
    mask = random_mask(*mask_shape)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=ATOL, rtol=0)
    torch.testing.assert_close(w, reference_weights(q, k, mask), atol=ATOL, rtol=0)
    assert (w.masked_select(~mask.expand_as(w)) == 0).all(), "blocked keys must get weight exactly 0"


def test_causal_mask_matches_torch_is_causal() -> None:
    q, k, v = torch.randn(3, 6, 8), torch.randn(3, 6, 8), torch.randn(3, 6, 8)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    out, w = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=ATOL, rtol=0)
    assert torch.equal(w[0, 0, 1:], torch.zeros(5))  # the first query sees only itself
    assert torch.allclose(w[0, 0, 0], torch.tensor(1.0))


def test_fully_masked_row_is_zero_not_nan() -> None:
    q, k, v = torch.randn(2, 4, 8, requires_grad=True), torch.randn(2, 5, 8), torch.randn(2, 5, 3)
    mask = random_mask(2, 4, 5)
    mask[0, 2] = False  # query 2 of batch element 0 may attend to nothing
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert not out.isnan().any() and not w.isnan().any()
    assert torch.equal(w[0, 2], torch.zeros(5))
    assert torch.equal(out[0, 2], torch.zeros(3))
    # the other rows are unaffected and still sum to one
    assert torch.allclose(w[1].sum(-1), torch.ones(4)) and torch.allclose(w[0, [0, 1, 3]].sum(-1), torch.ones(3))
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
    # the naive -inf fill is what produces NaN: the reason for the package's rule
    naive = torch.softmax((q @ k.transpose(-2, -1)).masked_fill(~mask, float("-inf")), dim=-1)
    assert naive[0, 2].isnan().all()


def test_all_true_mask_changes_nothing() -> None:
    q, k, v = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 2)
    out, w = scaled_dot_product_attention(q, k, v, torch.ones(4, 6, dtype=torch.bool))
    out0, w0 = scaled_dot_product_attention(q, k, v)
    assert torch.equal(out, out0) and torch.equal(w, w0)


def test_mask_is_true_may_attend() -> None:
    """The convention: True = may attend.  Blocking key j leaves the other keys' weights renormalised."""
    q, k, v = torch.randn(1, 8), torch.randn(3, 8), torch.eye(3)
    mask = torch.tensor([[True, False, True]])
    out, w = scaled_dot_product_attention(q, k, v, mask)
    full = reference_weights(q, k)
    assert w[0, 1] == 0
    torch.testing.assert_close(w[0, [0, 2]], full[0, [0, 2]] / full[0, [0, 2]].sum())
    torch.testing.assert_close(out, w)  # v is the identity, so the output is the weights


@pytest.mark.parametrize(
    "q_shape, k_shape, v_shape, words",
    [
        ((5, 8), (7, 6), (7, 4), "same feature size d_k"),
        ((5, 8), (7, 8), (6, 4), "same length"),
        ((8,), (7, 8), (7, 4), "at least 2 dimensions"),
        ((2, 5, 8), (3, 7, 8), (3, 7, 4), "do not broadcast"),
    ],
)
def test_shape_errors(q_shape, k_shape, v_shape, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        scaled_dot_product_attention(torch.randn(q_shape), torch.randn(k_shape), torch.randn(v_shape))


@pytest.mark.parametrize("bad", [torch.ones(5, 7), torch.ones(5, 7, dtype=torch.long)])
def test_non_boolean_mask_is_refused(bad: torch.Tensor) -> None:
    q, k, v = torch.randn(5, 8), torch.randn(7, 8), torch.randn(7, 4)
    with pytest.raises(TypeError, match="boolean"):
        scaled_dot_product_attention(q, k, v, bad)


def test_mask_that_is_not_a_tensor_is_refused() -> None:
    q, k, v = torch.randn(5, 8), torch.randn(7, 8), torch.randn(7, 4)
    with pytest.raises(TypeError, match="torch.Tensor"):
        scaled_dot_product_attention(q, k, v, [[True] * 7] * 5)  # type: ignore[arg-type]


@pytest.mark.parametrize("mask_shape", [(5, 6), (7, 5), (3, 5, 7), (2, 2, 5, 7)])
def test_unbroadcastable_mask_is_refused(mask_shape: tuple[int, ...]) -> None:
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 4)
    with pytest.raises(ValueError, match=r"cannot broadcast.*\(2, 5, 7\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(mask_shape, dtype=torch.bool))


def test_dropout_on_weights() -> None:
    q, k, v = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6, 2)
    _, w = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    _, w0 = scaled_dot_product_attention(q, k, v)
    kept = w != 0
    assert (~kept).any() and kept.any()
    torch.testing.assert_close(w[kept], 2 * w0[kept])  # inverted dropout rescales the kept weights


# --------------------------------------------------------------------------- multi-head attention


def to_torch(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """A ``torch.nn.MultiheadAttention`` holding exactly the weights of ``mha``."""
    ref = nn.MultiheadAttention(mha.d_model, mha.num_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]))
        ref.in_proj_bias.copy_(torch.cat([mha.W_q.bias, mha.W_k.bias, mha.W_v.bias]))
        ref.out_proj.weight.copy_(mha.W_o.weight)
        ref.out_proj.bias.copy_(mha.W_o.bias)
    return ref.eval()


def check_against_torch(mha, query, key, value, mask=None, attn_mask=None, key_padding_mask=None) -> None:
    ref = to_torch(mha)
    out, w = mha(query, key, value, mask=mask)
    ref_out, ref_w = ref(query, key, value, attn_mask=attn_mask, key_padding_mask=key_padding_mask)
    _, ref_w_heads = ref(
        query, key, value, attn_mask=attn_mask, key_padding_mask=key_padding_mask, average_attn_weights=False
    )
    assert out.shape == ref_out.shape and w.shape == ref_w_heads.shape
    torch.testing.assert_close(out, ref_out, atol=ATOL, rtol=0)
    torch.testing.assert_close(w.mean(dim=1), ref_w, atol=ATOL, rtol=0)
    torch.testing.assert_close(w, ref_w_heads, atol=ATOL, rtol=0)


def test_self_attention_matches_torch() -> None:
    mha = MultiHeadAttention(d_model=32, num_heads=4).eval()
    x = torch.randn(3, 6, 32)
    check_against_torch(mha, x, x, x)
    out_self, _ = mha(x)  # key and value default to the query
    torch.testing.assert_close(out_self, mha(x, x, x)[0])


def test_self_attention_with_causal_mask_matches_torch() -> None:
    mha = MultiHeadAttention(d_model=24, num_heads=3).eval()
    x = torch.randn(2, 5, 24)
    allowed = torch.ones(5, 5, dtype=torch.bool).tril()
    # ours: True = may attend; torch's: True = blocked
    check_against_torch(mha, x, x, x, mask=allowed[None, None], attn_mask=~allowed)


def test_self_attention_with_padding_mask_matches_torch() -> None:
    mha = MultiHeadAttention(d_model=16, num_heads=2).eval()
    x = torch.randn(3, 6, 16)
    lengths = torch.tensor([6, 4, 2])
    real = torch.arange(6)[None, :] < lengths[:, None]  # (batch, keys), True = real token
    check_against_torch(mha, x, x, x, mask=real[:, None, None, :], key_padding_mask=~real)


def test_self_attention_with_per_example_mask_matches_torch() -> None:
    mha = MultiHeadAttention(d_model=16, num_heads=4).eval()
    x = torch.randn(2, 5, 16)
    allowed = random_mask(2, 4, 5, 5)  # a different mask for every (batch element, head)
    check_against_torch(mha, x, x, x, mask=allowed, attn_mask=~allowed.reshape(8, 5, 5))


def test_cross_attention_matches_torch() -> None:
    mha = MultiHeadAttention(d_model=32, num_heads=8).eval()
    query, memory = torch.randn(2, 3, 32), torch.randn(2, 7, 32)
    check_against_torch(mha, query, memory, memory)
    value = torch.randn(2, 7, 32)  # key and value may differ
    check_against_torch(mha, query, memory, value)
    real = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    check_against_torch(mha, query, memory, memory, mask=real[:, None, None, :], key_padding_mask=~real)


@pytest.mark.parametrize("with_mask", [False, True])
def test_sdpa_path_gives_the_same_output(with_mask: bool) -> None:
    torch.manual_seed(1)
    explicit = MultiHeadAttention(d_model=32, num_heads=4).eval()
    fused = MultiHeadAttention(d_model=32, num_heads=4, use_sdpa=True).eval()
    fused.load_state_dict(explicit.state_dict())
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 6, 32)
    mask = None
    if with_mask:
        mask = random_mask(2, 1, 5, 6)
        mask[1, 0, 3] = False  # one query that may attend to nothing: 0 on both paths
    out, w = explicit(x, memory, memory, mask=mask)
    out_fused, w_fused = fused(x, memory, memory, mask=mask, need_weights=False)
    assert w_fused is None
    torch.testing.assert_close(out_fused, out, atol=ATOL, rtol=0)
    # with need_weights=True the fused module falls back to the explicit path and returns weights
    out_fb, w_fb = fused(x, memory, memory, mask=mask)
    assert w_fb is not None
    torch.testing.assert_close(out_fb, out, atol=ATOL, rtol=0)
    torch.testing.assert_close(w_fb, w, atol=ATOL, rtol=0)


def test_sdpa_path_checks_the_mask() -> None:
    fused = MultiHeadAttention(d_model=8, num_heads=2, use_sdpa=True)
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match="cannot broadcast"):
        fused(x, mask=torch.ones(3, 1, 5, 5, dtype=torch.bool), need_weights=False)
    with pytest.raises(TypeError, match="boolean"):
        fused(x, mask=torch.ones(5, 5), need_weights=False)


@pytest.mark.parametrize("d_model, num_heads", [(10, 3), (512, 7), (30, 4)])
def test_divisibility_error_names_both_numbers(d_model: int, num_heads: int) -> None:
    with pytest.raises(ValueError, match="divisible") as err:
        MultiHeadAttention(d_model, num_heads)
    assert str(d_model) in str(err.value) and str(num_heads) in str(err.value)


def test_non_positive_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        MultiHeadAttention(0, 2)
    with pytest.raises(ValueError, match="positive"):
        MultiHeadAttention(8, 0)


def test_input_shape_errors() -> None:
    mha = MultiHeadAttention(d_model=8, num_heads=2)
    with pytest.raises(ValueError, match=r"query must have shape .*d_model=8.*\(2, 5, 6\)"):
        mha(torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match="query must have shape"):
        mha(torch.randn(5, 8))
    with pytest.raises(ValueError, match="batch size"):
        mha(torch.randn(2, 5, 8), torch.randn(3, 5, 8))
    with pytest.raises(ValueError, match="length"):
        mha(torch.randn(2, 5, 8), torch.randn(2, 5, 8), torch.randn(2, 4, 8))


def test_heads_split_and_merge_round_trip() -> None:
    mha = MultiHeadAttention(d_model=12, num_heads=3)
    x = torch.randn(2, 5, 12)
    heads = mha.split_heads(x)
    assert heads.shape == (2, 3, 5, 4)
    torch.testing.assert_close(heads[:, 1], x[..., 4:8])  # head 1 owns features 4..7
    assert torch.equal(mha.merge_heads(heads), x)


def test_parameter_count_does_not_depend_on_heads() -> None:
    counts = {h: sum(p.numel() for p in MultiHeadAttention(48, h).parameters()) for h in (1, 2, 4, 8, 16)}
    assert set(counts.values()) == {4 * 48 * 48 + 4 * 48}


def test_dropout_only_in_training() -> None:
    mha = MultiHeadAttention(d_model=16, num_heads=2, dropout=0.5)
    x = torch.randn(2, 4, 16)
    mha.eval()
    assert torch.equal(mha(x)[0], mha(x)[0])
    mha.train()
    assert not torch.equal(mha(x)[0], mha(x)[0])


def test_kv_cache_matches_full_causal_attention() -> None:
    mha = MultiHeadAttention(d_model=16, num_heads=4).eval()
    x = torch.randn(2, 6, 16)
    full, _ = mha(x, mask=torch.ones(6, 6, dtype=torch.bool).tril())
    cache = KVCache()
    steps = [mha(x[:, t : t + 1], cache=cache)[0] for t in range(6)]  # one new token at a time
    assert len(cache) == 6
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)


def test_kv_cache_update() -> None:
    cache = KVCache()
    assert len(cache) == 0
    k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    ks, vs = cache.update(k, v)
    assert ks is k and len(cache) == 3
    ks, vs = cache.update(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
    assert ks.shape == (1, 2, 4, 4) and vs.shape == (1, 2, 4, 4) and len(cache) == 4
    assert torch.equal(ks[:, :, :3], k)


def test_ambiguous_2d_mask_is_refused() -> None:
    """A Hugging Face-style (batch, keys) padding mask has the shape of a (queries, keys) mask when
    batch == L: read as (queries, keys) it would be silently wrong, so it is refused."""
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(4, 4, 8)
    pad = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    with pytest.raises(ValueError, match=r"could be a \(queries, keys\) pattern or a \(batch, keys\) padding"):
        mha(x, mask=pad)
    with pytest.raises(ValueError, match=r"looks like a \(batch, keys\) padding mask"):
        mha(torch.randn(4, 3, 8), torch.randn(4, 5, 8), mask=torch.ones(4, 5, dtype=torch.bool))
    # both meanings, said explicitly, are accepted
    as_padding, _ = mha(x, mask=pad[:, None, None, :])
    as_pattern, _ = mha(x, mask=pad[None, None])
    assert not torch.allclose(as_padding, as_pattern)
    # a 2-D (queries, keys) mask that cannot be a padding mask stays accepted
    mha(torch.randn(2, 4, 8), mask=torch.ones(4, 4, dtype=torch.bool).tril())


def test_input_dtype_must_match_the_weights() -> None:
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(TypeError, match=r"query has dtype torch.float64 but the layer's weights are torch.float32"):
        mha(torch.randn(1, 3, 8, dtype=torch.float64))
    out, _ = mha.double()(torch.randn(1, 3, 8, dtype=torch.float64))
    assert out.dtype == torch.float64
