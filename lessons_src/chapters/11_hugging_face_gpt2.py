# %% [markdown]
# # 11 — Hugging Face GPT-2
#
# Chapter 10 built and trained a GPT with our own code. GPT-2, the model that made the design
# famous, is the same architecture at a larger size, and 🤗 Transformers ships it as
# `GPT2LMHeadModel`. This chapter connects the two:
#
# 1. GPT-2 does not read characters but **byte-level BPE** tokens: we train such a tokenizer
#    on the same text with 🤗 `tokenizers` and look at what it learns;
# 2. we **convert our trained GPT into a `GPT2LMHeadModel`**, save it with a tokenizer, load
#    it back with the `Auto*` classes, and check that it computes the same logits and the same
#    perplexity;
# 3. we generate with `model.generate` (greedy, beam search, sampling, `no_repeat_ngram_size`)
#    and with `pipeline("text-generation")`;
# 4. with a network (in Colab, say), `load_gpt2()` fetches the real 124M-parameter `gpt2`
#    from the Hub; without one it falls back to our converted model, so every cell runs either
#    way.

# %%
import math
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import torch

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="IProgress not found")
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

from transformer_course.gpt import (
    evaluate, generate, lm_loss, load_checkpoint, load_python_docs, train_val_split,
)
from transformer_course.hf_gpt2 import (
    bpe_merges, gpt2_source, hf_char_tokenizer, hf_state_dict, load_gpt2, to_hf, to_hf_config,
    train_bpe,
)
from transformer_course.utils import count_parameters, set_seed, show_source

g = set_seed(0)
transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bars on the page
print("transformers", transformers.__version__.split(".")[0] + ".x")

# %% [markdown]
# ## Byte-level BPE
#
# Characters make long sequences (a character model spends one position on every character), whole
# words make a huge vocabulary that still misses new words. **Byte-pair encoding** sits in
# between: start from single symbols, then repeatedly merge the most frequent *adjacent pair*
# into a new symbol, until the vocabulary has the size you want. Frequent words end up as one
# token, rare words as several pieces, and nothing is ever unknown.
#
# GPT-2's variant starts from the 256 possible **bytes** of UTF-8 text rather than from
# characters, so *any* string can be encoded, emoji included. Its vocabulary is
# 256 bytes + 50,000 merges + one special token `<|endoftext|>` = 50,257. We train a much
# smaller one (2,000 tokens) on the training part of the same Python documentation.

# %%
text = load_python_docs()
train_text, val_text = train_val_split(text)
bpe = train_bpe(train_text, vocab_size=2000)
merges = bpe_merges(bpe)
print(f"vocabulary {bpe.get_vocab_size()}: 256 bytes + 1 special token + {len(merges)} merges")
assert bpe.get_vocab_size() == 256 + 1 + len(merges) == 2000

# %% [markdown]
# The byte-level pre-tokenizer first splits text into words (a space stays attached to the
# word after it) and writes every byte as a printable character: a space shows as `Ġ`, a
# newline as `Ċ`. The first merges are the most frequent pairs of the whole text. In Python's
# documentation these are pairs of spaces (indentation) and of dashes (`--` lines), then
# pieces of common words, which soon grow into whole words such as `Ġthe`:

# %%
print(bpe.encode(" \n").tokens)
for i, (a, b) in enumerate(merges[:12]):
    print(f"merge {i:2}: {a!r:8} + {b!r:6} -> {a + b!r}")
assert bpe.encode(" \n").tokens == ["Ġ", "Ċ"] and ("Ġt", "he") in merges[:20]

# %% [markdown]
# The first merge is no mystery: count all adjacent pairs ourselves, over the same
# pre-tokenized words, and the most frequent pair is the one the trainer merged first.

# %%
word_counts = Counter(
    word for line in train_text.splitlines(keepends=True) for word, _ in bpe.pre_tokenizer.pre_tokenize_str(line)
)
pair_counts = Counter()
for word, n in word_counts.items():
    for a, b in zip(word, word[1:]):
        pair_counts[a, b] += n
