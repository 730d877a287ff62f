"""Layer normalisation and the position-wise feed-forward network
(chapter 06)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

# "gelu_tanh" is the tanh approximation of GELU that the original GPT-2 used.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
}


class LayerNorm(nn.Module):
    """Layer normalisation from scratch:
    ``gamma * (x - mean) / sqrt(var + eps) + beta``.

    Over the last dimension, with the *biased* variance (divide by ``n``, not
    ``n - 1``) and ``eps`` *inside* the square root: exactly what
    ``torch.nn.LayerNorm`` computes.  The parameters are called ``weight`` and
    ``bias`` like PyTorch's, so state dicts load across.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        if d_model <= 0 or eps < 0:
            raise ValueError(
                "LayerNorm needs d_model > 0 and eps >= 0, "
                f"got d_model={d_model}, eps={eps}"
            )
        self.d_model = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.size(-1) != self.d_model:
            raise ValueError(
                f"LayerNorm({self.d_model}) got input "
                f"with last dimension {x.size(-1)}"
            )
        if not x.is_floating_point():
            raise TypeError(
                f"LayerNorm needs floating-point input, got dtype {x.dtype}; "
                "normalise vectors (e.g. embeddings), not token ids: "
                "convert with x.float() if these are numbers"
            )
        mean = x.mean(dim=-1, keepdim=True)
        # biased: divide by n
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (
            self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias
        )

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"


class PositionwiseFeedForward(nn.Module):
    """``FFN(x) = act(x W1 + b1) W2 + b2``, applied to every position
    separately.

    ``activation`` is ``"relu"`` (the original Transformer), ``"gelu"`` (BERT,
    GPT) or ``"gelu_tanh"`` (GELU's tanh approximation, as in the original
    GPT-2).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, "
                f"got {activation!r}"
            )
        if d_model <= 0 or d_ff <= 0:
            raise ValueError(
                "d_model and d_ff must be positive, "
                f"got d_model={d_model}, d_ff={d_ff}"
            )
        self.d_model = d_model
        self.d_ff = d_ff
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.size(-1) != self.d_model:
            raise ValueError(
                f"PositionwiseFeedForward(d_model={self.d_model}) got input "
                f"with last dimension {x.size(-1)}"
            )
        return self.linear2(
            self.dropout(ACTIVATIONS[self.activation](self.linear1(x)))
        )
