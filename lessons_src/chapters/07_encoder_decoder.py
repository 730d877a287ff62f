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
# # 07 — Encoder, decoder, the full Transformer
#
# Chapters 04–06 built the parts: multi-head attention, the position-wise feed-forward network
# and layer normalisation. This chapter puts them together, exactly as the 2017 paper
# *Attention Is All You Need* does:
#
# 1. an **encoder layer** (self-attention, then feed-forward), and a **decoder layer** (masked
#    self-attention, then attention over the encoder's output, then feed-forward);
# 2. **stacks** of them, with token embeddings and positional encoding underneath;
# 3. the **Transformer**: encoder, decoder and a final linear layer that scores every word of
#    the target vocabulary.
#
# We follow one small batch through every step and print its shape, count the parameters of each
# part with a formula we derive (and check), and show that our layers compute exactly what
# PyTorch's `nn.TransformerEncoderLayer` and `nn.TransformerDecoderLayer` compute. The chapter
# ends with the three families of models built from these parts: encoder-only (BERT),
# decoder-only (GPT) and encoder–decoder (the original Transformer, T5).
#
# Masks appear here as ready-made tensors from `make_seq2seq_masks`; chapter 08 explains them.

# %%
import math

import matplotlib.pyplot as plt
import pandas as pd
import torch
from torch import nn

from transformer_course import transformer as transformer_module
from transformer_course.attention import MultiHeadAttention
from transformer_course.diagrams import encoder_decoder, model_families
from transformer_course.layers import PositionwiseFeedForward
from transformer_course.masking import causal_mask, make_seq2seq_masks
from transformer_course.positional import PositionalEncoding
from transformer_course.transformer import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    LayerStack,
    Transformer,
    TransformerConfig,
    copy_weights_to_torch,
)
from transformer_course.utils import count_parameters, set_seed, show_source

g = set_seed(0)

# %% [markdown]
# The whole model in one picture, with the paper's six layers per stack. The encoder reads the
# source once and turns it into the **memory**, one vector per source token. The decoder reads the
# target written so far; in every one of its layers, **cross-attention** takes its queries from
# the decoder and its keys and values from that same memory. (Residual connections and layer norms,
# chapter 06, wrap every box inside the dashed frames and are left out of the picture.)

# %%
encoder_decoder(num_layers=6)
plt.show()

# %% [markdown]
# ## A small batch to follow
#
# Two source sentences and two target sentences, already turned into token ids. Id `0` is
# padding: the second source has three real tokens and three pads, the first target one pad.
# The target is the decoder's *input*: the sentence shifted right behind a start token (id `1`),
# so that position $t$ is asked to predict the word at $t+1$ (chapter 09 trains this way).
#
# The model is tiny on purpose, so that every number below can be checked by hand:
# $d_\text{model}=32$, 4 heads, $d_\text{ff}=64$.

# %%
PAD = 0
# (batch=2, L_src=6)
src = torch.tensor([[5, 9, 3, 7, 2, 0], [4, 8, 6, 0, 0, 0]])
# (batch=2, L_tgt=5)
tgt_in = torch.tensor([[1, 11, 4, 13, 0], [1, 6, 15, 8, 9]])
d_model, num_heads, d_ff = 32, 4, 64
src_vocab, tgt_vocab = 20, 18

src_mask, tgt_mask, memory_mask = make_seq2seq_masks(src, tgt_in, PAD)


def show(name: str, t: torch.Tensor) -> None:
    """Print one step of the walk-through: its name and the shape of its
    result."""
    print(f"{name:<46} {tuple(t.shape)}")


show("src        (batch, L_src)", src)
show("tgt_in     (batch, L_tgt)", tgt_in)
show("src_mask   (batch, 1, 1, L_src)", src_mask)
show("tgt_mask   (batch, 1, L_tgt, L_tgt)", tgt_mask)
show("memory_mask (batch, 1, 1, L_src)", memory_mask)

