# %% [markdown]
# # 05 — Multi-head attention
#
# One attention computes, for every query, *one* weighted average of the values. But a word
# usually needs several things from its context at once: the verb wants its subject *and* its
# object, a pronoun wants the noun it refers to *and* its neighbours. **Multi-head attention**
# runs $h$ attentions side by side, each on its own learned projection of the input, and combines
# their results:
#
# $$\operatorname{MultiHead}(Q, K, V) = \operatorname{Concat}(\text{head}_1, \dots, \text{head}_h)\,W^O,
# \qquad \text{head}_i = \operatorname{Attention}(QW_i^Q,\; KW_i^K,\; VW_i^V).$$
#
# Each head works in a space of $d_\text{head} = d_\text{model}/h$ dimensions, so $h$ heads cost
# about as much as one big head. This chapter follows the shapes through every step, checks the
# package's `MultiHeadAttention` against PyTorch's, and then looks inside a real trained model,
# where individual heads turn out to do recognisable jobs.

# %%
import math

import matplotlib.pyplot as plt
import torch
from bertviz import head_view, model_view
from torch import nn

from transformer_course.attention import (
    MultiHeadAttention,
    scaled_dot_product_attention,
)
from transformer_course.diagrams import multi_head
from transformer_course.plotting import plot_attention, plot_attention_grid
from transformer_course.pretrained import load_minilm
from transformer_course.utils import count_parameters, set_seed, show_source

g = set_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## The steps, with their shapes
#
# The picture first. Multi-head attention is four learned matrices ($W^Q$, $W^K$, $W^V$, $W^O$,
# each $d_\text{model} \times d_\text{model}$) around chapter 04's attention, and two reshapes: one
# that splits the features into heads and one that puts them back. Drawn with the sizes of the
# worked example below (a batch of one sentence of 4 tokens, $d_\text{model} = 8$, 2 heads):

# %%
multi_head(batch=1, length=4, d_model=8, num_heads=2)
plt.show()

# %% [markdown]
# Now every step by hand, on that example. We take the four projection matrices from a package
# module (randomly initialised).

# %%
batch, length, d_model, num_heads = 1, 4, 8, 2
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

# %%
out_pkg, weights_pkg = mha(x)
assert torch.allclose(out, out_pkg, atol=1e-6)
assert torch.allclose(weights, weights_pkg, atol=1e-6)
# multi-head attention maps (batch, L, d_model) to the same shape
assert out.shape == x.shape
print("by hand == package:", torch.allclose(out, out_pkg, atol=1e-6))

# %% [markdown]
# The split is only a reshape: head 0 owns features 0–3 of the projected vectors, head 1 owns
# features 4–7. So "one big projection, then split" is the same as giving every head its own
# $d_\text{model} \times d_\text{head}$ projection, the $W_i^Q$ of the formula, which is the block of
# rows of `W_q.weight` that produces those features. Computing head 1 on its own from its own slice
# gives exactly the same result:

# %%
rows = slice(1 * d_head, 2 * d_head)  # head 1
q1 = x @ mha.W_q.weight[rows].T + mha.W_q.bias[rows]
k1 = x @ mha.W_k.weight[rows].T + mha.W_k.bias[rows]
v1 = x @ mha.W_v.weight[rows].T + mha.W_v.bias[rows]
head1_out, head1_w = scaled_dot_product_attention(q1, k1, v1)
print(
    "head 1 alone:", tuple(head1_out.shape), " weights:\n", head1_w[0].detach()
)
assert torch.allclose(q1, q[..., rows])
assert torch.allclose(head1_out, per_head[:, 1], atol=1e-6)
assert torch.allclose(head1_w, weights[:, 1], atol=1e-6)

# %% [markdown]
# The two heads see the same tokens but weight them differently, because their projections differ
# (both heatmaps use one colour scale, 0 to 1, so equal colours mean equal weights):

# %%
fig, axes = plt.subplots(1, 2, figsize=(6.6, 3.0))
toks = ["tok 0", "tok 1", "tok 2", "tok 3"]
for h in range(num_heads):
    plot_attention(
        weights[0, h].detach(),
        toks,
        ax=axes[h],
        annotate=True,
        title=f"head {h}",
        vmin=0.0,
        vmax=1.0,
    )
