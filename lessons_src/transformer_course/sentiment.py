"""Sentiment classification of short reviews (chapter 12).

* ``load_sentiment_reviews()``: the course's own data set, 1,050 short English reviews written for
  the course (``data/sentiment_reviews.csv``), half positive and half negative, with a fixed
  train/test split (850/200, both balanced) stored in the file itself, so every run and every
  reader uses the same split.  Reviews about the same subject (the two reviews of a kettle, say,
  found by the distinctive words they share) were kept on the same side of the split: the test
  set asks about subjects the model has not been trained on, instead of rewarding it for
  remembering that "kettle" came with the label "positive" in training.
* ``fit_bag_of_words``: the baseline, a logistic regression on word counts, in plain torch.
* ``fine_tune``: the training loop for a Hugging Face sequence classifier (``AutoModelFor
  SequenceClassification``); ``predict_proba`` and ``classify_sentiment`` use the result.
* ``accuracy``, ``confusion_matrix`` and ``plot_confusion_matrix`` to report it honestly.

Label ids follow the order of ``LABELS``: 0 = negative, 1 = positive.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .utils import progress

LABELS = ("negative", "positive")
SPLITS = ("train", "test")


@dataclass(frozen=True)
class ReviewSplit:
    """One split of the data set: ``texts[i]`` has label id ``labels[i]`` (0 negative, 1 positive)."""

    texts: list[str]
    labels: list[int]

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.labels):
            raise ValueError(f"{len(self.texts)} texts but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.texts)


def data_path() -> Path:
    """Where the CSV of the data set lives inside the installed package."""
    return Path(str(resources.files("transformer_course") / "data" / "sentiment_reviews.csv"))


def load_sentiment_reviews(path: str | Path | None = None) -> tuple[ReviewSplit, ReviewSplit]:
    """``(train, test)`` of the course's review data set.

    The CSV has the columns ``text``, ``label`` (``negative`` / ``positive``) and ``split``
    (``train`` / ``test``); the split is part of the file, not drawn at load time.
    """
    path = Path(path) if path is not None else data_path()
    texts: dict[str, list[str]] = {s: [] for s in SPLITS}
    labels: dict[str, list[int]] = {s: [] for s in SPLITS}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or not {"text", "label", "split"} <= set(reader.fieldnames):
            raise ValueError(f"{path.name} must have the columns text, label, split; got {reader.fieldnames}")
        for line, row in enumerate(reader, start=2):
            if row["label"] not in LABELS:
                raise ValueError(f"{path.name}, line {line}: label must be one of {LABELS}, got {row['label']!r}")
            if row["split"] not in SPLITS:
                raise ValueError(f"{path.name}, line {line}: split must be one of {SPLITS}, got {row['split']!r}")
            if not row["text"].strip():
                raise ValueError(f"{path.name}, line {line}: empty text")
            texts[row["split"]].append(row["text"])
            labels[row["split"]].append(LABELS.index(row["label"]))
    return ReviewSplit(texts["train"], labels["train"]), ReviewSplit(texts["test"], labels["test"])


# --------------------------------------------------------------------------------------------
# Metrics


def _as_long(x: torch.Tensor | Sequence[int]) -> torch.Tensor:
    return x.long().cpu() if isinstance(x, torch.Tensor) else torch.tensor(list(x), dtype=torch.long)


def accuracy(predictions: torch.Tensor | Sequence[int], labels: torch.Tensor | Sequence[int]) -> float:
    """Fraction of predictions equal to the labels."""
    p, y = _as_long(predictions), _as_long(labels)
    if p.shape != y.shape or p.dim() != 1 or len(p) == 0:
        raise ValueError(f"predictions {tuple(p.shape)} and labels {tuple(y.shape)} must be equal, non-empty 1-D")
    return (p == y).float().mean().item()


def confusion_matrix(
    labels: torch.Tensor | Sequence[int], predictions: torch.Tensor | Sequence[int], num_classes: int = 2
) -> torch.Tensor:
    """``cm[i, j]`` = number of examples of true class ``i`` predicted as class ``j``."""
    y, p = _as_long(labels), _as_long(predictions)
    if p.shape != y.shape or p.dim() != 1:
        raise ValueError(f"labels {tuple(y.shape)} and predictions {tuple(p.shape)} must be equal 1-D shapes")
    if len(y) and (min(y.min(), p.min()) < 0 or max(y.max(), p.max()) >= num_classes):
        raise ValueError(f"class ids must lie in 0..{num_classes - 1}")
    return torch.bincount(y * num_classes + p, minlength=num_classes**2).view(num_classes, num_classes)


def plot_confusion_matrix(cm: torch.Tensor, labels: Sequence[str] = LABELS, ax: Any = None, title: str | None = None):
    """Heatmap of a confusion matrix with the counts written in the cells; returns the axes."""
    import matplotlib.pyplot as plt

    if cm.dim() != 2 or cm.size(0) != cm.size(1) or cm.size(0) != len(labels):
        raise ValueError(f"a square confusion matrix with {len(labels)} classes expected, got {tuple(cm.shape)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(3.4, 3.0))
    ax.imshow(cm.numpy(), cmap="Blues", vmin=0)
    n = len(labels)
    ax.set_xticks(range(n), list(labels))
    ax.set_yticks(range(n), list(labels))
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    hi = cm.max().item()
    for i in range(n):
        for j in range(n):
            v = int(cm[i, j])
            ax.text(j, i, str(v), ha="center", va="center", color="white" if v > 0.6 * hi else "black")
    if title:
        ax.set_title(title)
    return ax


# --------------------------------------------------------------------------------------------
# The baseline: logistic regression on a bag of words


def words(text: str) -> list[str]:
    """Lower-cased words, keeping contractions whole (``"didn't"`` is one word)."""
    return re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower())


@dataclass
class BagOfWordsClassifier:
    """Logistic regression on word counts: ``P(positive) = sigmoid(counts . weight + bias)``.

    Word order is thrown away: "not good, bad" and "not bad, good" have the same features.
    Words never seen in training are ignored.
    """

    vocab: dict[str, int]
    weight: torch.Tensor  # (len(vocab),)
    bias: torch.Tensor  # ()

    def features(self, texts: Sequence[str]) -> torch.Tensor:
        """``(len(texts), len(vocab))`` matrix of word counts."""
        x = torch.zeros(len(texts), len(self.vocab))
        for i, t in enumerate(texts):
            for w in words(t):
                j = self.vocab.get(w)
                if j is not None:
                    x[i, j] += 1.0
        return x

    def predict_proba(self, texts: Sequence[str]) -> torch.Tensor:
        """``(len(texts), 2)`` probabilities of (negative, positive)."""
        p = torch.sigmoid(self.features(texts) @ self.weight + self.bias)
        return torch.stack([1 - p, p], dim=1)

    def predict(self, texts: Sequence[str]) -> torch.Tensor:
        return self.predict_proba(texts).argmax(dim=1)

    def top_words(self, k: int = 8) -> tuple[list[str], list[str]]:
        """The ``k`` words that push hardest towards positive, and towards negative."""
        inv = {j: w for w, j in self.vocab.items()}
        order = torch.argsort(self.weight, descending=True).tolist()
        return [inv[j] for j in order[:k]], [inv[j] for j in order[::-1][:k]]


def fit_bag_of_words(
    texts: Sequence[str],
    labels: Sequence[int],
    weight_decay: float = 1e-3,
    steps: int = 500,
    lr: float = 0.1,
    min_count: int = 1,
) -> BagOfWordsClassifier:
    """Fit a ``BagOfWordsClassifier`` by full-batch gradient descent (Adam) on the logistic loss.

    The vocabulary is every word seen at least ``min_count`` times in ``texts``; ``weight_decay``
    is the L2 penalty on the weights.  Starting from zeros with full batches makes the fit
    deterministic.
    """
    if len(texts) != len(labels) or not texts:
        raise ValueError(f"need as many labels as texts (and at least one), got {len(texts)} and {len(labels)}")
    counts = Counter(w for t in texts for w in set(words(t)))
    vocab = {w: j for j, w in enumerate(sorted(w for w, c in counts.items() if c >= min_count))}
    clf = BagOfWordsClassifier(vocab, torch.zeros(len(vocab)), torch.zeros(()))
    x = clf.features(texts)
    y = torch.tensor(list(labels), dtype=torch.float32)
    w = nn.Parameter(torch.zeros(len(vocab)))
    b = nn.Parameter(torch.zeros(()))
    opt = torch.optim.Adam([w, b], lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(x @ w + b, y) + weight_decay * (w**2).sum()
        loss.backward()
        opt.step()
    return BagOfWordsClassifier(vocab, w.detach().clone(), b.detach().clone())


# --------------------------------------------------------------------------------------------
# Fine-tuning a pretrained encoder


def _batch(tokenizer: Any, texts: Sequence[str], max_length: int, device: torch.device) -> dict[str, torch.Tensor]:
    enc = tokenizer(list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    return {k: v.to(device) for k, v in enc.items()}


def fine_tune(
    model: nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    labels: Sequence[int],
    epochs: int = 3,
    batch_size: int = 16,
    lr: float = 1e-4,
    weight_decay: float = 0.01,
    warmup_fraction: float = 0.1,
    max_length: int = 64,
    generator: torch.Generator | None = None,
) -> list[float]:
    """Train a Hugging Face sequence classifier on ``(texts, labels)``; returns the loss of every step.

    AdamW with a learning rate that rises linearly over the first ``warmup_fraction`` of the
    steps and then falls linearly to 0 (the schedule BERT was fine-tuned with).  Each epoch
    visits the examples in a new order drawn from ``generator``; each batch is padded to its
    own longest review.  The model is left in eval mode.
    """
    if len(texts) != len(labels) or not texts:
        raise ValueError(f"need as many labels as texts (and at least one), got {len(texts)} and {len(labels)}")
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be positive, got {epochs} and {batch_size}")
    device = next(model.parameters()).device
    y_all = torch.tensor(list(labels), dtype=torch.long)
    steps_per_epoch = -(-len(texts) // batch_size)
    total = epochs * steps_per_epoch
    warmup = max(1, int(warmup_fraction * total))
    trainable = [p for p in model.parameters() if p.requires_grad]  # frozen parameters stay as they are
    if not trainable:
        raise ValueError("the model has no trainable parameters (all have requires_grad=False)")
    decay = [p for p in trainable if p.dim() >= 2]  # matrices; biases and LayerNorm weights are not decayed
    no_decay = [p for p in trainable if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=lr
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (total - s) / max(1, total - warmup))
    )
    losses: list[float] = []
    model.train()
    bar = progress(total=total, desc="fine-tuning")
    for _ in range(epochs):
        order = torch.randperm(len(texts), generator=generator).tolist()
        for i in range(0, len(order), batch_size):
            idx = order[i : i + batch_size]
            batch = _batch(tokenizer, [texts[j] for j in idx], max_length, device)
            out = model(**batch, labels=y_all[idx].to(device))
            opt.zero_grad()
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(trainable, 1.0)
            opt.step()
            sched.step()
            losses.append(out.loss.item())
            bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)  # shown at the bar's next redraw
            bar.update(1)  # redraws at most once a second (mininterval)
    bar.close()
    model.eval()
    return losses


@torch.no_grad()
def predict_proba(
    model: nn.Module, tokenizer: Any, texts: Sequence[str], batch_size: int = 64, max_length: int = 64
) -> torch.Tensor:
    """``(len(texts), num_labels)`` class probabilities from a sequence classifier (eval mode)."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings; use classify_sentiment for one text")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    probs = [
        torch.softmax(model(**_batch(tokenizer, texts[i : i + batch_size], max_length, device)).logits, dim=-1).cpu()
        for i in range(0, len(texts), batch_size)
    ]
    model.train(was_training)
    return torch.cat(probs)


def classify_sentiment(text: str, model: nn.Module, tokenizer: Any) -> tuple[str, float]:
    """``(label, probability)`` of one text, e.g. ``("positive", 0.97)``."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    p = predict_proba(model, tokenizer, [text])[0]
    k = int(p.argmax())
    return LABELS[k], float(p[k])
