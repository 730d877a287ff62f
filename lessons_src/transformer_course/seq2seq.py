"""Training an encoder-decoder Transformer end to end: date normalisation (chapter 09).

The task looks like a tiny translation problem that trains on a CPU in about a minute: many
surface forms of a date go in (``"3rd of March, 2021"``, ``"Wed, Mar 3, '21"``, ``"03.03.2021"``)
and its ISO form comes out (``"2021-03-03"``).  This module holds everything the chapter
builds around :class:`transformer_course.transformer.Transformer`:

* the seeded data: :func:`render_date`, the :data:`FORMATS` it can use, :func:`make_splits`
  (train / validation / a fixed held-out test set whose *dates* never occur in training);
* character tokenisers with ``<pad> <bos> <eos>`` (:class:`CharTokenizer`), a
  :class:`Seq2SeqDataset` and the padding :func:`collate_batch`;
* teacher forcing (:func:`shift_right`), the label-smoothed loss (:func:`sequence_loss`), the
  warm-up + cosine learning-rate schedule (:func:`warmup_cosine`);
* the training loop (:func:`train_seq2seq`), greedy decoding (:func:`greedy_decode`,
  :func:`translate`) and exact-match evaluation (:func:`exact_match`);
* an out-of-distribution test: :data:`UNSEEN_FORMATS`, ways of writing a date that training
  never shows, and :func:`wrong_fields`, which says which fields of a prediction are wrong.

Evaluation (:func:`evaluate_loss`, :func:`greedy_decode`) runs under ``torch.inference_mode()``.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from .masking import causal_mask, make_seq2seq_masks, padding_mask
from .utils import progress

if TYPE_CHECKING:
    from .transformer import Transformer

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIALS = (PAD, BOS, EOS)

# ---------------------------------------------------------------------------------------------
# Data: dates in many surface forms
# ---------------------------------------------------------------------------------------------

FIRST_DATE = dt.date(1950, 1, 1)
LAST_DATE = dt.date(2049, 12, 31)
"""The range of dates.  A two-digit year ``yy`` means 19yy for yy >= 50 and 20yy below, so
within this range every two-digit year names exactly one year."""

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

Part = tuple[str | None, str]
"""One piece of a rendered date: ``(field, text)`` with field ``"day"``, ``"month"``,
``"year"`` or ``None`` for filler (separators, weekday names, "of", "the")."""


def ordinal(n: int) -> str:
    """``1 -> "1st"``, ``2 -> "2nd"``, ``3 -> "3rd"``, ``11 -> "11th"``, ``22 -> "22nd"``."""
    if 11 <= n % 100 <= 13:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _d(x: dt.date) -> Part:
    return ("day", str(x.day))


def _dd(x: dt.date) -> Part:
    return ("day", f"{x.day:02d}")


def _m(x: dt.date) -> Part:
    return ("month", str(x.month))


def _mm(x: dt.date) -> Part:
    return ("month", f"{x.month:02d}")


def _month(x: dt.date) -> Part:
    return ("month", MONTHS[x.month - 1])


def _mon(x: dt.date) -> Part:
    return ("month", MONTHS[x.month - 1][:3])


def _yyyy(x: dt.date) -> Part:
    return ("year", str(x.year))


def _yy(x: dt.date) -> Part:
    return ("year", f"{x.year % 100:02d}")


def _sep(s: str) -> Part:
    return (None, s)


FORMATS: dict[str, Callable[[dt.date], list[Part]]] = {
    # numeric, the separator tells the order (no "03/04/21" that could be either)
    "iso": lambda x: [_yyyy(x), _sep("-"), _mm(x), _sep("-"), _dd(x)],
    "compact": lambda x: [_yyyy(x), _mm(x), _dd(x)],
    "us_slash": lambda x: [_mm(x), _sep("/"), _dd(x), _sep("/"), _yyyy(x)],
    "us_slash_short": lambda x: [_m(x), _sep("/"), _d(x), _sep("/"), _yy(x)],
    "eu_dot": lambda x: [_dd(x), _sep("."), _mm(x), _sep("."), _yyyy(x)],
    "eu_dot_short": lambda x: [_d(x), _sep("."), _m(x), _sep("."), _yy(x)],
    # words
    "day_month_year": lambda x: [_d(x), _sep(" "), _month(x), _sep(" "), _yyyy(x)],
    "day_mon_yy": lambda x: [_dd(x), _sep("-"), _mon(x), _sep("-"), _yy(x)],
    "month_day_year": lambda x: [_month(x), _sep(" "), _d(x), _sep(", "), _yyyy(x)],
    "mon_day_year": lambda x: [_mon(x), _sep(" "), _d(x), _sep(" "), _yyyy(x)],
    "ordinal_of": lambda x: [("day", ordinal(x.day)), _sep(" of "), _month(x), _sep(", "), _yyyy(x)],
    "the_ordinal": lambda x: [_sep("the "), ("day", ordinal(x.day)), _sep(" of "), _month(x), _sep(" "), _yyyy(x)],
    "month_ordinal": lambda x: [_month(x), _sep(" "), ("day", ordinal(x.day)), _sep(", "), _yyyy(x)],
    "weekday_long": lambda x: [_sep(WEEKDAYS[x.weekday()] + ", "), _d(x), _sep(" "), _month(x), _sep(" "), _yyyy(x)],
    "weekday_short": lambda x: [
        _sep(WEEKDAYS[x.weekday()][:3] + ", "), _mon(x), _sep(" "), _d(x), _sep(", '"), _yy(x)
    ],
}
"""Name -> function from a date to its parts.  Formats with words are also written in lower
or upper case now and then (see :func:`render_date`)."""

UNSEEN_FORMATS: dict[str, Callable[[dt.date], list[Part]]] = {
    # ways people write dates that never occur in training; each is unambiguous to a reader
    "iso_slash": lambda x: [_yyyy(x), _sep("/"), _mm(x), _sep("/"), _dd(x)],  # 2021/07/14
    "day_mon_yyyy": lambda x: [_dd(x), _sep("-"), _mon(x), _sep("-"), _yyyy(x)],  # 14-Jul-2021
    "mon_dot_day_year": lambda x: [_mon(x), _sep(". "), _d(x), _sep(", "), _yyyy(x)],  # Jul. 14, 2021
    "month_day_year_no_comma": lambda x: [_month(x), _sep(" "), _d(x), _sep(" "), _yyyy(x)],  # July 14 2021
    "day_month_yy": lambda x: [_d(x), _sep(" "), _month(x), _sep(" '"), _yy(x)],  # 14 July '21
    "year_month_day": lambda x: [_yyyy(x), _sep(" "), _month(x), _sep(" "), _d(x)],  # 2021 July 14
}
"""Formats for an out-of-distribution test: the same fields and alphabet as :data:`FORMATS`,
arranged in ways the training data never shows (render them with ``formats=UNSEEN_FORMATS``)."""

SOURCE_ALPHABET = string.ascii_letters + string.digits + " ,.-/'"
"""Every character a rendered date can contain (the source vocabulary, without specials)."""
TARGET_ALPHABET = string.digits + "-"
"""Every character of an ISO date (the target vocabulary, without specials)."""


@dataclass(frozen=True)
class DateExample:
    """One training pair and where the day, month and year sit in the source text."""

    date: dt.date
    source: str
    target: str
    format: str
    spans: dict[str, tuple[int, int]]  # field -> (start, end) character offsets in ``source``


def render_date(
    date: dt.date, fmt: str, case: str = "as_is", formats: dict[str, Callable[[dt.date], list[Part]]] | None = None
) -> DateExample:
    """Write ``date`` in format ``fmt`` (a key of ``formats``, default :data:`FORMATS`).

    ``case`` is ``"as_is"``, ``"lower"`` or ``"upper"``.  The target is always ISO 8601.
    """
    formats = FORMATS if formats is None else formats
    if fmt not in formats:
        raise ValueError(f"unknown date format {fmt!r}; known formats: {sorted(formats)}")
    if case not in ("as_is", "lower", "upper"):
        raise ValueError(f"case must be 'as_is', 'lower' or 'upper', got {case!r}")
    if not FIRST_DATE <= date <= LAST_DATE:
        raise ValueError(f"date {date} is outside {FIRST_DATE}..{LAST_DATE} (two-digit years would be ambiguous)")
    text, spans = "", {}
    for name, piece in formats[fmt](date):
        if name is not None:
            spans[name] = (len(text), len(text) + len(piece))
        text += piece
    if case == "lower":
        text = text.lower()
    elif case == "upper":
        text = text.upper()
    return DateExample(date, text, date.isoformat(), fmt, spans)


def _random_example(
    rng: random.Random, date: dt.date, formats: dict[str, Callable[[dt.date], list[Part]]]
) -> DateExample:
    fmt = rng.choice(sorted(formats))
    has_letters = any(c.isalpha() for c in render_date(date, fmt, formats=formats).source)
    case = rng.choices(("as_is", "lower", "upper"), weights=(0.7, 0.15, 0.15))[0] if has_letters else "as_is"
    return render_date(date, fmt, case, formats)


@dataclass
class DateSplits:
    """Train / validation / test examples whose *dates* are disjoint across the three sets."""

    train: list[DateExample]
    val: list[DateExample]
    test: list[DateExample]


def make_splits(
    n_train: int,
    n_val: int = 500,
    n_test: int = 1000,
    seed: int = 0,
    formats: dict[str, Callable[[dt.date], list[Part]]] | None = None,
) -> DateSplits:
    """Seeded data: ``n_test`` held-out examples on ``n_test`` distinct dates, ``n_val``
    validation examples on other dates, and ``n_train`` training examples drawn (with
    replacement) from the remaining dates, each in a random format.

    No test or validation *date* occurs in training, in any format, so the held-out accuracy
    measures generalisation to unseen dates, not memory of seen strings.  The same arguments
    give the same examples on every machine.
    """
    formats = FORMATS if formats is None else formats
    n_days = (LAST_DATE - FIRST_DATE).days + 1
    if min(n_train, n_val, n_test) < 0:
        raise ValueError(f"sizes must be non-negative, got n_train={n_train}, n_val={n_val}, n_test={n_test}")
    if n_test + n_val >= n_days:
        raise ValueError(f"n_test + n_val = {n_test + n_val} leaves no training dates out of {n_days}")
    rng = random.Random(seed)
    days = list(range(n_days))
    rng.shuffle(days)
    to_date = lambda i: FIRST_DATE + dt.timedelta(days=i)  # noqa: E731
    test_days, val_days, train_days = days[:n_test], days[n_test : n_test + n_val], days[n_test + n_val :]
    test = [_random_example(rng, to_date(i), formats) for i in test_days]
    val = [_random_example(rng, to_date(i), formats) for i in val_days]
    train = [_random_example(rng, to_date(rng.choice(train_days)), formats) for _ in range(n_train)]
    return DateSplits(train, val, test)


# ---------------------------------------------------------------------------------------------
# Tokenisers, Dataset, collate
# ---------------------------------------------------------------------------------------------


class CharTokenizer:
    """A character-level tokeniser: ids 0, 1, 2 are ``<pad> <bos> <eos>``, then one id per character."""

    def __init__(self, alphabet: Iterable[str]) -> None:
        chars = sorted(set(alphabet))
        if any(len(c) != 1 for c in chars):
            raise ValueError("the alphabet must consist of single characters")
        self.tokens: list[str] = [*SPECIALS, *chars]
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.pad_id, self.bos_id, self.eos_id = 0, 1, 2

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = True) -> list[int]:
        """Ids of ``text``, optionally framed by ``<bos>`` and ``<eos>``."""
        unknown = sorted({c for c in text if c not in self.index or c in SPECIALS})
        if unknown:
            raise ValueError(f"characters {unknown} of {text!r} are not in this tokeniser's alphabet")
        ids = [self.index[c] for c in text]
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``: stops at the first ``<eos>``, skips ``<pad>`` and ``<bos>``."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            out.append(self.tokens[i])
        return "".join(out)


def source_tokenizer() -> CharTokenizer:
    """The tokeniser of rendered dates."""
    return CharTokenizer(SOURCE_ALPHABET)


def target_tokenizer() -> CharTokenizer:
    """The tokeniser of ISO dates."""
    return CharTokenizer(TARGET_ALPHABET)


class Seq2SeqDataset(Dataset):
    """Pairs of texts, encoded once: the source as ``text <eos>``, the target as ``<bos> text <eos>``.

    Items are ``(src_ids, tgt_ids)``, two 1-D ``LongTensor`` s of different lengths.
    """

    def __init__(
        self, pairs: Sequence[tuple[str, str]], src_tok: CharTokenizer, tgt_tok: CharTokenizer
    ) -> None:
        self.pairs = list(pairs)
        self.src = [torch.tensor(src_tok.encode(s), dtype=torch.long) for s, _ in self.pairs]
        self.tgt = [torch.tensor(tgt_tok.encode(t, add_bos=True), dtype=torch.long) for _, t in self.pairs]

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.src[i], self.tgt[i]


def collate_batch(
    batch: Sequence[tuple[torch.Tensor, torch.Tensor]], pad_id: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack ``(src, tgt)`` items into ``(batch, L_src)`` and ``(batch, L_tgt)``, right-padded with ``pad_id``.

    Each side is padded to the longest sequence *of this batch*, not of the data set.  Use it
    as ``DataLoader(..., collate_fn=functools.partial(collate_batch, pad_id=...))``.
    """
    if len(batch) == 0:
        raise ValueError("cannot collate an empty batch")
    for k, item in enumerate(batch):
        if len(item) != 2 or any(t.dim() != 1 for t in item):
            raise ValueError(f"item {k} must be a pair of 1-D id tensors (src, tgt)")
    src = nn.utils.rnn.pad_sequence([s for s, _ in batch], batch_first=True, padding_value=pad_id)
    tgt = nn.utils.rnn.pad_sequence([t for _, t in batch], batch_first=True, padding_value=pad_id)
    return src, tgt


