"""Tests of transformer_course.train_mlm and pretrain_mlm's options (chapter 12's MLM checkpoint)."""

from __future__ import annotations

import pytest
import torch

from transformer_course.bert import BertConfig, BertForMLM, pretrain_mlm
from transformer_course.hf_bert import train_wordpiece
from transformer_course.train_mlm import (
    CHECKPOINT_NAME,
    checkpoint_dir,
    heldout_accuracy,
    load_mlm_checkpoint,
    masked_heldout,
    mlm_data,
    mlm_paragraphs,
    save_mlm_checkpoint,
    vocab_fingerprint,
)

TEXT = "the cat sat on the mat and the dog sat on the rug"


@pytest.fixture(scope="module")
def tiny():
    tok = train_wordpiece([TEXT] * 50, vocab_size=60)
    one = tok(TEXT, add_special_tokens=False)["input_ids"] + [tok.sep_token_id]
    return tok, torch.tensor(one * 50)


def tiny_model(tok) -> BertForMLM:
    torch.manual_seed(0)
    return BertForMLM(BertConfig(vocab_size=len(tok), d_model=32, num_layers=1, num_heads=2, d_ff=64, max_len=16))


def test_mask_prob_changes_the_share_of_scored_positions(tiny, monkeypatch):
    tok, ids = tiny
    import transformer_course.bert as bert

    shares: list[float] = []
    real = bert.BertForMLM.loss

    def spy(self, input_ids, labels, attention_mask=None):
        shares.append((labels != -100).float().mean().item())
        return real(self, input_ids, labels, attention_mask)

    monkeypatch.setattr(bert.BertForMLM, "loss", spy)
    for prob in (0.15, 0.5):
        pretrain_mlm(
            tiny_model(tok),
            ids,
            tok,
            steps=5,
            warmup=1,
            mask_prob=prob,
            generator=torch.Generator().manual_seed(0),
            show_progress=False,
        )
    low, high = sum(shares[:5]) / 5, sum(shares[5:]) / 5
    assert 0.08 < low < 0.2 and 0.35 < high < 0.6  # [CLS]/[SEP] are never chosen


def test_betas_reach_the_optimizer_and_eval_passes_through(tiny, monkeypatch):
    tok, ids = tiny
    seen = []
    real = torch.optim.AdamW.__init__

    def spy(self, params, *args, **kwargs):
        seen.append(kwargs.get("betas"))
        real(self, params, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "__init__", spy)
    h = pretrain_mlm(
        tiny_model(tok),
        ids,
        tok,
        steps=4,
        warmup=1,
        betas=(0.8, 0.95),
        evaluate=lambda: {"x": 1.0},
        eval_every=2,
        show_progress=False,
    )
    assert seen == [(0.8, 0.95)]
    assert h.eval_steps == [2, 4] and h.evals["x"] == [1.0, 1.0]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mask_prob": 0.0}, "mask_prob"),
        ({"mask_prob": 1.0}, "mask_prob"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"betas": (0.9,)}, "betas"),
        ({"betas": (-0.1, 0.9)}, "betas"),
    ],
)
def test_bad_options_are_named(tiny, kwargs, match):
    tok, ids = tiny
    with pytest.raises(ValueError, match=match):
        pretrain_mlm(tiny_model(tok), ids, tok, steps=2, warmup=1, **kwargs)


def test_checkpoint_round_trip_and_vocabulary_check(tiny, tmp_path):
    tok, ids = tiny
    model = tiny_model(tok)
    pretrain_mlm(model, ids, tok, steps=3, warmup=1, show_progress=False)
    save_mlm_checkpoint(model, tok, tmp_path / "ck", {"steps": 3})
    loaded, record = load_mlm_checkpoint(tok, tmp_path / "ck.json")
    assert record == {"steps": 3} and not loaded.training
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.state_dict()[k]), k
    other = train_wordpiece(["a completely different text about birds"] * 20, vocab_size=len(tok))
    assert vocab_fingerprint(other) != vocab_fingerprint(tok)
    with pytest.raises(ValueError, match="another vocabulary.*mlm_data"):
        load_mlm_checkpoint(other, tmp_path / "ck")
    with pytest.raises(FileNotFoundError, match="not found"):
        load_mlm_checkpoint(tok, tmp_path / "missing")


def test_shipped_checkpoint_fills_masks():
    from transformer_course.pretrained import load_minilm

    mlm_tok, _, heldout_ids = mlm_data(load_minilm()[0])
    model, record = load_mlm_checkpoint(mlm_tok)
    assert (checkpoint_dir() / f"{CHECKPOINT_NAME}.safetensors").stat().st_size < 4_000_000
    top1, top5 = heldout_accuracy(model, mlm_tok, heldout_ids)
    assert top1 > 0.25 and top5 > top1  # most frequent token: about 7 %
    assert round(top1, 6) == record["mask_top1"]
    assert record["history"]["step"][-1] == record["steps"] == len(record["loss"])


def test_heldout_paragraphs_are_not_in_the_training_text():
    from transformer_course.tasks.python_docs import python_docs_prose

    train, heldout = mlm_paragraphs()
    prose = python_docs_prose()
    assert train == prose[: len(train)] and len(train) == int(0.9 * len(prose))
    assert not set(train) & set(heldout)
    # the documentation repeats itself: some paragraphs after the cut are dropped
    dropped = len(prose) - len(train) - len(heldout)
    assert 0 < dropped < 0.2 * (len(prose) - len(train))
    assert set(heldout) == set(prose[len(train) :]) - set(train)


def test_masked_heldout_is_the_same_every_time(tiny):
    tok, ids = tiny
    windows, inputs, labels = masked_heldout(tok, ids)
    assert windows.shape[1] == 64 and windows.shape == inputs.shape
    again = masked_heldout(tok, ids)
    assert torch.equal(inputs, again[1]) and torch.equal(labels, again[2])
    scored = labels != -100
    assert scored.any()
    assert torch.equal(labels[scored], windows[scored])
