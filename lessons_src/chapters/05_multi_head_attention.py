# %% [markdown]
# # 05 — Multi-head attention
#
# One attention computes, for every query, *one* weighted average of the values. But a word
# often needs several things from its context at once: a verb its subject *and* its object, a
# pronoun the noun it stands for *and* its neighbours. A single weighted average has to serve all
# of them. **Multi-head attention** runs $h$ attentions side by side, each on its own learned
# projection of the input, and combines their results:
#
# $$
# \begin{gathered}
# Q_i = QW_i^Q,\;\; K_i = KW_i^K,\;\; V_i = VW_i^V \\
# \text{head}_i = \operatorname{Attention}(Q_i,\, K_i,\, V_i) \\
# \operatorname{MultiHead} = [\text{head}_1, \dots, \text{head}_h]\,W^O
# \end{gathered}
# $$ (eq-05-1)
#
# where $[\dots]$ concatenates the heads' outputs side by side.
# In self-attention $Q$, $K$ and $V$ are all the input $X$ (one row per token). Each head works on
# $d_\text{head} = d_\text{model}/h$ features, so its projections $W_i^Q, W_i^K, W_i^V$ are
# $d_\text{model} \times d_\text{head}$ and $W^O$ is $h\,d_\text{head} \times d_\text{model}$.
#
# This chapter follows the shapes through every step, builds the module in fifteen lines, tests
# with an experiment what several heads learn that one head does not, counts what more heads
# cost, checks the
# package's `MultiHeadAttention` against PyTorch's, and then looks inside a trained model, where
# individual heads turn out to do recognisable jobs, and asks how much those jobs matter.

# %%
import math
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from IPython.display import display
from torch import nn

from transformer_course.attention import (
    MultiHeadAttention,
    scaled_dot_product_attention,
)
from transformer_course.diagrams import multi_head
from transformer_course.plotting import plot_attention, plot_attention_grid
from transformer_course.pretrained import load_minilm
from transformer_course.utils import (
    Table,
    count_parameters,
    set_seed,
    show_source,
)

# %%
# the same random numbers on every run (g: a seeded torch.Generator)
g = set_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)  # 4 decimals

# %% tags=["remove-cell"]
import warnings

# tqdm's notice when transformers is imported without ipywidgets
warnings.filterwarnings("ignore", message="IProgress not found")

# %% [markdown]
# ## The steps, with their shapes
#
# The picture first (Fig. 5.1). Multi-head attention is four learned matrices ($W^Q$, $W^K$, $W^V$,
# $W^O$, each $d_\text{model} \times d_\text{model}$) around chapter 04's attention, and two
# reshapes: one that deals the features out to the heads and one that puts them back side by side.
# Drawn with the sizes of the worked example below (a batch of one sentence of 3 tokens,
# $d_\text{model} = 8$, 2 heads; $d_\text{head}$ is what chapter 04 called $d_k$):

# %% tags=["hide-input"] caption="Multi-head attention with $d_\\text{model} = 8$ and 2 heads: the projected features 0–3 go to head 0 and 4–7 to head 1, each head attends on its own, the heads' outputs are put side by side again and $W^O$ maps them back to $d_\\text{model}$. The shapes on the right follow one batch of 3 tokens." alt="A top-to-bottom flow chart. Input x of shape (1, 3, 8) feeds three boxes W^Q, W^K, W^V. Each has its own arrow into a box 'split the features' holding a strip of 8 feature cells: features 0 to 3 in red, 4 to 7 in green; shape (1, 2, 3, 4), d_head = 8/2 = 4. A red box 'head 0' and a green box 'head 1' compute softmax(Q_i K_i^T / sqrt(d_head)) V_i. Both feed 'concatenate', again a red and a green block of 4 features, shape (1, 3, 8), then W^O with output shape (1, 3, 8)."
multi_head(batch=1, length=3, d_model=8, num_heads=2)
plt.show()

# %% [markdown]
# Chapter 04 showed why queries and keys need separate learned matrices: with one shared matrix
# the scores are symmetric, and a token cannot look one way without being looked at the same way.
# Multi-head attention gives every head its own $W_i^Q$, $W_i^K$ and $W_i^V$ (chapter 04 wrote
# $W_q$, $W_k$, $W_v$ for one head), so every head asks its own question.
#
# Now every step by hand, on the example of Fig. 5.1. We take the four projection matrices
# from the package's module (randomly initialised) and check the result against the module's.

# %%
batch, length, d_model, num_heads = 1, 3, 8, 2
d_head = d_model // num_heads
mha = MultiHeadAttention(d_model, num_heads).eval()
x = torch.randn(batch, length, d_model, generator=g)
print("x:                     ", tuple(x.shape), "  (batch, length, d_model)")

# 1. project: one d_model x d_model matrix each for queries, keys and values
#    (all heads at once)
q, k, v = mha.W_q(x), mha.W_k(x), mha.W_v(x)
print("1. q = x W_q:          ", tuple(q.shape))

# 2. split: the d_model features become num_heads groups of d_head,
#    and heads move next to batch
q_heads = q.view(batch, length, num_heads, d_head).transpose(1, 2)
k_heads = k.view(batch, length, num_heads, d_head).transpose(1, 2)
v_heads = v.view(batch, length, num_heads, d_head).transpose(1, 2)
print(
    "2. view:               ",
    tuple(q.view(batch, length, num_heads, d_head).shape),
    "  (batch, length, heads, d_head)",
)
print(
    "   transpose(1, 2):    ",
    tuple(q_heads.shape),
    "  (batch, heads, length, d_head)",
)

# 3. attend: scaled dot-product attention in every head at once
#    (batched over batch and heads)
scores = q_heads @ k_heads.transpose(-2, -1) / math.sqrt(d_head)
weights = torch.softmax(scores, dim=-1)
per_head = weights @ v_heads
print(
    "3. scores, weights:    ",
    tuple(scores.shape),
    "  (batch, heads, queries, keys)",
)
print("   per-head output:    ", tuple(per_head.shape))

# 4. concatenate: heads back next to each other along the features
concat = per_head.transpose(1, 2).contiguous().view(batch, length, d_model)
print("4. concat:             ", tuple(concat.shape))

# 5. output projection: mixes the heads' results
out = mha.W_o(concat)
print("5. out = concat W_o:   ", tuple(out.shape))

out_pkg, weights_pkg = mha(x)
print("by hand == package:", torch.allclose(out, out_pkg, atol=1e-6))