fig.tight_layout()
plt.show()
assert not torch.allclose(weights[0, 0], weights[0, 1])

# %% [markdown]
# ## The whole idea in a dozen lines
#
# The five steps, as a module. The only new lines compared with chapter 04 are the two reshapes:


# %%
class MinimalMultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.h = num_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape

        def split(t):  # (B, L, D) -> (B, heads, L, D / heads)
            return t.view(B, L, self.h, D // self.h).transpose(1, 2)

        q, k, v = split(self.W_q(x)), split(self.W_k(x)), split(self.W_v(x))
        out, _ = scaled_dot_product_attention(q, k, v)
        # concatenate the heads, then W_O
        return self.W_o(out.transpose(1, 2).reshape(B, L, D))


minimal = MinimalMultiHeadAttention(d_model, num_heads)
# the same four matrices as the package module above
minimal.load_state_dict(mha.state_dict())
gap = (minimal(x) - mha(x)[0]).abs().max().item()
print("max |minimal - package|:", "below 1e-6" if gap < 1e-6 else gap)
assert gap < 1e-6

# %% [markdown]
# ## The package module
#
# `MultiHeadAttention` in `transformer_course.attention` does the same five steps
# (`split_heads`, the chapter 04 function, `merge_heads`, `W_o`). Around them it handles masks (the
# course convention, `True` = may attend, broadcast over `(batch, heads, queries, keys)`),
# cross-attention (queries from one sequence, keys and values from another), the key/value cache
# used for fast generation in chapter 10, an optional fused path (`use_sdpa=True`), and checks that
# turn wrong shapes into clear errors. Its full source is folded here:

# %% tags=["hide-input"]
show_source(MultiHeadAttention)

# %% [markdown]
# The number of heads changes how the work is divided, not how much there is: the four projection
# matrices are $d_\text{model} \times d_\text{model}$ whatever $h$ is.

# %%
head_counts = (1, 2, 4, 8, 16)
for h in head_counts:
    n_params = count_parameters(MultiHeadAttention(64, h))
    print(f"{h:2d} heads of {64 // h:2d} dims: {n_params:,} parameters")
sizes = {count_parameters(MultiHeadAttention(64, h)) for h in head_counts}
assert len(sizes) == 1

# %% [markdown]
# ### Why several heads: two lookups at once
#
# The introduction claimed that one attention cannot fetch two things at once. An experiment puts
# that to the test. Sequences of 8 random tokens (10 possible ids); from the **last** position the
# model must report **both** token 0 and token 1. The model: token embeddings plus learned position
# embeddings ($d_\text{model} = 32$), one `MultiHeadAttention` layer, and a *linear* read-out of the
# last position's output into two 10-way predictions. Models with 1, 2 and 4 heads have exactly the
# same parameters; only the number of heads differs. Each trains for 200 steps (Adam, batches
# of 64); chance is 0.1 per token.

# %%
VOCAB_2, LEN_2, D_2 = 10, 8, 32


class TwoLookups(nn.Module):
    """Embeddings + positions, one multi-head attention, a linear read-out
    of tokens 0 and 1."""

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB_2, D_2)
        self.pos = nn.Parameter(torch.randn(LEN_2, D_2))
        self.attn = MultiHeadAttention(D_2, num_heads)
        self.read = nn.Linear(D_2, 2 * VOCAB_2)

    def forward(
        self, tokens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out, weights = self.attn(self.tok(tokens) + self.pos)
        logits = self.read(out[:, -1]).view(-1, 2, VOCAB_2)
        return logits, weights[:, :, -1]  # and the last query's weights


def train_two_lookups(
    num_heads: int, steps: int = 200
) -> tuple[TwoLookups, list[float], torch.Tensor]:
    """Train a fresh model; return it, its held-out accuracy on tokens 0
    and 1, and the last query's weights."""
    torch.manual_seed(0)
    model = TwoLookups(num_heads)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB_2, (64, LEN_2), generator=gen)
        logits, _ = model(tokens)
        loss = nn.functional.cross_entropy(
            logits.reshape(-1, VOCAB_2), tokens[:, :2].reshape(-1)
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        logits, w = model(test_tokens)
    acc = [
        (logits[:, j].argmax(-1) == test_tokens[:, j]).float().mean().item()
        for j in (0, 1)
    ]
    return model, acc, w


test_gen = torch.Generator().manual_seed(1)
test_tokens = torch.randint(0, VOCAB_2, (2000, LEN_2), generator=test_gen)
print(
    f"{'heads':>5} {'parameters':>11}"
    f" {'token 0 right':>14} {'token 1 right':>14}"
    "   where the last query looks (per head)"
)
lookup = {}
for h in (1, 2, 4):
    model_h, acc, w = train_two_lookups(h)
    lookup[h] = acc
    top = [
        f"position {int(w[:, i].mean(0).argmax())}"
        f" ({w[:, i].mean(0).max().item():.2f})"
        for i in range(h)
    ]
    n_params = count_parameters(model_h)
    row = f"{h:>5} {n_params:>11,} {acc[0]:>14.3f} {acc[1]:>14.3f}   "
    print(row + ", ".join(top))

# %% tags=["remove-input"]
assert len({count_parameters(TwoLookups(h)) for h in (1, 2, 4)}) == 1
# one head: one token right, the other at chance
assert min(lookup[1]) < 0.2 and max(lookup[1]) > 0.95
# two or four heads: both right
assert all(min(lookup[h]) > 0.95 for h in (2, 4))

# %% [markdown]
# With one head the model gets one of the two tokens right every time and the other no better
# than chance: its single weighted average settles on one position (weight near 1 in the last
# column) and carries nothing from the other. With two heads, each head reads one position, the
# concatenation hands both tokens to the read-out, and both are right; four heads do the same
# with two heads to spare. Same parameters, same training; only the split into heads differs.
# (A non-linear read-out could squeeze a little more out of a single head by blending the two
# positions with unequal weights and decoding the blend; the split into heads makes the two
# lookups independent, and that is what multi-head attention is for.)

# %% [markdown]
# ### Parity with `torch.nn.MultiheadAttention`
#
# PyTorch's module stores the three input projections stacked in one `(3·d_model, d_model)` matrix
# `in_proj_weight`, and the output projection as `out_proj`. Copy our weights there and both modules
# must compute the same function. Two traps: use `batch_first=True` (PyTorch's default is
# `(length, batch, d_model)`), and **invert the masks**, because PyTorch's boolean masks mean
# `True` = *blocked*. By default PyTorch returns the weights averaged over the heads.


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
print(f"{'case':28s} {'max |out diff|':>15s} {'max |weight diff|':>18s}")
for name, (args, our_kw, their_kw) in cases.items():
    out_a, w_a = ours(*args, **our_kw)
    out_b, w_b = theirs(*args, **their_kw)  # w_b: averaged over heads
    d_out = (out_a - out_b).abs().max().item()
    d_w = (w_a.mean(dim=1) - w_b).abs().max().item()
    print(
        f"{name:28s} {'below 1e-6' if d_out < 1e-6 else d_out:>15}"
        f" {'below 1e-6' if d_w < 1e-6 else d_w:>18}"
    )
    assert d_out < 1e-6 and d_w < 1e-6

# %% [markdown]
# The fused path gives the same outputs (it uses `torch.nn.functional.scaled_dot_product_attention`,
# which does not return the weights, so it is used only when they are not asked for):

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
assert d_fused < 1e-6 and w_none is None

# %% [markdown]
# ### When the heads do not fit
#
# $d_\text{model}$ must split evenly into heads. The module says so, with both numbers:

# %%
try:
    MultiHeadAttention(d_model=10, num_heads=3)
except ValueError as err:
    print("ValueError:", err)
    assert "10" in str(err) and "3" in str(err)

# %% [markdown]
# ## Inside a trained model: MiniLM's heads
#
# Random weights give random patterns. What do heads do after training? We load
# **all-MiniLM-L6-v2**, a small BERT (6 layers × 12 heads, $d_\text{model} = 384$, so
# $d_\text{head} = 32$), the model of chapter 02, from the copy installed with the course (nothing
# is downloaded). Two settings matter: `attn_implementation="eager"` makes the model compute
# attention explicitly (the fused kernel never forms the weights), and `output_attentions=True`
# makes it return them, one `(batch, heads, queries, keys)` tensor per layer.

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
print(
    f"{cfg.num_hidden_layers} layers x {cfg.num_attention_heads} heads, "
    f"d_model {cfg.hidden_size}"
)
print("tokens:", tokens)
print(
    "attentions:",
    len(attentions),
    "tensors of shape",
    tuple(attentions[0].shape),
)
assert len(attentions) == 6
assert attentions[0].shape == (1, 12, len(tokens), len(tokens))
assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and len(tokens) == 14
# rows are softmaxes
assert all(
    torch.allclose(a.sum(-1), torch.ones(1, 12, 14)) for a in attentions
)

# %% [markdown]
# ### bertviz: the interactive views
#
# [bertviz](https://github.com/jessevig/bertviz) draws these weights in the browser (it needs
# JavaScript; on the published page it loads its scripts from a CDN). The **head view** shows one
# layer: pick the layer at the top, click the coloured squares to choose heads, hover over a token
# to see where it looks. The **model view** shows all layers (rows) × heads (columns) as small
# thumbnails; click one to enlarge it. (We round the weights to 3 decimals to keep the page small.)

# %%
# short numbers in the page's data
for_viz = [a.double().round(decimals=3) for a in attentions]
assert len(for_viz) == cfg.num_hidden_layers
assert for_viz[0].shape[1] == cfg.num_attention_heads

# %% tags=["nbval-ignore-output"]
from IPython.display import display

view = head_view(for_viz, tokens, layer=0, heads=[2], html_action="return")
# the container and the sentence are there
assert "bertviz-" in view.data and tokens[1] in view.data
display(view)

# %% tags=["nbval-ignore-output"]
view = model_view(for_viz, tokens, display_mode="light", html_action="return")
assert "bertviz-" in view.data and "include_heads" in view.data
display(view)

# %% [markdown]
# ### Attention as flow: the head view without scripts
#
# The head view draws the sentence twice, the attending tokens (queries) on the left and the
# tokens attended to (keys) on the right, with one line per pair whose thickness is the weight.
# That picture needs no interaction, so `plot_attention_flow` draws it as an ordinary figure,
# which every reader sees, also on a phone, in the PDF or on paper. To keep it readable it draws
# only each token's three strongest links and none below 0.05. Here are the heads that the next
# sections measure; the first is the one the head view above opens with (layer 0, head 2).

# %%
from transformer_course.interpret import plot_attention_flow

flow_heads = {
    "previous token": (0, 2),
    "next token": (1, 8),
    "same word": (2, 9),
    "[CLS]": (4, 5),
}
fig, axes = plt.subplots(2, 2, figsize=(8.5, 13))
for ax, (role, (layer, head)) in zip(axes.flat, flow_heads.items()):
    plot_attention_flow(
        attentions[layer][0, head],
        tokens,
        top_k=3,
        min_weight=0.05,
        ax=ax,
        title=f"layer {layer}, head {head}: {role}",
    )
fig.tight_layout()
plt.show()
# the key each query gives most weight, in layer 0, head 2
strongest = attentions[0][0, 2].argmax(-1)
# every token's thickest line: the one before
assert strongest[1:].tolist() == list(range(len(tokens) - 1))
cats = [p for p, t in enumerate(tokens) if t == "cat"]
# the two "cat"s look at each other
assert attentions[2][0, 9, cats[0], cats[1]] > 0.5
assert attentions[2][0, 9, cats[1], cats[0]] > 0.5

# %% [markdown]
# Every token of the first head sends one thick line one row up (the token before it); in the
# second, most go one row down; in the third, the two "cat"s are linked to each other across
# the sentence; in the last, nearly everything runs to `[CLS]`. The function takes one head,
# `attentions[layer][0, head]`, or all heads of a layer, `attentions[layer][0]`, which it
# averages; it leaves padding tokens out (pass the tokenizer's `attention_mask`); and `queries=`
# draws the lines of chosen tokens only, like hovering in the head view.

# %% tags=["hide-input"]
show_source(plot_attention_flow)

# %% [markdown]
# ### The same weights, as a static grid
#
# Without JavaScript (a PDF, a slow connection, a screen reader's text view) the views above stay
# empty, so here is a fixed selection as an ordinary figure: four layers × four heads, rows are
# queries (the token that is looking), columns are keys (the token looked at), bright = high weight.
# All sixteen maps share one colour scale, from 0 to 1, so a bright cell means the same weight in
# every head.

# %%
fig = plot_attention_grid(
    attentions, tokens, layers=[0, 1, 2, 4], heads=[2, 5, 8, 9]
)
for image in (im for ax in fig.axes for im in ax.images):
    image.set_clim(0.0, 1.0)  # one colour scale for all heads
fig.colorbar(
    fig.axes[0].images[0],
    ax=fig.axes,
    fraction=0.02,
    pad=0.02,
    label="attention weight",
)
fig.suptitle(f'MiniLM attention for "{sentence}"', y=1.01)
plt.show()

# %% [markdown]
# Several patterns stand out, and each is easy to measure. For every layer and head we compute:
#
# * **previous token**: the mean weight a token puts on the token just before it;
# * **next token**: the same for the token just after it;
# * **[CLS]**: the mean weight on the first token;
# * **same word**: for the words that occur twice ("the" three times, "cat" twice), the weight on
#   the *other* occurrences of the same word.

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
    "[CLS]": to_cls,
    "same word": same_word,
}
print(
    f"{'pattern':15s} {'strongest head':>15s} {'its score':>10s}"
    f" {'mean over all 72 heads':>23s}"
)
best = {}
for name, score in patterns.items():
    layer, head = divmod(score.argmax().item(), score.shape[1])
    best[name] = (layer, head)
    where = f"layer {layer}, head {head}"
    print(
        f"{name:15s} {where:>15s} {score[layer, head].item():10.2f}"
        f" {score.mean().item():23.2f}"
    )