# %% [markdown]
# ## Residual connections and layer norm: two placements
#
# Every sub-layer (an attention or the feed-forward network) is wrapped the same way: its output
# goes through dropout, is **added** to its input (a residual connection), and a **layer norm**
# is applied. Where the norm sits is the one design choice that differs between models:
#
# | | one sub-layer | used by |
# |---|---|---|
# | post-norm (`norm_first=False`) | $x \leftarrow \mathrm{LayerNorm}(x + \mathrm{Dropout}(\mathrm{Sublayer}(x)))$ | the 2017 paper, BERT |
# | pre-norm (`norm_first=True`) | $x \leftarrow x + \mathrm{Dropout}(\mathrm{Sublayer}(\mathrm{LayerNorm}(x)))$ | GPT-2 and most models since |
#
# Post-norm keeps every layer's output normalised; pre-norm leaves an un-normalised "residual
# stream" that each layer adds to (so a pre-norm stack ends with one extra layer norm). Deep
# pre-norm stacks are easier to train, which is why most models since GPT-2 use them (see Xiong
# et al., 2020, *On Layer Normalization in the Transformer Architecture*). The package supports
# both, with the same argument name as PyTorch. A quick check of the difference, on a random input
# whose scale (about 3) is far from 1:

# %%
x = 3 * torch.randn(2, 6, d_model, generator=g)
for norm_first in (False, True):
    layer = EncoderLayer(
        d_model, num_heads, d_ff, dropout=0.0, norm_first=norm_first
    ).eval()
    y = layer(x)
    print(
        f"norm_first={norm_first!s:<5}  "
        f"per-position mean {y.mean(-1).abs().max():.3f}, "
        f"std {y.std(-1, unbiased=False).mean():.3f}"
    )
    if not norm_first:
        # post-norm: the output of the layer *is* a layer norm's output
        assert y.mean(-1).abs().max() < 1e-5
        assert torch.allclose(
            y.std(-1, unbiased=False), torch.ones(2, 6), atol=1e-3
        )
    else:
        # pre-norm: the input's scale flows through the residual path
        assert y.std(-1, unbiased=False).mean() > 2

# %% [markdown]
# ## The encoder layer, step by step
#
# An encoder layer lets every position look at every other (self-attention), then transforms
# each position on its own (feed-forward). Both steps keep the shape `(batch, length, d_model)`,
# which is what lets us stack layers. Here is one post-norm layer applied by hand to a batch of
# already-embedded vectors, printing the shape after each step. `.eval()` switches dropout off,
# so the hand computation and the layer must agree exactly.

# %%
enc_layer = EncoderLayer(d_model, num_heads, d_ff, dropout=0.1).eval()
x = torch.randn(2, 6, d_model, generator=g)
show("x: embedded source", x)

mha = enc_layer.self_attn
q_heads = mha.split_heads(mha.W_q(x))
show("  queries, split into heads (b, h, L, d_head)", q_heads)
# queries, keys and values all come from x
attn_out, attn_w = mha(x, mask=src_mask)
show("  attention weights (b, h, L_q, L_k)", attn_w)
show("1. self-attention output", attn_out)
h = enc_layer.norm1(x + enc_layer.dropout1(attn_out))
show("2. add & norm", h)
ff_out = enc_layer.ff(h)
show("  feed-forward hidden layer (b, L, d_ff)", enc_layer.ff.linear1(h))
show("3. feed-forward output", ff_out)
y = enc_layer.norm2(h + enc_layer.dropout2(ff_out))
show("4. add & norm = layer output", y)

assert torch.equal(y, enc_layer(x, src_mask))
print(
    "by hand == EncoderLayer(x, src_mask):",
    torch.equal(y, enc_layer(x, src_mask)),
)

# %% [markdown]
# The package's `EncoderLayer` (source folded below) is these four lines, for both norm placements. Dropout sits on
# each sub-layer's output, before the residual addition, as in the paper; the attention weights
# of the last call are kept in `attn_weights` for plotting.

# %% tags=["hide-input"]
show_source(EncoderLayer)

