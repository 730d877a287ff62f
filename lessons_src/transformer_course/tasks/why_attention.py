"""The two experiments of chapter 01 ("Why attention?"): their data and their
small models.

* **Remember the first token.**  :func:`first_token_data` makes sequences of
  random tokens whose label is the first token.  :class:`GRUClassifier` reads
  the sequence left to right and must carry the first token through every step;
  :class:`AttentionClassifier` is one self-attention layer whose last position
  can read position 0 directly.
* **One informative token.**  :func:`one_informative_token_data` makes
  "sentences" of ``k``-dim tokens where one token (``[1, ..., 1]`` or
  ``[-1, ..., -1]``) decides the label and the others are noise.
  :class:`LinearOnToken` classifies from one noise token alone;
  :class:`AttendThenLinear` lets that token attend over the sentence first.

:func:`train_classifier` and :func:`held_out_accuracy` train and evaluate any
of them with whole batches (the loop itself is
:func:`transformer_course.training.fit`).  Everything random takes a
``torch.Generator``, so the chapter prints the same numbers every run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import MultiHeadAttention, scaled_dot_product_attention
from ..training import History, accuracy, fit
from ..utils import check_token_ids

Batch = tuple[torch.Tensor, torch.Tensor]


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


# -----------------------------------------------------------------------------
# Experiment (a): remember the first token
# -----------------------------------------------------------------------------


def first_token_data(
    num_samples: int,
    seq_len: int,
    vocab_size: int = 8,
    generator: torch.Generator | None = None,
) -> Batch:
    """``num_samples`` sequences of ``seq_len`` random token ids in
    ``[0, vocab_size)``.

    Returns ``(tokens, labels)`` with ``tokens`` of shape
    ``(num_samples, seq_len)`` (int64) and ``labels = tokens[:, 0]``: the
    answer is always the *first* token of the sequence.
    """
    _check_positive(num_samples=num_samples, seq_len=seq_len)
    if not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(
            "vocab_size must be an int of at least 2 (else there is nothing "
            f"to predict), got {vocab_size!r}"
        )
    tokens = torch.randint(
        0, vocab_size, (num_samples, seq_len), generator=generator
    )
    return tokens, tokens[:, 0].clone()


def _check_tokens(
    tokens: torch.Tensor, vocab_size: int, max_len: int | None = None
) -> None:
    check_token_ids(tokens, vocab_size)
    if max_len is not None and tokens.size(1) > max_len:
        raise ValueError(
            f"sequence length {tokens.size(1)} exceeds max_len={max_len} "
            "of this model"
        )


class GRUClassifier(nn.Module):
    """Recurrent baseline: embed, run a GRU left to right, classify from the
    final hidden state.

    Whatever it knows about the first token at the end of the sequence must
    have been carried, step by step, through ``seq_len - 1`` updates of one
    ``hidden_size`` vector.
    """

    def __init__(
        self, vocab_size: int, d_model: int = 32, hidden_size: int = 64
    ) -> None:
        super().__init__()
        _check_positive(
            vocab_size=vocab_size, d_model=d_model, hidden_size=hidden_size
        )
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, d_model)
        self.gru = nn.GRU(d_model, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(batch, seq_len)`` token ids -> ``(batch, vocab_size)`` logits."""
        _check_tokens(tokens, self.vocab_size)
        _, h_last = self.gru(self.embed(tokens))  # h_last: (1, batch, hidden)
        return self.out(h_last[0])


