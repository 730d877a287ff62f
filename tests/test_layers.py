"""Tests of ``transformer_course.layers``: LayerNorm parity with PyTorch, the feed-forward network."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course.layers import LayerNorm, PositionwiseFeedForward

ATOL = 1e-6


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


# --------------------------------------------------------------------------- LayerNorm


@pytest.mark.parametrize("shape", [(16,), (3, 16), (2, 5, 16), (2, 3, 4, 16)])
@pytest.mark.parametrize("eps", [1e-5, 1e-6, 1e-2])
def test_layer_norm_matches_torch(shape: tuple[int, ...], eps: float) -> None:
    ours, ref = LayerNorm(16, eps=eps), nn.LayerNorm(16, eps=eps)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(16))
        ours.bias.copy_(torch.randn(16))
    ref.load_state_dict(ours.state_dict())  # same parameter names as torch's
    x = 3 * torch.randn(shape) + 2
    torch.testing.assert_close(ours(x), ref(x), atol=ATOL, rtol=0)


def test_layer_norm_gradients_match_torch() -> None:
    ours, ref = LayerNorm(8), nn.LayerNorm(8)
    x1 = torch.randn(4, 8, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    g = torch.randn(4, 8)
    (ours(x1) * g).sum().backward()
    (ref(x2) * g).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, atol=ATOL, rtol=0)
    torch.testing.assert_close(ours.weight.grad, ref.weight.grad, atol=ATOL, rtol=0)
    torch.testing.assert_close(ours.bias.grad, ref.bias.grad, atol=ATOL, rtol=0)


def test_layer_norm_state_dict_loads_from_torch() -> None:
    ref = nn.LayerNorm(6)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 2.0)
        ref.bias.uniform_(-1.0, 1.0)
    ours = LayerNorm(6)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 6)
    torch.testing.assert_close(ours(x), ref(x), atol=ATOL, rtol=0)


def test_layer_norm_normalises_each_vector() -> None:
    x = 5 * torch.randn(4, 7, 32) - 3
    y = LayerNorm(32)(x)
    torch.testing.assert_close(y.mean(-1), torch.zeros(4, 7), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(4, 7), atol=1e-3, rtol=0)


def test_layer_norm_uses_biased_variance_and_eps_inside_the_root() -> None:
    x = torch.tensor([2.0, -1.0, 3.0, 0.0])
    y = LayerNorm(4)(x)
    expected = (x - 1.0) / torch.sqrt(torch.tensor(2.5 + 1e-5))  # mean 1, biased variance 10/4
    torch.testing.assert_close(y, expected, atol=ATOL, rtol=0)
    # the unbiased-std variant (std + eps) is a different function: off by sqrt(4/3) here
    seed_variant = (x - x.mean()) / (x.std() + 1e-5)
    assert (y - seed_variant).abs().max() > 0.05


def test_layer_norm_of_a_constant_vector_is_finite() -> None:
    y = LayerNorm(5)(torch.full((2, 5), 7.0))
    assert torch.equal(y, torch.zeros(2, 5))


def test_layer_norm_does_not_mix_batch_elements() -> None:
    ln = LayerNorm(8)
    x = torch.randn(3, 4, 8)
    torch.testing.assert_close(ln(x)[1], ln(x[1]))


def test_layer_norm_errors() -> None:
    with pytest.raises(ValueError, match=r"LayerNorm\(8\).*last dimension 6"):
        LayerNorm(8)(torch.randn(2, 6))
    with pytest.raises(ValueError, match="d_model"):
        LayerNorm(0)
    with pytest.raises(ValueError, match="eps"):
        LayerNorm(4, eps=-1.0)


def test_layer_norm_repr() -> None:
    assert "8, eps=1e-05" in repr(LayerNorm(8))


# --------------------------------------------------------------------------- feed-forward


@pytest.mark.parametrize("shape", [(10,), (3, 10), (2, 7, 10)])
def test_feed_forward_keeps_the_shape(shape: tuple[int, ...]) -> None:
    ffn = PositionwiseFeedForward(d_model=10, d_ff=40)
    assert ffn(torch.randn(shape)).shape == shape
    assert ffn.linear1.weight.shape == (40, 10) and ffn.linear2.weight.shape == (10, 40)
    assert (ffn.d_model, ffn.d_ff) == (10, 40)


@pytest.mark.parametrize("activation, fn", [("relu", F.relu), ("gelu", F.gelu)])
def test_feed_forward_formula(activation: str, fn) -> None:
    ffn = PositionwiseFeedForward(d_model=6, d_ff=12, activation=activation)
    x = torch.randn(2, 3, 6)
    W1, b1 = ffn.linear1.weight.T, ffn.linear1.bias  # nn.Linear stores (out, in): x @ W.T
    W2, b2 = ffn.linear2.weight.T, ffn.linear2.bias
    torch.testing.assert_close(ffn(x), fn(x @ W1 + b1) @ W2 + b2, atol=ATOL, rtol=0)


def test_relu_and_gelu_differ() -> None:
    relu = PositionwiseFeedForward(6, 12, activation="relu")
    gelu = PositionwiseFeedForward(6, 12, activation="gelu")
    gelu.load_state_dict(relu.state_dict())
    x = torch.randn(4, 6)
    assert not torch.allclose(relu(x), gelu(x))


def test_seed_worked_example() -> None:
    x = torch.tensor([0.5, -0.2, 0.1, 0.8])
    W1 = torch.tensor([[0.1, 0.2], [-0.1, 0.1], [0.3, -0.2], [0.2, 0.1]])
    b1 = torch.tensor([0.01, 0.02])
    W2 = torch.tensor([[1.0, -0.5, 0.8, 0.2], [0.5, 0.3, -0.2, 0.4]])
    b2 = torch.tensor([0.03, -0.01, 0.02, 0.01])
    ffn = PositionwiseFeedForward(d_model=4, d_ff=2)
    with torch.no_grad():
        ffn.linear1.weight.copy_(W1.T)
        ffn.linear1.bias.copy_(b1)
        ffn.linear2.weight.copy_(W2.T)
        ffn.linear2.bias.copy_(b2)
    torch.testing.assert_close(ffn(x), torch.tensor([0.38, -0.097, 0.204, 0.128]), atol=ATOL, rtol=0)


def test_feed_forward_is_position_wise() -> None:
    ffn = PositionwiseFeedForward(d_model=8, d_ff=16)
    x = torch.randn(2, 5, 8)
    y = ffn(x)
    torch.testing.assert_close(y[:, 3], ffn(x[:, 3]), atol=ATOL, rtol=0)  # each position on its own
    perm = torch.randperm(5)
    torch.testing.assert_close(ffn(x[:, perm]), y[:, perm], atol=ATOL, rtol=0)  # order does not matter


def test_feed_forward_dropout_only_in_training() -> None:
    ffn = PositionwiseFeedForward(d_model=8, d_ff=64, dropout=0.5)
    x = torch.randn(3, 8)
    ffn.eval()
    assert torch.equal(ffn(x), ffn(x))
    ffn.train()
    assert not torch.equal(ffn(x), ffn(x))


def test_feed_forward_errors() -> None:
    with pytest.raises(ValueError, match=r"activation must be one of \['gelu', 'gelu_tanh', 'relu'\], got 'tanh'"):
        PositionwiseFeedForward(4, 8, activation="tanh")
    with pytest.raises(ValueError, match="d_ff"):
        PositionwiseFeedForward(4, 0)
    with pytest.raises(ValueError, match=r"d_model=4.*last dimension 5"):
        PositionwiseFeedForward(4, 8)(torch.randn(2, 5))


def test_layer_norm_refuses_integer_input() -> None:
    with pytest.raises(TypeError, match=r"floating-point input, got dtype torch.int64.*x.float\(\)"):
        LayerNorm(4)(torch.ones(2, 4, dtype=torch.long))