(top_pair, top_n), (second_pair, second_n) = pair_counts.most_common(2)
print(f"most frequent pair {top_pair} seen {top_n:,} times (next: {second_pair}, {second_n:,})")
assert top_pair == merges[0]

# %% [markdown]
# Token ids and the round trip. Decoding the ids gives back the exact text, including
# characters the tokenizer never saw in training (they are spelled out byte by byte):

# %%
sentence = 'The "return" statement leaves the current function call.'
enc = bpe.encode(sentence)
print(enc.tokens)
print(enc.ids)
for s in (sentence, "    for x in range(10):\n        print(x)", "caf\u00e9 \u2615 na\u00efve"):
    assert bpe.decode(bpe.encode(s).ids) == s
print(bpe.encode("caf\u00e9 \u2615").tokens, "<- 'é' is 2 bytes, the coffee cup 3")

# %% [markdown]
# Common words of this text are single tokens; rare ones are split into pieces:

# %%
words = [" function", " statement", " object", " argument", " exception",
         " zeppelin", " photosynthesis", " serendipity"]
for w in words:
    print(f"{w!r:17} -> {bpe.encode(w).tokens}")
assert all(len(bpe.encode(w).tokens) == 1 for w in words[:5])
assert all(len(bpe.encode(w).tokens) >= 3 for w in words[5:])

# %% [markdown]
# The payoff is shorter sequences: on the validation text each BPE token covers several
# characters, so a model with the same context length sees several times more text.

# %%
val_tokens = len(bpe.encode(val_text).ids)
print(f"validation text: {len(val_text):,} characters -> {val_tokens:,} BPE tokens "
      f"({len(val_text) / val_tokens:.2f} characters per token)")
assert len(val_text) / val_tokens > 2.5

# %% [markdown]
# ## Our GPT as a `GPT2LMHeadModel`
#
# We take the longer-trained GPT of chapter 10 and map it onto GPT-2's configuration. The
# names differ (`n_embd` for `d_model`, `n_positions` for `block_size`, `n_inner` for `d_ff`);
# the one real choice is the activation: the original GPT-2 used a tanh approximation of GELU
# (`"gelu_new"`), our feed-forward uses the exact GELU, so the config says `"gelu"`.

# %%
ours, char_tok, record = load_checkpoint()
hf_config = to_hf_config(ours.config)
names = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function")
print({k: getattr(hf_config, k) for k in names})

# %% [markdown]
# GPT-2 was written with a layer it calls `Conv1D`, which is a linear layer that stores its
# weight the other way round: `nn.Linear` keeps $W$ as `(out, in)` and computes $xW^\top + b$,
# `Conv1D` keeps `(in, out)` and computes $xW + b$. Every matrix must therefore be transposed.
# GPT-2 also computes query, key and value with one fused matrix `c_attn` of width
# $3 \cdot d_{model}$, where we have three.

# %%
from transformers.pytorch_utils import Conv1D

lin = ours.blocks[0].ff.linear1
conv = Conv1D(nf=lin.out_features, nx=lin.in_features)
with torch.no_grad():
    conv.weight.copy_(lin.weight.T)
    conv.bias.copy_(lin.bias)
    v = torch.randn(3, lin.in_features, generator=g)
    print("Linear weight", tuple(lin.weight.shape), "| Conv1D weight", tuple(conv.weight.shape),
          "| same output:", torch.allclose(lin(v), conv(v), atol=1e-6))
    assert torch.allclose(lin(v), conv(v), atol=1e-6)

# %%
show_source(hf_state_dict)

# %% [markdown]
# `to_hf` builds a `GPT2LMHeadModel` from the config and loads these tensors with
# `strict=True`, so a single missing or misnamed weight would be an error.

# %%
hf_model = to_hf(ours)
print(type(hf_model).__name__, f"{count_parameters(hf_model):,} parameters (ours: {count_parameters(ours):,})")
assert count_parameters(hf_model) == count_parameters(ours)

