"""Every model of the package that takes token ids says in words what is wrong with bad ids.

Without the check, an id outside the vocabulary gives PyTorch's ``IndexError: index out of range
in self`` from deep inside ``nn.Embedding``, and float ids its dtype error.
"""

from __future__ import annotations

import pytest
import torch

from transformer_course.bert import BertConfig, BertEncoder, BertForMLM
from transformer_course.gpt import GPT, GPTConfig
from transformer_course.tasks.why_attention import AttentionClassifier, GRUClassifier
from transformer_course.transformer import Transformer, TransformerConfig
from transformer_course.utils import check_token_ids

VOCAB = 11


def _models() -> dict:
    torch.manual_seed(0)
    bert = BertConfig(vocab_size=VOCAB, d_model=8, num_layers=1, num_heads=2, d_ff=16, max_len=12, dropout=0.0)
    seq2seq = Transformer(TransformerConfig(VOCAB, VOCAB, 8, 2, 1, 1, 16, dropout=0.0, max_len=12)).eval()
    good = torch.zeros(1, 4, dtype=torch.long)
    return {
        "GPT": GPT(GPTConfig(vocab_size=VOCAB, block_size=12, n_layer=1, n_head=2, d_model=8)),
        "BertEncoder": BertEncoder(bert),
        "BertForMLM": BertForMLM(bert),
        "Transformer.encode": seq2seq.encode,
        "Transformer.decode": lambda ids: seq2seq.decode(ids, seq2seq.encode(good)),
        "GRUClassifier": GRUClassifier(VOCAB),
        "AttentionClassifier": AttentionClassifier(VOCAB, max_len=12),
    }


MODELS = _models()


@pytest.mark.parametrize("name", MODELS)
def test_good_ids_run(name):
    MODELS[name](torch.randint(0, VOCAB, (1, 4)))
    MODELS[name](torch.randint(0, VOCAB, (1, 4), dtype=torch.int32))


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize(
    ("ids", "error", "message"),
    [
        (torch.tensor([[1, VOCAB]]), ValueError, rf"id {VOCAB}, outside the vocabulary 0\.\.{VOCAB - 1}"),
        (torch.tensor([[-3, 1]]), ValueError, r"id -3, outside the vocabulary"),
        (torch.tensor([[1.0, 2.0]]), TypeError, r"integer token ids, got dtype torch.float32.*ids.long\(\)"),
        (torch.tensor([True, False])[None], TypeError, r"integer token ids, got dtype torch.bool"),
        (torch.tensor([1, 2]), ValueError, r"\(batch, length\), got \(2,\).*unsqueeze\(0\)"),
    ],
    ids=["too-large", "negative", "float", "bool", "no-batch-dimension"],
)
def test_bad_ids_are_named(name, ids, error, message):
    with pytest.raises(error, match=message):
        MODELS[name](ids)


def test_check_token_ids_names_the_argument_and_takes_no_lists():
    with pytest.raises(TypeError, match=r"input_ids must be a torch.Tensor.*torch.tensor\(\[ids\]\)"):
        check_token_ids([[1, 2]], 5, "input_ids")
    ids = torch.tensor([[0, 4]])
    assert check_token_ids(ids, 5) is ids
    assert check_token_ids(torch.zeros(2, 0, dtype=torch.long), 5).shape == (2, 0)


def test_bert_token_type_ids_are_checked_too():
    model = MODELS["BertEncoder"]
    with pytest.raises(ValueError, match=r"token_type_ids holds id 2, outside the vocabulary 0\.\.1"):
        model(torch.zeros(1, 3, dtype=torch.long), token_type_ids=torch.tensor([[0, 1, 2]]))