# %% [markdown]
# ## The decoder layer, step by step
#
# A decoder layer has three sub-layers:
#
# 1. **masked self-attention** over the target so far: position $t$ may look at positions
#    $\le t$ only (the causal mask of chapter 08), because at generation time the later words do
#    not exist yet;
# 2. **cross-attention**: the *queries* come from the decoder, the *keys and values* from the
#    encoder's output, called the **memory**. This is the only place where the target sees the
#    source, and its weights form an `L_tgt × L_src` matrix: one row per target position, one
#    column per source position;
# 3. the **feed-forward** network.
#
# The memory here is a stand-in (random vectors of the right shape); in the full model it is the
# encoder's output.

# %%
dec_layer = DecoderLayer(d_model, num_heads, d_ff, dropout=0.1).eval()
memory = torch.randn(2, 6, d_model, generator=g)
y = torch.randn(2, 5, d_model, generator=g)
show("memory: encoder output (b, L_src, d)", memory)
show("y: embedded target (b, L_tgt, d)", y)

sa_out, sa_w = dec_layer.self_attn(y, mask=tgt_mask)
show("  self-attention weights (b, h, L_tgt, L_tgt)", sa_w)
h1 = dec_layer.norm1(y + dec_layer.dropout1(sa_out))
show("1. masked self-attention, add & norm", h1)
ca_out, ca_w = dec_layer.cross_attn(h1, memory, memory, mask=memory_mask)
show("  cross-attention weights (b, h, L_tgt, L_src)", ca_w)
h2 = dec_layer.norm2(h1 + dec_layer.dropout2(ca_out))
show("2. cross-attention, add & norm", h2)
out = dec_layer.norm3(h2 + dec_layer.dropout3(dec_layer.ff(h2)))
show("3. feed-forward, add & norm = layer output", out)

assert torch.equal(out, dec_layer(y, memory, tgt_mask, memory_mask))
print(
    "by hand == DecoderLayer(y, memory, ...):",
    torch.equal(out, dec_layer(y, memory, tgt_mask, memory_mask)),
)

# %% [markdown]
# Two things to notice. The output has the **target's** length (5), not the source's (6):
# cross-attention returns one vector per query. And the masks did their job: the first target
# position attends only to itself, and no target position attends to the three pads of the
# second source.

# %%
print(
    "self-attention weights of position 0 (sentence 0, head 0):",
    sa_w[0, 0, 0].tolist(),
)
print(
    "cross-attention weights on source pads (sentence 1):",
    ca_w[1, :, :, 3:].abs().max().item(),
)
assert torch.equal(sa_w[0, :, 0, 1:], torch.zeros(num_heads, 4))
assert torch.all(ca_w[1, :, :, 3:] == 0)

# %% tags=["hide-input"]
show_source(DecoderLayer)

# %% [markdown]
# ## Embeddings: from token ids to vectors
#
# Below the first layer, token ids become vectors: an embedding table (chapter 02), multiplied by
# $\sqrt{d_\text{model}}$, plus the sinusoidal positional encoding (chapter 03), then dropout.
#
# Why the factor $\sqrt{d_\text{model}}$? The paper does not say. The usual reading: it shares one
# matrix between the embeddings and the final output layer, whose rows are naturally of size
# $\approx 1/\sqrt{d_\text{model}}$ per entry; multiplying by $\sqrt{d_\text{model}}$ brings a token
# vector to about unit size per entry, the size of the sines and cosines it is added to, so that
# neither drowns the other. Measured on our `d_model = 32`:

# %%
pe = PositionalEncoding(d_model, max_len=64).pe
# entries of size 1/sqrt(d)
small_rows = torch.randn(src_vocab, d_model, generator=g) / math.sqrt(d_model)
rms = lambda t: t.pow(2).mean().sqrt().item()  # noqa: E731 - root mean square
print(f"positional encoding          RMS per entry {rms(pe):.3f}")
print(f"embedding rows ~ 1/sqrt(d)   RMS per entry {rms(small_rows):.3f}")
scaled_rows = small_rows * math.sqrt(d_model)
print(f"  ... times sqrt(d_model)    RMS per entry {rms(scaled_rows):.3f}")
assert abs(rms(pe) - math.sqrt(0.5)) < 0.01  # sin^2 and cos^2 average 1/2
assert 0.8 < rms(scaled_rows) < 1.2

# %% tags=["hide-input"]
show_source(transformer_module.TokenAndPositionEmbedding)

