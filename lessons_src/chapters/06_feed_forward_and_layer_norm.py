# %% [markdown]
# # 06 — Feed-forward, residual connections, layer normalisation
#
# Attention lets every position *gather* information from the others. A Transformer layer needs
# three more pieces around it:
#
# * a **position-wise feed-forward network** that *transforms* each position's vector on its own;
# * **residual connections**, $x + \operatorname{sublayer}(x)$, so that a deep stack of layers can
#   still be trained;
# * **layer normalisation**, which keeps the scale of every vector under control.
#
# This chapter builds each of them on a small example, checks the package versions against
# PyTorch, and ends with the question of *where* the normalisation goes: after the residual sum
# (the original 2017 paper) or before the sub-layer (GPT-2 and most models since).

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course.attention import MultiHeadAttention
from transformer_course.diagrams import norm_placement
from transformer_course.layers import LayerNorm, PositionwiseFeedForward
from transformer_course.transformer import EncoderLayer
from transformer_course.utils import (
    count_parameters,
    progress,
    set_seed,
    show_source,
)

# the models of this chapter are tiny: one thread is enough
g = set_seed(0, num_threads=1)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## The position-wise feed-forward network
#
# $$\operatorname{FFN}(x) = \max(0,\; xW_1 + b_1)\,W_2 + b_2$$
#
# Two linear maps with a ReLU in between: the first widens the vector from $d_\text{model}$ to
# $d_\text{ff}$ numbers (4 times wider in the paper: 512 → 2048), the second brings it back. Take
# one 4-dimensional word vector and, to keep the arithmetic small, a hidden layer of width 2:

# %%
x = torch.tensor([0.5, -0.2, 0.1, 0.8])
# W1: (d_model=4, d_ff=2)
W1 = torch.tensor([[0.1, 0.2], [-0.1, 0.1], [0.3, -0.2], [0.2, 0.1]])
b1 = torch.tensor([0.01, 0.02])
# W2: (d_ff=2, d_model=4)
W2 = torch.tensor([[1.0, -0.5, 0.8, 0.2], [0.5, 0.3, -0.2, 0.4]])
b2 = torch.tensor([0.03, -0.01, 0.02, 0.01])

pre_activation = x @ W1 + b1
hidden = F.relu(pre_activation)
ffn_out = hidden @ W2 + b2
print("x W1 + b1:     ", pre_activation)
print("after the ReLU:", hidden)
print("FFN(x):        ", ffn_out)
# the first hidden unit, written out:
# 0.5*0.1 + (-0.2)*(-0.1) + 0.1*0.3 + 0.8*0.2 + 0.01
assert math.isclose(
    pre_activation[0].item(), 0.05 + 0.02 + 0.03 + 0.16 + 0.01, rel_tol=1e-6
)
assert torch.allclose(
    ffn_out, torch.tensor([0.38, -0.097, 0.204, 0.128]), atol=1e-6
)

# %% [markdown]
# Both hidden units are positive here, so the ReLU lets them through unchanged; for a negative
# pre-activation it would output 0 and that unit would contribute nothing.
#
# The package's `PositionwiseFeedForward` is the same computation with `nn.Linear` layers. One
# detail trips up everyone once: `nn.Linear(d_in, d_out)` stores its weight as a `(d_out, d_in)`
# matrix and computes `x @ weight.T + bias`, so our $W_1$ goes in transposed. (Its source, with
# the optional GELU, dropout and input checks, is folded here.)

# %% tags=["hide-input"]
show_source(PositionwiseFeedForward)

# %%
ffn = PositionwiseFeedForward(d_model=4, d_ff=2)
with torch.no_grad():
    ffn.linear1.weight.copy_(W1.T)
    ffn.linear1.bias.copy_(b1)
    ffn.linear2.weight.copy_(W2.T)
    ffn.linear2.bias.copy_(b2)
print(
    "linear1.weight:",
    tuple(ffn.linear1.weight.shape),
    " FFN(x):",
    ffn(x).detach(),
)
assert torch.allclose(ffn(x), ffn_out, atol=1e-7)

# %% [markdown]
# **Position-wise** means the *same* network is applied to every position separately: a sequence
# of shape `(batch, length, d_model)` goes in, every one of its `length` vectors is transformed on
# its own, nothing flows between positions. (Moving information between positions is attention's
# job.) So feeding one position alone gives the same result as feeding the whole sequence, and
# shuffling the positions just shuffles the outputs:

