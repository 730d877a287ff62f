# %% [markdown]
# # 03 — Positional encoding
#
# "Dog bites man" and "man bites dog" contain the same three tokens. An embedding table
# (chapter 02) gives each token the same vector in both sentences, and attention, the
# transformer's way of mixing tokens (chapters 04–05), treats its input as an unordered
# *set*. Unless we add something, a transformer cannot tell the two sentences apart. That
# something is a **positional encoding**: a vector that depends only on the position, added
# to the token's embedding.
#
# What you will see:
#
# 1. by experiment, that attention without positions ignores order;
# 2. the sinusoidal encoding of the original Transformer, computed by hand for one position
#    and checked against the course's `PositionalEncoding` module, and a common pitfall: a
#    loop with the exponent doubled;
# 3. what the encoding looks like (heatmap, curves) and why it suits attention: the dot
#    product of two positions depends only on their distance;
# 4. learned position embeddings, as in BERT and GPT;
# 5. the errors the module raises for bad input.

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
# We embed the two sentences with a small random embedding table and apply self-attention,
# `softmax(X Xᵀ / √d) X` (the package's `scaled_dot_product_attention`, which chapter 04
# builds step by step; here we only use it). Swapping words in the input just swaps the
# corresponding rows of the output: attention is **permutation-equivariant**. Averaging the
# output over the positions, as a sentence embedding does (chapter 02), then gives
# *identical* vectors: the average is **permutation-invariant**.

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

# where each word of s2 sits in s1: [2, 1, 0]
perm = torch.tensor([s1.index(w) for w in s2])
print(
    "output rows of s2 == output rows of s1, reordered:",
    torch.allclose(out2, out1[:, perm], atol=1e-6),
)
print(
    "mean over positions identical:",
    torch.allclose(out1.mean(dim=1), out2.mean(dim=1), atol=1e-6),
)
assert torch.allclose(out2, out1[:, perm], atol=1e-6)
assert torch.allclose(out1.mean(dim=1), out2.mean(dim=1), atol=1e-6)

# %% [markdown]
# The output vector of "dog" is the same whether the dog bites or is bitten. Now we add a
# vector that depends on the position (the sinusoidal encoding defined below) to each
# embedding, and repeat the experiment.

# %%
pos_enc = PositionalEncoding(d_model, max_len=32)
p1, p2 = pos_enc(x1), pos_enc(x2)
out1_pos, _ = scaled_dot_product_attention(p1, p1, p1)
out2_pos, _ = scaled_dot_product_attention(p2, p2, p2)
gap = (out1_pos.mean(dim=1) - out2_pos.mean(dim=1)).abs().max().item()
# "dog" first vs "dog" last
dog_gap = (out1_pos[0, 0] - out2_pos[0, 2]).abs().max().item()
print(f"largest difference between the two sentence averages: {gap:.3f}")
print(f"largest difference between the two outputs of 'dog':  {dog_gap:.3f}")
assert gap > 0.05 and dog_gap > 0.05

# %% [markdown]
# ## The sinusoidal encoding
#
# Why not simply add the position number `pos` to every dimension? Positions grow without
# bound (1,000 would swamp embeddings whose entries are around 1), and the model would have
# to handle values it never saw in training. Dividing by the length makes the encoding of a
# position depend on the length of the sentence. The original Transformer ("Attention Is
# All You Need", 2017) uses instead a vector of sines and cosines of different frequencies:
# for position $pos$ and pair index $i = 0, 1, \dots, d_{model}/2 - 1$,
#
# $$PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d_{model}}}\right), \qquad
#   PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d_{model}}}\right).$$
#
# Dimensions $2i$ and $2i+1$ form a pair that shares one angle. Pair 0 turns fastest
# (wavelength $2\pi$ positions); each following pair turns more slowly, down to a wavelength
# of almost $2\pi \cdot 10000$ for the last pair. Every value lies in $[-1, 1]$, any
# position has an encoding, and (as we will check) nearby positions get similar vectors.
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
        f"pair {i}: dims {2 * i},{2 * i + 1}  "
        f"angle = {pos} / 10000^({2 * i}/{d_small}) = {angle:.4f}"
        f"  ->  sin {math.sin(angle):+.4f}, cos {math.cos(angle):+.4f}"
    )