# %% [markdown]
# ## The encoder and decoder stacks
#
# A stack is an embedding followed by $N$ identical layers (identical in shape, each with its
# own weights). Because every layer maps `(batch, length, d_model)` to the same shape, the loop is
# all there is. A pre-norm stack adds a final layer norm, for the reason given above.

# %%
show_source(LayerStack)
show_source(Encoder)
show_source(Decoder)

# %%
stack_sizes = dict(num_layers=2, num_heads=num_heads, d_ff=d_ff, max_len=64)
encoder = Encoder(src_vocab, d_model, **stack_sizes).eval()
decoder = Decoder(tgt_vocab, d_model, **stack_sizes).eval()

h = encoder.embed(src)
show("encoder embedding (b, L_src, d)", h)
for i, layer in enumerate(encoder.layers):
    h = layer(h, src_mask)
    show(f"encoder layer {i}", h)
memory = encoder(src, src_mask)
assert torch.equal(memory, h)

h = decoder.embed(tgt_in)
show("decoder embedding (b, L_tgt, d)", h)
for i, layer in enumerate(decoder.layers):
    h = layer(h, memory, tgt_mask, memory_mask)
    show(f"decoder layer {i}", h)
assert torch.equal(decoder(tgt_in, memory, tgt_mask, memory_mask), h)

# %% [markdown]
# ## The Transformer
#
# The full model adds one linear layer on top of the decoder that turns each position's vector
# into a score (a *logit*) for every word of the target vocabulary. It has two methods besides
# `forward`, because the two halves are used differently:
#
# * `encode(src, src_mask)` runs the encoder **once** per source sentence;
# * `decode(tgt_in, memory, tgt_mask, memory_mask)` runs the decoder and the output layer. In
#   training it is called once per batch on the whole shifted target (*teacher forcing*); when
#   generating, it is called once per new token, with the same memory (chapter 09).
#
# All weight matrices start from Glorot (Xavier) uniform initialisation, as in the reference
# implementation of the paper.

# %% tags=["hide-input"]
show_source(TransformerConfig)
show_source(Transformer)

# %% [markdown]
# Every module's output shape during one forward pass, recorded with forward hooks (a hook is a
# function PyTorch calls after a module runs):

# %%
config = TransformerConfig(
    src_vocab,
    tgt_vocab,
    d_model,
    num_heads,
    num_encoder_layers=2,
    num_decoder_layers=2,
    d_ff=d_ff,
    max_len=64,
)
model = Transformer(config).eval()

trace = []


def record(name):
    def hook(module, inputs, output):
        if isinstance(output, tuple):  # attention returns (output, weights)
            trace.append(
                (name, tuple(output[0].shape), tuple(output[1].shape))
            )
        else:
            trace.append((name, tuple(output.shape), ""))

    return hook


watched = (
    transformer_module.TokenAndPositionEmbedding,
    EncoderLayer,
    DecoderLayer,
    MultiHeadAttention,
    PositionwiseFeedForward,
)
handles = [
    m.register_forward_hook(record(n))
    for n, m in model.named_modules()
    if isinstance(m, watched) or n == "out"
]
logits = model(src, tgt_in, src_mask, tgt_mask, memory_mask)
for h_ in handles:
    h_.remove()
columns = ["module", "output shape", "attention weights"]
print(pd.DataFrame(trace, columns=columns).to_string(index=False))

# %% [markdown]
# The logits have shape `(batch, L_tgt, tgt_vocab)`: at every target position, one score per
# word of the target vocabulary; a softmax turns them into the distribution of the next word.
# `forward` is just `encode` then `decode`:

# %%
memory = model.encode(src, src_mask)
logits_2 = model.decode(tgt_in, memory, tgt_mask, memory_mask)
show("memory = model.encode(src, src_mask)", memory)
show("logits = model.decode(tgt_in, memory, ...)", logits_2)
probs = logits_2.softmax(-1)
print(
    "next-word probabilities sum to 1 at every position:",
    torch.allclose(probs.sum(-1), torch.ones(2, 5)),
)
assert torch.equal(logits, logits_2) and logits.shape == (2, 5, tgt_vocab)
assert torch.allclose(probs.sum(-1), torch.ones(2, 5))

