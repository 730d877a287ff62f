# %% [markdown]
# # 04 — Scaled dot-product attention
#
# Attention is a *soft lookup*. Every position of a sequence asks a question (its **query**),
# every position advertises what it holds (its **key**) and what it will hand over if chosen
# (its **value**). A query is compared with all keys; the comparisons become weights that sum
# to one; the answer is the weighted average of the values. In one line:
#
# $$\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V$$
#
# with $Q \in \mathbb{R}^{L_q \times d_k}$ (one row per query), $K \in \mathbb{R}^{L_k \times d_k}$,
# $V \in \mathbb{R}^{L_k \times d_v}$, and the softmax taken over each row, that is over the keys.
#
# This chapter computes the formula by hand on a two-word example, builds the softmax from
# scratch, explains the $\sqrt{d_k}$, and then uses the package function that every later chapter
# imports. It ends with masks (which keys a query may see) and with the price of attention: a
# score matrix that grows with the *square* of the sequence length.

# %%
import math
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from transformer_course.attention import scaled_dot_product_attention
from transformer_course.diagrams import soft_lookup
from transformer_course.plotting import plot_attention
from transformer_course.utils import set_seed, show_source

g = set_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# A Python dictionary does a *hard* lookup: the query must equal one key exactly, and you get that
# key's value and nothing else. Attention does a *soft* one. The query is compared with every key
# (a dot product: large when they point the same way), the comparisons become weights that are
# positive and sum to one, and the answer is a blend of all values, dominated by the best match:

# %%
# the scores q·k_i/sqrt(d_k) of four keys; the weights are their softmax
soft_lookup([0.5, 2.5, 1.2, -0.5])
plt.show()

# %% [markdown]
# ## A two-word example by hand
#
# Two words, each with a 3-dimensional query and key and a 2-dimensional value. In a real model $Q$, $K$ and $V$ come out of learned linear layers
# (chapter 05); here we simply write them down.

# %%
# one row per word: the first row belongs to word 1, the second to word 2
Q = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])  # queries
K = torch.tensor([[1.0, 2.0, 1.0], [2.0, 1.0, 0.0]])  # keys
V = torch.tensor([[0.5, 0.8], [0.2, 0.3]])  # values
d_k = Q.shape[-1]
print("Q:", tuple(Q.shape), " K:", tuple(K.shape), " V:", tuple(V.shape))

# %% [markdown]
# **Step 1, scores.** Entry $(i, j)$ of $QK^\top$ is the dot product of query $i$ with key $j$:
# how well word $j$ answers word $i$'s question. $(2\times3)(3\times2)$ gives a $2\times2$ matrix.

# %%
scores = Q @ K.T
print(scores)
assert scores.tolist() == [[2.0, 2.0], [3.0, 1.0]]
assert scores[1, 0] == 0 * 1 + 1 * 2 + 1 * 1  # query 2 . key 1, written out

# %% [markdown]
# **Step 2, scale** by $\sqrt{d_k} = \sqrt 3$ (why: two sections below).
# **Step 3, softmax** over each row: $w_{ij} = e^{s_{ij}} / \sum_{j'} e^{s_{ij'}}$.
# Word 1 scores both keys equally, so it splits its attention 50/50. For word 2 the
# difference of its two scaled scores is $(3-1)/\sqrt3$, and a two-way softmax of a difference
# $\Delta$ is the logistic function $1/(1+e^{-\Delta})$:

# %%
scaled = scores / math.sqrt(d_k)
weights = torch.softmax(scaled, dim=-1)
print("scaled scores:\n", scaled)
print("weights:\n", weights)
by_hand = 1 / (1 + math.exp(-(3 - 1) / math.sqrt(3)))
print(f"word 2 -> word 1, by hand: {by_hand:.4f}")
assert torch.allclose(
    weights, torch.tensor([[0.5, 0.5], [0.7604, 0.2396]]), atol=1e-4
)
assert math.isclose(weights[1, 0].item(), by_hand, rel_tol=1e-6)
assert torch.allclose(weights.sum(dim=-1), torch.ones(2))

