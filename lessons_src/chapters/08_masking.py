# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 — Masking
#
# Attention lets every query look at every key. Two situations need exceptions:
#
# * **Padding.** Sentences in a batch have different lengths, so the short ones are filled up
#   with a padding token. Those positions are not words; nothing should attend to them.
# * **Looking ahead.** A decoder learns to predict token $t+1$ from tokens $\le t$. In training
#   it sees the whole target at once, so without a rule position $t$ could simply read the answer.
#
# A **mask** says, for every (query, key) pair, whether the query may attend to that key. This
# chapter fixes one convention for the whole course, builds the helpers that make masks, draws
# them, and then *proves by experiment* that they do what they promise. It ends with the mistakes
# commonly made with masks, and the errors the package raises to catch them.

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course.attention import (
    MultiHeadAttention,
    scaled_dot_product_attention,
)
from transformer_course.masking import (
    causal_mask,
    combine_masks,
    make_seq2seq_masks,
    padding_mask,
)
from transformer_course.plotting import plot_attention
from transformer_course.transformer import Transformer, TransformerConfig
from transformer_course.utils import set_seed, show_source

g = set_seed(0)

# %% [markdown]
# ## The convention
#
# ```{important}
# **In this course a mask is a boolean tensor, and `True` means "this query may attend to this
# key".** Its shape must broadcast to the attention scores, `(batch, heads, queries, keys)`.
# Every function and model of the package takes masks in this form, and nothing else: not 0/1
# floats, not "True = blocked".
# ```
#
# Libraries disagree on this, which is the root of most mask bugs, so here is how the
# convention compares (each line is checked below):
#
# | where | form | `True` / `1` means |
# |---|---|---|
# | this course | bool, broadcasts to `(batch, heads, L_q, L_k)` | may attend |
# | `torch.nn.functional.scaled_dot_product_attention(attn_mask=...)` | bool, broadcasts to `(..., L_q, L_k)` | may attend (same) |
# | `torch.nn.MultiheadAttention`, `nn.Transformer*` (`key_padding_mask`, `attn_mask`, `tgt_mask`) | bool | **blocked** (opposite) |
# | Hugging Face models (`attention_mask`) | integers `(batch, L)`, 1 / 0 | real token (same meaning, other form) |

# %% [markdown]
# ## A padded batch
#
# A toy vocabulary and three sentences of different lengths. Id 0 is the padding token `<pad>`.
# The decoder's input is the target behind a start token `<bos>`; the labels are the target
# followed by `<eos>` (chapter 09 explains this *shift*).

# %%
specials = ["<pad>", "<bos>", "<eos>"]
vocab = specials + "the cat sat on mat dogs bark a bird sings".split()
PAD, BOS, EOS = 0, 1, 2
word_id = {w: i for i, w in enumerate(vocab)}
sentences = ["the cat sat on the mat", "dogs bark", "a bird sings"]


def to_ids(
    texts: list[str], prefix: list[int] = (), suffix: list[int] = ()
) -> torch.Tensor:
    """Token ids of each text, with optional start/end tokens, padded with
    PAD to one length."""
    rows = [
        list(prefix) + [word_id[w] for w in t.split()] + list(suffix)
        for t in texts
    ]
    n = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (n - len(r)) for r in rows])


def words(ids: torch.Tensor) -> list[str]:
    return [vocab[i] for i in ids.tolist()]


src = to_ids(sentences)  # the encoder's input
tgt = to_ids(sentences, prefix=[BOS], suffix=[EOS])
# decoder input and what it must predict
tgt_in, labels = tgt[:, :-1], tgt[:, 1:]
print("src    ", tuple(src.shape))
for row in src:
    print("  ", " ".join(f"{w:>5}" for w in words(row)))
print("tgt_in ", tuple(tgt_in.shape))
for row in tgt_in:
    print("  ", " ".join(f"{w:>5}" for w in words(row)))

# %% [markdown]
# ## The padding mask
#
# By hand: a key may be attended to if it is a real token, `tokens != pad_id`. That is a
# `(batch, keys)` table. To use it on scores of shape `(batch, heads, queries, keys)`, we insert
# two axes of size 1, for heads and queries: `(batch, 1, 1, keys)`. Broadcasting then repeats it
# for every head and every query, for free.