# %% [markdown]
# ## Counting the parameters
#
# With $d = d_\text{model}$, a vocabulary of $V$ words and biases everywhere:
#
# * one multi-head attention has four $d \times d$ projections ($W_Q, W_K, W_V, W_O$), each with a
#   bias: $4(d^2 + d)$;
# * the feed-forward network is $d \to d_\text{ff} \to d$: $2\,d\,d_\text{ff} + d_\text{ff} + d$;
# * a layer norm has a gain and a bias: $2d$;
# * an **encoder layer** = attention + FFN + 2 norms $= 4d^2 + 2\,d\,d_\text{ff} + 9d + d_\text{ff}$;
# * a **decoder layer** = 2 attentions + FFN + 3 norms $= 8d^2 + 2\,d\,d_\text{ff} + 15d + d_\text{ff}$;
# * an embedding table is $V d$; the sinusoidal positions have **no** parameters (a fixed buffer);
# * the output layer is $d\,V_\text{tgt} + V_\text{tgt}$; a pre-norm stack adds one final norm, $2d$.
#
# The table compares the formula with `count_parameters` on our model:


# %%
def attention_params(d):
    return 4 * (d * d + d)


def ffn_params(d, d_ff):
    return 2 * d * d_ff + d_ff + d


def encoder_layer_params(d, d_ff):
    return attention_params(d) + ffn_params(d, d_ff) + 2 * (2 * d)


def decoder_layer_params(d, d_ff):
    return 2 * attention_params(d) + ffn_params(d, d_ff) + 3 * (2 * d)


assert (
    encoder_layer_params(d_model, d_ff)
    == 4 * d_model**2 + 2 * d_model * d_ff + 9 * d_model + d_ff
)
assert (
    decoder_layer_params(d_model, d_ff)
    == 8 * d_model**2 + 2 * d_model * d_ff + 15 * d_model + d_ff
)

rows = [
    ("encoder embedding", "V_src·d", src_vocab * d_model, model.encoder.embed),
    (
        "encoder layers",
        "N·(4d² + 2d·d_ff + 9d + d_ff)",
        2 * encoder_layer_params(d_model, d_ff),
        model.encoder.layers,
    ),
    ("decoder embedding", "V_tgt·d", tgt_vocab * d_model, model.decoder.embed),
    (
        "decoder layers",
        "N·(8d² + 2d·d_ff + 15d + d_ff)",
        2 * decoder_layer_params(d_model, d_ff),
        model.decoder.layers,
    ),
    (
        "output layer",
        "d·V_tgt + V_tgt",
        d_model * tgt_vocab + tgt_vocab,
        model.out,
    ),
]
table = pd.DataFrame(
    [(part, f, n, count_parameters(m)) for part, f, n, m in rows],
    columns=["part", "formula", "by formula", "counted"],
)
n_model = count_parameters(model)
table.loc[len(table)] = ["total", "", table["by formula"].sum(), n_model]
table["share"] = (table["counted"] / n_model).map("{:.1%}".format)
print(table.to_string(index=False))
assert (table["by formula"] == table["counted"]).all()
embedding_share = (src_vocab * d_model + tgt_vocab * d_model) / n_model
# toy vocabularies: the layers hold almost everything
assert embedding_share < 0.05

# %% [markdown]
# PyTorch's layers hold exactly the same number of parameters (they differ only in how the
# attention projections are stored: one stacked `in_proj` matrix instead of three):

# %%
for ours, theirs in [
    (
        EncoderLayer(d_model, num_heads, d_ff),
        nn.TransformerEncoderLayer(d_model, num_heads, d_ff),
    ),
    (
        DecoderLayer(d_model, num_heads, d_ff),
        nn.TransformerDecoderLayer(d_model, num_heads, d_ff),
    ),
]:
    n_ours, n_theirs = count_parameters(ours), count_parameters(theirs)
    print(
        f"{type(ours).__name__:<13} ours {n_ours:>6,}   PyTorch {n_theirs:>6,}"
    )
    assert n_ours == n_theirs

