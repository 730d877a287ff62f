# %% [markdown]
# # 06 — Feed-forward, residual connections, layer normalisation
#
# Chapters 04 and 05 built attention, which lets every position gather information from the
# others. A Transformer layer needs three more pieces around it:
#
# * a **position-wise feed-forward network**, the layer's non-linear step, which transforms each
#   position's vector on its own;
# * **residual connections**, $x + \operatorname{sublayer}(x)$, which keep a deep stack of layers
#   trainable;
# * **layer normalisation**, which keeps the size of the vectors in check as they pass through the
#   stack.
#
# Each piece is built on a small example and checked against PyTorch, and each design choice is
# put to an experiment: what a deep stack does without residual connections, how the vectors grow
# without normalisation, and what changes when the normalisation sits after the residual sum
# (post-norm, the 2017 paper) or before the sub-layer (pre-norm, GPT-2 and most models since).

# %% tags=["remove-cell"]
import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="IProgress not found")
    import transformers  # noqa: F401

# %%
import math
from collections.abc import Callable

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from IPython.display import display
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

from transformer_course.attention import MultiHeadAttention
from transformer_course.diagrams import feed_forward, norm_axes, norm_placement
from transformer_course.layers import LayerNorm, PositionwiseFeedForward
from transformer_course.transformer import EncoderLayer
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

# %% [markdown]
# ## The position-wise feed-forward network
#
# Chapter 04 showed that attention's output at a position is a weighted average of the value
# vectors: attention moves and mixes what the positions hold, but every output lies between the
# values, and the projections around it are linear. The **feed-forward network** (FFN) is where a
# Transformer layer computes a non-linear function of each position's vector:
#
# $$\operatorname{FFN}(x) = \max(0,\; xW_1 + b_1)\,W_2 + b_2 .$$ (eq-06-1)
#
# Two linear maps with a ReLU between them (Fig. 6.1): $W_1$ widens the vector from $d_\text{model}$
# to $d_\text{ff}$ numbers (four times as many in the 2017 paper: 512 → 2048), the ReLU sets the
# negative ones to zero, and $W_2$ brings the result back to $d_\text{model}$ numbers. The same
# network, with the same weights, is applied to every position:

# %% tags=["hide-input"] caption="The feed-forward network at one position, with $d_\\text{model} = 4$ and $d_\\text{ff} = 16$: W1 widens the 4 numbers to 16 hidden units, the ReLU sets some of them to zero (white), and W2 narrows the rest back to 4. Units at zero write nothing to the output." alt="Three rows of circles. Bottom: 4 input circles, each connected by thin grey lines to all 16 circles of the middle row. Middle: 16 hidden units, 7 of them filled in teal and 9 white. Top: 4 output circles, connected only to the 7 filled hidden units. Labels: 'W1 widens' between bottom and middle, 'W2 narrows' between middle and top, and right of the middle row: 16 hidden units, ReLU(xW1 + b1), white = 0."
feed_forward(d_model=4, d_ff=16)
plt.show()

# %% [markdown]
# A useful way to read the formula (Geva et al., 2021, *Transformer Feed-Forward Layers Are
# Key-Value Memories*): call column $j$ of $W_1$ a **key** $k_j$ and row $j$ of $W_2$ a **value**
# $v_j$. Then
#
# $$
# \begin{aligned}
# \operatorname{FFN}(x) &= \sum_{j=1}^{d_\text{ff}} h_j\, v_j \;+\; b_2,\\
# h_j &= \max(0,\; x \cdot k_j + b_{1,j}).
# \end{aligned}
# $$ (eq-06-2)
#
# Hidden unit $j$ measures how well $x$ matches its key. If the match is positive, the unit
# adds its value to the output, scaled by the match $h_j$; otherwise it adds nothing. In trained
# language models Geva et al. found keys that respond to human-readable patterns in the text, and
# values that, in the upper layers, raise the probability of the tokens likely to follow those
# patterns. $d_\text{ff}$ is the number of these key–value pairs.
#
# By hand, with $d_\text{model} = 2$ and $d_\text{ff} = 4$ (twice as wide, to keep the arithmetic
# small):

# %%
x = torch.tensor([1.0, 0.5])
# W1: (d_model=2, d_ff=4); column j is the key k_j
W1 = torch.tensor([[1.0, 0.0, -1.0, 0.5], [0.0, 1.0, 0.5, -1.0]])
b1 = torch.tensor([0.0, -0.2, 0.1, -0.1])
# W2: (d_ff=4, d_model=2); row j is the value v_j
W2 = torch.tensor([[0.5, -1.0], [1.0, 1.0], [-0.5, 0.5], [0.2, 0.3]])
b2 = torch.tensor([0.1, 0.0])


def ffn_by_hand(x: torch.Tensor) -> torch.Tensor:
    return F.relu(x @ W1 + b1) @ W2 + b2


print("x W1 + b1:      ", x @ W1 + b1)
print("after the ReLU: ", F.relu(x @ W1 + b1))
print("FFN(x):         ", ffn_by_hand(x))
print("1.0 v1 + 0.3 v2 + b2:", 1.0 * W2[0] + 0.3 * W2[1] + b2)
print("for -x, after the ReLU:", F.relu(-x @ W1 + b1))

# %% [markdown]
# Units 3 and 4 have negative pre-activations, so the ReLU switches them off and they contribute
# nothing: $\operatorname{FFN}(x) = 1.0\,v_1 + 0.3\,v_2 + b_2$, the sum in the fourth line. For
# $-x$ only unit 3 is on. Which units are on depends on the input, so the FFN is a different
# affine map ($x \mapsto xA + c$) in each region of its input space, and that is what makes it
# non-linear.
#
# As a module the whole FFN is `nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(),
# nn.Linear(d_ff, d_model))`. The package's `PositionwiseFeedForward` is the same three steps,
# with the GELU (a smooth ReLU, met below) as an option and dropout on the hidden layer (its source
# is folded below: the three steps are the last lines of `forward`; the lines before them check
# the arguments). One detail trips up everyone once: `nn.Linear(d_in, d_out)` stores its weight as a
# `(d_out, d_in)` matrix and computes `x @ weight.T + bias`, so our $W_1$ goes in transposed.

# %%
show_source(PositionwiseFeedForward)

# %%
ffn = PositionwiseFeedForward(d_model=2, d_ff=4)
with torch.no_grad():
    ffn.linear1.weight.copy_(W1.T)
    ffn.linear1.bias.copy_(b1)
    ffn.linear2.weight.copy_(W2.T)
    ffn.linear2.bias.copy_(b2)
sequential = nn.Sequential(ffn.linear1, nn.ReLU(), ffn.linear2)
print("linear1.weight:", tuple(ffn.linear1.weight.shape))
print("PositionwiseFeedForward:", ffn(x).detach())
print("nn.Sequential:          ", sequential(x).detach())

# %% [markdown]
# **Position-wise** means that the *same* network is applied to every position separately: a
# sequence of shape `(batch, length, d_model)` goes in, each of its `length` vectors is
# transformed on its own, and nothing flows between positions (that is attention's job). So a
# position fed alone gives the same result as inside the sequence, and shuffling the positions
# only shuffles the outputs:

# %%
seq = torch.randn(2, 5, 2, generator=g)  # (batch, length, d_model)
out = ffn(seq)
perm = torch.tensor([3, 0, 4, 1, 2])
print("sequence in:", tuple(seq.shape), " out:", tuple(out.shape))
alone = torch.allclose(out[:, 2], ffn(seq[:, 2]), atol=1e-6)
print("position 2 alone gives what it gives in the sequence:", alone)
shuffled = torch.allclose(ffn(seq[:, perm]), out[:, perm], atol=1e-6)
print("shuffled positions in, the same shuffle out:", shuffled)

# %% [markdown]
# How wide should the hidden layer be? The 2017 paper tried it (its Table 3): with
# $d_\text{ff} = 1024$ instead of 2048 its base model translated worse (25.4 BLEU on its
# development set instead of 25.8), with 4096 better (26.2), at 53, 65 and 90 million parameters
# for the whole model. Four times $d_\text{model}$ became the convention (BERT, GPT-2); models
# whose FFN has a third, gating matrix (chapter 11) use about $\tfrac83$ instead.
#
# The FFN is also where a large share of a layer's parameters sits. In the paper's base model
# ($d_\text{model} = 512$, $d_\text{ff} = 2048$, 8 heads) an encoder layer has one attention, one
# FFN and two layer norms;
# a decoder layer has a second attention (over the encoder's output, chapter 07) and a third
# norm:

# %%
n_attn = count_parameters(MultiHeadAttention(512, 8))
n_ffn = count_parameters(PositionwiseFeedForward(512, 2048))
n_norm = count_parameters(LayerNorm(512))
rows = []
for name, n_attentions, n_norms in (("encoder", 1, 2), ("decoder", 2, 3)):
    total = n_attentions * n_attn + n_ffn + n_norms * n_norm
    rows.append(
        (name, n_attentions * n_attn, n_ffn, n_norms * n_norm, n_ffn / total)
    )