# %%
by_hand = (src != PAD)[:, None, None, :]
print("shape:", tuple(by_hand.shape))
print(by_hand[:, 0, 0].int())
# 4 heads, self-attention
scores_shape = (src.size(0), 4, src.size(1), src.size(1))
broadcast = tuple(torch.broadcast_shapes(by_hand.shape, scores_shape))
print("broadcasts to the scores", scores_shape, "->", broadcast)
assert torch.equal(by_hand, padding_mask(src, PAD))

# %%
show_source(padding_mask)

# %% [markdown]
# The padding mask blocks padded **keys** only. Padded *queries* still attend (to the real
# words): their outputs are meaningless, but harmless, because no real position reads them (they
# are masked as keys) and the loss ignores them. Blocking them too would create rows with no
# allowed key at all; the section on fully masked rows shows why that needs care.
#
# ## The look-ahead (causal) mask
#
# By hand: position $i$ may see positions $j \le i$. That is the lower triangle of an $n \times n$
# matrix of ones, `tril`. It is the same for every sentence and every head: shape `(1, 1, n, n)`.

# %%
n = tgt_in.size(1)
by_hand = torch.ones(n, n, dtype=torch.bool).tril()
print(by_hand.int())
assert torch.equal(by_hand[None, None], causal_mask(n))

# %%
show_source(causal_mask)

# %% [markdown]
# ## Combining masks
#
# The decoder's self-attention needs both rules: a key is visible only if it is **not in the
# future and not padding**. With `True` = may attend, "allowed by every rule" is a logical
# **AND**. Broadcasting `(batch, 1, 1, n)` against `(1, 1, n, n)` gives `(batch, 1, n, n)`: one
# mask per sentence, shared by the heads.

# %%
show_source(combine_masks)

# %%
dec_self = combine_masks(padding_mask(tgt_in, PAD), causal_mask(n))
print("decoder self-attention mask:", tuple(dec_self.shape))
print(dec_self[1, 0].int())  # "<bos> dogs bark <pad> ..."
for b in range(3):
    for i in range(n):
        for j in range(n):
            expected = j <= i and tgt_in[b, j].item() != PAD
            assert bool(dec_self[b, 0, i, j]) == expected

# %% [markdown]
# An encoder–decoder model needs three masks, one per kind of attention, and
# `make_seq2seq_masks` builds them from exactly the tensors the model receives:
#
# | attention | queries | keys | mask | shape |
# |---|---|---|---|---|
# | encoder self-attention | source | source | source padding | `(batch, 1, 1, L_src)` |
# | decoder self-attention | target | target | target padding AND causal | `(batch, 1, L_tgt, L_tgt)` |
# | cross-attention | target | source (memory) | source padding | `(batch, 1, 1, L_src)` |

# %%
show_source(make_seq2seq_masks)

# %%
src_mask, tgt_mask, memory_mask = make_seq2seq_masks(src, tgt_in, PAD)
for name, m in [
    ("src_mask", src_mask),
    ("tgt_mask", tgt_mask),
    ("memory_mask", memory_mask),
]:
    print(f"{name:<12} {tuple(m.shape)}  {m.dtype}")
assert torch.equal(tgt_mask, dec_self)
assert torch.equal(memory_mask, padding_mask(src, PAD))

# %% [markdown]
# The three masks of the decoder's self-attention for the two padded sentences: dark cells are
# the (query, key) pairs that may attend.

# %%
fig, axes = plt.subplots(3, 2, figsize=(6.6, 10))
for col, b in enumerate([1, 2]):
    labels_b = words(tgt_in[b])
    panels = [
        ("padding mask", padding_mask(tgt_in, PAD)[b, 0].expand(n, n)),
        ("look-ahead mask", causal_mask(n)[0, 0]),
        ("combined (AND)", tgt_mask[b, 0]),
    ]
    for row, (title, m) in enumerate(panels):
        plot_attention(
            m.float(),
            labels_b,
            ax=axes[row, col],
            cmap="Blues",
            colorbar=False,
            vmax=1.0,
            title=f"{title}:\n“{sentences[b]}”",
        )
fig.tight_layout()
plt.show()

