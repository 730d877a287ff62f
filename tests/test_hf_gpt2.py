"""Tests of transformer_course.hf_gpt2 (chapter 11).  Nothing here touches the network."""

from __future__ import annotations

import pytest
import torch

from transformer_course import hf_gpt2
from transformer_course.generation import generate
from transformer_course.gpt import GPT, GPTConfig
from transformer_course.hf_gpt2 import (
    bpe_merges,
    from_hf,
    from_hf_config,
    hf_char_tokenizer,
    hf_state_dict,
    load_gpt2,
    to_hf,
    to_hf_config,
    train_bpe,
)
from transformer_course.tasks.python_docs import CHARS, normalize_text
from transformer_course.tokenization import CharTokenizer


def tiny() -> GPT:
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=96, block_size=16, n_layer=2, n_head=4, d_model=32))
    with torch.no_grad():  # non-trivial norms and biases, so a mix-up in the mapping shows
        for p in m.parameters():
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
    assert (cfg.vocab_size, cfg.n_positions, cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.n_inner) == (
        96,
        16,
        32,
        3,
        4,
        128,
    )
    assert cfg.activation_function == "gelu" and cfg.tie_word_embeddings
    assert cfg.eos_token_id is None


def test_conv1d_layout_is_transposed_and_fused():
    m = tiny()
    sd = hf_state_dict(m)
    w = sd["transformer.h.0.attn.c_attn.weight"]
    assert w.shape == (32, 96)  # (in, 3 * out): query, key and value side by side
    torch.testing.assert_close(w[:, 32:64], m.blocks[0].attn.qkv.weight[32:64].T)  # the keys
    torch.testing.assert_close(sd["transformer.h.1.mlp.c_fc.weight"], m.blocks[1].mlp.fc.weight.T)


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
    assert ids.tolist()[0] == CharTokenizer(CHARS).encode("def f(x):")
    with torch.no_grad():
        assert (model(ids).logits - m(ids)).abs().max().item() <= 1e-4


# ------------------------------------------------------------------------------------ tokenizers


def test_hf_char_tokenizer_agrees_with_ours():
    tok = hf_char_tokenizer()
    ours = CharTokenizer(CHARS)
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


# ------------------------------------------------------------------------------------ GPT-2 -> ours


