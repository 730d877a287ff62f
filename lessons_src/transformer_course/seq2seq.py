"""Training and running an encoder-decoder Transformer on pairs of texts
(chapter 09).

What any sequence-to-sequence task needs around
:class:`transformer_course.transformer.Transformer` (chapter 09 applies it to
dates, ``tasks.dates``):

* a :class:`Seq2SeqDataset` of encoded pairs and the padding
  :func:`collate_batch`;
* teacher forcing (:func:`shift_right`, :func:`teacher_forced_logits`) and the
  label-smoothed loss (:func:`sequence_loss`);
* the training run (:func:`train_seq2seq`, on
  :func:`transformer_course.training.fit`), greedy decoding
  (:func:`greedy_decode`, :func:`translate`) and exact-match evaluation
  (:func:`exact_match`).

Evaluation (:func:`evaluate_loss`, :func:`greedy_decode`) runs under
``torch.inference_mode()``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from .masking import causal_mask, make_seq2seq_masks, padding_mask
from .tokenization import BOS, EOS, PAD, CharTokenizer
from .training import History, fit

if TYPE_CHECKING:
    from .transformer import Transformer

# -----------------------------------------------------------------------------
# Dataset and collate
# -----------------------------------------------------------------------------


class Seq2SeqDataset(Dataset):
    """Pairs of texts, encoded once: the source as ``text <eos>``, the target
    as ``<bos> text <eos>``.

    Items are ``(src_ids, tgt_ids)``, two 1-D ``LongTensor`` s of different
    lengths.
    """

    def __init__(
        self,
        pairs: Sequence[tuple[str, str]],
        src_tok: CharTokenizer,
        tgt_tok: CharTokenizer,
    ) -> None:
        self.pairs = list(pairs)
        self.src = [
            torch.tensor(src_tok.encode(s), dtype=torch.long)
            for s, _ in self.pairs
        ]
        self.tgt = [
            torch.tensor(tgt_tok.encode(t, add_bos=True), dtype=torch.long)
            for _, t in self.pairs
        ]

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.src[i], self.tgt[i]


def collate_batch(
    batch: Sequence[tuple[torch.Tensor, torch.Tensor]], pad_id: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ``(src, tgt)`` items into ``(batch, L_src)`` and
    ``(batch, L_tgt)``, right-padded with ``pad_id``.

    Each side is padded to the longest sequence *of this batch*, not of the
    data set.  Use it as ``DataLoader(...,
    collate_fn=functools.partial(collate_batch, pad_id=...))``.
    """
    if len(batch) == 0:
        raise ValueError("cannot collate an empty batch")
    for k, item in enumerate(batch):
        if len(item) != 2 or any(t.dim() != 1 for t in item):
            raise ValueError(
                f"item {k} must be a pair of 1-D id tensors (src, tgt)"
            )
    src = nn.utils.rnn.pad_sequence(
        [s for s, _ in batch], batch_first=True, padding_value=pad_id
    )
    tgt = nn.utils.rnn.pad_sequence(
        [t for _, t in batch], batch_first=True, padding_value=pad_id
    )
    return src, tgt


# -----------------------------------------------------------------------------
# Teacher forcing and the loss
# -----------------------------------------------------------------------------