# %% [markdown]
# ## How attention applies a mask
#
# Blocked scores are replaced by the most negative float before the softmax, so that
# $e^{\text{score}}$ is exactly 0 for them; a query whose keys are *all* blocked is handled
# separately (below). This is the package's attention from chapter 04:

# %%
show_source(scaled_dot_product_attention)

# %% [markdown]
# Applied to the padded decoder batch (random queries and keys, 4 heads): every blocked weight is
# exactly 0, and every row still sums to 1 over the keys it may see.

# %%
q = torch.randn(3, 4, n, 8, generator=g)
k = torch.randn(3, 4, n, 8, generator=g)
v = torch.randn(3, 4, n, 8, generator=g)
_, weights = scaled_dot_product_attention(q, k, v, tgt_mask)
blocked = ~tgt_mask.expand_as(weights)
print("largest weight on a blocked key:", weights[blocked].max().item())
print("rows sum to 1:", torch.allclose(weights.sum(-1), torch.ones(3, 4, n)))
assert torch.all(weights[blocked] == 0.0)
assert torch.allclose(weights.sum(-1), torch.ones(3, 4, n))

ax = plot_attention(
    weights[1, 0],
    words(tgt_in[1]),
    annotate=True,
    title="attention weights after masking (“dogs bark”, head 0)",
)
plt.show()

# %% [markdown]
# PyTorch's fused attention reads a boolean mask the same way as we do, and
# `nn.MultiheadAttention` the opposite way: handed our mask unchanged, it attends to the padding
# *only* (and a sentence without padding would have every key blocked). Checking the table above:

# %%
out_ours, _ = scaled_dot_product_attention(q, k, v, tgt_mask)
out_fused = F.scaled_dot_product_attention(q, k, v, attn_mask=tgt_mask)
print(
    "F.scaled_dot_product_attention agrees with our mask:",
    torch.allclose(out_ours, out_fused, atol=1e-6),
)
assert torch.allclose(out_ours, out_fused, atol=1e-6)

torch_mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
x = torch.randn(3, src.size(1), 16, generator=g)
real_keys = padding_mask(src, PAD)[:, 0, 0]  # (batch, keys), True = real
with torch.no_grad():
    # negated: True = blocked
    _, w_right = torch_mha(x, x, x, key_padding_mask=~real_keys)
    # our mask as it is
    _, w_wrong = torch_mha(x, x, x, key_padding_mask=real_keys)
padding_keys = ~real_keys[:, None, :].expand_as(w_right)
on_padding = w_right.masked_select(padding_keys).sum().item()
# (sentences 1 and 2 only: sentence 0 has no padding, so our mask unchanged
# would block all its keys)
word_keys = real_keys[1:, None, :].expand_as(w_wrong[1:])
on_words = w_wrong[1:].masked_select(word_keys).sum().item()
print(
    "nn.MultiheadAttention, key_padding_mask=~mask: "
    f"total weight on padding    {on_padding:.4f}"
)
print(
    "nn.MultiheadAttention, key_padding_mask=mask:  "
    f"total weight on real words {on_words:.4f}"
)
assert on_padding == 0 and on_words == 0

# %% [markdown]
# And a Hugging Face model: its `attention_mask` is `1` at real tokens. A tiny, randomly
# initialised BERT (built from a config: nothing is downloaded) gives the same outputs at the real
# positions whatever the padded tokens are, once `attention_mask` marks them with 0.

# %%
import warnings  # only this cell needs these imports

# importing transformers may warn about optional widgets
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from transformers import BertConfig, BertModel

torch.manual_seed(0)
bert_config = BertConfig(
    vocab_size=len(vocab),
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=32,
    max_position_embeddings=16,
)
tiny_bert = BertModel(bert_config).eval()
# Hugging Face form: (batch, L), 1 = real token
attention_mask = (src != PAD).long()
junk = torch.where(src == PAD, torch.full_like(src, word_id["cat"]), src)
with torch.no_grad():
    out_real = tiny_bert(input_ids=src, attention_mask=attention_mask)
    out_junk = tiny_bert(input_ids=junk, attention_mask=attention_mask)