# %% [markdown]
# The course's module builds the whole table at once, with tensors, and adds it to its
# input. Its row for position 2 is the same eight numbers:

# %%
module_row = PositionalEncoding(d_small, max_len=10).pe[pos]
by_hand_t = torch.tensor(by_hand, dtype=torch.float32)
print("loop:  ", by_hand_t)
print("module:", module_row)
assert torch.equal(by_hand_t, module_row)

# %%
show_source(sinusoidal_table)

# %% [markdown]
# ### A wrong exponent, and what it does
#
# A common pitfall when the formula is turned into a loop: the loop steps over the
# *dimensions*, `for i in range(0, d_model, 2)`, but keeps the exponent `2 * i / d_model` of
# the formula. There `i` is already the even dimension $2i$, so the exponent is doubled: it
# computes $10000^{4i/d_{model}}$. Nothing crashes and the result looks like a positional
# encoding; only a comparison with a trusted implementation shows the difference.


# %%
def doubled_loop_row(pos: int, d_model: int) -> torch.Tensor:
    """The pitfall: i runs over even dimensions, yet the exponent is
    2*i/d_model."""
    row = torch.zeros(d_model)
    for i in range(0, d_model, 2):
        # wrong: i is already 2i
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


wrong = doubled_loop_row(pos, d_small)
print("doubled exponent:", wrong)
print("module:          ", module_row)
print(f"largest difference: {(wrong - module_row).abs().max():.4f}")
assert torch.equal(correct_loop_row(pos, d_small), module_row)
assert not torch.allclose(wrong, module_row, atol=1e-2)

# %% [markdown]
# Only pair 0 agrees (its exponent is 0 either way). The damage is in the frequencies: with
# the doubled exponent they fall twice as fast (in log scale), so half of the pairs get
# wavelengths far beyond $2\pi \cdot 10000$. Over any realistic sentence length such a pair
# hardly moves, $\sin \approx 0$ and $\cos \approx 1$ at every position: those dimensions carry
# no position information at all. We count, for $d_{model} = 300$,
# the pairs whose angle stays below 0.1 radian over the first 512 positions.