# %% [markdown]
# In our toy model the vocabularies have only 20 and 18 words, so the two embedding tables hold
# under 3 % of the parameters and the layers nearly all of them. At the size of the paper's base
# model ($d=512$, $d_\text{ff}=2048$, 6 + 6 layers) the layers hold 44 M parameters, and its
# vocabulary of about 37,000 word pieces adds one shared $37{,}000 \times 512$ table, 19 M more
# (exercise 1 counts the whole model). Instantiating one layer of that size confirms the formula
# there too:

# %%
d, dff = 512, 2048
big_enc, big_dec = EncoderLayer(d, 8, dff), DecoderLayer(d, 8, dff)
print(
    f"encoder layer (d=512): {count_parameters(big_enc):,} counted, "
    f"{encoder_layer_params(d, dff):,} by formula"
)
print(
    f"decoder layer (d=512): {count_parameters(big_dec):,} counted, "
    f"{decoder_layer_params(d, dff):,} by formula"
)
base_layers = 6 * encoder_layer_params(d, dff)
base_layers += 6 * decoder_layer_params(d, dff)
print(f"6 + 6 layers: {base_layers / 1e6:.1f} M parameters")
assert count_parameters(big_enc) == encoder_layer_params(d, dff)
assert count_parameters(big_dec) == decoder_layer_params(d, dff)
del big_enc, big_dec

# %% [markdown]
# ## Parity with PyTorch
#
# PyTorch ships the same two layers as `nn.TransformerEncoderLayer` and
# `nn.TransformerDecoderLayer`. If ours are right, then with the same weights and dropout off they
# must compute the same numbers. `copy_weights_to_torch` copies our weights across; it refuses
# layers built differently (another `d_ff`, norm placement or activation) instead of copying
# something meaningless.

# %% tags=["hide-input"]
show_source(copy_weights_to_torch)

# %% [markdown]
# One case, the decoder layer with all its masks. Two details matter:
#
# * `batch_first=True`: PyTorch's default layout is `(length, batch, d_model)`.
# * PyTorch's masks use the **opposite** convention (`True` = blocked) and come as separate
#   pieces: a `(L_tgt, L_tgt)` causal `tgt_mask`, and `(batch, length)` key-padding masks. So we
#   pass the negations (`~`) of our masks' pieces.
#
# Here the post-norm decoder layer with ReLU; exercise 2 checks a pre-norm one with GELU.

# %%
ours = DecoderLayer(
    d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False
).eval()
theirs = nn.TransformerDecoderLayer(
    d_model,
    num_heads,
    d_ff,
    dropout=0.0,
    activation="relu",
    norm_first=False,
    batch_first=True,
).eval()
copy_weights_to_torch(ours, theirs)

y = torch.randn(2, 5, d_model, generator=g)
memory = torch.randn(2, 6, d_model, generator=g)
with torch.no_grad():
    out_ours = ours(y, memory, tgt_mask, memory_mask)
    out_torch = theirs(
        y,
        memory,
        tgt_mask=~causal_mask(5)[0, 0],  # (L_tgt, L_tgt), True = blocked
        tgt_key_padding_mask=(tgt_in == PAD),  # (batch, L_tgt), True = blocked
        memory_key_padding_mask=(src == PAD),  # (batch, L_src), True = blocked
    )
decoder_diff = (out_ours - out_torch).abs().max().item()
print(f"decoder layer: max |ours - PyTorch| < 1e-5: {decoder_diff < 1e-5}")
assert decoder_diff < 1e-5

# %% [markdown]
# And the encoder layer, pre-norm with GELU this time:

# %%
ours = EncoderLayer(
    d_model, num_heads, d_ff, dropout=0.0, activation="gelu", norm_first=True
).eval()
theirs = nn.TransformerEncoderLayer(
    d_model,
    num_heads,
    d_ff,
    dropout=0.0,
    activation="gelu",
    norm_first=True,
    batch_first=True,
).eval()
theirs = copy_weights_to_torch(ours, theirs)
x = torch.randn(2, 6, d_model, generator=g)
with torch.no_grad():
    out_ours = ours(x, src_mask)
    out_torch = theirs(x, src_key_padding_mask=(src == PAD))