# %% [markdown]
# To be a proper Hugging Face model it needs a tokenizer that the `Auto*` classes can load.
# Our character tokenizer becomes a 🤗 fast tokenizer: a `WordLevel` model whose "words" are
# the 96 characters, a pre-tokenizer that splits text into single characters, and a decoder
# that glues them back together (`hf_char_tokenizer`). We save model and tokenizer into one
# directory and load both back, exactly as one would load a model from the Hub.

# %%
save_dir = Path(tempfile.mkdtemp()) / "gpt-python-docs"
hf_model.save_pretrained(save_dir)
hf_char_tokenizer(char_tok.chars, model_max_length=ours.config.block_size).save_pretrained(save_dir)
print(sorted(p.name for p in save_dir.iterdir()))

model = AutoModelForCausalLM.from_pretrained(save_dir).eval()
tokenizer = AutoTokenizer.from_pretrained(save_dir)
print(type(model).__name__, "+", type(tokenizer).__name__)

# %%
prompt = 'The "while" statement'
batch = tokenizer(prompt, return_tensors="pt")
print(batch["input_ids"][0].tolist())
assert batch["input_ids"][0].tolist() == char_tok.encode(prompt)
assert tokenizer.decode(batch["input_ids"][0]) == prompt

# %% [markdown]
# The same logits: the largest difference on a batch of validation windows is at the level
# of float32 rounding.

# %% tags=["nbval-ignore-output"]
val_ids = torch.tensor(char_tok.encode(val_text))
block = ours.config.block_size
windows = val_ids[: (len(val_ids) // block) * block].view(-1, block)
assert block == 128
with torch.no_grad():
    max_diff = (model(windows[:8]).logits - ours(windows[:8])).abs().max().item()
print(f"max |logits(HF) - logits(ours)| = {max_diff:.1e}" if max_diff > 0 else "logits identical")
assert max_diff <= 1e-4

# %% [markdown]
# ## Perplexity, two ways
#
# Perplexity is $\exp$ of the mean next-token cross-entropy. We cut the validation text into
# windows of 128 characters (the model's context) and score, in each window, characters 2..128
# from the ones before them: once with our model and `lm_loss`, once through Hugging Face,
# whose models compute that loss themselves when given `labels` (they shift the labels by one
# internally, so `labels=input_ids` is correct).

# %%
def perplexity_ours(m, windows, batch_size=32):
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(windows), batch_size):
            w = windows[i : i + batch_size]
            total += lm_loss(m(w)[:, :-1], w[:, 1:]).item() * len(w)
    return math.exp(total / len(windows))


def perplexity_hf(m, windows, batch_size=32):
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(windows), batch_size):
            w = windows[i : i + batch_size]
            total += m(input_ids=w, labels=w).loss.item() * len(w)
    return math.exp(total / len(windows))


ppl_ours, ppl_hf = perplexity_ours(ours, windows), perplexity_hf(model, windows)
print(f"{len(windows)} windows: perplexity {ppl_ours:.4f} (ours) vs {ppl_hf:.4f} (Hugging Face)")
print(f"= {math.log(ppl_ours):.4f} nats per character")
assert abs(ppl_ours - ppl_hf) < 1e-3

# %% [markdown]
# The mean hides how much the context helps. Per position in the window, the first characters
# are predicted from almost nothing and cost far more than the later ones; the curves of the
# two implementations lie on top of each other.

# %%
def loss_by_position(logits: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), w[:, 1:], reduction="none")
    return nll.mean(dim=0)  # average over windows: one value per predicted position


with torch.no_grad():
    pos_ours = loss_by_position(ours(windows), windows)
    pos_hf = loss_by_position(model(windows).logits, windows)
fig, ax = plt.subplots(figsize=(6.5, 3.2))
ax.plot(range(1, block), pos_ours.numpy(), lw=3, alpha=0.5, label="our GPT")
ax.plot(range(1, block), pos_hf.numpy(), "--", color="black", lw=1, label="GPT2LMHeadModel")
ax.set_xscale("log")
ax.set_xlabel("characters of context")
ax.set_ylabel("loss (nats per character)")
ax.set_title("Validation loss by amount of context")
ax.legend()
fig.tight_layout()
plt.show()
print(f"with 1 character of context {pos_ours[0]:.2f} nats, with 100 or more {pos_ours[99:].mean():.2f}")
assert torch.allclose(pos_ours, pos_hf, atol=1e-4) and pos_ours[0] > 2 * pos_ours[99:].mean()

