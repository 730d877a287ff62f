# %% [markdown]
# # 04 — Scaled dot-product attention
#
# Chapter 01 used the formula without taking it apart: every position of a sequence asks a
# question (its **query**), advertises what it holds (its **key**) and what it will hand over if
# chosen (its **value**); a query is compared with all keys, the comparisons become weights that sum to
# one, and the answer is the weighted average of the values. Here we take its formula apart:
#
# $$\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{QK^{\mathsf T}}{\sqrt{d_k}}\right)V$$ (eq-04-1)
#
# with $Q \in \mathbb{R}^{L_q \times d_k}$ (one row per query), $K \in \mathbb{R}^{L_k \times d_k}$,
# $V \in \mathbb{R}^{L_k \times d_v}$, and the softmax taken over each row, that is over the keys.
#
# We compute it by hand on a two-word example and build the softmax from
# scratch. Experiments then show why the formula is built the way it is: why the scores are
# divided by $\sqrt{d_k}$, and why queries and keys come from two different projections. On the
# way we write the attention function of the course's package, meet masks
# (which keys a query may see), and end with the price of attention: a score matrix that grows
# with the *square* of the sequence length.

# %%
import math
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from IPython.display import display
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from transformer_course.attention import scaled_dot_product_attention
from transformer_course.diagrams import (
    attention_steps,
    hard_lookup,
    soft_lookup,
)
from transformer_course.plotting import plot_attention
from transformer_course.tasks.why_attention import (
    first_token_data,
    steps_to_reach,
    train_classifier,
)
from transformer_course.utils import Table, set_seed, show_source

# %%
# the same random numbers on every run (g: a seeded torch.Generator)
g = set_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)  # 4 decimals

# %% [markdown]
# A Python dictionary does a *hard* lookup: the query must equal one key exactly, and you get that
# key's value and nothing else. Drawn as weights on four slots (Fig. 4.1), that is a weight of 1 on
# one key and 0 on all others:

# %% tags=["hide-input"] caption="A dictionary's hard lookup with four slots. The query equals key k2, so k2 gets weight 1 and the other keys 0, and the output is v2 alone." alt="On the left a query box labelled q = k2 with a single arrow to the key box k2. Four grey rows, each with a key box k1 to k4, a weight and a green value box v1 to v4. Only the row of k2 has a yellow bar, labelled 1; the others are labelled 0. A single arrow runs from v2 into the output box, which reads v2."
hard_lookup(n=4, match=1)
plt.show()

# %% [markdown]
# Attention does a *soft* one (Fig. 4.2). The query is compared with every key
# (a dot product: large when they point the same way and are long), the comparisons become weights that are
# positive and sum to one, and the answer is a blend of *all* the values, each in proportion to its
# weight, so the best match dominates:

# %% tags=["hide-input"] caption="A soft lookup with four slots. The query is compared with every key; the softmax of the four scores gives the weights 0.09, 0.69, 0.19 and 0.03; every value flows into the output with its weight, so v2 dominates and v4 contributes least." alt="On the left a query box with an arrow to each of four key boxes k1 to k4. Each key sits in a grey row with a yellow bar for its weight (0.09, 0.69, 0.19, 0.03) and a green value box v1 to v4. From every value box an arrow runs into one output box labelled sum of w_i v_i; the arrow from v2 is by far the thickest, the one from v4 the thinnest."
# the scores q·k_i/sqrt(d_k) of four keys; the weights are their softmax
soft_lookup([0.5, 2.5, 1.2, -0.5])
plt.show()

# %% [markdown]
# ## A two-word example by hand
#
# Two words, each with a 3-dimensional query and key and a 2-dimensional value. In a real model
# $Q$, $K$ and $V$ come out of learned linear layers (the experiments below use them; chapter 05
# builds them into multi-head attention); here we simply write them down. The computation has
# four steps, plus an optional mask that we meet later; Fig. 4.3 gives the shape of every
# intermediate result, with $L_q$ queries and $L_k$ keys:

# %% tags=["hide-input"] caption="Scaled dot-product attention as a pipeline of matrix operations. Q and K give an $L_q \\times L_k$ matrix of scores, one per (query, key) pair; it is scaled, optionally masked and turned into weights by a softmax over each row; the weights multiply V, which joins only at the last step, giving one output row of size $d_v$ per query." alt="A flow chart from top to bottom. Three input boxes: Q (L_q by d_k), K (L_k by d_k) and V (L_k by d_v). Arrows from Q and K lead into a box 'scores QK transpose', then 'scale, divide by square root of d_k', 'mask (optional)', 'softmax per row', each annotated on the right with the shape L_q by L_k. An arrow from V runs down between the steps and their shapes into the box 'weights times V', shape L_q by d_v, which leads to the output box, shape L_q by d_v, one row per query."
attention_steps()
plt.show()

# %%
# one row per word: the first row belongs to word 1, the second to word 2
Q = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])  # queries
K = torch.tensor([[1.0, 2.0, 1.0], [2.0, 1.0, 0.0]])  # keys
V = torch.tensor([[0.5, 0.8], [0.2, 0.3]])  # values
d_k = Q.shape[-1]
print("Q:", tuple(Q.shape), " K:", tuple(K.shape), " V:", tuple(V.shape))

# %% [markdown]
# **Step 1, scores.** Entry $(i, j)$ of $QK^{\mathsf T}$ is the dot product of query $i$ with
# key $j$: how well word $j$ answers word $i$'s question. $(2\times3)(3\times2)$ gives a
# $2\times2$ matrix.

# %%
scores = Q @ K.T
print(scores)

# %% tags=["remove-cell"]
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

# %% tags=["remove-cell"]
assert math.isclose(weights[1, 0].item(), by_hand, rel_tol=1e-6)
assert torch.allclose(weights.sum(dim=-1), torch.ones(2))  # rows sum to 1

# %% [markdown]
# **Step 4, mix the values.** Each output row is a weighted average of the rows of $V$: word 1
# gets the midpoint of the two values, word 2 leans towards word 1's value.

# %%
output = weights @ V
print(output)

# %% tags=["remove-cell"]
assert torch.allclose(output[0], 0.5 * V[0] + 0.5 * V[1])  # the midpoint
# never outside the values' range, coordinate by coordinate
assert ((V.min(0).values <= output) & (output <= V.max(0).values)).all()

# %% [markdown]
# The weights of a row are never negative and sum to one, so in every coordinate an output lies
# *between* the smallest and the largest value: attention can only mix what the values already
# hold. For fixed weights the output is even linear in the values. The only non-linearity is in
# *choosing* the weights, a softmax of products of the inputs; attention cannot, say, apply a
# ReLU to a value. That job goes to the feed-forward network that follows attention in every
# Transformer block: a small non-linear network applied to each position on its own (chapter 06).
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
print("on [1000, 1001]:")
print("  naive: ", softmax_naive(big))
print("  stable:", softmax(big))
print("  torch: ", torch.softmax(big, dim=-1))

r = torch.randn(64, 10, generator=g) * 5  # any scores
stable_is_softmax = torch.allclose(softmax(r), torch.softmax(r, dim=-1))
print("stable = torch.softmax on 64 rows of random scores:", stable_is_softmax)

# %% [markdown]
# `torch.softmax` survives large scores as well: it subtracts the maximum internally. We use it
# from now on.
#
# ## Why divide by $\sqrt{d_k}$?
#
# Suppose the entries of a query and of a key are independent, with mean 0 and variance
# $\sigma^2$. Their dot product $q\cdot k = \sum_{i=1}^{d_k} q_i k_i$ is a sum of $d_k$
# independent terms of variance $\sigma^4$ each, so its **variance is $d_k\sigma^4$**: it grows
# in proportion to $d_k$. This is the argument the Transformer paper gives for its scale
# (Vaswani et al., 2017, *Attention Is All You Need*, footnote 4, with $\sigma^2 = 1$). The value
# of $\sigma^2$ depends on how the projections are initialised
# and changes during training. PyTorch's default initialisation of `nn.Linear` draws each weight
# uniformly from $\pm 1/\sqrt{\mathrm{fan}_{\mathrm{in}}}$, a variance of
# $1/(3\,\mathrm{fan}_{\mathrm{in}})$; an entry of $q$ sums $\mathrm{fan}_{\mathrm{in}}$ such
# weights times inputs of variance 1, so $\sigma^2 \approx 1/3$, and the variance of
# $q \cdot k$ is about $d_k/9$:

