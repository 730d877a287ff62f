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
# Attention lets every query look at every key. Two situations need exceptions, padding and
# looking ahead:
#
# * **Padding.** Sentences in a batch have different lengths, so the short ones are filled up
#   with a padding token. Those positions are not words; nothing should attend to them.
# * **Looking ahead.** A decoder is trained to predict token $t+1$ from tokens $\le t$, and in
#   training it is shown the whole target sentence at once. Without a rule, position $t$ could
#   simply read token $t+1$, the very answer it is asked for, and would learn to copy instead of
#   to predict (a section below trains such a model).
#
# A **mask** says, for every (query, key) pair, whether the query may attend to that key.
# Chapter 04 fixed the course's convention, a boolean tensor in which `True` means "may
# attend", and chapter 07 used the masks ready-made. This chapter builds them from their purpose,
# proves that they leak nothing and checks the proof on a model, trains a model whose mask
# leaks, looks at what happens to a query that may attend to nothing, and then runs the
# mistakes commonly made with masks, most of them at the border with another library's
# convention.

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
from transformer_course.transformer import (
    EncoderLayer,
    Transformer,
    TransformerConfig,
)
from transformer_course.utils import set_seed, show_source

# %%
# the same random numbers on every run (g: a seeded torch.Generator)
g = set_seed(0)

# %% [markdown]
# ## A padded batch
#
# A toy vocabulary and three sentences of different lengths. Id 0 is the padding token `<pad>`.
# The decoder reads the target behind a start token `<bos>`; its labels, what each position
# must predict, are the target followed by an end token `<eos>`: the same sequence shifted by
# one (chapter 09 trains with this shift).

# %%
specials = ["<pad>", "<bos>", "<eos>"]
vocab = specials + "the cat sat on mat dogs bark a bird sings".split()
PAD, BOS, EOS = 0, 1, 2
word_id = {w: i for i, w in enumerate(vocab)}
sentences = ["the cat sat on the mat", "dogs bark", "a bird sings"]


