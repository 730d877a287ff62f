"""Tests of transformer_course.gpt and train_gpt (chapter 10)."""

from __future__ import annotations

import json

import pytest
import torch

from transformer_course.attention import KVCache
from transformer_course.generation import generate, next_token_probs, top_k_filter, top_p_filter
from transformer_course.gpt import GPT, Block, GPTConfig, lm_loss
from transformer_course.masking import causal_mask
from transformer_course.tasks.python_docs import (
    CHARS,
    corpus_fingerprint,
    load_python_docs,
    normalize_text,
    train_val_split,
)
from transformer_course.tokenization import CharTokenizer
from transformer_course.train_gpt import evaluate, get_batch, load_checkpoint, save_checkpoint, train
from transformer_course.transformer import EncoderLayer
from transformer_course.utils import count_parameters


def tiny(**kw) -> GPT:
    torch.manual_seed(0)
    cfg = dict(vocab_size=17, block_size=12, n_layer=2, n_head=2, d_model=16)
    cfg.update(kw)
    return GPT(GPTConfig(**cfg)).eval()


# ------------------------------------------------------------------------------------ config


def test_config_defaults_and_errors():
    c = GPTConfig(d_model=32, n_head=4)
    assert c.d_ff == 128
    with pytest.raises(ValueError, match="divisible"):
        GPTConfig(d_model=30, n_head=4)
    with pytest.raises(ValueError, match="positive"):
        GPTConfig(n_layer=0)
    with pytest.raises(ValueError, match="dropout"):
        GPTConfig(dropout=1.0)
    assert GPTConfig.from_dict({**c.to_dict(), "unknown": 1}) == c


# ------------------------------------------------------------------------------------ model


def test_forward_shapes():
    m = tiny()
    logits = m(torch.randint(0, 17, (3, 12)))
    assert logits.shape == (3, 12, 17)


def block_as_encoder_layer(block: Block, d_model: int, n_head: int, activation: str) -> EncoderLayer:
    """Chapter 07's EncoderLayer (pre-norm) holding the weights of a GPT block."""
    layer = EncoderLayer(d_model, n_head, 4 * d_model, dropout=0.0, activation=activation, norm_first=True).eval()
    sa = layer.self_attn
    with torch.no_grad():
        for part, w, b in zip(
            (sa.W_q, sa.W_k, sa.W_v), block.attn.qkv.weight.chunk(3), block.attn.qkv.bias.chunk(3), strict=True
        ):
            part.weight.copy_(w)
            part.bias.copy_(b)
        for mine, theirs in (
            (sa.W_o, block.attn.proj),
            (layer.ff.linear1, block.mlp.fc),
            (layer.ff.linear2, block.mlp.proj),
            (layer.norm1, block.norm1),
            (layer.norm2, block.norm2),
        ):
            mine.weight.copy_(theirs.weight)
            mine.bias.copy_(theirs.bias)
    return layer


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh"])
def test_block_is_the_course_encoder_layer_with_a_causal_mask(activation):
    m = tiny(activation=activation)
    block = m.blocks[1]
    with torch.no_grad():  # non-trivial norms and biases, so that every weight matters
        for p in block.parameters():
            p.add_(0.1 * torch.randn(p.shape))
    layer = block_as_encoder_layer(block, 16, 2, activation)
    x = torch.randn(3, 9, 16)
    torch.testing.assert_close(block(x), layer(x, causal_mask(9)), atol=1e-6, rtol=1e-5)
    assert not torch.allclose(block(x), layer(x), atol=1e-3)  # without the mask they differ


def test_tied_head_and_parameter_count():
    m = tiny()
    assert m.lm_head.weight is m.tok_emb.weight
    d, v, t, L = 16, 17, 12, 2
    per_block = 4 * (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d) + 4 * d
    assert count_parameters(m) == v * d + t * d + L * per_block + 2 * d


