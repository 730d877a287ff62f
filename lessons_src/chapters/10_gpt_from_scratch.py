# %% [markdown]
# # 10 — GPT from scratch
#
# A GPT is a decoder-only transformer (BERT, chapter 12, is the other one-stack kind,
# encoder-only): **one** stack of blocks, each block a
# *causal* self-attention (a position may only look at itself and the positions before it)
# followed by a feed-forward network. It is trained on a single task, *predict the next token*,
# over and over on raw text, and once trained it writes by feeding its own predictions back in.
#
# This chapter builds GPT-2's design out of the pieces of the earlier chapters, trains a small
# one on Shakespeare's plays, character by character, and then generates with a larger model
# trained for longer: greedy decoding, temperature, top-k and top-p sampling, and
# a KV cache that makes generation faster.
#
# ```{note}
# GPT is often called "the decoder part of the Transformer". It is a decoder *without
# cross-attention*, since there is no encoder to attend to. A GPT-2 block is a pre-norm
# encoder layer (chapter 07) with a GELU (GPT-2 uses its tanh approximation), run with a
# causal mask (chapter 08), as we check below. It also differs from the 2017 paper's decoder layer in where it normalises: the
# paper's layer is post-norm, as GPT-1's was, while GPT-2 normalises *before* each sub-layer.
# ```

# %%
import dataclasses
import math
import re
import textwrap
import time

import matplotlib.pyplot as plt
import torch
from IPython.display import display

from transformer_course.attention import KVCache
from transformer_course.diagrams import gpt_model, kv_cache
from transformer_course.generation import (
    generate,
    next_token_probs,
    top_k_filter,
    top_p_filter,
)
from transformer_course.gpt import (
    GPT,
    MLP,
    Block,
    CausalSelfAttention,
    GPTConfig,
    lm_loss,
)
from transformer_course.masking import causal_mask
from transformer_course.tasks.shakespeare import (
    CHARS,
    load_shakespeare,
    split_plays,
)
from transformer_course.tokenization import CharTokenizer
from transformer_course.train_gpt import (
    evaluate,
    get_batch,
    load_checkpoint,
    train,
)
from transformer_course.training import param_groups, warmup_decay
from transformer_course.transformer import EncoderLayer
from transformer_course.utils import (
    Table,
    count_parameters,
    print_wrapped,
    set_seed,
    show_source,
)

# %%
# the same random numbers on every run (g: a seeded torch.Generator)
g = set_seed(0)

# %% [markdown]
# ## The data: Shakespeare's plays
#
# A character-level model learns best from text whose patterns lie within a few dozen
# characters: spelling, metre, the shape of a speech. Shakespeare's plays have all of that, and
# they are the classic text for this exercise (Karpathy's char-rnn and nanoGPT both start
# from them). We use all 37 plays, about 4.8 million characters. The plays are in the public
# domain; this copy is Project Gutenberg's e-text as the Open Knowledge Foundation published it
# (licensed Creative Commons Attribution 2.5). Each speech starts with its speaker's name on a
# line of its own, in capitals in most plays (a few write it otherwise: *Hamlet* abbreviates
# it, `Ham.`, and *Romeo and Juliet* writes `Romeo.`):

# %%
text = load_shakespeare()
tok = CharTokenizer(CHARS)
print(f"{len(text):,} characters, vocabulary of {tok.vocab_size}")
i = text.index("SCENE III. A heath.")
print(text[i : i + 330])

# %% tags=["remove-cell"]
assert set(text) <= set(CHARS) and tok.vocab_size == 96

# %% [markdown]
# We read it **character by character**. The alphabet is fixed, 96 characters: newline and the
# 95 printable ASCII characters, so that a model can be given any plain ASCII text without
# tabs; the plays use 83 of them. A character's id is its place in that list:

# %%
ids = tok.encode("ROMEO.")
print(ids)
print(tok.decode(ids))
print(f"the plays use {len(set(text))} of the {tok.vocab_size} characters")

# %% tags=["remove-cell"]
assert tok.decode(ids) == "ROMEO." and len(set(text)) == 83

# %% [markdown]
# The plays come one after another, roughly in alphabetical order, from *All's Well That Ends
# Well* to *The Winter's Tale*. We hold out the last plays, whole, for validation: the text is cut at the
# start of the play in which its last 10% begins. That leaves 11% of the text, *Troilus and
# Cressida*, *Twelfth Night*, *The Two Gentlemen of Verona* and *The Winter's Tale*, four plays
# the model never trains on; the other 33 are the training text.

# %%
train_text, val_text = split_plays(text, val_fraction=0.1)
train_ids = torch.tensor(tok.encode(train_text))
val_ids = torch.tensor(tok.encode(val_text))
print(
    f"train {len(train_ids):,} characters, "
    f"validation {len(val_ids):,} characters"
)
print(f"validation: {len(val_ids) / len(text):.1%} of the text, starting with")
print(repr(val_text[:60]))

# %% tags=["remove-cell"]
line = "If music be the food of love, play on"  # Twelfth Night's first line
assert line in val_text and line not in train_text

# %% tags=["remove-cell"]
# Hamlet's speakers are abbreviated, and his line reads so in training text
hamlet = "\n\nHam.\nTo be, or not to be,--that is the question"
assert hamlet in train_text and "\nHAMLET.\n" not in text
# Romeo's speeches are headed "Romeo.", never "ROMEO."
assert "\n\nRomeo.\n" in train_text and "\nROMEO.\n" not in text
heads = re.findall(r"\n\n([A-Za-z][A-Za-z .']{0,30})\.\n", train_text)
assert sum(h.isupper() for h in heads) > 0.8 * len(heads)  # most in capitals

# %% [markdown]
# A training example is a window of the text; the target at each position is the *next*
# character. A window of $n$ characters therefore holds $n$ prediction problems, each with a
# different amount of context. `get_batch` cuts `batch_size` windows at random places of the
# text, and the targets are the same windows shifted by one character. The first four
# problems of a window of 24 characters:

# %%
x, y = get_batch(train_ids, batch_size=2, block_size=24, generator=g)
for t in range(4):
    context = tok.decode(x[0, : t + 1])
    target = tok.decode(y[0, t : t + 1])
    print(f"context {context!r:8} -> next {target!r}")

# %% tags=["remove-cell"]
assert torch.equal(x[:, 1:], y[:, :-1])

# %% [markdown]
# Written out, `get_batch` is a few lines: draw where each window starts, then slice the
# inputs there and the targets one character later. With the same seed it cuts the same
# windows as the package's version:


# %%
def cut_windows(data, batch_size, block_size, generator=None):
    n = len(data) - block_size  # the last window must leave room for y
    starts = torch.randint(n, (batch_size,), generator=generator)
    x = torch.stack([data[s : s + block_size] for s in starts])
    y = torch.stack([data[s + 1 : s + block_size + 1] for s in starts])
    return x, y


mine = cut_windows(train_ids, 4, 64, torch.Generator().manual_seed(0))
theirs = get_batch(train_ids, 4, 64, torch.Generator().manual_seed(0))
same = all(torch.equal(a, b) for a, b in zip(mine, theirs))
print("the same windows as get_batch:", same)

# %% tags=["remove-cell"]
assert same

# %% [markdown]
# ## The model
#
# GPT-2's design, from the bottom up:
#
# 1. **token embedding + learned position embedding**: GPT-2 learns one vector per position
#    (up to `block_size`) instead of the sinusoids of chapter 03;
# 2. **`n_layer` pre-norm blocks**: `x = x + attn(norm1(x))`, then `x = x + mlp(norm2(x))`,
#    with causal multi-head self-attention and a feed-forward network with a GELU;
# 3. a **final LayerNorm**, because a pre-norm stack leaves the residual stream unnormalised;
# 4. an **output head that reuses the token embedding matrix** (tied weights): the same
#    vectors that read tokens in score them on the way out.
#
# Chapter 07 drew this decoder-only stack in outline (Fig. 7.6, right). Fig. 10.1 draws it
# in full, bottom-up, with the sizes of the small model we train below.

# %% tags=["hide-input"] caption="The GPT of this chapter, bottom-up: token and position embeddings, 4 pre-norm blocks (the dashed frame holds one, repeated 4 times), a final LayerNorm and an output head that reuses the token embedding's matrix (dashed red line). In each block, LayerNorm comes before the sub-layer, and the residual connection adds the sub-layer's output back to the unnormalised stream." alt="A column of boxes read from the bottom: tokens; token + position embedding; inside a dashed frame marked times 4, LayerNorm, causal self-attention with 4 heads, a circled plus, LayerNorm, MLP (GELU), a circled plus, with grey lines carrying the input of each pair around it to its plus; then LayerNorm and the output head. A red dashed line joins the output head to the embedding, labelled tied: one matrix. Notes on the right give the sizes: 96 token and 64 learned position vectors, 128 wide; x + attention(LN(x)); x + MLP(LN(x)), 128 to 512 to 128 wide; a score for each of the 96 tokens."
gpt_model(n_layer=4, n_head=4, d_model=128, block_size=64, vocab_size=96)
plt.show()

# %% [markdown]
# The block is one we already have. Chapter 07's `EncoderLayer` with `norm_first=True` and
# `activation="gelu"` is a GPT-2-style block as soon as it gets a causal mask (GPT-2 itself
# uses the tanh approximation of the GELU). On a small example,
# changing the *last* input position must leave every earlier output unchanged:

# %%
block = EncoderLayer(
    d_model=16,
    num_heads=2,
    d_ff=64,
    dropout=0.0,
    activation="gelu",
    norm_first=True,
).eval()
h = torch.randn(1, 5, 16, generator=g)
h2 = h.clone()
h2[0, 4] = torch.randn(16, generator=g)  # a different last token
mask = causal_mask(5)
print(mask[0, 0].int())
same = torch.allclose(block(h, mask)[:, :4], block(h2, mask)[:, :4])
# no mask: the future leaks in
leaks = not torch.allclose(block(h)[:, :4], block(h2)[:, :4])
print(
    "causal: earlier outputs unchanged:",
    same,
    "| without the mask they change:",
    leaks,
)

# %% tags=["remove-cell"]
assert same and leaks