Table(
    ["layer", "attention", "feed-forward", "layer norms", "FFN share"],
    rows,
    formats={
        "attention": ",",
        "feed-forward": ",",
        "layer norms": ",",
        "FFN share": ".1%",
    },
)

# %% [markdown]
# Two thirds of an encoder layer is its FFN, and so is two thirds of a GPT block, which has the
# same parts. In a decoder layer, with its second attention, the FFN holds half.
#
# A whole model also has its embedding tables, and for a small model they are large. GPT-2 small
# has 12 blocks, $d_\text{model} = 768$, $d_\text{ff} = 3072$, 50,257 tokens and 1,024 positions.
# Each block has two layer norms and one more follows the last block: 25 norms, each with a
# $\gamma$ and a $\beta$ of 768 numbers. The output layer, which turns each final vector into
# scores for the next token, reuses the token embedding matrix (*weight tying*), so it adds
# nothing. Counted from the same formulas, and then compared with Hugging Face's GPT-2, built on
# PyTorch's `meta` device (tensors with shapes but no data, so nothing is allocated):

# %%
n_layers, dm, vocab, ctx = 12, 768, 50_257, 1024
parts = {
    "feed-forward (12 blocks)": n_layers * (2 * dm * 4 * dm + 4 * dm + dm),
    "attention (12 blocks)": n_layers * (4 * dm * dm + 4 * dm),
    "layer norms (25)": (2 * n_layers + 1) * 2 * dm,
    "token embeddings": vocab * dm,
    "position embeddings": ctx * dm,
    "output layer (tied)": 0,
}
total = sum(parts.values())
rows = [(name, n, n / total) for name, n in parts.items()]
display(
    Table(
        ["part", "parameters", "share"],
        [*rows, ("total", total, "")],
        formats={"parameters": ",", "share": ".2%"},
    )
)
with torch.device("meta"):
    hf_gpt2 = GPT2LMHeadModel(GPT2Config())
print(f"Hugging Face's GPT-2 small: {count_parameters(hf_gpt2):,} parameters")

# %% [markdown]
# BERT and GPT replace the ReLU with the **GELU**, $x\,\Phi(x)$, where $\Phi$ is the standard
# normal CDF: a smooth ReLU (Fig. 6.2). It is differentiable everywhere, and for negative inputs its
# gradient is not exactly zero (except at its minimum), where a ReLU's is: below, at $x = -1$ and
# $-2$ the GELU still passes back a small gradient, the ReLU none. Near its minimum and far into the
# negative side (at $x = -0.75$ and $-4$) the GELU's gradient is close to zero too. These
# numbers show a difference in the gradient, not in training: the experiments of this chapter
# use the ReLU. In the package the GELU is
# `PositionwiseFeedForward(..., activation="gelu")`.

# %% tags=["hide-input"] caption="ReLU and GELU from -4 to 4. Far from 0 they nearly agree; near 0 the GELU is a smooth curve, slightly negative for negative inputs, with its minimum near x = -0.75." alt="Two curves on the same axes. ReLU is flat at zero for negative x and a straight line of slope 1 for positive x, with a corner at 0. GELU lies close to it far from 0, dips to a shallow minimum of about -0.17 near x = -0.75, and bends smoothly through the origin, staying a little below the ReLU line for small positive x."
xs = torch.linspace(-4, 4, 401)
fig, ax = plt.subplots(figsize=(5, 3.2))
ax.plot(xs, F.relu(xs), label="ReLU  max(0, x)")
ax.plot(xs, F.gelu(xs), label=r"GELU  $x\,\Phi(x)$")
ax.axhline(0, color="gray", lw=0.5)
ax.axvline(0, color="gray", lw=0.5)
ax.set_xlabel("x")
ax.legend()
ax.set_title("the two activations of the FFN")
plt.show()

# %%
fine = torch.linspace(-4, 4, 8001)  # a grid step of 0.001
gelu_min = F.gelu(fine).min().item()
x_min = fine[F.gelu(fine).argmin()].item()
print(f"GELU's minimum: {gelu_min:.4f} at x = {x_min:.2f}")
points = torch.tensor([-4.0, -2.0, -1.0, -0.75, 1.0], requires_grad=True)
(relu_grad,) = torch.autograd.grad(F.relu(points).sum(), points)
(gelu_grad,) = torch.autograd.grad(F.gelu(points).sum(), points)
print("x:              ", points.detach())
print("gradient, ReLU: ", relu_grad)
print("gradient, GELU: ", gelu_grad)

# %% [markdown]
# ## Residual connections
#
# A residual connection adds a sub-layer's input to its output: $y = x + f(x)$. Why that helps is
# easiest to see through the gradient. Backpropagation multiplies, layer by layer, by each layer's
# **Jacobian**: the matrix $\partial y / \partial x$ of the derivatives of the layer's outputs with
# respect to its inputs. For a residual layer it is $I + \partial f / \partial x$: the identity
# term gives the gradient a path that no Jacobian multiplies, so it need not shrink layer after
# layer the way a product of small Jacobians does; what $f$ adds on top can still make it grow
# (with a larger initialisation, as we will see). Without it, the gradient that
# reaches the first layer of a deep stack is a product of one Jacobian per layer, and if each one
# shrinks vectors a little, the product shrinks exponentially.
#
# A deep plain stack can fail in two ways: the gradient can shrink on its way down to the first
# layers, so that they cannot learn, and the output can forget what distinguished one input from
# another. In a stack of feed-forward blocks we will find that the first is the initialisation's
# doing; that the second has two causes, the default biases and, underneath them, the ReLU; and
# that the residual connection with the default initialisation largely avoids both.
#
# The experiment: 30 feed-forward blocks stacked, once as $x \leftarrow f_\ell(x)$ and once as
# $x \leftarrow x + f_\ell(x)$, with identical (PyTorch default) initial weights. One backward pass
# of a simple loss, then the gradient norm of every block's first weight matrix.

# %%
depth, d = 30, 64


def ffn_stack_gradients(residual: bool) -> list[float]:
    """Gradient norm of each block's ``linear1.weight`` after one backward
    pass."""
    torch.manual_seed(0)  # the same weights for both stacks
    blocks = [PositionwiseFeedForward(d, 4 * d) for _ in range(depth)]
    h = inputs
    for block in blocks:
        h = h + block(h) if residual else block(h)
    h.pow(2).mean().backward()
    # norms in float64: the smallest gradients have entries so small that
    # their squares underflow in float32
    return [b.linear1.weight.grad.double().norm().item() for b in blocks]


inputs = torch.randn(32, d, generator=g)
grads_plain = ffn_stack_gradients(residual=False)
grads_res = ffn_stack_gradients(residual=True)
for layer in (0, 9, 19, 29):
    print(
        f"block {layer + 1:2d}: gradient norm without residuals "
        f"{grads_plain[layer]:.1e}, with {grads_res[layer]:.1e}"
    )

# %% tags=["remove-cell"]
# The plain stack's gradient vanishes towards the input; with residual
# connections every block gets a gradient of about the same size.
assert grads_plain[0] < 1e-10 < 1e-2 < grads_res[0]
assert grads_plain[-1] > 1e10 * grads_plain[0]
assert max(grads_res) / min(grads_res) < 10

# %% [markdown]
# Without residual connections the gradient at the first block is more than 17 orders of
# magnitude smaller than at the last ($4.4 \times 10^{-21}$ against $2.0 \times 10^{-3}$): with this initialisation the
# first blocks cannot learn.
# With residual connections every block gets a gradient of about the same size (1.6 to 2.2 at
# the blocks printed). Has the plain stack kept anything of its input? Feed it a completely
# different input and compare the outputs:

# %%
torch.manual_seed(0)
blocks = [PositionwiseFeedForward(d, 4 * d) for _ in range(depth)]
h1, h2 = inputs, torch.randn(32, d, generator=g)
with torch.no_grad():
    for block in blocks:
        h1, h2 = block(h1), block(h2)
change = (h1 - h2).abs().max().item()
print(
    "plain stack, two different inputs: the outputs differ by less than",
    f"1e-6: {change < 1e-6}",
)
print(f"mean length of an output vector: {h1.norm(dim=-1).mean():.2f}")