# %%
x = torch.randn(4096, 512, generator=g)  # 4096 inputs of size 512, variance 1
for d in (64, 256, 1024):
    W_q, W_k = nn.Linear(512, d), nn.Linear(512, d)  # PyTorch's default init
    q, k = W_q(x[:2048]), W_k(x[2048:])  # queries and keys of different inputs
    qk = (q * k).sum(dim=-1)
    print(
        f"d_k = {d:4d}: entries of q have variance {q.var():.2f}, "
        f"q·k has variance {qk.var():5.1f} = {qk.var() / d:.3f} d_k"
    )

# %% [markdown]
# At $d_k = 1024$ such scores have a standard deviation of about 11, and a softmax of numbers
# that far apart puts most of its weight on one key: it *saturates*. The same paper, citing
# Britz et al. (2017, *Massive Exploration of Neural Machine Translation Architectures*),
# notes that without the scale, dot-product attention falls behind additive attention (a small
# network that scores each pair, exercise 4) for large $d_k$, and suspects the cause is a
# softmax pushed into regions where its gradients are extremely small. To see what that does,
# take $\sigma^2 = 1$ (exercise 5 asks what another value would change) and draw 1000 queries
# with 16 keys each, for $d_k$ from 1 to 1024. For each, with and without the division by
# $\sqrt{d_k}$, we measure the variance of the scores, the average largest weight of the
# softmax, and the gradient that the softmax passes back to its scores, $\partial L/\partial s$,
# with a random signal $g = \partial L/\partial w$ standing in for the rest of the network.
# Chapter 01 met the derivative of the softmax; here we use it to say what to expect, and
# then measure it. Since $w_j = e^{s_j}/\sum_{j'} e^{s_{j'}}$,
#
# $$\begin{aligned}
# \frac{\partial w_j}{\partial s_i} &= w_j(\delta_{ij} - w_i),\\
# \frac{\partial L}{\partial s_i} &= \sum_j g_j \frac{\partial w_j}{\partial s_i}
# = w_i\,(g_i - w\cdot g).
# \end{aligned}$$ (eq-04-2)
#
# If the softmax is saturated, $w$ is nearly one-hot: for the winning key $w_i \approx 1$ and
# $g_i - w\cdot g \approx g_i - g_i = 0$; for every other key $w_i \approx 0$. So the whole
# gradient is nearly zero, whatever the signal; a query whose weights are spread out still
# gets one. We count the queries for which its norm is below 0.01, and give the median norm of
# the others.