# %%
seq = torch.randn(2, 5, 4, generator=g)  # (batch, length, d_model)
out = ffn(seq)
perm = torch.tensor([3, 0, 4, 1, 2])
print("sequence in:", tuple(seq.shape), " out:", tuple(out.shape))
# one position alone
assert torch.allclose(out[:, 2], ffn(seq[:, 2]), atol=1e-7)
# shuffle in = shuffle out
assert torch.allclose(ffn(seq[:, perm]), out[:, perm], atol=1e-7)

# %% [markdown]
# Within a Transformer layer, most parameters live here. In the paper's base model
# ($d_\text{model} = 512$, $d_\text{ff} = 2048$, 8 heads) the feed-forward network of one layer has
# twice as many parameters as its attention:

# %%
n_attn = count_parameters(MultiHeadAttention(512, 8))
n_ffn = count_parameters(PositionwiseFeedForward(512, 2048))
print(
    f"attention {n_attn:,}   feed-forward {n_ffn:,}   "
    f"share of the FFN {n_ffn / (n_attn + n_ffn):.1%}"
)
assert n_attn == 4 * 512 * 512 + 4 * 512
assert n_ffn == 2 * 512 * 2048 + 2048 + 512
assert 0.66 < n_ffn / (n_attn + n_ffn) < 0.67

# %% [markdown]
# A whole model also has its embedding table, and for a small model that is large. GPT-2 small
# (12 layers, $d_\text{model} = 768$, $d_\text{ff} = 3072$, 50,257 tokens, 1,024 positions), counted
# from the same formulas (its layer norms add a few thousand more):

# %%
L, dm, vocab, ctx = 12, 768, 50_257, 1024
parts = {
    "feed-forward": L * (2 * dm * 4 * dm + 4 * dm + dm),
    "attention": L * (4 * dm * dm + 4 * dm),
    "embeddings": vocab * dm + ctx * dm,
}
total = sum(parts.values())
shares = ", ".join(
    f"{k} {v / 1e6:.1f} M ({v / total:.0%})" for k, v in parts.items()
)
print(shares, f"of {total / 1e6:.1f} M")
assert 0.45 < parts["feed-forward"] / total < 0.5
assert 0.3 < parts["embeddings"] / total < 0.35

# %% [markdown]
# BERT and GPT replace the ReLU with the GELU, $x\,\Phi(x)$ where $\Phi$ is the standard normal
# CDF: a smooth ReLU that lets small negative values through a little and has a gradient
# everywhere. In the package it is `PositionwiseFeedForward(..., activation="gelu")`.

# %%
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
gelu_min = F.gelu(xs).min().item()
x_min = xs[F.gelu(xs).argmin()].item()
print(f"GELU's minimum: {gelu_min:.4f} at x = {x_min:.2f}")
assert -0.18 < gelu_min < -0.16
assert torch.allclose(F.gelu(xs[-1:]), xs[-1:], atol=1e-3)

# %% [markdown]
# ## Layer normalisation
#
# Layer normalisation rescales each vector to mean 0 and variance 1 over its own features, then
# lets the model choose a new scale $\gamma$ and shift $\beta$ per feature:
#
# $$\operatorname{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta,
# \qquad \mu = \frac1d \sum_i x_i, \quad \sigma^2 = \frac1d \sum_i (x_i - \mu)^2 .$$
#
# Two details matter if the numbers are to match PyTorch (and every pretrained model): $\sigma^2$
# is the **biased** variance (divide by $d$, not $d-1$), and $\varepsilon$ sits **inside** the
# square root. By hand on the vector $[2, -1, 3, 0]$: the mean is 1, the squared
# deviations are $1, 4, 4, 1$, so $\sigma^2 = 10/4 = 2.5$:

# %%
v = torch.tensor([2.0, -1.0, 3.0, 0.0])
eps = 1e-5
mu = v.mean()
var = ((v - mu) ** 2).mean()  # biased: divide by d = 4
ours = (v - mu) / torch.sqrt(var + eps)
torch_ln = nn.LayerNorm(4, eps=eps)
print(f"mean {mu.item():.4f}   biased variance {var.item():.4f}")
print("by hand:           ", ours)
print("torch.nn.LayerNorm:", torch_ln(v).detach())
print("package LayerNorm: ", LayerNorm(4, eps=eps)(v).detach())
assert mu == 1 and var == 2.5
assert (ours - torch_ln(v)).abs().max() < 1e-6
assert (LayerNorm(4, eps=eps)(v) - torch_ln(v)).abs().max() < 1e-6