def shift_right(tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher forcing:
    ``(decoder input, labels) = (tgt[:, :-1], tgt[:, 1:])``.

    ``tgt`` is ``<bos> y1 ... yn <eos> <pad>...``; the decoder reads
    ``<bos> y1 ... yn`` and must predict ``y1 ... yn <eos>``: position ``i`` of
    the input is labelled with token ``i + 1``.
    """
    if tgt.dim() != 2 or tgt.size(1) < 2:
        raise ValueError(
            "tgt must have shape (batch, length >= 2) to be shifted, "
            f"got {tuple(tgt.shape)}"
        )
    return tgt[:, :-1], tgt[:, 1:]


def smoothed_targets(
    labels: torch.Tensor, num_classes: int, smoothing: float
) -> torch.Tensor:
    """The target distribution of label smoothing, as
    ``torch.nn.functional.cross_entropy`` defines it:
    ``(1 - smoothing) * one_hot(label) + smoothing / num_classes`` everywhere.
    """
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    return (
        F.one_hot(labels, num_classes).float() * (1.0 - smoothing)
        + smoothing / num_classes
    )


def sequence_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    pad_id: int,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Mean label-smoothed cross-entropy over the non-padding labels.

    ``logits`` ``(batch, L, vocab)``, ``labels`` ``(batch, L)``.  Each label
    contributes ``(1 - s) * (-log p[label]) + s * mean_k(-log p[k])``, the
    cross-entropy with the distribution of :func:`smoothed_targets`; positions
    whose label is ``pad_id`` contribute nothing and are not counted.  Equal to
    ``F.cross_entropy(..., ignore_index=pad_id, label_smoothing=s)``.
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            "logits must be (batch, L, vocab) and labels (batch, L), "
            f"got {tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(
            f"label_smoothing must be in [0, 1), got {label_smoothing}"
        )
    logp = logits.float().log_softmax(dim=-1)
    nll = -logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # -log p[label]
    uniform = -logp.mean(dim=-1)  # cross-entropy with the uniform distribution
    per_token = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    keep = labels != pad_id
    n = keep.sum()
    if n == 0:
        raise ValueError(
            "every label is padding: there is nothing to compute a loss on"
        )
    return (per_token * keep).sum() / n


# -----------------------------------------------------------------------------
# Training and evaluation
# -----------------------------------------------------------------------------


def teacher_forced_logits(
    model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One teacher-forced pass: shift ``tgt``, build the masks for exactly the
    shifted tensors, run the model.  Returns ``(logits, labels)``.
    """
    tgt_in, labels = shift_right(tgt)
    src_mask, tgt_mask, memory_mask = make_seq2seq_masks(src, tgt_in, pad_id)
    logits = model(src, tgt_in, src_mask, tgt_mask, memory_mask)
    return logits, labels


@torch.inference_mode()
def evaluate_loss(
    model: nn.Module,
    loader: Iterable,
    pad_id: int,
    label_smoothing: float = 0.0,
    device: torch.device | str = "cpu",
) -> float:
    """Mean :func:`sequence_loss` per non-padding target token over ``loader``
    (in eval mode).
    """
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for src, tgt in loader:
        src, tgt = src.to(device), tgt.to(device)
        logits, labels = teacher_forced_logits(model, src, tgt, pad_id)
        n = int((labels != pad_id).sum())
        total += (
            float(sequence_loss(logits, labels, pad_id, label_smoothing)) * n
        )
        count += n
    model.train(was_training)
    return total / max(count, 1)


def train_seq2seq(
    model: nn.Module,
    train_loader: Iterable,
    num_steps: int,
    optimizer: torch.optim.Optimizer,
    pad_id: int,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    label_smoothing: float = 0.1,
    clip_norm: float | None = 1.0,
    val_loader: Iterable | None = None,
    eval_every: int = 100,
    device: torch.device | str = "cpu",
    show_progress: bool = True,
) -> History:
    """Train ``model`` for ``num_steps`` optimiser steps, cycling through
    ``train_loader``.

    The loss of a step is the teacher-forced pass
    (:func:`teacher_forced_logits`) scored by :func:`sequence_loss`;
    :func:`~transformer_course.training.fit` does the rest (backward, clipping
    to ``clip_norm``, optimiser and scheduler steps).  Every ``eval_every``
    steps and after the last, the loss on ``val_loader`` (with the same label
    smoothing, so the two curves compare) goes into the history as
    ``"val_loss"``.
    """
    if num_steps <= 0:
        raise ValueError(f"num_steps must be positive, got {num_steps}")
    # epoch after epoch
    batches = itertools.chain.from_iterable(itertools.repeat(train_loader))

    def step_loss(step: int) -> torch.Tensor:
        src, tgt = next(batches)
        src, tgt = src.to(device), tgt.to(device)
        logits, labels = teacher_forced_logits(model, src, tgt, pad_id)
        return sequence_loss(logits, labels, pad_id, label_smoothing)

    evaluate = None
    if val_loader is not None:
        evaluate = lambda: {  # noqa: E731
            "val_loss": evaluate_loss(
                model, val_loader, pad_id, label_smoothing, device
            )
        }
    return fit(
        model,
        step_loss,
        num_steps,
        optimizer,
        scheduler,
        clip_norm=clip_norm,
        evaluate=evaluate,
        eval_every=eval_every,
        show_progress=show_progress,
    )


@torch.inference_mode()
def greedy_decode(
    model: Transformer,
    src: torch.Tensor,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    max_len: int,
) -> torch.Tensor:
    """Greedy decoding: ``encode`` the source once, then ``decode`` one token
    at a time.

    At step ``t`` the decoder reads ``<bos> y1 ... y(t-1)`` (under a causal
    mask) and the most likely next token is appended.  A sequence that has
    produced ``<eos>`` is finished: it gets ``pad_id`` from then on, and the
    loop stops early once every sequence is finished.

    Returns the generated ids ``(batch, <= max_len)`` without the ``<bos>``.
    """
    if src.dim() != 2:
        raise ValueError(
            f"src must have shape (batch, L_src), got {tuple(src.shape)}"
        )
    if max_len <= 0:
        raise ValueError(f"max_len must be positive, got {max_len}")
    was_training = model.training
    model.eval()
    src_mask = padding_mask(src, pad_id)
    memory = model.encode(src, src_mask)  # once
    ys = torch.full(
        (src.size(0), 1), bos_id, dtype=torch.long, device=src.device
    )
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        # no padding inside a generated prefix
        tgt_mask = causal_mask(ys.size(1), device=src.device)
        # (batch, t, vocab)
        logits = model.decode(ys, memory, tgt_mask, src_mask)
        nxt = logits[:, -1].argmax(dim=-1)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == eos_id
        if bool(done.all()):
            break
    model.train(was_training)
    return ys[:, 1:]


def translate(
    model: Transformer,
    texts: Sequence[str],
    src_tok: CharTokenizer,
    tgt_tok: CharTokenizer,
    max_len: int = 16,
    batch_size: int = 250,
    device: torch.device | str = "cpu",
) -> list[str]:
    """Greedy-decode a list of source texts into target texts (in batches)."""
    pad = src_tok.special_id(PAD)
    bos = tgt_tok.special_id(BOS)
    eos = tgt_tok.special_id(EOS)
    out: list[str] = []
    for i in range(0, len(texts), batch_size):
        chunk = [
            torch.tensor(src_tok.encode(t), dtype=torch.long)
            for t in texts[i : i + batch_size]
        ]
        src = nn.utils.rnn.pad_sequence(
            chunk, batch_first=True, padding_value=pad
        ).to(device)
        ids = greedy_decode(model, src, pad, bos, eos, max_len)
        out += [tgt_tok.decode(row.tolist()) for row in ids.cpu()]
    return out


def exact_match(predictions: Sequence[str], targets: Sequence[str]) -> float:
    """Fraction of predictions equal to their target, character for
    character.
    """
    if len(predictions) != len(targets):
        raise ValueError(
            f"{len(predictions)} predictions for {len(targets)} targets"
        )
    if not targets:
        raise ValueError("exact_match needs at least one example")
    return sum(p == t for p, t in zip(predictions, targets)) / len(targets)