# %%
def softmax_gradients(
    s: torch.Tensor, upstream: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax weights of the scores ``s`` and, per query, the norm of the
    gradient they pass back to ``s`` for the signal ``upstream``."""
    s = s.detach().requires_grad_(True)
    w = torch.softmax(s, dim=-1)
    (w * upstream).sum().backward()  # a random signal from "the network"
    return w.detach(), s.grad.norm(dim=-1)


# autograd agrees with the formula w * (g - w . g)
demo = torch.Generator().manual_seed(1)
s_demo, g_demo = (
    torch.randn(3, 5, generator=demo),
    torch.randn(3, 5, generator=demo),
)
s_demo.requires_grad_(True)
w_demo = torch.softmax(s_demo, dim=-1)
(w_demo * g_demo).sum().backward()
w_demo = w_demo.detach()
by_formula = w_demo * (g_demo - (w_demo * g_demo).sum(-1, keepdim=True))
gap = (s_demo.grad - by_formula).abs().max().item()
print("autograd equals w * (g - w.g) to 1e-6:", gap < 1e-6)


def score_statistics(
    d: int, n_queries: int = 1000, n_keys: int = 16
) -> dict[str, float]:
    q = torch.randn(n_queries, 1, d, generator=g)
    k = torch.randn(n_queries, n_keys, d, generator=g)  # fresh keys per query
    raw = (q * k).sum(-1)  # (n_queries, n_keys) dot products
    stats = {}
    upstream = torch.randn(n_queries, n_keys, generator=g)
    for name, s in (("raw", raw), ("scaled", raw / math.sqrt(d))):
        w, grad_norm = softmax_gradients(s, upstream)
        stuck = grad_norm < 0.01  # queries whose score gradient is ~0
        stats[f"var_{name}"] = s.var().item()
        stats[f"max_w_{name}"] = w.max(dim=-1).values.mean().item()
        stats[f"stuck_{name}"] = stuck.float().mean().item()
        stats[f"rest_{name}"] = grad_norm[~stuck].median().item()
    return stats


dims = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
stats = {d: score_statistics(d) for d in dims}
for name, title in (("raw", "unscaled"), ("scaled", "scaled by 1/sqrt(d_k)")):
    fields = [f"{key}_{name}" for key in ("var", "max_w", "stuck", "rest")]
    display(
        Table(
            [
                "d_k",
                "variance",
                "largest weight",
                "gradient < 0.01",
                "median of rest",
            ],
            [(d, *(stats[d][field] for field in fields)) for d in dims],
            formats={
                "variance": ".2f",
                "largest weight": ".2f",
                "gradient < 0.01": ".0%",
                "median of rest": ".2f",
            },
            caption=title,
        )
    )

# %% tags=["remove-cell"]
for d in dims:
    # the variance of q·k is d_k, to sampling noise; scaled, it is 1
    assert abs(stats[d]["var_raw"] / d - 1) < 0.25
    assert abs(stats[d]["var_scaled"] - 1) < 0.25
    # scaled, the largest weight stays near 0.25 and no query is stuck
    assert stats[d]["max_w_scaled"] < 0.35 and stats[d]["stuck_scaled"] < 0.02

# %% tags=["remove-cell"]
# unscaled at d_k = 1024: nearly one-hot, and most queries get no gradient
assert stats[1024]["max_w_raw"] > 0.9 and stats[1024]["stuck_raw"] > 0.5

# %% tags=["hide-input"] caption="The same random queries and keys, with and without the division by √dₖ, for dₖ from 1 to 1024. Top: the variance of the unscaled scores follows dₖ (dotted line); scaled, it stays at 1. Middle: the unscaled softmax puts more and more of its weight on one key. Bottom: the share of queries whose softmax passes back almost no gradient (below 0.01) grows to 77% at dₖ = 1024 without scaling and stays at zero with it." alt="Three line plots stacked, sharing a logarithmic d_k axis from 1 to 1024, red for unscaled and blue for scaled. Top, log-log: the red line rises along a dotted diagonal from 1 to about 1000; the blue line stays flat at 1. Middle: the red line climbs from about 0.2 to 0.96, the blue line stays near 0.25, a grey dotted line marks 1/16. Bottom: the red line rises from 0 to about 0.77, the blue line stays at 0."
fig, axes = plt.subplots(3, 1, figsize=(6.4, 8.4), sharex=True)
colour = {"raw": "tab:red", "scaled": "tab:blue"}
label = {"raw": "unscaled", "scaled": r"scaled by $1/\sqrt{d_k}$"}
for ax, key, title in (
    (axes[0], "var", "variance of the scores"),
    (axes[1], "max_w", "mean largest softmax weight (16 keys)"),
    (axes[2], "stuck", "share of queries with gradient below 0.01"),
):
    for name in ("raw", "scaled"):
        values = [float(stats[d][f"{key}_{name}"]) for d in dims]
        ax.plot(dims, values, "o-", color=colour[name], label=label[name])
    ax.set_xscale("log", base=2)
    ax.set_title(title)
axes[0].set_yscale("log")
axes[0].plot(dims, dims, "k:", label="$d_k$")
axes[1].axhline(1 / 16, color="gray", ls=":", label="uniform (1/16)")
axes[1].set_ylim(0, 1)
axes[2].set_ylim(0, 1)
axes[-1].set_xticks(dims, [str(d) for d in dims])
axes[-1].set_xlabel("$d_k$", fontsize=11)
for ax in axes:
    ax.legend(fontsize=11)
    ax.tick_params(labelsize=11)
fig.tight_layout()
plt.show()

# %% [markdown]
# Without scaling, the variance grows in step with $d_k$ (Fig. 4.4, top panel, on the dotted line),
# the softmax puts most of its weight on one key (middle panel: 0.86 on average at $d_k = 64$, 0.96
# at 1024), and the gradient that reaches the scores vanishes for more and more queries (bottom
# panel: for 30% of them at $d_k = 64$ and 77% at 1024). Saturation does not shrink every
# query's gradient by the same factor: it switches the gradient off for some queries (most of
# them at $d_k = 1024$), while the others still get one, under a third as large as with
# scaling (a median norm of 0.08 against 0.28 at $d_k = 1024$). These gradients are measured
# at the scores; at $q$ and $k$ the unscaled gradient carries an extra factor $\sqrt{d_k}$,
# because $s = q\cdot k$ instead of $q\cdot k/\sqrt{d_k}$. With scaling, all three stay
# flat: variance 1, a largest weight near 0.25, and no query left without a gradient.
#
# ### What saturation does to learning
#
# Does that matter once a model trains? Take chapter 01's first task: a sequence of 20 random
# tokens out of 8 is labelled with its first token. The model below embeds tokens and positions,
# lets the last position's query attend over all positions, and classifies the result. It has
# $d_k = 128$, and the division by $\sqrt{d_k}$ is a switch:


# %%
class FirstTokenReader(nn.Module):
    """One query (the last position) attends over the sequence; a linear
    layer reads the answer."""

    def __init__(self, d: int, scale: bool, vocab: int = 8, length: int = 20):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(length, d)
        self.W_q, self.W_k, self.W_v = (nn.Linear(d, d) for _ in range(3))
        self.out = nn.Linear(d, vocab)
        self.scale = scale

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos(torch.arange(tokens.size(1)))
        q = self.W_q(x[:, -1:])  # (batch, 1, d): the last position's query
        k, v = self.W_k(x), self.W_v(x)  # (batch, length, d)
        scores = q @ k.transpose(-2, -1)  # (batch, 1, length)
        if self.scale:
            scores = scores / math.sqrt(q.size(-1))
        self.scores = scores  # kept to measure saturation
        self.weights = torch.softmax(scores, dim=-1)
        return self.out((self.weights @ v)[:, 0])


# %% [markdown]
# Call *temperature* $\tau$ the number that the raw scores $q\cdot k$ are divided by before the
# softmax (exercise 1 explores it). The unscaled model runs at $\tau = 1$, the scaled one at
# $\tau = \sqrt{128} \approx 11.3$: without the division every score is 11.3 times larger.
# So the switch
# changes two things at once: how saturated the softmax is at the start (the previous
# experiment), and how far one step of $W_q$ moves the scores, 11.3 times as far without the
# division, which changes the effective learning rate. (The extra factor $\sqrt{d_k}$ in the
# gradient is not what matters here, at least for $W_q$ and $W_k$, whose whole gradient passes
# through the scores: Adam, which we train with, divides each parameter's gradient by its own
# running size, so multiplying a gradient by a constant leaves the step unchanged.) How fast a model learns depends on its
# learning rate as much as on its architecture, so a fair comparison gives each version its own
# best rate. We train both versions with Adam at three learning rates, $10^{-3}$,
# $3\cdot10^{-3}$ and $10^{-2}$, eight times each (fresh batches of 64
# sequences, 300 steps): run $i$ starts every version from the same initial weights and feeds it
# the same batches. Every 25 steps we measure the accuracy on 1000 held-out sequences, and
# before training we measure, with the statistic of the previous experiment, how saturated
# each model's softmax is.

# %%
# a separate generator: with 8**20 possible sequences, and 19,200 per
# training run, a test sequence turning up in training is vanishingly rare
test = first_token_data(
    1000, 20, generator=torch.Generator().manual_seed(1000)
)
rates = (1e-3, 3e-3, 1e-2)
FIRST_SEED = 0  # run i uses seed FIRST_SEED + i: change it for new runs
curves, on_first, before = {}, {}, {}
for scale in (True, False):
    for run in range(8):
        for lr in rates:
            seed = FIRST_SEED + run
            torch.manual_seed(seed)  # the same initial weights at every rate
            model = FirstTokenReader(d=128, scale=scale)
            if lr == rates[0]:  # before training: how saturated is it?
                with torch.no_grad():
                    model(test[0])
                signal = torch.randn(
                    model.scores.shape,
                    generator=torch.Generator().manual_seed(seed),
                )
                w, grad_norm = softmax_gradients(model.scores, signal)
                before[scale, run] = (
                    w.max(dim=-1).values.mean().item(),  # largest weight
                    (grad_norm < 0.01).float().mean().item(),  # share ~0
                )
            curves[scale, lr, run] = train_classifier(
                model,
                lambda n, gen: first_token_data(n, 20, generator=gen),
                steps=300,
                lr=lr,
                generator=torch.Generator().manual_seed(seed),
                eval_data=test,
                eval_every=25,
            ).curve("accuracy")
            with torch.no_grad():  # where does the trained query look?
                model(test[0])
            on_first[scale, lr, run] = model.weights[:, 0, 0].mean().item()

reached = {key: steps_to_reach(c, 0.95) for key, c in curves.items()}
final = {key: c[-1][1] for key, c in curves.items()}


def n_reached(scale: bool, lr: float) -> int:
    return sum(reached[scale, lr, run] is not None for run in range(8))


def mean_final(scale: bool, lr: float) -> float:
    return sum(final[scale, lr, run] for run in range(8)) / 8


names = ((True, "scaled"), (False, "unscaled"))
display(
    Table(
        ["version", "learning rate", "runs at 95%", "mean accuracy"],
        [
            (name, lr, f"{n_reached(scale, lr)}/8", mean_final(scale, lr))
            for scale, name in names
            for lr in rates
        ],
        formats={"mean accuracy": ".2f"},
    )
)
# the best rate: the most runs at 95%, then the best mean accuracy
best = {
    scale: max(
        rates, key=lambda r: (n_reached(scale, r), mean_final(scale, r))
    )
    for scale in (True, False)
}
print(f"best rate: scaled {best[True]}, unscaled {best[False]}")

# %% [markdown]
# At each version's best rate, run by run: how saturated the softmax is before training (the
# mean largest weight, and the share of the 1000 held-out sequences whose scores get a
# gradient below 0.01), when the run first reaches 95% held-out accuracy, and, after 300 steps,
# its accuracy and the weight its query puts on position 0, the position that holds the answer.
# For the unscaled runs that needed more than 100 steps, the held-out accuracy every 25 steps
# follows:

# %%
for scale, name in names:
    lr = best[scale]
    display(
        Table(
            [
                "run",
                "largest weight",
                "gradient < 0.01",
                "steps to 95%",
                "accuracy",
                "weight on 0",
            ],
            [
                (
                    run,
                    *before[scale, run],  # largest weight, share stuck
                    reached[scale, lr, run] or "-",
                    final[scale, lr, run],
                    on_first[scale, lr, run],
                )
                for run in range(8)
            ],
            formats={
                "largest weight": ".2f",
                "gradient < 0.01": ".0%",
                "accuracy": ".2f",
                "weight on 0": ".2f",
            },
            caption=f"{name}, learning rate {lr}",
        )
    )

slow = [
    run for run in range(8) if (reached[False, best[False], run] or 0) > 100
]
steps_shown = [step for step, _ in curves[False, best[False], slow[0]]]
held_out = {
    f"run {run}": [acc for _, acc in curves[False, best[False], run]]
    for run in slow
}
display(
    Table(
        ["step", *held_out],
        zip(steps_shown, *held_out.values()),
        formats=dict.fromkeys(held_out, ".2f"),
        caption="unscaled runs over 100 steps, accuracy",
    )
)

# %% tags=["hide-input"] caption="Held-out accuracy of the eight runs at each version's best learning rate, measured every 25 steps, one colour per run (the same colour in both panels). Top: with the division by √dₖ, every run jumps from chance to 1.00 by step 25 and stays there, so the eight lines lie almost on top of each other. Bottom: without it, six runs reach 1.00, between step 25 and step 225, two of them, runs 1 and 5, only after a long plateau, at 0.35 or less until step 200 (run 1) and step 175 (run 5), as printed above; run 0 levels off near 0.64 and run 4 stays at chance." alt="Two line plots stacked, held-out accuracy from 0 to 1 against training step from 0 to 300, a grey dotted line at chance (0.125), and a legend of eight colours for runs 0 to 7 below them. Top, scaled, learning rate 0.001: eight lines that all jump from about 0.12 to 1.0 at step 25 and stay there. Bottom, unscaled, learning rate 0.003: six lines reach 1.0, at steps 25, 50, 75 and 150, and two at step 225 after creeping along between 0.1 and 0.35; one line levels off near 0.64 from step 50 on; one stays near chance throughout."
fig, axes = plt.subplots(2, 1, figsize=(6.4, 6.6), sharex=True, sharey=True)
for ax, scale in zip(axes, (True, False)):
    for run in range(8):
        steps, accs = zip(*curves[scale, best[scale], run])
        ax.plot(steps, accs, marker=".", alpha=0.8, label=f"run {run}")
    ax.axhline(1 / 8, color="gray", ls=":")
    title = r"scaled by $1/\sqrt{d_k}$" if scale else "unscaled"
    ax.set_title(f"{title}, learning rate {best[scale]}")
    ax.set_ylabel("held-out accuracy", fontsize=11)
    ax.set_ylim(0, 1.05)
    ax.tick_params(labelsize=11)
axes[1].set_xlabel("training step", fontsize=11)
for ax in axes:
    ax.text(300, 1 / 8 + 0.03, "chance", color="gray", ha="right", fontsize=11)
handles, labels = axes[0].get_legend_handles_labels()
fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=11)
fig.tight_layout(rect=(0, 0.09, 1, 1))
plt.show()

# %% [markdown]
# With scaling, the two lower rates give the same result: at $10^{-3}$ and $3\cdot10^{-3}$
# every run reaches 95%; at the best rate all eight runs do so by step 25, the first
# measurement after the start (Fig. 4.5), and after 300 steps each run's query puts on average 1.00
# of its weight on position 0. At $10^{-2}$, too high a rate for the scaled version, two scaled runs
# fail. Without scaling the rate matters a lot: 2, 6
# and 5 of the eight runs reach 95% at the three rates. Even at its best rate in this grid the unscaled
# model is slower and less reliable: six runs get there, between step 25 and step 225, runs 1
# and 5 only after a long plateau; run 0 levels off at 0.64, and run 4 never leaves chance,
# its query putting 0.00 of its weight on position 0. By the step-size argument the unscaled
# model might want rates about 11 times lower than the scaled one; instead it does worst at
# the lowest rate of the grid (2 of 8 runs at $10^{-3}$, against 6 at $3\cdot10^{-3}$): within
# this grid a smaller step did not help it (the grid stops at $10^{-3}$, so rates near the
# $10^{-4}$ that the argument points to were not tried).
#
# Before training, the unscaled softmax already puts most of its weight on one position (0.74
# to 0.89 on average, against 0.11 to 0.22 with scaling), a position chosen by the random
# initial weights and the tokens, not by the task, and for 12% to 45% of the held-out
# sequences its scores get a gradient below 0.01 (with scaling, 0%). Saturation does not
# decide a run on its own, though. Run 4, the most saturated (45%), never learns; but run 0
# (24%) stalls while runs 1 and 5 (28% and 25%) learn, and the two least saturated runs, 6 and
# 7 (12% each), learn at step 25 and step 150. One reading of the plateaus: while the
# gradient is switched off for many sequences, the query learns mostly from the others, and
# turning it from the position it started on to position 0 can take many steps, or, as in run
# 4, more than we gave it. These are eight runs from one set of seeds: the scaled version
# varies only at the highest rate (6/8 at $10^{-2}$), the unscaled one at every rate; set
# `FIRST_SEED` to another number for eight new runs.
#
# Dividing by $\sqrt{d_k}$ keeps the spread of the scores independent of $d_k$. It does not
# change *which* key wins, only how sharply, and a trained model can still learn sharp attention
# by making its queries and keys longer (exercise 1).
#
# ## Attention as one function
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
print("the same as by hand:", torch.equal(out, output))

# %% [markdown]
# The course's package keeps the same computation as `scaled_dot_product_attention` in
# `transformer_course.attention`. It is the attention inside the course's `MultiHeadAttention`
# (chapter 05), and so inside the Transformer of chapters 07 to 09 and the BERT of chapter 12;
# the GPT of chapter 10 calls PyTorch's fused version, which we meet below. It adds what a
# library needs around those lines: checks of the input shapes, an optional boolean mask (next
# section), and dropout on the weights, a regulariser (BERT and the original GPT train with it, at a rate of 0.1): with
# `dropout_p=p` each weight is set to zero with probability $p$ and the others are divided by
# $1 - p$, so that on average nothing changes, a query cannot come to rely on one key alone,
# and, while training, a row of weights no longer sums to exactly one (chapter 05's
# `MultiHeadAttention` switches it off for evaluation). Without dropout, on a batch of heads it
# computes exactly the same numbers as our three lines (its source is folded below):

# %%
# (batch, heads, length, d_k)
qb, kb, vb = (torch.randn(2, 4, 5, 8, generator=g) for _ in range(3))
minimal, _ = attention(qb, kb, vb)
package, _ = scaled_dot_product_attention(qb, kb, vb)
print("package == minimal, bit for bit:", torch.equal(package, minimal))
torch.manual_seed(0)  # dropout draws from PyTorch's global generator
_, w_drop = scaled_dot_product_attention(qb, kb, vb, dropout_p=0.5)
print("with dropout 0.5, row sums:", w_drop[0, 0].sum(-1).numpy().round(2))

# %%
show_source(scaled_dot_product_attention)

# %% [markdown]
# PyTorch ships the same operation as `torch.nn.functional.scaled_dot_product_attention`. It
# picks one of several implementations for the shapes and the device it is given: *fused*
# kernels such as FlashAttention, which do all four steps in a single kernel and return only
# the output, without storing the weight matrix (the last section measures what that saves),
# or, when none of them applies, a plain path that computes the three lines as written (on a
# CPU, for instance, when the values are not as wide as the queries, as here). A fused kernel
# may add up the same products in a different order, so its result can differ from ours in
# the last bits of a float32 (which carries about seven significant digits); the last section
# asks for FlashAttention by name and compares it with the three lines. Here we check that
# the largest difference is below $10^{-6}$:

# %%
q = torch.randn(2, 4, 6, 16, generator=g)  # (batch, heads, queries, d_k)
k = torch.randn(2, 4, 9, 16, generator=g)  # (batch, heads, keys, d_k)
v = torch.randn(2, 4, 9, 8, generator=g)  # (batch, heads, keys, d_v)
ours, _ = scaled_dot_product_attention(q, k, v)
fused = F.scaled_dot_product_attention(q, k, v)
print("output shape:", tuple(ours.shape))
diff = (ours - fused).abs().max().item()  # the largest difference
print("equal to PyTorch's to 1e-6:", diff < 1e-6)

# %% [markdown]
# ## Masks: which keys a query may see
#
# Often some keys must be invisible: padding tokens that only fill a batch to equal length, or,
# in a language model, the *future* words a query is not allowed to peek at. A **mask** says, for
# every (query, key) pair, whether the query may attend. In this course a mask is a **boolean**
# tensor that broadcasts to the scores `(..., L_q, L_k)`, and **`True` means "may attend"**, as
# in the boolean `attn_mask` of `F.scaled_dot_product_attention`. Our function needs one more
# line to apply it: blocked scores are replaced by $-\infty$ before the softmax, so their
# weight is $e^{-\infty} = 0$ exactly, and the weights of the keys a query may see renormalise
# to sum to one. (The package's `scaled_dot_product_attention` uses the most negative finite float instead of
# $-\infty$: it gives the same weights here, and avoids a `nan` when a query may see no key at
# all; chapter 08.) A causal mask on four tokens, where each token may see itself and the tokens
# before it:


# %%
def masked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask, float("-inf"))  # blocked: weight 0
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


x4 = torch.randn(4, 8, generator=g)
causal = torch.ones(4, 4, dtype=torch.bool).tril()  # query i may see keys 0..i
_, w_causal = masked_attention(x4, x4, x4, causal)
print(causal)
print(w_causal)
_, w_package = scaled_dot_product_attention(x4, x4, x4, causal)
print("the package gives the same weights:", torch.equal(w_package, w_causal))
above = torch.equal(w_causal.triu(diagonal=1), torch.zeros(4, 4))
rows = torch.allclose(w_causal.sum(-1), torch.ones(4))
print("nothing above the diagonal:", above, "| every row sums to 1:", rows)

# %% [markdown]
# With a mask, too, the package and PyTorch's function agree (a random mask here, the same
# for all heads, in which every query keeps at least one key):

# %%
mask = torch.rand(2, 1, 6, 9, generator=g) < 0.7  # True = may attend
mask[..., 0] = True  # every query keeps key 0
ours_masked, w_masked = scaled_dot_product_attention(q, k, v, mask)
fused_masked = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
diff = (ours_masked - fused_masked).abs().max().item()
print("equal to PyTorch's to 1e-6:", diff < 1e-6)
print("weight on blocked keys:", w_masked.masked_select(~mask).abs().max())

# %% [markdown]
# Masks have a chapter of their own, chapter 08: how to build padding and causal masks for a
# batch, and how other libraries write masks (some with `True` meaning *blocked*).
#
# ## Looking at the weights
#
# Attention weights form a matrix with one row per query and one column per key, so a heatmap
# with the tokens on both axes shows who looks at whom. Without learned projections a sentence's
# self-attention is just similarity: take $Q = K = V = X$, where $X$ holds one hand-made
# feature vector per word (features: *determiner*, *noun*, *animal*, *verb*, *preposition*),
# multiplied by 2.5. That factor multiplies every score by $2.5^2 = 6.25$, which sharpens the
# softmax, just as a smaller divisor than $\sqrt{d_k}$ would.

# %%
tokens = ["the", "cat", "sat", "on", "the", "mat"]
features = {  # determiner, noun, animal, verb, preposition
    "the": [1.0, 0.0, 0.0, 0.0, 0.0],
    "cat": [0.0, 1.0, 1.0, 0.0, 0.0],
    "sat": [0.0, 0.0, 0.3, 1.0, 0.0],
    "on": [0.0, 0.0, 0.0, 0.3, 1.0],
    "mat": [0.0, 1.0, 0.0, 0.0, 0.0],
}
X = 2.5 * torch.tensor([features[t] for t in tokens])
_, w_sent = scaled_dot_product_attention(X, X, X)
mask6 = torch.ones(6, 6, dtype=torch.bool).tril()
_, w_sent_causal = scaled_dot_product_attention(X, X, X, mask6)

# %% tags=["hide-input"] caption="Self-attention weights of “the cat sat on the mat” with Q = K = V = X, on one colour scale from 0 to 1. Top: without a mask, each “the” gives the two “the”s 0.45 each, and “mat” gives “cat” exactly as much weight as itself (0.45 each). Bottom: the causal mask removes everything above the diagonal, and each row renormalises over its own word and the words before it." alt="Two 6 by 6 heatmaps stacked, rows are the query words and columns the key words of the cat sat on the mat, each cell annotated with its weight. Top: rows the have 0.45 on both columns the; cat has 0.93 on itself; sat 0.73 on itself; on 0.77 on itself; mat 0.45 on cat and 0.45 on mat; all other cells 0.08 or less. Bottom: all cells above the diagonal are 0; the first the has 1.00 on itself, cat 1.00 on itself, sat 0.86, on 0.83, the second the 0.46 on each the, mat 0.45 on cat and on itself."
fig, axes = plt.subplots(2, 1, figsize=(4.6, 7.6))
for ax, w_plot, title in (
    (axes[0], w_sent, "self-attention, Q = K = V = X"),
    (axes[1], w_sent_causal, "with a causal mask"),
):
    plot_attention(w_plot, tokens, ax=ax, annotate=True, title=title, vmax=1)
    for text in ax.texts:
        text.set_fontsize(11)
    ax.tick_params(labelsize=11)
fig.tight_layout()
plt.show()

# %% [markdown]
# Identical words ask identical questions, so the two "the"s have identical rows (Fig. 4.6, top
# panel), each with 0.45 on both "the"s. Every word gives itself at least as much weight as it gives
# any other word, but "mat" gives "cat" exactly as much as itself. The causal mask (bottom panel)
# removes the weight on later words, and the rest renormalises: the first "the" may see only
# itself, so it puts 1.00 on itself, and "sat" and "on" rise from 0.73 and 0.77 on
# themselves to 0.86 and 0.83. The second "the" gave the later word, "mat", only 0.03, and keeps 0.46 on
# each "the"; "mat", the last word, loses nothing and keeps 0.45 on "cat" and on itself. The
# scores show why "mat" likes "cat" as much as itself:

# %%
S = X @ X.T  # the scores before the division by sqrt(5)
cos = F.cosine_similarity(X[5], X[1], dim=0)
print(f"cat's query: cat's key {S[1, 1]:.2f}, mat's key {S[1, 5]:.2f}")
print(f"mat's query: cat's key {S[5, 1]:.2f}, mat's key {S[5, 5]:.2f}")
print(f"cosine of cat and mat: {cos:.2f}")

# %% [markdown]
# The query of "mat" asks for one feature, *noun*. The key of "cat" has it, and its second
# feature, *animal*, costs nothing, because the query's entry for it is 0: the two vectors
# have a cosine of only 0.71, yet the query of "mat" scores the key of "cat" exactly as high as its own
# (6.25 each). A dot product is not a cosine (chapter 02): it rewards agreement but does not
# penalise what the key has on top, and it grows with the length of the vectors (exercise 2
# asks what that allows).
#
# ## Why separate queries and keys?
#
# With $Q = K = X$ the scores are symmetric: the score of word $i$ for word $j$ equals that of
# $j$ for $i$. A single learned projection for both, $q = k = xW$, keeps that symmetry, and a
# bias towards oneself: a token's score with itself is $|q_i|^2$, and by the
# Cauchy–Schwarz inequality $q_i \cdot q_j \le |q_i||q_j| \le |q_i|^2$ whenever $|q_i| \ge |q_j|$.
# So the token with the longest query attends to itself at least as much as to any other token.
# Its weight on the previous token is then at most its weight on itself, and the two add up to
# at most 1, so it is at most $\tfrac12$: a shared projection can never put more than half of
# that token's weight on the previous token.
# Many useful relations are one-way instead: a verb may need its subject while the subject need
# not look back at the verb, and trained language models have "previous-token" heads in which
# every token looks at the one before it (Olsson et al., 2022, *In-context Learning and
# Induction Heads*).
#
# An experiment: six tokens, each a random 16-dimensional vector (think of token plus position),
# and the target pattern "look at the previous token", with the first token looking at the last
# so that no token looks at itself. We fit the projections to that pattern directly (Adam, 300
# steps, cross-entropy between each row of weights and its target), once with one matrix shared
# by queries and keys and once with two.

# %%
tokens6 = torch.randn(6, 16, generator=g)
target = torch.tensor([5, 0, 1, 2, 3, 4])  # token i looks at token i - 1
fitted = {}
for shared in (True, False):
    torch.manual_seed(0)
    W_q = nn.Linear(16, 16, bias=False)
    W_k = W_q if shared else nn.Linear(16, 16, bias=False)
    params = [*W_q.parameters()] + ([] if shared else [*W_k.parameters()])
    opt = torch.optim.Adam(params, lr=0.05)
    for _ in range(300):
        s = W_q(tokens6) @ W_k(tokens6).T / math.sqrt(16)
        loss = F.cross_entropy(s, target)  # each row against its target
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        s = W_q(tokens6) @ W_k(tokens6).T / math.sqrt(16)
    fitted[shared] = torch.softmax(s, dim=-1)
    on_target = fitted[shared][torch.arange(6), target]
    name = "one shared matrix" if shared else "separate W_q, W_k"
    print(name)
    print("  scores symmetric:", torch.allclose(s, s.T, atol=1e-5))
    print("  weight on the previous token:")
    print(" ", on_target.numpy().round(2))

# %% tags=["remove-cell"]
# a shared matrix cannot learn the pattern: the token with the longest
# query puts at most half of its weight on the previous token
assert fitted[True][torch.arange(6), target].min() <= 0.5

# %% tags=["hide-input"] caption="The fitted attention patterns, target: every token looks at the previous one (token 0 at token 5). Top: with one matrix for queries and keys, the fit ends symmetric: each token keeps 0.39 for itself and gives 0.22 to each neighbour, the previous and the next alike; the rest, 0.07 or less each, goes to the other three tokens. Bottom: with separate matrices, every token puts all its weight on the previous token." alt="Two 6 by 6 heatmaps stacked, rows are query tokens 0 to 5 and columns key tokens, annotated with weights. Top, shared matrix: the diagonal is 0.39 everywhere, the cells just left and just right of the diagonal (wrapping around) are 0.22, the rest 0.07 or less. Bottom, separate matrices: a single 1.00 per row, just left of the diagonal, with token 0 putting 1.00 on token 5, and zeros elsewhere."
fig, axes = plt.subplots(2, 1, figsize=(4.6, 7.6))
names = [f"token {i}" for i in range(6)]
for ax, shared, title in (
    (axes[0], True, "one matrix for queries and keys"),
    (axes[1], False, "separate $W_q$ and $W_k$"),
):
    plot_attention(fitted[shared], names, ax=ax, annotate=True, vmax=1)
    for text in ax.texts:
        text.set_fontsize(11)
    ax.tick_params(labelsize=11)
    ax.set_title(title)
fig.tight_layout()
plt.show()

# %% [markdown]
# With one shared matrix the fit ends in a symmetric pattern (Fig. 4.7): each token keeps 0.39
# of its weight for itself and gives 0.22 to each neighbour, the previous and the next alike.
# With separate $W_q$ and $W_k$ the score matrix $XW_qW_k^{\mathsf T}X^{\mathsf T}$ need not be
# symmetric, and the fit puts all the weight on the previous token. This is a good reason to
# learn the two projections separately, as the Transformer does, so that the query and the key
# of one token are different vectors. The Reformer (Kitaev
# et al., 2020) uses one projection for both, so that a query and its key fall into the same
# hash bucket (it groups similar vectors by hashing them, and attends only within a group, to
# save memory), and has to stop each token from attending to itself: with shared queries and
# keys (it normalises the keys), a token's score with itself is almost always its largest.
# The Reformer reports that in its enwik8 and imagenet64 experiments shared queries and keys
# did not perform worse than separate ones (Kitaev et al., 2020, Fig. 3). But a single head
# with one unnormalised shared projection, as in our experiment, has symmetric scores, and
# cannot express a one-way pattern like this one.
#
# ## The price: $O(n^2)$
#
# Every query is compared with every key, so a sequence of $n$ tokens needs an $n \times n$ score
# matrix, per head and per layer: twice the text, four times the work and, if the matrix is
# stored, four times the memory. We measure both, for one attention step of one head, with
# $d_k = 64$, and growing $n$, as the three
# lines of `attention` and as PyTorch's fused function, for which we ask for its
# FlashAttention kernel by name (more about it below).
#
# First the memory, counted by hand. The three lines create three $n \times n$ float32
# matrices of $4n^2$ bytes each: the scores, their scaled copy and the weights. The product
# $QK^{\mathsf T}$ is freed once its scaled copy exists, but the scaled copy (the variable
# `scores`) lives until the function returns, so the weights and then the output
# (an $n \times d_v$ matrix with $d_v = 64$) are created while it is still held. The peak should be two
# $n \times n$ matrices plus the output; at 4096 tokens:

# %%
n = 4096
matrix_mib, output_mib = 4 * n * n / 2**20, 4 * n * 64 / 2**20
print(f"one {n} x {n} float32 matrix: {matrix_mib:.0f} MiB")
print(f"the output, {n} x 64: {output_mib:.0f} MiB")
print(f"two matrices plus the output: {2 * matrix_mib + output_mib:.0f} MiB")

# %% [markdown]
# The fused function never creates an $n \times n$ matrix, so it should hold little more than
# its output, 1 MiB. To check both predictions we let PyTorch count: a `TorchDispatchMode` sees
# every operation PyTorch runs inside a `with` block; ours adds up the bytes of each new tensor
# an operation returns, subtracts them when the tensor is freed, and keeps the largest total.
# (Scratch space that a kernel allocates inside one operation, and frees before it returns, is
# never handed back to Python, so the hook does not see it.)
# Its code, a small PyTorch dispatch hook, is folded below.


# %% tags=["hide-input"]
# PeakMemory, which measures the most memory a computation holds at once
import weakref

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class PeakMemory(TorchDispatchMode):
    """The most bytes held at once by tensors created inside the block.

    Built on PyTorch's private modules ``torch.utils._python_dispatch`` and
    ``torch.utils._pytree``, which may change between PyTorch versions.
    """

    def __enter__(self) -> "PeakMemory":
        self.live = self.peak = 0
        return super().__enter__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        inputs = [t for t in tree_leaves((args, kwargs)) if torch.is_tensor(t)]
        known = {t.untyped_storage().data_ptr() for t in inputs}
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            # a view shares its input's memory; only new memory counts
            if (
                torch.is_tensor(t)
                and t.untyped_storage().data_ptr() not in known
            ):
                storage = t.untyped_storage()
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
                weakref.finalize(storage, self.free, storage.nbytes())
        return out

    def free(self, nbytes: int) -> None:
        self.live -= nbytes


# %%
def three_lines(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return torch.softmax(scores, dim=-1) @ v


def fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    # ask for PyTorch's FlashAttention kernel by name
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v)


def peak_memory(step, n: int, d: int = 64) -> int:
    q, k, v = (torch.randn(1, 1, n, d, generator=g) for _ in range(3))
    with PeakMemory() as memory:
        step(q, k, v)
    return memory.peak


lengths = [128, 256, 512, 1024, 2048, 4096]
steps = {"naive": three_lines, "fused": fused}
memory = {
    (key, n): peak_memory(step, n)
    for key, step in steps.items()
    for n in lengths
}
display(
    Table(
        ["n", "three lines MiB", "/ 4n²", "fused MiB"],
        [
            (
                n,
                memory["naive", n] / 2**20,
                memory["naive", n] / (4 * n * n),
                memory["fused", n] / 2**20,
            )
            for n in lengths
        ],
        formats={"three lines MiB": ".2f", "/ 4n²": ".2f", "fused MiB": ".3f"},
        caption="peak memory",
    )
)

# FlashAttention computes the same attention as the three lines
check = torch.Generator().manual_seed(0)
qc, kc, vc = (torch.randn(1, 1, 1024, 64, generator=check) for _ in range(3))
gap = (three_lines(qc, kc, vc) - fused(qc, kc, vc)).abs().max().item()
print(f"FlashAttention - three lines, largest difference: {gap:.1e}")

# %% tags=["remove-cell"]
assert gap < 1e-5

# %% [markdown]
# The measurement agrees with the count: the column $/\,4n^2$ counts the $n \times n$
# float32 matrices held and tends to 2, and at 4096 tokens the three lines hold 129.00 MiB.
# Doubling $n$ multiplies this memory by about 4. The fused function holds its output and one
# number per query, 0.016 MiB (16 KiB) more than the output at 4096 tokens, so its memory
# doubles with $n$. The last line checks that FlashAttention computes the same attention as the
# three lines, up to the last bits of a float32.
#
# Now the time. Times depend on the machine and vary from run to run, so we run each function
# ten times at each length, show the fastest run, and list the lengths at which even the
# slowest of the fused function's ten runs beat the fastest of the three lines'. A second
# table times $QK^{\mathsf T}$ alone at the two longest lengths, once with a fresh result on
# every call, as in the first table, and once written into a matrix allocated beforehand
# (`torch.matmul(q, kᵀ, out=buffer)`).


# %% tags=["nbval-ignore-output"]
def first_product(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    return q @ k.transpose(-2, -1)  # only the first line's product


timed = {"product": first_product, **steps}


def timings(n: int, d: int = 64, repeats: int = 10) -> dict:
    """The times of ``repeats`` runs of each step, in seconds, sorted."""
    q, k, v = (torch.randn(1, 1, n, d, generator=g) for _ in range(3))
    times = {key: [] for key in timed}
    for _ in range(repeats):  # the functions take turns
        for key, step in timed.items():
            t0 = time.perf_counter()
            step(q, k, v)
            times[key].append(time.perf_counter() - t0)
    return {key: sorted(t) for key, t in times.items()}


runs = {(key, n): t for n in lengths for key, t in timings(n).items()}
cost = {key: t[0] for key, t in runs.items()}  # the fastest run


def growth(n: int, key: str) -> str:
    """The time at length n divided by the time at half the length."""
    return f"x{cost[key, n] / cost[key, n // 2]:.1f}" if n > 128 else ""


columns = ("naive", "fused", "product")
rows = []
for n in lengths:
    row = [n]
    for key in columns:  # the time in ms, then its growth
        row += [1000 * cost[key, n], growth(n, key)]
    rows.append(row)
display(
    Table(
        [
            "n",
            "three lines ms",
            "growth",
            "fused ms",
            "growth",
            "QKᵀ alone ms",
            "growth",
        ],
        rows,
        formats=dict.fromkeys(
            ["three lines ms", "fused ms", "QKᵀ alone ms"], ".2f"
        ),
    )
)
ratio = cost["naive", 4096] / cost["fused", 4096]
print(f"three lines / fused at n = 4096: {ratio:.1f}")
# where was the fused function's slowest run faster than the three
# lines' fastest?
clear = [n for n in lengths if runs["fused", n][-1] < cost["naive", n]]
print("slowest fused < fastest three lines at")
print("  n =", clear)
# QK^T into a fresh result (as above) against a buffer allocated once
buffer_ms = []
for n in (2048, 4096):
    q, k = (torch.randn(1, 1, n, 64, generator=g) for _ in range(2))
    buffer = torch.empty(1, 1, n, n)
    fresh, reused = [], []
    for _ in range(10):
        t0 = time.perf_counter()
        torch.matmul(q, k.transpose(-2, -1))
        fresh.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        torch.matmul(q, k.transpose(-2, -1), out=buffer)
        reused.append(time.perf_counter() - t0)
    buffer_ms.append((n, 1000 * min(fresh), 1000 * min(reused)))
display(
    Table(
        ["n", "QKᵀ fresh ms", "QKᵀ buffer ms"],
        buffer_ms,
        formats={"QKᵀ fresh ms": ".2f", "QKᵀ buffer ms": ".2f"},
    )
)
# 32 times the tokens take more than 32 times as long
assert cost["naive", 4096] > 32 * cost["naive", 128]

# %% tags=["hide-input"] caption="The cost of one attention step of one head (dₖ = 64), on log-log scales, measured on a CPU. Top: the time of the three lines and of the fused function (times vary by machine and run); for short sequences both grow more slowly than the n² line (fixed costs weigh heavily); in this run, at the longest length the three lines rise well above that line, and the fused function is the faster. Bottom: the peak memory; the three lines approach the 8n² line (two n × n matrices of 32-bit floats) as n grows, 1.25 times it at n = 128, where the other tensors (the output among them) still add a visible share, while the memory of the fused function only doubles when n doubles." alt="Two log-log plots stacked, sequence length 128 to 4096 on the x axis. Top: milliseconds for the three lines (blue) and the fused function (green), both rising steeply from under 0.1 milliseconds, with a dotted n squared reference line through the blue point at 1024; at 4096 the blue point lies well above the dotted line and the green point far below the blue one. Bottom: MiB of peak memory; the blue line lies on a dotted 8 n squared bytes line, rising from about 0.2 to 129 MiB, and the green line rises far less steeply, from about 0.03 to 1 MiB."
fig, axes = plt.subplots(2, 1, figsize=(6.4, 6.4), sharex=True)
ns = torch.tensor(lengths, dtype=torch.float64)
for key, name, colour in (
    ("naive", "three lines", "tab:blue"),
    ("fused", "fused function", "tab:green"),
):
    ms = [1000 * cost[key, n] for n in lengths]
    axes[0].loglog(lengths, ms, "o-", color=colour, label=name)
    mib = [memory[key, n] / 2**20 for n in lengths]
    axes[1].loglog(lengths, mib, "o-", color=colour, label=name)
axes[0].loglog(
    lengths,
    (1000 * cost["naive", 1024] * (ns / 1024) ** 2).tolist(),
    "k:",
    label=r"$\propto n^2$",
)
axes[1].loglog(
    lengths, (8 * ns**2 / 2**20).tolist(), "k:", label=r"$8n^2$ bytes"
)
axes[0].set_title("time of one attention step")
axes[0].set_ylabel("milliseconds")
axes[1].set_title("peak memory of one attention step")
axes[1].set_ylabel("MiB")
for ax in axes:
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    ax.tick_params(labelsize=11)
    ax.legend(fontsize=11)
axes[-1].set_xlabel("sequence length $n$", fontsize=11)
fig.tight_layout()
plt.show()

# %% [markdown]
# The columns *growth* divide each time by the time at half the length, and $n^2$ predicts 4.
# The last two columns time the first line's product, $QK^{\mathsf T}$, on its own. Unlike the
# memory table, these numbers change from machine to machine and from run to run (rerun the
# cell and yours will differ). For short sequences fixed costs (starting the operations,
# allocating their results) weigh heavily, and the time grows more slowly than $n^2$. In the
# run shown here, the last doubling costs the three lines far more than fourfold, while the
# fused function, which does all the arithmetic of the three lines but never writes an
# $n \times n$ matrix, keeps growing about fourfold. What sets the three lines apart is the
# $n \times n$ matrices, 16 MiB each at 2048 tokens and 64 MiB at 4096: memory has to be found
# for each of them on every call, and each is written and read in full. The last table
# separates the first of these costs for $QK^{\mathsf T}$: the gap between a fresh result and
# the buffer allocated beforehand is what obtaining fresh memory costs, at that length, on
# this machine: in the run shown here, nothing to speak of at 2048 and about half of the time
# of a fresh $QK^{\mathsf T}$ at 4096. That cost is not the same from call to call, so the
# fresh product at 4096 need not take the same time in the two tables. Where such a jump
# comes, and how large it is, depends on the machine and on its memory allocator; the memory table does not depend on the machine's
# speed: it follows from the shapes (with this PyTorch version's choice of kernels). In
# Fig. 4.8 the two memory lines show the difference in growth as a difference in slope: on
# log-log scales the three lines' memory rises twice as steeply as the fused function's.
#
# Scale the memory up to a modern context window:

# %%
print("one head's score matrix, float32:")
for n in (4096, 32_768, 131_072):
    print(f"  n = {n:7,d}: {4 * n * n / 2**30:5.2f} GiB")

# %% [markdown]
# At 128k tokens the scores of one head take 64 GiB. The softmax writes its weights as a
# second matrix of the same size (training keeps it for the backward pass), and a layer
# computes all its heads at once, so it holds these matrices for every head. Long-context
# models therefore do not store them. Fused kernels such as FlashAttention (Dao et al., 2022,
# *FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness*) compute the
# softmax block by block and keep only the output and, per query, what the backward pass
# needs: the row's maximum score and its sum of exponentials in the first version,
# their log-sum-exp alone in FlashAttention-2 (Dao, 2023). The fused function above ran
# PyTorch's CPU implementation of that algorithm, which keeps one number per query, the
# log-sum-exp (the 16 KiB above the 1 MiB output); PyTorch has GPU kernels for it too. The
# number of operations is still $O(n^2)$, but the memory of the tensors it keeps drops to
# $O(n)$, as measured above, and the blocks it works on have a fixed size, so its scratch
# space does not grow with $n$ either (Dao et al., 2022; on a CPU it grows with the number of
# threads). In the run shown here it also took
# less time at $n = 4096$ than the three lines (their ratio is printed under the timing
# table).
#
# ## Summary
#
# * Attention compares each query with all keys ($QK^{\mathsf T}$), scales by $1/\sqrt{d_k}$,
#   turns each row into weights with a softmax and averages the values with them. The weights
#   are non-negative and sum to one, so each output lies within the range of the values; the
#   only non-linearity is in choosing the weights.
# * A numerically stable softmax subtracts each row's maximum before exponentiating; written
#   naively, large scores overflow into `nan`.
# * Without the scale, the variance of the scores grows with $d_k$ and the softmax saturates:
#   many queries receive almost no gradient (77% at $d_k = 1024$). Trained at its best
#   learning rate out of three ($10^{-3}$, $3\cdot10^{-3}$, $10^{-2}$), the scaled model learned the first-token task in all
#   eight runs (by step 25 with these seeds); the unscaled one took up to 225 steps, failed in two runs, and
#   depended far more on the learning rate within those three.
# * Masks are boolean, `True` = may attend; blocked keys get weight exactly 0 (chapter 08 has
#   the details).
# * A dot product is not a cosine: it ignores what a key has beyond the query, and grows with
#   length. With one projection for queries and keys the scores are symmetric, and the token
#   with the longest query attends to itself at least as much as to any other token; separate $W_q$ and $W_k$ can learn one-way patterns such as "look at the
#   previous token".
# * The three lines fit in one function; the package's `scaled_dot_product_attention` gives
#   the same numbers bit for bit and adds shape checks, a mask and dropout on the weights;
#   PyTorch's `F.scaled_dot_product_attention` agrees to float32 rounding, on its plain path
#   and with its FlashAttention kernel.
# * The work grows with $n^2$, and so does the memory of the three lines; fused kernels such as
#   FlashAttention avoid storing the score matrix, so their memory grows only with $n$, while
#   the number of operations stays $O(n^2)$.
#
# Next, chapter 05 runs several attentions side by side, each on its own learned projections:
# multi-head attention.
#
# ## Exercises
#
# **1. Temperature.** Divide the scores of the two-word example by a temperature $\tau$ instead
# of $\sqrt{d_k}$. Predict what happens to the weights of word 2 as $\tau \to 0$ and as
# $\tau \to \infty$, then compute them for $\tau \in \{0.01, 1, 100\}$. Starting from $\tau = 1$,
# which temperature does multiplying every query by 3 correspond to?

# %% tags=["solution"]
for tau in (0.01, 1.0, 100.0):
    w_tau = torch.softmax(scores / tau, dim=-1)[1]
    print(f"tau = {tau:6}: word 2's weights [{w_tau[0]:.4f}, {w_tau[1]:.4f}]")

# %% [markdown] tags=["solution"]
# As $\tau \to 0$ the softmax becomes an argmax: all of word 2's weight goes to word 1, the key
# with the larger score. As $\tau \to \infty$ the scores look alike and the weights become
# uniform (0.505 and 0.495 at $\tau = 100$). Multiplying the queries by 3 multiplies every score
# by 3, which is a temperature of $1/3$: sharper weights. The division by $\sqrt{d_k}$ is a
# temperature of $\sqrt{d_k}$, and the factor 2.5 in the sentence example, which multiplies the
# scores by 6.25, divides the temperature by 6.25.

# %% tags=["remove-cell"]
w_cold = torch.softmax(scores / 0.01, dim=-1)[1]
w_hot = torch.softmax(scores / 100.0, dim=-1)[1]
assert torch.allclose(w_cold, torch.tensor([1.0, 0.0]))  # argmax
assert torch.allclose(w_hot, torch.tensor([0.5, 0.5]), atol=0.01)  # uniform
# 3 Q with tau = 1 is the same as Q with tau = 1/3
assert torch.allclose(
    torch.softmax((3 * Q) @ K.T, -1), torch.softmax(Q @ K.T / (1 / 3), -1)
)

# %% [markdown]
# **2. Longer is stronger.** In the sentence example, give "mat" the feature vector
# `[0, 3, 0, 0, 0]` (before the factor 2.5): a word that is *very* much a noun. Predict which
# word "cat" now gives the most weight, and which word "mat" does. Then compute the weights and
# the cosine of "cat" and "mat".

# %% tags=["solution"]
features_long = dict(features, mat=[0.0, 3.0, 0.0, 0.0, 0.0])
X_long = 2.5 * torch.tensor([features_long[t] for t in tokens])
_, w_long = scaled_dot_product_attention(X_long, X_long, X_long)
for i in (1, 5):
    row = ", ".join(f"{t} {p:.2f}" for t, p in zip(tokens, w_long[i]))
    print(f"{tokens[i]}: {row}")
cos_long = F.cosine_similarity(X_long[1], X_long[5], dim=0)
print(f"cosine of cat and mat: {cos_long:.2f}")

# %% [markdown] tags=["solution"]
# "cat" now gives more weight to "mat" than to itself: its score with mat's key is
# $2.5^2 \cdot 3 = 18.75$ against $2.5^2 \cdot 2 = 12.5$ with its own. The cosine of the two
# words is unchanged, 0.71: the direction of "mat" did not change, only its length. A dot product
# grows with the length of the key, so a long key in roughly the right direction beats a short
# key in exactly the right one. "mat" itself has the longest vector, so it attends to itself.
# In a trained model, the projections decide these lengths.

# %% tags=["remove-cell"]
assert w_long[1].argmax() == 5  # cat now looks at mat most
assert w_long[5].argmax() == 5  # mat looks at itself

# %% [markdown]
# **3. Cross-attention with padding.** In *cross-attention* the queries come from one sequence
# and the keys and values from another (a translation's target words attend to its source
# words; chapter 07). Take a batch of two source sequences of lengths 5 and 3, padded to 5, with
# keys and values of size 4, and 2 queries per example. Build a boolean mask from the lengths,
# shaped so that it broadcasts over the queries, and check that (a) the output has shape
# `(2, 2, 4)`, (b) the padded keys get weight 0, (c) the second example's output equals attention
# over its first three keys alone.

# %% tags=["solution"]
lengths_src = torch.tensor([5, 3])
qc = torch.randn(2, 2, 4, generator=g)  # (batch, queries, d_k)
kc, vc = torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 4, generator=g)
# (batch, 1, keys): key j is real if j < length; the same for every query
real = (torch.arange(5) < lengths_src[:, None])[:, None, :]
out_c, w_c = scaled_dot_product_attention(qc, kc, vc, real)
out_short, _ = scaled_dot_product_attention(qc[1], kc[1, :3], vc[1, :3])
print("mask", tuple(real.shape), "with the query axis dropped:")
print(real[:, 0].int())
print("output:", tuple(out_c.shape))
print("weights on the padding of example 2:", w_c[1, :, 3:].abs().max())

# %% [markdown] tags=["solution"]
# `torch.arange(5) < lengths_src[:, None]` compares every key position with its sequence's length
# and gives a `(batch, keys)` table; the extra axis in the middle, `(batch, 1, keys)`, makes it
# broadcast over the queries. Blocked keys get weight exactly 0 and the real ones renormalise,
# so the padding has no effect at all: the output equals attention over the real keys alone.

# %% tags=["remove-cell"]
assert out_c.shape == (2, 2, 4)
assert torch.equal(w_c[1, :, 3:], torch.zeros(2, 2))
assert torch.allclose(out_c[1], out_short, atol=1e-6)

# %% [markdown]
# **4. Additive attention.** Before the dot product, attention scored a query $q$ against a key
# $k$ with a small network (Bahdanau et al., 2014; chapter 01):
# $\text{score}(q, k) = w^{\mathsf T} \tanh(W_1 q + W_2 k)$. Implement it for 4 queries of size 3
# and 6 keys of size 5 (sizes a dot product cannot compare), with a hidden size of 8, and check
# that each row of weights sums to one. How many numbers does it hold in memory for the
# $4 \times 6$ pairs, compared with the dot product's score matrix?

# %% tags=["solution"]
hidden = 8
W_1, W_2 = nn.Linear(3, hidden, bias=False), nn.Linear(5, hidden, bias=False)
w_a = nn.Linear(hidden, 1, bias=False)
qa, ka = torch.randn(4, 3, generator=g), torch.randn(6, 5, generator=g)
# every query with every key: (4, 1, hidden) + (1, 6, hidden) -> (4, 6, hidden)
h = torch.tanh(W_1(qa)[:, None, :] + W_2(ka)[None, :, :])
weights_a = torch.softmax(w_a(h).squeeze(-1), dim=-1)  # (4, 6)
print("hidden activations:", tuple(h.shape), "=", h.numel(), "numbers")
print("weights:", tuple(weights_a.shape), "=", weights_a.numel(), "numbers")

# %% [markdown] tags=["solution"]
# The additive score can compare vectors of different sizes, because each is first projected to
# the hidden size. The price: for every (query, key) pair it computes a hidden vector, a
# `(4, 6, 8)` tensor here, 8 times the size of the score matrix, and a small network runs on each
# pair. The scaled dot product needs queries and keys of one size $d_k$, which the learned
# projections provide, and then computes all scores with a single matrix product.

# %% tags=["remove-cell"]
assert torch.allclose(weights_a.sum(-1), torch.ones(4))

# %% [markdown]
# **5. A smaller initialisation instead of the scale?** The saturation table drew queries and
# keys with entries of variance $\sigma^2 = 1$; PyTorch's default initialisation gives about
# $1/3$. Predict the variance of the unscaled scores at $d_k = 1024$ with $\sigma^2 = 1/3$, and
# which row of the unscaled table they should then resemble. Would such an initialisation make
# the division by $\sqrt{d_k}$ unnecessary? Check with 1000 queries of 16 keys each, measuring
# the variance, the mean largest weight and the share of queries whose gradient is below 0.01
# with `softmax_gradients`, with and without the scale.

# %% tags=["solution"]
gen = torch.Generator().manual_seed(5)
d = 1024
q5 = torch.randn(1000, 1, d, generator=gen) * math.sqrt(1 / 3)
k5 = torch.randn(1000, 16, d, generator=gen) * math.sqrt(1 / 3)
raw5 = (q5 * k5).sum(-1)  # (1000 queries, 16 keys)
for name, s5 in (("unscaled", raw5), ("scaled", raw5 / math.sqrt(d))):
    w5, grad5 = softmax_gradients(s5, torch.randn(1000, 16, generator=gen))
    print(
        f"{name:<8} variance {s5.var():7.2f}, largest weight"
        f" {w5.max(-1).values.mean():.2f}, gradient < 0.01"
        f" {(grad5 < 0.01).float().mean():4.0%}"
    )

# %% [markdown] tags=["solution"]
# The variance of $q \cdot k$ is $d_k\sigma^4 = 1024/9 \approx 114$ (measured: 115.26), close to
# the unscaled row $d_k = 128$ of the saturation table (128.98), and the softmax is about as
# saturated as there: a largest weight of 0.89 on average, and 41% of the queries with a
# gradient below 0.01 (44% in that row). Dividing $\sigma^2$ by 3 divides the variance by 9,
# the same as a $d_k$ nine times smaller: a smaller initialisation only moves the problem to
# larger $d_k$, and training changes $\sigma^2$ anyway. With the scale the variance is
# $\sigma^4 = 1/9$ at every $d_k$, and no query is left without a gradient. Small scores err
# the other way, though: the largest weight is 0.11 on average, not far above the uniform
# $1/16 \approx 0.06$, so every query gets a gradient but attends to nothing in particular
# yet; training has to lengthen its queries and keys, which lowers the temperature
# (exercise 1), to sharpen the weights.
