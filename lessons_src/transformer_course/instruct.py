"""Instruction tuning (chapter 15): chat-formatted examples whose loss falls
on the answer only, and a minimal LoRA layer.

* :func:`chat_example`: one (prompt, answer) pair rendered with the model's
  own chat template, as ``input_ids`` and ``labels`` in which every token of
  the prompt and of the template around it is ``IGNORE`` (-100), so that the
  loss is the answer's alone;
* :func:`pad_batch`: examples of different lengths as one right-padded batch;
* :class:`LoRALinear`: a frozen linear layer plus a trainable low-rank update
  ``W + (alpha / r) B A``; :func:`add_lora` puts one on every named module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

IGNORE = -100
"""The label that PyTorch's cross-entropy (and 🤗 Transformers) skip."""


def chat_example(tokenizer, prompt: str, answer: str) -> dict[str, list[int]]:
    """``input_ids`` and ``labels`` of one exchange: the user's ``prompt``
    and the assistant's ``answer``, rendered by the tokenizer's chat template.

    The prompt is rendered with ``add_generation_prompt=True`` (system
    message, user turn, the opening of the assistant's turn); the full
    exchange must start with exactly those tokens, and its remaining tokens
    (the answer and the template's end of turn) are the ones that carry loss.
    """
    if not prompt.strip() or not answer.strip():
        raise ValueError(
            f"prompt and answer must be non-empty, got {prompt!r}, {answer!r}"
        )
    user = [{"role": "user", "content": prompt}]
    full = [*user, {"role": "assistant", "content": answer}]
    head = tokenizer.apply_chat_template(
        user, tokenize=True, add_generation_prompt=True, return_dict=False
    )
    ids = tokenizer.apply_chat_template(full, tokenize=True, return_dict=False)
    if list(ids[: len(head)]) != list(head) or len(ids) == len(head):
        raise ValueError(
            "the chat template does not render the prompt as a prefix of "
            "the whole exchange, so the answer's tokens cannot be told "
            f"apart: {tokenizer.decode(head)!r} vs {tokenizer.decode(ids)!r}"
        )
    labels = [IGNORE] * len(head) + list(ids[len(head) :])
    return {"input_ids": list(ids), "labels": labels}


def pad_batch(
    examples: Sequence[dict[str, list[int]]], pad_id: int
) -> dict[str, torch.Tensor]:
    """Right-pad ``examples`` (from :func:`chat_example`) into tensors
    ``input_ids``, ``attention_mask`` (1 on real tokens) and ``labels``
    (``IGNORE`` on padding)."""
    if len(examples) == 0:
        raise ValueError("no examples to batch")
    for ex in examples:
        if len(ex["input_ids"]) != len(ex["labels"]):
            raise ValueError(
                f"input_ids ({len(ex['input_ids'])}) and labels "
                f"({len(ex['labels'])}) differ in length"
            )
    n = max(len(ex["input_ids"]) for ex in examples)
    ids = torch.full((len(examples), n), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), n), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(examples), n), dtype=torch.long)
    for i, ex in enumerate(examples):
        k = len(ex["input_ids"])
        ids[i, :k] = torch.tensor(ex["input_ids"])
        labels[i, :k] = torch.tensor(ex["labels"])
        mask[i, :k] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class LoRALinear(nn.Module):
    """``base(x) + (alpha / r) * x A^T B^T``: a frozen ``nn.Linear`` and a
    trainable update of rank ``r``.

    ``A`` (r, in) starts random, ``B`` (out, r) at zero, so the layer starts
    as the base layer exactly.
    """

    def __init__(self, base: nn.Linear, r: int = 8, alpha: float = 16):
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"LoRA wraps an nn.Linear, got {type(base)}")
        if not isinstance(r, int) or r < 1:
            raise ValueError(f"rank r must be a positive int, got {r!r}")
        self.base = base.requires_grad_(False)
        w = base.weight
        self.A = nn.Parameter(
            torch.empty(r, base.in_features, device=w.device, dtype=w.dtype)
        )
        self.B = nn.Parameter(
            torch.zeros(base.out_features, r, device=w.device, dtype=w.dtype)
        )
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
        self.scale = alpha / r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.A.T @ self.B.T) * self.scale


def add_lora(
    model: nn.Module, targets: Sequence[str], r: int = 8, alpha: float = 16
) -> list[str]:
    """Freeze ``model`` and wrap every ``nn.Linear`` whose name ends with one
    of ``targets`` (``"q_proj"``, ``"v_proj"``, ...) in a
    :class:`LoRALinear`.  Returns the names of the wrapped modules."""
    model.requires_grad_(False)
    names = [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and name.split(".")[-1] in targets
    ]
    if not names:
        raise ValueError(
            f"no nn.Linear of {model.__class__.__name__} is "
            f"named like {list(targets)}"
        )
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, LoRALinear(getattr(parent, child), r, alpha))
    return names