h1, h2 = out_real.last_hidden_state, out_junk.last_hidden_state
real = src != PAD
print(
    "real positions unchanged:", torch.allclose(h1[real], h2[real], atol=1e-6)
)
assert torch.allclose(h1[real], h2[real], atol=1e-6)
assert torch.equal(
    attention_mask.bool()[:, None, None, :], padding_mask(src, PAD)
)

# %% [markdown]
# ## Proof by experiment 1: padding changes nothing
#
# If the masks are right, the tokens *at* padded positions cannot matter: replace them with
# arbitrary words, and every output at a real position must stay the same, in the encoder and
# (through cross-attention) in the decoder. As a control, the same experiment without masks must
# show a change. The model is a small, untrained `Transformer` with dropout switched off (the
# claim is about the wiring, not the weights).

# %%
set_seed(0)
config = TransformerConfig(
    len(vocab),
    len(vocab),
    d_model=32,
    num_heads=4,
    num_encoder_layers=2,
    num_decoder_layers=2,
    d_ff=64,
    dropout=0.0,
    max_len=32,
)
model = Transformer(config).eval()

junk_ids = torch.randint(3, len(vocab), src.shape, generator=g)
src_junk = torch.where(src == PAD, junk_ids, src)
print("src with junk in the padding:")
for row in src_junk:
    print("  ", " ".join(f"{w:>5}" for w in words(row)))

real = src != PAD
with torch.no_grad():
    mem = model.encode(src, src_mask)
    mem_junk = model.encode(src_junk, src_mask)
    logits = model.decode(tgt_in, mem, tgt_mask, memory_mask)
    logits_junk = model.decode(tgt_in, mem_junk, tgt_mask, memory_mask)
    unmasked = model.encode(src), model.encode(src_junk)

enc_change = (mem[real] - mem_junk[real]).abs().max().item()
dec_change = (logits - logits_junk).abs().max().item()
control = (unmasked[0][real] - unmasked[1][real]).abs().max().item()
print(
    "with masks:    "
    f"largest change of the encoder output at real positions {enc_change:.6f}"
)
print(
    "               "
    f"largest change of any decoder logit                   {dec_change:.6f}"
)
print(
    "without masks: "
    f"largest change of the encoder output at real positions {control:.2f}"
)
assert enc_change < 1e-6 and dec_change < 1e-6 and control > 0.01

# %% [markdown]
# ## Proof by experiment 2: no peeking at the future
#
# Take the decoder input, keep positions $0..t$, replace everything after $t$ with random words,
# and rebuild the masks. With the causal mask, the logits at positions $\le t$ must not move, for
# every $t$. The grid shows the largest change of the logits at each position (columns) when the
# tokens after $t$ (rows) are replaced; with the causal mask the cells on and left of the diagonal
# are exactly 0. Without it (padding mask only) the change reaches every position.


# %%
def future_sensitivity(
    causal: torch.Tensor | None, b: int = 0
) -> torch.Tensor:
    """grid[t, i] = max |change of the logits at position i| when tokens
    after t are replaced, with `causal` (None: the padding mask only)
    combined into the target mask."""
    grid = torch.zeros(n - 1, n)
    x = tgt_in[b : b + 1]
    src_b = src[b : b + 1]
    src_mask_b = padding_mask(src_b, PAD)
    with torch.no_grad():
        memory = model.encode(src_b, src_mask_b)
        for t in range(n - 1):
            changed = x.clone()
            changed[:, t + 1 :] = torch.randint(
                3, len(vocab), (1, n - t - 1), generator=g
            )
            outs = []
            for seq in (x, changed):
                mask = combine_masks(padding_mask(seq, PAD), causal)
                outs.append(model.decode(seq, memory, mask, src_mask_b))
            grid[t] = (outs[0] - outs[1]).abs().amax(-1)[0]
    return grid


with_causal = future_sensitivity(causal_mask(n))
without_causal = future_sensitivity(None)
fig, axes = plt.subplots(2, 1, figsize=(6.4, 8.4))
for ax, grid, title in [
    (axes[0], with_causal, "with the causal mask"),
    (axes[1], without_causal, "padding mask only"),
]:
    plot_attention(
        grid,
        keys=[f"{i}" for i in range(n)],
        queries=[f"after {t}" for t in range(n - 1)],
        ax=ax,
        cmap="magma",
        title=title,
        vmax=float(without_causal.max()),
    )
    ax.set_xlabel("position whose logits are compared")
    ax.set_ylabel("tokens replaced")
