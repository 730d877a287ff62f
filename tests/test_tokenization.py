"""The course's one character tokeniser, as chapter 09 (with specials) and chapter 10 (without) use it."""

from __future__ import annotations

import pytest
import torch

from transformer_course.tasks.dates import source_tokenizer, target_tokenizer
from transformer_course.tasks.python_docs import CHARS
from transformer_course.tokenization import BOS, EOS, PAD, CharTokenizer


def test_specials_come_first_then_the_characters_in_order():
    tok = CharTokenizer("cab", specials=(PAD, BOS, EOS))
    assert tok.tokens == [PAD, BOS, EOS, "c", "a", "b"] and len(tok) == tok.vocab_size == 6
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    assert tok.encode("ab") == [4, 5, 2]  # a tokenizer with <eos> ends a text with it
    assert tok.encode("ab", add_bos=True, add_eos=False) == [1, 4, 5]
    assert tok.decode([1, 4, 5, 2, 3, 0]) == "ab"  # <bos> skipped, stops at <eos>


def test_without_specials_ids_are_positions_in_the_alphabet():
    tok = CharTokenizer(CHARS)
    assert tok.vocab_size == 96 and tok.pad_id is tok.bos_id is tok.eos_id is None
    assert tok.encode("\n ") == [0, 1] and tok.decode(torch.tensor([0, 1])) == "\n "
    with pytest.raises(ValueError, match="no <bos> token"):
        tok.encode("a", add_bos=True)
    with pytest.raises(ValueError, match="one sequence"):
        tok.decode(torch.zeros(2, 2, dtype=torch.long))


def test_the_date_tokenizers_keep_their_ids():
    src, tgt = source_tokenizer(), target_tokenizer()
    assert tgt.tokens == [PAD, BOS, EOS, "-", *"0123456789"]
    assert src.tokens[3:8] == [" ", "'", ",", "-", "."]  # sorted alphabet after the specials


@pytest.mark.parametrize(
    "chars, specials, match",
    [
        ("aa", (), "unique"),
        (["ab"], (), "single characters"),
        ("ab", (PAD, PAD), "special tokens"),
        ("ab", ("a",), "special tokens"),
    ],
)
def test_bad_alphabets_are_rejected(chars, specials, match):
    with pytest.raises(ValueError, match=match):
        CharTokenizer(chars, specials=specials)


def test_unknown_characters_and_ids_say_what_is_wrong():
    tok = CharTokenizer("ab", specials=(PAD, BOS, EOS))
    with pytest.raises(ValueError, match=r"\['c'\] .* not in the tokenizer's alphabet"):
        tok.encode("abc")
    with pytest.raises(ValueError, match="outside the vocabulary 0..4"):
        tok.decode([5])