# %% tags=["remove-input"]
# almost all weight on the previous token
assert best["previous token"] == (0, 2) and previous[0, 2] > 0.95
assert best["next token"] == (1, 8) and following[1, 8] > 0.5
assert best["same word"] == (2, 9) and same_word[2, 9] > 0.5
assert to_cls[4, 5] > 0.85 and to_cls.mean() < 0.5
# these heads stand far out from the average head
for name in ("previous token", "next token", "same word"):
    assert patterns[name][best[name]] > 3 * patterns[name].mean()
# parking on [CLS] is common: at least 10 of the 72 heads do it
assert (to_cls > 0.5).sum() >= 10

# %% [markdown]
# * **Layer 0, head 2 is a previous-token head**: each token puts almost all (on average more than
#   95%) of its weight on the token before it. Its output at position $t$ is essentially a copy of
#   the value at $t-1$, so every later layer knows "what came just before me".
# * **Layer 1, head 8 looks at the next token**, the mirror image (this model reads in both
#   directions).
# * **Layer 2, head 9 links repeated words**: the second "cat" looks at the first one, the third
#   "the" at the first. Heads like this help the model notice that two positions hold the same
#   word.
# * Many heads, like **layer 4, head 5**, put nearly all their weight on **[CLS]**. Clark et al.
#   (2019, *What Does BERT Look At?*) saw the same in BERT-base, where the parking spot is mostly
#   [SEP], and argue that such a head has nothing useful to add for this input and parks its
#   attention on a token whose value changes little: a learned "no-op".
#
# A closer look at the same-word head:

# %%
ax = plot_attention(
    att[2, 9], tokens, annotate=False, title="layer 2, head 9: same word"
)
plt.show()
for word in ("cat", "the"):
    first = tokens.index(word)
    last = max(q for q in range(n) if tokens[q] == word)
    print(
        f"the last {word!r} (position {last}) puts "
        f"{att[2, 9, last, first].item():.2f} of its weight "
        f"on the first one (position {first}), "
        f"{att[2, 9, last, 0].item():.2f} on [CLS]"
    )
    # apart from [CLS], the first occurrence wins
    assert att[2, 9, last, 1:].argmax() + 1 == first

# %% [markdown]
# Do not over-read such pictures: attention weights say where a head *looks*, not how much its
# result matters downstream (the value vectors and $W^O$ decide that), and most heads are far less
# tidy than these four. Still, nobody designed these heads: they emerged from training alone, one
# of the most striking facts about Transformers.
#
# ## Summary
#
# * Multi-head attention projects the input to queries, keys and values, splits the features into
#   $h$ heads of $d_\text{model}/h$, attends in every head in parallel, concatenates and projects with
#   $W^O$. Input and output have the same shape `(batch, length, d_model)`.
# * The number of heads does not change the number of parameters; $d_\text{model}$ must be
#   divisible by it.
# * The package module equals `torch.nn.MultiheadAttention` once the weights are copied and the
#   masks inverted (PyTorch: `True` = blocked; the course: `True` = may attend).
# * In a trained model, some heads have recognisable jobs: previous token, next token, same word,
#   or "nothing to do" (parking on [CLS]).
#
# ## Exercises
#
# **1. One module per head.** Build multi-head attention from $h$ *separate* heads, each with its
# own `nn.Linear(d_model, d_head)` for queries, keys and values, concatenate their outputs and apply
# an output projection. Copy the weights over from `mha` (which rows of `W_q.weight` belong to head
# $i$?) and check that you get the same output.


