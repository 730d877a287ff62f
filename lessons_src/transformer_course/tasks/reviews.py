"""Sentiment classification of short reviews (chapters 13 and 14).

* ``load_sentiment_reviews()``: the course's own data set, 1,050 short English
  reviews written for the course (``data/sentiment_reviews.csv``), half
  positive and half negative, with a fixed train/test split (850/200, both
  balanced) stored in the file itself, so every run and every reader uses the
  same split.  Reviews about the same subject (the two reviews of a kettle,
  say, found by the distinctive words they share) were kept on the same side of
  the split where the split could keep them apart (a few subjects, such as
  movers and museums, have reviews on both sides), so that the test set mostly
  asks about subjects the model has not been trained on.
* ``train_dev_split``: a seeded, balanced development split carved from the
  training reviews, on which every choice is made (the test set is used once,
  at the end); ``mean_std`` summarises accuracies over seeds.
* ``words``: the lower-cased words of a review, as the bag-of-words baseline
  counts them (chapter 13 fits its baselines with scikit-learn).
* ``fine_tune``: training (on ``training.fit``) for a Hugging Face sequence
  classifier (``AutoModelForSequenceClassification``), with ``freeze_lower``
  to freeze its bottom; ``predict_proba`` and ``classify_sentiment`` use the
  result (without autograd, under ``torch.inference_mode()``).
* ``fresh_classifier`` (a pretrained encoder with a new, random head),
  ``lora_classifier`` (the same with LoRA adapters, through ``peft``) and
  ``train_classifier`` (either one, trained with the recipe chapter 13 chose on
  its dev split: ``EPOCHS``, ``BATCH_SIZE``, ``FULL_FINE_TUNING``, ``LORA``).
* ``confusion_matrix`` and ``plot_confusion_matrix`` (with
  ``training.accuracy``) to report it honestly.

Label ids follow the order of ``LABELS``: 0 = negative, 1 = positive.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..training import (
    History,
    accuracy,
    class_ids,
    fit,
    param_groups,
    warmup_decay,
)

LABELS = ("negative", "positive")
SPLITS = ("train", "test")

# The fine-tuning recipe of chapter 13: the schedule fixed in advance, and the
# settings chosen on seed 0's dev split (chapter 13 checks that its choice is
# still this one; chapter 14 trains it on every seed).
EPOCHS, BATCH_SIZE = 2, 16
# full fine-tuning: every layer trained, the embeddings frozen
FULL_FINE_TUNING: dict[str, Any] = {"frozen_layers": 0, "lr": 1e-4}
# LoRA on the attention's query and value matrices
LORA: dict[str, Any] = {"r": 8, "alpha": 16, "lr": 3e-3}


@dataclass(frozen=True)
class ReviewSplit:
    """One split of the data set: ``texts[i]`` has label id ``labels[i]``
    (0 negative, 1 positive).
    """

    texts: list[str]
    labels: list[int]

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.labels):
            raise ValueError(
                f"{len(self.texts)} texts but {len(self.labels)} labels"
            )

    def __len__(self) -> int:
        return len(self.texts)


def data_path() -> Path:
    """Where the CSV of the data set lives inside the installed package."""
    return Path(
        str(
            resources.files("transformer_course")
            / "data"
            / "sentiment_reviews.csv"
        )
    )


def load_sentiment_reviews(
    path: str | Path | None = None,
) -> tuple[ReviewSplit, ReviewSplit]:
    """``(train, test)`` of the course's review data set.

    The CSV has the columns ``text``, ``label`` (``negative`` / ``positive``)
    and ``split`` (``train`` / ``test``); the split is part of the file, not
    drawn at load time.
    """
    path = Path(path) if path is not None else data_path()
    texts: dict[str, list[str]] = {s: [] for s in SPLITS}
    labels: dict[str, list[int]] = {s: [] for s in SPLITS}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or not (
            {"text", "label", "split"} <= set(reader.fieldnames)
        ):
            raise ValueError(
                f"{path.name} must have the columns text, label, split; "
                f"got {reader.fieldnames}"
            )
        for line, row in enumerate(reader, start=2):
            if row["label"] not in LABELS:
                raise ValueError(
                    f"{path.name}, line {line}: label must be one of "
                    f"{LABELS}, got {row['label']!r}"
                )
            if row["split"] not in SPLITS:
                raise ValueError(
                    f"{path.name}, line {line}: split must be one of "
                    f"{SPLITS}, got {row['split']!r}"
                )
            if not row["text"].strip():
                raise ValueError(f"{path.name}, line {line}: empty text")
            texts[row["split"]].append(row["text"])
            labels[row["split"]].append(LABELS.index(row["label"]))
    return (
        ReviewSplit(texts["train"], labels["train"]),
        ReviewSplit(texts["test"], labels["test"]),
    )


# -----------------------------------------------------------------------------
# Metrics


def confusion_matrix(
    predictions: torch.Tensor | Sequence[int],
    labels: torch.Tensor | Sequence[int],
    num_classes: int = 2,
) -> torch.Tensor:
    """``cm[i, j]`` = number of examples of true class ``i`` predicted as class
    ``j`` (arguments in the order of
    :func:`~transformer_course.training.accuracy`)."""
    p, y = class_ids(predictions), class_ids(labels)
    if p.shape != y.shape or p.dim() != 1:
        raise ValueError(
            f"predictions {tuple(p.shape)} and labels {tuple(y.shape)} "
            "must be equal 1-D shapes"
        )
    if len(y) and (
        min(y.min(), p.min()) < 0 or max(y.max(), p.max()) >= num_classes
    ):
        raise ValueError(f"class ids must lie in 0..{num_classes - 1}")
    return torch.bincount(y * num_classes + p, minlength=num_classes**2).view(
        num_classes, num_classes
    )


def plot_confusion_matrix(
    cm: torch.Tensor,
    labels: Sequence[str] = LABELS,
    ax: Any = None,
    title: str | None = None,
    vmax: float | None = None,
):
    """Heatmap of a confusion matrix with the counts written in the cells;
    returns the axes. ``vmax``: the count shown darkest (default: the
    largest in ``cm``); give several matrices the same one to compare them.
    """
    import matplotlib.pyplot as plt

    if cm.dim() != 2 or cm.size(0) != cm.size(1) or cm.size(0) != len(labels):
        raise ValueError(
            f"a square confusion matrix with {len(labels)} classes "
            f"expected, got {tuple(cm.shape)}"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(3.4, 3.0))
    hi = cm.max().item() if vmax is None else vmax
    ax.imshow(cm.numpy(), cmap="Blues", vmin=0, vmax=hi)
    n = len(labels)
    ax.set_xticks(range(n), list(labels))
    ax.set_yticks(range(n), list(labels))
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for i in range(n):
        for j in range(n):
            v = int(cm[i, j])
            ax.text(
                j,
                i,
                str(v),
                ha="center",
                va="center",
                color="white" if v > 0.6 * hi else "black",
            )
    if title:
        ax.set_title(title)
    return ax


# -----------------------------------------------------------------------------
# Words, for the bag-of-words baseline (fitted with scikit-learn in chapter 13)


def words(text: str) -> list[str]:
    """Lower-cased words, keeping contractions whole (``"didn't"`` is one
    word).
    """
    return re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower())


def train_dev_split(
    data: ReviewSplit, n_dev: int, seed: int = 0
) -> tuple[ReviewSplit, ReviewSplit]:
    """Carve a balanced development split of ``n_dev`` reviews out of ``data``
    (seeded).

    ``n_dev / 2`` reviews of each label go to the dev split; the rest, in their
    original order, stay for training.  Model choices are made on the dev
    split, so the test set is used only once.
    """
    if n_dev <= 0 or n_dev % 2 or n_dev >= len(data):
        raise ValueError(
            "n_dev must be even, positive and smaller than the "
            f"{len(data)} reviews, got {n_dev}"
        )
    g = torch.Generator().manual_seed(seed)
    dev = set()
    for label in (0, 1):
        idx = [i for i, y in enumerate(data.labels) if y == label]
        if len(idx) < n_dev // 2:
            raise ValueError(
                f"only {len(idx)} reviews with label {label}, "
                f"need {n_dev // 2}"
            )
        perm = torch.randperm(len(idx), generator=g).tolist()
        dev |= {idx[j] for j in perm[: n_dev // 2]}
    pick = lambda keep: ReviewSplit(  # noqa: E731
        [t for i, t in enumerate(data.texts) if (i in dev) == keep],
        [y for i, y in enumerate(data.labels) if (i in dev) == keep],
    )
    return pick(False), pick(True)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``n - 1``) of a few numbers, e.g.
    accuracies over seeds.
    """
    t = torch.tensor(list(values), dtype=torch.float64)
    if t.numel() < 2:
        raise ValueError("need at least two values for a standard deviation")
    return t.mean().item(), t.std().item()


