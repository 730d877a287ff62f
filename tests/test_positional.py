"""Tests of transformer_course.positional: the sinusoidal table and PositionalEncoding."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_course.positional import PositionalEncoding, sinusoidal_table


def loop_table(max_len: int, d_model: int) -> torch.Tensor:
    """The formula of the paper, one number at a time, in double precision."""
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(d_model // 2):  # i indexes the sine/cosine *pair*
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe


@pytest.mark.parametrize("d_model", [2, 8, 20, 64])
def test_table_matches_the_formula(d_model):
    table = sinusoidal_table(50, d_model)
    assert table.shape == (50, d_model) and table.dtype == torch.float32
    assert torch.allclose(table.double(), loop_table(50, d_model), atol=1e-7, rtol=0)


def test_first_position_and_first_pair():
    table = sinusoidal_table(10, 6)
    assert torch.equal(table[0], torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0]))
    # pair 0 has frequency 1: PE[pos, 0] = sin(pos)
    assert torch.allclose(table[:, 0], torch.sin(torch.arange(10.0)), atol=1e-6)


def test_rows_are_unique_and_bounded():
    table = sinusoidal_table(512, 64)
    assert table.abs().max() <= 1.0
    assert torch.cdist(table, table).fill_diagonal_(1.0).min() > 1e-3


def test_shift_is_a_rotation_independent_of_position():
    """PE[p + k] = M_k PE[p] with one block-diagonal M_k for every p (relative positions)."""
    d_model, k = 16, 7
    table = sinusoidal_table(100, d_model).double()
    freqs = 1.0 / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    for j, w in enumerate(freqs):
        c, s = math.cos(k * w), math.sin(k * w)
        m[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
    assert torch.allclose(table[:-k] @ m.T, table[k:], atol=1e-6)


def test_dot_product_depends_only_on_distance():
    d_model = 32
    table = sinusoidal_table(200, d_model).double()
    gram = table @ table.T
    for offset in (0, 1, 5, 40):
        diag = gram.diagonal(offset)
        assert torch.allclose(diag, diag[0].expand_as(diag), atol=1e-5)
    assert torch.allclose(gram.diagonal(), torch.full((200,), d_model / 2, dtype=torch.float64), atol=1e-5)


@pytest.mark.parametrize("d_model", [0, -4, 7])
def test_bad_d_model(d_model):
    with pytest.raises(ValueError, match=f"even number.*got {d_model}"):
        sinusoidal_table(10, d_model)
    with pytest.raises(ValueError, match=str(d_model)):
        PositionalEncoding(d_model)


def test_bad_max_len():
    with pytest.raises(ValueError, match="max_len must be positive, got 0"):
        sinusoidal_table(0, 8)


def test_module_adds_the_table():
    torch.manual_seed(0)
    pe = PositionalEncoding(d_model=12, max_len=30)
    x = torch.randn(3, 10, 12)
    out = pe(x)
    assert out.shape == x.shape
    assert torch.allclose(out - x, pe.pe[:10].expand(3, -1, -1), atol=1e-6)
    # offset continues a sequence: positions 10..14
    assert torch.allclose(pe(x[:, :5], offset=10), x[:, :5] + pe.pe[10:15])
    assert torch.equal(pe.pe, sinusoidal_table(30, 12))


def test_module_has_no_parameters_and_moves_with_to():
    pe = PositionalEncoding(8, max_len=16)
    assert list(pe.parameters()) == []
    assert "pe" in dict(pe.named_buffers())
    assert "pe" not in pe.state_dict()  # rebuilt from d_model and max_len, not saved
    assert pe.to(torch.float64).pe.dtype == torch.float64


def test_too_long_sequence_error():
    pe = PositionalEncoding(8, max_len=16)
    pe(torch.zeros(1, 16, 8))  # exactly max_len is fine
    with pytest.raises(ValueError, match=r"length 17 is longer than max_len=16"):
        pe(torch.zeros(1, 17, 8))
    with pytest.raises(ValueError, match=r"length 18 is longer than max_len=16"):
        pe(torch.zeros(1, 8, 8), offset=10)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        pe(torch.zeros(1, 4, 8), offset=-1)


def test_wrong_input_shape_error():
    pe = PositionalEncoding(8, max_len=16)
    with pytest.raises(ValueError, match=r"\(batch, length, 8\), got \(4, 8\)"):
        pe(torch.zeros(4, 8))
    with pytest.raises(ValueError, match=r"got \(1, 4, 6\)"):
        pe(torch.zeros(1, 4, 6))


def test_dropout_only_in_training():
    torch.manual_seed(0)
    pe = PositionalEncoding(8, max_len=16, dropout=0.5)
    x = torch.randn(2, 5, 8)
    pe.eval()
    assert torch.equal(pe(x), x + pe.pe[:5])
    pe.train()
    assert (pe(x) == 0).any()