class AttentionClassifier(nn.Module):
    """One self-attention layer: embed tokens and positions, attend, classify
    from the last position.

    The last position's query is compared with the key of every position, so it
    can read position 0 in a single step, however long the sequence.  Attention
    by itself ignores order; the learned position embedding is what tells
    position 0 apart (chapter 03), and ``use_positions=False`` leaves it out.
    The weights of the last call are kept in ``attn_weights``, shape
    ``(batch, seq_len, seq_len)`` (averaged over heads).
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        d_model: int = 32,
        num_heads: int = 1,
        use_positions: bool = True,
    ) -> None:
        super().__init__()
        _check_positive(
            vocab_size=vocab_size,
            max_len=max_len,
            d_model=d_model,
            num_heads=num_heads,
        )
        self.vocab_size = vocab_size
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model) if use_positions else None
        self.attn = MultiHeadAttention(d_model, num_heads)
        self.out = nn.Linear(d_model, vocab_size)
        self.attn_weights: torch.Tensor | None = None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``(batch, seq_len)`` token ids -> ``(batch, vocab_size)`` logits."""
        _check_tokens(tokens, self.vocab_size, self.max_len)
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos(
                torch.arange(tokens.size(1), device=tokens.device)
            )
        y, w = self.attn(x)  # w: (batch, heads, seq_len, seq_len)
        if w is not None:
            self.attn_weights = w.mean(dim=1).detach()  # average over heads
        return self.out(y[:, -1])


# -----------------------------------------------------------------------------
# Experiment (b): one informative token
# -----------------------------------------------------------------------------


def one_informative_token_data(
    num_samples: int,
    num_tokens: int = 4,
    dim: int = 4,
    informative: int | None = 0,
    generator: torch.Generator | None = None,
) -> Batch:
    """Sentences of ``num_tokens`` tokens, each a ``dim``-vector; one token
    decides the label.

    The informative token is ``[1, ..., 1]`` (label 1) or ``[-1, ..., -1]``
    (label 0), with equal probability; every other token is uniform noise in
    ``[-1, 1)^dim`` drawn independently of the label.  ``informative`` is its
    index (default 0, the first token); ``None`` puts it at a random index in
    each sentence.  Returns ``(x, labels)`` with ``x`` of shape
    ``(num_samples, num_tokens, dim)`` (float32) and ``labels`` of shape
    ``(num_samples,)`` (int64).
    """
    _check_positive(num_samples=num_samples, num_tokens=num_tokens, dim=dim)
    if informative is not None and not -num_tokens <= informative < num_tokens:
        raise ValueError(
            f"informative={informative} is not a token index of a "
            f"{num_tokens}-token sentence"
        )
    labels = torch.randint(0, 2, (num_samples,), generator=generator)
    x = torch.rand(num_samples, num_tokens, dim, generator=generator) * 2 - 1
    # +1 for label 1, -1 for label 0
    signal = (2.0 * labels - 1.0)[:, None].expand(num_samples, dim)
    if informative is None:
        where = torch.randint(
            0, num_tokens, (num_samples,), generator=generator
        )
    else:
        where = torch.full((num_samples,), informative % num_tokens)
    x[torch.arange(num_samples), where] = signal
    return x, labels


def _check_sentences(x: torch.Tensor, dim: int, index: int) -> None:
    if x.dim() != 3 or x.size(-1) != dim:
        raise ValueError(
            f"x must have shape (batch, num_tokens, dim={dim}), "
            f"got {tuple(x.shape)}"
        )
    if not -x.size(1) <= index < x.size(1):
        raise ValueError(
            f"token index {index} is out of range for sentences of "
            f"{x.size(1)} tokens"
        )