# %% [markdown]
# The plain stack has forgotten its input: a completely different input gives the same output,
# and that output is not zero but a vector of length 0.40, the same whatever went in.
#
# **How much of this is the initialisation?** A fair question, because PyTorch's default
# initialisation of `nn.Linear` draws its weights with variance $1/(3\,\mathrm{fan}_\mathrm{in})$
# (chapter 04), where the fan-in is the layer's number of inputs. Follow the squared length of a vector through
# a Linear–ReLU–Linear block: the first layer ($d$ inputs, $4d$ outputs) multiplies it by
# $4d \cdot \tfrac1{3d} = \tfrac43$, the ReLU zeroes half, and the second layer ($4d$ inputs,
# $d$ outputs) multiplies it by $d \cdot \tfrac1{12d} = \tfrac1{12}$. In all, $\tfrac43 \cdot
# \tfrac12 \cdot \tfrac1{12} = \tfrac1{18}$, so the weights of a block scale the size of a vector
# by $\sqrt{1/18} \approx 0.24$, and thirty blocks by $0.24^{30} \approx 10^{-19}$.
#
# The argument counts only the weights. Backwards, it predicts how the signal passed from block
# to block shrinks; a weight's gradient is that signal times the block's input (exercise 2 tests
# the prediction). Forwards, PyTorch's default also
# draws non-zero biases, and they add to each block's output a part that does not depend on the
# input. By the argument, the part that comes from the input shrinks by about 0.24 per block;
# the biases' part does not, so after a few blocks the output is almost entirely the biases' part: the stack
# forgets its input.
#
# The control: the same plain stack with **He initialisation** (He et al., 2015), variance
# $2/\mathrm{fan}_\mathrm{in}$ for the layer before the ReLU (to make up for the half it zeroes)
# and $1/\mathrm{fan}_\mathrm{in}$ for the one after, zero biases, so that a block keeps the size
# of its input. A third plain stack keeps the default weights but zeroes the biases, to see the
# weights' factor alone. We feed each stack two unrelated inputs and measure, after 3 and after 30
# blocks, how alike its two outputs are (the mean cosine similarity over the 32 rows) and the mean
# length of the vectors.


# %%
def he_init_(block: PositionwiseFeedForward) -> PositionwiseFeedForward:
    # variance 2 / fan_in
    nn.init.kaiming_normal_(block.linear1.weight, nonlinearity="relu")
    # variance 1 / fan_in
    nn.init.kaiming_normal_(block.linear2.weight, nonlinearity="linear")
    nn.init.zeros_(block.linear1.bias)
    nn.init.zeros_(block.linear2.bias)
    return block


def stack_report(
    residual: bool, init: str, seed: int = 0
) -> tuple[list[float], list[float], list[float]]:
    """Gradient norms of each block's W1 after one backward pass, and after
    each block the cosine similarity of the outputs for two unrelated inputs
    and the mean length of the vectors. init: "default", "zero bias", "He";
    seed: the random seed of the weights."""
    torch.manual_seed(seed)
    blocks = [PositionwiseFeedForward(d, 4 * d) for _ in range(depth)]
    for b in blocks:
        if init == "He":
            he_init_(b)
        elif init == "zero bias":
            nn.init.zeros_(b.linear1.bias)
            nn.init.zeros_(b.linear2.bias)
    h, other = inputs, other_inputs
    cos, length = [], []
    for block in blocks:
        if residual:
            h, other = h + block(h), other + block(other)
        else:
            h, other = block(h), block(other)
        # the cosine in float64: the zero-bias stack's vectors get too small
        # for float32
        u, w = h.double(), other.double()
        cos_uw = (u * w).sum(-1) / (u.norm(dim=-1) * w.norm(dim=-1))
        cos.append(cos_uw.mean().item())
        length.append(h.norm(dim=-1).mean().item())
    h.pow(2).mean().backward()
    grads = [b.linear1.weight.grad.double().norm().item() for b in blocks]
    return grads, cos, length


other_inputs = torch.randn(32, d, generator=g)
cos_in = F.cosine_similarity(inputs, other_inputs, dim=-1).mean().item()
length_in = inputs.norm(dim=-1).mean().item()
print(
    f"the two inputs: cosine similarity {cos_in:.2f},",
    f"mean length {length_in:.2f}",
)
report = {}
for name, residual, init in (
    ("plain, default init", False, "default"),
    ("plain, zero biases", False, "zero bias"),
    ("plain, He init", False, "He"),
    ("residual, default init", True, "default"),
    ("residual, He init", True, "He"),
):
    report[name] = stack_report(residual, init)
display(
    Table(
        ["gradient of W1", "block 1", "block 30"],
        [
            (name, grads[0], grads[-1])
            for name, (grads, _, _) in report.items()
        ],
        formats={"block 1": ".1e", "block 30": ".1e"},
    )
)
display(
    Table(
        ["outputs alike", "after 3", "after 30"],
        [(name, cos[2], cos[-1]) for name, (_, cos, _) in report.items()],
        formats={"after 3": ".2f", "after 30": ".2f"},
    )
)
display(
    Table(
        ["mean length", "after 3", "after 30"],
        [
            (name, length[2], length[-1])
            for name, (_, _, length) in report.items()
        ],
        formats={"after 3": ".1e", "after 30": ".1e"},
    )
)
zero_bias_length = report["plain, zero biases"][2]
print(
    "zero biases: the length is multiplied by",
    f"{(zero_bias_length[-1] / length_in) ** (1 / depth):.3f} per block",
    f"(sqrt(1/18) = {math.sqrt(1 / 18):.3f})",
)

# %% tags=["remove-cell"]
# Default init: the plain stack's outputs end up parallel. He init keeps the
# gradient but not the difference between inputs; the residual stack with
# the default init keeps it; zero biases shrink the length to nothing;
# residual + He init grows the stream by close to sqrt(2) per block.
assert report["plain, default init"][1][-1] > 0.99
he_grads, he_cos, _ = report["plain, He init"]
assert he_grads[0] > 0.1 and max(he_grads) / min(he_grads) < 100
assert he_cos[-1] > 0.9
assert report["residual, default init"][1][-1] < 0.7
assert report["plain, zero biases"][2][-1] < 1e-15
res_he_length = report["residual, He init"][2]
assert 1.3 < (res_he_length[-1] / res_he_length[0]) ** (1 / 29) < 1.5

# %% tags=["hide-input"] caption="Gradient norm of each block's first weight matrix after one backward pass through 30 feed-forward blocks. The plain stack with PyTorch's default initialisation loses more than 17 orders of magnitude towards the input; He initialisation and the residual connection both keep it flat." alt="Line plot, log-scale y axis from 1e-21 to 10, x axis block 1 to 30. The plain default-init curve rises in a straight line from about 4e-21 at block 1 to 2e-3 at block 30. The plain He-init and residual default-init curves lie flat between about 1 and 3 across all blocks."
with plt.rc_context({"font.size": 14, "legend.fontsize": 13}):
    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    blocks_idx = range(1, depth + 1)
    for name in (
        "plain, default init",
        "plain, He init",
        "residual, default init",
    ):
        ax.semilogy(blocks_idx, report[name][0], "o-", ms=3, label=name)
    ax.set_xlabel("block (1 = next to the input)")
    ax.set_ylabel("gradient norm of $W_1$")
    ax.set_title(f"{depth} feed-forward blocks, one backward pass")
    ax.legend()
    plt.show()

# %% [markdown]
# The first two rows of each table separate the weights from the biases. With zero biases the length falls by
# a factor of 0.230 per block, close to the argument's 0.236, to $5.6 \times 10^{-19}$ after 30 blocks. Its
# gradients are tiny everywhere (the loss's gradient is proportional to an output that small),
# but block 1's is about as large as block 30's ($2.8 \times 10^{-38}$ and $2.4 \times 10^{-38}$). The gradient of a block's
# $W_1$ is the signal coming back from above times the block's input. Going down from block 30
# to block 1, the signal shrinks by a factor of about 0.24 per block, while the block's input
# grows by the inverse of the 0.230 it shrank by on the way forward, so the two cancel. With the
# default biases the input of every later block keeps a length of about 0.40, the biases' part,
# so nothing cancels the backward shrinkage, and the gradient vanishes towards the input. The outputs for the two inputs are
# then alike (1.00): what is left is the biases' part.
#
# So the vanishing gradient of the plain stack is the initialisation's doing (Fig. 6.3): with He
# initialisation block 1 receives a gradient as large as block 30's (1.6 against 1.4), and the
# length stays about the same (8.05 in, 6.8 after 30 blocks). What He initialisation does not fix
# is the second symptom: two unrelated inputs come out of thirty plain ReLU blocks almost parallel
# (similarity 0.57 after
# 3 blocks, 0.99 after 30), so the stack passes on almost nothing of what distinguished them. No
# scale of the weights can fix this, because it is the ReLU's doing. For random weights, a ReLU
# layer maps the cosine between two inputs to a larger one, and 1 is the only value it keeps
# (Cho and Saul, 2009, *Kernel Methods for Deep Learning*), so depth alone drives any two inputs
# towards parallel. For infinitely wide layers the map is exact,
# $\cos\theta \mapsto \bigl(\sin\theta + (\pi - \theta)\cos\theta\bigr)/\pi$, and the
# scale of the weights does not enter it, so the zero-bias stack and the He stack, both ReLU
# stacks without biases, should follow the same curve. One stack 64 units wide scatters around
# it (0.73 and 0.57 after 3 blocks in the *outputs alike* table), so here are both over five random seeds of the
# weights, next to the map applied to each pair of inputs:


# %%
def relu_cosine_map(c: torch.Tensor) -> torch.Tensor:
    """Cosine between two vectors after a wide random ReLU layer, given
    the cosine before it (Cho and Saul's arc-cosine kernel)."""
    theta = torch.acos(c.clamp(-1, 1))
    return (torch.sin(theta) + (math.pi - theta) * c) / math.pi


c = F.cosine_similarity(inputs.double(), other_inputs.double(), dim=-1)
mapped = []
for _ in range(depth):
    c = relu_cosine_map(c)
    mapped.append(c.mean().item())
rows = [("ReLU map, infinite width", mapped[2], mapped[-1])]
for name, init in (("zero biases", "zero bias"), ("He init", "He")):
    cos = [stack_report(False, init, seed)[1] for seed in range(5)]
    after_3 = f"{min(c[2] for c in cos):.2f}-{max(c[2] for c in cos):.2f}"
    after_30 = f"{min(c[-1] for c in cos):.2f}-{max(c[-1] for c in cos):.2f}"
    rows.append((f"{name}, seeds 0-4", after_3, after_30))
Table(
    ["outputs alike", "after 3", "after 30"],
    rows,
    formats={"after 3": ".2f", "after 30": ".2f"},
)


# %% [markdown]
# Over five seeds the two stacks' ranges after 3 blocks overlap, and both contain the map's
# 0.61; after 30 blocks all ten stacks are at 0.96 to 0.99, around the map's 0.97. So the 0.73
# and 0.57 of the table are two draws from the same spread, not an effect of the weights' scale:
# the ReLU alone drives the inputs together.
#
# The residual stack, with the *default* initialisation, keeps the gradient and much of the
# difference between the inputs (similarity 0.04 in, 0.42 after 30 blocks, against 1.00 and 0.99 for the
# plain stacks with the default and He initialisation), because each block only adds a change to
# a stream that still carries its input. That is the case for residual connections: with the
# default initialisation they keep the gradient of every block at a usable size (though not
# with every initialisation: with He initialisation the stream and the gradients blow up, as
# we see next), and they keep the input visible to every later layer.
#
# The "residual, He init" rows of the three tables show the price. With He initialisation each residual block adds a branch about as
# large as the stream itself, and the stream's mean length grows from 8.05 to $1.9 \times 10^{5}$ over 30
# blocks, close to a factor of $\sqrt2$ per block; its gradients grow with it ($6.8 \times 10^{8}$). And it
# keeps less of the difference between the inputs: its two outputs have a similarity of 0.32
# after 3 blocks and 0.87 after 30, closer to the plain He stack's 0.99 than to the default
# residual stack's 0.42. Deep
# residual models keep the stream in check in two ways. They make the branches write less at the
# start: GPT-2 initialises the weights that write into the stream scaled by $1/\sqrt{N}$, with $N$
# the number of residual
# layers (two per block). And they normalise.
#
# ## Layer normalisation
#
# Layer normalisation rescales each token's vector to mean 0 and variance 1 over its own $d$
# features, whatever its size was, then lets the model choose a new scale $\gamma$ and shift
# $\beta$ per feature. Without them every normalised vector would be forced to mean 0 and
# variance 1, whether or not the next layer works best with that; with them the model can
# rescale and shift each feature, at a cost of $2d$ parameters per norm (the 768 + 768 per norm
# of GPT-2 counted above). They cannot undo the normalisation, though: $\gamma$ and $\beta$ are
# shared by all tokens, while the mean and the size that the norm removes belong to each token,
# so $x$ and $3x + 5$ come out the same (a cell below checks it):
#
# $$
# \begin{aligned}
# \operatorname{LN}(x) &= \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta,\\
# \mu &= \frac1d \sum_{i=1}^d x_i,\\
# \sigma^2 &= \frac1d \sum_{i=1}^d (x_i - \mu)^2 .
# \end{aligned}
# $$ (eq-06-3)
#
# Two details matter if the numbers are to match PyTorch (and the pretrained models that use
# LayerNorm): $\sigma^2$
# is the **biased** variance (divide by $d$, not $d-1$), and $\varepsilon$ sits **inside** the
# square root. By hand on the vector $[2, -1, 3, 0]$: the mean is 1, the squared deviations are
# $1, 4, 4, 1$, so $\sigma^2 = 10/4 = 2.5$:


# %%
def layer_norm(
    x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)  # biased: divide by d
    return gamma * (x - mu) / torch.sqrt(var + eps) + beta


v = torch.tensor([2.0, -1.0, 3.0, 0.0])
eps = 1e-5
print(
    f"mean {v.mean().item():.4f}   biased variance {v.var(unbiased=False):.4f}"
)
print("by hand:           ", layer_norm(v, torch.ones(4), torch.zeros(4)))
torch_ln = nn.LayerNorm(4, eps=eps)
print("torch.nn.LayerNorm:", torch_ln(v).detach())
# a token's own offset and size are gone: v and 3v + 5 come out the same
moved = layer_norm(3 * v + 5, torch.ones(4), torch.zeros(4))
print("3v + 5, by hand:   ", moved)

# %% [markdown]
# **A common pitfall.** A widely copied way to write layer normalisation is
# `(x - mean) / (x.std() + eps)`; the Annotated Transformer (Harvard NLP) writes its `LayerNorm`
# this way, for instance. It looks like the formula but is a different function:
# `torch.Tensor.std` is the **unbiased** standard deviation (divide by $d - 1$), and $\varepsilon$
# is added to the standard deviation instead of the variance. Its output for our vector:


# %%
def layer_norm_std_eps(x: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """The pitfall (not what PyTorch computes): unbiased std, eps added
    to it."""
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps)


std_out = layer_norm_std_eps(v)
diff = (std_out - torch_ln(v)).abs().max().item()
print("(x - mean) / (std + eps):", std_out)
ratio = (torch_ln(v) / std_out)[0].item()
print(
    f"max |that - torch| = {diff:.4f};  ratio of the two = {ratio:.4f}"
    f" = sqrt(4/3) = {math.sqrt(4 / 3):.4f}"
)

# %% [markdown]
# The unbiased standard deviation is larger by $\sqrt{d/(d-1)}$, so every output shrinks by that
# factor: 13% for $d = 4$, much less for a real model's $d = 384$ or $512$, but never zero, so a
# pretrained model's weights would reproduce its outputs only
# approximately (0.004 apart for a random vector with $d = 384$, printed below). The misplaced
# $\varepsilon$ matters far more, when a vector has almost no spread. Shrink the same vector a
# thousandfold:

# %%
rows = []
for name, t in (
    ("[2, -1, 3, 0]", v),
    ("[2, -1, 3, 0] / 1000", v / 1000),
    ("random, d=384", torch.randn(384, generator=g)),
):
    ln_t = nn.LayerNorm(t.numel(), eps=eps)
    d_std = (layer_norm_std_eps(t) - ln_t(t)).abs().max().item()
    rows.append((name, d_std))
display(
    Table(
        ["input", "max |std+eps - torch|"],
        rows,
        formats={"max |std+eps - torch|": ".4f"},
    )
)
tiny_torch = nn.LayerNorm(4, eps=eps)(v / 1000).detach()
tiny_std = layer_norm_std_eps(v / 1000)
print("tiny vector, torch:   ", tiny_torch)
print("tiny vector, std+eps: ", tiny_std)
print(f"ratio: {(tiny_std / tiny_torch)[0]:.2f}")

# %% [markdown]
# For the tiny vector the two versions differ by a factor of almost 2, because
# $\sqrt{\sigma^2 + \varepsilon}$ is dominated by $\varepsilon$ while $\sigma + \varepsilon$ is
# not. PyTorch's behaviour is the one we want: its gain $1/\sqrt{\sigma^2 + \varepsilon}$ can
# never exceed $1/\sqrt{\varepsilon} \approx 316$, so a vector that is nearly constant (say, small
# noise around one value) is not blown up to full size. With $\sigma + \varepsilon$ the gain can
# reach $1/\varepsilon = 100{,}000$. Vectors of 384 random numbers with a shrinking spread (their
# standard deviation) show the difference:

# %%
rows = []
for spread in (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6):
    t = spread * torch.randn(384, generator=g)
    out_torch = nn.LayerNorm(384, eps=eps)(t).detach()
    out_std = layer_norm_std_eps(t)
    rows.append((spread, out_torch.std().item(), out_std.std().item()))
Table(
    ["spread", "output std, torch", "std+eps"],
    rows,
    formats={"spread": ".0e", "output std, torch": ".2f", "std+eps": ".2f"},
)

# %% [markdown]
# With $\sigma + \varepsilon$ a spread down to about $10^{-4}$ comes out at nearly unit size, and
# half of it at $10^{-5}$; with $\sqrt{\sigma^2 + \varepsilon}$ only a spread of about $10^{-2}$
# or more (a few times $\sqrt{\varepsilon} \approx 0.003$) does.
#
# The package's `LayerNorm` is the function `layer_norm` above as a module: $\gamma$ and $\beta$
# become parameters, called `weight` and `bias` like PyTorch's so that state dicts load across
# (source folded below: apart from checks of its input, `forward` is the three lines of
# `layer_norm`). With random $\gamma$, $\beta$ and a batch of
# sequences it matches `torch.nn.LayerNorm`:

# %%
show_source(LayerNorm)

# %%
ln_ours, ln_torch = LayerNorm(64), nn.LayerNorm(64)
with torch.no_grad():
    ln_ours.weight.copy_(torch.randn(64, generator=g))
    ln_ours.bias.copy_(torch.randn(64, generator=g))
ln_torch.load_state_dict(ln_ours.state_dict())
batch = 3 * torch.randn(2, 7, 64, generator=g) + 1
err = (ln_ours(batch) - ln_torch(batch)).abs().max().item()
print(f"max |package - torch| on a (2, 7, 64) batch: {err:.1e}")

# %%
plain = LayerNorm(64)(batch)  # gamma = 1, beta = 0
mean_0 = plain.mean(-1).abs().max() < 1e-5
var_1 = (plain.var(-1, unbiased=False) - 1).abs().max() < 1e-3
print("gamma = 1, beta = 0: every vector has mean 0:", bool(mean_0))
print("                     and variance 1:", bool(var_1))

# %% [markdown]
# Layer normalisation is not batch normalisation, the standard in image models, although both
# subtract a mean and divide by a standard deviation. They average over different numbers
# (Fig. 6.4):

# %% tags=["hide-input"] caption="A batch drawn as a grid of token vectors (rows) by features (columns). Layer normalisation computes its mean and variance over one row, one token's own features; batch normalisation over one column, one feature across every token in the batch." alt="Two 6 by 6 grids side by side. In the left grid, titled LayerNorm, the second row is shaded pink; the label below says: one token, mean and variance over its features. In the right grid, titled BatchNorm, the third column is shaded pink; the label says: one feature, mean and variance over the whole batch."
norm_axes()
plt.show()

# %% [markdown]
# So with layer normalisation a token's result does not depend on which other sentences share the
# batch, or on the batch size; training and inference compute the same thing, and there are no
# running statistics to keep. To see it, normalise a batch of 6 token vectors, then replace the
# other 5 and normalise again:

# %%
tokens = torch.randn(6, 8, generator=g)
others_replaced = tokens.clone()
others_replaced[1:] = 3 * torch.randn(5, 8, generator=g) + 2
for name, norm in (
    ("LayerNorm", nn.LayerNorm(8)),
    ("BatchNorm1d", nn.BatchNorm1d(8)),  # training mode: batch statistics
):
    same = torch.allclose(norm(tokens)[0], norm(others_replaced)[0], atol=1e-6)
    print(f"{name:11}: token 0 unchanged when the others change: {same}")

# %% [markdown]
# ## Where does the normalisation go? Post-norm and pre-norm
#
# A Transformer layer wraps each sub-layer (attention, feed-forward) in a residual connection *and*
# a layer norm. There are two ways to combine them:
#
# * **post-norm** (the 2017 paper, BERT): the norm after the residual sum,
#   $x \leftarrow \operatorname{LN}(x + f(x))$;
# * **pre-norm** (GPT-2 and nearly every large model since): the norm on the branch,
#   $x \leftarrow x + f(\operatorname{LN}(x))$, and one final norm after the last layer.
#
# Side by side in Fig. 6.5, for one sub-layer $f$ (with dropout on its output, which the last
# section of the chapter explains), with the residual stream drawn as the thick grey line:

# %% tags=["hide-input"] caption="One sub-layer with its residual connection, post-norm (left) and pre-norm (right). In post-norm the layer norm sits on the stream, after the addition; in pre-norm it sits on the branch, before the sub-layer, and the stream itself is not normalised inside the layer (only once, after the last layer of the stack)." alt="Two diagrams side by side, each with a thick vertical grey line from x at the bottom to out at the top. Left, post-norm: a branch leaves the line to a yellow box 'sublayer + dropout' and returns to a plus sign on the line, followed by a pink LayerNorm box on the line itself, labelled LN(x + f(x)). Right, pre-norm: the branch goes through a pink LayerNorm box and then the yellow sublayer box before returning to the plus sign; nothing else is on the line, labelled x + f(LN(x)), with the note: the stream is not normalised here."
norm_placement()
plt.show()

# %% [markdown]
# Written out for one sub-layer `f` and its norm `ln`, each placement is one line, and a layer
# applies it twice, once with attention and once with the feed-forward network. The package's
# `EncoderLayer`, the layer chapter 07 stacks into the encoder, does exactly that, and this
# chapter borrows it for its experiments: `EncoderLayer(d_model, num_heads, d_ff, dropout,
# norm_first)` builds a chapter 05 `MultiHeadAttention` with `num_heads` heads as `self_attn`, a
# `PositionwiseFeedForward(d_model, d_ff)` as `ff`, and `norm1` and `norm2`, their norms; it
# passes `dropout` to the attention and to the FFN, and `norm_first` picks the variant. With
# dropout off, our two functions,
# each applied twice, reproduce it:


# %%
SubLayer = Callable[[torch.Tensor], torch.Tensor]  # attention or FFN


def post_norm(x: torch.Tensor, f: SubLayer, ln: nn.Module) -> torch.Tensor:
    return ln(x + f(x))


def pre_norm(x: torch.Tensor, f: SubLayer, ln: nn.Module) -> torch.Tensor:
    return x + f(ln(x))


def attention_of(layer: EncoderLayer) -> SubLayer:
    """The layer's attention as a function of x alone."""
    return lambda x: layer.self_attn(x)[0]  # it returns (output, weights)


torch.manual_seed(0)
xl = torch.randn(2, 5, 16, generator=g)
for norm_first, place in ((False, post_norm), (True, pre_norm)):
    layer = EncoderLayer(
        d_model=16, num_heads=2, d_ff=64, dropout=0.0, norm_first=norm_first
    )
    attn = attention_of(layer)
    ours = place(place(xl, attn, layer.norm1), layer.ff, layer.norm2)
    same = torch.allclose(ours, layer(xl), atol=1e-6)
    print(
        f"{place.__name__}, twice: equals",
        f"EncoderLayer(norm_first={norm_first}) to 1e-6: {same}",
    )

# %% [markdown]
# `EncoderLayer.forward` applies the one-line placement of its variant twice, plus dropout on each
# branch. (Its `mask` argument hides positions, as in chapter 04, and chapter 08 builds padding
# and causal masks; `cache` reuses keys and values during generation, chapter 10.) `_sa` also
# keeps the attention weights for inspection (PyTorch's fused attention kernel does not return
# them, so then none are kept):

# %%
show_source(EncoderLayer.forward)

# %% [markdown]
# The attention branch goes through `_sa`, which applies attention and then `dropout1` to its
# output, as `dropout2` does for the feed-forward branch.

# %%
show_source(EncoderLayer._sa)

# %% [markdown]
# What changes? In post-norm the stream is renormalised after every sub-layer. At initialisation
# ($\gamma = 1$, $\beta = 0$) every vector therefore leaves a layer with the same length
# $\sqrt{d}$; once $\gamma$ and $\beta$ are trained, with whatever lengths they set. The path from
# a layer to the output passes through all later layer norms. In pre-norm the stream is never
# normalised inside the stack (only once, after the last layer): each layer *adds* its contribution, and the output of the stack is the input plus
# the sum of all contributions, so every layer has an identity path to the output, as in the
# residual experiment above. For comparison, a third stack has no layer norms at all (the norms of
# pre-norm layers replaced by `nn.Identity`). The mean length of the token vectors, 24 layers,
# $d = 32$, at initialisation:


# %%
def stream_norms(
    placement: str, n_layers: int = 24, d_model: int = 32
) -> tuple[list[float], list[float]]:
    """Mean length of the token vectors entering each layer and leaving
    the last one, and of what each layer adds to them (output - input),
    for placement "post", "pre" or "none"."""
    torch.manual_seed(0)
    layers = [
        EncoderLayer(
            d_model=d_model,
            num_heads=2,
            d_ff=4 * d_model,
            dropout=0.0,
            norm_first=placement != "post",
        )
        for _ in range(n_layers)
    ]
    if placement == "none":
        for layer in layers:
            layer.norm1, layer.norm2 = nn.Identity(), nn.Identity()
    h = torch.randn(4, 8, d_model, generator=torch.Generator().manual_seed(1))
    norms, added = [h.norm(dim=-1).mean().item()], []
    with torch.no_grad():
        for layer in layers:
            h, h_in = layer(h), h
            norms.append(h.norm(dim=-1).mean().item())
            added.append((h - h_in).norm(dim=-1).mean().item())
    return norms, added


streams, added = {}, {}
for p in ("none", "post", "pre"):
    streams[p], added[p] = stream_norms(p)