fig.tight_layout()
plt.show()

for t in range(n - 1):
    assert torch.all(with_causal[t, : t + 1] == 0), (
        f"position <= {t} saw the future"
    )
    assert torch.all(with_causal[t, t + 1 :] > 0)
assert torch.all(without_causal > 0)
print(
    "with the causal mask, logits at positions <= t never change:",
    bool((with_causal.tril() == 0).all()),
)

# %% [markdown]
# ## Proof by experiment 3: a query that may see nothing
#
# Sometimes a query row has **no** allowed key. It happens with *left* padding, common when a
# decoder generates for a batch of prompts: the sequence starts with pads, and the causal mask
# lets the first position see only itself, a pad. It also happens when padded queries are masked
# as well as padded keys, or when a whole sequence is padding.
#
# What should such a query get? Compare three ways of applying the mask to one left-padded row:
#
# * fill blocked scores with $-\infty$: the softmax computes $0/0$ and returns **NaN**;
# * add $-10^9$ to blocked scores (a common way, e.g. in TensorFlow's Transformer tutorial): every
#   score is equally very
#   negative, so the softmax returns **uniform weights over the blocked keys**: the query attends
#   to padding after all;
# * the course's way: the most negative finite float, then the weights of a row with no allowed
#   key are set to **0**, so its attention output is a vector of **zeros**.

# %%
left_padded = torch.tensor([[PAD, PAD, word_id["dogs"], word_id["bark"]]])
mask = combine_masks(padding_mask(left_padded, PAD), causal_mask(4))
print("mask for “<pad> <pad> dogs bark” (left padding) with the causal rule:")
print(mask[0, 0].int())
q4, k4, v4 = (torch.randn(1, 1, 4, 8, generator=g) for _ in range(3))
scores = q4 @ k4.transpose(-2, -1) / math.sqrt(8)

w_inf = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
w_add = torch.softmax(scores + (~mask).float() * -1e9, dim=-1)
out_course, w_course = scaled_dot_product_attention(q4, k4, v4, mask)
torch.set_printoptions(precision=3)
print("row 0 with -inf:      ", w_inf[0, 0, 0])
print("row 0 with -1e9 added:", w_add[0, 0, 0])
print(
    "row 0, course:        ",
    w_course[0, 0, 0],
    " output row 0:",
    out_course[0, 0, 0, :3],
    "...",
)
torch.set_printoptions(profile="default")
assert torch.isnan(w_inf[0, 0, 0]).all()
assert torch.allclose(w_add[0, 0, 0], torch.full((4,), 0.25))
assert torch.all(w_course[0, 0, 0] == 0)
assert torch.all(out_course[0, 0, 0] == 0)
assert torch.isfinite(out_course).all()

# %% [markdown]
# Why does the course insist on finite zeros rather than "it's only a padded position"? Because a
# NaN does not stay where it was born. In the next layer, that position is a *key*; the mask
# gives it weight 0 from every real query, but $0 \times \text{NaN} = \text{NaN}$, so the weighted
# sum of every query turns into NaN, and then the loss and every gradient. Two layers of the
# $-\infty$ version on the left-padded row:


# %%
def attention_with_inf(x, mask):
    """Self-attention (no projections) with the naive -inf fill: for this
    demonstration only."""
    s = x @ x.transpose(-2, -1) / math.sqrt(x.size(-1))
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ x


x = torch.randn(1, 1, 4, 8, generator=g)
layer1 = attention_with_inf(x, mask)
layer2 = attention_with_inf(layer1, mask)
print(
    "positions holding NaN after layer 1:",
    torch.isnan(layer1).any(-1)[0, 0].int().tolist(),
)
print(
    "positions holding NaN after layer 2:",
    torch.isnan(layer2).any(-1)[0, 0].int().tolist(),
)
assert torch.isnan(layer2).any(-1).all()

y = x
for _ in range(2):
    y, _ = scaled_dot_product_attention(y, y, y, mask)
print(
    "the course's attention, two layers: all finite:",
    bool(torch.isfinite(y).all()),
)
assert torch.isfinite(y).all()