# %% [markdown]
# **Step 4, mix the values.** Each output row is a weighted average of the rows of $V$: word 1
# gets the midpoint of the two values, word 2 leans towards word 1's value.

# %%
output = weights @ V
print(output)
assert torch.allclose(output[0], 0.5 * V[0] + 0.5 * V[1])
assert torch.allclose(
    output, torch.tensor([[0.35, 0.55], [0.4281, 0.6802]]), atol=1e-4
)
# never outside the values' range
assert ((V.min(0).values <= output) & (output <= V.max(0).values)).all()

# %% [markdown]
# Because the weights of a row are positive and sum to one, every output lies *between* the
# values: attention can only average what the values already hold, never invent beyond them.
# Attention *moves* information between positions; it does not transform it non-linearly. That
# job goes to the feed-forward network that follows attention in every Transformer block: a
# small non-linear network applied to each position on its own (chapter 06).
#
# ## Softmax from scratch
#
# $\operatorname{softmax}(z)_j = e^{z_j} / \sum_{j'} e^{z_{j'}}$: exponentiate (everything becomes
# positive, larger scores much larger) and normalise (the row sums to one). Written naively it
# overflows: $e^{1000}$ is `inf` in floating point, and `inf / inf` is `nan`. The cure is free,
# because softmax does not change when the same constant is subtracted from every score:
# subtract the row's maximum first, so the largest exponent is $e^0 = 1$.


# %%
def softmax_naive(z: torch.Tensor) -> torch.Tensor:
    e = torch.exp(z)
    return e / e.sum(dim=-1, keepdim=True)


def softmax(z: torch.Tensor) -> torch.Tensor:
    # subtract the row's maximum: the same result, no overflow
    e = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


z = torch.tensor([[2.0, 4.0, 5.0]])
print("naive:        ", softmax_naive(z))
print("stable:       ", softmax(z))
print("torch.softmax:", torch.softmax(z, dim=-1))
big = torch.tensor([[1000.0, 1001.0]])
print("naive on [1000, 1001]: ", softmax_naive(big))
print("stable on [1000, 1001]:", softmax(big))

r = torch.randn(64, 10, generator=g) * 5
assert torch.allclose(softmax(r), torch.softmax(r, dim=-1), atol=1e-7)
assert torch.allclose(softmax_naive(z), torch.softmax(z, dim=-1), atol=1e-7)
assert softmax_naive(big).isnan().all()
assert torch.allclose(softmax(big), torch.softmax(big, dim=-1))

# %% [markdown]
# `torch.softmax` does the same subtraction internally. We use it from now on.
#
# ## Why divide by $\sqrt{d_k}$?
#
# Suppose the entries of a query and a key are independent with mean 0 and variance 1 (roughly
# what a freshly initialised model produces). Their dot product $q\cdot k = \sum_{i=1}^{d_k} q_i k_i$
# is a sum of $d_k$ independent terms of variance 1, so its **variance is $d_k$** and its typical
# size $\sqrt{d_k}$. With $d_k = 64$ (the original Transformer's head size) scores are typically
# $\pm 8$, and the softmax of such numbers is nearly one-hot: it *saturates*. A saturated softmax
# passes back a smaller gradient (how much smaller, the table below measures), so the model learns
# more slowly which key to prefer. Dividing by $\sqrt{d_k}$ brings the variance back to 1,
# whatever $d_k$ is.
#
# Let us check both claims with random vectors: the variance of the raw and scaled dot products,
# the average largest weight of a softmax over 16 keys, and the size of the gradient that flows
# back through that softmax.