# %% [markdown]
# **A common pitfall.** A widely copied way to write layer normalisation is
# `(x - mean) / (x.std() + eps)`; the Annotated Transformer (Harvard NLP) writes its `LayerNorm`
# this way, for instance. It looks like the formula but is a different function:
# `torch.Tensor.std` is the **unbiased** standard deviation (divide by $d - 1$), and $\varepsilon$ is
# added to the standard deviation instead of the variance. Its output for our vector:


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
assert diff > 0.16 and math.isclose(ratio, math.sqrt(4 / 3), rel_tol=1e-4)

# %% [markdown]
# The unbiased standard deviation is larger by $\sqrt{d/(d-1)}$, so every output shrinks by that
# factor: 13% for $d = 4$, much less for a real model's $d = 384$ or $512$, but never zero, so a
# pretrained model's weights would not reproduce its outputs. The misplaced $\varepsilon$ matters
# when a vector has almost no spread: shrink the same vector a thousandfold and the two versions
# disagree completely, because $\sqrt{\sigma^2 + \varepsilon}$ is dominated by $\varepsilon$ while
# $\sigma + \varepsilon$ is not.

# %%
rows = []
for name, t in (
    ("[2, -1, 3, 0]", v),
    ("[2, -1, 3, 0] / 1000", v / 1000),
    ("random, d=384", torch.randn(384, generator=g)),
):
    ln_t = nn.LayerNorm(t.numel(), eps=eps)
    d_std = (layer_norm_std_eps(t) - ln_t(t)).abs().max().item()
    d_pkg = (LayerNorm(t.numel())(t) - ln_t(t)).abs().max().item()
    rows.append((name, d_std, d_pkg))
print(
    f"{'input':22s} {'max |std+eps - torch|':>21s}"
    f" {'max |package - torch|':>22s}"
)
for name, d_std, d_pkg in rows:
    pkg = "below 1e-6" if d_pkg < 1e-6 else d_pkg
    print(f"{name:22s} {d_std:21.4f} {pkg:>22}")
print("tiny vector, torch:   ", nn.LayerNorm(4, eps=eps)(v / 1000).detach())
print("tiny vector, std+eps: ", layer_norm_std_eps(v / 1000))
assert all(d_pkg < 1e-6 for _, _, d_pkg in rows)
assert rows[1][1] > 0.5 and rows[2][1] > 1e-4

# %% [markdown]
# The package's `LayerNorm` is the by-hand formula above (two lines: the mean, the biased
# variance) plus the learned $\gamma$ and $\beta$, called `weight` and `bias` like PyTorch's so
# that state dicts load across; its source is folded here. With random $\gamma$, $\beta$ and a batch
# of sequences it matches `torch.nn.LayerNorm`:

# %% tags=["hide-input"]
show_source(LayerNorm)

# %%
ln_ours, ln_torch = LayerNorm(64), nn.LayerNorm(64)
with torch.no_grad():
    ln_ours.weight.copy_(torch.randn(64, generator=g))
    ln_ours.bias.copy_(torch.randn(64, generator=g))
ln_torch.load_state_dict(ln_ours.state_dict())
batch = 3 * torch.randn(2, 7, 64, generator=g) + 1
err = (ln_ours(batch) - ln_torch(batch)).abs().max().item()
print(
    "max |package - torch| on a (2, 7, 64) batch:",
    "below 1e-6" if err < 1e-6 else err,
)
assert err < 1e-6
# gamma = 1, beta = 0: each vector has mean 0, variance 1
plain = LayerNorm(64)(batch)
assert plain.mean(-1).abs().max() < 1e-5
assert (plain.var(-1, unbiased=False) - 1).abs().max() < 1e-3
# no mixing across the batch
assert torch.allclose(ln_ours(batch)[1], ln_ours(batch[1:2])[0])