# %% [markdown]
# So the rule is: **a query that may attend to nothing receives nothing** (zero weights, zero
# attention output). Inside a layer the residual connection then simply carries that position's
# own vector forward. The output at such a position is not meaningful, and nothing uses it: it
# is a padded position, masked as a key everywhere and ignored by the loss. The gradients stay
# finite too:

# %%
qg, kg, vg = (t.clone().requires_grad_() for t in (q4, k4, v4))
out, _ = scaled_dot_product_attention(qg, kg, vg, mask)
out.sum().backward()
print(
    "gradients finite:",
    all(bool(torch.isfinite(t.grad).all()) for t in (qg, kg, vg)),
)
assert all(torch.isfinite(t.grad).all() for t in (qg, kg, vg))

# %% [markdown]
# ## Common pitfalls
#
# ```{admonition} Common pitfalls
# :class: warning
#
# 1. **Mixing conventions, then combining with `max`.** Both conventions are published and widely
#    copied. TensorFlow's Transformer tutorial builds its padding mask as `(seq == 0)`, **1 at
#    padding** ("blocked"), adds `mask * -1e9` to the scores and merges its masks with
#    `tf.maximum`, correctly, since all its masks mean "blocked". The Annotated Transformer's
#    look-ahead mask is `triu(ones, 1) == 0`, **True where allowed**. Take the padding mask from the
#    first and the look-ahead mask from the second, merge them with `torch.max`, and each mask alone
#    is plausible while together they mean nothing. Read as 1 = blocked (adding
#    `mask * -1e9`), the result lets each position
#    see **only the future**, never itself (and the last real positions nothing at all); read
#    the other way, it lets padding through. The
#    fix is one convention everywhere, and the combination that matches it: AND for "may attend"
#    masks (`combine_masks`), OR (`max`) only for masks that are *all* "blocked".
# 2. **A mask for one tensor, used with another.** Building the masks from the full target `tgt`
#    and then feeding the model `tgt[:, :-1]`. The mask is one position too long:
#    here that is a shape error, with a message naming both shapes. The tempting "fix", feeding
#    the unshifted target so that shapes agree, is worse: position $t$ is then asked to predict
#    the token it is allowed to see, the model learns to copy, and nothing complains. Build the
#    masks from exactly the decoder input: `make_seq2seq_masks(src, tgt_in, pad_id)`.
# 3. **Passing our masks to PyTorch's `nn.MultiheadAttention` / `nn.Transformer*` unchanged.**
#    They read `True` as blocked: negate (`~mask`) and pass the pieces they expect.
# 4. **Filling with `-inf`.** Fully masked rows turn into NaN, which then spreads to every
#    position (experiment 3).
# ```
#
# Pitfall 1, run. The three mixed-up lines, in our variable names (do **not** use this). In the
# figure, dark cells are the pairs a mask lets through.

# %%
# 1 = padding (blocked)
mixed_padding = (tgt_in == PAD).float()[:, None, None, :]
# True = allowed
mixed_look_ahead = torch.triu(torch.ones(n, n), diagonal=1) == 0
# float, (batch, 1, n, n)
mixed_combined = torch.max(mixed_padding, mixed_look_ahead[None])
print("the mixed combined mask for “dogs bark”:")
print(mixed_combined[1, 0].int())

# attention that adds mask * -1e9: 0 = may attend
mixed_lets_through = mixed_combined == 0
future = ~causal_mask(n)[0, 0]
allowed = mixed_lets_through[1, 0]
print(
    "pairs it lets through:",
    int(allowed.sum()),
    "| of which in the future:",
    int((allowed & future).sum()),
    "| a position attending to itself:",
    bool(allowed.diagonal().any()),
)
# never the past or itself
assert torch.equal(allowed & ~future, torch.zeros(n, n, dtype=torch.bool))
assert (allowed & future).any()

fig, axes = plt.subplots(1, 3, figsize=(6.8, 3.6))
for ax, m, title in [
    (
        axes[0],
        mixed_lets_through[1, 0],
        "mixed, read as 1 = blocked:\nonly the future",
    ),
    (
        axes[1],
        mixed_combined[1, 0].bool(),
        "mixed, read as 1 = may attend:\npast and padding",
    ),
    (axes[2], tgt_mask[1, 0], "combine_masks (AND):\npast, no padding"),
]:
    plot_attention(
        m.float(),
        words(tgt_in[1]),
        ax=ax,
        cmap="Blues",
        colorbar=False,
        vmax=1.0,
    )
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("")
    ax.set_ylabel("")