# %% tags=["solution"]
class SeparateHeads(nn.Module):
    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        d_head = d_model // num_heads
        self.q = nn.ModuleList(
            nn.Linear(d_model, d_head) for _ in range(num_heads)
        )
        self.k = nn.ModuleList(
            nn.Linear(d_model, d_head) for _ in range(num_heads)
        )
        self.v = nn.ModuleList(
            nn.Linear(d_model, d_head) for _ in range(num_heads)
        )
        self.o = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        heads = [
            scaled_dot_product_attention(q(x), k(x), v(x))[0]
            for q, k, v in zip(self.q, self.k, self.v)
        ]
        return self.o(torch.cat(heads, dim=-1))


sep = SeparateHeads(d_model, num_heads)
with torch.no_grad():
    for h in range(num_heads):
        r = slice(h * d_head, (h + 1) * d_head)
        for mine, theirs_lin in (
            (sep.q[h], mha.W_q),
            (sep.k[h], mha.W_k),
            (sep.v[h], mha.W_v),
        ):
            mine.weight.copy_(theirs_lin.weight[r])
            mine.bias.copy_(theirs_lin.bias[r])
    sep.o.load_state_dict(mha.W_o.state_dict())
gap_sep = (sep(x) - mha(x)[0]).abs().max()
print("max difference:", "below 1e-6" if gap_sep < 1e-6 else "too large")
assert torch.allclose(sep(x), mha(x)[0], atol=1e-6)