shown = {"no norm": "none", "post-norm": "post", "pre-norm": "pre"}
display(
    Table(
        ["layers passed", *shown],
        [
            (i, *(streams[p][i] for p in shown.values()))
            for i in range(0, 25, 4)
        ],
        formats=dict.fromkeys(shown, ".2f"),
    )
)
print(f"sqrt(32) = {math.sqrt(32):.2f}")
display(
    Table(
        ["", "layer 1", "layer 24"],
        [
            (name, added[p][0], added[p][-1])
            for name, p in (("no norm", "none"), ("pre-norm", "pre"))
        ],
        formats={"layer 1": ".2f", "layer 24": ".2f"},
        caption="what a layer adds to the stream (mean length)",
    )
)

# %% tags=["remove-cell"]
# Post-norm's vectors have length sqrt(d) after every layer; pre-norm's
# stream grows, and the stream without norms grows faster still.
assert all(abs(n - math.sqrt(32)) < 1e-3 for n in streams["post"][1:])
assert streams["pre"][-1] > 1.5 * streams["pre"][0]
assert streams["none"][-1] > 1.5 * streams["pre"][-1]

# %% [markdown]
# Without any norm the stream grows by a factor of 1.1 to 1.5 every 4 layers, four-fold over 24,
# because each layer's contribution is computed from the stream it reads and grows with it (from
# 1.69 at layer 1 to 8.02 at layer 24). Pre-norm's stream grows too, but each branch reads a
# normalised input, so each contribution stays about the same size (1.63 and 2.04) and the
# growth is much slower: 11.66 after 24 layers, against 23.53 without norms. Post-norm's vectors all have
# length $\sqrt{32} = 5.66$ after every layer.
#
# Why does the placement matter for training? Post-norm is known to be touchy. The 2017 paper
# trains with a learning-rate **warmup** (4000 steps of a linearly growing learning rate), as does
# BERT, and without one deep post-norm models train much worse or not at all (Xiong et al., 2020,
# *On Layer Normalization in the Transformer Architecture*; Liu et al., 2020b, *Understanding the
# Difficulty of Training Transformers*). GPT-2 moved the norm onto the branch, "similar to a
# pre-activation residual network" (He et al., 2016) in its paper's words, without giving another
# reason. The placement was not new: Google's tensor2tensor code already used it for translation
# in 2018, and Baevski and Auli (2019, *Adaptive Input Representations for Neural Language
# Modeling*; first posted in 2018) in their language models. Later, Wang et al. (2019,
# *Learning Deep Transformer Models for Machine Translation*) argued that it is what lets deep
# Transformers train, and Xiong et al. (2020) showed that pre-norm is much less sensitive to
# warmup; large pre-norm models such as GPT-3 and LLaMA still use a short one.
#
# A small experiment shows the difference. Two 12-layer encoders ($d_\text{model} = 32$, 2 heads,
# no dropout), the same initial weights, the same batches, the same optimiser (Adam, learning rate
# $3\cdot10^{-3}$, no warmup) on a toy task that needs attention: output the input sequence of 8
# tokens (from a vocabulary of 12) reversed. The only difference is `norm_first`. Guessing gives
# a loss of $\ln 12 \approx 2.48$. The model has nothing beyond what the task needs (token
# embeddings plus learned position embeddings, the package's `EncoderLayer`s, and a linear
# read-out). Two controls go with it: the 12-layer model with no norms at all (its layers'
# norms replaced by `nn.Identity`, as in the stream table above), and both variants with only 3
# layers, to test whether depth is what makes post-norm hard to train. Along the way we record how
# alike the final token vectors of a fixed probe batch are: the mean cosine
# similarity over all pairs of tokens, which is 1 if every token ended up with the same vector.
# One run could be luck, so each model is trained five times, with five random seeds for the
# initial weights and the batches.
#
# The task's settings and three helpers are in the folded cell below: `reversal_batch` draws 32
# random sequences and their reversals, `mean_cosine_similarity` is the similarity measure, and
# `first_step_below_1` finds a run's first step with a loss below 1.

# %% tags=["hide-input"]
# the task's settings and three helpers
VOCAB, LENGTH, D_MODEL, LAYERS = 12, 8, 32, 12
SEEDS, STEPS = (0, 1, 2, 3, 4), 150