# %% [markdown]
# The package's `Block` computes the same thing, written the way nanoGPT writes it: one fused
# matrix `qkv` projects to queries, keys and values at once (a single matrix multiplication of
# width $3 d_\text{model}$ instead of three; GPT-2's own code does the same, in a matrix it calls
# `c_attn`), PyTorch's fused attention is told `is_causal=True` instead of being handed a mask
# tensor, and the LayerNorm is PyTorch's (chapter 06 showed ours equals it). Put the encoder
# layer's weights into a `Block`, stacking $W_Q, W_K, W_V$ into `qkv`, and the two give the
# same outputs:

# %%
# d_ff = 4 * 16 = 64 and GELU, as in the encoder layer above
gpt_block = Block(GPTConfig(d_model=16, n_head=2)).eval()
sa, ff = block.self_attn, block.ff
with torch.no_grad():
    qkv, W = gpt_block.attn.qkv, (sa.W_q, sa.W_k, sa.W_v)
    qkv.weight.copy_(torch.cat([w.weight for w in W]))  # stacked rows
    qkv.bias.copy_(torch.cat([w.bias for w in W]))
    same = {
        "attn.proj": sa.W_o,
        "mlp.fc": ff.linear1,
        "mlp.proj": ff.linear2,
        "norm1": block.norm1,
        "norm2": block.norm2,
    }
    for name, part in same.items():
        gpt_block.get_submodule(name).load_state_dict(part.state_dict())
    gap = (gpt_block(h) - block(h, mask)).abs().max().item()
print(f"Block vs EncoderLayer + causal mask, largest difference {gap:.0e}")

# %% tags=["remove-cell"]
assert gap < 1e-6

# %% [markdown]
# With the block in hand, a whole GPT is a few lines: embeddings, the stack of causal blocks,
# a final LayerNorm, and the tied head, which is a product with the token embedding matrix.


# %%
class MiniGPT(torch.nn.Module):
    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.tok_emb = torch.nn.Embedding(c.vocab_size, c.d_model)
        self.pos_emb = torch.nn.Embedding(c.block_size, c.d_model)
        self.layers = torch.nn.ModuleList(
            EncoderLayer(
                c.d_model,
                c.n_head,
                4 * c.d_model,
                dropout=0.0,
                activation="gelu",
                norm_first=True,
            )
            for _ in range(c.n_layer)
        )
        self.norm = torch.nn.LayerNorm(c.d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.size(1)
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(n))
        mask = causal_mask(n)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x) @ self.tok_emb.weight.T  # tied head


# %% [markdown]
# The package's `GPT` computes the same function. Copy the weights of a `GPT` into a
# `MiniGPT`, splitting the fused `qkv` back into $W_Q, W_K, W_V$, and the two give the same
# logits:

# %%
small = GPTConfig(
    vocab_size=96, block_size=16, n_layer=2, n_head=2, d_model=32
)
gpt, mini = GPT(small).eval(), MiniGPT(small).eval()
with torch.no_grad():
    for name in ("tok_emb", "pos_emb", "norm"):
        mini.get_submodule(name).load_state_dict(
            gpt.get_submodule(name).state_dict()
        )
    for src, dst in zip(gpt.blocks, mini.layers):
        sa, ff = dst.self_attn, dst.ff
        rows = zip(src.attn.qkv.weight.chunk(3), src.attn.qkv.bias.chunk(3))
        for lin, (w, b) in zip((sa.W_q, sa.W_k, sa.W_v), rows):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        pairs = {
            sa.W_o: src.attn.proj,
            ff.linear1: src.mlp.fc,
            ff.linear2: src.mlp.proj,
            dst.norm1: src.norm1,
            dst.norm2: src.norm2,
        }
        for mine, theirs in pairs.items():
            mine.load_state_dict(theirs.state_dict())
    tokens = torch.randint(0, 96, (2, 16), generator=g)
    gap = (mini(tokens) - gpt(tokens)).abs().max().item()
print(f"MiniGPT vs GPT, largest difference of the logits {gap:.0e}")

# %% tags=["remove-cell"]
assert gap < 1e-5

# %% [markdown]
# Its listing, with the feed-forward network `MLP` that `Block` uses, has one more argument to
# `forward`: a `cache`, which we use at the end of the chapter (`check_context` returns the number
# of positions already cached). It also sets the initial weights, which `MiniGPT` leaves at PyTorch's defaults; the next cells show why that
# matters.

# %%
show_source(GPTConfig, checks=False)

# %%
show_source(CausalSelfAttention, checks=False)

# %%
show_source(MLP, checks=False)

# %%
show_source(Block, checks=False)

# %%
show_source(GPT, checks=False)

# %% [markdown]
# The model we train here is small: 4 blocks, 4 heads, a 128-wide residual stream and a context
# of 64 characters.

# %%
config = GPTConfig(
    vocab_size=tok.vocab_size, block_size=64, n_layer=4, n_head=4, d_model=128
)
model = GPT(config)
parts = {
    "token embedding (= output head)": model.tok_emb.weight.numel(),
    "position embedding": model.pos_emb.weight.numel(),
    "4 blocks": sum(p.numel() for p in model.blocks.parameters()),
    "final LayerNorm": sum(p.numel() for p in model.norm.parameters()),
}
# each block: qkv (d x 3d) and proj (d x d) with biases, two MLP matrices
# d*4d (+ biases), two LayerNorms
d = config.d_model
per_block = 4 * (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d) + 4 * d
Table(
    ["part", "parameters"],
    [
        *parts.items(),
        ("total", count_parameters(model)),
        ("4 blocks, by the formula", 4 * per_block),
    ],
    formats={"parameters": ","},
)

# %% tags=["remove-cell"]
# the output head is the token embedding itself (tied), so it adds nothing
assert model.lm_head.weight is model.tok_emb.weight

# %% tags=["remove-cell"]
assert sum(parts.values()) == count_parameters(model)
assert parts["4 blocks"] == 4 * per_block

# %% [markdown]
# Tying the head to the embedding saves a second $96 \times 128$ matrix: 12,288 parameters,
# 1.5% of this model. With a large vocabulary it matters more: GPT-2's smallest model ties a
# $50{,}257 \times 768$ matrix, 38.6 million of its 124 million parameters.
#
# Before training, a model that knows nothing should spread its bets evenly over the 96
# characters, for a loss (cross-entropy in nats per character) of $\ln 96 \approx 4.56$.
# Small initial weights bring it close: every matrix and embedding is drawn from a normal
# distribution with standard deviation 0.02 (GPT-1's choice, kept by GPT-2 for its matrices and
# token embedding; nanoGPT, and we, use it for the position embedding too), so the logits
# start near zero and the softmax near uniform. `evaluate`, described in *Training*, scores
# windows spread evenly over the text, here 256 of them:

# %%
loss0 = evaluate(model, train_ids, max_windows=256)
print(
    f"loss at initialisation on 256 windows of the training text {loss0:.2f}, "
    f"ln 96 = {math.log(96):.2f}"
)
with torch.no_grad():
    xb, yb = get_batch(train_ids, 16, config.block_size, generator=g)
    logits0 = model(xb)
    torch.manual_seed(0)
    mini0 = MiniGPT(config)(xb)  # PyTorch's default initial weights
mean0 = logits0.mean().item()
print(f"logits: mean {mean0:.2f}, standard deviation {logits0.std():.2f}")
mini_loss0 = lm_loss(mini0, yb).item()
print(
    f"MiniGPT on the same batch: loss {mini_loss0:.1f}, "
    f"logits' standard deviation {mini0.std():.1f}"
)

# %% tags=["remove-cell"]
assert mini_loss0 > 10 * math.log(96) and abs(loss0 - math.log(96)) < 0.1

# %% [markdown]
# `MiniGPT`, with PyTorch's default initial weights, shows what the 0.02 prevents: its
# embeddings are drawn with standard deviation 1, and its head is tied to them, so its logits
# start large and its predictions confident and random, at a loss more than ten times
# $\ln 96$. Training it would first have to undo that.
#
# One exception to the 0.02 comes from GPT-2 (Radford et al., 2019, section 2.3). The
# residual stream is a sum: each block adds two outputs to it, the attention's `proj` and the
# MLP's `proj`. If these $2 \cdot n_\text{layer}$ contributions are independent, the variance
# of the stream grows with their number, so a deeper model would start with a larger
# stream. GPT-2 scales "the weights of residual layers at initialization by a factor of
# $1/\sqrt{N}$ where $N$ is the number of residual layers"; nanoGPT reads these as the two
# projections that write into the stream, $N = 2 \cdot n_\text{layer}$, and so does
# `GPT.__init__` above: it draws them with standard deviation
# $0.02/\sqrt{2 \cdot n_\text{layer}}$.

# %%
proj_std = model.blocks[0].attn.proj.weight.std().item()
qkv_std = model.blocks[0].attn.qkv.weight.std().item()
print(
    f"standard deviation of qkv {qkv_std:.4f}, of proj {proj_std:.4f} "
    f"= 0.02 / sqrt(2 x {config.n_layer})"
)

# %% tags=["remove-cell"]
assert abs(loss0 - math.log(96)) < 0.2
assert abs(proj_std - 0.02 / math.sqrt(2 * config.n_layer)) < 2e-4

# %% [markdown]
# Does the scaling matter? Build models of 1 to 48 blocks, run a batch of random characters
# through the blocks, and measure the residual stream's standard deviation after the last
# block, once with the scaled projections and once with every projection drawn with 0.02:


# %%
def stream_std(m: GPT, x: torch.Tensor) -> float:
    """Standard deviation of the residual stream after the last block."""
    with torch.no_grad():
        h = m.tok_emb(x) + m.pos_emb.weight[: x.size(1)]
        for b in m.blocks:
            h = b(h)
    return h.std().item()


x_rand = torch.randint(0, 96, (8, 64), generator=g)
depths = (1, 4, 16, 48)
stds = []
for n_layer in depths:
    set_seed(0)
    deep = GPT(GPTConfig(vocab_size=96, n_layer=n_layer, n_head=4))
    scaled = stream_std(deep, x_rand)
    with torch.no_grad():
        for b in deep.blocks:
            b.attn.proj.weight.normal_(0.0, 0.02)
            b.mlp.proj.weight.normal_(0.0, 0.02)
    stds.append((scaled, stream_std(deep, x_rand)))