# %% [markdown]
# **2. Pick your own sentence.** Run MiniLM on a sentence of your choice and find the head with the
# strongest previous-token pattern. Is it still layer 0, head 2?

# %% tags=["solution"]
other = tokenizer(
    "Attention is all you need, but a little recurrence never hurt anyone.",
    return_tensors="pt",
)
with torch.no_grad():
    att2 = torch.stack(model(**other).attentions)[:, 0]
m = att2.shape[-1]
j = torch.arange(1, m)
prev2 = att2[:, :, j, j - 1].mean(-1)
layer2, head2 = divmod(prev2.argmax().item(), prev2.shape[1])
print(
    f"{m} tokens; strongest previous-token head: "
    f"layer {layer2}, head {head2} ({prev2[layer2, head2].item():.2f})"
)
assert (layer2, head2) == (0, 2) and prev2[0, 2] > 0.9

# %% [markdown]
# **3. Padding in a real model.** Tokenize two sentences of different lengths as one batch
# (`padding=True`). The tokenizer's `attention_mask` has 1 at real tokens and 0 at padding: the
# course's convention, `True` = may attend, for the keys. Check that no head of any layer puts
# weight on a padding token, and that the short sentence's real tokens get the same attention as
# when it is run alone.

# %% tags=["solution"]
pair = tokenizer(["The cat sat.", sentence], return_tensors="pt", padding=True)
with torch.no_grad():
    att_pair = model(**pair).attentions
pad = pair["attention_mask"][0] == 0
short = tokenizer("The cat sat.", return_tensors="pt")
with torch.no_grad():
    att_short = model(**short).attentions
n_real = short["input_ids"].shape[1]
print("padding positions of sentence 1:", pad.nonzero().flatten().tolist())
assert all(a[0][..., pad].abs().max() < 1e-6 for a in att_pair)
assert all(
    torch.allclose(a[0, :, :n_real, :n_real], b[0], atol=1e-5)
    for a, b in zip(att_pair, att_short)
)