encoder_diff = (out_ours - out_torch).abs().max().item()
print(f"encoder layer: max |ours - PyTorch| < 1e-5: {encoder_diff < 1e-5}")
assert encoder_diff < 1e-5

# %% [markdown]
# The exact differences (float32 rounding: different order of the same additions; they can vary in
# the last digit from one CPU to another):

# %% tags=["nbval-ignore-output"]
print(f"decoder layer {decoder_diff:.1e}, encoder layer {encoder_diff:.1e}")
assert max(decoder_diff, encoder_diff) < 1e-5

# %% [markdown]
# ## Which architecture is which
#
# The original Transformer uses both stacks because translation has two sequences: a source to
# read and a target to write. Later models kept one half or both:
#
# | family | stacks | self-attention mask | cross-attention | trained to | examples |
# |---|---|---|---|---|---|
# | encoder-only | encoder | padding only: every token sees the whole sentence | no | fill in masked words; classify | BERT, RoBERTa |
# | decoder-only | decoder *without* cross-attention | causal + padding | no | predict the next token | GPT, GPT-2, Llama |
# | encoder–decoder | both | encoder: padding; decoder: causal + padding | yes, decoder → encoder memory | map one sequence to another | the 2017 Transformer, T5, BART |
#
# They differ in wiring and masks, not in building blocks. A decoder-only block is a decoder
# layer with its cross-attention removed, which leaves exactly our `EncoderLayer` used with a
# causal mask (GPT-2 also puts the norm first). Chapter 10 builds GPT that way; chapter 08 tests
# the causal property properly. The figure shows the two one-stack wirings next to each other
# (the encoder–decoder is the picture at the top of this chapter; residual connections and norms
# are left out). How positions enter differs: the 2017 model adds sinusoids to embeddings
# scaled by $\sqrt{d_\text{model}}$, BERT and GPT-2 learn a position embedding, T5 adds a learned
# relative-position bias to the attention scores.

# %%
model_families(num_layers=12)  # BERT-base and GPT-2 small both have 12 layers
plt.show()

# %% [markdown]
# The claim that a decoder-only block is an `EncoderLayer` with a causal mask, checked: replacing
# the last two positions of the input changes nothing at the first four.

# %%
block = EncoderLayer(
    d_model, num_heads, d_ff, dropout=0.0, norm_first=True
).eval()
x = torch.randn(1, 6, d_model, generator=g)
x_changed = x.clone()
x_changed[:, 4:] = torch.randn(1, 2, d_model, generator=g)
with torch.no_grad():
    before, after = block(x, causal_mask(6)), block(x_changed, causal_mask(6))
unchanged = torch.allclose(before[:, :4], after[:, :4], atol=1e-6)
changed = not torch.allclose(before[:, 4:], after[:, 4:], atol=1e-3)
print("positions 0-3 unchanged:", unchanged)
print("positions 4-5 changed:  ", changed)
assert unchanged
assert changed

# %% [markdown]
# ## Summary
#
# * An encoder layer is self-attention + feed-forward; a decoder layer inserts cross-attention
#   over the encoder's memory between its (masked) self-attention and its feed-forward. Each
#   sub-layer is wrapped in dropout, a residual connection and a layer norm, placed after the
#   addition (post-norm, 2017) or before the sub-layer (pre-norm, GPT-2 onwards).
# * Every layer keeps the shape `(batch, length, d_model)`; cross-attention's output has the
#   target's length; the logits are `(batch, L_tgt, V_tgt)`.
# * Parameters: $4d^2 + 2d\,d_\text{ff} + 9d + d_\text{ff}$ per encoder layer,
#   $8d^2 + 2d\,d_\text{ff} + 15d + d_\text{ff}$ per decoder layer, plus $Vd$ per embedding table.
# * Our layers match PyTorch's to float32 rounding once the weights are copied across.
#
# ## Exercises
#
# **1. The paper's base model.** Table 3 of the paper reports 65 M parameters for the base model:
# $d=512$, 8 heads, $d_\text{ff}=2048$, 6 encoder and 6 decoder layers, a vocabulary of about
# 37 000 word pieces shared by source and target, and **one** embedding matrix shared by the
# encoder's embedding, the decoder's embedding and the output layer (section 3.4). Write a function
# `transformer_params(V, d, d_ff, N, tied)` from the formulas above (the output layer's bias
# stays), and compute the count with and without tying. How close is the tied count to 65 M?