# %% [markdown]
# Chapter 10's `evaluate` gives nearly the same value: its windows overlap by one character,
# so it also scores the first character of every window.

# %%
val_loss = evaluate(ours, val_ids)
print(f"evaluate(): {val_loss:.4f} nats per character")
assert abs(val_loss - math.log(ppl_ours)) < 0.01

# %% [markdown]
#
# ## Generating with `model.generate`
#
# `generate` implements every strategy of chapter 10 and more, behind keyword arguments. It
# counts `max_new_tokens` *after* the prompt; the older `max_length` (used in the course's
# source notebook) counts the prompt too, a frequent surprise. Unlike our `generate`, which
# slides its window along, a GPT-2 cannot go past its `n_positions` (here 128): prompt and new
# tokens must fit. Greedy decoding must agree with ours token for token:

# %%
ids, mask = batch["input_ids"], batch["attention_mask"]
n_new = 100  # prompt + new tokens must fit into the model's 128 positions
greedy_hf = model.generate(ids, attention_mask=mask, max_new_tokens=n_new, do_sample=False)
greedy_ours = generate(ours, ids, n_new)
print(tokenizer.decode(greedy_hf[0]))
assert torch.equal(greedy_hf, greedy_ours)
short = model.generate(ids, attention_mask=mask, max_length=30, do_sample=False)
print(f"prompt {ids.shape[1]} tokens; max_length=30 returns {short.shape[1]} tokens in all, "
      f"{short.shape[1] - ids.shape[1]} of them new")
assert short.shape[1] == 30

# %% [markdown]
# **Beam search** (`num_beams=4`) keeps the 4 most likely partial texts at every step instead
# of one, and returns the most likely complete one. It looks further ahead than greedy
# decoding, so it finds texts with a higher total probability (exercise 1 checks this). Beam
# search shines where there is one right answer, such as translation; for open-ended writing
# the most probable text is often a bland one, and sampling is the usual choice.

# %%
beam = model.generate(ids, attention_mask=mask, max_new_tokens=n_new, num_beams=4, do_sample=False)
print(tokenizer.decode(beam[0]))
assert beam.shape == greedy_hf.shape

# %% [markdown]
# Sampling uses PyTorch's global random generator, so we seed it before each call. `top_k`,
# `top_p` and `temperature` are the filters of chapter 10. (Note that Hugging Face applies a
# default `top_k=50` whenever `do_sample=True`, unless the model's generation config says
# otherwise; we pass `top_k=0` to switch it off where we mean pure temperature or top-p.)

# %%
def sample(**kwargs):
    torch.manual_seed(0)
    return model.generate(ids, attention_mask=mask, max_new_tokens=30, do_sample=True, **kwargs)


print("do_sample=True alone is top-k with k = 50:", torch.equal(sample(), sample(top_k=50)))
assert torch.equal(sample(), sample(top_k=50))

# %%
sampling = {
    "top-k, k = 5": dict(top_k=5),
    "top-p, p = 0.9": dict(top_p=0.9, top_k=0),
    "temperature 0.7": dict(temperature=0.7, top_k=0),
}
for name, kwargs in sampling.items():
    torch.manual_seed(0)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=n_new, do_sample=True, **kwargs)
    print(f"--- {name} ---\n{tokenizer.decode(out[0])}\n")
    assert out.shape == (1, ids.shape[1] + n_new)

# %% [markdown]
# `no_repeat_ngram_size=n` forbids any $n$ tokens from appearing twice. For GPT-2's word-level
# tokens that stops loops like "the the the". For a *character* model it is a blunt tool:
# with $n = 4$ the text may never repeat `" the"` or `"tion"`, and it quickly has to invent
# odd spellings.