class LinearOnToken(nn.Module):
    """A linear classifier that sees one token of the sentence,
    ``x[:, index]``, and nothing else.
    """

    def __init__(self, dim: int, index: int = 1, num_classes: int = 2) -> None:
        super().__init__()
        _check_positive(dim=dim, num_classes=num_classes)
        self.dim = dim
        self.index = index
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, num_tokens, dim)`` -> ``(batch, num_classes)`` logits."""
        _check_sentences(x, self.dim, self.index)
        return self.fc(x[:, self.index])


class AttendThenLinear(nn.Module):
    """The same linear classifier, fed token ``index`` *after* one step of
    attention.

    The token's query ``q = W_q x_index + b_q`` is compared with a key
    ``k_j = W_k x_j`` of every token; the softmax of the scaled scores weights
    the tokens themselves (the values are the raw tokens), and the weighted sum
    replaces ``x_index``.  The weights of the last call are kept in
    ``attn_weights``, shape ``(batch, num_tokens)``.
    """

    def __init__(
        self, dim: int, index: int = 1, d_k: int = 4, num_classes: int = 2
    ) -> None:
        super().__init__()
        _check_positive(dim=dim, d_k=d_k, num_classes=num_classes)
        self.dim = dim
        self.index = index
        self.W_q = nn.Linear(dim, d_k)
        # a key bias would add the same amount to every score
        self.W_k = nn.Linear(dim, d_k, bias=False)
        self.fc = nn.Linear(dim, num_classes)
        self.attn_weights: torch.Tensor | None = None

    def attend(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The new token ``(batch, dim)`` and its attention weights
        ``(batch, num_tokens)``.
        """
        _check_sentences(x, self.dim, self.index)
        # (batch, 1, d_k): one query
        q = self.W_q(x[:, self.index]).unsqueeze(1)
        k = self.W_k(x)  # (batch, num_tokens, d_k)
        # (batch, 1, dim), (batch, 1, num_tokens)
        new, w = scaled_dot_product_attention(q, k, x)
        return new[:, 0], w[:, 0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, num_tokens, dim)`` -> ``(batch, num_classes)`` logits."""
        new, w = self.attend(x)
        self.attn_weights = w.detach()
        return self.fc(new)


# -----------------------------------------------------------------------------
# Training and evaluation, shared by both experiments
# -----------------------------------------------------------------------------


@torch.no_grad()
def held_out_accuracy(
    model: nn.Module, x: torch.Tensor, labels: torch.Tensor
) -> float:
    """:func:`training.accuracy` of ``model``'s predictions (argmax of its
    logits) on ``x``, in ``eval()`` mode.
    """
    if x.size(0) != labels.size(0):
        raise ValueError(f"{x.size(0)} inputs but {labels.size(0)} labels")
    model.eval()
    return accuracy(model(x).argmax(dim=-1), labels)


def train_classifier(
    model: nn.Module,
    make_batch: Callable[[int, torch.Generator], Batch],
    steps: int,
    batch_size: int = 64,
    lr: float = 1e-2,
    generator: torch.Generator | None = None,
    eval_data: Batch | None = None,
    eval_every: int = 0,
) -> History:
    """Train ``model`` with Adam and cross-entropy on fresh batches
    ``make_batch(batch_size, generator)``.

    Every step draws a new batch, so the model never sees the same examples
    twice and the held-out ``eval_data`` measures what it learned, not what it
    memorised.  With ``eval_data``, the
    :class:`~transformer_course.training.History` holds its accuracy
    (``"accuracy"``) after the last step and, with ``eval_every > 0``, before
    the first and every ``eval_every`` steps: ``history.curve("accuracy")`` is
    ``[(step, accuracy), ...]``.  The model is left in ``eval()`` mode.
    """
    _check_positive(steps=steps, batch_size=batch_size)
    if eval_every < 0:
        raise ValueError(f"eval_every must be >= 0, got {eval_every}")
    if eval_every and eval_data is None:
        raise ValueError("eval_every > 0 needs eval_data to evaluate on")
    generator = (
        generator
        if generator is not None
        else torch.Generator().manual_seed(0)
    )
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def step_loss(step: int) -> torch.Tensor:
        x, y = make_batch(batch_size, generator)
        return F.cross_entropy(model(x), y)

    evaluate = (
        None
        if eval_data is None
        else lambda: {"accuracy": held_out_accuracy(model, *eval_data)}
    )
    return fit(
        model,
        step_loss,
        steps,
        opt,
        clip_norm=None,
        evaluate=evaluate,
        eval_every=eval_every,
        eval_at_start=bool(eval_every),
        show_progress=False,
    )


def steps_to_reach(
    curve: list[tuple[int, float]], target: float = 0.95
) -> int | None:
    """The first step of a ``[(step, accuracy), ...]`` curve whose accuracy is
    ``>= target``, else ``None``.
    """
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target must be an accuracy in (0, 1], got {target}")
    return next((step for step, acc in curve if acc >= target), None)
