"""Sinusoidal positional encoding (chapter 03)."""

from __future__ import annotations

import torch
from torch import nn


def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    """The ``(max_len, d_model)`` table of the original Transformer.

    ``PE[pos, 2i] = sin(pos / 10000^(2i/d_model))`` and
    ``PE[pos, 2i+1] = cos(...)`` with the same angle: dimensions ``2i`` and
    ``2i+1`` form one sine/cosine pair.
    """
    if d_model <= 0 or d_model % 2 != 0:
        raise ValueError(
            "d_model must be a positive even number (sine/cosine pairs), "
            f"got {d_model}"
        )
    if max_len <= 0:
        raise ValueError(f"max_len must be positive, got {max_len}")
    # (max_len, 1)
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 0, 2, 4, ...
    angle = position / 10000.0 ** (two_i / d_model)  # (max_len, d_model / 2)
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.float()


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal table to a batch of embeddings
    ``(batch, length, d_model)``.

    The table is a buffer, not a parameter: it moves with ``.to(device)`` but
    is not trained, and it is not saved in the ``state_dict`` either
    (``persistent=False``): it is rebuilt from ``d_model`` and ``max_len``.
    Dropout, as in the paper, follows the sum.

    Errors: an odd ``d_model`` (``sinusoidal_table``), an input that is not
    ``(batch, length, d_model)``, and a sequence (plus ``offset``) longer than
    ``max_len``.
    """

    pe: torch.Tensor  # the table, registered as a buffer in __init__

    def __init__(
        self, d_model: int, max_len: int = 5000, dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.d_model = d_model
        self.max_len = max_len
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "pe", sinusoidal_table(max_len, d_model), persistent=False
        )

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """``x + PE[offset : offset + length]``; ``offset`` lets a decoder
        continue a sequence."""
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(
                f"expected input of shape (batch, length, {self.d_model}), "
                f"got {tuple(x.shape)}"
            )
        n = x.size(1)
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        if offset + n > self.max_len:
            raise ValueError(
                f"sequence of length {offset + n} is longer than "
                f"max_len={self.max_len} of this PositionalEncoding; "
                "build it with a larger max_len"
            )
        return self.dropout(x + self.pe[offset : offset + n])