# %%
blocked = model.generate(ids, attention_mask=mask, max_new_tokens=n_new, no_repeat_ngram_size=4)
blocked_text = tokenizer.decode(blocked[0])
print(blocked_text)
grams = [tuple(blocked[0, i : i + 4].tolist()) for i in range(blocked.shape[1] - 3)]
assert len(grams) == len(set(grams))  # no 4 characters repeat anywhere

# %% [markdown]
# The `pipeline` wraps tokenizer, model and decoding into one call, here on our local model:

# %%
generator = pipeline("text-generation", model=model, tokenizer=tokenizer, device="cpu")
result = generator(prompt, max_new_tokens=80, do_sample=False)
print(result[0]["generated_text"])
assert result[0]["generated_text"] == tokenizer.decode(greedy_hf[0, : ids.shape[1] + 80])

# %% [markdown]
# ## The real GPT-2, when there is a network
#
# `load_gpt2()` decides where its model comes from. If offline use is forced
# (`TRANSFORMER_COURSE_OFFLINE=1` or `HF_HUB_OFFLINE=1`, as in the course's CI) it does not
# touch the network at all; otherwise it tries to open a connection to the Hub for at most a
# few seconds. With an answer it downloads `gpt2` (about half a gigabyte); without one it returns
# chapter 10's model converted as above. It prints which one it loaded.

# %%
show_source(load_gpt2)

# %% [markdown]
# The decision itself, `gpt2_source`, takes the environment and the network check as
# arguments, so it can be tried out without a network (the package's tests do the same):

# %%
from transformer_course.pretrained import DEFAULT_PROBE_TIMEOUT


def must_not_probe():
    raise AssertionError("offline was forced, the network must not be touched")


cases = {
    "TRANSFORMER_COURSE_OFFLINE=1": gpt2_source({"TRANSFORMER_COURSE_OFFLINE": "1"}, must_not_probe),
    "no network": gpt2_source({}, lambda: False),
    "network available": gpt2_source({}, lambda: True),
}
for case, source in cases.items():
    print(f"{case:30} -> {source}")
print(f"the real network check gives up after {DEFAULT_PROBE_TIMEOUT:.0f} s")
assert list(cases.values()) == ["course", "course", "hub"] and DEFAULT_PROBE_TIMEOUT <= 5

# %% tags=["nbval-ignore-output"]
gpt2, gpt2_tokenizer, source = load_gpt2()
print("source:", source)
assert source in ("hub", "course")
assert type(gpt2).__name__ == "GPT2LMHeadModel" and not gpt2.training

# %% [markdown]
# The same code now runs on whichever model was loaded. With the real GPT-2 the continuation
# is fluent English about whatever the prompt suggests; with the course's model it is
# documentation-style text, one character per token. What holds either way, and is checked:
# the output starts with the prompt and has exactly the number of new tokens asked for
# (`min_new_tokens` stops GPT-2 from ending early at `<|endoftext|>`).

# %% tags=["nbval-ignore-output"]
prompt2 = "In Python, a list comprehension"
enc2 = gpt2_tokenizer(prompt2, return_tensors="pt")
n_new = 40
torch.manual_seed(0)
out2 = gpt2.generate(**enc2, max_new_tokens=n_new, min_new_tokens=n_new, do_sample=True, top_p=0.9, top_k=0)
continuation = gpt2_tokenizer.decode(out2[0])
print(continuation)
assert continuation.startswith(prompt2)
assert out2.shape[1] == enc2["input_ids"].shape[1] + n_new
print(f"\nthe prompt is {enc2['input_ids'].shape[1]} tokens for this tokenizer")

# %% [markdown]
# ## Exercises
#
# **1. Is beam search more likely?** Compute the total log-probability that our model assigns
# to the 100 generated characters of the greedy text and of the beam-search text above.
# Which is higher? (Beam search maximises this sum approximately, greedy decoding only step
# by step.)