display(
    Table(
        ["blocks", "scaled", "plain 0.02"],
        [(n, *pair) for n, pair in zip(depths, stds)],
        formats={"scaled": ".3f", "plain 0.02": ".3f"},
    )
)
print(
    f"48 blocks vs 1: {stds[-1][0] / stds[0][0]:.1f} times (scaled), "
    f"{stds[-1][1] / stds[0][1]:.1f} times (plain)"
)

# %% [markdown]
# With the scaling, the stream after 48 blocks is as large as after 1. Without it, the stream
# grows with the depth: 8.0 times from 1 to 48 blocks.

# %% [markdown]
# And the whole model is causal: changing the characters after position 40 leaves the logits
# of positions 0..40 exactly as they were.

# %%
model.eval()
with torch.no_grad():
    a = xb[:1].clone()
    b = a.clone()
    b[0, 41:] = torch.randint(0, 96, (config.block_size - 41,), generator=g)
    diff_past = (model(a)[0, :41] - model(b)[0, :41]).abs().max().item()
    diff_future = (model(a)[0, 41:] - model(b)[0, 41:]).abs().max().item()
print(
    f"largest change of a past logit {diff_past:.1e}, "
    f"of a later logit {diff_future:.1e}"
)

# %% tags=["remove-cell"]
assert diff_past < 1e-6 < diff_future

# %% [markdown]
# ## Training
#
# Text from an untrained model is noise. A model generates text one character at a time:
# crop the text to the last `block_size` characters, run the model, take the last position's
# logits, turn them into probabilities and draw one character from them; append it and
# repeat. (Dividing the logits by a *temperature* first, 1 unless set, is one of the ways to
# choose that the section *Generation* explores.) Written out, from the prompt `ROMEO.` and a
# newline (a heading in the capitals most plays use, though *Romeo and Juliet* itself writes
# `Romeo.`):


# %%
def sample(model, ids, n, temperature=1.0, generator=None):
    for _ in range(n):
        with torch.no_grad():
            logits = model(ids[:, -model.config.block_size :])[:, -1]
        probs = (logits / temperature).softmax(-1)
        nxt = torch.multinomial(probs, 1, generator=generator)
        ids = torch.cat([ids, nxt], dim=1)
    return ids


prompt = "ROMEO.\n"
start = torch.tensor([tok.encode(prompt)])
untrained = sample(
    model, start, 50, generator=torch.Generator().manual_seed(1)
)
print_wrapped(tok.decode(untrained[0]))

# %% [markdown]
# The package's `generate` runs the same loop, with greedy decoding, top-k and top-p and the
# KV cache of the chapter's last section added; the rest of the chapter uses it. With the same seed it
# draws the same characters:

# %%
rng = torch.Generator().manual_seed(1)
theirs = generate(
    model, start, 50, do_sample=True, use_cache=False, generator=rng
)
print("the same 50 characters as generate:", torch.equal(untrained, theirs))

# %% tags=["remove-cell"]
assert torch.equal(untrained, theirs)

# %% [markdown]
# Training repeats one step: draw a batch of windows, compute the logits, score every
# position's prediction against the next character with the cross-entropy, and let the
# optimiser move the weights against the gradient. On a fresh copy of the model, three steps:

# %%
set_seed(0)
sketch = GPT(config)
opt = torch.optim.AdamW(sketch.parameters(), lr=3e-3)
for step in range(3):
    xb, yb = get_batch(train_ids, 16, config.block_size, generator=g)
    logits = sketch(xb)  # (16, 64, 96)
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, tok.vocab_size), yb.reshape(-1)
    )
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step}: loss {loss.item():.3f}")

# %% [markdown]
# `train` runs this step with the settings below, through the training loop of chapter 09,
# `fit`. Its settings are the usual ones for small GPTs; the
# warm-up, the cosine decay and gradient clipping work as in chapter 09:
#
# * **AdamW** with $\beta_1 = 0.9$ and $\beta_2 = 0.99$. $\beta_1$ averages the gradient over
#   roughly the last $1/(1-\beta_1) = 10$ steps; $\beta_2$ averages its square, which sets each
#   weight's step size, over about 100. A longer memory smooths the noise of small batches, a
#   shorter one follows the gradients as their size changes during training. PyTorch's default
#   0.999 remembers about 1,000 steps, this whole run; GPT-3 used 0.95;
#   nanoGPT's character-level configuration takes 0.99, "a bit bigger because [the] number of
#   tokens per iter is small" (bigger than its default of 0.95), and so do we.
# * **Weight decay 0.1 on the matrices and embeddings only** (`param_groups`, below).
#   Decoupled weight decay shrinks every weight a little at each step, so weights stay small
#   unless the data keeps asking for them. Biases and LayerNorm gains are left out: they are
#   few, and a gain's natural value is 1, not 0, so pulling it towards 0 would fight the
#   normalisation. GPT-1 decayed "all non bias or gain weights", with 0.01; GPT-3 and nanoGPT
#   use 0.1, as we do. (Chapter
#   09 used the original Transformer's $\beta_2 = 0.98$ and AdamW's default decay of 0.01
#   on all parameters, gains included; this chapter follows the GPT recipe.)
# * **The learning rate** rises linearly to $3 \cdot 10^{-3}$ over 50 steps (the warm-up of
#   chapter 09), then decays along a cosine (also chapter 09's) to a tenth of the peak, not
#   to 0: GPT-1 decayed to 0, nanoGPT stops at "~= learning_rate/10 per Chinchilla". The
#   peak is high because the model is small: smaller models tolerate larger rates (GPT-3's
#   table goes from $6 \cdot 10^{-4}$ at 125 million parameters down to $0.6 \cdot 10^{-4}$ at
#   175 billion), and ours has under a million.
# * **Gradient clipping** at norm 1 (GPT-3's and nanoGPT's value): one unusual batch cannot
#   flood Adam's running averages and so distort the steps after it (chapter 09).
# * **bfloat16 on a GPU.** On CUDA, `train` runs the forward pass under `torch.autocast` with
#   `dtype=torch.bfloat16`: the matrix products compute in 16-bit numbers on the GPU's tensor
#   cores, while the weights, their gradients and AdamW's averages stay 32-bit. bfloat16
#   keeps float32's 8-bit exponent (its range) and gives up mantissa bits (precision), so,
#   unlike float16, it needs no loss scaling. On a CPU `train` keeps everything in float32:
#   a CPU gains from bfloat16 only if it has instructions for it, and many do not.
#   Whether 16 bits pay depends on the device and the size: the
#   [Performance appendix](performance.md) measures bfloat16 autocast at 1.25 to 1.39 times
#   float32's speed on a CPU for this model, no faster on a GPU at this size, and 5.5 times
#   faster on a GPU for a model 512 wide trained on batches of 512.
#
# Put together, the recipe is a dozen lines (`lm_loss` is the cross-entropy written out above, over
# every position). For 20 steps from the same start (with a warm-up of 5 steps, since 50 would not
# fit in 20), they give the same weights as the package's `train`, which also measures the losses
# (here only at the start and the end, on one window):


# %%
def train_loop(model, data, steps, lr=3e-3, warmup=50, generator=None):
    groups = param_groups(model, weight_decay=0.1)  # decay matrices only
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: warmup_decay(s, warmup, steps, min_ratio=0.1)
    )
    model.train()
    for _ in range(steps):
        x, y = get_batch(data, 16, model.config.block_size, generator)
        loss = lm_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()


twins = []
for loop in ("mine", "train"):
    set_seed(0)
    twin, rng = GPT(config), torch.Generator().manual_seed(0)
    if loop == "mine":
        train_loop(twin, train_ids, 20, warmup=5, generator=rng)
    else:
        train(
            twin,
            train_ids,
            val_ids,
            steps=20,
            batch_size=16,
            warmup=5,
            eval_every=20,
            eval_windows=1,
            generator=rng,
            show_progress=False,
        )
    twins.append(twin)
gap = max(
    (p - q).abs().max().item()
    for p, q in zip(twins[0].parameters(), twins[1].parameters())
)
print(f"after 20 steps, largest difference of a weight: {gap:.0e}")

# %% tags=["remove-cell"]
assert gap < 1e-5

# %% [markdown]
# `train` runs this loop, and measures the two losses as it goes: every `eval_every` steps it
# scores (with `evaluate`, listed below)
# `eval_windows` windows spread evenly over the training text and over the validation text,
# the same way for both, so the two curves can be compared. A sample taken only from the
# *beginning* of a text would measure its first play, not the whole of it. After the two listings,
# the learning rate `train` sets at a few steps.

# %%
show_source(param_groups, checks=False)

# %%
show_source(evaluate, checks=False)

# %%
steps = [0, 25, 50, 500, 999, 1000]
# what train() sets
lrs = [3e-3 * warmup_decay(s, 50, 1000, min_ratio=0.1) for s in steps]
Table(
    ["step", "learning rate"],
    zip(steps, lrs),
    formats={"learning rate": ".1e"},
)

# %% tags=["remove-cell"]
assert lrs[2] == max(lrs) and abs(lrs[-1] - 3e-4) < 1e-12

# %% [markdown]
# 1000 steps of 16 windows of 64 characters: about a million characters, under a quarter of a
# pass over the training text, so most windows the model trains on are new to it. Every 100 steps the
# run prints its two losses, and at steps 100, 300 and 1000 a sample that continues `ROMEO.`
# with the same seed as above, so we can watch the text take shape. At the end it prints how
# long the training took.

# %%
print(
    f"{1000 * 16 * 64:,} characters = "
    f"{1000 * 16 * 64 / len(train_ids):.2f} passes over the training text"
)

# %% tags=["nbval-ignore-output", "wrap-output"]
set_seed(0)
model = GPT(config)
samples = {}


def report(step: int, train_loss: float, val_loss: float) -> None:
    print(
        f"step {step:4}: training {train_loss:.2f}, validation {val_loss:.2f}"
    )
    if step in (100, 300, 1000):
        rng = torch.Generator().manual_seed(1)
        out = generate(model, start, 120, do_sample=True, generator=rng)
        samples[step] = tok.decode(out[0])
        print(textwrap.indent(samples[step], "    | ", lambda line: True))


