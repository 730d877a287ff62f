"""Tests of transformer_course.hf_gpt2 (chapter 11).  Nothing here touches the network."""

from __future__ import annotations

import pytest
import torch

from transformer_course import hf_gpt2
from transformer_course.gpt import CHARS, GPT, CharTokenizer, GPTConfig, generate, normalize_text
from transformer_course.hf_gpt2 import (
    bpe_merges,
    gpt2_source,
    hf_char_tokenizer,
    hf_state_dict,
    load_gpt2,
    to_hf,
    to_hf_config,
    train_bpe,
)


def tiny() -> GPT:
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=96, block_size=16, n_layer=2, n_head=4, d_model=32))
    with torch.no_grad():  # non-trivial norms and biases, so a mix-up in the mapping shows
        for name, p in m.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return m.eval()


def _no_network(*args, **kwargs):
    raise AssertionError("the test tried to use the network")


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any socket connection attempt fails the test."""
    import socket

    monkeypatch.setattr(socket, "create_connection", _no_network)
    monkeypatch.setattr(socket.socket, "connect", _no_network)


# ------------------------------------------------------------------------------------ conversion


def test_config_mapping():
    cfg = to_hf_config(GPTConfig(vocab_size=96, block_size=16, n_layer=3, n_head=4, d_model=32))
    assert (cfg.vocab_size, cfg.n_positions, cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.n_inner) == (96, 16, 32, 3, 4, 128)
    assert cfg.activation_function == "gelu" and cfg.tie_word_embeddings
    assert cfg.eos_token_id is None


def test_conv1d_layout_is_transposed_and_fused():
    m = tiny()
    sd = hf_state_dict(m)
    attn = m.blocks[0].self_attn
    w = sd["transformer.h.0.attn.c_attn.weight"]
    assert w.shape == (32, 96)  # (in, 3 * out)
    torch.testing.assert_close(w[:, 32:64], attn.W_k.weight.T)
    torch.testing.assert_close(sd["transformer.h.1.mlp.c_fc.weight"], m.blocks[1].ff.linear1.weight.T)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_hf_logits_match_ours(impl):
    m = tiny()
    hf = to_hf(m, attn_implementation=impl)
    x = torch.randint(0, 96, (3, 16))
    with torch.no_grad():
        diff = (hf(x).logits - m(x)).abs().max().item()
    assert diff <= 1e-4
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()


def test_hf_loss_matches_ours():
    m = tiny()
    hf = to_hf(m)
    x = torch.randint(0, 96, (2, 16))
    with torch.no_grad():
        ours = torch.nn.functional.cross_entropy(m(x)[:, :-1].reshape(-1, 96), x[:, 1:].reshape(-1))
        theirs = hf(x, labels=x).loss
    assert abs(ours.item() - theirs.item()) <= 1e-5


def test_hf_greedy_generate_matches_ours():
    m = tiny()
    hf = to_hf(m)
    x = torch.randint(0, 96, (1, 5))
    ours = generate(m, x, 8)
    theirs = hf.generate(x, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(ours, theirs)


def test_save_and_load_with_auto_classes(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    m = tiny()
    to_hf(m).save_pretrained(tmp_path)
    hf_char_tokenizer(model_max_length=16).save_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    tok = AutoTokenizer.from_pretrained(tmp_path)
    ids = tok("def f(x):", return_tensors="pt")["input_ids"]
    assert ids.tolist()[0] == CharTokenizer().encode("def f(x):")
    with torch.no_grad():
        assert (model(ids).logits - m(ids)).abs().max().item() <= 1e-4


# ------------------------------------------------------------------------------------ tokenizers


def test_hf_char_tokenizer_agrees_with_ours():
    tok = hf_char_tokenizer()
    ours = CharTokenizer()
    text = 'class A:\n    """Doc  string."""\n\n  x = {1: [2, 3]}  # ~^|\\'
    assert tok(text)["input_ids"] == ours.encode(text)
    assert tok.decode(tok(text)["input_ids"]) == text
    odd = "\u201cna\u00efve\u201d \u2014 \u2603"
    assert tok.decode(tok(odd)["input_ids"]) == normalize_text(odd)
    assert len(tok) == len(CHARS)


def test_bpe_round_trip_merges_and_word_splits():
    text = ("the return statement returns the value of the expression. " * 40) + "zymurgy\n"
    tok = train_bpe(text, vocab_size=300)
    assert tok.get_vocab_size() <= 300
    merges = bpe_merges(tok)
    assert len(merges) > 0 and all(len(m) == 2 for m in merges)
    for s in ("the return statement", "zymurgy", "caf\u00e9 \u2603 \u00fcber"):
        assert tok.decode(tok.encode(s).ids) == s
    assert len(tok.encode(" statement").tokens) == 1  # frequent: one token
    assert len(tok.encode(" zymurgy").tokens) > 1  # rare: split
    with pytest.raises(ValueError, match="vocab_size"):
        train_bpe(text, vocab_size=200)


def test_bpe_training_is_deterministic():
    text = "abc abd abe the cat sat on the mat\n" * 20
    assert bpe_merges(train_bpe(text, 280)) == bpe_merges(train_bpe(text, 280))


# ------------------------------------------------------------------------------------ online / offline


def test_forced_offline_never_probes():
    def probe():
        raise AssertionError("probed although offline was forced")

    assert gpt2_source({"TRANSFORMER_COURSE_OFFLINE": "1"}, probe) == "course"
    assert gpt2_source({"HF_HUB_OFFLINE": "true"}, probe) == "course"


def test_no_network_means_course_model():
    assert gpt2_source({}, lambda: False) == "course"
    assert gpt2_source({"TRANSFORMER_COURSE_OFFLINE": "0"}, lambda: False) == "course"


def test_network_means_hub():
    assert gpt2_source({}, lambda: True) == "hub"


def test_load_gpt2_offline_loads_the_course_model(capsys):
    model, tok, source = load_gpt2(env={"TRANSFORMER_COURSE_OFFLINE": "1"})
    assert source == "course"
    assert "offline" in capsys.readouterr().out
    assert type(model).__name__ == "GPT2LMHeadModel" and not model.training
    ids = tok("The ", return_tensors="pt")["input_ids"]
    out = model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 9)


def test_load_gpt2_falls_back_when_the_download_fails(monkeypatch, capsys):
    import transformers

    def fail(*args, **kwargs):
        raise OSError("no route to the Hub")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fail)
    _, _, source = load_gpt2(env={}, probe=lambda: True)
    assert source == "course"
    assert "failed" in capsys.readouterr().out


def test_hub_path_calls_from_pretrained(monkeypatch, capsys):
    import transformers

    calls = []

    class Fake(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(3))

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda name: calls.append(("tok", name)) or "T")
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda name: calls.append(("model", name)) or Fake())
    model, tok, source = load_gpt2(env={}, probe=lambda: True)
    assert source == "hub" and tok == "T" and calls == [("tok", "gpt2"), ("model", "gpt2")]
    assert "Hub" in capsys.readouterr().out
    assert hf_gpt2.GPT2_HUB_ID == "gpt2"
