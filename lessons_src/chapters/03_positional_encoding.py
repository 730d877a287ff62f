# %% [markdown]
# # 03 — Positional encoding
#
# "Dog bites man" and "man bites dog" contain the same three tokens. An embedding table
# (chapter 02) gives each token the same vector in both sentences, and self-attention without
# a mask, as in an encoder such as BERT (chapters 04–05 build it), treats its input as an
# unordered *set*. Unless we add something, such a transformer cannot tell the two sentences
# apart. That something is **position information**: most often a vector that depends only on
# the position, added to the token's embedding.
#
# What you will see:
#
# 1. by experiment, on a toy example and on a real model, that attention without positions
#    ignores order;
# 2. why an encoding made of several frequencies works (a binary counter, a clock), and why
#    it is *added* to the embedding;
# 3. the sinusoidal encoding of the original Transformer: one position by hand, the whole
#    table in a few lines, checked against the course's `PositionalEncoding` module and
#    Hugging Face, and a common pitfall, a loop with the exponent doubled;
# 4. what the encoding looks like, and why it suits attention: the dot product of two
#    positions depends only on their distance, and a shift is a rotation;
# 5. **rotary position embeddings** (RoPE), which rotate queries and keys instead of adding
#    anything, so that attention scores depend only on relative positions;
# 6. learned position embeddings, as in BERT and GPT-2, and how long a sequence each kind
#    can take.

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course.attention import scaled_dot_product_attention
from transformer_course.positional import PositionalEncoding, sinusoidal_table
from transformer_course.utils import set_seed, show_source

set_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## Without positions, order is lost
#
# Chapter 01 checked that attention is **permutation-equivariant**: shuffle the rows of its
# input and the rows of its output are shuffled the same way, nothing else changes. Here is
# what that means for a sentence. We embed the two sentences with a small random embedding
# table and apply self-attention, `softmax(X Xᵀ / √d) X` (the package's
# `scaled_dot_product_attention`, which chapter 04 builds step by step; here we only use it),
# then average the output over the positions, as a sentence embedding does (chapter 02).

# %%
vocab = {"dog": 0, "bites": 1, "man": 2}
d_model = 16
embed = nn.Embedding(len(vocab), d_model)

s1 = ["dog", "bites", "man"]
s2 = ["man", "bites", "dog"]
x1 = embed(torch.tensor([[vocab[w] for w in s1]])).detach()  # (1, 3, 16)
x2 = embed(torch.tensor([[vocab[w] for w in s2]])).detach()

out1, _ = scaled_dot_product_attention(x1, x1, x1)
out2, _ = scaled_dot_product_attention(x2, x2, x2)

# "dog" is first in s1 and last in s2
dog_same = torch.allclose(out1[0, 0], out2[0, 2], atol=1e-6)
mean_same = torch.allclose(out1.mean(dim=1), out2.mean(dim=1), atol=1e-6)
print("output of 'dog', first vs last:   identical:", dog_same)
print("average over the three positions: identical:", mean_same)
assert dog_same and mean_same

# %% [markdown]
# The output vector of "dog" is the same whether the dog bites or is bitten, and the
# average is **permutation-invariant**: the two sentences get the same vector.
#
# ### A real model without its positions
#
# Chapter 02 ended on a puzzle: MiniLM, a 6-layer BERT trained to give similar sentences
# similar vectors, finds "The cat chased the dog." and "The dog chased the cat." almost
# identical. Both sentences have the same tokens, so what tells them apart can only come
# from the model's *position embeddings*: a table with one learned vector per position,
# added to the token embeddings. We replace every row of that table by the table's mean row,
# so that every position gets the same vector, and embed the two sentences again.

# %%
from transformer_course.pretrained import embed_sentences, load_minilm

tokenizer, model = load_minilm()
pair = ["The cat chased the dog.", "The dog chased the cat."]
position_table = model.embeddings.position_embeddings.weight  # (512, 384)
with torch.no_grad():
    saved = position_table.clone()
    a, b = embed_sentences(pair, tokenizer, model)
    position_table[:] = saved.mean(dim=0)  # the same vector at every position
    a_nopos, b_nopos = embed_sentences(pair, tokenizer, model)
    position_table[:] = saved  # put the table back
word_table = model.embeddings.word_embeddings.weight
print(
    f"MiniLM's entries: word embeddings std {word_table.std():.3f}, "
    f"position embeddings std {saved.std():.3f}"
)
print(f"cosine of the two sentences, with positions:    {a @ b:.4f}")
print(
    f"cosine of the two sentences, without positions: {a_nopos @ b_nopos:.6f}"
)
print(
    "without positions the two vectors are identical (to 1e-6):",
    torch.allclose(a_nopos, b_nopos, atol=1e-6),
)
assert torch.allclose(a_nopos, b_nopos, atol=1e-6)

# %% [markdown]
# Without its position table the model gives the two sentences the same vector: everything
# that separates them (a cosine of 0.9913 instead of 1) comes from the positions.
#
# One caveat. A **causal mask** (chapter 08), which GPT-style models use so that each
# position sees only the positions before it, breaks the symmetry: the first token sees only
# itself, the second sees two tokens, and so on, so some order leaks through even without
# positions (exercise 3 tests it). Haviv et al. (2022, *Transformer Language Models without
# Positional Encodings Still Learn Positional Information*) found that causal language models
# trained without positions come close to those trained with them. Models are still built
# with position information, and the rest of this chapter is about how.
#
# ## Why several frequencies: a counter and a clock
#
# Why not simply add the position number `pos` to every dimension? Positions grow without
# bound: 1,000 would swamp MiniLM's embeddings, whose entries are a few hundredths, and the
# model would have to handle values it never saw in training. Dividing by the length makes
# the encoding of a position depend on the length of the sentence.
#
# A better idea comes from the way we write numbers. In binary, the lowest bit flips at every
# step, the next one every 2 steps, the next every 4:

# %%
for pos in range(8):
    bits = [(pos >> b) & 1 for b in (2, 1, 0)]
    print(f"position {pos}:  bits {bits}")

# %% [markdown]
# Each bit alone repeats, yet together they name every position from 0 to 7 with numbers
# that stay in $[0, 1]$. A clock does the same with hands: the second hand comes back every
# minute, the hour hand every twelve hours, and together they tell the time. The sinusoidal
# encoding is a smooth version of this: each pair of dimensions is the tip of one "hand",
# $(\sin, \cos)$ of its angle, and each hand turns at its own speed, the first fast, the last
# very slowly. A pair rather than a single sine, because a sine alone cannot tell a rising
# angle from a falling one; the pair pins the angle down. Smooth hands also mean that nearby
# positions get similar vectors, which bits do not give (7 and 8 differ in every bit).
#
# ### Add, don't concatenate
#
# The encoding is *added* to the token embedding, not appended to it. This loses less than
# it seems: concatenating a position vector is the special case of adding in which the token
# embeddings use some dimensions and the position vectors the others.

# %%
token = torch.randn(1, 4)
position = torch.randn(1, 3)
concat = torch.cat([token, position], dim=-1)  # 4 + 3 = 7 dimensions
padded_sum = F.pad(token, (0, 3)) + F.pad(position, (4, 0))
print(
    "concatenation == sum of zero-padded vectors:",
    torch.equal(concat, padded_sum),
)

# %% [markdown]
# A model that learns its embeddings can keep tokens and positions in nearly separate
# directions if that helps, and adding keeps the width at $d_{model}$ instead of growing it.
#
# ## The sinusoidal encoding
#
# The original Transformer ("Attention Is All You Need", Vaswani et al., 2017, §3.5) gives
# pair $i = 0, 1, \dots, d_{model}/2 - 1$ of dimensions the angular speed
# $\omega_i = 10000^{-2i/d_{model}}$. At position $pos$,
#
# $$
# \begin{aligned}
# PE_{(pos,\,2i)} &= \sin(pos\cdot\omega_i), \\
# PE_{(pos,\,2i+1)} &= \cos(pos\cdot\omega_i).
# \end{aligned}
# $$
#
# Dimensions $2i$ and $2i+1$ form a pair that shares one angle, so $d_{model}$ must be even.
# Pair 0 turns fastest (one turn every $2\pi$ positions); each following pair turns more
# slowly, up to a wavelength of $2\pi \cdot 10000^{(d_{model}-2)/d_{model}}$ for the last
# pair, just under $2\pi \cdot 10000$. Every value lies in $[-1, 1]$ and any position has an
# encoding.
#
# ### One position by hand
#
# Take position 2 and a tiny $d_{model} = 8$, so there are four pairs, $i = 0, 1, 2, 3$.
# A plain Python loop over the **pair index** $i$:

# %%
pos, d_small = 2, 8
by_hand = []
for i in range(d_small // 2):  # i = 0, 1, 2, 3: the pair index
    angle = pos / 10000 ** (2 * i / d_small)  # exponent 2i / d_model
    by_hand += [math.sin(angle), math.cos(angle)]
    print(
        f"pair {i} (dims {2 * i},{2 * i + 1}): "
        f"{pos} / 10000^({2 * i}/{d_small}) = {angle:.4f}"
        f" -> sin {math.sin(angle):+.4f}, cos {math.cos(angle):+.4f}"
    )

# %% [markdown]
# ### The whole table in a few lines
#
# With tensors, all positions and all pairs are computed at once: a column of positions times
# a row of angular speeds gives every angle, and the sines and cosines go to the even and odd
# columns. (The `base` argument, 10000 in the paper, is for exercise 2.)


# %%
def minimal_table(max_len: int, d_model: int, base: float = 10000.0):
    """(max_len, d_model) sinusoidal table: sin in even, cos in odd columns."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    omega = base ** (
        -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    )
    angle = position * omega  # (max_len, d_model / 2)
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return table


row2 = minimal_table(10, d_small)[pos]
print("row 2:", " ".join(f"{v:+.4f}" for v in row2.tolist()))
print(
    "row 2 equals the loop's numbers:",
    torch.allclose(row2, torch.tensor(by_hand, dtype=torch.float64)),
)

# %% [markdown]
# The course's module `PositionalEncoding` keeps such a table, built by the package's
# `sinusoidal_table` (in the toggle below). We check our few lines against it, and against an
# independent implementation: Hugging Face's DistilBERT can use sinusoidal positions and has
# its own function to build the table.

# %%
from transformers.models.distilbert.modeling_distilbert import (
    create_sinusoidal_embeddings,
)

ours = minimal_table(512, 128).float()
hf_table = torch.empty(512, 128)
create_sinusoidal_embeddings(n_pos=512, dim=128, out=hf_table)
print(
    "ours == the course's sinusoidal_table (to 1e-6):",
    torch.allclose(ours, sinusoidal_table(512, 128), atol=1e-6),
)
print(
    "ours == Hugging Face DistilBERT's table (to 1e-6):",
    torch.allclose(ours, hf_table, atol=1e-6),
)
assert torch.allclose(ours, sinusoidal_table(512, 128), atol=1e-6)
assert torch.allclose(ours, hf_table, atol=1e-6)

# %%
show_source(sinusoidal_table)

# %% [markdown]
# ### A wrong exponent, and what it does
#
# A common pitfall when the formula is turned into a loop: the loop steps over the
# *dimensions*, `for i in range(0, d_model, 2)`, but keeps the exponent `2 * i / d_model` of
# the formula. In the loop, `i` is already the even dimension, twice the pair index; so for
# pair $j$ (dimensions $2j$, $2j+1$) it computes $10000^{4j/d_{model}}$ instead of
# $10000^{2j/d_{model}}$. Nothing crashes and the result looks like a positional encoding;
# only a comparison with a trusted implementation shows the difference.


# %%
def doubled_loop_row(pos: int, d_model: int) -> torch.Tensor:
    """The pitfall: i runs over even dimensions, yet the exponent is
    2*i/d_model."""
    row = torch.zeros(d_model)
    for i in range(0, d_model, 2):
        # wrong: i is already 2j
        row[i] = math.sin(pos / (10000 ** (2 * i / d_model)))
        row[i + 1] = math.cos(pos / (10000 ** (2 * i / d_model)))
    return row


def correct_loop_row(pos: int, d_model: int) -> torch.Tensor:
    """The same loop with the exponent fixed: i / d_model, since i is already
    the even dimension."""
    row = torch.zeros(d_model)
    for i in range(0, d_model, 2):
        row[i] = math.sin(pos / (10000 ** (i / d_model)))
        row[i + 1] = math.cos(pos / (10000 ** (i / d_model)))
    return row


def show(t: torch.Tensor) -> str:
    return " ".join(f"{v:+.4f}" for v in t.tolist())


module_row = sinusoidal_table(10, d_small)[pos]

print("doubled exponent:", show(doubled_loop_row(pos, d_small)))
print("fixed loop:      ", show(correct_loop_row(pos, d_small)))
print("module:          ", show(module_row))

# %% tags=["remove-cell"]
assert torch.allclose(correct_loop_row(pos, d_small), module_row, atol=1e-6)
assert not torch.allclose(
    doubled_loop_row(pos, d_small), module_row, atol=1e-2
)

# %% [markdown]
# Only pair 0 agrees (its exponent is 0 either way). The damage is in the frequencies. Slow
# pairs are part of the design: over a short sentence they hardly move, $\sin \approx 0$ and
# $\cos \approx 1$, and they serve long sequences. With the doubled exponent the wavelengths
# grow twice as fast (in log scale), so far more pairs are spent on being nearly constant.
# We count, for $d_{model} = 300$, the pairs whose angle moves less than 0.1 radian over the
# first 512 positions, that is, whose wavelength exceeds $2\pi \cdot 511 / 0.1 \approx
# 32{,}100$ positions.

# %%
d_big, n_pos = 300, 512
pair_index = torch.arange(d_big // 2, dtype=torch.float64)
wavelength = {
    "correct, 10000^(2j/d)": 2 * math.pi * 10000 ** (2 * pair_index / d_big),
    "doubled, 10000^(4j/d)": 2 * math.pi * 10000 ** (4 * pair_index / d_big),
}
threshold = 2 * math.pi * (n_pos - 1) / 0.1  # angle < 0.1 rad over 511 steps
for name, wl in wavelength.items():
    frozen = int((wl > threshold).sum())
    print(f"{name}: longest wavelength {wl.max().item():.3g} positions;")
    print(
        f"    {frozen} of {d_big // 2} pairs nearly constant "
        f"over {n_pos} positions"
    )

# %% caption="The wavelength of each sine/cosine pair for d_model = 300, with the correct exponent and with the doubled one. Pairs above the dashed line barely move over 512 positions: 10 of 150 with the correct exponent, 80 with the doubled one." alt="Line plot, log-scale y axis, of wavelength against pair index 0 to 149. Both curves start at 6.3; the correct one rises steadily to about 60,000, the doubled one twice as steeply to about 400 million. A dashed horizontal line at about 32,000 is crossed by the doubled curve near pair 70 and by the correct curve near pair 140."
fig, ax = plt.subplots(figsize=(6.5, 3.6))
for name, wl in wavelength.items():
    ax.semilogy(pair_index, wl, label=name)
ax.axhline(threshold, color="gray", ls="--", lw=1)
ax.text(
    2,
    threshold * 2.2,
    f"wavelength {threshold:,.0f}: nearly constant over {n_pos} positions",
    color="dimgray",
    fontsize=8,
)
ax.set_xlabel("pair index j (dimensions 2j, 2j+1)")
ax.set_ylabel("wavelength (positions)")
ax.set_title(f"Wavelength of each sine/cosine pair, d_model = {d_big}")
ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## The `PositionalEncoding` module
#
# The module keeps the table as a **buffer**: it moves to the GPU with the model but is not a
# parameter, so training never changes it. In the forward pass it adds the first `length`
# rows to a batch of embeddings `(batch, length, d_model)`, then applies dropout to the sum,
# as the paper does (rate 0.1 in its base model; the default here is 0).
#
# The sum only works if neither term drowns the other. The encoding's entries lie between
# −1 and 1, while embeddings are often much smaller (MiniLM's have a standard deviation of
# 0.056). The original Transformer multiplies its embeddings by $\sqrt{d_{model}}$ before the
# addition; chapter 07 measures how that factor brings them to the encoding's scale.

# %%
show_source(PositionalEncoding)

# %%
d_model = 128
pe = PositionalEncoding(d_model, max_len=512)
print(
    "trainable parameters:",
    sum(p.numel() for p in pe.parameters()),
    "| buffers:",
    [n for n, _ in pe.named_buffers()],
)
# a batch of two 10-token "sentences" of zero embeddings
x = torch.zeros(2, 10, d_model)
print("input", tuple(x.shape), "-> output", tuple(pe(x).shape))
print(
    "with zero embeddings, the output is the table:",
    torch.equal(pe(x)[1], pe.pe[:10]),
)

# %% [markdown]
# ### Order now matters
#
# Back to "dog bites man". With the encoding added to the embeddings, will the two sentences
# still get the same average? Before running the cell, note one thing: the *inputs* still
# have the same average, since both sentences hold the same three words and the same three
# positions, only paired differently.

# %%
pos_enc = PositionalEncoding(16, max_len=32)
p1, p2 = pos_enc(x1), pos_enc(x2)
out1_pos, _ = scaled_dot_product_attention(p1, p1, p1)
out2_pos, _ = scaled_dot_product_attention(p2, p2, p2)
in_gap = (p1.mean(dim=1) - p2.mean(dim=1)).abs().max().item()
gap = (out1_pos.mean(dim=1) - out2_pos.mean(dim=1)).abs().max().item()
dog_gap = (out1_pos[0, 0] - out2_pos[0, 2]).abs().max().item()  # "dog"
print(f"largest difference between the two input averages:  {in_gap:.3f}")
print(f"largest difference between the two output averages: {gap:.3f}")
print(f"largest difference between the two outputs of 'dog': {dog_gap:.3f}")
assert gap > 1e-4  # the averages are no longer identical

# %% [markdown]
# The word "dog" now gets a clearly different output in the two sentences (entries differ by
# up to 1.127), and the two sentence averages are no longer identical, but they differ much
# less (0.090). The input averages are the same, so all that separates the output averages
# comes from the way attention mixes the rows; the rows' own changes largely cancel in the
# average. The order is in the individual rows, and only a little of it survives averaging,
# as in MiniLM's cosine of 0.9913.
#
# ## What the encoding looks like
#
# Each row of the heatmap (top panel) is one position, each column one dimension. Like the
# bits of the binary counter, the columns change more slowly from left to right: the left
# columns (fast pairs) change from one position to the next, while the right columns change
# so slowly that over 100 positions the sines stay near 0 and the cosines near 1. The lower
# panel shows a few sine dimensions as curves. Each pair's wavelength is $10000^{2/d_{model}}$
# times the previous one's, so they grow geometrically, from $2\pi$ for dimension 0 (sampled
# only at whole positions, hence the zig-zag) to tens of thousands of positions for the last
# pair (printed below).

# %% caption="The sinusoidal encoding for d_model = 128 and positions 0 to 99. Top: the table as a heatmap, fast pairs on the left, slow ones on the right. Bottom: four sine dimensions as curves; each wavelength is a fixed multiple of the previous one." alt="Top: a heatmap, 100 positions by 128 dimensions, red-blue stripes that are narrow in the left columns and widen to the right until the columns are uniformly white (sines near 0) and blue (cosines near 1). Bottom: four curves over positions 0 to 99: dimension 0 zig-zags with period 6.3, dimension 20 oscillates with period about 27, dimension 40 with period about 112, and dimension 60 rises slowly from 0."
table = pe.pe[:100]  # positions 0..99
fig, (ax1, ax2) = plt.subplots(
    2, 1, figsize=(6.4, 7.8), gridspec_kw={"height_ratios": [1.2, 1]}
)
im = ax1.imshow(table, cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
ax1.set_xlabel("dimension")
ax1.set_ylabel("position")
ax1.set_title(f"Sinusoidal encoding, d_model = {d_model}, positions 0-99")
fig.colorbar(im, ax=ax1, fraction=0.046, pad=0.04)
for dim in [0, 20, 40, 60]:
    wl = 2 * math.pi * 10000 ** (dim / d_model)
    ax2.plot(
        table[:, dim],
        marker="." if dim == 0 else None,
        ms=3,
        label=f"dim {dim}: wavelength {wl:.1f}",
    )
ax2.set_xlabel("position")
ax2.set_ylabel("value")
ax2.set_ylim(-1.1, 1.1)
ax2.legend(fontsize=8, ncols=2, loc="lower center", bbox_to_anchor=(0.5, 1.01))
fig.tight_layout()
plt.show()

# %%
wl_all = 2 * math.pi * 10000 ** (torch.arange(0, d_model, 2) / d_model)
print(
    f"wavelengths for d_model = {d_model}: pair 0 {wl_all[0]:.1f}, "
    f"pair 32 {wl_all[32].item():,.0f}, "
    f"last pair (63) {wl_all[-1].item():,.0f}"
)

# %% [markdown]
# ## Dot products depend only on distance
#
# Attention compares vectors with dot products. For two positions $p$ and $q$, pair $i$
# contributes
#
# $$
# \begin{aligned}
# &\sin(p\omega_i)\sin(q\omega_i) + \cos(p\omega_i)\cos(q\omega_i) \\
# &\qquad = \cos\big((p-q)\,\omega_i\big),
# \end{aligned}
# $$
#
# so, summed over the $d_{model}/2$ pairs,
#
# $$PE_p \cdot PE_q = \sum_{i} \cos\big((p - q)\,\omega_i\big):$$
#
# a function of the distance $p - q$ only, largest ($d_{model}/2$) at distance 0, falling
# steeply over the first few positions and then slowly, with ripples (figure below). Position 100 relates to position 110 the
# way position 300 relates to 310.

# %%
table512 = pe.pe.double()
gram = table512 @ table512.T
for k in [0, 1, 10, 50]:
    diag = gram.diagonal(k)
    same = torch.allclose(diag, diag[0].expand_as(diag), atol=1e-4)
    print(
        f"distance {k:>2}: PE_p . PE_(p+{k}) = {diag[0]:7.3f}, "
        f"the same for every p: {same}"
    )

# %% caption="The dot product of position 100's encoding with every position from 0 to 200 (d_model = 128). It is 64 at distance 0, falls steeply over the first five positions, then slowly and with ripples; the curve is symmetric." alt="A line plot of the dot product against distance from -100 to 100, mirror-symmetric around 0. A sharp peak of 64 at 0 drops to about 47 at distance 5 and about 43 at distance 10, declines to about 35 by distance 40, and beyond that oscillates between about 24 and 35."
centre = 100
others = torch.arange(0, 201)
fig, ax = plt.subplots(figsize=(6.5, 3.6))
ax.plot(others - centre, gram[centre, others], marker=".", ms=3)
ax.set_xlabel(f"distance from position {centre} (q - {centre})")
ax.set_ylabel(f"PE_{centre} · PE_q")
ax.set_title(f"Dot product with position {centre}, d_model = {d_model}")
fig.tight_layout()
plt.show()

# %%
near = gram[centre, centre + 1 : centre + 6].mean()
far = gram[centre, centre + 50 : centre + 101].mean()
print(f"mean dot product at distance 1-5:   {near:.2f}")
print(f"mean dot product at distance 50-100: {far:.2f}")

# %% [markdown]
# ### Every position gets its own vector
#
# Could two positions have the same encoding? Every encoding has the same length,
# $\sqrt{d_{model}/2}$, so the squared distance between two of them is
#
# $$
# \begin{aligned}
# |PE_p - PE_q|^2 &= |PE_p|^2 + |PE_q|^2 \\
# &\qquad - 2\,PE_p \cdot PE_q \\
# &= d_{model} - 2\,PE_p \cdot PE_q :
# \end{aligned}
# $$
#
# it too depends only on the distance $k = |p - q|$, and the closest pair of positions is the pair whose
# dot product is largest. We compute it for every distance $k$ up to the module's default
# `max_len` of 5000, without building a 5000 × 5000 matrix.

# %%
omega = 10000 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
k_all = torch.arange(1, 5000, dtype=torch.float64)
dot_k = torch.cos(k_all[:, None] * omega).sum(dim=1)  # PE_p . PE_(p+k)
dist_k = (d_model - 2 * dot_k).sqrt()
print(
    f"neighbours (k = 1): dot product {dot_k[0]:.3f}, distance {dist_k[0]:.3f}"
)
for n in [512, 2048, 5000]:
    k_best = int(dist_k[1 : n - 1].argmin()) + 2  # distances 2 .. n-1
    print(
        f"max_len {n:>4}: closest non-neighbours are {k_best} apart, "
        f"distance {dist_k[k_best - 1]:.3f}"
    )
all_pairs = torch.cdist(table512, table512).fill_diagonal_(float("inf"))
print(f"check, all pairs of the first 512 rows: {all_pairs.min():.3f}")

# %% [markdown]
# The closest two rows are neighbours (distance 1.953, from the dot product 62.094 of the
# previous section), and no two positions further apart come closer than 3.638, whether the
# table has 512, 2048 or 5000 rows: every position up to 5000 has its own vector.
#
# ### A shift is a rotation
#
# The dot-product curve is symmetric: the plain dot product cannot tell *before* from
# *after*. The encoding itself can, though. Shifting by $k$ positions rotates each sine/cosine
# pair by the angle $k\omega_i$, the same rotation whatever the starting position, so
# $PE_{pos+k} = M_k\, PE_{pos}$ for one fixed matrix $M_k$ made of $2 \times 2$ rotation
# blocks. The paper gives this as the reason for choosing sinusoids, in the form of a
# hypothesis: "we hypothesized it would allow the model to easily learn to attend by
# relative positions, since for any fixed offset $k$, $PE_{pos+k}$ can be represented as a
# linear function of $PE_{pos}$."

# %%
k = 3
M = torch.zeros(d_model, d_model, dtype=torch.float64)
for j, w in enumerate(omega.tolist()):
    c, s = math.cos(k * w), math.sin(k * w)
    M[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = torch.tensor([[c, s], [-s, c]])
shifted = table512[:-k] @ M.T  # M_k applied to every row
print(
    f"PE_(pos+{k}) == M_{k} PE_pos for all {len(table512) - k} positions "
    "(to 1e-6):",
    torch.allclose(shifted, table512[k:], atol=1e-6),
)
assert torch.allclose(shifted, table512[k:], atol=1e-6)

# %% [markdown]
# (ch03-rope)=
# ## Rotary position embeddings: rotate instead of add
#
# **Rotary position embeddings** (RoPE; Su et al., 2021, *RoFormer*), used by Llama, Mistral
# and many other recent language models, use the rotation $M_k$ itself, and add nothing to
# the token vectors. Inside attention, the query of position $p$
# is rotated by $M_p$ and the key of position $r$ by $M_r$, pair by pair, with the same
# angles $p\,\omega_i$ as the sinusoids. A rotation's transpose is the rotation backwards,
# $M_p^\top M_r = M_{r-p}$, so
#
# $$
# \begin{aligned}
# (M_p\, q) \cdot (M_r\, k) &= q^\top M_p^\top M_r\, k \\
# &= q^\top M_{r-p}\, k :
# \end{aligned}
# $$
#
# the score depends on the contents $q$, $k$ and on the **relative** position $r - p$ only.
# The cell builds $M_p$ exactly as $M_k$ above and checks this on random vectors.


# %%
def rotation(shift: int) -> torch.Tensor:
    """The block-diagonal matrix that rotates pair i by the angle
    shift * omega_i (M_k above)."""
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    for j, w in enumerate(omega.tolist()):
        c, s = math.cos(shift * w), math.sin(shift * w)
        block = torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
        R[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = block
    return R


def rope_score(q: torch.Tensor, p: int, k: torch.Tensor, r: int) -> float:
    # rotate the query by p, the key by r
    return ((rotation(p) @ q) @ (rotation(r) @ k)).item()


q_vec, k_vec = torch.randn(
    2, d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
)
for p, r in ((0, 5), (10, 15), (300, 305), (5, 0), (305, 300)):
    print(
        f"query at {p:3d}, key at {r:3d} (offset {r - p:+d}): "
        f"score {rope_score(q_vec, p, k_vec, r):8.4f}"
    )
plus5 = torch.tensor([rope_score(q_vec, p, k_vec, p + 5) for p in range(500)])
print(
    "offset +5 gives one score at all 500 places (to 1e-9):",
    bool(plus5.max() - plus5.min() < 1e-9),
)
assert plus5.max() - plus5.min() < 1e-9

# %% [markdown]
# Offset $+5$ gives one score wherever the pair sits (0 and 5, 10 and 15, 300 and 305),
# offset $-5$ another: unlike the plain dot product of two encodings, RoPE tells *before*
# from *after*. Adding the encoding to the same vectors instead does not give this property:

# %%
added = [
    ((q_vec + table512[p]) @ (k_vec + table512[p + 5])).item()
    for p in (0, 10, 300)
]
print("encoding added instead, offset +5, pairs at 0, 10, 300:")
print("   ", ", ".join(f"{v:.2f}" for v in added))

# %% [markdown]
# With the encoding added, the same offset gives different scores at different places,
# because the cross terms $q \cdot PE_r$ and $PE_p \cdot k$ depend on the absolute positions.
#
# Four details matter when you meet RoPE in real code, as in chapter 11, which rebuilds the
# attention of a modern model with it:
#
# * Real implementations never build the $d \times d$ matrix: they multiply each pair by the
#   cosine and sine directly, the same rotation in $O(d)$ work (exercise 4).
# * The rotation is applied per attention head, so $d$ in $\omega_i$ is the head's size, not
#   $d_{model}$, and the base is often larger than 10000 (500,000 in Llama 3).
# * Our blocks $\begin{pmatrix} c & s \\ -s & c \end{pmatrix}$ move the encoding forward,
#   $PE_{pos} \to PE_{pos+k}$; RoFormer and Llama rotate the other way,
#   $\begin{pmatrix} c & -s \\ s & c \end{pmatrix}$. That swaps the scores of offsets $+5$
#   and $-5$ but not the relative property.
# * Llama's code pairs feature $j$ with feature $j + d/2$ instead of neighbouring features,
#   and some models rotate only part of each head (GPT-NeoX rotates a quarter of it).
#
# ## Learned position embeddings
#
# The sinusoidal table is fixed. The other common choice is to *learn* it: a second embedding
# table, indexed by the position instead of the token, `nn.Embedding(max_len, d_model)`,
# trained with the rest of the model. The paper tried this too and "found that the two
# versions produced nearly identical results" (its Table 3, row E: 25.7 BLEU against 25.8
# for sinusoids, on its development set). It kept sinusoids "because it may allow the model
# to extrapolate to sequence lengths longer than the ones encountered during training".
# BERT and GPT-2 learn their table (chapter 10 builds one). MiniLM's table is the one we
# switched off at the start of the chapter.

# %%
learned = model.embeddings.position_embeddings.weight.detach()
print(
    "MiniLM's learned position table:",
    tuple(learned.shape),
    "= (max_len, d_model)",
)

# %% [markdown]
# 512 positions, BERT's limit, of 384 numbers each. Nobody asked these rows to form a
# pattern. We compare the cosine similarity of the first 128 positions with that of a
# sinusoidal table of the same width.


# %%
def cosine_matrix(t: torch.Tensor) -> torch.Tensor:
    u = F.normalize(t.double(), dim=-1)
    return u @ u.T


n = 128
sin_cos = cosine_matrix(sinusoidal_table(n, 384))
learned_cos = cosine_matrix(learned[:n])

# %% caption="Cosine similarity between the encodings of positions 0 to 127. Left: the sinusoidal table (d_model = 384). Right: MiniLM's learned table. Both are largest along the diagonal (neighbouring positions); the learned one also has periodic diagonal stripes." alt="Two square heatmaps, 128 by 128 positions, sharing a colour scale from -0.4 to 1. The left one is bright on the diagonal and fades smoothly to a uniform medium shade away from it. The right one is bright on the diagonal, darker away from it, with faint stripes parallel to the diagonal repeating every five or six positions."
fig, axes = plt.subplots(1, 2, figsize=(6.6, 3.6), sharey=True)
titles = ["sinusoidal (fixed)", "MiniLM (learned)"]
for ax, mat, title in zip(axes, [sin_cos, learned_cos], titles):
    im = ax.imshow(mat, cmap="viridis", vmin=-0.4, vmax=1)
    ax.set_title(title)
    ax.set_xlabel("position")
axes[0].set_ylabel("position")
fig.colorbar(im, ax=axes, fraction=0.025, pad=0.03, label="cosine similarity")
plt.show()

# %%
print("mean cosine at distance k = 1 .. 12:")
for name, mat in [("sinusoidal", sin_cos), ("learned", learned_cos)]:
    by_k = [mat.diagonal(k).mean().item() for k in range(1, 13)]
    print(f"{name:>10}:", " ".join(f"{c:.2f}" for c in by_k))
for name, mat in [("sinusoidal", sin_cos), ("learned", learned_cos)]:
    print(f"{name:>10}: smallest cosine {mat.min():.2f}")

# %% [markdown]
# In both tables neighbouring positions are the most similar. The sinusoidal similarity
# falls steadily and never drops below about 0.4, because its slow pairs stay almost constant
# over 128 positions. The learned one ripples: it falls from distance 1 to 3, rises again up
# to distance 5, falls to distance 9 and rises again up to 12, a period of about six
# positions, and it reaches negative values, as if training had built periodic components
# of its own, somewhat like the sinusoids' waves.
#
# ## How long can a sequence be?
#
# A learned table has a hard length limit: there is simply no row for position `max_len`
# (512 for MiniLM), and adding rows later would add vectors that were never trained. The
# module `PositionalEncoding` also stores its table only up to `max_len` (5000 by default),
# but that limit is a matter of memory, not of the method: the formula covers every position,
# and a module built with a larger `max_len` has the same rows plus new ones.

# %%
short = PositionalEncoding(16, max_len=10)
long = PositionalEncoding(16, max_len=5000)
print(
    "the first 10 rows of a 5000-row table == the 10-row table:",
    torch.equal(long.pe[:10], short.pe),
)

# %% [markdown]
# Being *defined* at a position is not the same as *working* there, though. A model trained
# on sequences of 512 tokens has never seen the angle combinations of position 3000, the
# same objection as for the raw position number, in a milder form. Press et al. (2022,
# *Train Short, Test Long*, Fig. 1) measured it: the perplexity of language models with
# sinusoidal positions rises steeply once the input is only a little longer than the
# training sequences, rotary positions hold out somewhat longer, and their method, ALiBi,
# was designed to extrapolate. How far a model
# extrapolates depends on how it encodes positions, and is still studied.
#
# ## Summary
#
# * Self-attention without a mask is permutation-equivariant; pooled over positions, it
#   cannot tell "dog bites man" from "man bites dog". Without its position table, MiniLM
#   gives "The cat chased the dog." and "The dog chased the cat." the same vector.
# * Several frequencies, like the bits of a counter or the hands of a clock, name every
#   position with bounded numbers. The encoding is added to the embedding; concatenation is
#   the special case of adding in separate dimensions.
# * Sinusoidal encoding: pair $i$ of dimensions is $(\sin, \cos)(pos\,\omega_i)$ with
#   $\omega_i = 10000^{-2i/d_{model}}$, where $i$ counts *pairs*; a loop over dimensions must
#   use exponent $i/d_{model}$, or it spends far more pairs on nearly constant values.
# * The dot product of two encodings depends only on their distance; the closest two are
#   neighbours; a shift by $k$ is one fixed rotation $M_k$.
# * RoPE rotates the query by $M_p$ and the key by $M_r$, so scores depend only on $r - p$:
#   attention sees relative positions (chapter 11 uses it in a real model).
# * Learned tables (BERT, GPT-2) did as well as sinusoids in the paper; MiniLM's trained
#   table makes neighbours similar, with periodic ripples. A learned table stops at
#   `max_len`; sinusoids are defined at every position, yet work poorly far beyond the
#   training length (Press et al., 2022).
#
# ## Exercises
#
# **1. A learned position embedding module.** Write `LearnedPositionalEmbedding(max_len,
# d_model)` with the same `forward(x)` contract as `PositionalEncoding`: it adds row `pos` of
# an `nn.Embedding(max_len, d_model)` to position `pos` of `x`. Before running it, predict:
# with `max_len=20, d_model=8`, how many trainable parameters does it have, and which rows of
# the table receive a gradient from a loss on a batch of 5-token sequences? Then check.


# %% tags=["solution"]
class LearnedPositionalEmbedding(nn.Module):
    """x + P[:length], with P a trainable (max_len, d_model) table, as in BERT
    and GPT-2."""

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table(torch.arange(x.size(1), device=x.device))


set_seed(0)
lpe = LearnedPositionalEmbedding(max_len=20, d_model=8)
n_params = sum(p.numel() for p in lpe.parameters())
print("trainable parameters:", n_params)
lpe(torch.randn(2, 5, 8)).pow(2).sum().backward()
has_grad = lpe.table.weight.grad.abs().sum(dim=1) > 0
rows_with_grad = has_grad.nonzero().flatten().tolist()
print("rows that received a gradient:", rows_with_grad)
assert n_params == 20 * 8 and rows_with_grad == [0, 1, 2, 3, 4]

# %% [markdown] tags=["solution"]
# The table has `max_len * d_model` = 160 parameters, and only the rows of positions 0–4
# receive a gradient: rows 5–19 were not used, so a training run on short sequences never
# trains them. This is one reason a learned table does not help beyond the lengths seen in
# training.
#
# **2. Change the base.** Build the table with base 100 instead of 10000 (`minimal_table`
# takes a `base`). Predict first: will distant positions look more alike or less alike than
# with base 10000? Then plot the dot product of position 100 with positions 0–200 for both
# bases, and compare the mean dot product at distances 50–100.

# %% tags=["solution"] caption="Exercise 2: the dot product of position 100's encoding with positions 0 to 200, for base 10000 and base 100 (d_model = 128). With base 100 it falls much faster and stays near zero beyond distance 50." alt="Two curves of dot product against distance from -100 to 100, both peaking at 64 at distance 0. The base-10000 curve falls to about 35 by distance 40 and then oscillates between about 24 and 35; the base-100 curve drops to about 30 within 5 positions, reaches about zero near distance 50 and then oscillates between about -8 and 2."
far_mean = {}
fig, ax = plt.subplots(figsize=(6.5, 3.4))
for base in [10000, 100]:
    t = minimal_table(512, d_model, base)
    row = t[centre] @ t[others].T
    ax.plot(others - centre, row, label=f"base {base}")
    far_mean[base] = row[centre + 50 : centre + 101].mean().item()
    print(
        f"base {base:>5}: "
        f"mean dot product at distance 50-100 = {far_mean[base]:.2f}"
    )
slowest = {
    b: 2 * math.pi * b ** ((d_model - 2) / d_model) for b in (10000, 100)
}
print("slowest wavelength:", {b: round(w) for b, w in slowest.items()})
ax.set_xlabel(f"distance from position {centre}")
ax.set_ylabel(f"PE_{centre} · PE_q")
ax.set_title(f"Dot product with position {centre}, two bases")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown] tags=["solution"]
# Less alike. With base 100 even the slowest pair turns within a few hundred positions
# (wavelength 585), so beyond about 50 positions the pairs' cosines point every which way
# and cancel: distant positions look unrelated (mean dot product −2.15 at distances
# 50–100, against 64 at distance 0). Base 10000
# keeps slow pairs (wavelength 54,410) that stay alike over hundreds of positions, so the dot
# product falls gradually with distance.
#
# **3. A causal mask without positions.** A causal mask lets position $t$ attend only to
# positions $0, \dots, t$: in `scaled_dot_product_attention`, pass
# `mask=torch.tril(torch.ones(3, 3, dtype=torch.bool))`. Without any positional encoding,
# but with this mask, are the averaged outputs of "dog bites man" and "man bites dog" (the
# embeddings `x1`, `x2` of the first experiment) still equal? Is the output of "dog" the same
# in both? Predict, then test.

# %% tags=["solution"]
causal = torch.tril(torch.ones(3, 3, dtype=torch.bool))
c1, _ = scaled_dot_product_attention(x1, x1, x1, mask=causal)
c2, _ = scaled_dot_product_attention(x2, x2, x2, mask=causal)
mean_gap = (c1.mean(dim=1) - c2.mean(dim=1)).abs().max().item()
dog_gap_causal = (c1[0, 0] - c2[0, 2]).abs().max().item()
print(f"causal, no positions: averages differ by up to {mean_gap:.3f}")
print(
    f"causal, no positions: 'dog' outputs differ by up to {dog_gap_causal:.3f}"
)
print(
    "first output == embedding of the first word:",
    torch.allclose(c1[0, 0], x1[0, 0], atol=1e-6),
)
assert mean_gap > 1e-4 and dog_gap_causal > 1e-6

# %% [markdown] tags=["solution"]
# Neither is equal. With the mask, the first position attends only to itself, so its output
# is its own embedding, while the last position averages over all three words; which words a
# position can see depends on where it is. Order leaks into the outputs through the mask,
# without any positional encoding. The mask gives only this indirect signal, though: the
# output at position $t$ still does not depend on the order of the words before it.
#
# **4. RoPE in $O(d)$.** Write `rope_rotate(x, p)` that rotates a vector `x` of size
# `d_model` to position `p` without building a matrix: take the even and odd entries
# `x[0::2]`, `x[1::2]`, and combine them with `cos(p * omega)` and `sin(p * omega)`. Check
# it against `rotation(p) @ x` for a few positions, and check that scores depend only on
# the offset.


# %% tags=["solution"]
def rope_rotate(x: torch.Tensor, p: int) -> torch.Tensor:
    """rotation(p) @ x in O(d): pair (x_2i, x_2i+1) turned by p * omega_i."""
    cos, sin = torch.cos(p * omega), torch.sin(p * omega)
    even, odd = x[0::2], x[1::2]
    out = torch.empty_like(x)
    out[0::2] = even * cos + odd * sin
    out[1::2] = -even * sin + odd * cos
    return out


for p in (0, 7, 300):
    same = torch.allclose(
        rope_rotate(q_vec, p), rotation(p) @ q_vec, atol=1e-9
    )
    print(f"position {p:3d}: rope_rotate == rotation @ x: {same}")
scores = [
    (rope_rotate(q_vec, p) @ rope_rotate(k_vec, p + 5)).item()
    for p in (0, 10, 300)
]
print("offset +5 at 0, 10, 300:", ", ".join(f"{s:.4f}" for s in scores))
assert max(scores) - min(scores) < 1e-9

# %% [markdown] tags=["solution"]
# Each entry of the result takes two multiplications and one addition, so the rotation
# costs $O(d)$ instead of the $O(d^2)$ of a matrix product, and it gives the same numbers;
# the score for offset $+5$ is the same at every place, as with the matrix. Chapter 11's
# `rope` works the same way, with Llama's pairing (feature $j$ with $j + d/2$) and direction.