history = train(
    model,
    train_ids,
    val_ids,
    steps=1000,
    batch_size=16,
    lr=3e-3,
    warmup=50,
    eval_every=100,
    eval_windows=256,
    generator=torch.Generator().manual_seed(0),
    show_progress=False,
    on_eval=report,
)
print(f"trained in {history.wall_seconds:.0f} s")
# the two losses end together
assert (
    abs(history.evals["val_loss"][-1] - history.evals["train_loss"][-1]) < 0.05
)

# %% [markdown]
# The samples show the text take shape. At step 100 the model writes letters, spaces and line
# breaks, with few real words. At step 300 one line reads `Wil SEDOR.`, the look of a
# speaker's name. At step 1000 the text is a run of short speeches, each headed by an invented
# name in capitals on a line of its own (`PITHADN.`, `SHASTIO.`), with lines such as "Like but
# doble are of but as fie do pind,".

# %% tags=["remove-cell"]
# Structure appears: by step 1000 the sample has a speaker's name on a line
# of its own, and more of its words are real than at step 100.
train_words = set(re.findall(r"[A-Za-z]+", train_text))


def known_share(sample: str) -> float:
    words = re.findall(r"[A-Za-z]{3,}", sample[len(prompt) :])
    return sum(w in train_words for w in words) / max(1, len(words))


assert re.search(r"\n[A-Z][A-Z ]+\.\n", samples[1000][len(prompt) - 1 :])
assert known_share(samples[1000]) > known_share(samples[100])

# %% [markdown]
# Two more yardsticks than the uniform guess make the curves readable: a model that knows only how
# frequent each character is, and one that predicts each character from the previous one alone.
# Both are counts in the training text (plus one, so no pair has probability 0), scored on the
# validation text:

# %%
V = tok.vocab_size
freq = torch.bincount(train_ids, minlength=V).double() + 1
freq = freq / freq.sum()
pairs = torch.ones(V, V, dtype=torch.float64)
pairs.index_put_(
    (train_ids[:-1], train_ids[1:]),
    torch.ones(len(train_ids) - 1, dtype=torch.float64),
    accumulate=True,
)
pairs = pairs / pairs.sum(dim=1, keepdim=True)
unigram_loss = -freq.log()[val_ids].mean().item()
bigram_loss = -pairs.log()[val_ids[:-1], val_ids[1:]].mean().item()
print(f"character frequencies only: {unigram_loss:.2f} nats/char")
print(f"previous character only:    {bigram_loss:.2f} nats/char")

# %% [markdown]
# The curves (Fig. 10.2): a fast first drop, which within 100 steps passes the frequency-only
# level and brings the validation loss to about the level of the previous-character model
# (2.64 against 2.55); after that, slower and steady progress: about level with it at step 200
# (0.01 below), and well below it from step 300 on (by 0.22 there), so the model uses more
# than the previous character. From step 100 to step 400 the validation curve lies a little above the training
# curve (by up to 0.09, at step 200), and from step 500 on the two stay within 0.03 of each
# other, ending at 1.85 and 1.87: what the model has learned so far holds about as well for
# plays it has never seen. Overfitting would show as a validation curve that stops falling,
# and then turns up, while the training curve keeps falling.

# %% tags=["hide-input"] caption="The small GPT's loss on the training and validation texts, measured every 100 steps, with three yardsticks (dotted): uniform over 96 characters, character frequencies only, and the previous character only. Within 100 steps the validation loss falls to about the previous-character level, then both keep falling slowly, close together from step 500 on." alt="Line chart of the loss in nats per character against the training step, 0 to 1000. Two falling curves, training with circles and validation with squares, start on the top dotted line (uniform) and drop steeply to near the bottom dotted line (previous character only) by step 100, then decline slowly, below it from step 200 to the end, the validation curve a little above the training curve early on and nearly on it from step 500. The legend sits between the top two dotted lines."
v, t = history.evals["val_loss"], history.evals["train_loss"]
fig, ax = plt.subplots(figsize=(6.2, 4.4))
ax.plot(history.eval_steps, t, "o-", label="training text")
ax.plot(history.eval_steps, v, "s-", label="validation text")
yardsticks = {
    "uniform over 96 characters": math.log(96),
    "character frequencies only": unigram_loss,
    "previous character only": bigram_loss,
}
for name, level in yardsticks.items():
    ax.axhline(level, color="gray", ls=":", lw=1)
    ax.text(
        1000,
        level + 0.05,
        name,
        ha="right",
        va="bottom",
        fontsize=13,
        color="dimgray",
    )
ax.set_xlabel("step", fontsize=14)
ax.set_ylabel("loss (nats per character)", fontsize=14)
ax.tick_params(labelsize=13)
ax.set_ylim(1.5, 4.8)
ax.set_title("Training the small GPT on Shakespeare's plays", fontsize=14)
ax.legend(loc="center", bbox_to_anchor=(0.36, 0.72), fontsize=13)
fig.tight_layout()
plt.show()

# %% tags=["remove-cell"]
# within 100 steps: past the frequencies, near the previous-character model
assert v[1] < unigram_loss and abs(v[1] - bigram_loss) < 0.2
assert all(x < bigram_loss for x in v[2:])  # below it from step 200
# the first 100 steps gain far more than the next 100
assert v[0] - v[1] > 4 * (v[1] - v[2])
# both keep falling
assert all(a > b for a, b in zip(v, v[1:]))
assert all(a > b for a, b in zip(t, t[1:]))
# the two curves stay close, and closer from step 500: no sign of overfitting
assert max(abs(a - b) for a, b in zip(t, v)) < 0.12
assert max(abs(a - b) for a, b in zip(t[5:], v[5:])) < 0.03

# %% [markdown]
# The curves were measured on 256 windows of 64 characters spread over each text. On a sample
# eight times as large, 2,048 windows spread evenly over the validation text (a quarter of
# it), the final loss is nearly the same as the last point of the validation curve:
# a sample spread over the whole text is a fair estimate of it. The exponential of the loss, the **perplexity**, says the model is on average
# as unsure as if it chose uniformly among that many characters, instead of 96.

# %% tags=["nbval-ignore-output"]
val_loss = evaluate(model, val_ids, max_windows=2048)
n_val_windows = (len(val_ids) - 1) // config.block_size
print(
    f"2,048 of the validation text's {n_val_windows:,} windows: "
    f"{val_loss:.3f} nats/char (perplexity {math.exp(val_loss):.2f})"
)
print(
    "last point of the validation curve (256 windows): "
    f"{history.evals['val_loss'][-1]:.3f} nats/char"
)
# 256 windows spread over the text estimate the loss of 2,048 closely
assert abs(val_loss - history.evals["val_loss"][-1]) < 0.05

# %% tags=["remove-cell"]
assert val_loss <= 2.0

# %% [markdown]
# How much of its 64 characters of context does the model use? In a window, position 0
# predicts from one character and position 63 from 64. The loss on the same 2,048 validation
# windows, by the number of characters of context (averaged over the positions of each band):

# %% tags=["nbval-ignore-output"]
starts = torch.linspace(0, n_val_windows - 1, 2048).round().long()
w = val_ids[starts[:, None] * config.block_size + torch.arange(65)]
xs, ys = w[:, :-1], w[:, 1:]


def window_losses(m: GPT) -> torch.Tensor:
    """The loss at every position of these windows (xs, ys), read in
    pieces of m's context (all 64 characters for this model)."""
    n = m.config.block_size
    with torch.no_grad():
        logp = m.eval()(xs.reshape(-1, n)).log_softmax(-1)
    return -logp.gather(-1, ys.reshape(-1, n, 1)).reshape(xs.shape)


by_position = window_losses(model).mean(0)  # average over the windows
bands = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 32), (33, 64))
band_loss = [by_position[lo - 1 : hi].mean().item() for lo, hi in bands]
names = [f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in bands]
display(
    Table(
        ["context", "validation loss"],
        zip(names, band_loss),
        formats={"validation loss": ".2f"},
    )
)
# the yardstick on the same characters as the first row
first = -pairs.log()[xs[:, 0], ys[:, 0]].mean().item()
print(f"previous character only: {first:.2f} on the first row's characters")
# one character: above the yardstick; two: below it
assert band_loss[1] < bigram_loss < band_loss[0]
assert first < band_loss[0]

# %% tags=["remove-cell"]
assert band_loss[3] < band_loss[0] - 0.5  # 5-8 characters: far better
assert max(band_loss[3:]) - min(band_loss[3:]) < 0.06  # and then nearly flat

# %% [markdown]
# With one character of context the model's loss is above the previous-character yardstick
# counted on the same characters (2.62 against 2.51; over the whole validation text the
# yardstick reads 2.55). That yardstick is counted from the whole training text, close to the
# best any rule that sees only the last character can do there; the network, after under a quarter of
# a pass, has not matched it where it has nothing else to go on. With two characters it is
# already well below it (2.20), and with 5 to 8 characters it is at 1.84. Beyond that it
# changes by a few hundredths only (1.83 with 33 to
# 64): after 1,000 steps the model gains little from characters more than 8 back.
#
# A longer sample from the trained model, with the prompt and seed from before, drawn the same
# way (each character at random from the model's distribution), so that it begins with the
# sample printed at step 1000:

# %% tags=["nbval-ignore-output", "wrap-output"]
rng = torch.Generator().manual_seed(1)
trained = generate(model, start, 200, do_sample=True, generator=rng)
longer = tok.decode(trained[0])
print_wrapped(longer)
train_words = set(re.findall(r"[A-Za-z]+", train_text))
words = re.findall(r"[A-Za-z]{3,}", longer[len(prompt) :])
known = sum(w in train_words for w in words) / len(words)
print(
    f"{known:.0%} of its words of 3 letters or more occur in the training text"
)
# many of its words are words of the plays
assert known > 0.4