fig.tight_layout()
plt.show()

# %% [markdown]
# Both conventions can be made right: with "blocked" masks, `max` (an OR of the blocks) is the
# correct combination, and its negation equals ours:

# %%
blocked_padding = (tgt_in == PAD)[:, None, None, :]  # True = blocked
blocked_future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
blocked = torch.maximum(blocked_padding, blocked_future[None, None])
print(
    "max of two 'blocked' masks == NOT our AND:",
    torch.equal(~blocked, tgt_mask),
)
assert torch.equal(~blocked, tgt_mask)

# %% [markdown]
# Pitfall 2, run. Masks built from the full target, model fed the shifted one:

# %%
full_target_mask = combine_masks(
    padding_mask(tgt, PAD), causal_mask(tgt.size(1))
)
memory = model.encode(src, src_mask)
try:
    model.decode(tgt[:, :-1], memory, full_target_mask, memory_mask)
except ValueError as err:
    print("ValueError:", err)

# %% [markdown]
# And the "fix" that hides it: decoder input and labels taken from the same unshifted `tgt`.
# Every position may see its own label:

# %%
unshifted_in, unshifted_labels = tgt, tgt
m = combine_masks(
    padding_mask(unshifted_in, PAD), causal_mask(unshifted_in.size(1))
)
sees_own_label = m[:, 0].diagonal(dim1=-2, dim2=-1) & (unshifted_labels != PAD)
print(
    "real positions that can read the very token they must predict:",
    int(sees_own_label.sum()),
    "of",
    int((unshifted_labels != PAD).sum()),
)
assert torch.equal(sees_own_label, unshifted_labels != PAD)
# with the shift, the label of position t is token t + 1 of tgt, which the
# causal mask hides from it
assert not (tgt_mask[:, 0].diagonal(offset=1, dim1=-2, dim2=-1)).any()

# %% [markdown]
# ## Clear errors
#
# The package checks every mask before using it. A mask whose shape cannot broadcast to the
# scores is reported with both shapes (above: `(3, 1, 8, 8)` against `(3, 4, 7, 7)`), and a mask
# that is not boolean is rejected rather than guessed at, because a 0/1 tensor does not say which
# of the two conventions it follows. The float padding mask of pitfall 1, for instance:

# %%
mha = MultiHeadAttention(32, 4)
x = torch.randn(3, n, 32, generator=g)
try:
    mha(x, mask=mixed_padding)
except TypeError as err:
    print("TypeError:", err)

# %% [markdown]
# The message's `mask.bool()` is right for a 0/1 mask with **1 = may attend** (a Hugging Face
# `attention_mask`, say). This mask has 1 = padding, so its course equivalent is
# `mixed_padding == 0`: converting needs knowing the convention, which is why it is left to you.

# %%
converted = mixed_padding == 0
print(
    "mixed_padding == 0 equals padding_mask(tgt_in):",
    torch.equal(converted, padding_mask(tgt_in, PAD)),
)
assert torch.equal(converted, padding_mask(tgt_in, PAD))
out, _ = mha(x, mask=converted)
assert torch.isfinite(out).all()

# %% [markdown]
# `combine_masks` checks the same two things:

# %%
for bad in [
    (padding_mask(tgt_in, PAD), causal_mask(n).float()),
    (padding_mask(src, PAD), causal_mask(n)),
]:
    try:
        combine_masks(*bad)
    except (TypeError, ValueError) as err:
        print(f"{type(err).__name__}: {err}")