# %% [markdown]
# Two things to read off the shapes. Input and output have the same shape
# `(batch, length, d_model)`, so attention layers can be stacked. And the attention weights are
# `(batch, heads, queries, keys)`: every head has its own `queries × keys` matrix.
#
# The split is only a reshape: head 0 owns features 0–3 of the projected vectors, head 1 owns
# features 4–7. So "one big projection, then split" is the same as giving every head its own
# $d_\text{model} \times d_\text{head}$ projection. `nn.Linear` stores its matrix as
# `(out_features, in_features)` and computes $x\,W^\top + b$, so the formula's $W_i^Q$ is the
# **transpose** of the block of rows `W_q.weight[i * d_head : (i + 1) * d_head]`, plus the matching entries
# of the bias (the formula leaves biases out). Computing head 1 on its own from its own rows gives
# exactly the same result:

# %%
rows = slice(1 * d_head, 2 * d_head)  # head 1
q1 = x @ mha.W_q.weight[rows].T + mha.W_q.bias[rows]
k1 = x @ mha.W_k.weight[rows].T + mha.W_k.bias[rows]
v1 = x @ mha.W_v.weight[rows].T + mha.W_v.bias[rows]
head1_out, head1_w = scaled_dot_product_attention(q1, k1, v1)
print(
    "head 1 alone:", tuple(head1_out.shape), " weights:\n", head1_w[0].detach()
)
print(
    "same as head 1 inside the module:",
    torch.allclose(head1_out, per_head[:, 1], atol=1e-6),
)

# %% [markdown]
# $W^O$ is the last piece. After the concatenation, features 0–3 come from head 0 only and
# features 4–7 from head 1 only. $W^O$ mixes them: split its rows into one block per head,
# $W^O_i$ ($d_\text{head} \times d_\text{model}$; in `W_o.weight`, which stores the transpose,
# these are blocks of columns), and the output is the **sum of what each head writes**,
# $\text{head}_1 W^O_1 + \dots + \text{head}_h W^O_h$ (plus the bias), so every output feature
# can draw on every head:

# %%
W_o_blocks = mha.W_o.weight.split(d_head, dim=1)  # h blocks (d_model, d_head)
written = [per_head[:, i] @ W_o_blocks[i].T for i in range(num_heads)]
print(
    "out == head 0's part + head 1's part + bias:",
    torch.allclose(written[0] + written[1] + mha.W_o.bias, out, atol=1e-6),
)

# %% [markdown]
# ## The whole idea in fifteen lines
#
# The five steps, as a module. Compared with chapter 04's function, what is new is the four
# learned projections and the two reshapes. It returns the weights too, so that we can look at
# them:


# %%
class MinimalMultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.h = num_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, L, D = x.shape

        def split(t):  # (B, L, D) -> (B, heads, L, D / heads)
            return t.view(B, L, self.h, D // self.h).transpose(1, 2)

        q, k, v = split(self.W_q(x)), split(self.W_k(x)), split(self.W_v(x))
        out, weights = scaled_dot_product_attention(q, k, v)
        # concatenate the heads, then W_O
        return self.W_o(out.transpose(1, 2).reshape(B, L, D)), weights


minimal = MinimalMultiHeadAttention(d_model, num_heads)
# the same four matrices as the package module above
minimal.load_state_dict(mha.state_dict())
gap = (minimal(x)[0] - mha(x)[0]).abs().max().item()
print("max |minimal - package|:", gap)

# %% [markdown]
# The difference is exactly zero: both compute the same operations in the same order.
#
# ## Why several heads: two lookups at once
#
# Is one head really limited to one thing at a time? An experiment. Sequences of 8 random tokens
# (32 possible ids); from the **last** position the model must report **both** token 0 and token
# 1: chapter 04's `FirstTokenReader`, where the last position's query read the first token, now
# asked for two. The model: token embeddings plus learned position embeddings ($d_\text{model} = 32$), one
# `MinimalMultiHeadAttention` layer, and a *linear* read-out of the last position's output into
# two 32-way predictions. Models with 1, 2 and 4 heads have exactly the same parameters; only the
# number of heads differs. Each trains for 300 steps (Adam, batches of 64); chance is 1/32 = 0.03
# per token. A single run could be luck, so every model is trained from 8 random seeds.

# %%
VOCAB, LENGTH = 32, 8


class Lookups(nn.Module):
    """Embeddings + positions, one multi-head attention, and a linear
    read-out of the first ``n_lookups`` tokens from the last position."""

    def __init__(
        self, num_heads: int, n_lookups: int = 2, d_model: int = 32
    ) -> None:
        super().__init__()
        self.n = n_lookups
        self.tok = nn.Embedding(VOCAB, d_model)
        self.pos = nn.Parameter(torch.randn(LENGTH, d_model))
        self.attn = MinimalMultiHeadAttention(d_model, num_heads)
        self.read = nn.Linear(d_model, n_lookups * VOCAB)

    def forward(
        self, tokens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out, weights = self.attn(self.tok(tokens) + self.pos)
        logits = self.read(out[:, -1]).view(-1, self.n, VOCAB)
        return logits, weights[:, :, -1]  # and the last query's weights


test_tokens = torch.randint(
    0, VOCAB, (2000, LENGTH), generator=torch.Generator().manual_seed(1000)
)


def train_lookups(
    num_heads: int, seed: int, n_lookups: int = 2, d_model: int = 32
) -> tuple[Lookups, torch.Tensor, torch.Tensor]:
    """Train a fresh model for 300 steps; return it, its accuracy on each
    looked-up token of the held-out sequences, and the last query's
    weights there."""
    torch.manual_seed(seed)
    model = Lookups(num_heads, n_lookups, d_model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(300):
        tokens = torch.randint(0, VOCAB, (64, LENGTH), generator=gen)
        logits, _ = model(tokens)
        loss = F.cross_entropy(
            logits.reshape(-1, VOCAB), tokens[:, :n_lookups].reshape(-1)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits, w = model(test_tokens)
    right = logits.argmax(-1) == test_tokens[:, :n_lookups]
    return model, right.float().mean(0), w


heads_tried, seeds = (1, 2, 4), range(8)


def heads_name(h: int) -> str:
    return f"{h} head" + "s" * (h > 1)


n_params = {h: count_parameters(Lookups(h)) for h in heads_tried}
print(
    "parameters:",
    ", ".join(f"{heads_name(h)} {n_params[h]:,}" for h in heads_tried),
)
runs, rows = {}, []
for seed in seeds:
    row = [seed]
    for h in heads_tried:
        runs[h, seed] = train_lookups(h, seed)
        acc = runs[h, seed][1]
        row.append(f"{acc[0]:.2f} / {acc[1]:.2f}")
    rows.append(row)
display(
    Table(
        ["seed", *map(heads_name, heads_tried)],
        rows,
        caption=(
            "accuracy on token 0 / token 1 (chance 0.03), one run per seed"
        ),
    )
)
both = {
    h: sum(bool(runs[h, s][1].min() >= 0.99) for s in seeds)
    for h in heads_tried
}
print(
    "both right (>= 0.99) in:",
    ", ".join(
        f"{heads_name(h)} {both[h]} of {len(seeds)}" for h in heads_tried
    ),
    "runs",
)

# %% tags=["remove-cell"]
# Over these seeds: one head never gets both tokens, two and four heads
# nearly always do.
assert len(set(n_params.values())) == 1
assert all(runs[1, s][1].min() < 0.95 for s in seeds)
assert both[2] >= 0.75 * len(seeds) and both[4] >= 0.75 * len(seeds)

# %% [markdown]
# Where does the last query look? Fig. 5.2 shows, for four of these models, the last position's
# attention weights averaged over the 2000 held-out sequences, one row per head.

# %% tags=["hide-input"] caption="Where the last position looks, averaged over 2000 held-out sequences (one row per head; the last column adds up positions 2 to 7, which hold nothing to fetch; all panels on one colour scale; each title gives the accuracy on tokens 0 / 1). Top two panels: one head, in a run where it split its weight between positions 0 and 1 and in a run where it settled on one position. Bottom two: two and four heads (seed 0); every head puts its weight on one position, and together they cover positions 0 and 1." alt="Four stacked heatmaps, rows are heads and columns are position 0, position 1 and positions 2 to 7 together; colour and the number in each cell are the mean attention weight. One head, seed 0: 0.48 on position 0 and 0.48 on position 1. One head, seed 4: 1.00 on position 0. Two heads, seed 0: head 0 on position 0, head 1 on position 1. Four heads, seed 0: heads 0 and 1 on position 0, heads 2 and 3 on position 1."
blend = next((s for s in seeds if runs[1, s][1].min() > 0.5), None)
single = next((s for s in seeds if runs[1, s][1].min() < 0.2), None)
panels = [(1, s) for s in (blend, single) if s is not None]
panels += [(2, seeds[0]), (4, seeds[0])]
columns = ["pos 0", "pos 1", "pos 2–7"]
fig, axes = plt.subplots(
    len(panels),
    1,
    figsize=(4.4, 0.9 + 0.45 * sum(h for h, _ in panels) + 0.6 * len(panels)),
    gridspec_kw={"height_ratios": [h for h, _ in panels], "hspace": 0.5},
)
for ax, (h, seed) in zip(axes, panels):
    mean_w = runs[h, seed][2].mean(0)  # (heads, positions)
    # positions 2 to 7 hold no token to fetch: their weights added up
    shown = torch.cat([mean_w[:, :2], mean_w[:, 2:].sum(-1, keepdim=True)], 1)
    acc = runs[h, seed][1]
    plot_attention(
        shown,
        keys=columns,
        queries=[f"head {i}" for i in range(h)],
        ax=ax,
        annotate=True,
        colorbar=False,
        vmax=1,
        title=f"{heads_name(h)}, seed {seed}: right "
        f"{acc[0]:.2f} / {acc[1]:.2f}",
    )
    ax.title.set_fontsize(10)
    ax.set_xlabel("")
    ax.set_ylabel("")
    ax.set_xticklabels(columns if ax is axes[-1] else [], rotation=0)
fig.colorbar(
    axes[0].images[0], ax=axes, fraction=0.05, pad=0.04, label="mean weight"
)
plt.show()

# %% [markdown]
# The table and Fig. 5.2 tell one story:
#
# * **In 300 steps, one head never gets both tokens right.** In some runs it settles on one position: that token
#   is right every time and the other is at chance. In the others it splits its weight between
#   positions 0 and 1, and the read-out recovers both tokens, but only partly. The split is not
#   fixed: the softmax of the scores depends on *which* tokens sit at positions 0 and 1, so the
#   blend leans one way or the other with the tokens, and that tilt is what lets a linear read-out
#   untangle part of the mixture. A blend that did not lean could not be untangled at all: with
#   fixed 50/50 weights, tokens $(a, b)$ and $(b, a)$ give exactly the same average (the position
#   embeddings add the same constant to both), so no read-out could tell which token came first,
#   and each token could be right only about half the time. Every split run beats that:

# %%
split_runs = [s for s in seeds if runs[1, s][1].min() > 0.5]
split_acc = torch.stack([runs[1, s][1] for s in split_runs])
print(
    f"1 head, the {len(split_runs)} runs that split their weight: "
    f"each token right {split_acc.min():.2f} to {split_acc.max():.2f}"
)
for seed in split_runs:
    m = runs[1, seed][2].mean(0)[0]  # mean weights of the one head
    print(
        f"  seed {seed}: mean weight on positions 0 / 1:"
        f" {m[0]:.2f} / {m[1]:.2f}"
    )
blend = split_runs[0]  # the first of them, drawn in Fig. 5.2
w_first = runs[1, blend][2][:, 0, 0]  # weight on position 0, one head
by_token = torch.stack(
    [w_first[test_tokens[:, 0] == t].mean() for t in range(VOCAB)]
)
print(
    f"1 head, seed {blend}: mean weight on position 0, by the token "
    f"there: {by_token.min():.2f} to {by_token.max():.2f}"
)

# %% [markdown]
# * **Two heads get both tokens exactly**, in every run: each head reads one position, and the
#   concatenation hands both tokens to the read-out. Same parameters, same training; only the
#   split into heads differs.
# * **Four heads** also get both tokens in every run, with two heads to spare.
#
# Which position does each head favour, and how much of its weight does it put there, in every
# run?

# %%
print("each head: its favoured position, and its mean weight there")
covered = {}
for h in (2, 4):
    covered[h] = 0
    for seed in seeds:
        m = runs[h, seed][2].mean(0)  # (heads, positions)
        fav = m.argmax(-1).tolist()
        top = m.max(-1).values.tolist()
        covered[h] += {0, 1} <= set(fav)
        print(
            f"{heads_name(h)}, seed {seed}: positions",
            " ".join(map(str, fav)),
            " weights",
            " ".join(f"{t:.2f}" for t in top),
        )
print(
    "runs where heads favour both positions 0 and 1:",
    ", ".join(f"{heads_name(h)} {covered[h]} of {len(seeds)}" for h in (2, 4)),
)

# %% [markdown]
# With two heads the runs agree: one head on each position, each with all its weight. With four,
# the spare heads follow no single plan. In three runs (seeds 0, 1 and 7) the heads pair up
# cleanly, two on each position with all their weight, as in Fig. 5.2. In the other five, some
# heads put less than all their weight on their position (as little as 0.64 in seed 3 and 0.51
# in seed 5), and in seeds 4 and 5 three heads favour the same position. What every run has is at least one head that favours each of the two
# positions, and that is all the read-out needs.
#
# What the experiment shows, and what not: in 300 steps with a linear read-out, one head hands
# over one token or a blend of two, while $h$ heads give every query $h$ independent averages
# that a linear map reads exactly. It does not show that one head could *never* carry both: the
# blend leans with the tokens, so it still holds information about both, and longer training or a
# non-linear read-out (a transformer block follows attention with a feed-forward layer, chapter 06)
# might untangle more of it. Several heads make the job easy and fast, not merely possible.
#
# ## What more heads cost
#
# Nothing in parameters: the four projection matrices are $d_\text{model} \times d_\text{model}$
# whatever $h$ is, and so are their $4Ld_\text{model}^2$ multiply-adds. Nothing in the
# multiply-adds of the two attention products either: $QK^\top$ and the weighted sum of the
# values each take $h$ products of $L \times d_\text{head}$ by $d_\text{head} \times L$ (or
# $L \times L$ by $L \times d_\text{head}$), that is $L^2 d_\text{model}$ multiply-adds, as one
# head of full width would. What grows is everything done on the attention weights: every head has
# its own $L \times L$ matrix, so $h$ heads store $h L^2$ weights, and the scaling, any mask and
# the softmax's exponentials run over all $hL^2$ of them. Here with the sizes of BERT-base and
# GPT-2 ($d_\text{model} = 768$) at GPT-2's 1024 tokens, counting multiply-adds (MACs):

# %%
L_long = 1024
rows = []
for h in (1, 2, 4, 12):
    n_p = count_parameters(MinimalMultiHeadAttention(768, h))
    d_h = 768 // h
    proj = 4 * L_long * 768 * 768  # W_q, W_k, W_v, W_o
    macs = 2 * h * L_long * L_long * d_h  # QK^T and weights @ V
    scores_mib = 4 * h * L_long * L_long / 2**20
    rows.append((h, d_h, n_p, proj, macs, scores_mib))
Table(
    [
        "heads",
        "d_head",
        "parameters",
        "W_q,k,v,o MACs",
        "QK^T+AV MACs",
        "weights (fp32) MiB",
    ],
    rows,
    formats={
        "parameters": ",",
        "W_q,k,v,o MACs": ",",
        "QK^T+AV MACs": ",",
        "weights (fp32) MiB": ".0f",
    },
)

# %% [markdown]
# Twelve heads store 48 MiB of weights per layer
# and sequence where one head stored 4 MiB: chapter 04's $O(n^2)$ memory (with $n = L$ tokens), times $h$. Fused attention
# kernels, which the package module can call (below), can avoid storing them at all.
#
# Equal multiply-adds do not mean equal time. Below, the forward pass of the package module for
# one sequence of 1024 tokens, $d_\text{model} = 768$, on a CPU (times vary from machine to
# machine), and the three steps of attention inside it timed one by one: the products $QK^\top$,
# the scaling and softmax of the scores, and the weighted sum of the values, $AV$:


# %% tags=["nbval-ignore-output"]
def best_ms(f, *args) -> float:
    """The fastest of 3 calls f(*args), in milliseconds, after a warm-up."""
    f(*args)
    t_best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        f(*args)
        t_best = min(t_best, time.perf_counter() - t0)
    return 1000 * t_best


def scale_softmax(scores: torch.Tensor, d_h: int) -> torch.Tensor:
    return torch.softmax(scores / math.sqrt(d_h), dim=-1)


seq = torch.randn(1, L_long, 768)
parts = ("QK^T", "scale+softmax", "AV", "whole layer")
ms = {}
for h in (1, 12, 48):
    layer_h, d_h = MultiHeadAttention(768, h).eval(), 768 // h
    with torch.no_grad():
        q, k, v = (
            lin(seq).view(1, L_long, h, d_h).transpose(1, 2)
            for lin in (layer_h.W_q, layer_h.W_k, layer_h.W_v)
        )
        scores_h = q @ k.transpose(-2, -1)
        weights_h = scale_softmax(scores_h, d_h)
        calls = (
            (torch.matmul, q, k.transpose(-2, -1)),
            (scale_softmax, scores_h, d_h),
            (torch.matmul, weights_h, v),
            (layer_h, seq),
        )
        ms[h] = {p: best_ms(*call) for p, call in zip(parts, calls)}
display(
    Table(
        ["heads", "d_head", *parts],
        [(h, 768 // h, *(ms[h][p] for p in parts)) for h in ms],
        formats=dict.fromkeys(parts, ".0f"),
        caption="milliseconds, one sequence of 1024 tokens, d_model = 768",
    )
)
# the last head count, 48: one L x L score matrix per head
assert scores_h.shape == (1, 48, L_long, L_long)

# %% [markdown]
# The whole layer slows down as the heads get narrower, at equal multiply-adds. Of the three
# steps, the scaling and softmax grow the most: they are elementwise work over $hL^2$ weights, $h$
# times as many. $QK^\top$ slows too, by less, although its multiply-adds do not change: 48
# products of width 16 run less efficiently than one of width 768. $AV$ changes least.
#
# Time aside, why not 768 heads of width 1? Each head's score matrix
# $(XW_i^Q)(XW_i^K)^\top$ is a product of two $L \times d_\text{head}$ matrices, so its rank is
# at most $d_\text{head}$: very narrow heads can only form low-rank score patterns, which limits
# which attention patterns they can express (Bhojanapalli et al., 2020, *Low-Rank Bottleneck in
# Multi-head Attention Models*).
#
# **Why $d_\text{head} = d_\text{model}/h$?** It is the choice that keeps the parameters and
# multiply-adds equal to one head's, and it is what the reshape in step 2 needs: the features must deal out into $h$ equal
# groups. With 10 features and 3 heads they cannot:

# %%
try:
    torch.randn(1, 4, 10).view(1, 4, 3, -1)  # (batch, length, heads, ?)
except RuntimeError as err:
    print("RuntimeError:", err)

# %% [markdown]
# So this design (the 2017 paper's, and the package's) needs $d_\text{model}$ divisible by $h$.
# It is a convention, not a law: a model may pick $d_\text{head}$ freely and let $W^Q$ map
# $d_\text{model}$ to $h\,d_\text{head}$ features and $W^O$ map them back. T5 v1.1 small (and
# FLAN-T5 small, fine-tuned from it) has $d_\text{model} = 512$ with 6 heads of 64
# ([its config](https://huggingface.co/google/flan-t5-small/blob/main/config.json)). Hugging Face's
# T5 attention with those sizes:

# %%
from transformers import BertConfig, GPT2Config, T5Config
from transformers.models.t5.modeling_t5 import T5Attention

t5 = T5Attention(T5Config(d_model=512, num_heads=6, d_kv=64))
print("T5, 6 heads of 64: q =", t5.q)
print("                   o =", t5.o)
for name, c in (("BERT-base", BertConfig()), ("GPT-2 small", GPT2Config())):
    print(
        f"{name}: {c.num_attention_heads} heads x "
        f"{c.hidden_size // c.num_attention_heads} = {c.hidden_size}"
    )

# %% [markdown]
# BERT-base and GPT-2 small (the defaults of `transformers`' configs) keep the 2017 base
# model's head width of 64, with 12 heads instead of its 8. Many recent models also let several query heads share one
# key/value head (grouped-query attention, chapter 11).
#
# ## The package module
#
# `MultiHeadAttention` in `transformer_course.attention` does the same five steps (`W_q`/`W_k`/`W_v`,
# `split_heads`, the chapter 04 function, `merge_heads`, `W_o`). Around them it handles masks (the course
# convention, `True` = may attend, broadcast over `(batch, heads, queries, keys)`),
# cross-attention (queries from one sequence, keys and values from another), the key/value cache
# used for fast generation in chapter 10, an optional fused path (`use_sdpa=True`), and attention
# dropout (`dropout=p`: during training only, each attention weight is set to zero with
# probability $p$ and the others are scaled by $1/(1-p)$). Its full source is folded here:

# %% tags=["hide-input"]
show_source(MultiHeadAttention)

# %% [markdown]
# ### Parity with `torch.nn.MultiheadAttention`
#
# PyTorch's module stores the three input projections stacked in one `(3·d_model, d_model)` matrix
# `in_proj_weight`, and the output projection as `out_proj`. Copy our weights there and both modules
# must compute the same function. Two traps: use `batch_first=True` (PyTorch's default is
# `(length, batch, d_model)`), and **invert the masks**, because PyTorch's boolean masks mean
# `True` = *blocked*. By default PyTorch returns the weights averaged over the heads. The two
# modules may add up the same numbers in a different order, so we compare them up to float32
# rounding:


# %%
def to_torch(m: MultiHeadAttention) -> nn.MultiheadAttention:
    """A torch.nn.MultiheadAttention holding exactly the weights of ``m``."""
    ref = nn.MultiheadAttention(m.d_model, m.num_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(
            torch.cat([m.W_q.weight, m.W_k.weight, m.W_v.weight])
        )
        ref.in_proj_bias.copy_(torch.cat([m.W_q.bias, m.W_k.bias, m.W_v.bias]))
        ref.out_proj.weight.copy_(m.W_o.weight)
        ref.out_proj.bias.copy_(m.W_o.bias)
    return ref.eval()


ours = MultiHeadAttention(d_model=32, num_heads=4).eval()
theirs = to_torch(ours)
src = torch.randn(2, 6, 32, generator=g)  # a batch of 2 sequences of 6 tokens
# another sequence, e.g. an encoder's output
memory = torch.randn(2, 9, 32, generator=g)
causal = torch.ones(6, 6, dtype=torch.bool).tril()  # ours: True = may attend
# sequence 2 has 4 padding tokens
real_keys = torch.tensor([[True] * 9, [True] * 5 + [False] * 4])

cases = {
    "self-attention": ((src, src, src), {}, {}),
    "self-attention, causal": (
        (src, src, src),
        {"mask": causal},
        {"attn_mask": ~causal},
    ),
    "cross-attention": ((src, memory, memory), {}, {}),
    "cross-attention, padding": (
        (src, memory, memory),
        {"mask": real_keys[:, None, None, :]},
        {"key_padding_mask": ~real_keys},
    ),
}
rows = []
for name, (args, our_kw, their_kw) in cases.items():
    out_a, w_a = ours(*args, **our_kw)
    out_b, w_b = theirs(*args, **their_kw)  # w_b: averaged over heads
    d_out = (out_a - out_b).abs().max().item()
    d_w = (w_a.mean(dim=1) - w_b).abs().max().item()
    rows.append(
        (
            name,
            "below 1e-6" if d_out < 1e-6 else d_out,
            "below 1e-6" if d_w < 1e-6 else d_w,
        )
    )
Table(["case", "max |out diff|", "max |weight diff|"], rows)

# %% [markdown]
# The fused path gives the same outputs. It calls
# [`torch.nn.functional.scaled_dot_product_attention`](https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html),
# which can dispatch to kernels (FlashAttention, memory-efficient attention) that never store the
# `(batch, heads, queries, keys)` weights, and so does not return them: the module takes this path
# only when the weights are not asked for.

# %%
fused = MultiHeadAttention(d_model=32, num_heads=4, use_sdpa=True).eval()
fused.load_state_dict(ours.state_dict())
out_fused, w_none = fused(src, mask=causal, need_weights=False)
d_fused = (out_fused - ours(src, mask=causal)[0]).abs().max().item()
print(
    "use_sdpa=True vs explicit:",
    "below 1e-6" if d_fused < 1e-6 else d_fused,
    "| weights returned:",
    w_none,
)

# %% [markdown]
# ## Inside a trained model: MiniLM's heads
#
# What do heads do after training? We load
# **all-MiniLM-L6-v2**, the small BERT of chapter 02 (6 layers × 12 heads, $d_\text{model} = 384$,
# so $d_\text{head} = 32$). It starts from a 6-layer version of MiniLM, a small BERT trained to
# imitate a larger model's self-attention (Wang et al., 2020), and was then fine-tuned on about a
# billion sentence pairs to make sentence embeddings
# ([model card](https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2)). Two settings
# matter: `attn_implementation="eager"` makes the model compute attention explicitly (the fused
# path does not return the weights), and `output_attentions=True` makes it return them, one
# `(batch, heads, queries, keys)` tensor per layer.

# %%
tokenizer, model = load_minilm(
    attn_implementation="eager", output_attentions=True
)
sentence = "The cat sat on the mat because the cat was tired."
inputs = tokenizer(sentence, return_tensors="pt")  # a batch of one sentence
with torch.no_grad():
    attentions = model(**inputs).attentions
tokens = tokenizer.convert_ids_to_tokens(inputs["input_ids"][0])
cfg = model.config
n_layers, n_heads = cfg.num_hidden_layers, cfg.num_attention_heads
print(f"{n_layers} layers x {n_heads} heads, d_model {cfg.hidden_size}")
print(f"{len(tokens)} tokens:", " ".join(tokens))
print(
    "attentions:",
    len(attentions),
    "tensors of shape",
    tuple(attentions[0].shape),
)

# %% tags=["remove-cell"]
# every row of every head is a softmax: it sums to 1
assert all(
    torch.allclose(a.sum(-1), torch.ones_like(a[..., 0])) for a in attentions
)

# %% [markdown]
# Seventy-two heads of 14 × 14 weights are too many to look at one by one. Measure instead: for
# every layer and head, compute
#
# * **previous token**: the mean weight a token puts on the token just before it;
# * **next token**: the same for the token just after it;
# * **[CLS]**: the mean weight on the first token;
# * **same word**: for the words that occur more than once ("the" three times, "cat" twice), the
#   weight on the *other* occurrences of the same word.

# %%
att = torch.stack(attentions)[:, 0]  # (layers, heads, queries, keys)
n = len(tokens)
i = torch.arange(1, n)
previous = att[:, :, i, i - 1].mean(-1)
following = att[:, :, i - 1, i].mean(-1)
to_cls = att[:, :, :, 0].mean(-1)
words = [t.lower() for t in tokens]


def same_word_at(a: int, b: int) -> bool:
    """Whether positions a and b hold the same word (not punctuation)."""
    return a != b and words[a] == words[b] and words[a].isalpha()


same = torch.tensor([[same_word_at(a, b) for b in range(n)] for a in range(n)])
repeated = same.any(-1)  # queries whose word occurs elsewhere too
same_word = (att * same).sum(-1)[:, :, repeated].mean(-1)
print("repeated words:", [tokens[q] for q in range(n) if repeated[q]])

patterns = {
    "previous token": previous,
    "next token": following,
    "same word": same_word,
    "[CLS]": to_cls,
}
best, rows = {}, []
for name, score in patterns.items():
    layer, head = divmod(score.argmax().item(), n_heads)
    best[name] = (layer, head)
    where = f"layer {layer}, head {head}"
    rows.append((name, where, score[layer, head].item(), score.mean().item()))
display(
    Table(
        ["pattern", "strongest head", "its score", "mean of all 72"],
        rows,
        formats={"its score": ".2f", "mean of all 72": ".2f"},
    )
)
print(
    "heads with more than half their weight on [CLS]:",
    int((to_cls > 0.5).sum()),
    "of 72; more than 0.8:",
    int((to_cls > 0.8).sum()),
)

# %% tags=["remove-cell"]
# the strongest heads stand far out from the average head
for name in ("previous token", "next token", "same word"):
    assert patterns[name][best[name]] > 3 * patterns[name].mean()
assert previous.max() > 0.9

# %% [markdown]
# The four scores of all 72 heads at a glance (Fig. 5.3):

# %% tags=["hide-input"] caption="The four pattern scores for every head of MiniLM on the sentence (rows: layers 0 to 5, columns: heads 0 to 11; one colour scale, 0 to 1). Each of the first three patterns has one or two heads that stand out; weight on [CLS] is common, mostly from layer 1 on." alt="Four heatmaps of 6 rows by 12 columns, stacked in a 2 by 2 grid: previous token, next token, same word and [CLS]. In the first, one bright cell at layer 0, head 2; in the second, a bright cell at layer 1, head 8; in the third, a bright cell at layer 2, head 9; the [CLS] map is medium to bright almost everywhere except in layer 0."
fig, axes = plt.subplots(2, 2, figsize=(6.8, 4.6), sharex=True, sharey=True)
for ax, (name, score) in zip(axes.flat, patterns.items()):
    im = ax.imshow(score, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_title(name, fontsize=11)
    ax.set_xticks(range(0, n_heads, 2))
    ax.set_yticks(range(n_layers))
for ax in axes[1]:
    ax.set_xlabel("head")
for ax in axes[:, 0]:
    ax.set_ylabel("layer")
fig.colorbar(im, ax=axes, fraction=0.03, pad=0.03, label="score")
plt.show()

# %% [markdown]
# Here is the strongest head of each pattern as an attention map (Fig. 5.4): rows are queries (the
# token that is looking), columns are keys (the token looked at), and all four maps share one colour
# scale.

# %% tags=["hide-input"] caption="The strongest head of each pattern in MiniLM, on one colour scale (rows: queries; columns: keys). Top left: the previous-token head, a bright line just below the diagonal. Top right: the next-token head, a line just above the diagonal for most tokens, with some rows on [CLS]. Bottom left: the same-word head, mostly on [CLS], with bright cells linking the two 'cat's. Bottom right: the [CLS] head, a bright first column." alt="Four 14 by 14 heatmaps with the tokens of 'The cat sat on the mat because the cat was tired.' on both axes. Previous-token head: a bright line one cell below the diagonal. Next-token head: a line one cell above the diagonal, broken on rows mat, because and tired, which light up the [CLS] column. Same-word head: the [CLS] column is bright, plus two bright cells where each 'cat' meets the other. [CLS] head: the whole first column is bright."
fig = plot_attention_grid(
    attentions,
    tokens,
    panels=list(best.values()),
    titles=[
        f"{name}: layer {lh[0]}, head {lh[1]}" for name, lh in best.items()
    ],
)
plt.show()

# %% [markdown]
# What they do, measured on this sentence:

# %%
layer, head = best["next token"]
a = att[layer, head]
top = a[:-1].argmax(-1)  # each query's strongest key (queries with a next one)
on_next = top == torch.arange(1, n)
others = sorted({tokens[k] for k in top[~on_next].tolist()})
print(
    f"next-token head: {int(on_next.sum())} of {n - 1} tokens look mostly "
    "at the next one"
)
print("  the others look mostly at:", ", ".join(others))
layer, head = best["same word"]
print("same-word head, weight on the other occurrences and on [CLS]:")
for q in range(n):
    if repeated[q]:
        print(
            f"  {tokens[q]!r:6} at position {q:2d}:"
            f" {(att[layer, head, q] * same[q]).sum().item():.2f}"
            f"  [CLS] {att[layer, head, q, 0].item():.2f}"
        )

# %% [markdown]
# * **Layer 0, head 2 is a previous-token head**, a trained instance of the pattern chapter 04
#   fitted with separate $W_q$ and $W_k$: every token after [CLS] puts almost all its weight (1.00
#   on average, in the table) on the token before it. Its output at position $t$ is essentially a copy
#   of the value at $t-1$, so every later layer can know "what came just before me".
# * **Layer 1, head 8 is a weaker mirror image**: 9 of the 13 tokens that have a next token look
#   mostly at it, and on average a token gives it 0.59 of its weight; the other four look mostly at
#   [CLS]. This model reads in both directions, so a head may look ahead.
# * **Layer 2, head 9 links repeated words, but unevenly**: the two "cat"s put 0.89 and 0.90 of
#   their weight on each other. For "the" it is weaker: the third "the" puts 0.60 on the other two,
#   the first and second only 0.21 and 0.13, and most of theirs on [CLS].
# * Many heads put much of their weight on **[CLS]**: 30 of the 72 more than half, 5 more than
#   0.8, and **layer 4, head 5** the most, 0.88. Clark et al. (2019, *What Does BERT Look At?*)
#   saw the same in BERT-base, where the parking spot is mostly [SEP], and read it as a "no-op":
#   attention a head gives when it has nothing to fetch. Kobayashi et al. (2020, *Attention is
#   Not Only a Weight*) showed that such attention contributes little, because the vectors of the
#   tokens it parks on are small. Here, in layer 4, head 5:

# %%
layer, head = best["[CLS]"]
with torch.no_grad():
    # the input of that layer, and the values it computes from it
    hidden = model(**inputs, output_hidden_states=True).hidden_states[layer]
    values = model.encoder.layer[layer].attention.self.value(hidden)[0]
values = values.view(n, n_heads, -1)[:, head]  # (tokens, d_head)
norms = values.norm(dim=-1)
w = att[layer, head]
# what each key adds to each query's output: |w_qk v_k|
weighted = (w[:, :, None] * values[None]).norm(dim=-1)
cls_share = (weighted[:, 0] / weighted.sum(-1)).mean()
ratio = norms[1:] / norms[0]
print(f"value vector of [CLS]: norm {norms[0]:.2f}")
print(
    f"other tokens: {norms[1:].min():.2f} to {norms[1:].max():.2f}, "
    f"{ratio.min():.0f} to {ratio.max():.0f} times longer"
)
print(f"[CLS]'s share of the attention weights:    {w[:, 0].mean():.2f}")
print(f"[CLS]'s share of the weighted values |w v|: {cls_share:.2f}")

# %% [markdown]
# [CLS] gets 0.88 of the weight but supplies only 0.23 of the summed lengths of the weighted
# values: the other
# tokens, with the remaining 0.12 of the weight, supply the rest, because their value vectors are
# far longer.
#
# ### Do the tidy heads matter?
#
# A pattern says where a head *looks*, not how much its result matters downstream. That can be
# tested directly: remove one head (set its block of the concatenation to zero before $W^O$, so it
# writes nothing) and measure how much the sentence's embedding (the mean of the last layer's token
# vectors, as in chapter 02) moves, as $1 - \cos$ between the embeddings with and without the head:


# %%
def sentence_vector() -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs).last_hidden_state[0].mean(0)


d_h = cfg.hidden_size // n_heads
reference = sentence_vector()
effect = torch.zeros(n_layers, n_heads)
for layer in range(n_layers):
    w_o = model.encoder.layer[layer].attention.output.dense  # BERT's W^O
    for head in range(n_heads):

        def drop_head(module, args, head=head):
            concat = args[0].clone()
            concat[..., head * d_h : (head + 1) * d_h] = 0
            return (concat,)

        handle = w_o.register_forward_pre_hook(drop_head)
        change = 1 - F.cosine_similarity(sentence_vector(), reference, dim=0)
        effect[layer, head] = change
        handle.remove()

order = effect.flatten().argsort(descending=True)
rank = order.argsort() + 1  # 1 = the largest effect
median = 1000 * effect.median()
print(f"1 - cos, times 1000 (median of the 72 heads: {median:.2f})")
for name, (layer, head) in best.items():
    r = rank[layer * n_heads + head]
    e = 1000 * effect[layer, head]
    print(f"  {name:15s} layer {layer}, head {head:2d}: {e:6.2f}  rank {r:2d}")
for r in range(3):
    layer, head = divmod(order[r].item(), n_heads)
    e = 1000 * effect[layer, head]
    print(f"  {f'rank {r + 1}':15s} layer {layer}, head {head:2d}: {e:6.2f}")

# %% [markdown]
# None of the four tidy heads is among the heads the embedding depends on most: they rank 25th,
# 36th, 38th and 58th of 72, and the last of them is the [CLS] head, as its tiny values predicted.
# The three largest effects (31.19 to 150.62, against a median of 1.59) come from the last layer,
# probably because no later layer can make up for what a last-layer head no longer writes.
#
# This is one sentence and one measure, not a verdict on these heads. On larger models and real
# tasks, Michel et al. (2019, *Are Sixteen Heads Really Better than One?*) found that many heads
# can be removed after training with little loss, and Voita et al. (2019, *Analyzing Multi-Head
# Self-Attention: Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned*) that the heads that matter most in a translation model include positional ones,
# like our previous-token head. What the measurement shows is that a tidy map alone does not
# tell: where a head looks is one question, what it contributes (its value vectors and its block
# of $W^O$) and what depends on that are others.
#
# The other 68 heads are harder to summarise. To explore them, the interactive head view of
# [bertviz](https://github.com/jessevig/bertviz) draws the sentence twice, with one line from each
# token to each token it attends to: pick a layer at the top, click the coloured squares to choose
# heads, hover over a token to see where it looks. It opens on the previous-token head.

# %% tags=["nbval-ignore-output"]
from bertviz import head_view

head_view(
    attentions,
    tokens,
    layer=best["previous token"][0],
    heads=[best["previous token"][1]],
)
assert attentions[0].shape[-1] == len(tokens)  # one row per token

# %% tags=["remove-cell"]
assert len(attentions) == 6 and len(tokens) == attentions[0].shape[-1]

# %% [markdown]
# ## Summary
#
# * Multi-head attention projects the input to queries, keys and values, splits the features into
#   $h$ heads of $d_\text{head}$, attends in every head in parallel, concatenates and projects with
#   $W^O$. Input and output have the same shape `(batch, length, d_model)`.
# * Splitting one big projection into heads is the same as giving every head its own
#   $d_\text{model} \times d_\text{head}$ projection; $W^O$ adds up what every head writes.
# * Every head has its own query, key and value projections, so each head asks its own question.
# * Several heads fetch several things at once: in the two-lookup experiment (300 steps, a linear
#   read-out) one head never got both tokens right (it settled on one, or blended both and
#   recovered each only partly), while two or four heads got both exactly in every run.
# * With $d_\text{head} = d_\text{model}/h$, more heads cost no more parameters and no more
#   multiply-adds, but $h$ times the attention weights ($hL^2$ per layer and sequence), and the
#   scaling, softmax and masking run over all of them. So more heads were slower in our timing
#   of the explicit path on a CPU, where the softmax work grew most. Very narrow
#   heads have a second limit: a head's score matrix has rank at most $d_\text{head}$. Models such
#   as T5 choose $d_\text{head}$ freely and let $W^O$ map $h\,d_\text{head}$ back to
#   $d_\text{model}$.
# * The package module equals `torch.nn.MultiheadAttention` once the weights are copied and the
#   masks inverted (PyTorch: `True` = blocked; the course: `True` = may attend). Its fused path
#   (`use_sdpa=True`) gives the same outputs and does not return the attention weights (it can
#   avoid storing them).
# * In a trained model some heads have recognisable jobs (previous token, next token, same word,
#   parking on [CLS] with near-zero values), but a tidy pattern is not the same as importance:
#   removing any one of them moved MiniLM's sentence embedding far less than removing the most
#   important heads, all in its last layer.
#
# Next, chapter 06 adds the rest of a Transformer block around multi-head attention: the
# position-wise feed-forward network, residual connections and layer normalisation.
#
# ## Exercises
#
# **1. Relabel the heads.** Make a copy of `mha` in which head 0 and head 1 trade places: swap
# their blocks of rows in `W_q`, `W_k` and `W_v` (weights and biases). Predict first, then test:
# does the module's output change? And if you also swap the two heads' blocks of $W^O$?


# %% tags=["solution"]
# features of head 1, then of head 0
perm = torch.cat([torch.arange(d_head, 2 * d_head), torch.arange(d_head)])


def swap_heads(also_w_o: bool) -> MultiHeadAttention:
    new = MultiHeadAttention(d_model, num_heads).eval()
    new.load_state_dict(mha.state_dict())
    with torch.no_grad():
        for lin in (new.W_q, new.W_k, new.W_v):
            lin.weight.copy_(lin.weight[perm])
            lin.bias.copy_(lin.bias[perm])
        if also_w_o:  # W^O's rows are the columns of W_o.weight
            new.W_o.weight.copy_(new.W_o.weight[:, perm])
    return new


for also in (False, True):
    diff = (swap_heads(also)(x)[0] - mha(x)[0]).abs().max().item()
    print(f"swap W_q, W_k, W_v, W_o too: {also!s:5}  max change {diff:.2g}")

# %% [markdown] tags=["solution"]
# Swapping only the input projections changes the output: head 0's result now lands in features
# 4–7 of the concatenation, where $W^O$ expects head 1's. Swapping the matching blocks of $W^O$ as
# well gives the same output: here exactly, and in general up to float rounding, because
# $W^O$ then adds the heads' contributions in another order. The heads have no order of their
# own: a
# head is nothing but its slices of the four matrices, so any relabelling of the heads, carried
# through all four, describes the same model.

# %% [markdown]
# **2. Three lookups.** Change the experiment so that the model must report tokens 0, 1 **and 2**
# from the last position (`n_lookups=3`), with $d_\text{model} = 48$ so that 1, 2, 3 and 4 heads
# all divide it. Before you run it, predict: what is the fewest number of heads that gets all three
# tokens right? Does having exactly that many always work? Train 1, 2, 3 and 4 heads from 4 seeds
# each.

# %% tags=["solution"]
three = {}
for seed in range(4):
    for h in (1, 2, 3, 4):
        _, acc3, w3 = train_lookups(h, seed, n_lookups=3, d_model=48)
        three[h, seed] = acc3, w3
heads_shown = [heads_name(h) for h in (1, 2, 3, 4)]
display(
    Table(
        ["seed", *heads_shown],
        [
            (seed, *(three[h, seed][0].min().item() for h in (1, 2, 3, 4)))
            for seed in range(4)
        ],
        formats=dict.fromkeys(heads_shown, ".2f"),
        caption="worst of the 3 tokens: accuracy per run (chance 0.03)",
    )
)
for seed in range(4):
    acc3, w3 = three[3, seed]
    if acc3.min() < 0.99:  # where do the three heads look?
        looks = w3.mean(0).argmax(-1).tolist()
        print(f"3 heads, seed {seed}: the heads look at positions {looks}")

# %% [markdown] tags=["solution"]
# One head and two heads never get all three tokens right (with two heads the worst token reaches
# 0.76 to 0.90): at least one head has to serve two tokens, as the single head did in the
# two-lookup experiment. Three heads can be enough, one per token, but not always: in one run two
# of the three heads settled on the same position, and the token no head looked at stayed at
# chance. Heads are not assigned their jobs; each finds one during training, and two may find the
# same. Four heads leave one to spare and got all three tokens in every run here.

# %% [markdown]
# **3. A head for "cat", or for repetition?** On the cat sentence, layer 0, head 2 looked at the
# previous token and layer 2, head 9 linked the two "cat"s. Run MiniLM on a sentence with other
# repeated words, "My dog chased a ball, and my dog never found the ball again.", and compute
# the previous-token and same-word scores of every head again. Predict first: are the strongest
# heads the same two? Which repeated words does the same-word head link most strongly?

# %% tags=["solution"]
other = tokenizer(
    "My dog chased a ball, and my dog never found the ball again.",
    return_tensors="pt",
)
with torch.no_grad():
    att2 = torch.stack(model(**other).attentions)[:, 0]
tokens2 = tokenizer.convert_ids_to_tokens(other["input_ids"][0])
words2, m = [t.lower() for t in tokens2], len(tokens2)
j = torch.arange(1, m)
same2 = torch.tensor(
    [
        [
            a != b and words2[a] == words2[b] and words2[a].isalpha()
            for b in range(m)
        ]
        for a in range(m)
    ]
)
repeated2 = same2.any(-1)
scores2 = {
    "previous token": att2[:, :, j, j - 1].mean(-1),
    "same word": (att2 * same2).sum(-1)[:, :, repeated2].mean(-1),
}
rows = []
for name, score in scores2.items():
    layer, head = divmod(score.argmax().item(), n_heads)
    here, cats = f"layer {layer}, head {head}", "layer {}, head {}"
    rows.append(
        (name, here, score[layer, head].item(), cats.format(*best[name]))
    )
display(
    Table(
        ["pattern", "strongest head", "its score", "cat sentence"],
        rows,
        formats={"its score": ".2f"},
    )
)
layer, head = best["same word"]
print(f"layer {layer}, head {head}: weight on the other occurrences")
for q in range(m):
    if repeated2[q]:
        print(
            f"  {tokens2[q]!r:6} at position {q:2d}:"
            f" {(att2[layer, head, q] * same2[q]).sum().item():.2f}"
        )

# %% [markdown] tags=["solution"]
# The same two heads, although the two sentences share no repeated word. The previous-token head
# looks at a *position*, so it does its job on any text. The same-word head looks at *content*:
# it is not a head for "cat" but one that links whatever words repeat. As on the cat sentence it
# is uneven, and in the same way: the nouns "dog" and "ball" are linked strongly, the small word
# "my" less, as "the" was less in the cat sentence.