# %%
d_big, n_pos = 300, 512
pair = torch.arange(d_big // 2, dtype=torch.float64)
wavelength = {
    "correct: 10000^(2i/d)": 2 * math.pi * 10000 ** (2 * pair / d_big),
    "doubled: 10000^(4i/d)": 2 * math.pi * 10000 ** (4 * pair / d_big),
}
for name, wl in wavelength.items():
    frozen = int(((n_pos - 1) * 2 * math.pi / wl < 0.1).sum())
    print(
        f"{name:>26}: longest wavelength {wl.max().item():.3g} positions; "
        f"{frozen} of {d_big // 2} pairs nearly constant "
        f"over {n_pos} positions"
    )
wl_right = wavelength["correct: 10000^(2i/d)"]
wl_wrong = wavelength["doubled: 10000^(4i/d)"]
frozen_right = int(((n_pos - 1) * 2 * math.pi / wl_right < 0.1).sum())
frozen_wrong = int(((n_pos - 1) * 2 * math.pi / wl_wrong < 0.1).sum())
assert frozen_wrong > 2 * frozen_right

fig, ax = plt.subplots(figsize=(6.5, 3.6))
for name, wl in wavelength.items():
    ax.semilogy(pair, wl, label=name)
ax.axhline(n_pos, color="gray", ls="--", lw=1)
ax.text(2, n_pos * 1.6, f"{n_pos} positions", color="gray", fontsize=8)
ax.set_xlabel("pair index i (dimensions 2i, 2i+1)")
ax.set_ylabel("wavelength (positions)")
ax.set_title(f"Wavelength of each sine/cosine pair, d_model = {d_big}")
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## What the encoding looks like
#
# The module keeps the table as a **buffer**: it moves to the GPU with the model but is not
# a parameter, so training never changes it. In the forward pass it adds the first `length`
# rows to a batch of embeddings `(batch, length, d_model)`.

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
# with zero embeddings, the output is the table
assert torch.equal(pe(x)[1], pe.pe[:10])
assert sum(p.numel() for p in pe.parameters()) == 0

# %% [markdown]
# Each row of the heatmap below is one position, each column one dimension. The left columns
# (fast pairs) change from one position to the next; the right columns change so slowly that
# over 100 positions the sines stay near 0 and the cosines near 1. The curves on the right
# show a few sine dimensions: each pair's wavelength is $10000^{2/d_{model}}$ times the
# previous one's, so they grow geometrically, from $2\pi$ for dimension 0 (sampled only at
# whole positions, hence the zig-zag) to thousands of positions.

# %%
table = pe.pe[:100]  # positions 0..99
fig, (ax1, ax2) = plt.subplots(
    2, 1, figsize=(6.4, 7.6), gridspec_kw={"height_ratios": [1.2, 1]}
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
        label=f"dim {dim}: wavelength {wl:.0f}",
    )
ax2.set_xlabel("position")
ax2.set_ylabel("value")
ax2.set_title("A few sine dimensions as curves")
ax2.legend(fontsize=9, loc="lower left", ncols=2)
fig.tight_layout()
plt.show()

# %% [markdown]
# ### Every position gets its own vector
#
# Could two positions have the same encoding? Not within any realistic length: below, the
# two closest rows of the first 512 are still clearly apart.

# %%
table512 = pe.pe.double()
dists = torch.cdist(table512, table512).fill_diagonal_(float("inf"))
print(
    "smallest distance between two different positions (of 512): "
    f"{dists.min():.3f}"
)
norms = table512.norm(dim=1)
print(
    f"vector length of every position: {norms.min():.3f} .. {norms.max():.3f}"
    f" (= sqrt(d_model / 2) = {math.sqrt(d_model / 2):.3f})"
)
assert dists.min() > 0.5

# %% [markdown]
# ### Dot products depend only on distance
#
# Attention compares vectors with dot products. For two positions $p$ and $q$, each pair
# contributes $\sin(p\omega_i)\sin(q\omega_i) + \cos(p\omega_i)\cos(q\omega_i) = \cos((p-q)\omega_i)$, so
#
# $$PE_p \cdot PE_q = \sum_{i} \cos\big((p - q)\,\omega_i\big), \qquad \omega_i = 10000^{-2i/d_{model}}:$$
#
# a function of the distance $p - q$ only, largest ($d_{model}/2$) at distance 0 and
# generally falling as the positions move apart. Position 100 relates to position 110 the
# way position 300 relates to 310.

# %%
gram = table512 @ table512.T
for k in [0, 1, 10, 50]:
    diag = gram.diagonal(k)
    same = torch.allclose(diag, diag[0].expand_as(diag), atol=1e-4)
    print(
        f"distance {k:>2}: PE_p . PE_(p+{k}) = {diag[0]:7.3f}, "
        f"the same for every p: {same}"
    )
    assert same
assert torch.allclose(
    gram.diagonal(),
    torch.full((512,), d_model / 2, dtype=torch.float64),
    atol=1e-4,
)

# %%
centre = 100
others = torch.arange(0, 201)
fig, ax = plt.subplots(figsize=(6.5, 3.6))
ax.plot(others - centre, gram[centre, others], marker=".", ms=3)
ax.set_xlabel(f"distance from position {centre} (q - {centre})")
ax.set_ylabel(f"PE_{centre} · PE_q")
ax.set_title(f"Dot product with position {centre}, d_model = {d_model}")
fig.tight_layout()
plt.show()
near = gram[centre, centre + 1 : centre + 6].mean()
far = gram[centre, centre + 50 :].mean()
print(
    f"mean dot product at distance 1-5: {near:.2f}, "
    f"at distance 50-100: {far:.2f}"
)
assert near > far

# %% [markdown]
# The curve is symmetric: the plain dot product cannot tell *before* from *after*. The
# encoding itself can, though. Shifting by $k$ positions rotates each sine/cosine pair by the
# angle $k\omega_i$, the same rotation whatever the starting position, so
# $PE_{pos+k} = M_k\, PE_{pos}$ for one fixed matrix $M_k$. The authors of the paper chose
# sinusoids for this reason: a linear layer (such as attention's query and key projections)
# can learn such relative offsets.

# %%
k = 3
two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i = 0, 2, 4, ...
omega = 1.0 / 10000 ** (two_i / d_model)
M = torch.zeros(d_model, d_model, dtype=torch.float64)
for j, w in enumerate(omega.tolist()):
    c, s = math.cos(k * w), math.sin(k * w)
    M[2 * j : 2 * j + 2, 2 * j : 2 * j + 2] = torch.tensor([[c, s], [-s, c]])
err = (table512[:-k] @ M.T - table512[k:]).abs().max().item()
print(
    f"PE_(pos+{k}) == M_{k} PE_pos for all {len(table512) - k} positions "
    f"(to 1e-6): {err < 1e-6}"
)
assert err < 1e-6

# %% [markdown]
# ### Rotary position embeddings: rotate instead of add
#
# Most recent language models (GPT-NeoX, LLaMA, Mistral) use the rotation $M_k$ itself.
# **Rotary position embeddings** (RoPE; Su et al., 2021) add nothing to the token vectors.
# Inside attention, the query of position $p$ is rotated by $M_p$ and the key of position $r$ by
# $M_r$, pair by pair, with the same angles $p\,\omega_i$ as the sinusoids. A rotation's transpose
# is the rotation backwards, $M_p^\top M_r = M_{r-p}$, so
#
# $$(M_p\, q) \cdot (M_r\, k) = q^\top M_p^\top M_r\, k = q^\top M_{r-p}\, k :$$
#
# the score depends on the contents $q$, $k$ and on the **relative** position $r - p$ only. The
# cell builds $M_p$ exactly as $M_k$ above and checks this on random vectors.


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


# the same matrix as M_3 above
assert torch.allclose(rotation(k), M, atol=1e-7)
q_vec, k_vec = torch.randn(
    2, d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
)
for p, r in ((0, 5), (10, 15), (300, 305), (5, 0), (305, 300)):
    print(
        f"query at {p:3d}, key at {r:3d} (offset {r - p:+d}): "
        f"score {rope_score(q_vec, p, k_vec, r):8.4f}"
    )
plus5 = [rope_score(q_vec, p, k_vec, p + 5) for p in range(0, 500, 7)]
minus5 = [rope_score(q_vec, p + 5, k_vec, p) for p in range(0, 500, 7)]
# only the offset matters
assert max(plus5) - min(plus5) < 1e-9 and max(minus5) - min(minus5) < 1e-9
assert abs(plus5[0] - minus5[0]) > 0.1  # and its sign: +5 and -5 differ
added = [
    ((q_vec + table512[p]) @ (k_vec + table512[p + 5])).item()
    for p in (0, 10, 300)
]
print(
    "the same vectors with the encoding *added* instead, offset +5:",
    [f"{v:.2f}" for v in added],
)
# additive: the score also depends on where the pair sits
assert max(added) - min(added) > 1.0

# %% [markdown]
# Offset $+5$ gives one score wherever the pair sits (0 and 5, 10 and 15, 300 and 305), offset
# $-5$ another: unlike the plain dot product of two encodings above, RoPE tells *before* from
# *after*. With the encoding added to the vectors instead, the same offset gives different scores
# at different places, because terms like $q \cdot PE_r$ depend on the absolute position. Real
# implementations never build the $d \times d$ matrix: they multiply each pair by the cosine and
# sine directly, which is the same rotation in $O(d)$ work.

# %% [markdown]
# ## Learned position embeddings
#
# The sinusoidal table is fixed. The other common choice is to *learn* it: a second
# embedding table, indexed by the position instead of the token,
# `nn.Embedding(max_len, d_model)`, trained with the rest of the model. BERT does this, and
# so does GPT (chapter 10 builds one). The price is a hard length limit: there is simply no
# row for position `max_len`. MiniLM, the small BERT of chapter 02, has such a table; we read
# it straight from its checksum-verified weights file, without building the model.

# %%
from safetensors import safe_open

from transformer_course.pretrained import minilm_path

with safe_open(str(minilm_path() / "model.safetensors"), framework="pt") as f:
    learned = f.get_tensor("embeddings.position_embeddings.weight")
print(
    "MiniLM's learned position table:",
    tuple(learned.shape),
    "= (max_len, d_model)",
)
assert learned.shape == (512, 384)

# %% [markdown]
# Nobody asked these rows to form a pattern, yet neighbouring positions ended up similar, as
# in the sinusoidal table. We compare the cosine similarity of the first 128 positions in
# both.


# %%
def cosine_matrix(t: torch.Tensor) -> torch.Tensor:
    u = F.normalize(t.double(), dim=-1)
    return u @ u.T


n = 128
sin_cos = cosine_matrix(sinusoidal_table(n, 384))
learned_cos = cosine_matrix(learned[:n])
fig, axes = plt.subplots(1, 2, figsize=(6.6, 3.5))
titles = ["sinusoidal (fixed)", "MiniLM (learned)"]
for ax, mat, title in zip(axes, [sin_cos, learned_cos], titles):
    im = ax.imshow(mat, cmap="viridis", vmin=-0.2, vmax=1)
    ax.set_title(title)
    ax.set_xlabel("position")
    ax.set_ylabel("position")
fig.colorbar(im, ax=axes, fraction=0.025, pad=0.03)
fig.suptitle("cosine similarity of positions")
plt.show()

for name, mat in [("sinusoidal", sin_cos), ("learned", learned_cos)]:
    adjacent = mat.diagonal(1).mean().item()
    distant = torch.cat([mat.diagonal(k) for k in range(40, n)]).mean().item()
    print(
        f"{name:>10}: mean cosine at distance 1 = {adjacent:.3f}, "
        f"at distance >= 40 = {distant:.3f}"
    )
    assert adjacent > distant + 0.3

# %% [markdown]
# Many recent language models use neither: *rotary* position embeddings (RoPE) rotate the
# queries and keys by position-dependent angles inside attention, the rotation idea from
# above applied where the dot products are taken.
#
# ## Clear errors
#
# Sines and cosines come in pairs, so `d_model` must be even; and the module holds
# `max_len` rows, so a longer sequence cannot be encoded. Both mistakes raise an error that
# names the numbers involved.

# %%
try:
    PositionalEncoding(d_model=7)
except ValueError as err:
    print("ValueError:", err)
else:
    raise AssertionError("an odd d_model must be refused")

# %%
short = PositionalEncoding(d_model=16, max_len=10)
try:
    short(torch.zeros(1, 12, 16))
except ValueError as err:
    print("ValueError:", err)
else:
    raise AssertionError("a sequence longer than max_len must be refused")

# %% [markdown]
# ## Summary
#
# * Attention alone is permutation-equivariant; pooled over positions, it cannot tell "dog
#   bites man" from "man bites dog". Adding a position-dependent vector fixes that.
# * Sinusoidal encoding: pair $i$ of dimensions is $(\sin, \cos)(pos / 10000^{2i/d_{model}})$,
#   where $i$ counts *pairs*; a loop over dimensions must use exponent $i/d_{model}$.
# * The dot product of two encodings depends only on their distance, and a shift by $k$ is
#   one fixed rotation: relative positions are easy to read off.
# * BERT and GPT learn their position table instead; it comes out smooth too, but stops at
#   `max_len`.
#
# ## Exercises
#
# **1. A learned position embedding module.** Write `LearnedPositionalEmbedding(max_len,
# d_model)` with the same `forward(x)` contract as `PositionalEncoding`: it adds row `pos` of
# an `nn.Embedding(max_len, d_model)` to position `pos` of `x`, and raises a `ValueError`
# naming both lengths for a sequence longer than `max_len`. Check that it has
# `max_len * d_model` trainable parameters and that a gradient reaches only the rows of the
# positions used.


# %% tags=["solution"]
class LearnedPositionalEmbedding(nn.Module):
    """x + P[:length], with P a trainable (max_len, d_model) table, as in BERT
    and GPT."""

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.size(1)
        if n > self.max_len:
            raise ValueError(
                f"sequence of length {n} is longer than max_len={self.max_len}"
            )
        return x + self.table(torch.arange(n, device=x.device))


set_seed(0)
lpe = LearnedPositionalEmbedding(max_len=20, d_model=8)
n_params = sum(p.numel() for p in lpe.parameters())
print("trainable parameters:", n_params)
assert n_params == 20 * 8
lpe(torch.randn(2, 5, 8)).pow(2).sum().backward()
has_grad = lpe.table.weight.grad.abs().sum(dim=1) > 0
rows_with_grad = has_grad.nonzero().flatten().tolist()
print("rows that received a gradient:", rows_with_grad)
assert rows_with_grad == [0, 1, 2, 3, 4]
try:
    lpe(torch.zeros(1, 21, 8))
except ValueError as err:
    print("ValueError:", err)

# %% [markdown]
# **2. Change the base.** Build the table with base 100 instead of 10000 (write a
# `table_with_base(max_len, d_model, base)`; base 10000 must give the module's table). How
# does the dot-product-versus-distance curve change? Compare the mean dot product at
# distances 50–100 for both bases.


# %% tags=["solution"]
def table_with_base(max_len: int, d_model: int, base: float) -> torch.Tensor:
    """Sinusoidal table with `base` in place of 10000."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = position / base ** (two_i / d_model)
    out = torch.empty(max_len, d_model, dtype=torch.float64)
    out[:, 0::2], out[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return out


assert torch.allclose(
    table_with_base(512, d_model, 10000).float(), pe.pe, atol=1e-6
)
fig, ax = plt.subplots(figsize=(6.5, 3.4))
far_mean = {}
for base in [10000, 100]:
    t = table_with_base(512, d_model, base)
    row = t[centre] @ t[others].T
    ax.plot(others - centre, row, label=f"base {base}")
    far_mean[base] = row[150:].mean().item()  # distances 50..100
    print(
        f"base {base:>5}: "
        f"mean dot product at distance 50-100 = {far_mean[base]:.2f}"
    )
ax.set_xlabel("distance")
ax.set_ylabel("dot product")
ax.legend()
fig.tight_layout()
plt.show()
# With base 100 even the slowest pair turns within a few hundred positions, so
# distant positions look unrelated (dot product near 0); base 10000 keeps slow
# pairs that stay alike.
slowest = {
    b: 2 * math.pi * b ** ((d_model - 2) / d_model) for b in (10000, 100)
}
print("slowest wavelength:", {b: round(w) for b, w in slowest.items()})
assert abs(far_mean[100]) < abs(far_mean[10000]) and slowest[100] < 1000

# %% [markdown]
# **3. Order now matters.** Repeat the first experiment of this chapter with
# `PositionalEncoding` added and show that the mean-pooled attention outputs of all six
# orderings of "dog bites man" are different from each other (no two within 1e-3).

# %% tags=["solution"]
from itertools import permutations

pooled = {}
for order in permutations(["dog", "bites", "man"]):
    x = pos_enc(embed(torch.tensor([[vocab[w] for w in order]])).detach())
    out, _ = scaled_dot_product_attention(x, x, x)
    pooled[" ".join(order)] = out.mean(dim=1)[0]
names = list(pooled)
pairs = [(a, b) for a in names for b in names if a < b]
closest = min((pooled[a] - pooled[b]).abs().max().item() for a, b in pairs)
print(
    f"{len(names)} orderings; "
    f"smallest max-difference between two of them: {closest:.3f}"
)
assert closest > 1e-3