# %% [markdown]
# ## Summary
#
# * One convention: boolean, `True` = may attend, broadcastable to `(batch, heads, L_q, L_k)`.
#   `padding_mask` gives `(batch, 1, 1, L)`, `causal_mask` gives `(1, 1, n, n)`, `combine_masks`
#   ANDs them, `make_seq2seq_masks` returns the three masks of an encoder–decoder step.
# * Blocked keys get weight exactly 0; a query with no allowed key gets zero weights and a zero
#   output, never NaN.
# * Checked by experiment above: padded tokens change no real output; no decoder output
#   depends on later tokens; fully masked rows stay finite.
# * Build masks from exactly the tensors the model gets, and convert explicitly when crossing
#   into a library with another convention.
#
# ## Exercises
#
# **1. Left padding.** Pad the three sentences on the **left** instead of the right, build the
# decoder's self-attention mask with `combine_masks(padding_mask(...), causal_mask(...))`, and find
# the query rows with no allowed key. Run the `model`'s decoder on the left-padded input: are all
# logits finite? Do the real positions still see every real word before them?

# %% tags=["solution"]
rows = [[word_id[w] for w in ["<bos>"] + s.split()] for s in sentences]
width = max(len(r) for r in rows)
left = torch.tensor([[PAD] * (width - len(r)) + r for r in rows])
left_mask = combine_masks(padding_mask(left, PAD), causal_mask(width))
# (batch, queries): True where no key is allowed
empty_rows = ~left_mask.any(-1)[:, 0]
print("queries with no allowed key (1 = empty row):")
print(empty_rows.int())
assert torch.equal(empty_rows, left == PAD)  # exactly the leading pads
with torch.no_grad():
    out = model.decode(
        left, model.encode(src, src_mask), left_mask, memory_mask
    )
print("all logits finite:", bool(torch.isfinite(out).all()))
assert torch.isfinite(out).all()
# the last real position sees every real token of its sentence
for b in range(3):
    assert torch.equal(left_mask[b, 0, -1], left[b] != PAD)

# %% [markdown]
# **2. Break the causal mask on purpose.** Replace `causal_mask(n)` in experiment 2 by a mask
# that is off by one, `torch.ones(n, n, dtype=torch.bool).tril(diagonal=1)[None, None]`, and
# recompute the grid. Which positions now change when the tokens after $t$ are replaced? How far
# ahead does position $i$ see through the model's two decoder layers? Why would a model trained
# with this mask reach a very low training loss and then fail at generation?

# %% tags=["solution"]
off_by_one = torch.ones(n, n, dtype=torch.bool).tril(diagonal=1)[None, None]
grid = future_sensitivity(off_by_one)
leaks = [t for t in range(n - 1) if grid[t, t] > 0]
print(
    "positions t whose logits change when tokens after t are replaced:", leaks
)
# position t now sees token t + 1: exactly the label it is trained to predict
assert leaks == list(range(n - 1))
# and the leak compounds over the 2 decoder layers: position i depends on
# tokens up to i + 2
depth = len(model.decoder.layers)
reach = torch.tensor(
    [[i >= t + 1 - depth for i in range(n)] for t in range(n - 1)]
)
print(
    f"with {depth} layers, position i depends on tokens up to i + {depth}:",
    torch.equal(grid > 0, reach),
)
assert torch.equal(grid > 0, reach)

# %% [markdown]
# **3. The mixed masks, repaired in the "blocked" convention.** Keep the "1 = blocked" convention
# of the padding mask and the `torch.max`, but make *both* masks follow it: padding is 1, and the
# future is 1. Check that your combined mask is exactly `~tgt_mask` (as floats: `1 - tgt_mask`),
# and that the additive attention (`softmax(scores + mask * -1e9)`) then gives the same weights
# as ours for every row that has an allowed key.

# %% tags=["solution"]
repaired_padding = (tgt_in == PAD).float()[:, None, None, :]  # 1 = blocked
# 1 = blocked (the future)
repaired_future = torch.triu(torch.ones(n, n), diagonal=1)[None, None]
repaired = torch.max(repaired_padding, repaired_future)
print("repaired == 1 - tgt_mask:", torch.equal(repaired, 1 - tgt_mask.float()))
assert torch.equal(repaired, 1 - tgt_mask.float())

scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
w_additive = torch.softmax(scores + repaired * -1e9, dim=-1)
_, w_course = scaled_dot_product_attention(q, k, v, tgt_mask)
print(
    "same weights as the course's attention:",
    torch.allclose(w_additive, w_course, atol=1e-6),
)
assert torch.allclose(w_additive, w_course, atol=1e-6)