# %% [markdown]
# Unlike batch normalisation, nothing is averaged over the batch: each token is normalised on its
# own (the last assert), so the result does not depend on which other sentences share the batch or
# on the batch size, training and inference behave the same, and there are no running statistics.
#
# ## Residual connections
#
# A residual connection adds a sub-layer's input to its output: $y = x + f(x)$. The derivative is
# $\partial y / \partial x = I + \partial f / \partial x$: whatever $f$ does, the identity carries the
# gradient through unchanged. Without it, the gradient reaching the first layer of a deep stack is a
# product of one Jacobian per layer; if each one shrinks vectors a little, the product shrinks
# exponentially.
#
# The experiment: 30 feed-forward blocks stacked, once as $x \leftarrow f_\ell(x)$ and once as
# $x \leftarrow x + f_\ell(x)$, with identical (PyTorch default) initial weights. One backward pass
# of a simple loss, then the gradient norm of every block's first weight matrix.

# %%
depth, d = 30, 64


def ffn_stack_gradients(residual: bool) -> tuple[list[float], torch.Tensor]:
    """Gradient norm of each block's ``linear1.weight`` after one backward
    pass, and the output."""
    torch.manual_seed(0)  # the same weights for both stacks
    blocks = nn.ModuleList(
        PositionwiseFeedForward(d, 4 * d) for _ in range(depth)
    )
    h = inputs
    for block in blocks:
        h = h + block(h) if residual else block(h)
    h.pow(2).mean().backward()
    return [b.linear1.weight.grad.norm().item() for b in blocks], h.detach()


inputs = torch.randn(32, d, generator=g)
grads_plain, out_plain = ffn_stack_gradients(residual=False)
grads_res, out_res = ffn_stack_gradients(residual=True)
for layer in (0, 9, 19, 29):
    print(
        f"block {layer + 1:2d}: gradient norm without residuals "
        f"{grads_plain[layer]:.1e}, with {grads_res[layer]:.1e}"
    )

fig, ax = plt.subplots(figsize=(6.5, 3.6))
blocks_idx = range(1, depth + 1)
ax.semilogy(blocks_idx, grads_plain, "o-", label=r"plain: $x \leftarrow f(x)$")
ax.semilogy(
    blocks_idx, grads_res, "o-", label=r"residual: $x \leftarrow x + f(x)$"
)
ax.set_xlabel("block (1 = next to the input)")
ax.set_ylabel("gradient norm of $W_1$")
ax.set_title(f"{depth} feed-forward blocks, one backward pass")
ax.legend()
plt.show()

# %%
# first block: vanished vs. healthy
assert grads_plain[0] < 1e-10 < 1e-2 < grads_res[0]
# exponential decay towards the input
assert grads_plain[-1] > 1e10 * grads_plain[0]
# with residuals every block gets a similar gradient
assert max(grads_res) / min(grads_res) < 10
# The plain stack has forgotten its input: a completely different input
# gives the same output.
torch.manual_seed(0)
blocks = nn.ModuleList(PositionwiseFeedForward(d, 4 * d) for _ in range(depth))
h1, h2 = inputs, torch.randn(32, d, generator=g)
with torch.no_grad():
    for block in blocks:
        h1, h2 = block(h1), block(h2)
change = (h1 - h2).abs().max().item()
print(
    "plain stack: largest output change for a different input "
    f"is below 1e-6: {change < 1e-6}"
)
# float rounding, nothing more
assert torch.allclose(h1, out_plain) and change < 1e-6

# %% [markdown]
# Without residual connections the gradient at the first block is more than ten orders of magnitude
# smaller than at the last, and the plain stack's output no longer depends on its input. With
# residual connections every block gets a gradient of the same size.
#
# **How much of this is the initialisation?** A fair question, because PyTorch's default
# initialisation of `nn.Linear` draws weights with variance $1/(3\,\text{fan\_in})$. A
# Linear–ReLU–Linear block then scales the variance of its input by $\tfrac13 \cdot \tfrac12 \cdot
# \tfrac13 = \tfrac1{18}$ (the ReLU zeroes half), its size by $\sqrt{1/18} \approx 0.24$: thirty such
# blocks shrink a signal by $0.24^{30} \approx 10^{-19}$, forwards and backwards. (Exercise 2
# measures about 0.20 per block.) The control: the same plain stack with **He initialisation**,
# variance $2/\text{fan\_in}$ for the layer before the ReLU (to make up for the half it zeroes) and
# $1/\text{fan\_in}$ for the one after, zero biases, so that a block keeps the size of its input.
# We also feed each stack two unrelated inputs and measure how alike its two outputs are (mean
# cosine similarity over the 32 rows; for the two inputs themselves it is about 0).