def test_bad_inputs_raise_clear_errors():
    m = tiny()
    with pytest.raises(ValueError, match="block_size"):
        m(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(batch, length\)"):
        m(torch.zeros(12, dtype=torch.long))
    with pytest.raises(TypeError, match="integer"):
        m(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="entries"):
        m(torch.zeros(1, 3, dtype=torch.long), cache=[KVCache()])
    with pytest.raises(ValueError, match=r"id 17, outside the vocabulary 0\.\.16"):
        m(torch.tensor([[1, 17]]))
    with pytest.raises(ValueError, match="id -1"):
        m(torch.tensor([[-1, 2]]))
    with pytest.raises(TypeError, match="torch.tensor"):
        m([[1, 2]])


def test_causal_future_tokens_do_not_change_past_logits():
    m = tiny()
    x = torch.randint(0, 17, (2, 12))
    y = x.clone()
    y[:, 7:] = torch.randint(0, 17, (2, 5))
    lx, ly = m(x), m(y)
    torch.testing.assert_close(lx[:, :7], ly[:, :7])
    assert not torch.allclose(lx[:, 7:], ly[:, 7:])


def test_cache_forward_matches_full_forward():
    m = tiny()
    x = torch.randint(0, 17, (2, 10))
    full = m(x)
    cache = m.new_cache()
    parts = [m(x[:, :4], cache=cache), m(x[:, 4:5], cache=cache), m(x[:, 5:], cache=cache)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=1e-5)
    assert len(cache[0]) == 10
    with pytest.raises(ValueError, match="block_size"):
        m(torch.zeros(2, 3, dtype=torch.long), cache=cache)


def test_loss_shape_check_and_value():
    logits = torch.zeros(2, 3, 5)
    assert lm_loss(logits, torch.zeros(2, 3, dtype=torch.long)).item() == pytest.approx(
        torch.log(torch.tensor(5.0)).item()
    )
    with pytest.raises(ValueError, match="targets"):
        lm_loss(logits, torch.zeros(2, 4, dtype=torch.long))


# ------------------------------------------------------------------------------------ data


def test_normalize_and_char_tokenizer_round_trip():
    text = "\u201cQuote\u201d \u2014 caf\u00e9\tx \u2603"
    norm = normalize_text(text)
    assert set(norm) <= set(CHARS)
    assert norm == '"Quote" -- cafe    x ?'
    tok = CharTokenizer(CHARS)
    assert tok.vocab_size == 96
    assert tok.decode(tok.encode(norm)) == norm
    assert tok.decode(torch.tensor(tok.encode("ab"))) == "ab"
    with pytest.raises(ValueError, match="normalize_text"):
        tok.encode("caf\u00e9")
    with pytest.raises(ValueError, match="outside"):
        tok.decode([96])
    with pytest.raises(ValueError, match="unique"):
        CharTokenizer("aa")


def test_corpus_and_split():
    text = load_python_docs()
    assert len(text) > 100_000 and set(text) <= set(CHARS)
    assert 'The "while" statement' in text
    tr, va = train_val_split(text, 0.1)
    assert tr + va == text and abs(len(va) - len(text) / 10) <= 1
    with pytest.raises(ValueError):
        train_val_split(text, 1.0)


def test_shakespeare_corpus():
    from transformer_course.tasks import shakespeare

    text = shakespeare.load_shakespeare()
    assert 4_000_000 < len(text) < 6_000_000 and set(text) <= set(CHARS)
    assert text.startswith("ALL'S WELL THAT ENDS WELL") and "\n\n\n\n" not in text
    tr, va = shakespeare.split_plays(text)
    line = "If music be the food of love, play on"  # Twelfth Night
    assert line in va and line not in tr and tr + va == text
    # whole plays: the validation text starts with a play's title
    assert va.startswith("THE HISTORY OF TROILUS AND CRESSIDA\n") and tr.endswith("\n\n\n")
    assert 0.1 <= len(va) / len(text) < 0.15
    with pytest.raises(ValueError, match="play break"):
        shakespeare.split_plays("one play, no break " * 10)
    with pytest.raises(ValueError, match="val_fraction"):
        shakespeare.split_plays(text, 1.5)
    assert shakespeare.clean_play("A  \r\n\n\n\nB\u2019s\n\n") == "A\n\nB's\n"


def test_shakespeare_damaged_file_is_named(tmp_path, monkeypatch):
    import gzip

    from transformer_course.tasks import shakespeare

    bad = tmp_path / "shakespeare.txt.gz"
    bad.write_bytes(gzip.compress(b"not the plays"))
    monkeypatch.setattr(shakespeare, "DATA_FILE", bad)
    shakespeare.load_shakespeare.cache_clear()
    try:
        with pytest.raises(ValueError, match="damaged.*make_shakespeare"):
            shakespeare.load_shakespeare()
        monkeypatch.setattr(shakespeare, "DATA_FILE", tmp_path / "missing.gz")
        shakespeare.load_shakespeare.cache_clear()
        with pytest.raises(FileNotFoundError, match="reinstall"):
            shakespeare.load_shakespeare()
    finally:
        shakespeare.load_shakespeare.cache_clear()


def test_corpus_fingerprint():
    assert corpus_fingerprint("abc") == corpus_fingerprint("abc")
    assert corpus_fingerprint("abc") != corpus_fingerprint("abd")
    assert len(corpus_fingerprint("")) == 16


def test_get_batch_targets_are_shifted_inputs():
    data = torch.arange(100)
    g = torch.Generator().manual_seed(0)
    x, y = get_batch(data, 4, 10, g)
    assert x.shape == y.shape == (4, 10)
    torch.testing.assert_close(y[:, :-1], x[:, 1:])
    assert torch.equal(y - x, torch.ones_like(x))
    with pytest.raises(ValueError, match="block_size"):
        get_batch(torch.arange(5), 2, 5)


def test_evaluate_equals_manual_loss_and_uniform_model():
    m = tiny()
    data = torch.randint(0, 17, (1 + 3 * 12,))
    windows = data.unfold(0, 13, 12)  # (3, 13) windows overlapping by one
    manual = lm_loss(m(windows[:, :-1]), windows[:, 1:]).item()
    assert evaluate(m, data, batch_size=2) == pytest.approx(manual, rel=1e-5)
    assert evaluate(m, data, max_windows=1) == pytest.approx(
        lm_loss(m(windows[:1, :-1]), windows[:1, 1:]).item(), rel=1e-5
    )
    assert evaluate(m, data, max_windows=5) == pytest.approx(manual, rel=1e-5)  # fewer windows than asked: all


def test_evaluate_sample_is_spread_over_the_whole_text():
    m = tiny()
    data = torch.randint(0, 17, (1 + 9 * 12,))
    windows = data.unfold(0, 13, 12)  # 9 windows
    picked = windows[[0, 4, 8]]  # first, middle, last
    manual = lm_loss(m(picked[:, :-1]), picked[:, 1:]).item()
    assert evaluate(m, data, max_windows=3) == pytest.approx(manual, rel=1e-5)
    with pytest.raises(ValueError, match="max_windows"):
        evaluate(m, data, max_windows=0)


# ------------------------------------------------------------------------------------ sampling


def test_top_k_never_keeps_outside_the_k_best():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(50, 30, generator=g)
    for k in (1, 3, 10):
        kept = torch.isfinite(top_k_filter(logits, k))
        assert (kept.sum(-1) == k).all()
        best = logits.topk(k, dim=-1).indices
        assert torch.equal(kept, torch.zeros_like(kept).scatter(-1, best, True))
        probs = next_token_probs(logits, top_k=k)
        draws = torch.multinomial(probs, 200, replacement=True, generator=g)
        assert kept.gather(-1, draws).all()
    ties = torch.zeros(1, 10)  # all tied: still exactly k survive
    assert torch.isfinite(top_k_filter(ties, 4)).sum() == 4
    with pytest.raises(ValueError):
        top_k_filter(logits, 0)


def test_top_p_keeps_the_smallest_set_reaching_p():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(40, 25, generator=g) * 2
    probs = logits.softmax(-1)
    for p in (0.1, 0.5, 0.9, 0.99):
        kept = torch.isfinite(top_p_filter(logits, p))
        for row in range(40):
            order = probs[row].argsort(descending=True)
            n = int(kept[row].sum())
            # the kept tokens are the n most likely ones ...
            assert set(order[:n].tolist()) == set(kept[row].nonzero().flatten().tolist())
            # ... their mass reaches p, and one fewer would not
            mass = probs[row, order[:n]].sum().item()
            assert mass >= p - 1e-6
            assert n == 1 or probs[row, order[: n - 1]].sum().item() < p
    assert (torch.isfinite(top_p_filter(logits, 1e-9)).sum(-1) == 1).all()
    with pytest.raises(ValueError):
        top_p_filter(logits, 0.0)


def test_temperature_sharpens_and_flattens():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    cold, warm, hot = (next_token_probs(logits, temperature=t) for t in (0.5, 1.0, 2.0))
    assert cold[0, 0] > warm[0, 0] > hot[0, 0]
    entropy = [-(p * p.log()).sum().item() for p in (cold, warm, hot)]
    assert entropy[0] < entropy[1] < entropy[2]
    torch.testing.assert_close(warm, logits.softmax(-1))
    with pytest.raises(ValueError, match="temperature"):
        next_token_probs(logits, temperature=0.0)


def test_greedy_generation_picks_argmax():
    m = tiny()
    x = torch.randint(0, 17, (2, 3))
    out = generate(m, x, 4, use_cache=False)
    assert out.shape == (2, 7) and torch.equal(out[:, :3], x)
    for t in range(3, 7):
        assert torch.equal(out[:, t], m(out[:, :t]).argmax(-1)[:, -1])


@pytest.mark.parametrize("sample", [False, True])
def test_kv_cache_gives_the_same_tokens(sample):
    m = tiny()
    x = torch.randint(0, 17, (2, 4))
    kw = dict(do_sample=sample, temperature=0.8, top_k=10, top_p=0.95)
    # 20 new tokens run past block_size=12, so the sliding window is exercised too
    a = generate(m, x, 20, use_cache=False, generator=torch.Generator().manual_seed(5), **kw)
    b = generate(m, x, 20, use_cache=True, generator=torch.Generator().manual_seed(5), **kw)
    assert a.shape == (2, 24)
    assert torch.equal(a, b)


def test_sampling_respects_top_k_during_generation():
    m = tiny()
    x = torch.randint(0, 17, (1, 2))
    out = generate(m, x, 8, do_sample=True, top_k=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, generate(m, x, 8))  # top_k=1 sampling is greedy


def test_generate_restores_training_mode_and_checks_input():
    m = tiny().train()
    generate(m, torch.zeros(1, 2, dtype=torch.long), 2)
    assert m.training
    with pytest.raises(ValueError):
        generate(m, torch.zeros(1, 0, dtype=torch.long), 2)


# ------------------------------------------------------------------------------------ training, checkpoints


def test_train_lowers_the_loss_on_a_repetitive_text():
    tok = CharTokenizer(CHARS)
    ids = torch.tensor(tok.encode("abcdefgh" * 60))
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=1, n_head=2, d_model=32))
    hist = train(
        m,
        ids,
        ids,
        steps=60,
        batch_size=8,
        lr=1e-2,
        warmup=5,
        eval_every=20,
        generator=torch.Generator().manual_seed(0),
        show_progress=False,
    )
    assert hist.eval_steps == [0, 20, 40, 60] and len(hist.loss) == len(hist.lr) == 60
    assert hist.evals["val_loss"][-1] < 0.5 * hist.evals["val_loss"][0]
    assert max(hist.lr) == pytest.approx(1e-2) and hist.lr[-1] == pytest.approx(1e-3, rel=0.05)