# %% tags=["solution"]
def transformer_params(V, d, d_ff, N, tied):
    enc_layers = N * encoder_layer_params(d, d_ff)
    dec_layers = N * decoder_layer_params(d, d_ff)
    embeddings = V * d if tied else 3 * V * d  # encoder, decoder, output layer
    bias = V  # the output layer's bias
    return enc_layers + dec_layers + embeddings + bias


untied = transformer_params(37_000, 512, 2048, 6, tied=False)
tied = transformer_params(37_000, 512, 2048, 6, tied=True)
print(
    f"untied: {untied / 1e6:.1f} M   tied: {tied / 1e6:.1f} M   (paper: 65 M)"
)
# the formula is the one checked against count_parameters above;
# a small model verifies the 3·V·d part
small = Transformer(TransformerConfig(37, 37, 16, 2, 1, 1, 32, max_len=8))
assert count_parameters(small) == transformer_params(37, 16, 32, 1, tied=False)
assert abs(tied - 65e6) / 65e6 < 0.05

# %% [markdown]
# **2. Parity for another configuration.** Change the parity cell above to a **pre-norm**
# decoder layer with **GELU** (`norm_first=True, activation="gelu"` on both sides) and check it
# still agrees with PyTorch to $10^{-5}$. Then build PyTorch's layer with `norm_first=False` but
# ours with `norm_first=True`: what does `copy_weights_to_torch` say?

# %% tags=["solution"]
ours = DecoderLayer(
    d_model, num_heads, d_ff, dropout=0.0, activation="gelu", norm_first=True
).eval()
theirs = nn.TransformerDecoderLayer(
    d_model,
    num_heads,
    d_ff,
    dropout=0.0,
    activation="gelu",
    norm_first=True,
    batch_first=True,
).eval()
theirs = copy_weights_to_torch(ours, theirs)
with torch.no_grad():
    out_ours = ours(y, memory, tgt_mask, memory_mask)
    out_torch = theirs(
        y,
        memory,
        tgt_mask=~causal_mask(5)[0, 0],
        tgt_key_padding_mask=(tgt_in == PAD),
        memory_key_padding_mask=(src == PAD),
    )
diff = (out_ours - out_torch).abs().max().item()
print(f"pre-norm GELU decoder layer agrees to 1e-5: {diff < 1e-5}")
assert diff < 1e-5

post_norm_torch = nn.TransformerDecoderLayer(
    d_model,
    num_heads,
    d_ff,
    activation="gelu",
    norm_first=False,
    batch_first=True,
)
try:
    copy_weights_to_torch(ours, post_norm_torch)
except ValueError as err:
    print("ValueError:", err)
    assert "norm_first" in str(err)

# %% [markdown]
# **3. The residual stream.** Stack 12 freshly initialised encoder layers (dropout 0) and feed
# them a random batch. After each layer, print the root mean square of the hidden states, once
# with `norm_first=False` and once with `norm_first=True`. Which one grows with depth, and why does
# a pre-norm stack therefore end with a final `LayerNorm`?

# %% tags=["solution"]
set_seed(0)
x0 = torch.randn(2, 6, d_model)
growth = {}
for norm_first in (False, True):
    h = x0
    sizes = []
    with torch.no_grad():
        for _ in range(12):
            layer = EncoderLayer(
                d_model, num_heads, d_ff, dropout=0.0, norm_first=norm_first
            )
            h = layer.eval()(h)
            sizes.append(rms(h))
    growth[norm_first] = sizes
    print(f"norm_first={norm_first!s:<5}", " ".join(f"{s:.2f}" for s in sizes))
# post-norm: every output is normalised
assert all(abs(s - 1) < 0.01 for s in growth[False])
# pre-norm: each layer adds to the stream
assert growth[True][-1] > 1.2 * growth[True][0]