def reversal_batch(
    gen: torch.Generator, batch_size: int = 32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token sequences and, as targets, the same sequences
    reversed."""
    tokens = torch.randint(0, VOCAB, (batch_size, LENGTH), generator=gen)
    return tokens, tokens.flip(1)


probe, _ = reversal_batch(torch.Generator().manual_seed(123), batch_size=16)


def mean_cosine_similarity(h: torch.Tensor) -> float:
    """Mean cosine similarity over all pairs of distinct token vectors in
    ``h`` (..., d)."""
    u = F.normalize(h.reshape(-1, h.size(-1)), dim=-1)
    n = u.size(0)
    return ((u @ u.T).sum().item() - n) / (n * (n - 1))


def first_step_below_1(losses: list[float]) -> str:
    step = next((i + 1 for i, loss in enumerate(losses) if loss < 1), None)
    return "-" if step is None else str(step)


# %% [markdown]
# The model and the training loop:


# %%
class ReversalModel(nn.Module):
    """Embeddings + learned positions, ``layers`` encoder layers, a linear
    read-out per position. placement: "post", "pre" or "none" (no norms)."""

    def __init__(self, placement: str, layers: int = LAYERS) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Parameter(torch.randn(LENGTH, D_MODEL))
        d_ff = 4 * D_MODEL
        norm_first = placement != "post"
        self.layers = nn.ModuleList(
            EncoderLayer(
                d_model=D_MODEL,
                num_heads=2,
                d_ff=d_ff,
                dropout=0.0,
                norm_first=norm_first,
            )
            for _ in range(layers)
        )
        if placement == "none":
            for layer in self.layers:
                layer.norm1, layer.norm2 = nn.Identity(), nn.Identity()
        # pre-norm: one final norm
        pre = placement == "pre"
        self.norm = LayerNorm(D_MODEL) if pre else nn.Identity()
        self.head = nn.Linear(D_MODEL, VOCAB)

    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encode(tokens))


def train_reversal(
    placement: str,
    seed: int,
    steps: int = STEPS,
    warmup: int = 0,
    layers: int = LAYERS,
) -> tuple[list[float], dict[int, float]]:
    """Train a ``ReversalModel`` with Adam; return the loss of every step
    and {number of steps taken: similarity}."""
    torch.manual_seed(seed)  # the same initial weights for post- and pre-norm
    model = ReversalModel(placement, layers)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    # a linear warmup over `warmup` steps (exercise 3); none by default
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
    )
    gen = torch.Generator().manual_seed(seed)  # the same batches
    losses, similarity = [], {}
    for step in range(steps):
        if step % 5 == 0 or step < 5:
            with torch.no_grad():
                similarity[step] = mean_cosine_similarity(model.encode(probe))
        tokens, target = reversal_batch(gen)
        loss = F.cross_entropy(
            model(tokens).reshape(-1, VOCAB), target.reshape(-1)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        losses.append(loss.item())
    return losses, similarity


# %% [markdown]
# The 25 runs, and a table of when each run passed a loss of 1; for the 12-layer runs, how alike
# the token vectors were before training and after two steps, and the highest loss early and
# late:

# %% tags=["hide-input"]
# the 25 training runs, and the tables of what they measured
VARIANTS = {"post-norm": "post", "pre-norm": "pre", "no norm": "none"}
jobs = [(name, LAYERS, s) for name in VARIANTS for s in SEEDS]
jobs += [(name, 3, s) for name in ("post-norm", "pre-norm") for s in SEEDS]
runs = {}
for name, layers, s in jobs:
    runs[name, layers, s] = train_reversal(VARIANTS[name], s, layers=layers)

per_seed = [f"seed {s}" for s in SEEDS]
display(
    Table(
        ["", *per_seed],
        [
            (
                f"{layers} layers, {name}",
                *(first_step_below_1(runs[name, layers, s][0]) for s in SEEDS),
            )
            for name, layers, _ in jobs[:: len(SEEDS)]
        ],
        caption=(
            f"first step with a loss below 1 (-: not within {STEPS} steps)"
        ),
    )
)
per_run = {  # title: what to read off a run's (losses, similarities)
    "token similarity before training": lambda run: run[1][0],
    "token similarity after 2 steps": lambda run: run[1][2],
    "highest loss in the first 10 steps": lambda run: max(run[0][:10]),
    f"highest loss after step 100 (of {STEPS})": lambda run: max(
        run[0][100:STEPS]
    ),
}
for title, value in per_run.items():
    rows = [
        (
            f"{LAYERS} layers, {name}",
            *(value(runs[name, LAYERS, s]) for s in SEEDS),
        )
        for name in VARIANTS
    ]
    display(
        Table(
            ["", *per_seed],
            rows,
            formats=dict.fromkeys(per_seed, ".2f"),
            caption=title,
        )
    )

# %% tags=["hide-input"] caption="Five training runs per variant of a 12-layer encoder on sequence reversal, Adam at 3e-3 without warmup. Top: the training loss; pre-norm (orange) passes a loss of 1 after about 40 steps in every run, the model without norms (grey) a little later and less steadily (a spike at the start, noise near the end), post-norm (blue) much later or not at all. Bottom: how alike the final token vectors of a probe batch are, for post- and pre-norm; post-norm's become nearly identical within two steps." alt="Two stacked line plots sharing an x axis of training steps 0 to 150, five thin lines per variant. Top: cross-entropy; the lines start near 2.5, except the five grey no-norm lines, which jump to between about 4 and 6.5 at step 2 or 3 and are back near 2.5 by step 10; the five orange pre-norm lines fall steeply between steps 20 and 50 to near 0; the grey lines fall just after them, between steps 25 and 60, and grow noisy again after step 100, one rising to about 0.7 at the end; the blue post-norm lines stay near the dotted guessing line at 2.48 much longer: three fall between steps 60 and 100, one between 120 and 150, and one stays flat to the end. Bottom: mean cosine similarity of the blue and orange runs only; the blue lines jump to about 1 within two steps; four come down slowly as their runs start to learn, one stays at 1 to the end; the orange lines rise to about 0.9 by step 10 and fall to near 0 by step 40."
colors = {"no norm": "0.6", "post-norm": "tab:blue", "pre-norm": "tab:orange"}
with plt.rc_context({"font.size": 14, "legend.fontsize": 13}):
    fig, axes = plt.subplots(2, 1, figsize=(5.2, 8.0), sharex=True)
    for (name, layers, s), (losses, sim) in runs.items():
        if layers != LAYERS:
            continue
        label = name if s == SEEDS[0] else None
        axes[0].plot(
            range(1, STEPS + 1),
            losses,
            color=colors[name],
            lw=0.9,
            label=label,
        )
        if name != "no norm":  # the bottom panel: post- and pre-norm only
            axes[1].plot(
                list(sim),
                list(sim.values()),
                color=colors[name],
                lw=0.9,
                label=label,
            )
    axes[0].axhline(
        math.log(VOCAB),
        color="0.6",
        ls=":",
        lw=1,
        zorder=0,
        label=r"guessing ($\ln 12$)",
    )
    axes[0].set_ylabel("cross-entropy")
    axes[0].set_title("12-layer encoder, Adam 3e-3, no warmup")
    axes[1].set_ylabel("mean cosine similarity")
    axes[1].set_title("how alike the final token vectors are")
    axes[1].set_xlabel("training step")
    axes[0].set_ylim(-0.1, 7.4)
    axes[1].set_ylim(-0.05, 1.3)
    axes[0].legend(loc="upper right")
    axes[1].legend(loc="upper center", ncol=2)
    fig.tight_layout()
    plt.show()

# %% [markdown]
# The first table gives the steps, and the top panel of Fig. 6.6 shows the same picture: pre-norm passes a
# loss of 1 at step 36 to 44 in all five runs. Post-norm passes a loss of 1 about twice as late in
# three runs (step 81 to 83), more than three times as late in a fourth (138), and never leaves the
# plateau of guessing within 150 steps in the fifth. The controls say more. With 3 layers the
# gap is gone: the two placements pass a loss of 1 within a few steps of each other in every run
# (post-norm at step 33 to 38, pre-norm at 36 to 42): in this experiment, depth is what separates the two placements.
#
# The 12-layer model without any norm (grey in the top panel of Fig. 6.6) learns in every run, at
# step 42 to 55, later than pre-norm in each, but less steadily. In its first 10 steps its loss
# jumps to between 3.80 and 6.45, far above guessing, where pre-norm's stays at 2.70 or below; and
# once it has learned, its loss grows noisy again: its highest loss after step 100 is 0.11 to 0.72,
# against at most 0.02 for pre-norm. In these runs the residual stack trains even without any
# norm; the norms in the pre-norm position make it faster and steadier, and
# in the post-norm position they slow it down. All these runs share one learning rate,
# $3\cdot10^{-3}$: at a smaller one post-norm's first steps would be smaller too, and these runs do not
# show how it would fare then.
#
# The bottom panel of Fig. 6.6 shows what happens first. Before training, post-norm's final token
# vectors have a similarity of 0.42 to 0.55; after two full-size Adam steps they are nearly all the
# same vector (0.97 to 1.00), whatever the token and its position. A read-out that sees the same
# vector everywhere can only predict the average, which is guessing, and the model has to
# find its way out of that state before it can learn. Pre-norm's vectors also drift together at
# first (0.22 to 0.35 before training, 0.67 to 0.77 after two steps, close to 0.9 by step
# 10), but they come apart again
# within about 40 steps, as it learns. Why exactly pre-norm recovers so much faster this
# experiment does not show; its identity paths, which carry each token's input embedding
# unchanged to the final norm, are a likely part of it.
#
# This fits the analyses cited above: in post-norm, the stack amplifies early parameter updates
# (Liu et al., 2020b), so the first steps must be small, and a warmup makes them small
# (exercise 3). A warmup also has a second job: in the first steps Adam's estimate of each
# gradient's variance rests on a handful of gradients, so its step sizes are unreliable (Liu et
# al., 2020a, *On the Variance of the Adaptive Learning Rate and Beyond*, who show it on a
# Transformer for translation). Both variants here use the same Adam without warmup, so that
# reason alone cannot explain the gap between them; but it may matter more for post-norm, whose
# stack amplifies every early update, and this experiment does not tell the two causes apart.
#
# Pre-norm's forgiveness has a price. Its stream grows (from 5.82 to 11.66 over 24 layers in the
# stream table above, at initialisation) while each layer's contribution stays about the same size (1.63 at layer
# 1, 2.04 at layer 24), so every later layer changes a smaller share of the stream. Liu et al. (2020b) describe the trade-off: a heavy
# dependence of each layer's output on its branch, as in post-norm, makes training unstable, yet a
# light one, as in pre-norm, "limits the model potential and leads to inferior trained models".
# Takase et al. (2022, *On Layer Normalizations and Residual Connections in Transformers*) note
# that post-norm has consistently performed better than pre-norm in relatively shallow models
# (e.g. six or fewer layers). The
# 3-layer runs above do not contradict that: there the two placements trained about equally
# fast. The original Transformer and BERT are post-norm; pre-norm
# is the more forgiving choice.
#
# ## Where dropout sits
#
# Both variants regularise with **dropout on each sub-layer's output, before it is added to the
# stream**: `x + dropout(f(LN(x)))` in pre-norm, `LN(x + dropout(f(x)))` in post-norm (in the
# listings above, `dropout1` inside `_sa` and `dropout2`). Inside the sub-layers there can be
# more: on the attention weights (BERT, GPT-2 and our layers) and, in our layers as in the
# original tensor2tensor code and the Annotated Transformer, on the feed-forward network's hidden
# layer; BERT and GPT-2 do not drop that one. Inside the layers the
# stream itself is never dropped; the models apply dropout to it once, to the embeddings that
# start it (the 2017 paper and GPT-1 say so; BERT's code and Hugging Face's GPT-2 do the same).
# An extreme test shows it: with dropout probability 1 every branch's output is zeroed in
# training mode, so a pre-norm layer must return
# its input unchanged, while in evaluation mode dropout is off and the layer changes its input.

# %%
torch.manual_seed(0)
drop_all = EncoderLayer(
    d_model=16, num_heads=2, d_ff=64, dropout=1.0, norm_first=True
)
xd = torch.randn(2, 5, 16, generator=g)
train_out = drop_all.train()(xd)
eval_out = drop_all.eval()(xd)
print(
    "training mode, dropout 1.0: output == input:", torch.equal(train_out, xd)
)
print("evaluation mode: output == input:", torch.equal(eval_out, xd))

# %% [markdown]
# ## Summary
#
# * The feed-forward network transforms each position on its own: widen, ReLU or GELU, narrow.
#   Each hidden unit is a key that fires on a pattern and a value it then adds. The FFN holds two
#   thirds of an encoder layer's or a GPT block's parameters (half of a decoder layer's), and
#   45.54 % of GPT-2 small, whose token embeddings hold 31.02 %.
# * Residual connections give the gradient an identity path. A plain 30-block stack with PyTorch's
#   default initialisation loses its gradient ($4.4 \times 10^{-21}$ at block 1) and forgets its input: its
#   weights shrink a vector by $\sqrt{1/18} \approx 0.236$ per block by the variance argument
#   (with zero biases the length shrinks by 0.230 per block), while the biases' part of the
#   output stays. He initialisation restores the gradient but not the distinction between
#   inputs, which ReLU layers drive towards parallel. The residual stack with PyTorch's default
#   initialisation keeps the gradient and much of the distinction (similarity 0.04 in, 0.42
#   after 30 blocks); with He initialisation its
#   stream grows from 8.05 to $1.9 \times 10^{5}$ and its two outputs end up alike too (0.87).
# * Layer normalisation rescales each token's vector over its own features, with the biased
#   variance and $\varepsilon$ inside the square root; the `std + eps` variant is a different
#   function and does not reproduce PyTorch's numbers. Unlike batch normalisation it never looks at
#   the other tokens of the batch.
# * Post-norm renormalises the stream after every sub-layer; pre-norm normalises only the branch
#   input, lets the stream grow slowly and keeps an identity path to the output. On the reversal
#   task, without warmup, the 12-layer post-norm encoder's token vectors collapsed to nearly one
#   vector within two Adam steps in all five runs, and it stayed on the plateau of guessing far
#   longer than pre-norm, which learned within 44 steps in every run. With 3 layers the gap
#   disappeared; with no norms at all the 12-layer model learned too, later than pre-norm and
#   sooner than post-norm, but less stably: its loss spiked in the first steps and grew noisy
#   again late in training.
# * Dropout acts on each sub-layer's output before it joins the residual stream; inside the layers
#   the stream itself is never dropped.
#
# Chapter 07 stacks these layers into the encoder, the decoder (whose layers add a second
# attention) and the full Transformer.
#
# ## Exercises
#
# **1. RMSNorm.** Many recent models (LLaMA, Mistral) use RMSNorm: no mean subtraction and no
# $\beta$, $\operatorname{RMSNorm}(x) = \gamma \odot x / \sqrt{\operatorname{mean}(x^2) + \varepsilon}$.
# Implement it and compare it with `torch.nn.RMSNorm` on a random batch. Then predict: for which
# input vectors does it give the same result as `LayerNorm` with $\gamma = 1$, $\beta = 0$? Check
# your prediction. (Chapter 11 meets RMSNorm again, inside a real model.)


# %% tags=["solution"]
def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    return weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


xr = torch.randn(3, 5, 16, generator=g) + 0.5
gamma = torch.rand(16, generator=g) + 0.5
ref = nn.RMSNorm(16, eps=1e-6)
with torch.no_grad():
    ref.weight.copy_(gamma)
rms_gap = (rms_norm(xr, gamma) - ref(xr)).abs().max()
print("ours vs torch.nn.RMSNorm, within 1e-6:", bool(rms_gap < 1e-6))
ones = torch.ones(16)
raw_gap = (rms_norm(xr, ones, eps=1e-5) - LayerNorm(16)(xr)).abs().max()
print(f"RMSNorm vs LayerNorm on the batch: max difference {raw_gap:.2f}")
centred = xr - xr.mean(-1, keepdim=True)
centred_gap = (
    rms_norm(centred, ones, eps=1e-5) - LayerNorm(16)(centred)
).abs()
print("on mean-0 vectors, within 1e-5:", bool(centred_gap.max() < 1e-5))

# %% [markdown] tags=["solution"]
# Our function matches `torch.nn.RMSNorm`. It agrees with `LayerNorm` exactly when the vector
# already has mean 0: then $\operatorname{mean}(x^2)$ *is* the biased variance, and subtracting the
# mean changes nothing. On the raw batch (whose vectors have means around 0.5) the two differ
# clearly. Dropping the mean and $\beta$ saves a little computation, and in practice RMSNorm
# trains about as well (Zhang and Sennrich, 2019, *Root Mean Square Layer Normalization*).

# %% [markdown]
# **2. Predict the vanishing gradient.** The variance argument in the residual section says that
# the weights of a default-initialised Linear–ReLU–Linear block scale a vector's size by
# $\sqrt{1/18}$. Backwards, the same argument applies to the gradient that one block passes to
# the block below it: the gradient of the loss with respect to the block's input. Predict the
# factor by which that gradient shrinks per block in the plain 30-block stack, then measure it
# (call `retain_grad()` on each block's input before the backward pass). Does the factor depend
# on the width $d$? Predict, then measure at $d = 16$, $64$ and $256$. Finally compare it with the
# factor per block of the gradients of $W_1$ in `grads_plain`, the quantity plotted in Fig. 6.3.


# %% tags=["solution"]
def backward_factors(width: int, x: torch.Tensor) -> tuple[float, float]:
    """Factor per block, in the plain default-init stack, of the gradient
    with respect to each block's input and of the gradient of its W1."""
    torch.manual_seed(0)
    stack = [PositionwiseFeedForward(width, 4 * width) for _ in range(depth)]
    h = x.clone().requires_grad_()
    block_inputs = []
    for block in stack:
        h.retain_grad()
        block_inputs.append(h)
        h = block(h)
    h.pow(2).mean().backward()
    to_input = [t.grad.double().norm().item() for t in block_inputs]
    of_w1 = [b.linear1.weight.grad.double().norm().item() for b in stack]

    def per_block(norms: list[float]) -> float:
        return (norms[0] / norms[-1]) ** (1 / (depth - 1))

    return per_block(to_input), per_block(of_w1)


predicted = math.sqrt(1 / 18)
print(f"predicted factor per block: sqrt(1/18) = {predicted:.3f}")
rows = []
for width in (16, 64, 256):
    x_w = inputs if width == d else torch.randn(32, width, generator=g)
    to_input, of_w1 = backward_factors(width, x_w)
    rows.append((f"d = {width}", to_input, of_w1))
display(
    Table(
        ["measured", "gradient at the input", "gradient of W1"],
        rows,
        formats={"gradient at the input": ".3f", "gradient of W1": ".3f"},
    )
)
from_block_30 = grads_plain[-1] * predicted ** (depth - 1)
print("d = 64, gradient of W1 at block 1:")
print(
    f"  predicted from block 30's {from_block_30:.1e},",
    f"measured {grads_plain[0]:.1e},",
    f"{grads_plain[0] / from_block_30:.1f} times the prediction",
)

# %% [markdown] tags=["solution"]
# The gradient passed from block to block shrinks by the predicted factor at every width, to
# within 0.006 of $\sqrt{1/18} = 0.236$: the $d$ in the fan-in of the two layers cancels, so the
# argument does not depend on it. It depends only on the initialisation's variance, which is why
# He initialisation, which sets that variance to keep the size, removes the decay.
#
# The gradient of $W_1$ is that signal times the block's input, summed over the 32 rows, so its
# factor per block also depends on how the inputs of block 1 and block 30 differ (block 1 reads
# the raw, unrelated rows; block 30 reads the biases' part, rows that are nearly all alike), and
# the variance argument does not capture that. Its factor is close to the prediction too, but it
# varies more from stack to stack (0.236 to 0.253 in these three). At $d = 64$ it is 0.246
# instead of 0.236, and that small excess, compounded over 29 blocks, puts block 1's gradient a
# factor of 3.4 above the prediction ($4.4 \times 10^{-21}$ against $1.3 \times 10^{-21}$), across more than 17 orders of
# magnitude.

# %% [markdown]
# **3. Post-norm with a warmup.** Train the post-norm encoder again on the same five seeds for
# 150 steps, now with the learning rate reached by a linear warmup over the first 50 steps.
# Predict first: does it learn in every run? Sooner or later than without warmup? Do its token
# vectors still collapse, after two steps and on the way to the full rate at step 50?

# %% tags=["solution"]
warm = {
    (p, s): train_reversal(p, s, warmup=50)
    for p in ("post", "pre")
    for s in SEEDS
}
rows = []
for name, table in (
    ("post-norm, no warmup", {s: runs["post-norm", LAYERS, s] for s in SEEDS}),
    ("post-norm, warmup over 50", {s: warm["post", s] for s in SEEDS}),
    ("pre-norm, no warmup", {s: runs["pre-norm", LAYERS, s] for s in SEEDS}),
    ("pre-norm, warmup over 50", {s: warm["pre", s] for s in SEEDS}),
):
    rows.append((name, *(first_step_below_1(table[s][0]) for s in SEEDS)))
display(
    Table(
        ["", *per_seed],
        rows,
        caption="first step with a loss below 1",
    )
)
rows = [
    (f"after {step} steps", *(warm["post", s][1][step] for s in SEEDS))
    for step in (0, 2)
]
# the rate reaches its full size at step 50: the highest similarity on the
# way up
cells = [
    max(v for t, v in warm["post", s][1].items() if t <= 50) for s in SEEDS
]
rows.append(("highest, steps 0 to 50", *cells))
display(
    Table(
        ["", *per_seed],
        rows,
        formats=dict.fromkeys(per_seed, ".2f"),
        caption="post-norm with warmup, token similarity",
    )
)

# %% [markdown] tags=["solution"]
# With warmup post-norm learns in every run, and in each one sooner than without it (the
# no-warmup row is the experiment above: same seeds, same 150 steps). After two steps of a
# small learning rate its token vectors are hardly more alike than at the start (0.43 to 0.60,
# against 0.97 to 1.00 without warmup). Warmup delays the rise rather than preventing it: as the
# rate grows, the highest similarity measured up to step 50 (every 5 steps) lies between 0.79
# and 0.97, no higher than the no-warmup runs' after two steps, and still every run passes a loss of 1 between steps 59
# and 65. The same warmup also slows pre-norm down: with it pre-norm passes a loss of 1 at step 51
# to 57 instead of 36 to 44, 13 to 17 steps later, and post-norm with the same warmup is still 7
# to 10 steps behind it. In these runs warmup fixed post-norm's start; pre-norm did not need the
# fix.