# %% [markdown]
# After these 1,000 steps the model has learned the *look* of a play: speeches headed by a name
# in capitals on a line of its own (names it invents: `PITHADN.`, `SHASTIO.`, `SERY.`), lines
# that mostly begin with a capital, and many real words among invented ones. The sense is
# missing.
#
# ## What each part buys
#
# Karpathy's lecture builds its GPT one part at a time and measures what each part adds. We can ask
# the same of ours by taking parts away. Train the small model for 300 steps with the chapter's
# settings, its learning rate now decaying over those 300 steps (so the whole model's score is not
# the main run's at step 300), once whole and once each without one part: without attention (every
# block's attention adds nothing to the stream), without the feed-forward networks, without the
# LayerNorms (each replaced by the identity), and without the residual connections (each
# sub-layer's output replaces its input instead of being added to it). Then score each on the same
# 2,048 validation windows as the table of loss by context length:


# %% tags=["nbval-ignore-output"]
class Nothing(torch.nn.Module):
    """In place of a sub-layer: adds nothing to the residual stream."""

    def forward(self, x, cache=None):
        return torch.zeros_like(x)


def no_attention(m: GPT) -> None:
    for b in m.blocks:
        b.attn = Nothing()


def no_feed_forward(m: GPT) -> None:
    for b in m.blocks:
        b.mlp = Nothing()


class BlockWithoutResidual(Block):
    def forward(self, x, cache=None):
        x = self.attn(self.norm1(x), cache)  # not x + ...
        return self.mlp(self.norm2(x))


def no_residual(m: GPT) -> None:
    for i, b in enumerate(m.blocks):
        m.blocks[i] = BlockWithoutResidual(m.config)
        m.blocks[i].load_state_dict(b.state_dict())  # same initial weights


def no_layernorm(m: GPT) -> None:
    for b in m.blocks:
        b.norm1, b.norm2 = torch.nn.Identity(), torch.nn.Identity()
    m.norm = torch.nn.Identity()


def train_300(edit=None, positions=True, batch_size=16, **shape) -> GPT:
    """The small model after 300 steps: its config changed by ``shape``,
    then ``edit(model)`` applied, before training."""
    set_seed(0)
    m = GPT(dataclasses.replace(config, **shape))
    if edit is not None:
        edit(m)
    if not positions:
        with torch.no_grad():
            m.pos_emb.weight.zero_()
        m.pos_emb.weight.requires_grad_(False)
    rng = torch.Generator().manual_seed(0)
    # learning rate 3e-3 and 50 warm-up steps, as in the main run
    train(
        m,
        train_ids,
        val_ids,
        300,
        batch_size,
        generator=rng,
        eval_every=300,
        eval_windows=8,
        show_progress=False,
    )
    return m.eval()


base = train_300()
base_nll = window_losses(base)
with_pos = base_nll.mean().item()
parts_loss = {"the whole model": with_pos}
variants = {
    "without attention": no_attention,
    "without feed-forward": no_feed_forward,
    "without LayerNorm": no_layernorm,
    "without residuals": no_residual,
}
for name, edit in variants.items():
    parts_loss[name] = window_losses(train_300(edit)).mean().item()
display(
    Table(
        ["after 300 steps", "nats/char"],
        [*parts_loss.items(), ("previous character only", bigram_loss)],
        formats={"nats/char": ".3f"},
    )
)
# each part removed costs more than 0.1 nats/char in these runs
assert all(v > with_pos + 0.1 for v in list(parts_loss.values())[1:])

# %% [markdown]
# Attention, the feed-forward networks and LayerNorm are each worth about 0.2 nats per
# character after 300 steps: 2.38 for the whole model against 2.59 without attention, 2.62
# without the feed-forward networks and 2.62 without LayerNorm. The residual connections are
# worth far more: without them the model ends at 3.32, about the level of a model that knows
# only how frequent each character is (3.33). Each block's output then replaces its input, so
# a character's embedding reaches the output head only through all four blocks in turn, and
# in 300 steps the model has learned little beyond those frequencies. Without attention no position can read any other, so the model predicts
# each character from the one before it and that one's position: the previous-character
# yardstick does the same with exact counts (2.55), and the model lands just above it.
# Without the feed-forward networks the blocks can still gather characters from the context,
# but have only attention's weighted averages and linear maps to compute with. Without
# LayerNorm, the same settings train the model more slowly. (What positions are worth is
# exercise 3's question.) These are single runs of 300 steps, one seed each: they measure how
# fast each variant learns, not how far it could go, and they do not say how much each number
# would move with another seed.
#
# ## A larger model
#
# For generation we load a larger model, trained for longer: 4 blocks of width 192 with 6
# heads, and a context of 128 characters. `load_checkpoint()` loads its trained weights and the
# record of its run, with its own batch size and peak learning rate. To train it yourself, run
# `python -m transformer_course.train_gpt`; the record says how long it took.

# %%
big, big_tok, record = load_checkpoint()
c = big.config
print(
    f"{count_parameters(big):,} parameters: {c.n_layer} blocks, "
    f"{c.n_head} heads, d_model {c.d_model}, d_ff {c.d_ff}, "
    f"context {c.block_size}"
)
print(
    f"trained for {record['steps']:,} steps of {record['batch_size']} windows "
    f"of {c.block_size} characters, "
    f"{record['train_seconds'] / 60:.0f} min on {record['device']}"
)
passes = record["steps"] * record["batch_size"] * c.block_size / len(train_ids)
print(
    f"peak learning rate {record['lr']:g}, "
    f"{passes:.1f} passes over the training text"
)

# %% tags=["remove-cell"]
assert record["val_loss"] <= 1.6 and big_tok.chars == tok.chars

# %% [markdown]
# Measured the same way, on windows spread evenly over the validation text, each model with
# windows as long as its context (2,048 of 64 characters for the small model, 1,024 of 128
# for the larger one), the larger model's loss is lower than the small model's, and so is its
# perplexity. Next to each, its loss on 256 windows of the training text:

# %% tags=["nbval-ignore-output"]
big_val = evaluate(big, val_ids, max_windows=1024)
big_train = evaluate(big, train_ids, max_windows=256)
small_train = evaluate(model, train_ids, max_windows=256)
by_model = [
    (name, tr, va, math.exp(va))
    for name, tr, va in (
        ("small model", small_train, val_loss),
        ("larger model", big_train, big_val),
    )
]
display(
    Table(
        ["model", "training", "validation", "perplexity"],
        by_model,
        formats={"training": ".3f", "validation": ".3f", "perplexity": ".2f"},
    )
)
# the gap between validation and training loss is wider for the larger model
assert big_val - big_train > val_loss - small_train

# %% tags=["remove-cell"]
assert big_val < val_loss

# %% tags=["remove-cell"]
# The record was measured on this very text (all of its validation windows).
from transformer_course.tasks.python_docs import corpus_fingerprint

assert record["corpus_sha256"] == corpus_fingerprint(text)
assert abs(big_val - record["val_loss"]) < 0.03

# %% [markdown]
# The larger model's validation loss lies 0.14 above its training loss, while the small
# model's two losses nearly agree. The larger model differs from the small one in size,
# context, training length (1.2 passes over the training text against 0.24), batch size and
# learning-rate schedule, and this comparison cannot separate
# them. One thing is the same: each step of either predicts 1,024 characters (8 windows of 128,
# or 16 of 64), so the larger model's longer training is more steps of the same size. The record of its run holds the two
# losses it measured every 500 steps, on 32 windows spread evenly over each text (a smaller
# sample than the 1,024 and 256 windows above, so its numbers differ from them: its last
# validation loss reads 1.67, against 1.60 on the larger sample):

# %%
hist = record["history"]
Table(
    ["step", "training", "validation"],
    zip(hist["step"], hist["train_loss"], hist["val_loss"]),
    formats={"training": ".2f", "validation": ".2f"},
)

# %% [markdown]
# Both losses fall to the end: the validation loss from 2.01 at step 1000 to 1.67 at step
# 5000, and still in the last 500 steps, while the learning rate decays. The gap between the
# two widens on this sample, from 0.10 at step 1000 to about 0.2 from step 3000 on, when the
# model has drawn 0.7 of a pass over its training text; this sample reads the final
# validation loss 0.07 high, and the larger samples above put the final gap at 0.14. The
# larger model does better on the plays it trains on than on plays it has never seen. As long
# as the validation loss falls, more training still helps; once it stops falling, the usual
# remedies are to stop there (early stopping), or to add dropout, which this chapter sets to
# 0 (nanoGPT's character-level
# configuration uses 0.2).

# %% tags=["remove-cell"]
hv, ht = hist["val_loss"], hist["train_loss"]
assert hv[-1] < hv[-2] < hv[2]  # still falling at the end
assert 0.05 < hv[2] - ht[2] < 0.15  # step 1000
assert all(0.15 < a - b < 0.26 for a, b in zip(hv[6:], ht[6:]))  # from 3000
assert 0.68 < 3000 * record["batch_size"] * 128 / len(train_ids) < 0.72
assert big_val - big_train > 0.1

# %% [markdown]
# ## Generation
#
# The model gives a distribution over the next character. Every way of generating is a rule
# for choosing from it, then appending the choice and asking again. By hand, one greedy step:

# %%
prompt = "HAMLET.\nTo be, or not to be, that is the "
ids = torch.tensor([big_tok.encode(prompt)])
with torch.no_grad():
    logits = big(ids)[0, -1]
probs = logits.softmax(-1)
top = probs.topk(5)
for p, i in zip(top.values, top.indices):
    print(f"{big_tok.decode([int(i)])!r:6} {p.item():.3f}")
print("greedy decoding picks", repr(big_tok.decode([int(logits.argmax())])))

# %% tags=["remove-cell"]
assert generate(big, ids, 1)[0, -1].item() == int(logits.argmax())

# %% [markdown]
# Four rules:
#
# * **greedy**: always the most likely token, as chapter 09's `greedy_decode` did for the
#   dates. Deterministic, and it tends to fall into loops.
# * **temperature** $T$: sample from $\operatorname{softmax}(z / T)$, where $z$ are the
#   logits. This is the temperature of chapter 04, now on the output logits instead of the
#   attention scores: $T<1$ sharpens the distribution towards greedy, $T>1$ flattens it
#   towards uniform.
# * **top-k**: sample only among the $k$ most likely tokens (renormalised).
# * **top-p (nucleus)** (Holtzman et al., 2019): sample only among the smallest set of most
#   likely tokens whose probabilities add up to at least $p$. The set adapts: small where the
#   model is sure, large where it is not.

# %%
show_source(top_k_filter, checks=False)

# %%
show_source(top_p_filter, checks=False)

