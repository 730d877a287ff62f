"""Reproducibility and device helpers used by every chapter."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import logging.handlers
import os
import platform
import random
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch

DEFAULT_NUM_THREADS = 2


def set_seed(
    seed: int = 0, num_threads: int | None = DEFAULT_NUM_THREADS
) -> torch.Generator:
    """Seed Python, NumPy and PyTorch, and fix PyTorch's CPU thread count.

    Floating-point sums can come out differently when they are split over a
    different number of threads, so a fixed thread count is part of getting the
    same printed numbers run after run.  Pass ``num_threads=None`` to leave the
    thread count alone.

    Returns a ``torch.Generator`` seeded with ``seed`` for code that wants its
    own stream of random numbers (``DataLoader(generator=...)``,
    ``torch.randn(generator=...)``).
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    if num_threads is not None:
        if num_threads < 1:
            raise ValueError(
                f"num_threads must be at least 1, got {num_threads}"
            )
        torch.set_num_threads(num_threads)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    return torch.Generator().manual_seed(seed)


class ModelConfig:
    """What the three model configs share (``transformer.TransformerConfig``,
    ``gpt.GPTConfig``, ``bert.BertConfig``): each is a frozen dataclass of
    sizes, checked when it is made, that round-trips through a plain dict (for
    checkpoints and JSON)."""

    def check_sizes(
        self, *names: str, heads: str, width: str = "d_model"
    ) -> None:
        """Positive ``names``; ``width`` divisible by the number of heads;
        dropout in [0, 1)."""
        cls = type(self).__name__
        for name in names:
            value = getattr(self, name)
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or value <= 0
            ):
                raise ValueError(
                    f"{cls}.{name} must be a positive int, got {value!r}"
                )
        if getattr(self, width) % getattr(self, heads):
            raise ValueError(
                f"{cls}: {width}={getattr(self, width)} is not divisible by "
                f"{heads}={getattr(self, heads)}: "
                f"each head needs {width} / {heads} features"
            )
        dropout = getattr(self, "dropout", 0.0)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"{cls}.dropout must be in [0, 1), got {dropout}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, d: dict):  # -> the subclass
        """Build a config from a dict, ignoring keys that are not config
        fields."""
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in d.items() if k in names})


#: model_type -> (the converter, what it reads, where another kind goes)
_HF_CONVERTERS = {
    "gpt2": (
        "hf_gpt2.from_hf",
        "a GPT-2 (GPT2LMHeadModel)",
        "a BERT goes into the course's encoder with hf_bert.bert_from_hf",
    ),
    "llama": (
        "llama.from_hf_llama",
        "a LlamaForCausalLM",
        "a GPT-2 goes into the course's GPT with hf_gpt2.from_hf",
    ),
}


def check_hf_model(hf_model, model_type: str) -> None:
    """Check that ``hf_model`` is a Hugging Face language model (with its
    output head) of ``model_type``, ``"gpt2"`` or ``"llama"``, before the
    course's converter for that type reads it."""
    reader, wanted, hint = _HF_CONVERTERS[model_type]
    config = getattr(hf_model, "config", None)
    got = getattr(config, "model_type", None)
    if got != model_type or not hasattr(hf_model, "lm_head"):
        raise TypeError(
            f"{reader} reads {wanted}, got a {type(hf_model).__name__} of "
            f"model_type {got!r}; {hint}"
        )


def check_all_used(leftover: Iterable[str]) -> None:
    """Raise if a converter left weights unplaced: ``leftover`` are their
    names."""
    names = sorted(leftover)
    if names:
        raise KeyError(
            f"weights with no place in the course's model: {names[:5]}; "
            "the checkpoint has parts this model does not compute"
        )