# %%
def he_init_(block: PositionwiseFeedForward) -> PositionwiseFeedForward:
    # variance 2 / fan_in
    nn.init.kaiming_normal_(block.linear1.weight, nonlinearity="relu")
    # variance 1 / fan_in
    nn.init.kaiming_normal_(block.linear2.weight, nonlinearity="linear")
    nn.init.zeros_(block.linear1.bias)
    nn.init.zeros_(block.linear2.bias)
    return block


def stack_report(residual: bool, he: bool) -> tuple[list[float], float]:
    """Gradient norms of each block's W1 after one backward pass, and the
    cosine similarity of the outputs for two unrelated inputs."""
    torch.manual_seed(0)
    blocks = [PositionwiseFeedForward(d, 4 * d) for _ in range(depth)]
    blocks = [he_init_(b) for b in blocks] if he else blocks
    h, other = inputs, other_inputs
    for block in blocks:
        if residual:
            h, other = h + block(h), other + block(other)
        else:
            h, other = block(h), block(other)
    h.pow(2).mean().backward()
    grads = [b.linear1.weight.grad.norm().item() for b in blocks]
    cos = F.cosine_similarity(h, other, dim=-1).mean().item()
    return grads, cos


other_inputs = torch.randn(32, d, generator=g)
cos_in = F.cosine_similarity(inputs, other_inputs, dim=-1).mean().item()
print(f"two inputs: cosine similarity {cos_in:.2f}")
print(
    f"{'stack':34s} {'grad block 1':>13s} {'grad block 30':>14s}"
    f" {'outputs alike':>14s}"
)
report = {}
for name, residual, he in (
    ("plain, PyTorch default init", False, False),
    ("plain, He init", False, True),
    ("residual, PyTorch default init", True, False),
):
    report[name] = stack_report(residual, he)
    grads, cos = report[name]
    print(f"{name:34s} {grads[0]:13.1e} {grads[-1]:14.1e} {cos:14.2f}")

# %% tags=["remove-input"]
default_grads, default_cos = report["plain, PyTorch default init"]
assert default_grads[0] < 1e-10 and default_cos > 0.99
he_grads, he_cos = report["plain, He init"]
# He init: the gradient survives 30 blocks
assert he_grads[0] > 0.1 and max(he_grads) / min(he_grads) < 100
assert he_cos > 0.9  # ... but the two outputs are nearly parallel
assert report["residual, PyTorch default init"][1] < 0.7

# %% [markdown]
# So the vanishing gradient of the plain stack is mostly the initialisation's doing: with He
# initialisation block 1 receives a gradient as large as block 30's. What He initialisation does
# not fix is the second symptom: two unrelated inputs come out of thirty plain ReLU blocks almost
# parallel (similarity above 0.9), so the stack passes on little of what distinguished them. The
# residual stack, with the *default* initialisation, keeps both the gradient and the difference
# between the inputs, because each block only adds a change to a stream that still carries its
# input. That is the case for residual connections: they make a deep stack trainable without
# depending on a finely tuned initialisation, and they keep the input visible to every later layer.
# (He initialisation on the *residual* stack would make the stream grow by a factor of about
# $\sqrt2$ per block; deep residual models scale their branches down instead, GPT-2 for instance by
# $1/\sqrt{\text{number of layers}}$.)
#
# ## Where does the normalisation go? Post-norm and pre-norm
#
# A Transformer layer wraps each sub-layer (attention, feed-forward) in a residual connection *and*
# a layer norm. There are two ways to combine them:
#
# * **post-norm** (the 2017 paper, BERT): $x \leftarrow \operatorname{LN}(x + f(x))$, the norm after
#   the residual sum;
# * **pre-norm** (GPT-2 and nearly every large model since): $x \leftarrow x + f(\operatorname{LN}(x))$,
#   the norm on the branch, and one final LN after the last layer.
#
# Side by side, for one sub-layer $f$ (attention or feed-forward), with the residual stream drawn
# as the thick grey line:

# %%
norm_placement()
plt.show()

# %% [markdown]
# The package's encoder layer (chapter 07 assembles it) has both; its `forward` is exactly these
# two lines:

# %%
show_source(EncoderLayer.forward)