# %%
show_source(next_token_probs, checks=False)

# %% [markdown]
# How temperature reshapes the next-character distribution after this version of Hamlet's half
# line (Fig. 10.3; in the training text it reads `Ham.` / `To be, or not to be,--that is the
# question`). At $T = 1$ the most likely next character is `s`, with 0.08 of the probability,
# and the `q` of "question" is not among the five most likely.

# %% tags=["hide-input"] caption="The 12 most likely next characters after ‘HAMLET. To be, or not to be, that is the ’, at temperature 0.5 (top), 1 (middle) and 2 (bottom). A low temperature makes the most likely character, 's', likelier still, a high one spreads the probability over many characters: the entropy in each title grows with T." alt="Three stacked bar charts over the same 12 characters, most likely first: 's', 'm', 'b', 'w' and others. In the top chart the bar for 's' is the tallest by a clear margin; in the middle one it is lower and the others higher; in the bottom one the bars are much more even."
fig, axes = plt.subplots(3, 1, figsize=(5.4, 7.4), sharex=True, sharey=True)
order = probs.argsort(descending=True)[:12]
labels = [repr(big_tok.decode([int(i)])) for i in order]
for ax, t in zip(axes, (0.5, 1.0, 2.0)):
    pt = next_token_probs(logits, temperature=t)
    ax.bar(range(12), pt[order].numpy(), color="tab:blue")
    ax.set_xticks(range(12))
    ax.set_xticklabels(labels, fontsize=15)
    ax.tick_params(axis="y", labelsize=14)
    entropy = -(pt * pt.clamp_min(1e-12).log()).sum().item()
    ax.set_title(f"T = {t}: entropy {entropy:.2f} nats", fontsize=15)
axes[1].set_ylabel("probability", fontsize=15)
fig.suptitle(
    "Temperature reshapes the next-character\n"
    "distribution (the 12 most likely)",
    fontsize=15,
)
fig.tight_layout()
plt.show()

# %% tags=["remove-cell"]
entropies = []
for t in (0.5, 1.0, 2.0):
    pt = next_token_probs(logits, temperature=t)
    entropies.append(-(pt * pt.clamp_min(1e-12).log()).sum().item())
assert entropies[0] < entropies[1] < entropies[2]

# %% [markdown]
# Top-k keeps $k$ characters wherever it is. Top-p keeps as many as it takes to reach $p$; at
# this position:

# %%
for p in (0.5, 0.9, 0.99):
    kept = torch.isfinite(top_p_filter(logits, p))
    print(
        f"top-p, p = {p}: keeps {int(kept.sum()):2} of the 96 characters, "
        f"holding {probs[kept].sum().item():.3f} of the probability"
    )

# %% [markdown]
# Fig. 10.4 draws the two filters at this position, on the characters ranked by
# probability: top-k with $k = 5$ keeps the first five whatever their share, top-p with
# $p = 0.9$ keeps the first 20.

# %% tags=["hide-input"] caption="The next-character distribution after ‘HAMLET. To be, or not to be, that is the ’: the 60 most likely of the 96 characters, ranked by probability (the other 36 hold less than 0.01 together). Top-k with k = 5 keeps the five left of the first dashed line (blue); top-p with p = 0.9 keeps the 20 left of the second (blue and orange), which together hold 0.907 of the probability; sampling draws only from what a filter keeps, renormalised." alt="A bar chart of 60 bars falling from about 0.08 at the left to nearly 0 at the right. The first five bars are dark blue, the next fifteen orange, the rest light grey. A dashed line after the fifth bar is labelled top-k, k = 5, with an arrow pointing left; a dashed line after the twentieth is labelled top-p, p = 0.9, with an arrow pointing left. A legend names the colours: kept by both, by top-p only, by neither."
ranked = probs.sort(descending=True).values
n_top_p = int(torch.isfinite(top_p_filter(logits, 0.9)).sum())
colours = [
    "tab:blue" if r < 5 else "tab:orange" if r < n_top_p else "0.8"
    for r in range(len(ranked))
]
fig, ax = plt.subplots(figsize=(6.0, 4.0))
ax.bar(range(len(ranked)), ranked.numpy(), color=colours, width=0.9)
top = ranked[0].item()
for cut, label in ((5, "top-k\n   k = 5"), (n_top_p, "top-p\n   p = 0.9")):
    ax.axvline(cut - 0.5, color="black", ls="--", lw=1)
    # the arrow points at the side the filter keeps
    ax.text(cut - 0.2, 1.25 * top, "\u2190 " + label, fontsize=13, va="center")
kinds = [("tab:blue", "kept by both"), ("tab:orange", "by top-p only")]
kinds.append(("0.8", "by neither"))
for colour, name in kinds:
    ax.bar([0], [0], color=colour, label=name)
ax.legend(loc="center right", fontsize=13, frameon=False)
ax.set_xlabel("characters ranked by probability", fontsize=14)
ax.set_ylabel("probability", fontsize=14)
ax.tick_params(labelsize=13)
ax.set_xlim(-1, 60)
ax.set_ylim(0, 1.45 * top)
fig.tight_layout()
plt.show()

# %% tags=["remove-cell"]
assert n_top_p == 20 and abs(ranked[:n_top_p].sum().item() - 0.907) < 5e-4
assert ranked[60:].sum() < 0.01

# %% [markdown]
# That is one position. Over 200 positions of the validation text, each read with a full
# context of 128 characters, the size of the set that top-p with $p = 0.9$ keeps varies
# widely: a single character at 35 of them, where the model puts 0.9 or more on one
# character, more than 16 at 15, where it is unsure. Below the table, the contexts with the smallest and the
# largest set:

# %%
n_pos, T = 200, big.config.block_size
starts = torch.linspace(0, len(val_ids) - T - 1, n_pos).round().long()
contexts = val_ids[starts[:, None] + torch.arange(T)]
with torch.no_grad():
    last = big(contexts)[:, -1]  # the next-character logits after each
keep = torch.isfinite(top_p_filter(last, 0.9))
sizes = keep.sum(-1)
by_size = []
for lo, hi in ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 96)):
    n = int(((sizes >= lo) & (sizes <= hi)).sum())
    span = f"{lo}" if lo == hi else f"{lo} to {hi}"
    by_size.append((span, n))
display(Table(["characters kept", "positions"], by_size))
for i in (int(sizes.argmin()), int(sizes.argmax())):
    end = big_tok.decode(contexts[i, -36:])
    print(f"keeps {int(sizes[i]):2} after ...{end!r}")

# %% tags=["remove-cell"]
assert sizes.min() == 1 and sizes.max() >= 10

# %% [markdown]
# The four strategies side by side, on the same prompt, each sampler with the same seed:

# %% tags=["wrap-output"]
strategies = {
    "greedy": dict(do_sample=False),
    "temperature 0.8": dict(do_sample=True, temperature=0.8),
    "top-k, k = 5": dict(do_sample=True, top_k=5),
    "top-p, p = 0.9": dict(do_sample=True, top_p=0.9),
}
outputs = {}
for name, kwargs in strategies.items():
    rng = torch.Generator().manual_seed(0)
    out = generate(big, ids, 160, generator=rng, **kwargs)
    outputs[name] = big_tok.decode(out[0])
    print(f"--- {name} ---")
    print_wrapped(outputs[name])
    print()

# %% tags=["remove-cell"]
assert all(
    f"\n{name}.\n" in outputs["top-p, p = 0.9"]
    for name in ("ANTONY", "LEONATO", "CAIUS")
)
assert "\nBEROWNE.\n" in outputs["temperature 0.8"]
assert "\nKING.\n[Aside.]" in outputs["temperature 0.8"]
assert outputs["greedy"].count("of the state") >= 3
assert all(
    o.startswith(prompt) and len(o) == len(prompt) + 160
    for o in outputs.values()
)

# %% [markdown]
# Greedy decoding soon repeats itself: "of the state" again and again. Continued far enough, it
# falls into an exact loop. Continue the greedy text to 1,500 new characters, find the shortest
# period with which its last 900 characters repeat, and the first character from which the
# text repeats with that period:

# %% tags=["wrap-output"]
repeats = outputs["greedy"].count("of the state")
print(f'"of the state" comes {repeats} times in the greedy text above')
long_greedy = big_tok.decode(generate(big, ids, 1500)[0])
end = long_greedy[-900:]
period = next(p for p in range(1, 450) if end[p:] == end[:-p])
k = len(long_greedy) - period
while k > 0 and long_greedy[k - 1] == long_greedy[k - 1 + period]:
    k -= 1
loop = long_greedy[k : k + period]
print(
    f"from character {k:,} of {len(long_greedy):,} on, "
    f"{period} characters repeat:"
)
print_wrapped(loop)

# %% [markdown]
# Greedy decoding has no randomness to push it out of a repetition. Once the model's window of 128 characters lies inside the loop, the same window comes
# back after one more cycle, so the same choices follow, forever. That is
# easy to check: from the last 128 characters, greedy decoding writes one more cycle and
# returns to the same window:

# %%
window = long_greedy[-big.config.block_size :]
more = generate(big, torch.tensor([big_tok.encode(window)]), period)
again = big_tok.decode(more[0])[-big.config.block_size :]
print(f"after {period} more characters, the same window: {again == window}")

# %% tags=["remove-cell"]
assert again == window

# %% [markdown]
# The samplers keep going, and their texts have the form of a play: speeches headed by names
# from the plays (`ANTONY.`, `LEONATO.`, `CAIUS.` in the top-p text, `BEROWNE.` and `KING.` in
# the temperature-0.8 text), a stage direction in brackets (`[Aside.]`), lines of verse; and
# the non-sequiturs of a small model.
# Top-k and top-p cut off the unlikely tail of the distribution. How often does sampling
# without them draw from that tail? At each of the 200 validation positions above (contexts of
# real text, not of the model's own), the probability that a sampled character falls outside
# the set top-p 0.9 keeps at temperature 1, on average:

# %%
for temp in (1.0, 0.8):
    p_tail = (next_token_probs(last, temperature=temp) * ~keep).sum(-1)
    share = p_tail.mean().item()
    print(
        f"temperature {temp}: {share:.1%} of sampled characters, "
        f"about {160 * share:.0f} in a text of 160"
    )

