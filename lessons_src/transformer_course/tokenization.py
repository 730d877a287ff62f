"""The course's character tokeniser (chapters 09, 10, 11).

One token per character of a fixed alphabet, optionally preceded by special
tokens: the date model of chapter 09 uses
``CharTokenizer(alphabet, specials=("<pad>", "<bos>", "<eos>"))``, the GPT of
chapter 10 ``CharTokenizer(python_docs.CHARS)`` (no specials: its text never
ends).  Subword tokenisers (BPE, WordPiece) come from Hugging Face's
``tokenizers`` (chapters 11 and 12).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"


class CharTokenizer:
    """Ids ``0 .. len(specials) - 1`` are the special tokens, then one id per
    character of ``chars``, in the order given."""

    def __init__(
        self, chars: Iterable[str], specials: Sequence[str] = ()
    ) -> None:
        chars = list(chars)
        if any(not isinstance(c, str) or len(c) != 1 for c in chars):
            raise ValueError(
                "the alphabet must consist of single characters "
                "(pass a string, or a list of them)"
            )
        if len(set(chars)) != len(chars):
            raise ValueError(
                "the characters of a CharTokenizer must be unique; "
                "pass sorted(set(alphabet))"
            )
        self.chars = "".join(chars)
        self.specials = tuple(specials)
        self.tokens: list[str] = [*self.specials, *chars]
        self.index = {t: i for i, t in enumerate(self.tokens)}
        if len(self.index) != len(self.tokens):
            raise ValueError(
                f"the special tokens {self.specials} must differ from each "
                "other and from the characters"
            )
        self.pad_id, self.bos_id, self.eos_id = (
            self.index.get(t) for t in (PAD, BOS, EOS)
        )

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(
        self, text: str, add_bos: bool = False, add_eos: bool | None = None
    ) -> list[int]:
        """Ids of ``text``, optionally framed by ``<bos>`` and ``<eos>``
        (``add_eos`` defaults to whether the tokeniser has an ``<eos>``: a
        source sentence ends with it)."""
        unknown = sorted(
            {c for c in text if c not in self.index or c in self.specials}
        )
        if unknown:
            raise ValueError(
                f"characters {unknown} of {text[:40]!r} are not in the "
                "tokenizer's alphabet; map the text onto it first "
                "(for the GPT's CHARS, python_docs.normalize_text does)"
            )
        if add_eos is None:
            add_eos = self.eos_id is not None
        ids = [self.index[c] for c in text]
        if add_bos:
            ids.insert(0, self.special_id(BOS))
        if add_eos:
            ids.append(self.special_id(EOS))
        return ids

    def special_id(self, token: str) -> int:
        """The id of a special token (``"<pad>"``, ``"<bos>"``, ``"<eos>"``);
        an error if it has none."""
        if token not in self.specials:
            raise ValueError(
                f"this tokenizer has no {token} token; "
                f"create it with specials=(..., {token!r})"
            )
        return self.index[token]

    def decode(self, ids: Iterable[int] | torch.Tensor) -> str:
        """Text of ``ids``: stops at the first ``<eos>``, skips ``<pad>`` and
        ``<bos>``."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    "decode takes one sequence of ids, "
                    f"got shape {tuple(ids.shape)}"
                )
            ids = ids.tolist()
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < len(self.tokens)]
        if bad:
            raise ValueError(
                f"ids {bad[:5]} are outside the vocabulary "
                f"0..{len(self.tokens) - 1}"
            )
        out = []
        for i in ids:
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                out.append(self.tokens[i])
        return "".join(out)