def to_ids(
    texts: list[str],
    prefix: tuple[int, ...] = (),
    suffix: tuple[int, ...] = (),
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


def show_rows(name: str, ids: torch.Tensor) -> None:
    print(name, tuple(ids.shape))
    for row in ids:
        print("  ", " ".join(f"{w:>5}" for w in words(row)))


src = to_ids(sentences)  # the encoder's input
tgt = to_ids(sentences, prefix=(BOS,), suffix=(EOS,))
tgt_in, labels = tgt[:, :-1], tgt[:, 1:]  # decoder input, what it predicts
show_rows("src", src)
show_rows("tgt_in", tgt_in)
show_rows("labels", labels)

# %% [markdown]
# ## The padding mask
#
# By hand: a key may be attended to if it is a real token, `tokens != pad_id`. That is a
# `(batch, keys)` table. To use it on scores of shape `(batch, heads, queries, keys)`, we insert
# two axes of size 1, for heads and queries: `(batch, 1, 1, keys)`. Broadcasting then repeats it
# for every head and every query, for free. (d2l.ai describes the same padding by each
# sentence's number of real tokens, `valid_lens`; the comparison with `arange` that chapter 04's
# exercise 3 used turns one into the other.)

# %%
by_hand = (src != PAD)[:, None, None, :]
print("shape:", tuple(by_hand.shape))
print(by_hand[:, 0, 0].int())
scores_shape = (src.size(0), 4, src.size(1), src.size(1))  # 4 heads
print(
    "broadcasts to the scores",
    scores_shape,
    "->",
    tuple(torch.broadcast_shapes(by_hand.shape, scores_shape)),
)
valid_lens = (src != PAD).sum(1)
from_lengths = torch.arange(src.size(1)) < valid_lens[:, None]
print(
    f"from valid_lens {valid_lens.tolist()}:",
    torch.equal(from_lengths, by_hand[:, 0, 0]),
)
print(
    "padding_mask(src, PAD) is the same:",
    torch.equal(padding_mask(src, PAD), by_hand),
)

# %%
show_source(padding_mask)

# %% [markdown]
# The padding mask blocks padded **keys** only. Padded *queries* still attend (to the real
# words): their outputs are meaningless, but harmless, because no real position reads them
# (they are masked as keys) and the loss skips padded labels (chapter 09). Blocking them too
# would leave rows with no allowed key at all; check 3 below shows why such rows need care.
#
# ## The look-ahead (causal) mask
#
# Position $i$ may gather information from positions $\le i$ only. The simplest way to gather
# is to average, and it can be written three ways: a loop over the past; one matrix product
# with a lower-triangular matrix whose rows sum to 1; and a softmax over scores in which every
# score above the diagonal is $-\infty$. The third is attention with all scores equal to 0.

# %%
x = torch.randn(4, 2, generator=g)  # 4 positions, 2 features
loop = torch.stack([x[: i + 1].mean(0) for i in range(4)])

lower = torch.ones(4, 4).tril()
w_average = lower / lower.sum(1, keepdim=True)

w_softmax = torch.softmax(
    torch.zeros(4, 4).masked_fill(lower == 0, float("-inf")), dim=-1
)
print(w_softmax)
print("matrix product == loop:", torch.allclose(w_average @ x, loop))
print(
    "softmax weights == averaging weights:", torch.equal(w_softmax, w_average)
)

# %% [markdown]
# Attention replaces the zeros by scores $q_i \cdot k_j / \sqrt{d_k}$ computed from the tokens.
# On the same `x`, with random query and key maps standing in for learned ones:

# %%
maps = torch.Generator().manual_seed(1)
Wq, Wk = torch.randn(2, 2, 2, generator=maps)  # query and key maps
s_x = (x @ Wq) @ (x @ Wk).T / math.sqrt(2)  # 4 x 4 scores
w = torch.softmax(s_x.masked_fill(lower == 0, float("-inf")), dim=-1)
print(w.round(decimals=2))

# %% [markdown]
# The same lower triangle, now holding weights that depend on what the tokens are: each
# position weighs its past by relevance instead of equally. That triangle is the whole causal
# mask. `causal_mask(n)` returns it as booleans with two leading
# axes of size 1, for the batch and the heads, since it is the same for every sentence and
# every head.

# %%
n = tgt_in.size(1)
by_hand = torch.ones(n, n, dtype=torch.bool).tril()
print(by_hand.int())
print(
    "causal_mask(n) is the same:", torch.equal(causal_mask(n)[0, 0], by_hand)
)

# %%
show_source(causal_mask)

# %% [markdown]
# This is what makes training a decoder cheap: because row $i$ reads only positions $\le i$,
# **one forward pass over $n$ tokens gives $n$ predictions**, and each is the one the
# model would make if it had been given only the prefix up to $i$, as it is when it generates
# one token at a time. Check 2 below verifies that on a model.
#
# The encoder and the cross-attention get no causal part. The source sentence is known in full
# before the first target word is produced (a translator reads the whole sentence first), so
# every position may read all of it; only padding is blocked there.
#
# ## Combining the two rules
#
# The decoder's self-attention applies both rules: a key is visible only if it is **not in the
# future and not padding**. With `True` = may attend, "allowed by every rule" is a logical
# **AND**. Broadcasting `(batch, 1, 1, n)` against `(1, 1, n, n)` gives `(batch, 1, n, n)`: one
# mask per sentence, shared by the heads.

# %%
show_source(combine_masks)

# %%
dec_self = combine_masks(padding_mask(tgt_in, PAD), causal_mask(n))
print("decoder self-attention mask:", tuple(dec_self.shape))
print(dec_self[1, 0].int())  # "<bos> dogs bark <eos> <pad> <pad> <pad>"


# %% tags=["hide-input"] caption="The two rules and their AND for “dogs bark” (decoder input, 7 positions): padding (top left), look-ahead (top right), combined (bottom). Dark cells are the (query, key) pairs that may attend. On the four real rows the combined mask equals the look-ahead mask." alt="Three 7 by 7 grids of dark and white cells, two on top and one below, rows labelled with the decoder's tokens as queries and columns as keys. Top left: the first four columns are dark in every row. Top right: a dark lower triangle. Bottom: the lower triangle cut off after the fourth column, so the three pad rows see only the four real tokens."
def two_plus_one(titles_and_masks: list, labels: list[str]) -> None:
    """Three boolean masks, two on top and one below: dark = may attend."""
    fig = plt.figure(figsize=(6.4, 6.8))
    grid_spec = fig.add_gridspec(2, 4)
    slots = [grid_spec[0, 0:2], grid_spec[0, 2:4], grid_spec[1, 1:3]]
    for slot, (title, m) in zip(slots, titles_and_masks):
        ax = fig.add_subplot(slot)
        plot_attention(
            m.float(), labels, ax=ax, cmap="Blues", colorbar=False, vmax=1.0
        )
        ax.tick_params(labelsize=12)
        ax.set_title(title, fontsize=12)
        ax.set_xlabel("key", fontsize=12)
        ax.set_ylabel("query", fontsize=12)
    fig.tight_layout()
    plt.show()


tokens_1 = words(tgt_in[1])
two_plus_one(
    [
        ("padding", padding_mask(tgt_in, PAD)[1, 0].expand(n, n)),
        ("look-ahead", causal_mask(n)[0, 0]),
        ("combined (AND)", dec_self[1, 0]),
    ],
    tokens_1,
)

# %% [markdown]
# On every real row, the combined mask equals the look-ahead mask: with padding on the right,
# the pads come after the last real token, so the causal rule already hides them from every
# real query. The padding part only changes the pad rows, whose outputs nothing uses. It
# earns its keep where pads do *not* sit in the future: with padding on the left (below), and in
# the attentions that have no causal rule at all, the encoder's and the cross-attention.
# (Exercise 1 meets a third case: several sequences packed into one row.)

# %%
real_rows = tgt_in[1] != PAD
look_ahead = causal_mask(n)[0, 0]
print(
    "real rows: combined == look-ahead:",
    torch.equal(dec_self[1, 0][real_rows], look_ahead[real_rows]),
)
print(
    "pad rows:  combined == look-ahead:",
    torch.equal(dec_self[1, 0][~real_rows], look_ahead[~real_rows]),
)

# %% [markdown]
# ## The masks of an encoder–decoder
#
# An encoder–decoder model needs three masks, one per kind of attention, and
# `make_seq2seq_masks` builds them from exactly the tensors the model receives:
#
# | attention | queries | keys | mask |
# |---|---|---|---|
# | encoder self-attention | source | source | source padding |
# | decoder self-attention | target | target | target padding AND causal |
# | cross-attention | target | source (memory) | source padding |
#
# Their shapes are `(batch, 1, 1, L_src)` for the two padding masks and
# `(batch, 1, L_tgt, L_tgt)` for the decoder's self-attention.

# %%
show_source(make_seq2seq_masks)

# %%
src_mask, tgt_mask, memory_mask = make_seq2seq_masks(src, tgt_in, PAD)
print("tgt_mask is the mask combined above:", torch.equal(tgt_mask, dec_self))

# %% [markdown]
# ## Applying a mask
#
# Inside attention the mask acts on the scores, just before the softmax. The recipe of the
# package's `scaled_dot_product_attention` (chapter 04), in three lines: replace every blocked
# score by the most negative finite float, so that its exponential is exactly 0; take the
# softmax; and set the weights of a row with no allowed key to 0 (why, check 3 shows). Fig. 8.2
# draws the weights it gives for one head.


# %%
def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the keys each query may attend to; 0 elsewhere."""
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(filled, dim=-1)
    return weights * mask.any(dim=-1, keepdim=True)  # empty rows -> 0


# (batch, heads, length, d_k): random queries, keys and values
q, k, v = (torch.randn(3, 4, n, 8, generator=g) for _ in range(3))
scores = q @ k.transpose(-2, -1) / math.sqrt(8)
weights = masked_softmax(scores, tgt_mask)
blocked = ~tgt_mask.expand_as(weights)
print("largest weight on a blocked key:", weights[blocked].max().item())
print("rows sum to 1:", torch.allclose(weights.sum(-1), torch.ones(3, 4, n)))
_, package_weights = scaled_dot_product_attention(q, k, v, tgt_mask)
print(
    "the package's attention gives the same weights:",
    torch.equal(weights, package_weights),
)

# %% tags=["hide-input"] caption="Attention weights of head 0 for “dogs bark” after masking. The upper triangle and the three pad columns are exactly 0; each row shares its weight among the real keys at or before it." alt="A 7 by 7 heatmap of attention weights with every cell annotated. The first row puts 1.00 on the bos token; later rows spread their weight over the first few columns; everything above the diagonal and in the three pad columns reads 0.00."
ax = plot_attention(
    weights[1, 0],
    words(tgt_in[1]),
    annotate=True,
    title="weights after masking (“dogs bark”, head 0)",
)
plt.show()

# %% [markdown]
# ## Why the masks leak nothing
#
# The claim has two parts: **(a)** with the causal mask, the decoder's output at position $i$
# depends only on target tokens $0, \dots, i$ (and on the source); **(b)** with the padding masks,
# no output at a real position depends on the tokens at padded positions. Here is why, for
# (a):
#
# 1. A blocked key gets weight **exactly 0**: its score is replaced by the most negative
#    float $s_{\min}$, and $e^{s_{\min} - \max_j s_j}$ underflows to exactly 0. So the attention
#    output at query $i$ is a weighted sum over the keys $i$ may see, and no other value enters
#    it, *provided every value is finite*: $0 \times \text{NaN}$ is NaN, so a NaN at a blocked
#    key would still poison the sum (check 3 shows where such a NaN comes from, and how the
#    course keeps every vector finite).
# 2. In the decoder's self-attention, query $i$ may see keys $j \le i$. So if the vectors entering
#    the layer at positions $\le i$ depend only on tokens $\le i$, so does the output at $i$.
# 3. Everything else in a layer acts on each position on its own: the feed-forward network,
#    layer norm, dropout, the residual addition. Dropout on the attention weights, in training,
#    only zeroes or rescales weights, so a 0 stays a 0 and it lets nothing in. Cross-attention
#    reads the source, never the target.
# 4. Below the first layer, the vector at position $i$ is the embedding of token $i$ plus the
#    encoding of position $i$. By induction over the layers, the output at $i$ depends only on
#    tokens $\le i$, however many layers there are.
#
# Part (b) is the same argument with "the real positions" in place of "the positions $\le i$":
# every attention blocks padded keys, so real positions only ever read real positions. The
# proof needs weights that are *exactly* 0: a tiny weight would still let a later token into
# the output, only a little.
#
# The induction is easiest to see as a graph: one row of nodes per layer, and a line from
# position $j$ of one layer to position $i$ of the layer above wherever the mask lets $i$ read
# $j$. The output at $i$ can depend only on the tokens it reaches by following the lines down.
# The residual connection also lets every position keep its own vector, so one layer's reach is
# the mask OR the identity; for masks that include the diagonal, as both below do, that is the
# mask itself. Reaching through one layer is then one product with the mask, and the tokens that
# reach each output through $L$ layers are the nonzero entries of the mask's $L$-th power. Next
# to the causal mask, a broken one that also lets position $i$ read $i+1$:


# %%
def off_by_one(m: int) -> torch.Tensor:
    """A broken causal mask: position i may also read position i + 1."""
    return torch.ones(m, m, dtype=torch.bool).tril(diagonal=1)[None, None]


def reach(mask: torch.Tensor, layers: int) -> torch.Tensor:
    """reach[i, j]: can token j reach the output at i through `layers`
    attention layers that all use the (m, m) mask?"""
    r = torch.eye(mask.size(-1), dtype=torch.bool)
    for _ in range(layers):
        r = (mask.int() @ r.int()) > 0  # i reads k, and j reached k
    return r


for name, rule in [("causal", causal_mask), ("off by one", off_by_one)]:
    cone = reach(rule(6)[0, 0], layers=2)[2].nonzero().flatten().tolist()
    print(f"{name:<10}  tokens that reach output 2 through two layers: {cone}")

# %% tags=["hide-input"] caption="The masks as graphs, for 6 positions and two attention layers. A line joins position j of one layer to position i of the layer above wherever the mask lets i read j. Red: what the output at position 2 (top row) reaches by following the lines down. Top: with the causal mask, tokens 0 to 2, however many layers. Bottom: with the mask that also lets i read i + 1, one position further with every layer, up to token 4." alt="Two graphs stacked, each with three rows of six numbered circles, labelled tokens, layer 1 and layer 2 from bottom to top, joined by thin grey lines. In both, circle 2 of layer 2 is red. Top: red lines lead down from it to circles 0 to 2 of layer 1, and from those to tokens 0 to 2. Bottom: red lines lead down to circles 0 to 3 of layer 1, and from those to tokens 0 to 4."
fig, axes = plt.subplots(2, 1, figsize=(6.4, 5.4))
m, target, depth = 6, 2, 2
rows = ["tokens", "layer 1", "layer 2"]
for ax, (name, rule) in zip(
    axes, [("causal mask", causal_mask), ("off by one", off_by_one)]
):
    mask_m = rule(m)[0, 0]
    # in_cone[l][j]: position j of row l reaches the output at the top
    in_cone = [reach(mask_m, depth - row)[target] for row in range(depth + 1)]
    for row in range(depth):
        for i, j in mask_m.nonzero().tolist():
            hot = bool(in_cone[row][j] and in_cone[row + 1][i])
            ax.plot(
                [j, i],
                [row, row + 1],
                color="tab:red" if hot else "0.8",
                lw=2.0 if hot else 0.8,
                zorder=2 if hot else 1,
            )
    for row in range(depth + 1):
        ax.text(-0.7, row, rows[row], ha="right", va="center", fontsize=11)
        for j in range(m):
            hot = bool(in_cone[row][j])
            ax.scatter(
                j,
                row,
                s=420,
                zorder=3,
                color="tab:red" if hot else "white",
                edgecolors="black",
            )
            ax.text(
                j,
                row,
                str(j),
                ha="center",
                va="center",
                zorder=4,
                fontsize=11,
                color="white" if hot else "black",
            )
    last = int(in_cone[0].nonzero().max())
    ax.set_title(f"{name}: output {target} depends on tokens 0 to {last}")
    ax.set_xlim(-2.2, m - 0.5)
    ax.set_ylim(-0.45, depth + 0.45)
    ax.axis("off")
fig.tight_layout()
plt.show()

# %% [markdown]
# With the causal mask the red region never extends to the right of position 2: the output at
# 2 reaches no later token, however many layers there are. With the broken mask it reaches one
# position further right with every layer down, which is how a leak of one position becomes a
# leak of $L$ positions in an $L$-layer model (exercise 2 checks this on the model below).
#
# The checks below run what the argument predicts, on a small untrained `Transformer` with
# dropout switched off: the claim is about the wiring, not about what the weights learned.
#
# ## Check 1: padding changes nothing
#
# Replace the tokens *at* the padded positions of the source with arbitrary words: every output
# at a real position must stay the same, in the encoder and, through the cross-attention, in the
# decoder. As a control, the same change without masks.

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
show_rows("src with junk in the padding", src_junk)

real = src != PAD
with torch.no_grad():
    mem, mem_junk = (
        model.encode(src, src_mask),
        model.encode(src_junk, src_mask),
    )
    logits = model.decode(tgt_in, mem, tgt_mask, memory_mask)
    logits_junk = model.decode(tgt_in, mem_junk, tgt_mask, memory_mask)
    unmasked, unmasked_junk = model.encode(src), model.encode(src_junk)

enc_change = (mem[real] - mem_junk[real]).abs().max().item()
dec_change = (logits - logits_junk).abs().max().item()
control = (unmasked[real] - unmasked_junk[real]).abs().max().item()
print(f"{enc_change!r:>8}  largest change, encoder output at real positions")
print(f"{dec_change!r:>8}  largest change, any decoder logit")
print(f"{control:8.2f}  control without masks: encoder at real positions")

# %% tags=["remove-cell"]
assert enc_change == 0 and dec_change == 0  # exactly, not just small

# %% [markdown]
# ## Check 2: one pass gives what generation would compute
#
# Run the decoder once over the whole input (as in training), and again over each prefix of it,
# the first $t+1$ tokens only (as when generating). With the causal mask, the logits at the
# positions the prefix contains must agree. Without it, every position of the full pass has
# also read the tokens after $t$. The grids of Fig. 8.4 show the largest difference of the logits at each
# position (columns) for each prefix (rows), for the first sentence. (Chapter 07 checked one
# layer with one change; this is the whole encoder–decoder, every prefix.)


# %%
def prefix_changes(
    net: Transformer, mask_for_length, b: int = 0
) -> torch.Tensor:
    """changes[t, i]: max |logit difference| at position i between net's
    pass over the whole decoder input and its pass over the first t + 1
    tokens (NaN where i > t). ``mask_for_length(m)`` returns the rule for m
    positions (None: padding mask only)."""
    x, s = tgt_in[b : b + 1], src[b : b + 1]
    s_mask = padding_mask(s, PAD)

    def decode(tokens: torch.Tensor) -> torch.Tensor:
        m = tokens.size(1)
        rule = mask_for_length(m)
        mask = combine_masks(padding_mask(tokens, PAD), rule)
        return net.decode(tokens, memory, mask, s_mask)

    changes = torch.full((n - 1, n), float("nan"))
    with torch.no_grad():
        memory = net.encode(s, s_mask)
        full = decode(x)
        for t in range(n - 1):
            prefix = decode(x[:, : t + 1])
            diff = (prefix - full[:, : t + 1]).abs().amax(-1)
            changes[t, : t + 1] = diff[0]
    return changes


with_causal = prefix_changes(model, causal_mask)
without_causal = prefix_changes(model, lambda m: None)
print(
    "with the causal mask, every difference below 1e-5:",
    bool(with_causal.nan_to_num(0).max() < 1e-5),
)
contained = ~without_causal.isnan()  # positions the prefix contains
print(
    "without it, the differences range from",
    f"{without_causal[contained].min():.2f}",
    f"to {without_causal[contained].max():.2f}",
)

# %% tags=["hide-input"] caption="Largest difference of the logits at each position (columns) between one pass over “`<bos>` the cat sat on the mat” and a pass over its first t + 1 tokens (rows), on one logarithmic colour scale for both panels. Top: with the causal mask, every cell is exactly 0 (white) or float32 rounding, here below 10⁻⁶. Bottom: without it, every position differs, by 0.15 or more. Grey cells are positions the prefix does not contain." alt="Two annotated heatmaps stacked, 6 rows of prefixes by 7 positions, with the upper-right triangle grey, and a logarithmic colour bar from 1e-8 to 1. Top: the cells of the first three rows read 7e-07 or 8e-07 in pale pink, the cells of the last three rows read 0 and are white. Bottom: every cell of the lower triangle is red, with values between 0.15 and 1.2, darkest for the shortest prefixes."
cmap = plt.get_cmap("Reds").copy()
cmap.set_bad("0.85")  # positions the prefix does not contain
cmap.set_under("white")  # exactly 0
fig, axes = plt.subplots(2, 1, figsize=(6.4, 7.6))
for ax, grid, title in [
    (axes[0], with_causal, "with the causal mask"),
    (axes[1], without_causal, "no causal mask"),
]:
    # log10 of the difference; exactly 0 goes below the scale (white)
    logs = grid.clamp(min=1e-30).log10()
    image = ax.imshow(logs, cmap=cmap, vmin=-8, vmax=0.5, aspect="auto")
    for t in range(n - 1):
        for i in range(t + 1):
            value = grid[t, i].item()
            label = "0" if value == 0 else f"{value:.2g}"
            if 0 < value < 0.01:
                label = f"{value:.0e}"
            ax.text(
                i,
                t,
                label,
                ha="center",
                va="center",
                fontsize=9,
                color="white" if value > 1e-3 else "black",
            )
    ax.set_xticks(range(n), [f"{i}" for i in range(n)])
    ax.set_yticks(range(n - 1), [f"{t + 1} of 7" for t in range(n - 1)])
    ax.set_xlabel("position whose logits are compared")
    ax.set_ylabel("tokens in the prefix")
    ax.set_title(title, fontsize=11)
    bar = fig.colorbar(image, ax=ax, ticks=[-8, -6, -4, -2, 0])
    bar.ax.set_yticklabels(["1e-8", "1e-6", "1e-4", "0.01", "1"])
fig.tight_layout()
plt.show()

# %% [markdown]
# Not every cell of the top grid is 0, but the differences there are float32 rounding, at least
# ten thousand times smaller than the smallest difference without the mask. They come from the
# shapes, not from the mask: the prefix pass multiplies matrices with fewer rows than the full
# pass, and a matrix library may compute a product of another shape with another kernel, which
# adds the same terms in a different order (which shapes get another kernel depends on the
# library and the machine). Keep the shapes and the test becomes exact: at the
# full length, replace the tokens after $t$ by random ones, and compare the logits at positions
# $0 \ldots t$:

# %%
s_mask = padding_mask(src[:1], PAD)
other_tokens = torch.Generator().manual_seed(3)


def decode_causal(tokens: torch.Tensor) -> torch.Tensor:
    mask = combine_masks(
        padding_mask(tokens, PAD), causal_mask(tokens.size(1))
    )
    return model.decode(tokens, model.encode(src[:1], s_mask), mask, s_mask)


with torch.no_grad():
    full = decode_causal(tgt_in[:1])
    for t in range(n - 1):
        other = tgt_in[:1].clone()
        other[:, t + 1 :] = torch.randint(
            3, len(vocab), (1, n - t - 1), generator=other_tokens
        )
        change = (decode_causal(other) - full)[:, : t + 1].abs().max()
        print(
            f"tokens after {t} replaced: logits at 0..{t} change by {change}"
        )

# %% [markdown]
# Exactly 0 at every prefix, as in check 1, where the two passes also had the same shapes.
#
# ## What a leaky mask teaches a model
#
# Check 2 showed what the mask changes in one forward pass. What a leak does to *training*
# shows on a task small enough to train in seconds. Each sequence is 8 random digits, a
# separator `|`, the same digits reversed, and an end token `.`, such as
# `3 1 4 1 5 9 2 6 | 6 2 9 5 1 4 1 3 .`. A language model reads it and predicts every next
# token: 17 labels. Seven of them (the digits after the first) are random, so a model that
# cannot see the future predicts them no better than chance, at a loss of $\ln 10$ each; the
# other ten follow from the tokens before them. No such model can get its expected loss below
# $\tfrac{7}{17} \ln 10$.
#
# The model is a decoder-only stack, two `EncoderLayer`s (chapter 07) run with a mask we pass
# in. We train it twice, with the same data and the same initial weights: once with the causal
# mask, once with `off_by_one`, under which position $t$ can read token $t+1$, its own label.
# Then, on 1,000 fresh sequences, we measure the loss as in training (one pass over the whole
# sequence), the loss as generation sees it (each position computed from its prefix alone,
# since the next token does not exist yet when it is generated), and how many prompts
# (the digits and `|`) greedy generation reverses exactly.

# %%
DIGITS, SEP, END = 8, 10, 11  # tokens 0 to 9 are the digits


def digit_batch(size: int, gen: torch.Generator) -> torch.Tensor:
    d = torch.randint(10, (size, DIGITS), generator=gen)
    sep, end = torch.full((size, 1), SEP), torch.full((size, 1), END)
    return torch.cat([d, sep, d.flip(1), end], dim=1)


class TinyLM(nn.Module):
    """Token and position embeddings, two EncoderLayers run with the mask
    passed in, and a linear head over the 12 tokens."""

    def __init__(self, d: int = 32, length: int = 2 * DIGITS + 2) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(12, d), nn.Embedding(length, d)
        self.layers = nn.ModuleList(
            EncoderLayer(d, 4, 4 * d, dropout=0.0, norm_first=True)
            for _ in range(2)
        )
        self.head = nn.Linear(d, 12)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.tok(ids) + self.pos(torch.arange(ids.size(1)))
        for layer in self.layers:
            h = layer(h, mask)
        return self.head(h)


def train_lm(rule, steps: int = 300) -> TinyLM:
    set_seed(0)
    lm = TinyLM()
    optimizer = torch.optim.Adam(lm.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        seqs = digit_batch(64, gen)
        x, y = seqs[:, :-1], seqs[:, 1:]  # predict every next token
        logits = lm(x, rule(x.size(1)))
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return lm.eval()


@torch.no_grad()
def measure(lm: TinyLM, rule) -> tuple[float, float, float]:
    seqs = digit_batch(1000, torch.Generator().manual_seed(2))
    x, y = seqs[:, :-1], seqs[:, 1:]
    as_trained = F.cross_entropy(
        lm(x, rule(x.size(1))).flatten(0, 1), y.flatten()
    )
    # position t computed from x[:, :t + 1] alone: the prefix's last row
    alone = [lm(x[:, : t + 1], rule(t + 1))[:, -1] for t in range(x.size(1))]
    as_generated = F.cross_entropy(torch.cat(alone), y.T.flatten())
    out = seqs[:, : DIGITS + 1]  # the prompt: the digits and |
    for _ in range(DIGITS):
        next_token = lm(out, rule(out.size(1)))[:, -1].argmax(-1)
        out = torch.cat([out, next_token[:, None]], dim=1)
    right = (out[:, DIGITS + 1 :] == seqs[:, DIGITS + 1 : -1]).all(1)
    return as_trained.item(), as_generated.item(), right.float().mean().item()


floor = 7 / 17 * math.log(10)
print(f"lowest loss without seeing ahead, 7/17 ln 10: {floor:.3f}")
print("loss computed as in training (one pass), and as generation runs it:")
columns = ("mask", "one pass", "generated", "reversed")
print(f"{columns[0]:<12}{columns[1]:>10}{columns[2]:>11}{columns[3]:>10}")
results = {}
for name, rule in [("causal", causal_mask), ("off by one", off_by_one)]:
    results[name] = measure(train_lm(rule), rule)
    trained, generated, reversed_share = results[name]
    print(
        f"{name:<12}{trained:>10.3f}{generated:>11.3f}{reversed_share:>10.1%}"
    )

# %% tags=["remove-cell"]
# the leak: a training loss no honest model can reach
assert results["off by one"][0] < floor

# %% [markdown]
# With the causal mask, the model ends within about 0.01 of the lowest loss the task allows, and its
# two losses agree, as check 2 promised: what it learned in training is what it does when it
# generates, and it reverses every prompt. With `off_by_one`, the loss computed as in training
# falls to 0.000, far below what any model that cannot see ahead can reach: each position reads its
# label and copies it. Run the way generation runs it, with no next token to read, the same
# model has a loss five times the causal model's (4.812 against 0.955) and reverses only one
# prompt in twelve (8.3 % here). That loss is worse than guessing uniformly among the 12 tokens
# ($\ln 12 = 2.48$): it learned to read the answer it was shown, and when it generates, that answer is
# not there. A training loss below what the data allows is the signature of a leaking mask.
#
# ## Check 3: a query that may see nothing
#
# Sometimes a query row has **no** allowed key. It happens with *left* padding, common when a
# decoder generates for a batch of prompts (chapter 11): the sequence starts with pads, and the
# causal mask lets the first position see only itself, a pad. It also happens when padded
# queries are masked as well as padded keys, or when a whole sequence is padding.
#
# What should such a query get? Three ways of applying the mask, on one left-padded row:

# %%
left_padded = torch.tensor([[PAD, PAD, word_id["dogs"], word_id["bark"]]])
mask = combine_masks(padding_mask(left_padded, PAD), causal_mask(4))
print("mask for “<pad> <pad> dogs bark” with the causal rule:")
print(mask[0, 0].int())
q4, k4, v4 = (torch.randn(1, 1, 4, 8, generator=g) for _ in range(3))
scores4 = q4 @ k4.transpose(-2, -1) / math.sqrt(8)

w_inf = torch.softmax(scores4.masked_fill(~mask, float("-inf")), dim=-1)
w_add = torch.softmax(scores4 + (~mask).float() * -1e9, dim=-1)
w_add64 = torch.softmax(scores4.double() + (~mask).double() * -1e9, dim=-1)
w_none64 = torch.softmax(scores4.double(), dim=-1)
out_course, w_course = scaled_dot_product_attention(q4, k4, v4, mask)


def fmt(t: torch.Tensor) -> str:
    return " ".join(f"{x:6.3f}" for x in t.tolist())


print("weights of row 0 (its keys are all blocked):")
print(f"  fill with -inf:          {fmt(w_inf[0, 0, 0])}")
print(f"  add -1e9, float32:       {fmt(w_add[0, 0, 0])}")
print(f"  add -1e9, float64:       {fmt(w_add64[0, 0, 0])}")
print(f"  no mask at all, float64: {fmt(w_none64[0, 0, 0])}")
print(f"  the course:              {fmt(w_course[0, 0, 0])}")
print(f"output of row 0, course:   {fmt(out_course[0, 0, 0, :4])} ...")

# %% [markdown]
# * **Fill with $-\infty$:** every exponential is 0, the softmax computes $0/0$ and returns NaN.
# * **Use $-10^9$** (a common recipe: older versions of TensorFlow's Transformer tutorial add
#   `mask * -1e9` to the scores, the Annotated Transformer fills blocked scores with $-10^9$).
#   Here every key of the row is blocked, so every score gets the same $-10^9$, and adding the
#   same number to every score of a row changes nothing, since the softmax ignores a
#   constant shift: the row attends *as if it had no mask*, as the float64 line shows. In
#   float32 the scores are even rounded away: float32 numbers near $10^9$ are 64 apart, so every
#   $s - 10^9$ with $|s|$ of order 1 becomes the same number, and the weights come out exactly
#   uniform. Filling, instead of adding, makes every score of the row exactly $-10^9$: uniform
#   weights in any precision. Either way, the query reads the keys it was told not to.
# * **The course:** the weights of a row with no allowed key are set to 0, so the query
#   receives nothing: its attention output is a vector of zeros.
#
# PyTorch's two attentions disagree on this. `F.scaled_dot_product_attention` returns zeros for
# such a row, as the course does (the rule since PyTorch 2.5, pull request 133882; before, it
# returned NaN). `nn.MultiheadAttention` returns NaN:

# %%
x4 = torch.randn(1, 4, 8, generator=g)
torch_mha = nn.MultiheadAttention(8, 1, batch_first=True).eval()
with torch.no_grad():
    out_mha, _ = torch_mha(x4, x4, x4, attn_mask=~mask[0, 0])  # True = blocked
out_fused = F.scaled_dot_product_attention(q4, k4, v4, attn_mask=mask)
print(f"nn.MultiheadAttention, row 0:  {fmt(out_mha[0, 0, :4])} ...")
print(f"F.scaled_dot_product_attention: {fmt(out_fused[0, 0, 0, :4])} ...")

# %% [markdown]
# Why insist on finite zeros rather than "it is only a padded position"? Because a NaN does not
# stay where it was born. In the next layer, that position is a *key*; the mask gives it weight
# 0 from every real query, but $0 \times \text{NaN} = \text{NaN}$, so the weighted sum of every
# query turns into NaN, and from there the loss and its gradients. Two layers of the $-\infty$
# version on the left-padded row (self-attention without projections):


# %%
def attention_with_inf(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Self-attention (no projections) with the naive -inf fill."""
    s = x @ x.transpose(-2, -1) / math.sqrt(x.size(-1))
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ x


x = torch.randn(1, 1, 4, 8, generator=g)
layer1 = attention_with_inf(x, mask)
layer2 = attention_with_inf(layer1, mask)
for name, h in [("after layer 1", layer1), ("after layer 2", layer2)]:
    print(
        f"positions holding NaN {name}:",
        torch.isnan(h).any(-1)[0, 0].int().tolist(),
    )
y = x
for _ in range(2):
    y, _ = scaled_dot_product_attention(y, y, y, mask)
print(
    "the course's attention, two layers, all finite:", bool(y.isfinite().all())
)

# %% [markdown]
# So the rule is: **a query that may attend to nothing receives nothing**. In a full attention
# sub-layer, the zero vector then goes through the output projection $W_o$, so the sub-layer
# returns only that projection's bias, and the residual connection carries the position's own
# vector forward, plus that bias. The output at such a position is not meaningful, and nothing
# uses it: it is a padded position, masked as a key everywhere and skipped by the loss. The
# gradients stay finite too:

# %%
mha = MultiHeadAttention(8, 2).eval()
out_sublayer, _ = mha(x4, mask=mask)
print(
    "sub-layer output at row 0 == its output bias:",
    torch.equal(out_sublayer[0, 0], mha.W_o.bias),
)
qg, kg, vg = (t.clone().requires_grad_() for t in (q4, k4, v4))
out, _ = scaled_dot_product_attention(qg, kg, vg, mask)
out.sum().backward()
print(
    "gradients finite:",
    all(bool(t.grad.isfinite().all()) for t in (qg, kg, vg)),
)

# %% [markdown]
# ## Left padding: the mask is right, the positions are not
#
# Move the pads of the decoder input to the left, and build the mask exactly as before. The
# leading pads become rows with no allowed key (check 3), and the real positions see exactly the
# real tokens at or before them. Yet their logits change, compared with the right-padded logits
# of check 1:

# %%
real_in = tgt_in != PAD
lengths = real_in.sum(1)
left = torch.full_like(tgt_in, PAD)
for b in range(3):
    left[b, n - lengths[b] :] = tgt_in[b, : lengths[b]]
show_rows("left-padded decoder input", left)
left_mask = combine_masks(padding_mask(left, PAD), causal_mask(n))
left_real = left != PAD
print(
    "rows with no allowed key are the leading pads:",
    torch.equal(~left_mask.any(-1)[:, 0], ~left_real),
)
with torch.no_grad():
    logits_left = model.decode(left, mem, left_mask, memory_mask)
change = (logits_left[left_real] - logits[real_in]).abs().max().item()
print(f"real positions, left vs right padding: max change {change:.2f}")

# %% [markdown]
# The mask is not the problem: the **positions** are. The embedding adds the encoding of
# position $i$ to token $i$, and with three pads in front, "dogs" sits at position 4 instead
# of 1. The fix is to count positions from the first real token, `attention_mask.cumsum(-1) - 1`,
# which is how Hugging Face's `generate` builds its `position_ids` for a left-padded batch
# (chapter 11 generates for such a batch). At the pads the count gives $-1$; we clamp it to 0,
# as recent versions of Hugging Face's `generate` do (older ones put 1 there; any value works,
# since nothing reads a pad position). Our model
# always numbers positions $0, 1, 2, \dots$, so we run its decoder by hand with explicit
# positions, and, as a control, once more without the padding part of the mask:


# %%
def decode_at(tokens, positions, memory, tgt_mask, memory_mask):
    """model.decode, with explicit position ids instead of 0, 1, 2, ..."""
    embed = model.decoder.embed
    h = embed.tok(tokens) * embed.scale + embed.pos.pe[positions]
    for layer in model.decoder.layers:
        h = layer(h, memory, tgt_mask, memory_mask)
    return model.out(model.decoder.norm(h))


position_ids = (left_real.long().cumsum(-1) - 1).clamp(min=0)
print("position ids:")
print(position_ids)
with torch.no_grad():
    logits_fixed = decode_at(left, position_ids, mem, left_mask, memory_mask)
print(
    "real positions, left padding with position ids == right padding:",
    torch.allclose(logits_fixed[left_real], logits[real_in], atol=1e-5),
)
with torch.no_grad():
    logits_causal_only = decode_at(
        left, position_ids, mem, causal_mask(n), memory_mask
    )
change = (logits_causal_only[left_real] - logits[real_in]).abs().max().item()
print(f"the same with the causal mask alone: max change {change:.2f}")

# %% [markdown]
# Without its padding part, the mask lets every real position also read the pads in front of
# it ("dogs" reads three of them), and the logits change. With padding on the left the causal
# rule no longer hides the pads, and the padding mask is what keeps them out.

# %% [markdown]
# ## Crossing into PyTorch and Hugging Face
#
# Libraries disagree on what a mask means, a common source of mask bugs:
#
# * **This course:** boolean, `True` = may attend.
# * **`F.scaled_dot_product_attention`** (argument `attn_mask`): boolean, `True` = may
#   attend, the same. A float mask is **added** to the scores: 0 = attend, $-\infty$ = blocked.
#   `is_causal=True` takes no mask tensor and applies the causal rule itself.
# * **`nn.MultiheadAttention`** (`attn_mask`, `key_padding_mask`) and **`nn.Transformer*`**
#   (`src_mask`, `tgt_mask`, `memory_mask`, `*_key_padding_mask`): boolean, `True` =
#   **blocked**, the opposite. A float mask is added, as above; PyTorch's own
#   `nn.Transformer.generate_square_subsequent_mask(n)` returns that float form.
# * **Hugging Face models** (`attention_mask`): in the usual call, integers `(batch, L)`,
#   1 = real token: a padding mask only.
# * **d2l.ai** (`valid_lens`): `(batch,)` (or `(batch, queries)`), the number of real tokens.
#
# With `is_causal=True` the caller builds no mask, and PyTorch's fused kernels apply the rule
# inside, without an $n \times n$ mask in memory (its plain fallback implementation still
# builds one); chapter 10's GPT uses it. The rule lines up query 0 with key 0, which is wrong
# when the queries are only the *last* positions. Feeding several new tokens at once
# against a cache of past keys (chapter 10) needs the last rows of the causal mask,
# `causal_mask(past + n)[:, :, past:]`; a single new query needs no mask at all, since it may
# read every key. Code that keeps a mask tensor builds it once for the longest sequence and
# slices it: nanoGPT, when it cannot use the fused kernel, registers a `tril` buffer and uses
# `[:T, :T]`.
#
# The lines of `F.scaled_dot_product_attention`, checked against the course's attention:

# %%
ours, _ = scaled_dot_product_attention(q, k, v, causal_mask(n))
float_mask = nn.Transformer.generate_square_subsequent_mask(4)
print("generate_square_subsequent_mask(4):")
print(float_mask)
fused = {
    "bool attn_mask": F.scaled_dot_product_attention(
        q, k, v, attn_mask=causal_mask(n)
    ),
    "float attn_mask": F.scaled_dot_product_attention(
        q, k, v, attn_mask=nn.Transformer.generate_square_subsequent_mask(n)
    ),
    "is_causal=True": F.scaled_dot_product_attention(q, k, v, is_causal=True),
}
for name, out in fused.items():
    print(f"{name:<16} same as ours: {torch.allclose(out, ours, atol=1e-6)}")
last_only = F.scaled_dot_product_attention(
    q[..., -1:, :], k, v, is_causal=True
)
print(
    "is_causal=True, the last query alone: reads key 0 only:",
    torch.allclose(last_only, v[..., :1, :], atol=1e-6),
)
no_mask = F.scaled_dot_product_attention(q[..., -1:, :], k, v)
print(
    "the last query alone, no mask == the last causal row:",
    torch.allclose(no_mask, ours[..., -1:, :], atol=1e-6),
)
past = n - 3  # three new queries after four cached positions
last_rows = F.scaled_dot_product_attention(
    q[..., past:, :], k, v, attn_mask=causal_mask(n)[:, :, past:]
)
print(
    "the last 3 queries with causal_mask(n)[:, :, past:] == the last 3 rows:",
    torch.allclose(last_rows, ours[..., past:, :], atol=1e-6),
)

# %% [markdown]
# And `nn.MultiheadAttention` with a negated padding mask, and a Hugging Face `attention_mask`
# converted at the door (chapters 05 and 07 compare the PyTorch modules with ours, weights
# copied across; chapter 12 converts BERT's `attention_mask`):

# %%
x6 = torch.randn(3, src.size(1), 16, generator=g)
real_keys = src != PAD  # (batch, keys), True = real
torch_mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
with torch.no_grad():
    _, w_right = torch_mha(x6, x6, x6, key_padding_mask=~real_keys)
on_padding = w_right.masked_select(~real_keys[:, None, :]).sum().item()
print(
    "nn.MultiheadAttention, key_padding_mask=~mask:",
    f"weight on pads {on_padding}",
)

attention_mask = real_keys.long()  # what a Hugging Face tokenizer returns
print(
    "Hugging Face attention_mask -> course mask:",
    torch.equal(attention_mask.bool()[:, None, None, :], src_mask),
)

# %% [markdown]
# ## Common pitfalls
#
# ```{admonition} Six mask bugs
# :class: warning
#
# 1. **Mixing conventions, then combining with `max`.** Older versions of TensorFlow's
#    Transformer tutorial build the padding mask as `(seq == 0)`, **1 at padding** ("blocked"),
#    add `mask * -1e9` to the scores and merge masks with `tf.maximum`: correct, since all its
#    masks mean "blocked". The Annotated Transformer's look-ahead mask is
#    `triu(ones, 1) == 0`, **True where allowed**. Take one mask from each and merge them with
#    `torch.max`: each mask alone is plausible, together they mean nothing. The fix is one
#    convention and the combination that matches it: AND for "may attend" masks
#    (`combine_masks`), OR (`max`) only for masks that all mean "blocked".
# 2. **Passing our masks to `nn.MultiheadAttention` / `nn.Transformer*` unchanged.** They read
#    `True` as blocked: negate (`~mask`).
# 3. **A 0/1 float mask.** A float mask is *added* to the scores: a 0/1 mask adds 1 to the
#    allowed scores and blocks nothing.
# 4. **A `(batch, keys)` mask where `(queries, keys)` is expected.** When the batch size equals
#    the length, the shapes match, and query $i$ of every sentence gets the padding row of
#    sentence $i$.
# 5. **A mask for one tensor, used with another.** Masks built from the full target `tgt`
#    and a decoder fed `tgt[:, :-1]`. Build the masks from exactly the decoder input:
#    `make_seq2seq_masks(src, tgt_in, pad_id)`.
# 6. **Filling with $-\infty$ or adding $-10^9$.** A row with no allowed key becomes NaN, or
#    attends to the keys it should not see (check 3).
# ```
#
# **Pitfall 1, run.** The three mixed-up lines, in our variable names (do **not** use this):

# %%
# 1 = padding (blocked)
mixed_padding = (tgt_in == PAD).float()[:, None, None, :]
# True = allowed
mixed_look_ahead = torch.triu(torch.ones(n, n), diagonal=1) == 0
# float, (batch, 1, n, n)
mixed_combined = torch.max(mixed_padding, mixed_look_ahead[None])
print("the mixed mask for “dogs bark”:")
print(mixed_combined[1, 0].int())

# %% [markdown]
# Read as "1 = blocked" (the attention adds `mask * -1e9`), this mask lets each position see
# **only the future** real tokens, never itself and never its past; the rows of `<eos>` and of
# the three pads are blocked entirely, and under $-10^9$ such rows attend to every key (check 3).
# Read as "1 = may attend", it lets every position see its past **and the padding**. The grids
# below are drawn as in Fig. 8.1:

# %% tags=["hide-input"] caption="The mixed mask of pitfall 1 for “dogs bark”, read both ways, and the course's mask. Dark cells are the pairs that may attend. Top left: read as 1 = blocked, only the future. Top right: read as 1 = may attend, the past and the padding. Bottom: combine_masks, the past without the padding." alt="Three 7 by 7 grids arranged two on top and one below. Top left: a few dark cells above the diagonal in the first three rows only. Top right: a dark lower triangle plus three fully dark columns on the right for the pads. Bottom: a dark lower triangle cut off after the fourth column."
two_plus_one(
    [
        ("mixed, as 1 = blocked", mixed_combined[1, 0] == 0),
        ("mixed, as 1 = may attend", mixed_combined[1, 0] == 1),
        ("combine_masks (AND)", tgt_mask[1, 0]),
    ],
    tokens_1,
)

# %% [markdown]
# A 0/1 tensor does not say which convention it follows, so converting one needs knowing
# where it came from. This padding mask has 1 = padding, so its course equivalent is
# `mixed_padding == 0`; a Hugging Face `attention_mask` has 1 = real token, so there it is
# `.bool()`. And with "blocked" masks throughout, `max` is the right combination:

# %%
print(
    "mixed_padding == 0 is padding_mask(tgt_in):",
    torch.equal(mixed_padding == 0, padding_mask(tgt_in, PAD)),
)
blocked_padding = (tgt_in == PAD)[:, None, None, :]  # True = blocked
blocked_future = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
either = torch.maximum(blocked_padding, blocked_future[None, None])
print(
    "max of two 'blocked' masks == NOT our AND:",
    torch.equal(~either, tgt_mask),
)

# %% [markdown]
# **Pitfall 2, run.** `nn.MultiheadAttention` handed our padding mask unchanged blocks the real
# words and attends to the padding only; the first sentence, which has no padding, has every
# key blocked and comes out as NaN:

# %%
with torch.no_grad():
    out_wrong, w_wrong = torch_mha(x6, x6, x6, key_padding_mask=real_keys)
on_words = w_wrong[1:].masked_select(real_keys[1:, None, :]).sum().item()
print(f"sentences 1 and 2: total weight on real words {on_words}")
print("sentence 0: output is NaN:", bool(out_wrong[0].isnan().all()))

# %% [markdown]
# **Pitfall 3, run.** `F.scaled_dot_product_attention` given the causal mask as 0/1 floats
# adds it to the scores (the same random scores as in *Applying a mask*), so the future keys
# keep their weight:

# %%
causal01 = causal_mask(n).float()  # 1 = may attend, but as floats
out_float = F.scaled_dot_product_attention(q, k, v, attn_mask=causal01)
added = torch.softmax(scores + causal01, dim=-1)
print(
    "the float mask is added to the scores:",
    torch.allclose(out_float, added @ v, atol=1e-6),
)
future = ~causal_mask(n)[0, 0]
print(f"weight on future keys, row 0: {added[0, 0, 0][future[0]].sum():.2f}")

# %% [markdown]
# **Pitfall 4, run.** A Hugging Face `attention_mask` is `(batch, L)`. Given as it is to an
# attention that reads a 2-D mask as `(queries, keys)`, it broadcasts as one pattern for every
# sentence: query $i$ of every sentence gets the padding row of sentence $i$. With a batch of
# three sentences of length three, the shapes match and nothing complains:

# %%
short = to_ids(["dogs bark", "a bird sings", "the cat"])
hf_mask = (short != PAD).long()  # (batch, L) = (3, 3), 1 = real token
print(hf_mask)
q3, k3, v3 = (torch.randn(3, 1, 3, 8, generator=g) for _ in range(3))
as_is = F.scaled_dot_product_attention(q3, k3, v3, attn_mask=hf_mask.bool())
right = F.scaled_dot_product_attention(
    q3, k3, v3, attn_mask=hf_mask.bool()[:, None, None, :]
)
wrong = (as_is - right).abs().amax(-1)[:, 0] > 1e-6  # (batch, queries)
for b in range(3):
    print(
        f"sentence {b} ({' '.join(words(short[b]))}):",
        "wrong queries",
        wrong[b].nonzero().flatten().tolist(),
    )

# %% [markdown]
# The first and last sentences let query 1 attend to their pad, and the middle one, which has
# no padding, blocks its last word from queries 0 and 2. A 2-D mask is ambiguous, and the safe
# habit is never to pass one: write `mask[:, None, None, :]` for padding (one row per
# sentence) and `mask[None, None]` for one pattern shared by every sentence.

# %% [markdown]
# **Pitfall 5, run.** Masks built from the full target `tgt` do not even fit the decoder input
# `tgt[:, :-1]`: an 8 × 8 mask cannot lie over 7 × 7 scores, and any attention stops with an
# error. The silent form of the same bug builds the padding mask from a tensor of the right
# length but the wrong content, the labels `tgt[:, 1:]`:

# %%
right = combine_masks(padding_mask(tgt_in, PAD), causal_mask(n))
from_labels = combine_masks(padding_mask(labels, PAD), causal_mask(n))
print("same shape as the right mask:", from_labels.shape == right.shape)
print("cells that differ (sentence, query, key):")
for b, _, q, k in (from_labels != right).nonzero().tolist():
    print(f"  sentence {b}, query {q}, key {k}: now {from_labels[b, 0, q, k]}")

# %% [markdown]
# Every shape check passes, and nothing fails; but in the two shorter sentences the decoder can
# no longer read its real `<eos>` input (key 3 of sentence 1, key 4 of sentence 2), not even at
# the `<eos>` position itself: the labels are the input shifted by one, and so is a padding
# mask built from them.
#
# The tempting "fix" for the shapes is worse: drop the shift altogether, feed the decoder `tgt` and score its
# output against `tgt` too, so that masks, inputs and labels all have one length. Position $t$
# is then labelled with token $t$, which the causal mask lets it read:

# %%
m = combine_masks(padding_mask(tgt, PAD), causal_mask(tgt.size(1)))
sees_own_label = m[:, 0].diagonal(dim1=-2, dim2=-1) & (tgt != PAD)
print("no shift, input and labels both tgt:")
print(
    "  real positions that may read their label:",
    int(sees_own_label.sum()),
    "of",
    int((tgt != PAD).sum()),
)
label_visible = tgt_mask[:, 0].diagonal(offset=1, dim1=-2, dim2=-1)
print("with the shift, input tgt_in and labels tgt[:, 1:]:")
print("  positions that may read their label:", int(label_visible.sum()))

# %% [markdown]
# ## Two more shapes of mask
#
# Every mask so far is a rule about positions or tokens, written as one boolean comparison, and
# rules are combined with AND. Two masks that models use are built the same way. A
# **prefix language model** (the "causal with prefix" mask of the T5 paper, Raffel et al.,
# 2020, and of UniLM, Dong et al., 2019) reads its prompt in both directions and generates the
# rest causally: key $j$ is visible to query $i$ if $j \le i$ *or* $j$ lies in the prompt, one
# rule that widens the causal one. **Sliding-window attention** (Mistral 7B, Jiang et al.,
# 2023, with a window of 4,096 tokens) ANDs a second rule onto the causal one, that the key is
# one of the last $w$ positions, so that a query's cost no longer grows with the length of the
# text. A padding mask is ANDed onto either, as before.

# %%
i, j = torch.arange(8)[:, None], torch.arange(8)[None, :]  # query, key
prompt_length, w = 3, 3
prefix_lm = (j <= i) | (j < prompt_length)  # the prompt is read both ways
sliding = (j <= i) & (i - j < w)  # causal, and only the last w keys
print("prefix LM, prompt of 3     sliding window, w = 3")
for a, b in zip(prefix_lm.int().tolist(), sliding.int().tolist()):
    print(" ".join(map(str, a)), " " * 10, " ".join(map(str, b)))

# %% [markdown]
# ## Summary
#
# * One convention: boolean, `True` = may attend, broadcastable to `(batch, heads, L_q, L_k)`.
#   `padding_mask` gives `(batch, 1, 1, L)`, `causal_mask` gives `(1, 1, n, n)`, `combine_masks`
#   ANDs them, `make_seq2seq_masks` returns the three masks of an encoder–decoder step. Build
#   the masks from exactly the tensors the model receives: `tgt_in`, not `tgt`. Prefix-LM and
#   sliding-window masks are more rules of the same kind.
# * A causal row is an average over the past, weighted by learned scores. Because each row reads
#   only its past, one pass over $n$ tokens gives the $n$ predictions that generation would
#   compute one prefix at a time (check 2).
# * Why nothing leaks: a blocked key gets weight exactly 0, every vector stays finite, and
#   everything outside attention acts per position, so by induction over layers the output at
#   $i$ depends on tokens $\le i$ only, and a real position never depends on padding (checks 1
#   and 2). A mask that leaks one position leaks $L$ after $L$ layers.
# * A model trained with a leaking mask reaches a loss, computed as in training, below what the
#   data allows, by copying its labels, and fails when it generates.
# * A query with no allowed key: $-\infty$ gives NaN, which spreads to every position in the
#   next layer; adding $-10^9$ makes the row attend to every key it should not see, as if
#   unmasked in exact arithmetic, rounded to exactly uniform in float32 for scores of ordinary size; the course, like
#   `F.scaled_dot_product_attention`, gives zero weights and a zero output, and the attention
#   sub-layer then returns only its output bias.
# * Left padding keeps the masks right but shifts the positions: count position ids from the
#   first real token.
# * At the border with another library, convert explicitly: `~mask` for `nn.MultiheadAttention`,
#   never a 0/1 float mask (it is added), `[:, None, None, :]` for a `(batch, L)` padding mask,
#   and AND for "may attend" masks, OR only for "blocked" ones. `is_causal=True` lines up query
#   0 with key 0: several new queries against a cache need the last rows of the causal mask.
#
# ## Exercises
#
# **1. Packed sequences.** To avoid padding, a training pipeline can pack several short
# sequences into one row. Pack a sequence of 3 positions and one of 4 into a row of 7, and build
# the mask under which each sequence is causal and never sees the other one. Check it with a
# decoder-only stack, two `EncoderLayer`s run with your mask as in `TinyLM`, on random input
# vectors: the packed outputs of each sequence must equal those of the sequence run alone.
# What does the mask look like? What else would a real language model have to reset at the
# boundary?

# %% tags=["solution"]
doc = torch.tensor([0, 0, 0, 1, 1, 1, 1])  # which sequence each position is in
same_doc = doc[:, None] == doc[None, :]
packed_mask = combine_masks(causal_mask(7), same_doc[None, None])
print(packed_mask[0, 0].int())

torch.manual_seed(0)
stack = nn.ModuleList(
    EncoderLayer(16, 2, 32, dropout=0.0, norm_first=True) for _ in range(2)
).eval()


def run(h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    for layer in stack:
        h = layer(h, mask)
    return h


x7 = torch.randn(1, 7, 16, generator=g)
with torch.no_grad():
    packed = run(x7, packed_mask)
    first, second = (
        run(x7[:, :3], causal_mask(3)),
        run(x7[:, 3:], causal_mask(4)),
    )
    causal_only = run(x7, causal_mask(7))
for name, out in [("packed mask", packed), ("causal mask only", causal_only)]:
    same = torch.allclose(out[:, :3], first, atol=1e-5) and torch.allclose(
        out[:, 3:], second, atol=1e-5
    )
    print(f"{name:<17} each sequence as if alone: {same}")

# %% [markdown] tags=["solution"]
# The mask is **block-diagonal and lower-triangular**: causal AND "same sequence", two small
# triangles on the diagonal. With the causal mask alone, the second sequence reads the first
# one, and its outputs change. A model with absolute position embeddings, like GPT-2 or ours,
# would also restart the **positions** at the boundary (position ids 0, 1, 2 and 0, 1, 2, 3), for
# the same reason as with left padding: it adds the encoding of the position to every token.
# With rotary embeddings (chapter 03) scores depend only on relative offsets, and the mask alone
# is enough; so it is here, where the stack has no positional encoding.

# %% [markdown]
# **2. Break the causal mask on purpose.** The proof above says that a mask leaking one position
# leaks $L$ positions after $L$ layers. Check it on the model: recompute check 2's grid with
# `off_by_one` in place of `causal_mask` and list, for each prefix of $t+1$ tokens, the
# positions that now differ from the full pass. Do they match the rule for this model's depth?
# Then list, with `reach` and without a model, the last token each output reaches in a stack
# of four layers.


# %% tags=["solution"]
differs = prefix_changes(model, off_by_one).nan_to_num(0) > 1e-4
for t in range(n - 1):
    print(
        f"prefix of {t + 1}: positions that differ",
        differs[t].nonzero().flatten().tolist(),
    )
depth = len(model.decoder.layers)
expected = torch.tensor(
    [[t - depth < i <= t for i in range(n)] for t in range(n - 1)]
)
print(
    f"exactly positions t - {depth} < i <= t:", torch.equal(differs, expected)
)
four_layers = reach(off_by_one(n)[0, 0], layers=4)
print(
    "four layers, the last token each output reaches:",
    [int(row.nonzero().max()) for row in four_layers],
)


# %% [markdown] tags=["solution"]
# For a prefix of $t+1$ tokens, positions $t-1$ and $t$ differ: position $i$ depends on tokens up
# to $i + 2$. That is the proof's induction with "$j \le i + 1$" in step 2: in the first layer
# position $i+1$ reads token $i+2$, and in the second, position $i$ reads the vector at $i+1$,
# so the leak grows by one position per layer, $i + L$ after $L$ layers. With four decoder
# layers, position $i$ reads up to token $i + 4$ (or to token 6, where the input ends), so for
# a prefix of $t+1$ tokens the positions $t-3$ to $t$ reach a token after $t$ and differ.

# %% [markdown]
# **3. $-10^9$ in half precision.** A model run entirely in float16 (`model.half()`; bfloat16
# has float32's range), or code that casts the mask to the scores' dtype before scaling it,
# computes the scores and the mask in float16, whose largest finite number is 65504. Predict what the additive recipe `softmax(scores + blocked * -1e9)` gives when it is
# computed in float16 on check 3's left-padded row, for the rows that have an allowed key and
# for the rows that have none. Then run it, and the package's
# `scaled_dot_product_attention` on the same float16 inputs.

# %% tags=["solution"]
q16, k16, v16 = (t.half() for t in (q4, k4, v4))
scores16 = q16 @ k16.transpose(-2, -1) / math.sqrt(8)
print("-1e9 in float16:", ((~mask).half() * -1e9).min().item())
w16_add = torch.softmax(scores16 + (~mask).half() * -1e9, dim=-1)
_, w16_course = scaled_dot_product_attention(q16, k16, v16, mask)
for name, w in [("add -1e9", w16_add), ("course", w16_course)]:
    print(name)
    for i in range(4):
        print(f"  row {i}: {fmt(w[0, 0, i].float())}")
print("the course's fill value in float16:", torch.finfo(torch.float16).min)

# %% [markdown] tags=["solution"]
# $-10^9$ does not exist in float16: it overflows to $-\infty$. For the rows with an allowed key
# nothing changes (a blocked weight was 0 anyway), but the two empty rows are back to $0/0$ =
# NaN: in half precision the "safe" constant *is* the $-\infty$ fill. This is why the course
# takes the fill value from the dtype, `torch.finfo(scores.dtype).min` ($-65504$ in float16), and
# zeroes the empty rows explicitly, instead of hard-coding a number.