# %% tags=["solution"]
def continuation_logprob(m, seq: torch.Tensor, n_prompt: int) -> float:
    with torch.no_grad():
        logp = m(seq).log_softmax(-1)  # our GPT returns the logits directly
    targets = seq[0, n_prompt:]
    return logp[0, n_prompt - 1 : -1].gather(-1, targets[:, None]).sum().item()


lp_greedy = continuation_logprob(ours, greedy_hf, ids.shape[1])
lp_beam = continuation_logprob(ours, beam, ids.shape[1])
print(f"log-probability: greedy {lp_greedy:.2f}, beam search {lp_beam:.2f}")
assert lp_beam >= lp_greedy - 1e-3

# %% [markdown]
# **2. Vocabulary size against sequence length.** Train BPE tokenizers with 500, 1000 and
# 4000 tokens and measure the characters per token on the validation text. How does the
# compression grow?

# %% tags=["solution"]
ratios = {}
for size in (500, 1000, 4000):
    t = train_bpe(train_text, vocab_size=size)
    ratios[size] = len(val_text) / len(t.encode(val_text).ids)
    print(f"vocabulary {size:5}: {ratios[size]:.2f} characters per token")
assert ratios[500] < ratios[1000] < ratios[4000]

# %% [markdown]
# **3. The other direction.** Write `from_hf(hf_model)`, which turns a `GPT2LMHeadModel` back
# into the course's `GPT` (un-fuse `c_attn`, transpose back), and check it on our converted
# model. (With it, the real GPT-2's weights load into our own code; its logits then differ
# slightly, because GPT-2 uses the tanh approximation of GELU.)

# %% tags=["solution"]
from transformer_course.gpt import GPT, GPTConfig


def from_hf(hf) -> GPT:
    c = hf.config
    cfg = GPTConfig(vocab_size=c.vocab_size, block_size=c.n_positions, n_layer=c.n_layer, n_head=c.n_head,
                    d_model=c.n_embd, d_ff=c.n_inner or 4 * c.n_embd, eps=c.layer_norm_epsilon)
    m = GPT(cfg)
    sd = hf.state_dict()
    d = c.n_embd
    with torch.no_grad():
        m.tok_emb.weight.copy_(sd["transformer.wte.weight"])
        m.pos_emb.weight.copy_(sd["transformer.wpe.weight"])
        m.norm.weight.copy_(sd["transformer.ln_f.weight"])
        m.norm.bias.copy_(sd["transformer.ln_f.bias"])
        for i, blk in enumerate(m.blocks):
            p = f"transformer.h.{i}."
            w, b = sd[p + "attn.c_attn.weight"], sd[p + "attn.c_attn.bias"]
            for j, lin in enumerate((blk.self_attn.W_q, blk.self_attn.W_k, blk.self_attn.W_v)):
                lin.weight.copy_(w[:, j * d : (j + 1) * d].T)
                lin.bias.copy_(b[j * d : (j + 1) * d])
            blk.self_attn.W_o.weight.copy_(sd[p + "attn.c_proj.weight"].T)
            blk.self_attn.W_o.bias.copy_(sd[p + "attn.c_proj.bias"])
            blk.ff.linear1.weight.copy_(sd[p + "mlp.c_fc.weight"].T)
            blk.ff.linear1.bias.copy_(sd[p + "mlp.c_fc.bias"])
            blk.ff.linear2.weight.copy_(sd[p + "mlp.c_proj.weight"].T)
            blk.ff.linear2.bias.copy_(sd[p + "mlp.c_proj.bias"])
            for ours_ln, name in ((blk.norm1, "ln_1"), (blk.norm2, "ln_2")):
                ours_ln.weight.copy_(sd[p + name + ".weight"])
                ours_ln.bias.copy_(sd[p + name + ".bias"])
    return m.eval()


back = from_hf(model)
with torch.no_grad():
    round_trip = (back(windows[:4]) - ours(windows[:4])).abs().max().item()
print("round trip HF -> ours: logits equal:", round_trip <= 1e-5)
assert round_trip <= 1e-5
print("GPT-2's default activation:", transformers.GPT2Config().activation_function)
assert transformers.GPT2Config().activation_function == "gelu_new"