def check_tied(head: torch.Tensor | None, embedding: torch.Tensor) -> None:
    """Raise if a checkpoint's output head differs from its token embedding
    (``head`` is ``None`` when the checkpoint stores it once)."""
    if head is not None and not torch.equal(head, embedding):
        raise ValueError(
            "lm_head.weight differs from the token embedding, but the "
            "config says they are tied; the course's model has one matrix"
        )


class _Weights(dict):
    """A model's weights by name, whose ``pop`` of a missing name says what
    is missing and what to pass instead."""

    def __init__(self, weights: dict, source: str) -> None:
        super().__init__(weights)
        self.source = source

    def pop(self, name, *default):
        if name not in self and not default:
            raise KeyError(
                f"{name} is missing from the {self.source}'s weights: pass "
                f"the whole {self.source}, loaded with all its weights"
            )
        return super().pop(name, *default)


def hf_weights(hf_model) -> dict[str, torch.Tensor]:
    """``hf_model``'s weights by name, detached, for a converter to ``pop``
    one by one (popping a missing one names it)."""
    weights = {k: v.detach() for k, v in hf_model.state_dict().items()}
    return _Weights(weights, type(hf_model).__name__)


def check_token_ids(
    ids: torch.Tensor, vocab_size: int, name: str = "tokens"
) -> torch.Tensor:
    """Check that ``ids`` is a ``(batch, length)`` tensor of integer ids in
    ``0..vocab_size - 1``.

    Every model of the package calls this before its embedding lookup, so a
    wrong input is reported in words instead of PyTorch's
    ``IndexError: index out of range in self``.  Returns ``ids`` unchanged.
    """
    if not isinstance(ids, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor of token ids, got "
            f"{type(ids).__name__}; wrap a list as torch.tensor([ids])"
        )
    if ids.dim() != 2:
        raise ValueError(
            f"{name} must have shape (batch, length), got {tuple(ids.shape)}; "
            "add a batch dimension with ids.unsqueeze(0)"
        )
    if ids.dtype not in (
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
    ):
        raise TypeError(
            f"{name} must hold integer token ids, got dtype {ids.dtype}; "
            "convert with ids.long() (ids, not embeddings or probabilities)"
        )
    if ids.numel():
        low, high = (int(v) for v in torch.aminmax(ids))
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(
                f"{name} holds id {bad}, outside the vocabulary "
                f"0..{vocab_size - 1}; encode the text with the model's own "
                "tokenizer, or build the model with a larger vocab_size"
            )
    return ids


def get_device(prefer: str | None = None) -> torch.device:
    """The device to train on: ``prefer`` if given, else CUDA, then Apple's
    MPS, then the CPU.

    The environment variable ``TRANSFORMER_COURSE_DEVICE`` (e.g. ``cpu``)
    overrides the automatic choice, which is how CI keeps every run on the CPU.
    """
    choice = prefer or os.environ.get("TRANSFORMER_COURSE_DEVICE")
    if choice:
        device = torch.device(choice)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(
                f"device {choice!r} was asked for, "
                "but CUDA is not available here"
            )
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if (
        getattr(torch.backends, "mps", None) is not None
        and torch.backends.mps.is_available()
    ):
        return torch.device("mps")
    return torch.device("cpu")