# %%
def score_statistics(
    d: int, n_queries: int = 1000, n_keys: int = 16
) -> dict[str, float]:
    q = torch.randn(n_queries, 1, d, generator=g)
    # fresh keys for every query
    k = torch.randn(n_queries, n_keys, d, generator=g)
    raw = (q * k).sum(-1)  # (n_queries, n_keys) dot products
    stats = {
        "var_raw": raw.var().item(),
        "var_scaled": (raw / math.sqrt(d)).var().item(),
    }
    upstream = torch.randn(n_queries, n_keys, generator=g)
    for name, s in (("raw", raw), ("scaled", raw / math.sqrt(d))):
        s = s.detach().requires_grad_(True)
        w = torch.softmax(s, dim=-1)
        # a random signal from "the rest of the network"
        (w * upstream).sum().backward()
        stats[f"max_w_{name}"] = w.max(dim=-1).values.mean().item()
        stats[f"grad_{name}"] = s.grad.norm(dim=-1).mean().item()
    return stats


dims = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
stats = {d: score_statistics(d) for d in dims}
print(
    " d_k   var(q.k)  var(q.k/sqrt d)  max weight raw/scaled  grad raw/scaled"
)
for d in dims:
    s = stats[d]
    print(
        f"{d:4d} {s['var_raw']:9.1f} {s['var_scaled']:12.2f}"
        f" {s['max_w_raw']:14.2f} / {s['max_w_scaled']:.2f}"
        f" {s['grad_raw']:11.3f} / {s['grad_scaled']:.3f}"
    )

# %%
# the variance of q.k is d_k (to sampling noise); scaled it is 1
for d in dims:
    assert abs(stats[d]["var_raw"] / d - 1) < 0.1
    assert abs(stats[d]["var_scaled"] - 1) < 0.1
assert stats[1024]["max_w_raw"] > 0.95  # saturation
assert stats[1024]["max_w_scaled"] < 0.35  # and its cure
grad_ratio = {
    d: stats[d]["grad_scaled"] / stats[d]["grad_raw"] for d in (64, 1024)
}
print(
    f"gradient with scaling / without: {grad_ratio[64]:.1f}x at d_k = 64, "
    f"{grad_ratio[1024]:.1f}x at d_k = 1024"
)
# the numbers the text below quotes
assert 1.5 < grad_ratio[64] < 3 and 4 < grad_ratio[1024] < 10

fig, axes = plt.subplots(3, 1, figsize=(6.4, 8.4), sharex=True)
col = {"raw": "tab:red", "scaled": "tab:blue"}
axes[0].loglog(
    dims,
    [stats[d]["var_raw"] for d in dims],
    "o-",
    color=col["raw"],
    label=r"$q\cdot k$",
)
axes[0].loglog(
    dims,
    [stats[d]["var_scaled"] for d in dims],
    "o-",
    color=col["scaled"],
    label=r"$q\cdot k/\sqrt{d_k}$",
)
axes[0].loglog(dims, dims, "k:", label="$d_k$")
axes[0].set_title("variance of the scores")
for ax, key, title in (
    (axes[1], "max_w", "mean largest softmax weight (16 keys)"),
    (axes[2], "grad", "gradient norm through the softmax"),
):
    for name in ("raw", "scaled"):
        ax.semilogx(
            dims,
            [stats[d][f"{key}_{name}"] for d in dims],
            "o-",
            color=col[name],
            label="unscaled" if name == "raw" else r"scaled by $1/\sqrt{d_k}$",
        )
    ax.set_title(title)
axes[1].axhline(1 / 16, color="gray", ls=":", label="uniform (1/16)")
axes[-1].set_xlabel("$d_k$")
for ax in axes:
    ax.legend(fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# Without scaling, the variance grows in step with $d_k$ (left, on the dotted line), the softmax
# puts most of its weight on one key (middle: 0.85 on average at $d_k = 64$, 0.96 at 1024) and the
# gradient through it shrinks (right): to about half at $d_k = 64$ and about a sixth at
# $d_k = 1024$. Smaller, not zero: an unscaled model still learns, only more slowly, and the
# effect grows with $d_k$. With scaling all three stay flat. The scale does not change *which* key wins, only how sharply;
# a trained model can still learn sharp attention by making its queries and keys larger.
#
# ## The whole idea in five lines
#
# Here are the four steps as one function. `k.transpose(-2, -1)` swaps the last two dimensions
# only, so the same lines work for a single sequence `(L, d_k)` and for a batch of heads
# `(batch, heads, L, d_k)`:


# %%
def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., L_q, L_k)
    weights = torch.softmax(scores, dim=-1)  # each row sums to 1
    return weights @ v, weights  # (..., L_q, d_v), (..., L_q, L_k)