# -----------------------------------------------------------------------------
# Fine-tuning a pretrained encoder


def _batch(
    tokenizer: Any, texts: Sequence[str], max_length: int, device: torch.device
) -> dict[str, torch.Tensor]:
    enc = tokenizer(
        list(texts),
        padding=True,
        truncation=True,
        max_length=max_length,
        return_tensors="pt",
    )
    return {k: v.to(device) for k, v in enc.items()}


def freeze_lower(model: Any, num_layers: int) -> nn.Module:
    """Freeze a Hugging Face BERT classifier's embeddings and its lowest
    ``num_layers`` layers.

    ``num_layers=0`` freezes only the embeddings.  Frozen parameters get
    ``requires_grad=False``: no gradient is computed for them (backpropagation
    stops above them) and the optimiser skips them.
    """
    layers = model.bert.encoder.layer
    if not 0 <= num_layers <= len(layers):
        raise ValueError(
            f"num_layers must be between 0 and {len(layers)}, got {num_layers}"
        )
    model.bert.embeddings.requires_grad_(False)
    for layer in layers[:num_layers]:
        layer.requires_grad_(False)
    return model


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
    dev: ReviewSplit | None = None,
    show_progress: bool = True,
) -> History:
    """Train a Hugging Face sequence classifier on ``(texts, labels)``; returns
    a :class:`~transformer_course.training.History`: the loss of every step
    and, if a ``dev`` split is given, the accuracy on it after every epoch
    (``"dev_accuracy"``: training watched on data that is not the test set).

    AdamW with a learning rate that rises linearly over the first
    ``warmup_fraction`` of the steps and then falls linearly to 0 (the schedule
    BERT was fine-tuned with).  Each epoch visits the examples in a new order
    drawn from ``generator``; each batch is padded to its own longest review.
    The model is left in eval mode; ``show_progress=False`` hides the
    progress bar.
    """
    if len(texts) != len(labels) or not texts:
        raise ValueError(
            "need as many labels as texts (and at least one), "
            f"got {len(texts)} and {len(labels)}"
        )
    if epochs < 1 or batch_size < 1:
        raise ValueError(
            "epochs and batch_size must be positive, "
            f"got {epochs} and {batch_size}"
        )
    device = next(model.parameters()).device
    y_all = torch.tensor(list(labels), dtype=torch.long)
    steps_per_epoch = -(-len(texts) // batch_size)
    total = epochs * steps_per_epoch
    warmup = max(1, int(warmup_fraction * total))
    # frozen parameters stay as they are
    opt = torch.optim.AdamW(param_groups(model, weight_decay), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: warmup_decay(s, warmup, total, 0.0, decay="linear")
    )
    order: list[int] = []

    def step_loss(step: int) -> torch.Tensor:
        nonlocal order
        i = step % steps_per_epoch * batch_size
        if i == 0:  # a new epoch, a new order
            order = torch.randperm(len(texts), generator=generator).tolist()
        idx = order[i : i + batch_size]
        batch = _batch(tokenizer, [texts[j] for j in idx], max_length, device)
        return model(**batch, labels=y_all[idx].to(device)).loss

    evaluate = None
    if dev is not None:
        evaluate = lambda: {  # noqa: E731
            "dev_accuracy": accuracy(
                predict_proba(model, tokenizer, dev.texts).argmax(dim=1),
                dev.labels,
            )
        }
    return fit(
        model,
        step_loss,
        total,
        opt,
        sched,
        clip_norm=1.0,
        evaluate=evaluate,
        eval_every=steps_per_epoch,
        desc="fine-tuning",
        show_progress=show_progress,
    )


@torch.inference_mode()
def predict_proba(
    model: nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    batch_size: int = 64,
    max_length: int = 64,
) -> torch.Tensor:
    """``(len(texts), num_labels)`` class probabilities from a sequence
    classifier (eval mode).
    """
    if isinstance(texts, str):
        raise TypeError(
            "texts must be a list of strings; "
            "use classify_sentiment for one text"
        )
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    probs = [
        torch.softmax(
            model(
                **_batch(
                    tokenizer, texts[i : i + batch_size], max_length, device
                )
            ).logits,
            dim=-1,
        ).cpu()
        for i in range(0, len(texts), batch_size)
    ]
    model.train(was_training)
    return torch.cat(probs)


def classify_sentiment(
    text: str, model: nn.Module, tokenizer: Any
) -> tuple[str, float]:
    """``(label, probability)`` of one text, e.g. ``("positive", 0.97)``."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    p = predict_proba(model, tokenizer, [text])[0]
    k = int(p.argmax())
    return LABELS[k], float(p[k])


# -----------------------------------------------------------------------------
# The classifiers of chapters 13 and 14


def fresh_classifier(
    seed: int, model: str | Path | None = None, **kwargs: Any
) -> nn.Module:
    """A pretrained BERT (``model``: a Hub name or a local folder; default
    all-MiniLM-L6-v2) with a new 2-way classification head, drawn at random
    with ``seed``: untrained until fine-tuned.  ``kwargs`` go to
    ``from_pretrained`` (e.g. ``output_loading_info=True``).
    """
    from transformers import AutoModelForSequenceClassification

    from ..pretrained import minilm_path
    from ..utils import set_seed

    set_seed(seed)
    return AutoModelForSequenceClassification.from_pretrained(
        minilm_path() if model is None else model,
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id={label: i for i, label in enumerate(LABELS)},
        **kwargs,
    )


def lora_classifier(
    seed: int,
    model: str | Path | None = None,
    r: int = LORA["r"],
    alpha: int = LORA["alpha"],
) -> nn.Module:
    """``fresh_classifier(seed, model)`` with rank-``r`` LoRA adapters (scale
    ``alpha / r``, dropout 0.1) on every attention's query and value; the
    pooler and the classifier are trained in full, everything else is frozen.
    """
    from peft import LoraConfig, get_peft_model

    if r < 1:
        raise ValueError(f"the rank r must be at least 1, got {r}")
    config = LoraConfig(
        task_type="SEQ_CLS",  # trains (and saves) the new classifier too
        r=r,
        lora_alpha=alpha,
        target_modules=["query", "value"],
        lora_dropout=0.1,
        modules_to_save=["pooler"],
    )
    return get_peft_model(fresh_classifier(seed, model), config)


def train_classifier(
    seed: int,
    tokenizer: Any,
    train: ReviewSplit,
    dev: ReviewSplit | None = None,
    *,
    lora: bool = False,
    lr: float | None = None,
    frozen_layers: int = FULL_FINE_TUNING["frozen_layers"],
    epochs: int = EPOCHS,
    model: str | Path | None = None,
    classifier: nn.Module | None = None,
    show_progress: bool = True,
) -> tuple[nn.Module, History]:
    """A fresh classifier (its head drawn with ``seed``), fine-tuned on
    ``train`` with ``fine_tune``; returns ``(model, history)``, the history
    with the accuracy on ``dev`` after every epoch if ``dev`` is given.

    ``lora=False``: every layer trained but the embeddings and the lowest
    ``frozen_layers`` layers; ``lora=True``: ``lora_classifier``.  ``lr``
    defaults to ``FULL_FINE_TUNING["lr"]`` or ``LORA["lr"]``.  The batch order
    and dropout are drawn from ``seed`` too, so one seed gives one model.

    ``classifier``: a model you prepared yourself (say, from
    ``fresh_classifier`` with other weights frozen or other adapters), trained
    as it is instead of a fresh one; the batch order is drawn from ``seed``,
    ``lr`` is required, and ``lora``, ``frozen_layers`` and ``model`` must be
    left at their defaults.
    """
    from ..utils import get_device, set_seed

    if not isinstance(train, ReviewSplit):
        raise TypeError(
            "train must be a ReviewSplit (e.g. from train_dev_split), "
            f"got {type(train).__name__}"
        )
    if classifier is not None:
        if lr is None:
            raise ValueError("pass lr= with your own classifier")
        if (
            lora
            or model is not None
            or frozen_layers != FULL_FINE_TUNING["frozen_layers"]
        ):
            raise ValueError(
                "lora, frozen_layers and model build a fresh classifier: "
                "leave them out when you pass classifier="
            )
        clf = classifier.to(get_device())
        generator = torch.Generator().manual_seed(seed)
    elif lora:
        clf = lora_classifier(seed, model).to(get_device())
        generator = set_seed(seed)
        lr = LORA["lr"] if lr is None else lr
    else:
        generator = set_seed(seed)
        clf = freeze_lower(fresh_classifier(seed, model), frozen_layers)
        clf = clf.to(get_device())
        lr = FULL_FINE_TUNING["lr"] if lr is None else lr
    history = fine_tune(
        clf,
        tokenizer,
        train.texts,
        train.labels,
        epochs=epochs,
        batch_size=BATCH_SIZE,
        lr=lr,
        generator=generator,
        dev=dev,
        show_progress=show_progress,
    )
    return clf, history