# %% [markdown]
# A temperature below 1 shrinks that tail, and top-p removes it. (Combined with a temperature
# of 0.8, top-p cuts a tail of its own: it applies after the temperature, to the sharper
# distribution, and keeps no more characters than at temperature 1.)
#
# The loop `sample` from the start of *Training* already divides the logits by the
# temperature before the softmax; `generate`, listed here, adds the filters of top-k and top-p
# before it draws:

# %%
show_source(generate, checks=False)

# %% [markdown]
# ## A KV cache
#
# Without a cache, every new token runs the model over the *whole* text so far (up to its last
# `block_size` characters), although only
# the last position's output is used, and the keys and values of all earlier positions are
# recomputed each time although they never change (the causal mask guarantees that a
# position's keys and values depend only on that position and the ones before it). A **KV cache** keeps each
# layer's keys and values. The first call feeds the whole prompt at once and fills the cache
# (the *prefill*); each step after it feeds only the newest token, computes its query, key and
# value, appends the key and value to the cache and attends over all of them.
#
# The mask for the new queries is the last rows of the full causal mask: new position $i$
# (absolute position `past + i`) may see keys $0..\text{past}+i$. For one new token, that row
# is all `True`. Several new tokens over a filled cache, as below, occur when a long prompt is
# fed in pieces, or when a conversation continues after the model's last answer.
#
# Fig. 10.5 draws the cache of one attention layer over four steps, from an empty cache, one
# new position per step.

# %% tags=["hide-input"] caption="A KV cache in one attention layer, one row per generation step. Each step adds one position: its key and value are appended to the cache (red frame), and its query q reads every key in the cache, its own and all earlier ones; the weights then mix the cached values. Nothing already in the cache is computed again." alt="Four rows labelled step 1 to step 4. In each row an orange box q1 to q4 on the left, then a row of blue key boxes above a row of green value boxes: k1 and v1 in step 1, k1 to k2 and v1 to v2 in step 2, up to k1 to k4 and v1 to v4 in step 4. A red frame surrounds the newest key and value of each row. A line from the query branches into an arrow down to every key box. A column on the right reads 1 key, 2 keys, 3 keys, 4 keys."
kv_cache(steps=4)
plt.show()

# %%
show_source(KVCache, checks=False)

# %%
past, new = 5, 3
print(causal_mask(past + new)[:, :, past:, :][0, 0].int())

# %% [markdown]
# Written out for greedy decoding, generation with a cache is a prefill and then one position
# per step; it gives the tokens `generate` gives:

# %%
cache = big.new_cache()
text_ids = ids
with torch.no_grad():
    last = big(ids, cache=cache)[:, -1]  # prefill: the whole prompt at once
    for _ in range(40):
        nxt = last.argmax(-1, keepdim=True)
        text_ids = torch.cat([text_ids, nxt], dim=1)
        last = big(nxt, cache=cache)[:, -1]  # only the newest position
print(
    f"{len(cache[0])} positions cached; {big_tok.decode(text_ids[0, -40:])!r}"
)

# %% tags=["remove-cell"]
assert torch.equal(text_ids, generate(big, ids, 40))

# %% [markdown]
# The cache must not change the result. Greedy decoding and seeded sampling give the same
# tokens with and without it:

# %%
greedy = dict(do_sample=False)
sampled = dict(do_sample=True, temperature=0.8, top_p=0.9)
for kwargs in (greedy, sampled):
    rng = torch.Generator().manual_seed(3)
    a = generate(big, ids, 100, use_cache=False, generator=rng, **kwargs)
    rng = torch.Generator().manual_seed(3)
    b = generate(big, ids, 100, use_cache=True, generator=rng, **kwargs)
    print(kwargs, "same tokens:", torch.equal(a, b))

# %% [markdown]
# What the cache costs is memory: a key and a value of `d_model` numbers for every position in
# every layer, for every sequence being generated. Full, for one sequence of the larger model's
# 128 positions:

# %%
cache = big.new_cache()
with torch.no_grad():
    big(val_ids[None, :128], cache=cache)
n_cached = sum(layer.k.numel() + layer.v.numel() for layer in cache)
print(
    f"{n_cached:,} numbers = 2 x {c.n_layer} layers x 128 positions "
    f"x {c.d_model}: {4 * n_cached / 1024:.0f} KiB in float32"
)

# %% tags=["remove-cell"]
assert n_cached == 2 * c.n_layer * 128 * c.d_model

# %% [markdown]
# And it saves time, more seconds the longer the text: without the cache step $t$ costs work
# roughly proportional to $t$ (the whole prefix goes through every layer; the linear layers
# dominate at this size, and attention adds a $t^2$ term), with it a constant amount plus
# attention over $t$ cached keys. For 127 new characters after a one-character prompt, that
# is $1 + 2 + \dots + 127 = 8{,}128$ positions through the model without the cache against
# 127 with it, 64 times the work. The measured speed-up (the column speed-up) stays far below
# that: a step's time is not set by its arithmetic alone, and both paths also pay a fixed
# cost per step for running every layer's operations. In every row the cache gives the same
# tokens.


