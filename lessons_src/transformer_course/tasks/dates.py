"""The task of chapter 09: date normalisation, a tiny translation problem.

Many surface forms of a date go in (``"3rd of March, 2021"``,
``"Wed, Mar 3, '21"``, ``"03.03.2021"``) and its ISO form comes out
(``"2021-03-03"``); it trains on a CPU in about a minute.

* the seeded data: :func:`render_date`, the :data:`FORMATS` it can use,
  :func:`make_splits` (train / validation / a fixed held-out test set whose
  *dates* never occur in training);
* the two character tokenisers (:func:`source_tokenizer`,
  :func:`target_tokenizer`);
* an out-of-distribution test: :data:`UNSEEN_FORMATS`, ways of writing a date
  that training never shows, and :func:`wrong_fields`, which says which fields
  of a prediction are wrong.

Training and decoding are the general ones of
:mod:`transformer_course.seq2seq`.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import string
from collections.abc import Callable
from dataclasses import dataclass

from ..tokenization import BOS, EOS, PAD, CharTokenizer

SPECIALS = (PAD, BOS, EOS)  # ids 0, 1, 2 of both tokenisers

# -----------------------------------------------------------------------------
# Data: dates in many surface forms
# -----------------------------------------------------------------------------

FIRST_DATE = dt.date(1950, 1, 1)
LAST_DATE = dt.date(2049, 12, 31)
"""The range of dates.  A two-digit year ``yy`` means 19yy for yy >= 50 and
20yy below, so within this range every two-digit year names exactly one
year."""

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS = (
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
)

Part = tuple[str | None, str]
"""One piece of a rendered date: ``(field, text)`` with field ``"day"``,
``"month"``, ``"year"`` or ``None`` for filler (separators, weekday names,
"of", "the")."""


def ordinal(n: int) -> str:
    """``1 -> "1st"``, ``2 -> "2nd"``, ``3 -> "3rd"``, ``11 -> "11th"``,
    ``22 -> "22nd"``.
    """
    if 11 <= n % 100 <= 13:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th') }"


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
    # numeric, the separator tells the order
    # (no "03/04/21" that could be either)
    "iso": lambda x: [_yyyy(x), _sep("-"), _mm(x), _sep("-"), _dd(x)],
    "compact": lambda x: [_yyyy(x), _mm(x), _dd(x)],
    "us_slash": lambda x: [_mm(x), _sep("/"), _dd(x), _sep("/"), _yyyy(x)],
    "us_slash_short": lambda x: [_m(x), _sep("/"), _d(x), _sep("/"), _yy(x)],
    "eu_dot": lambda x: [_dd(x), _sep("."), _mm(x), _sep("."), _yyyy(x)],
    "eu_dot_short": lambda x: [_d(x), _sep("."), _m(x), _sep("."), _yy(x)],
    # words
    "day_month_year": lambda x: [
        _d(x),
        _sep(" "),
        _month(x),
        _sep(" "),
        _yyyy(x),
    ],
    "day_mon_yy": lambda x: [_dd(x), _sep("-"), _mon(x), _sep("-"), _yy(x)],
    "month_day_year": lambda x: [
        _month(x),
        _sep(" "),
        _d(x),
        _sep(", "),
        _yyyy(x),
    ],
    "mon_day_year": lambda x: [_mon(x), _sep(" "), _d(x), _sep(" "), _yyyy(x)],
    "ordinal_of": lambda x: [
        ("day", ordinal(x.day)),
        _sep(" of "),
        _month(x),
        _sep(", "),
        _yyyy(x),
    ],
    "the_ordinal": lambda x: [
        _sep("the "),
        ("day", ordinal(x.day)),
        _sep(" of "),
        _month(x),
        _sep(" "),
        _yyyy(x),
    ],
    "month_ordinal": lambda x: [
        _month(x),
        _sep(" "),
        ("day", ordinal(x.day)),
        _sep(", "),
        _yyyy(x),
    ],
    "weekday_long": lambda x: [
        _sep(WEEKDAYS[x.weekday()] + ", "),
        _d(x),
        _sep(" "),
        _month(x),
        _sep(" "),
        _yyyy(x),
    ],
    "weekday_short": lambda x: [
        _sep(WEEKDAYS[x.weekday()][:3] + ", "),
        _mon(x),
        _sep(" "),
        _d(x),
        _sep(", '"),
        _yy(x),
    ],
}
"""Name -> function from a date to its parts.  Formats with words are also
written in lower or upper case now and then (see :func:`render_date`)."""

UNSEEN_FORMATS: dict[str, Callable[[dt.date], list[Part]]] = {
    # ways people write dates that never occur in training;
    # each is unambiguous to a reader
    # 2021/07/14
    "iso_slash": lambda x: [_yyyy(x), _sep("/"), _mm(x), _sep("/"), _dd(x)],
    # 14-Jul-2021
    "day_mon_yyyy": lambda x: [
        _dd(x),
        _sep("-"),
        _mon(x),
        _sep("-"),
        _yyyy(x),
    ],
    # Jul. 14, 2021
    "mon_dot_day_year": lambda x: [
        _mon(x),
        _sep(". "),
        _d(x),
        _sep(", "),
        _yyyy(x),
    ],
    # July 14 2021
    "month_day_year_no_comma": lambda x: [
        _month(x),
        _sep(" "),
        _d(x),
        _sep(" "),
        _yyyy(x),
    ],
    # 14 July '21
    "day_month_yy": lambda x: [
        _d(x),
        _sep(" "),
        _month(x),
        _sep(" '"),
        _yy(x),
    ],
    # 2021 July 14
    "year_month_day": lambda x: [
        _yyyy(x),
        _sep(" "),
        _month(x),
        _sep(" "),
        _d(x),
    ],
}
"""Formats for an out-of-distribution test: the same fields and alphabet as
:data:`FORMATS`, arranged in ways the training data never shows (render them
with ``formats=UNSEEN_FORMATS``)."""

SOURCE_ALPHABET = string.ascii_letters + string.digits + " ,.-/'"
"""Every character a rendered date can contain (the source vocabulary, without
specials)."""
TARGET_ALPHABET = string.digits + "-"
"""Every character of an ISO date (the target vocabulary, without specials)."""


@dataclass(frozen=True)
class DateExample:
    """One training pair and where the day, month and year sit in the source
    text.
    """

    date: dt.date
    source: str
    target: str
    format: str
    # field -> (start, end) character offsets in ``source``
    spans: dict[str, tuple[int, int]]


def render_date(
    date: dt.date,
    fmt: str,
    case: str = "as_is",
    formats: dict[str, Callable[[dt.date], list[Part]]] | None = None,
) -> DateExample:
    """Write ``date`` in format ``fmt`` (a key of ``formats``, default
    :data:`FORMATS`).

    ``case`` is ``"as_is"``, ``"lower"`` or ``"upper"``.  The target is always
    ISO 8601.
    """
    formats = FORMATS if formats is None else formats
    if fmt not in formats:
        raise ValueError(
            f"unknown date format {fmt!r}; known formats: {sorted(formats)}"
        )
    if case not in ("as_is", "lower", "upper"):
        raise ValueError(
            f"case must be 'as_is', 'lower' or 'upper', got {case!r}"
        )
    if not FIRST_DATE <= date <= LAST_DATE:
        raise ValueError(
            f"date {date} is outside {FIRST_DATE}..{LAST_DATE} "
            "(two-digit years would be ambiguous)"
        )
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
    rng: random.Random,
    date: dt.date,
    formats: dict[str, Callable[[dt.date], list[Part]]],
) -> DateExample:
    fmt = rng.choice(sorted(formats))
    has_letters = any(
        c.isalpha() for c in render_date(date, fmt, formats=formats).source
    )
    case = (
        rng.choices(("as_is", "lower", "upper"), weights=(0.7, 0.15, 0.15))[0]
        if has_letters
        else "as_is"
    )
    return render_date(date, fmt, case, formats)


@dataclass
class DateSplits:
    """Train / validation / test examples whose *dates* are disjoint across the
    three sets.
    """

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
    """Seeded data: ``n_test`` held-out examples on ``n_test`` distinct dates,
    ``n_val`` validation examples on other dates, and ``n_train`` training
    examples drawn (with replacement) from the remaining dates, each in a
    random format.

    No test or validation *date* occurs in training, in any format, so the
    held-out accuracy measures generalisation to unseen dates, not memory of
    seen strings.  The same arguments give the same examples on every machine.
    """
    formats = FORMATS if formats is None else formats
    n_days = (LAST_DATE - FIRST_DATE).days + 1
    if min(n_train, n_val, n_test) < 0:
        raise ValueError(
            "sizes must be non-negative, "
            f"got n_train={n_train}, n_val={n_val}, n_test={n_test}"
        )
    if n_test + n_val >= n_days:
        raise ValueError(
            f"n_test + n_val = {n_test + n_val} leaves no training dates "
            f"out of {n_days}"
        )
    rng = random.Random(seed)
    days = list(range(n_days))
    rng.shuffle(days)
    to_date = lambda i: FIRST_DATE + dt.timedelta(days=i)  # noqa: E731
    test_days = days[:n_test]
    val_days = days[n_test : n_test + n_val]
    train_days = days[n_test + n_val :]
    test = [_random_example(rng, to_date(i), formats) for i in test_days]
    val = [_random_example(rng, to_date(i), formats) for i in val_days]
    train = [
        _random_example(rng, to_date(rng.choice(train_days)), formats)
        for _ in range(n_train)
    ]
    return DateSplits(train, val, test)


# -----------------------------------------------------------------------------
# Tokenisers (the course's CharTokenizer with <pad> <bos> <eos>),
# Dataset, collate
# -----------------------------------------------------------------------------


def source_tokenizer() -> CharTokenizer:
    """The tokeniser of rendered dates."""
    return CharTokenizer(sorted(set(SOURCE_ALPHABET)), specials=SPECIALS)


def target_tokenizer() -> CharTokenizer:
    """The tokeniser of ISO dates."""
    return CharTokenizer(sorted(set(TARGET_ALPHABET)), specials=SPECIALS)


ISO_FIELDS = {"year": slice(0, 4), "month": slice(5, 7), "day": slice(8, 10)}
"""Where each field sits in an ISO date ``YYYY-MM-DD``."""


def wrong_fields(prediction: str, target: str) -> tuple[str, ...]:
    """The fields of an ISO date that ``prediction`` gets wrong: ``("day",)``,
    ``("year", "month")``...

    ``()`` for a correct prediction; ``("malformed",)`` when the prediction is
    not of the form ``DDDD-DD-DD`` (too short, too long, a misplaced ``-``).
    """
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", target):
        raise ValueError(
            f"target must be an ISO date YYYY-MM-DD, got {target!r}"
        )
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", prediction):
        return ("malformed",)
    return tuple(
        name for name, s in ISO_FIELDS.items() if prediction[s] != target[s]
    )