# %% [markdown]
# ### Where dropout sits
#
# Both variants regularise with **dropout on the sub-layer's output, before it is added to the
# stream**: `x + dropout(f(LN(x)))` in pre-norm, `LN(x + dropout(f(x)))` in post-norm. (Inside the
# sub-layers there is more: on the attention weights and on the feed-forward network's hidden
# layer.) The stream itself is never dropped. An extreme test shows it: with dropout probability 1
# every branch's output is zeroed in training mode, and a pre-norm layer must return its input
# unchanged, while in evaluation mode dropout is off and the layer changes its input.

# %%
torch.manual_seed(0)
drop_all = EncoderLayer(16, 2, 64, dropout=1.0, norm_first=True)
xd = torch.randn(2, 5, 16, generator=g)
train_out = drop_all.train()(xd)
eval_out = drop_all.eval()(xd)
print(
    "training mode, dropout 1.0: output == input:", torch.equal(train_out, xd)
)
eval_change = (eval_out - xd).abs().max().item()
print(f"evaluation mode: largest change {eval_change:.2f}")
assert torch.equal(train_out, xd) and (eval_out - xd).abs().max() > 0.1

# %% [markdown]
# What changes? In pre-norm the residual stream $x$ is never normalised: each layer *adds* its
# contribution, and the output of the stack is the input plus the sum of all contributions. Every
# layer therefore has an identity path to the output, as in the residual experiment above. In
# post-norm the stream is renormalised after every sub-layer, so every vector leaves a layer with
# the same length $\sqrt{d}$, and the path from a layer to the output passes through all later layer
# norms. A stack of 12 layers ($d = 32$) shows the first difference directly:


# %%
def stream_norms(
    norm_first: bool, n_layers: int = 12, d_model: int = 32
) -> list[float]:
    """Mean length of the token vectors entering each layer and leaving
    the last one."""
    torch.manual_seed(0)
    d_ff = 4 * d_model
    layers = [
        EncoderLayer(d_model, 2, d_ff, dropout=0.0, norm_first=norm_first)
        for _ in range(n_layers)
    ]
    h = torch.randn(4, 8, d_model, generator=torch.Generator().manual_seed(1))
    norms = [h.norm(dim=-1).mean().item()]
    with torch.no_grad():
        for layer in layers:
            h = layer(h)
            norms.append(h.norm(dim=-1).mean().item())
    return norms


post_norms, pre_norms = stream_norms(False), stream_norms(True)
print("layer:      ", " ".join(f"{i:5d}" for i in range(0, 13, 2)))
print("post-norm: ", " ".join(f"{n:5.2f}" for n in post_norms[::2]))
print("pre-norm:  ", " ".join(f"{n:5.2f}" for n in pre_norms[::2]))
# every layer's output: length sqrt(d)
assert all(abs(n - math.sqrt(32)) < 1e-3 for n in post_norms[1:])
# pre-norm's stream keeps growing
assert all(b > a for a, b in zip(pre_norms, pre_norms[1:]))

# %% [markdown]
# Why does that matter for training? Post-norm is known to be touchy: the original Transformer and
# BERT are trained with a learning-rate **warmup** (the paper: 4000 steps of linearly growing
# learning rate), and without one, deep post-norm models often fail to train at all. Pre-norm
# trains without a warmup, which is one reason GPT-2 and its successors switched.
#
# A small experiment shows it. Two 12-layer encoders ($d_\text{model} = 32$, 2 heads, no dropout),
# the same initial weights, the same batches, the same optimiser (Adam, learning rate
# $3\cdot10^{-3}$, no warmup) on a toy task that needs attention: output the input sequence of 8
# tokens (from 12) reversed. The only difference is `norm_first`. Guessing gives a loss of
# $\ln 12 \approx 2.48$. (The model is the smallest that can do the task: token embeddings plus
# learned position embeddings, the package's `EncoderLayer`s, and a linear read-out.) Along the
# way we record how similar the final token vectors of a fixed probe batch are to each other: the
# mean cosine similarity over all pairs of tokens, 1 if every token ended up with the same vector.

# %%
VOCAB, LENGTH, D_MODEL, LAYERS = 12, 8, 32, 12


class ReversalModel(nn.Module):
    """Embeddings + learned positions, ``LAYERS`` encoder layers, a linear
    read-out per position."""

    def __init__(self, norm_first: bool) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D_MODEL)
        self.pos = nn.Parameter(torch.randn(LENGTH, D_MODEL))
        d_ff = 4 * D_MODEL
        self.layers = nn.ModuleList(
            EncoderLayer(D_MODEL, 2, d_ff, dropout=0.0, norm_first=norm_first)
            for _ in range(LAYERS)
        )
        # pre-norm: one final norm
        self.norm = LayerNorm(D_MODEL) if norm_first else nn.Identity()
        self.head = nn.Linear(D_MODEL, VOCAB)

    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encode(tokens))