out, w = attention(Q, K, V)
print("output:", tuple(out.shape), " weights:", tuple(w.shape))
# the hand computation above
assert torch.allclose(w, weights) and torch.allclose(out, output)

# %% [markdown]
# The course's package keeps the same computation as `scaled_dot_product_attention` in
# `transformer_course.attention`, the function every later chapter imports. It adds what a library
# needs around those lines: an optional boolean mask (next section), dropout on the weights, and
# checks that turn a shape mistake into a clear error. On the same inputs it gives the same numbers
# (its full source is folded below):

# %%
# (batch, heads, length, d_k)
qb, kb, vb = (torch.randn(2, 4, 5, 8, generator=g) for _ in range(3))
minimal, _ = attention(qb, kb, vb)
package, _ = scaled_dot_product_attention(qb, kb, vb)
gap = (minimal - package).abs().max().item()
print(
    "max |minimal - package| on a (2, 4, 5, 8) batch:",
    "below 1e-6" if gap < 1e-6 else gap,
)
assert gap < 1e-6

# %% tags=["hide-input"]
show_source(scaled_dot_product_attention)

# %% tags=["remove-input"]
out, w = scaled_dot_product_attention(Q, K, V)
assert torch.equal(w, weights) and torch.equal(out, output)

# %% [markdown]
# PyTorch ships the same operation as `torch.nn.functional.scaled_dot_product_attention` (a fused
# kernel that returns only the output). Both agree on random batched inputs, with and without a
# boolean mask:

# %%
q = torch.randn(2, 4, 6, 16, generator=g)  # (batch, heads, queries, d_k)
k = torch.randn(2, 4, 9, 16, generator=g)  # (batch, heads, keys, d_k)
v = torch.randn(2, 4, 9, 8, generator=g)  # (batch, heads, keys, d_v)
# True = may attend; the same for all heads
mask = torch.rand(2, 1, 6, 9, generator=g) < 0.7
# every query keeps at least one key (see below for what happens otherwise)
mask[..., 0] = True

ours, _ = scaled_dot_product_attention(q, k, v)
ours_masked, w_masked = scaled_dot_product_attention(q, k, v, mask)
err = (ours - F.scaled_dot_product_attention(q, k, v)).abs().max().item()
torch_masked = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
err_masked = (ours_masked - torch_masked).abs().max().item()
print("output shape:", tuple(ours.shape))
print("max |ours - torch|, no mask:  ", "below 1e-6" if err < 1e-6 else err)
print(
    "max |ours - torch|, with mask:",
    "below 1e-6" if err_masked < 1e-6 else err_masked,
)
assert err < 1e-6 and err_masked < 1e-6

# %% [markdown]
# ## Masks: which keys a query may see
#
# Often some keys must be invisible: padding tokens that only fill a batch to equal length, or, in
# a language model, the *future* words a query is not allowed to peek at. The course uses one
# convention everywhere:
#
# > a mask is a **boolean** tensor that broadcasts to the scores `(..., L_q, L_k)`, and **`True`
# > means "may attend"**.
#
# This is also the convention of `F.scaled_dot_product_attention`'s boolean `attn_mask`. Beware:
# `torch.nn.MultiheadAttention` uses the opposite one (`True` = blocked; chapter 05), and many
# implementations use float masks in which 1 means "blocked" and add `mask * -1e9` to the scores
# (TensorFlow's well-known Transformer tutorial does: its `create_padding_mask` puts a 1 on every
# padding token). Mixing the two conventions is a common pitfall: it silently attends to exactly
# the wrong keys, which is why the package refuses anything but a
# boolean mask. Blocked scores are replaced by a huge negative number before the softmax, so
# their weight is exactly 0 and the rest of the row renormalises. A causal mask on four tokens:

# %%
x4 = torch.randn(4, 8, generator=g)
causal = torch.ones(4, 4, dtype=torch.bool).tril()  # query i may see keys 0..i
_, w_causal = scaled_dot_product_attention(x4, x4, x4, causal)
print(causal)
print(w_causal)
# nothing above the diagonal
assert torch.equal(w_causal.triu(diagonal=1), torch.zeros(4, 4))
assert torch.allclose(w_causal.sum(-1), torch.ones(4))
assert w_causal[0, 0] == 1  # the first word can only look at itself

try:
    scaled_dot_product_attention(x4, x4, x4, causal.float())
except TypeError as e:
    print("TypeError:", e)

# %% [markdown]
# **A query that may see nothing.** If every key of a row is blocked (a padding position asking
# about a sequence that is all padding, say), the textbook recipe of filling blocked scores with
# $-\infty$ gives $e^{-\infty}/\sum e^{-\infty} = 0/0$, which is `nan`, and one `nan` spreads through
# the whole network in the next step. The package fills with the most negative finite number
# instead and then zeroes such rows: the query receives nothing, and its output is 0. PyTorch's
# fused function (in the version used here) does the same.

# %%
blocked = causal.clone()
blocked[2] = False  # query 2 may attend to no key at all
naive_w = torch.softmax(
    (x4 @ x4.T / math.sqrt(8)).masked_fill(~blocked, float("-inf")), dim=-1
)
out_b, w_b = scaled_dot_product_attention(x4, x4, x4, blocked)
print("naive -inf fill, row 2:", naive_w[2])
print("package, row 2:        ", w_b[2], " output:", out_b[2])
ref_b = F.scaled_dot_product_attention(x4, x4, x4, attn_mask=blocked)
print("torch's output, row 2: ", ref_b[2])
assert naive_w[2].isnan().all()
assert torch.equal(w_b[2], torch.zeros(4))
assert torch.equal(out_b[2], torch.zeros(8))
assert not out_b.isnan().any() and torch.allclose(out_b, ref_b, atol=1e-6)

# %% [markdown]
# ## Looking at the weights
#
# Attention weights form a matrix with one row per query and one column per key, so a heatmap
# with the tokens on both axes shows who looks at whom. Without learned projections a sentence's
# self-attention is just similarity: take $Q = K = V = X$, where $X$ holds one hand-made
# feature vector per word (features: *determiner*, *noun*, *animal*, *verb*, *preposition*). Each
# word attends most to itself and then to words that share its features; the causal mask on the
# right cuts away the upper triangle.

# %%
tokens = ["the", "cat", "sat", "on", "the", "mat"]
features = {  # determiner, noun, animal, verb, preposition
    "the": [1.0, 0.0, 0.0, 0.0, 0.0],
    "cat": [0.0, 1.0, 1.0, 0.0, 0.0],
    "sat": [0.0, 0.0, 0.3, 1.0, 0.0],
    "on": [0.0, 0.0, 0.0, 0.3, 1.0],
    "mat": [0.0, 1.0, 0.0, 0.0, 0.0],
}
# larger vectors -> sharper attention
X = 2.5 * torch.tensor([features[t] for t in tokens])
_, w_sent = scaled_dot_product_attention(X, X, X)
mask6 = torch.ones(6, 6, dtype=torch.bool).tril()
_, w_sent_causal = scaled_dot_product_attention(X, X, X, mask6)

fig, axes = plt.subplots(1, 2, figsize=(6.6, 3.4))
plot_attention(
    w_sent,
    tokens,
    ax=axes[0],
    annotate=True,
    title="self-attention, Q = K = V = X",
)
plot_attention(
    w_sent_causal,
    tokens,
    ax=axes[1],
    annotate=True,
    title="with a causal mask",
)
fig.tight_layout()
plt.show()