def random_gpt2(n_layer: int = 2, n_embd: int = 64, n_head: int = 4, vocab: int = 300, positions: int = 32):
    """A ``GPT2LMHeadModel`` with GPT-2's structure (tanh GELU, biases, tied embeddings) and
    random weights, biases and LayerNorm gains included."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=vocab,
        n_positions=positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    assert cfg.activation_function == "gelu_new"
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # larger than GPT-2's initialisation: logits of order 10, GELU inputs of order 1
        for p in hf.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.2)
    return hf


def test_from_hf_config_reads_gpt2s_sizes_and_activation():
    hf = random_gpt2()
    c = from_hf_config(hf.config)
    assert (c.vocab_size, c.block_size, c.n_layer, c.n_head, c.d_model, c.d_ff) == (300, 32, 2, 4, 64, 256)
    assert c.activation == "gelu_tanh" and c.eps == hf.config.layer_norm_epsilon


def test_from_hf_gives_gpt2s_logits():
    hf = random_gpt2()
    ours = from_hf(hf)
    x = torch.randint(0, 300, (3, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = hf(x).logits
        diff = (ours(x) - logits).abs().max().item()
    assert logits.abs().max() > 5  # a real test: logits far from zero
    assert diff <= 1e-4
    assert ours.lm_head.weight is ours.tok_emb.weight and not ours.training


def test_exact_gelu_would_not_match():
    """The activation matters: the same weights with the exact GELU give other logits."""
    hf = random_gpt2()
    ours = from_hf(hf)
    exact = GPT(GPTConfig(**{**ours.config.to_dict(), "activation": "gelu"})).eval()
    exact.load_state_dict(ours.state_dict())
    x = torch.randint(0, 300, (2, 32), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (exact(x) - hf(x).logits).abs().max().item() > 1e-3
        assert (ours(x) - hf(x).logits).abs().max().item() <= 1e-4


def test_round_trip_ours_hf_ours():
    m = tiny()
    back = from_hf(to_hf(m))
    x = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.allclose(back(x), m(x), atol=1e-5)
    assert back.config == m.config


def test_generate_agrees_after_from_hf():
    hf = random_gpt2()
    ours = from_hf(hf)
    x = torch.randint(0, 300, (1, 5), generator=torch.Generator().manual_seed(4))
    theirs = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=10, do_sample=False, pad_token_id=0)
    assert torch.equal(generate(ours, x, 10), theirs)


def test_from_hf_rejects_unknown_activation_and_untied_head():
    hf = random_gpt2()
    hf.config.activation_function = "swish"
    with pytest.raises(ValueError, match="activation"):
        from_hf_config(hf.config)
    hf.config.activation_function = "gelu_new"
    hf.config.tie_word_embeddings = False
    with pytest.raises(ValueError, match="ties"):
        from_hf_config(hf.config)


def test_unknown_activation_is_a_clear_error():
    with pytest.raises(ValueError, match="activation"):
        GPTConfig(activation="swiglu")


# ------------------------------------------------------------------------------------ the real GPT-2


def test_load_gpt2_offline_raises_without_touching_the_network(monkeypatch):
    from transformer_course.pretrained import ModelNotAvailableError

    monkeypatch.setenv("TRANSFORMER_COURSE_OFFLINE", "1")

    def probe():
        raise AssertionError("probed although offline was forced")

    with pytest.raises(ModelNotAvailableError, match="offline"):
        load_gpt2(probe=probe)


def test_load_gpt2_without_network_raises(monkeypatch):
    from transformer_course.pretrained import ModelNotAvailableError

    for var in ("TRANSFORMER_COURSE_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ModelNotAvailableError, match="not reachable"):
        load_gpt2(probe=lambda: False)


def test_load_gpt2_with_network_converts_the_hub_model(monkeypatch):
    import transformers

    for var in ("TRANSFORMER_COURSE_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    hf = random_gpt2()
    calls = []
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda name: calls.append(("tok", name)) or "T")
    monkeypatch.setattr(
        transformers.GPT2LMHeadModel, "from_pretrained", lambda name: calls.append(("model", name)) or hf
    )
    model, tok = load_gpt2(probe=lambda: True)
    assert tok == "T" and calls == [("tok", "gpt2"), ("model", "gpt2")]
    assert isinstance(model, GPT) and model.config.activation == "gelu_tanh"
    assert hf_gpt2.GPT2_HUB_ID == "gpt2"


def test_from_hf_refuses_a_bert() -> None:
    from transformers import BertConfig, BertModel

    bert = BertModel(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64))
    with pytest.raises(TypeError, match=r"reads a GPT-2.*BertModel of model_type 'bert'.*bert_from_hf"):
        hf_gpt2.from_hf(bert)


def test_pipeline_generates_a_padded_batch_like_one_prompt_at_a_time() -> None:
    """The exported pair works with the library's own client: pipeline("text-generation") with
    batch_size=2 pads the shorter prompt on the left and continues each prompt as it would alone."""
    from transformers import pipeline

    from transformer_course.gpt import GPT, GPTConfig
    from transformer_course.tasks.python_docs import CHARS

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=len(CHARS), block_size=64, n_layer=2, n_head=2, d_model=32, d_ff=64))
    tok = hf_gpt2.hf_char_tokenizer(CHARS, model_max_length=64)
    hf = hf_gpt2.to_hf(model, pad_token_id=tok.pad_token_id)
    assert hf.config.pad_token_id == tok.pad_token_id == CHARS.index("\n")
    gen = pipeline("text-generation", model=hf, tokenizer=tok)
    prompts = ["def f", "The class of a"]
    batched = gen(prompts, max_new_tokens=12, do_sample=False, batch_size=2)
    alone = [gen(p, max_new_tokens=12, do_sample=False) for p in prompts]
    assert batched == alone
    with pytest.raises(ValueError, match="not one of the model's characters"):
        hf_gpt2.hf_char_tokenizer("abc", pad_token="\n")