def cpu_name() -> str:
    """The CPU's model name (from ``/proc/cpuinfo`` on Linux), else
    ``platform.processor()``, else the machine type."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def count_parameters(
    module: torch.nn.Module, trainable_only: bool = True
) -> int:
    """Number of (trainable) parameters in ``module``; shared tensors are
    counted once."""
    seen: set[int] = set()
    total = 0
    for p in module.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def print_wrapped(text: str, width: int = 78) -> None:
    """Print ``text`` with every line longer than ``width`` broken at spaces,
    each continuation indented like the line it continues (for generated
    text, whose lines can be of any length)."""
    if not isinstance(text, str):
        raise TypeError(
            f"print_wrapped prints a str, got {type(text).__name__}; decode "
            "token ids first (tokenizer.decode(ids))"
        )
    if width < 1:
        raise ValueError(f"width must be at least 1, got {width}")
    for line in text.split("\n"):
        indent = line[: len(line) - len(line.lstrip())]
        parts = textwrap.wrap(
            line, width, subsequent_indent=indent, break_on_hyphens=False
        )
        print("\n".join(parts))


class Table:
    """Rows of results that a notebook shows as an HTML table (its cells wrap
    on a narrow screen) and a console prints as aligned text.

    ``columns`` names the columns; each row has one value per column. A
    number is right-aligned and written with ``formats[column]`` (a format
    spec such as ``".1%"``) where one is given, else with ``str``. Show one
    with ``display(table)``, or as the last line of a cell.
    """

    def __init__(
        self,
        columns: Sequence[str],
        rows: Iterable[Sequence[object]],
        *,
        formats: dict[str, str] | None = None,
        caption: str | None = None,
    ) -> None:
        self.columns = [str(c) for c in columns]
        if not self.columns:
            raise ValueError("a Table needs at least one column name")
        self.rows = [list(row) for row in rows]
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(
                    f"row {i} has {len(row)} values for {len(self.columns)} "
                    f"columns {self.columns}; give one value per column"
                )
        self.formats = dict(formats or {})
        unknown = sorted(set(self.formats) - set(self.columns))
        if unknown:
            raise ValueError(
                f"formats names {unknown}, which are not columns; the columns "
                f"are {self.columns}"
            )
        self.caption = caption

    @staticmethod
    def _is_number(value: object) -> bool:
        return isinstance(value, (int, float, np.number)) and not isinstance(
            value, bool
        )

    def _cell(self, column: str, value: object) -> str:
        spec = self.formats.get(column)
        if spec is not None and self._is_number(value):
            return format(value, spec)
        return str(value)

    def _text_rows(self) -> list[list[str]]:
        return [
            [self._cell(c, v) for c, v in zip(self.columns, row)]
            for row in self.rows
        ]

    def _right(self) -> list[bool]:
        """A column is right-aligned when every value in it is a number."""
        return [
            bool(self.rows)
            and all(self._is_number(row[j]) for row in self.rows)
            for j in range(len(self.columns))
        ]

    def __repr__(self) -> str:
        cells = [self.columns, *self._text_rows()]
        widths = [
            max(len(r[j]) for r in cells) for j in range(len(self.columns))
        ]
        right = self._right()
        lines = [self.caption] if self.caption else []
        for r in cells:
            parts = [
                v.rjust(w) if rj else v.ljust(w)
                for v, w, rj in zip(r, widths, right)
            ]
            lines.append("  ".join(parts).rstrip())
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from html import escape

        right = self._right()

        def cell(tag: str, value: str, rj: bool) -> str:
            style = "text-align:right" if rj else "text-align:left"
            return f'<{tag} style="{style}">{escape(value)}</{tag}>'

        head = "".join(cell("th", c, rj) for c, rj in zip(self.columns, right))
        body = "".join(
            "<tr>"
            + "".join(cell("td", v, rj) for v, rj in zip(r, right))
            + "</tr>"
            for r in self._text_rows()
        )
        caption = (
            f"<caption>{escape(self.caption)}</caption>"
            if self.caption
            else ""
        )
        return (
            f'<table class="course-table">{caption}'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        )


def show_source(obj: object, checks: bool = True):  # -> IPython.display.Code
    """Display the source code of a package function or class in a notebook.

    Chapters use this to show the implementation that lives in the package, so
    the page and the package never hold two copies of the same code.  With
    ``checks=False`` the checks (an ``if`` whose only job is to ``raise``,
    an ``assert``) are left out of the listing, and a comment says so.
    Cross-references written for Sphinx (a role such as ``:func:`` before a
    name in backticks) read as plain code names.
    """
    import inspect

    from IPython.display import Code

    source = inspect.getsource(obj)  # type: ignore[arg-type]
    if not checks:
        source = _without_argument_checks(source)
    return Code(_plain_cross_references(source), language="python")


def _plain_cross_references(source: str) -> str:
    """Sphinx roles as plain code names: ":func:`~a.b.fit`" becomes "``fit``"
    (``~`` keeps the last part of the name), ":class:`History`" "``History``".
    """
    import re

    role = re.compile(
        r":(?:func|class|meth|mod|attr|data|obj|exc):`(~?)([\w.]+)`"
    )
    return role.sub(
        lambda m: "``" + (m[2].rsplit(".", 1)[-1] if m[1] else m[2]) + "``",
        source,
    )


def _without_argument_checks(source: str) -> str:
    """``source`` less every ``if`` block that only raises (see
    :func:`show_source`); the first one removed leaves a comment behind."""
    import ast
    import textwrap

    def only_raises(node: ast.AST) -> bool:  # an if (or a loop of them)
        if isinstance(node, (ast.Raise, ast.Assert)):
            return True
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            name = getattr(node.value.func, "id", "")  # a check...() helper
            return name.lstrip("_").startswith("check")
        return (
            isinstance(node, (ast.If, ast.For))
            and all(only_raises(n) for n in node.body)
            and all(only_raises(n) for n in node.orelse)
        )

    tree = ast.parse(textwrap.dedent(source))
    spans = [
        (node.lineno, node.end_lineno or node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, (ast.If, ast.For, ast.Assert))
        and only_raises(node)
    ]
    lines = source.splitlines(keepends=True)
    drop: set[int] = set()
    for start, end in spans:
        drop.update(range(start - 1, end))
    if not drop:
        return source
    first = min(drop)
    indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
    kept = []
    for i, line in enumerate(lines):
        if i == first:
            kept.append(f"{indent}# (checks left out)\n")
        if i not in drop:
            kept.append(line)
    return "".join(kept)


@contextlib.contextmanager
def captured_logs(name: str, level: int = logging.WARNING):
    """Collect what the logger ``name`` logs at ``level`` or above inside a
    ``with`` block, instead of printing it.

    ``with captured_logs(name) as records`` gives the list of
    ``logging.LogRecord``s; ``record.getMessage()`` is the text."""
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"captured_logs needs a logger name such as "
            f"'transformers.generation.utils', got {name!r}"
        )
    handler = logging.handlers.BufferingHandler(capacity=10_000)
    logger = logging.getLogger(name)
    old_level, old_propagate = logger.level, logger.propagate
    logger.setLevel(level)
    logger.propagate = False  # only to our list
    logger.addHandler(handler)
    try:
        yield handler.buffer
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        logger.propagate = old_propagate


def progress(iterable=None, **kwargs):  # -> tqdm
    """A progress bar: a widget in Jupyter/Colab where ipywidgets is there,
    text elsewhere.

    The text bar writes to stdout (tqdm's default is stderr, which a notebook
    page shows like an error): a finished training cell shows its last bar as
    ordinary output.  While it runs, the bar shows its speed and the time
    left; once finished, the text bar is redrawn without them (the count and
    the last postfix, e.g. the loss, stay).
    """
    import sys
    import warnings

    from tqdm import TqdmExperimentalWarning, TqdmWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)
        warnings.simplefilter("ignore", TqdmExperimentalWarning)
        from tqdm.auto import tqdm

        kwargs.setdefault("mininterval", 1.0)
        kwargs.setdefault("file", sys.stdout)
        bar = tqdm(iterable, **kwargs)
    if not hasattr(bar, "container"):  # a text bar, not a notebook widget
        close = bar.close

        def close_without_timing() -> None:
            if not bar.disable and bar.n:
                bar.bar_format = "{l_bar}{bar}| {n_fmt}/{total_fmt}{postfix}"
                bar.refresh()
            close()

        bar.close = close_without_timing  # type: ignore[method-assign]
    return bar
