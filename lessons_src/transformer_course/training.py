"""What every training run of the course shares (chapters 01, 09, 10 and 12).

* :func:`fit`: the one training loop.  A task gives it a function that returns
  the loss of step ``k`` (drawing its own batch), an optimiser and optionally a
  schedule and an evaluation; it returns a :class:`History`.
* :func:`param_groups`: AdamW's two groups, weight decay on the matrices only.
* :func:`warmup_decay`: the learning-rate multiplier, a linear warm-up then a
  cosine (or linear) decay.
* :func:`accuracy`: the fraction of predictions equal to the labels.

The task-specific loops (``why_attention.train_classifier``,
``seq2seq.train_seq2seq``, ``train_gpt.train``, ``sentiment.fine_tune``,
``bert.pretrain_mlm``) only say how to draw a batch and what to measure, then
call :func:`fit`.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .utils import progress


@dataclass
class History:
    """What :func:`fit` measured.

    ``loss`` and ``lr`` have one entry per optimiser step (the learning rate
    that step used).  ``eval_steps[i]`` is the number of steps done when
    evaluation ``i`` ran; ``evals[name][i]`` is what it measured
    (``"val_loss"``, ``"accuracy"``, ...).
    """

    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    evals: dict[str, list[float]] = field(default_factory=dict)
    wall_seconds: float = 0.0
    # time.process_time(): CPU time of this process, all threads
    cpu_seconds: float = 0.0

    def curve(self, name: str) -> list[tuple[int, float]]:
        """``[(step, value), ...]`` of one evaluated quantity."""
        if name not in self.evals:
            raise KeyError(
                f"no evaluation named {name!r}; "
                f"this run measured {sorted(self.evals)}"
            )
        return list(zip(self.eval_steps, self.evals[name]))


def fit(
    model: nn.Module,
    step_loss: Callable[[int], torch.Tensor],
    steps: int,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    *,
    clip_norm: float | None = 1.0,
    evaluate: Callable[[], dict[str, float]] | None = None,
    eval_every: int = 0,
    eval_at_start: bool = False,
    desc: str = "training",
    show_progress: bool = True,
    accumulate: int = 1,
) -> History:
    """Take ``steps`` optimiser steps on ``model``; returns a :class:`History`.

    Step ``k`` (0-based): ``model.train()``, ``loss = step_loss(k)``, backward,
    gradient clipping to ``clip_norm`` (``None``: no clipping), optimiser step,
    scheduler step.  With ``accumulate=n`` a step adds up the gradients of
    ``n`` micro-batches first, ``step_loss(k * n)`` to ``step_loss(k * n + n -
    1)``, each loss divided by ``n`` (the same gradient as one batch ``n``
    times larger; a ``DistributedDataParallel`` model averages across
    processes only once, at the last).  The recorded loss is their mean.
    ``evaluate()`` (in eval mode) runs after every ``eval_every`` steps and
    after the last (and before the first with ``eval_at_start``);
    ``eval_every=0`` evaluates only at the end.  The model is left in eval
    mode.
    """
    if not isinstance(steps, int) or steps <= 0:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if not isinstance(accumulate, int) or accumulate < 1:
        raise ValueError(
            f"accumulate must be a positive int, got {accumulate!r}"
        )
    if eval_every < 0:
        raise ValueError(
            "eval_every must be >= 0 (0: evaluate only at the end), "
            f"got {eval_every}"
        )
    history = History()
    t_wall, t_cpu = time.perf_counter(), time.process_time()

    def run_evaluation(
        measure: Callable[[], dict[str, float]], done: int
    ) -> None:
        model.eval()
        for name, value in measure().items():
            history.evals.setdefault(name, []).append(value)
        history.eval_steps.append(done)

    # a progress bar, advanced once per step (it shows the latest losses)
    bar = progress(total=steps, desc=desc, disable=not show_progress)
    if evaluate is not None and eval_at_start:
        run_evaluation(evaluate, 0)
    for step in range(steps):
        model.train()
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for micro in range(accumulate):
            # a DDP model's gradients are averaged across processes at the
            # last micro-batch's backward only
            last = micro == accumulate - 1
            sync = (
                model.no_sync()
                if not last and isinstance(model, DistributedDataParallel)
                else contextlib.nullcontext()
            )
            with sync:
                loss = step_loss(step * accumulate + micro)
                if accumulate > 1:
                    loss = loss / accumulate
                loss.backward()
            total += loss.item()
        if isinstance(model, DistributedDataParallel):
            # each process saw its share: report the mean over all of them
            mean = torch.tensor(
                [total], device=next(model.parameters()).device
            )
            torch.distributed.all_reduce(mean)
            total = mean.item() / torch.distributed.get_world_size()
        if clip_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        history.lr.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        history.loss.append(total)
        done = step + 1
        if evaluate is not None and (
            (eval_every and done % eval_every == 0) or done == steps
        ):
            run_evaluation(evaluate, done)
        shown = {
            "loss": history.loss[-1],
            **{k: v[-1] for k, v in history.evals.items()},
        }
        bar.set_postfix(
            {k: f"{v:.3f}" for k, v in shown.items()}, refresh=False
        )
        bar.update(1)
    bar.close()
    model.eval()
    history.wall_seconds = time.perf_counter() - t_wall
    history.cpu_seconds = time.process_time() - t_cpu
    return history


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW's parameter groups: weight decay on the matrices (and embeddings),
    none on biases and LayerNorm gains.  Frozen parameters
    (``requires_grad=False``) are left out."""
    # tied weights appear once
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(
            "the model has no trainable parameters "
            "(all have requires_grad=False)"
        )
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def warmup_decay(
    step: int,
    warmup_steps: int,
    total_steps: int,
    min_ratio: float = 0.05,
    decay: str = "cosine",
) -> float:
    """Learning-rate multiplier: linear warm-up to 1 over ``warmup_steps``,
    then a decay to ``min_ratio`` at ``total_steps`` (and ``min_ratio`` after),
    along a half cosine (``decay="cosine"``) or a straight line (``"linear"``,
    BERT's fine-tuning schedule).

    Step ``0`` already gets ``1 / warmup_steps``, so no optimiser step is
    wasted at learning rate 0.
    Use as ``LambdaLR(optimizer, lambda s: warmup_decay(s, warmup, total))``.
    """
    if warmup_steps < 0 or total_steps < max(warmup_steps, 1):
        raise ValueError(
            "need 0 <= warmup_steps <= total_steps and total_steps >= 1, "
            f"got {warmup_steps} and {total_steps}"
        )
    if decay not in ("cosine", "linear"):
        raise ValueError(f"decay must be 'cosine' or 'linear', got {decay!r}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    if decay == "linear":
        return (
            min_ratio + (1.0 - min_ratio) * max(0, total_steps - step) / span
        )
    progress_ = min(1.0, (step - warmup_steps) / span)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (
        1.0 + math.cos(math.pi * progress_)
    )


def class_ids(x: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """Class ids (a tensor or a list) as a CPU ``LongTensor``."""
    return (
        x.long().cpu()
        if isinstance(x, torch.Tensor)
        else torch.tensor(list(x), dtype=torch.long)
    )


def accuracy(
    predictions: torch.Tensor | Sequence[int],
    labels: torch.Tensor | Sequence[int],
) -> float:
    """Fraction of ``predictions`` (class ids) equal to ``labels``."""
    p, y = class_ids(predictions), class_ids(labels)
    if p.shape != y.shape or p.dim() != 1 or len(p) == 0:
        raise ValueError(
            f"predictions {tuple(p.shape)} and labels {tuple(y.shape)} "
            "must be equal, non-empty 1-D"
        )
    return (p == y).float().mean().item()