def reversal_batch(
    gen: torch.Generator, batch_size: int = 32
) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, VOCAB, (batch_size, LENGTH), generator=gen)
    return tokens, tokens.flip(1)


probe, _ = reversal_batch(torch.Generator().manual_seed(123), batch_size=16)


def mean_cosine_similarity(h: torch.Tensor) -> float:
    """Mean cosine similarity over all pairs of distinct token vectors in
    ``h`` (..., d)."""
    u = F.normalize(h.reshape(-1, h.size(-1)), dim=-1)
    n = u.size(0)
    return ((u @ u.T).sum().item() - n) / (n * (n - 1))


def train_reversal(
    norm_first: bool, steps: int = 100, lr: float = 3e-3, warmup: int = 0
):
    """Train a ``ReversalModel`` with Adam; return the loss of every step
    and {step: similarity}."""
    torch.manual_seed(0)  # the same initial weights for post- and pre-norm
    model = ReversalModel(norm_first)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
    )
    gen = torch.Generator().manual_seed(0)
    losses, similarity = [], {}
    desc = "pre-norm" if norm_first else "post-norm"
    for step in progress(range(steps), desc=desc):
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
    with torch.no_grad():  # after the last step
        similarity[steps] = mean_cosine_similarity(model.encode(probe))
    return losses, similarity


runs = {
    "post-norm": train_reversal(norm_first=False),
    "pre-norm": train_reversal(norm_first=True),
}
final = {name: sum(losses[-10:]) / 10 for name, (losses, _) in runs.items()}
for name, (losses, sim) in runs.items():
    print(
        f"{name}: loss at step 1 {losses[0]:.2f}, step 50 {losses[49]:.2f}, "
        f"mean of the last 10 steps {final[name]:.3f}"
    )
    # abs() at step 100: no "-0.00"
    print(
        f"{' ' * len(name)}  token similarity at step 0 {sim[0]:.2f}, "
        f"step 2 {sim[2]:.2f}, step 10 {sim[10]:.2f}, "
        f"step 100 {abs(sim[100]):.2f}"
    )

# %%
post_sim, pre_sim = runs["post-norm"][1], runs["pre-norm"][1]
assert final["pre-norm"] < 0.2  # pre-norm has learned to reverse
# post-norm is still near guessing (ln 12 = 2.48)
assert final["post-norm"] > 2.0
# collapsed after a few steps, for good
assert post_sim[0] < 0.6
assert min(v for s, v in post_sim.items() if s >= 5) > 0.99
assert pre_sim[100] < 0.2  # pre-norm's tokens are distinct again

fig, axes = plt.subplots(2, 1, figsize=(6.4, 6.4), sharex=True)
for name, (losses, sim) in runs.items():
    axes[0].plot(range(1, len(losses) + 1), losses, label=name)
    axes[1].plot(list(sim), list(sim.values()), "o-", ms=3, label=name)
axes[0].axhline(
    math.log(VOCAB), color="gray", ls=":", label=r"guessing ($\ln 12$)"
)
axes[0].set_ylabel("cross-entropy")
axes[0].set_title("12-layer encoder, Adam 3e-3, no warmup")
axes[1].set_ylabel("mean cosine similarity")
axes[1].set_title("how alike the final token vectors are")
axes[1].set_xlabel("training step")
for ax in axes:
    ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# Pre-norm learns the task within a few dozen steps; post-norm sits on the plateau of guessing. The