# %% tags=["nbval-ignore-output"]
def timed(fn, *args, repeats=9, **kwargs):
    """The fastest of ``repeats`` calls: the least disturbed."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        best = min(best, time.perf_counter() - t0)
    return best, out


one = torch.tensor([big_tok.encode("\n")])
generate(big, one, 8, use_cache=True)  # a first call, to warm up
timings = []
# a 1-character prompt + 127 new ones fill the 128 positions
for n in (32, 64, 127):
    t_plain, a = timed(generate, big, one, n, use_cache=False)
    t_cache, b = timed(generate, big, one, n, use_cache=True)
    same = torch.equal(a, b)
    speedup = t_plain / t_cache
    timings.append((n, t_plain, t_cache, speedup, same))
seconds = ["no cache (s)", "KV cache (s)"]
display(
    Table(
        ["new tokens", *seconds, "speed-up", "same tokens"],
        timings,
        formats={**dict.fromkeys(seconds, ".2f"), "speed-up": ".1f"},
    )
)
assert same  # 127 new tokens: the cache gives the same tokens

# %% tags=["remove-cell"]
assert speedup > 1.3  # and is clearly faster

# %% [markdown]
# With 128 positions the texts stay short, and so does the gain. The
# [Performance appendix](performance.md) times the same comparison on a model with a context of
# 1,024 tokens, for up to 512 new tokens, where the cache saves much more.
#
# Once a text is longer than the context (`block_size`), a model with learned positions cannot
# simply keep appending: the window slides and the positions of every cached token change.
# `generate` then falls back to re-reading the last `block_size` tokens at each step, exactly
# like the uncached path, so the two still agree.
#
# ## Summary
#
# * A GPT is one stack of pre-norm blocks with *causal* self-attention, trained to predict the
#   next token. Its block is chapter 07's encoder layer run with chapter 08's causal mask; the
#   model adds token and learned position embeddings, a final LayerNorm and an output head tied
#   to the token embedding.
# * At initialisation the loss is close to $\ln 96$, the loss of a uniform guess. The
#   projections that write into the residual stream start $\sqrt{2 \cdot n_\text{layer}}$ times
#   smaller, so the stream's size does not grow with the depth.
# * Training takes random windows of the text; every window is as many prediction problems as it
#   has characters. AdamW with $\beta_2 = 0.99$, weight decay on the matrices only, a warm-up and
#   a cosine decay of the learning rate, and gradient clipping train the small model;
#   on a GPU, the forward pass runs in bfloat16.
# * Within 100 steps the validation loss reaches about the level of a model that sees only the
#   previous character (2.64 against 2.55); the rest of training goes below it, and in the end
#   the model gains little from characters more than 8 back.
#   Samples taken along the way go from letters and spaces to speeches headed by a name.
#   Validation and training curves measured the same way stay close over the small model's
#   run, under a quarter of a pass over the text.
# * Taking parts away shows what each buys: after 300 steps, the model without attention, without
#   its feed-forward networks or without LayerNorm is each about 0.2 nats per character
#   behind the whole model; without its residual connections it is at about the level of a
#   model that knows only how frequent each character is.
# * The perplexity, $e^{\text{loss}}$, is the number of equally likely characters that would
#   leave a model as unsure as this one. The larger model (more parameters, a context of 128,
#   longer training) reaches a lower validation loss and perplexity than the small one; its
#   validation loss kept falling to the end, while its training loss fell faster: a gap of
#   0.14 at the end, after 1.2 passes over its training text.
# * Generation is a loop of a few lines (run the model, take the last position's logits,
#   choose a token, append it) around a rule for choosing: greedy decoding tends to repeat
#   itself, and here it ended in a loop, temperature sharpens or flattens, top-k and top-p
#   cut the unlikely tail; top-p's set is small where the model is sure and large where it is
#   not. Sampled, the larger model writes text with the form of a play and little of its sense.
# * A KV cache keeps each layer's keys and values, so every new token costs one position's
#   work plus attention over the cache; it gives the same tokens, saving more seconds the
#   longer the text, up to the context length.
# * Chapter 11 exports this GPT as Hugging Face's `GPT2LMHeadModel`, and builds a modern
#   decoder, Llama's design, from it one difference at a time. The
#   [Performance appendix](performance.md) times this GPT compiled, in bfloat16 and trained
#   by two processes at once.
#
# ## Exercises
#
# **1. Min-p sampling.** A newer filter (Nguyen et al., 2024, "Turning Up the Heat: Min-p
# Sampling for Creative and Coherent LLM Outputs") keeps the tokens whose probability is at least a
# fraction `m` of the most likely token's probability. Write `min_p_filter(logits, m)` in the
# style of `top_k_filter`. Predict: does it always keep the most likely token? Does it keep more
# tokens when the model is sure of the next token, or when it is unsure? Check both on two small
# made-up rows of logits, one peaked and one flat.


# %% tags=["solution"]
def min_p_filter(logits: torch.Tensor, m: float) -> torch.Tensor:
    p = logits.softmax(-1)
    keep = p >= m * p.max(dim=-1, keepdim=True).values
    return logits.masked_fill(~keep, float("-inf"))


sure = torch.tensor([5.0, 1.0, 0.5, 0.0])
unsure = torch.tensor([1.0, 0.9, 0.8, 0.0])
n_sure = int(torch.isfinite(min_p_filter(sure, 0.1)).sum())
n_unsure = int(torch.isfinite(min_p_filter(unsure, 0.1)).sum())
print("kept when sure:", n_sure, "| kept when unsure:", n_unsure)

# %% [markdown] tags=["solution"]
# The most likely token always passes, since $p_{\max} \ge m \, p_{\max}$ for any $m \le 1$. The
# threshold is relative to the top probability: when the model is sure, the top probability is
# large and so is the threshold, and only 1 token survives here; when it is unsure, the top is
# small, the threshold low, and all 4 survive. Like top-p, min-p adapts the size of the kept
# set to the model's confidence, with one comparison per token instead of a sort.

# %% [markdown]
# **2. The two ends of temperature.** Predict what sampling from the larger model at a very low
# temperature (`temperature=0.01`) produces, and what the next-character distribution after the
# `HAMLET.` prompt looks like at a very high one (`temperature=1000`). Check both: compare the
# first with another decoding rule, and measure the entropy of the second.

# %% tags=["solution"]
rng = torch.Generator().manual_seed(0)
cold = generate(big, ids, 40, do_sample=True, temperature=0.01, generator=rng)
warm = generate(big, ids, 40)  # greedy
n = ids.shape[1]
same = next((i for i in range(40) if cold[0, n + i] != warm[0, n + i]), 40)
print(f"T = 0.01 and greedy agree on the first {same} of 40 characters")
if same < 40:  # where they part: the gap between the two most likely
    with torch.no_grad():
        top2 = big(warm[:, : n + same])[0, -1].topk(2).values
    gap = (top2[0] - top2[1]).item()
    print(
        f"there the top two logits differ by {gap:.4f}, "
        f"{gap / 0.01:.2f} at T = 0.01"
    )
hot = next_token_probs(logits, temperature=1000.0)
hot_entropy = -(hot * hot.log()).sum().item()
print(
    f"entropy at T = 1000: {hot_entropy:.3f} nats, ln 96 = {math.log(96):.3f}"
)

# %% [markdown] tags=["solution"]
# Dividing the logits by $T = 0.01$ multiplies the gaps between them by 100: wherever the most
# likely character leads by more than about 0.05, it gets nearly all the probability (a lead
# of 0.05 becomes 5, and $e^{5} \approx 150$), and sampling picks what greedy decoding picks. Here the two agree for 31
# characters and part where two characters are all but tied: a gap of 0.0007, still only 0.07
# after the division, leaves the choice close to a coin toss. Dividing by $T = 1000$ shrinks every gap towards 0, and the softmax of
# nearly equal logits is nearly uniform: the entropy reaches $\ln 96$, its largest possible
# value.

# %% [markdown]
# **3. A GPT without positions.** Without its position embedding, the first layer's attention
# cannot tell where in the context an earlier character stands (chapter 03 showed this on
# attention alone). Two experiments. (a) Train the small model for 300 steps as in *What each
# part buys* (`train_300`), with its position embedding set to zero and frozen
# (`model.pos_emb.weight.requires_grad_(False)`; `train`'s optimiser then leaves it out), and
# compare it with the whole model trained there.
# (b) Take the small model trained in this chapter and set its position embedding to zero,
# without training it again. Predict first: in (a), how far behind does the model without
# positions end? In (b), how much does the trained model lose?


# %% tags=["solution", "nbval-ignore-output"]
no_pos = train_300(positions=False)
without_pos = window_losses(no_pos).mean().item()
print("(a) 300 steps from scratch")
print(f"    with positions:          {with_pos:.3f} nats/char")
print(f"    without positions:       {without_pos:.3f} nats/char")
print(f"    previous character only: {bigram_loss:.3f} nats/char")
blind = GPT(config).eval()
blind.load_state_dict(model.state_dict())
with torch.no_grad():
    blind.pos_emb.weight.zero_()
blind_loss = window_losses(blind).mean().item()
print("(b) the chapter's trained small model")
print(f"    with its positions:      {val_loss:.3f} nats/char")
print(f"    positions set to zero:   {blind_loss:.3f} nats/char")
assert bigram_loss > without_pos > with_pos  # behind, but past the yardstick
assert blind_loss > val_loss + 0.5  # the trained model relies on its positions

# %% [markdown] tags=["solution"]
# (a) After 300 steps the model without positions is 0.09 nats behind (2.47 against 2.38),
# though both are below the previous-character yardstick: predicting from the last character
# needs no positions, since the position that makes the prediction holds that character in its
# own residual stream. (b) The trained model has come to rely on its positions: without them its
# loss rises from 1.86 to 3.13, far worse than the previous-character yardstick (2.55) and not
# far from character frequencies alone (3.33). As chapter 03 showed (its exercise 3), a
# causal model is not quite blind to order even without position embeddings: each position
# attends over a different number of predecessors, and the language models of Haviv et al.
# (2022), cited there, trained without positions came close to those with them. One run of
# 300 steps cannot show whether ours would catch up.

# %% [markdown]
# **4. Context length.** The table of loss by context length showed the chapter's model gaining
# little from characters more than 8 back. Train the small model for 300 steps with a context
# of 16 characters instead of 64 (`block_size=16`), with 64 windows per batch so that every
# step still predicts 1,024 characters, and compare it with the whole model of *What each part buys* on the
# same validation characters: the short model reads each of the 2,048 windows as four windows
# of 16. Predict first: which of the two is ahead after 300 steps? Does the model with the
# context of 64 predict better at its far positions, where it sees more, than in its first 16?

# %% tags=["solution", "nbval-ignore-output"]
short = train_300(block_size=16, batch_size=64)
long_nll, short_nll = base_nll, window_losses(short)
print("after 300 steps, on the same validation characters (nats/char):")
print(f"  context 64, all positions   {long_nll.mean():.3f}")
print(f"    its positions 1-16        {long_nll[:, :16].mean():.3f}")
print(f"    its positions 17-64       {long_nll[:, 16:].mean():.3f}")
print(f"  context 16, all positions   {short_nll.mean():.3f}")
assert short_nll.mean() < long_nll.mean()
assert long_nll[:, 16:].mean() >= long_nll[:, :16].mean()  # no better

# %% [markdown] tags=["solution"]
# After 300 steps the model with a context of 16 is ahead: 2.19 nats per character against
# 2.38, on the same characters. The model with a context of 64 does no better at its far
# positions, where it sees up to 64 characters, than in its first 16, where it sees at most
# 16 (2.39 against 2.36, a little worse): it has not yet learned to use distant characters,
# so its longer context buys it nothing so far. The shorter model, for the same 1,024
# characters per step, draws 64 separate pieces of text per step instead of 16, and has 16
# position vectors to learn instead of 64; and early in training, attention spread over 64
# positions, most of them of little use, may learn more slowly. One run does not separate
# these. A long context pays only once a model has learned to read it, and only if the text
# holds something there to read: even after 1,000 steps, the chapter's model shows no clear
# gain from characters more than 8 back (the table of loss by context length).

# %% [markdown]
# **5. Width or depth.** A block's weight matrices hold $12d^2$ numbers for a width $d$: $4d^2$
# in attention (query, key, value and output) and $8d^2$ in the feed-forward network. One block
# of width 256 therefore holds exactly as many as the small model's four blocks of width 128,
# since $256^2 = 4 \cdot 128^2$. Train a model of one block of width 256 (4 heads of 64
# dimensions) for 300 steps and compare it with the whole model of *What each part buys*. Predict first:
# which is ahead, the deep and narrow model or the shallow and wide one?

# %% tags=["solution", "nbval-ignore-output"]
wide = train_300(n_layer=1, d_model=256, d_ff=4 * 256)  # d_ff = 4 x d_model
wide_loss = window_losses(wide).mean().item()
display(
    Table(
        ["after 300 steps", "parameters", "nats/char"],
        [
            (name, count_parameters(m), loss)
            for name, m, loss in (
                ("4 blocks of width 128", base, with_pos),
                ("1 block of width 256", wide, wide_loss),
            )
        ],
        formats={"parameters": ",", "nats/char": ".3f"},
    )
)


def by_part(m: GPT) -> dict[str, int]:
    """Where a model's parameters are (the output head is the embedding)."""
    blocks = list(m.blocks.parameters())
    return {
        "embeddings (token, position)": count_parameters(m.tok_emb)
        + count_parameters(m.pos_emb),
        "blocks: weight matrices": sum(
            p.numel() for p in blocks if p.dim() == 2
        ),
        "blocks: biases and norms": sum(
            p.numel() for p in blocks if p.dim() == 1
        ),
        "final LayerNorm": count_parameters(m.norm),
    }


narrow_parts, wide_parts = by_part(base), by_part(wide)
display(
    Table(
        ["parameters", "4 x 128", "1 x 256", "change"],
        [
            (name, n, wide_parts[name], wide_parts[name] - n)
            for name, n in narrow_parts.items()
        ],
        formats={"4 x 128": ",", "1 x 256": ",", "change": "+,"},
    )
)
assert wide_loss < with_pos

# %% [markdown] tags=["solution"]
# The shallow, wide model is well ahead after 300 steps: 2.08 nats per character against
# 2.38. Their blocks hold the same number of weight-matrix entries (the second table). The
# totals differ because the embeddings grow with the width, which adds 20,480 parameters to
# the wide model; its single block has 3,328 fewer biases and normalisation weights than four
# narrow ones, and its final LayerNorm 256 more: 3,072 back in all.
#
# Depth gives what width cannot: a block works only on what the blocks before it wrote, so a
# computation in two steps needs two layers. The best-known case is the *induction head*
# (Olsson et al., 2022, "In-context Learning and Induction Heads"): to continue a pattern
# that appeared earlier in the context, one head writes into each position which token came
# before it (a previous-token head, as in chapter 04), and a head in a later layer then finds
# the earlier position whose predecessor is the current token and predicts the token that
# followed it there. A single layer of
# attention cannot compose the two. A run of 300 steps measures how fast a shape learns, not
# how far it can go: whether the deeper model catches up with longer training, this run
# cannot tell.

# %% tags=["remove-cell"]
assert sum(wide_parts.values()) == count_parameters(wide)