# %%
top_other = {}
for i, t in enumerate(tokens):  # the most attended *other* word of each query
    row = w_sent[i].clone()
    row[i] = -1
    top_other[f"{t}@{i}"] = tokens[row.argmax()]
print(top_other)
# the two "the"s find each other
assert top_other["the@0"] == "the" and top_other["the@4"] == "the"
# the nouns find each other
assert top_other["cat@1"] == "mat" and top_other["mat@5"] == "cat"
# identical words ask identical questions
assert torch.equal(w_sent[0], w_sent[4])

# %% [markdown]
# ## The price: $O(n^2)$
#
# Every query is compared with every key, so a sequence of $n$ tokens needs an $n \times n$ score
# matrix, per head and per layer: twice the text, four times the work and four times the memory.
# The cell below builds the score matrix of one head ($d_k = 64$) for growing $n$, times the whole
# attention step and reads off the memory the score matrix actually occupies. The times depend on
# the machine and vary from run to run (we keep the fastest of five runs, on one thread, which
# other programs on the machine disturb least); the memory is exact: $4n^2$ bytes in 32-bit floats.


# %% tags=["nbval-ignore-output"]
def time_attention(n: int, d: int = 64, repeats: int = 5) -> tuple[float, int]:
    """Fastest time of ``softmax(q k^T / sqrt d) v`` for length ``n``.

    Returns it with the score matrix's size in bytes.
    """
    q, k, v = (torch.randn(n, d, generator=g) for _ in range(3))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        scores = q @ k.T / math.sqrt(d)
        _out = torch.softmax(scores, dim=-1) @ v
        times.append(time.perf_counter() - t0)
    return min(times), scores.untyped_storage().nbytes()


lengths = [128, 256, 512, 1024, 2048, 4096]
threads = torch.get_num_threads()
torch.set_num_threads(1)
try:
    cost = {n: time_attention(n) for n in lengths}
finally:
    torch.set_num_threads(threads)
for n in lengths:
    seconds, nbytes = cost[n]
    print(
        f"n = {n:5d}: {1000 * seconds:8.2f} ms, "
        f"score matrix {nbytes / 2**20:6.1f} MiB"
    )
# exactly n^2 float32 numbers
assert all(cost[n][1] == 4 * n * n for n in lengths)
# 16x the entries: far more than 4x the time
assert cost[4096][0] > 4 * cost[1024][0]

fig, axes = plt.subplots(2, 1, figsize=(6.4, 6), sharex=True)
ns = torch.tensor(lengths, dtype=torch.float64)
axes[0].loglog(
    lengths, [1000 * cost[n][0] for n in lengths], "o-", label="measured"
)
axes[0].loglog(
    lengths,
    (1000 * cost[1024][0] * (ns / 1024) ** 2).tolist(),
    "k:",
    label=r"$\propto n^2$",
)
axes[0].set_title("time of one attention step")
axes[0].set_ylabel("milliseconds")
axes[1].loglog(
    lengths,
    [cost[n][1] / 2**20 for n in lengths],
    "o-",
    color="tab:orange",
    label="score matrix",
)
axes[1].loglog(
    lengths, (4 * ns**2 / 2**20).tolist(), "k:", label=r"$4n^2$ bytes"
)
axes[1].set_title("memory of the score matrix")
axes[1].set_ylabel("MiB")
for ax in axes:
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    ax.legend()
axes[-1].set_xlabel("sequence length $n$")
fig.tight_layout()
plt.show()

# %% [markdown]
# Short sequences are dominated by fixed overheads and fit in the processor's caches; from about a
# thousand tokens on, the time grows like $n^2$ or faster (faster once the score matrix no longer
# fits in the cache). The memory leaves no room for interpretation. Scale it up to a modern
# context window:

# %%
for n in (4096, 32_768, 131_072):
    gib = 4 * n * n / 2**30
    print(f"n = {n:7,d}: one head's score matrix takes {gib:8.2f} GiB")
assert 4 * 131_072**2 / 2**30 == 64.0

# %% [markdown]
# A single head of a single layer would need 64 GiB at 128k tokens. Long-context models therefore
# never store the full matrix: fused kernels such as FlashAttention compute the softmax tile by
# tile and keep only the output, which is what `torch.nn.functional.scaled_dot_product_attention`
# does on GPUs. The arithmetic is still $O(n^2)$; only the memory is saved.
#
# ## Summary
#
# * Attention compares each query with all keys ($QK^\top$), scales by $1/\sqrt{d_k}$, turns each
#   row into weights with a softmax and averages the values with them.
# * The scale keeps the score variance at 1 for any $d_k$, so the softmax does not saturate and
#   gradients keep flowing.
# * Masks are boolean, `True` = may attend; blocked keys get weight 0, and a query that may see
#   nothing gets a zero output instead of `nan`.
# * Time and memory grow with $n^2$.
#
# Next, chapter 05 runs several attentions side by side, each on its own learned projection:
# multi-head attention.
#
# ## Exercises
#
# **1. Temperature.** Divide the scores of the two-word example by a temperature $\tau$ instead
# of $\sqrt{d_k}$. What happens to the weights of word 2 as $\tau \to 0$ and as $\tau \to \infty$?
# Compute them for $\tau \in \{0.01, 1, 100\}$.

# %% tags=["solution"]
for tau in (0.01, 1.0, 100.0):
    w_tau = torch.softmax(scores / tau, dim=-1)[1]
    print(f"tau = {tau:6}: word 2's weights [{w_tau[0]:.4f}, {w_tau[1]:.4f}]")
w_cold = torch.softmax(scores / 0.01, dim=-1)[1]
w_hot = torch.softmax(scores / 100.0, dim=-1)[1]
assert torch.allclose(w_cold, torch.tensor([1.0, 0.0]))  # argmax
assert torch.allclose(w_hot, torch.tensor([0.5, 0.5]), atol=0.01)  # uniform

# %% [markdown]
# **2. A mask written the other way round.** Someone hands you an attention function that expects
# `1.0` for *blocked* keys and adds `mask * -1e9` to the scores (the convention of TensorFlow's
# Transformer tutorial).
# Convert the causal mask above to that convention, implement the function, and check that it gives
# the same weights as the package function with the course's boolean mask.


# %% tags=["solution"]
def attention_additive(q, k, v, blocked_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + blocked_mask * -1e9
    w = torch.softmax(s, dim=-1)
    return w @ v, w


blocked_float = (~causal).float()  # 1.0 = blocked
_, w_add = attention_additive(x4, x4, x4, blocked_float)
print(w_add)
assert torch.allclose(w_add, w_causal, atol=1e-6)

# %% [markdown]
# **3. Cross-attention and padding.** Let 3 queries attend over 5 keys of which the last two are
# padding. Build the mask with shape `(1, 5)` so that it broadcasts over the queries, and check
# that (a) the output has shape `(3, d_v)`, (b) the padded keys get weight 0, (c) the output equals
# attention over the first three keys alone.

# %% tags=["solution"]
qc = torch.randn(3, 16, generator=g)
kc, vc = torch.randn(5, 16, generator=g), torch.randn(5, 4, generator=g)
# (1, 5): the same for every query
real = torch.tensor([[True, True, True, False, False]])
out_c, w_c = scaled_dot_product_attention(qc, kc, vc, real)
out_short, _ = scaled_dot_product_attention(qc, kc[:3], vc[:3])
on_padding = w_c[:, 3:].tolist()
print("output:", tuple(out_c.shape), " weights on the padding:", on_padding)
assert out_c.shape == (3, 4)
assert torch.equal(w_c[:, 3:], torch.zeros(3, 2))
assert torch.allclose(out_c, out_short, atol=1e-6)