def test_checkpoint_round_trip(tmp_path):
    m = tiny()
    save_checkpoint(m, tmp_path / "ck", {"val_loss": 1.0}, chars=CHARS[:17])
    meta = json.loads((tmp_path / "ck.json").read_text())
    assert meta["record"]["val_loss"] == 1.0
    m2, tok, rec = load_checkpoint(tmp_path / "ck.safetensors")
    assert tok.vocab_size == 17 and rec == {"val_loss": 1.0}
    x = torch.randint(0, 17, (1, 12))
    torch.testing.assert_close(m2(x), m(x))
    assert m2.lm_head.weight is m2.tok_emb.weight
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing")


def test_shipped_checkpoint_is_small_and_good():
    from transformer_course.train_gpt import CHECKPOINT_NAME, checkpoint_dir

    weights = checkpoint_dir() / f"{CHECKPOINT_NAME}.safetensors"
    assert weights.stat().st_size <= 10 * 1024 * 1024
    model, tok, record = load_checkpoint()
    assert record["val_loss"] <= 1.6 and record["corpus"] == "shakespeare"
    assert {"train_seconds", "steps", "device", "corpus_sha256"} <= set(record)
    assert tok.chars == CHARS
    from transformer_course.tasks.shakespeare import load_shakespeare

    assert record["corpus_sha256"] == corpus_fingerprint(load_shakespeare())
    out = generate(model, torch.tensor([tok.encode("The ")]), 5)
    assert out.shape == (1, 9)


def test_zero_length_input_is_refused() -> None:
    """Decided: an empty sequence has nothing to predict from, so GPT says so instead of returning
    empty logits (which would make lm_loss NaN and generation index an empty row)."""
    m = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, d_model=8, d_ff=16))
    with pytest.raises(ValueError, match=r"shape \(2, 0\): no positions to predict from"):
        m(torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="at least one token"):
        m(torch.zeros(1, 0, dtype=torch.long), cache=m.new_cache())


def test_evaluate_refuses_a_batch() -> None:
    m = GPT(GPTConfig(vocab_size=10, block_size=8, n_layer=1, n_head=2, d_model=8, d_ff=16))
    with pytest.raises(ValueError, match=r"1-D sequence of token ids, got shape \(3, 20\).*reshape\(-1\)"):
        evaluate(m, torch.zeros(3, 20, dtype=torch.long))


def test_top_p_one_keeps_every_token() -> None:
    """p = 1.0 keeps the whole distribution (a float cumulative sum can reach 1 early)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(400, 300, generator=g) * 8
    assert torch.isfinite(top_p_filter(logits, 1.0)).all()