# right panel shows what went wrong: after two or three full-size Adam steps, post-norm's final
# vectors are all the same vector (similarity 1.00), whatever the token and its position. The
# read-out then cannot tell the inputs apart and can only predict the average, and within 100 steps
# the model does not find its way out again. Pre-norm's tokens also drift
# together at first, but its identity path keeps the input visible at the output and the model
# recovers. This fits the analyses in the literature (Xiong et al., 2020, *On Layer Normalization in
# the Transformer Architecture*; Liu et al., 2020, *Understanding the Difficulty of Training
# Transformers*): in post-norm, early parameter updates are amplified by the stack, so the first
# steps must be small. A warmup does exactly that (exercise 3).
#
# With other seeds post-norm sometimes leaves the plateau before step 100, but later than pre-norm
# (try it). Post-norm is not a worse architecture when it does train: the original Transformer and
# BERT are post-norm. Pre-norm is simply the more forgiving choice.
#
# ## Summary
#
# * The feed-forward network transforms each position on its own: widen, ReLU/GELU, narrow. It
#   holds about two thirds of a layer's parameters (in GPT-2 small, 46 % of the whole model; the
#   embeddings hold 32 %).
# * Layer normalisation uses the biased variance and puts $\varepsilon$ inside the square root; the
#   unbiased-std variant is a different function and does not reproduce PyTorch's numbers.
# * Residual connections give the gradient an identity path. A plain 30-block stack with PyTorch's
#   default initialisation loses its gradient (4e-21 at block 1); He initialisation restores the
#   gradient but not the distinction between inputs; the residual stack keeps both.
# * Dropout acts on each sub-layer's output before it joins the residual stream, never on the stream.
# * Post-norm renormalises the stream after every sub-layer and usually needs a warmup; pre-norm
#   normalises only the branch input, keeps an identity path to the output and trains more easily.
#
# Chapter 07 assembles attention, feed-forward, residuals and norms into encoder and decoder layers.
#
# ## Exercises
#
# **1. RMSNorm.** Many recent models (LLaMA, Mistral) use RMSNorm: no mean subtraction, no $\beta$,
# $\operatorname{RMSNorm}(x) = \gamma \odot x / \sqrt{\operatorname{mean}(x^2) + \varepsilon}$. Implement it
# and compare with `torch.nn.RMSNorm` on a random batch. When does it give the same result as
# `LayerNorm`?


# %% tags=["solution"]
def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    return weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


xr = torch.randn(3, 5, 16, generator=g)
gamma = torch.rand(16, generator=g) + 0.5
ref = nn.RMSNorm(16, eps=1e-6)
with torch.no_grad():
    ref.weight.copy_(gamma)
rms_gap = (rms_norm(xr, gamma) - ref(xr)).abs().max()
print(
    "max |ours - torch.nn.RMSNorm|:",
    "below 1e-6" if rms_gap < 1e-6 else "too large",
)
assert rms_gap < 1e-6
# For vectors with mean 0 the two coincide (up to the different eps):
centred = xr - xr.mean(-1, keepdim=True)
rms_centred = rms_norm(centred, torch.ones(16), eps=1e-5)
assert torch.allclose(rms_centred, LayerNorm(16)(centred), atol=1e-5)

# %% [markdown]
# **2. How deep can a plain stack go?** Rerun the residual experiment without residuals for depths
# 2, 5, 10 and 20 and print the gradient norm of the first block. By roughly what factor does it
# shrink per block?

# %% tags=["solution"]
first_grads = {}
for n_blocks in (2, 5, 10, 20):
    torch.manual_seed(0)
    stack = nn.Sequential(
        *(PositionwiseFeedForward(d, 4 * d) for _ in range(n_blocks))
    )
    stack(inputs).pow(2).mean().backward()
    first_grads[n_blocks] = stack[0].linear1.weight.grad.norm().item()
    print(
        f"depth {n_blocks:2d}: first block's gradient norm "
        f"{first_grads[n_blocks]:.1e}"
    )
factor = (first_grads[20] / first_grads[10]) ** (1 / 10)
print(f"shrinks by about {factor:.2f} per block")
assert all(
    first_grads[a] > first_grads[b] for a, b in ((2, 5), (5, 10), (10, 20))
)
assert factor < 0.5

# %% [markdown]
# **3. Warmup rescues post-norm.** Train the post-norm encoder again with the same learning rate,
# now reached by a linear warmup over the first 50 steps, for 150 steps. Does it learn the
# reversal? Are its final token vectors still all alike?

# %% tags=["solution"]
warm, warm_sim = train_reversal(norm_first=False, steps=150, warmup=50)
warm_loss = sum(warm[-10:]) / 10
print(
    f"post-norm with warmup: mean loss of the last 10 steps {warm_loss:.3f}, "
    f"token similarity at the end {abs(warm_sim[150]):.2f}"
)
assert warm_loss < 0.2
# the tokens are distinct: no lasting collapse this time
assert warm_sim[150] < 0.2