# ---------------------------------------------------------------------------------------------
# Teacher forcing, loss, schedule
# ---------------------------------------------------------------------------------------------


def shift_right(tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher forcing: ``(decoder input, labels) = (tgt[:, :-1], tgt[:, 1:])``.

    ``tgt`` is ``<bos> y1 ... yn <eos> <pad>...``; the decoder reads ``<bos> y1 ... yn`` and
    must predict ``y1 ... yn <eos>``: position ``i`` of the input is labelled with token ``i + 1``.
    """
    if tgt.dim() != 2 or tgt.size(1) < 2:
        raise ValueError(f"tgt must have shape (batch, length >= 2) to be shifted, got {tuple(tgt.shape)}")
    return tgt[:, :-1], tgt[:, 1:]


def smoothed_targets(labels: torch.Tensor, num_classes: int, smoothing: float) -> torch.Tensor:
    """The target distribution of label smoothing, as ``torch.nn.functional.cross_entropy`` defines it:
    ``(1 - smoothing) * one_hot(label) + smoothing / num_classes`` everywhere."""
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing}")
    return F.one_hot(labels, num_classes).float() * (1.0 - smoothing) + smoothing / num_classes


def sequence_loss(
    logits: torch.Tensor, labels: torch.Tensor, pad_id: int, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Mean label-smoothed cross-entropy over the non-padding labels.

    ``logits`` ``(batch, L, vocab)``, ``labels`` ``(batch, L)``.  Each label contributes
    ``(1 - s) * (-log p[label]) + s * mean_k(-log p[k])``, the cross-entropy with the
    distribution of :func:`smoothed_targets`; positions whose label is ``pad_id`` contribute
    nothing and are not counted.  Equal to ``F.cross_entropy(..., ignore_index=pad_id,
    label_smoothing=s)``.
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (batch, L, vocab) and labels (batch, L), got {tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
    logp = logits.float().log_softmax(dim=-1)
    nll = -logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)  # -log p[label]
    uniform = -logp.mean(dim=-1)  # cross-entropy with the uniform distribution
    per_token = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    keep = labels != pad_id
    n = keep.sum()
    if n == 0:
        raise ValueError("every label is padding: there is nothing to compute a loss on")
    return (per_token * keep).sum() / n


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float = 0.05) -> float:
    """Learning-rate multiplier: linear warm-up to 1 over ``warmup_steps``, then a cosine decay
    to ``min_ratio`` at ``total_steps`` (and ``min_ratio`` after).

    Step ``0`` already gets ``1 / warmup_steps``, so no optimiser step is wasted at learning rate 0.
    Use as ``LambdaLR(optimizer, lambda s: warmup_cosine(s, warmup, total))``.
    """
    if warmup_steps < 0 or total_steps <= warmup_steps:
        raise ValueError(f"need 0 <= warmup_steps < total_steps, got {warmup_steps} and {total_steps}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress_ = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress_))


# ---------------------------------------------------------------------------------------------
# Training and evaluation
# ---------------------------------------------------------------------------------------------


def _loop_forever(loader: Iterable) -> Iterator:
    while True:
        yield from loader


def teacher_forced_logits(
    model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One teacher-forced pass: shift ``tgt``, build the masks for exactly the shifted tensors,
    run the model.  Returns ``(logits, labels)``."""
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
    """Mean :func:`sequence_loss` per non-padding target token over ``loader`` (in eval mode)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for src, tgt in loader:
        src, tgt = src.to(device), tgt.to(device)
        logits, labels = teacher_forced_logits(model, src, tgt, pad_id)
        n = int((labels != pad_id).sum())
        total += float(sequence_loss(logits, labels, pad_id, label_smoothing)) * n
        count += n
    model.train(was_training)
    return total / max(count, 1)


@dataclass
class TrainHistory:
    """What :func:`train_seq2seq` measured."""

    train_loss: list[float] = field(default_factory=list)  # one per step (label-smoothed)
    lr: list[float] = field(default_factory=list)  # one per step
    val_steps: list[int] = field(default_factory=list)  # steps after which validation ran
    val_loss: list[float] = field(default_factory=list)  # same loss (smoothing included) on validation
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0  # time.process_time(): CPU time of this process, all threads


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
) -> TrainHistory:
    """Train ``model`` for ``num_steps`` optimiser steps (cycling through ``train_loader``).

    Each step: teacher-forced forward pass (masks from :func:`make_seq2seq_masks` for the
    shifted tensors), :func:`sequence_loss`, backward, gradient clipping to ``clip_norm``,
    optimiser step, scheduler step.  Every ``eval_every`` steps (and after the last) the
    validation loss (with the same label smoothing, so the two curves compare) is computed on
    ``val_loader``.  The progress bar shows the running loss.
    """
    if num_steps <= 0:
        raise ValueError(f"num_steps must be positive, got {num_steps}")
    history = TrainHistory()
    t_wall, t_cpu = time.perf_counter(), time.process_time()
    model.train()
    batches = _loop_forever(train_loader)
    bar = progress(range(num_steps), desc="training", disable=not show_progress)
    for step in bar:
        src, tgt = next(batches)
        src, tgt = src.to(device), tgt.to(device)
        logits, labels = teacher_forced_logits(model, src, tgt, pad_id)
        loss = sequence_loss(logits, labels, pad_id, label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        history.lr.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        history.train_loss.append(loss.item())
        last = step == num_steps - 1
        if val_loader is not None and ((step + 1) % eval_every == 0 or last):
            history.val_steps.append(step + 1)
            history.val_loss.append(evaluate_loss(model, val_loader, pad_id, label_smoothing, device))
            bar.set_postfix(loss=f"{history.train_loss[-1]:.3f}", val=f"{history.val_loss[-1]:.3f}")
    bar.close()
    model.eval()
    history.wall_seconds = time.perf_counter() - t_wall
    history.cpu_seconds = time.process_time() - t_cpu
    return history


@torch.inference_mode()
def greedy_decode(
    model: Transformer,
    src: torch.Tensor,
    pad_id: int,
    bos_id: int,
    eos_id: int,
    max_len: int,
) -> torch.Tensor:
    """Greedy decoding: ``encode`` the source once, then ``decode`` one token at a time.

    At step ``t`` the decoder reads ``<bos> y1 ... y(t-1)`` (under a causal mask) and the most
    likely next token is appended.  A sequence that has produced ``<eos>`` is finished: it gets
    ``pad_id`` from then on, and the loop stops early once every sequence is finished.

    Returns the generated ids ``(batch, <= max_len)`` without the ``<bos>``.
    """
    if src.dim() != 2:
        raise ValueError(f"src must have shape (batch, L_src), got {tuple(src.shape)}")
    if max_len <= 0:
        raise ValueError(f"max_len must be positive, got {max_len}")
    was_training = model.training
    model.eval()
    src_mask = padding_mask(src, pad_id)
    memory = model.encode(src, src_mask)  # once
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        tgt_mask = causal_mask(ys.size(1), device=src.device)  # no padding inside a generated prefix
        logits = model.decode(ys, memory, tgt_mask, src_mask)  # (batch, t, vocab)
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
    out: list[str] = []
    for i in range(0, len(texts), batch_size):
        chunk = [torch.tensor(src_tok.encode(t), dtype=torch.long) for t in texts[i : i + batch_size]]
        src = nn.utils.rnn.pad_sequence(chunk, batch_first=True, padding_value=src_tok.pad_id).to(device)
        ids = greedy_decode(model, src, src_tok.pad_id, tgt_tok.bos_id, tgt_tok.eos_id, max_len)
        out += [tgt_tok.decode(row.tolist()) for row in ids.cpu()]
    return out


ISO_FIELDS = {"year": slice(0, 4), "month": slice(5, 7), "day": slice(8, 10)}
"""Where each field sits in an ISO date ``YYYY-MM-DD``."""


def wrong_fields(prediction: str, target: str) -> tuple[str, ...]:
    """The fields of an ISO date that ``prediction`` gets wrong: ``("day",)``, ``("year", "month")``...

    ``()`` for a correct prediction; ``("malformed",)`` when the prediction is not of the form
    ``DDDD-DD-DD`` (too short, too long, a misplaced ``-``).
    """
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", target):
        raise ValueError(f"target must be an ISO date YYYY-MM-DD, got {target!r}")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", prediction):
        return ("malformed",)
    return tuple(name for name, s in ISO_FIELDS.items() if prediction[s] != target[s])


def exact_match(predictions: Sequence[str], targets: Sequence[str]) -> float:
    """Fraction of predictions equal to their target, character for character."""
    if len(predictions) != len(targets):
        raise ValueError(f"{len(predictions)} predictions for {len(targets)} targets")
    if not targets:
        raise ValueError("exact_match needs at least one example")
    return sum(p == t for p, t in zip(predictions, targets)) / len(targets)
