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
# Chapters 04–06 built the parts: multi-head attention, the position-wise feed-forward network,
# residual connections and layer normalisation. This chapter puts them together the way the 2017
# paper *Attention Is All You Need* does:
#
# 1. an **encoder layer** (self-attention, then feed-forward) and a **decoder layer** (masked
#    self-attention, then attention over the encoder's output, then feed-forward), each first
#    written minimally from `nn.Linear`, `nn.LayerNorm` and a softmax, then checked against the
#    package's version;
# 2. **stacks** of them, with token embeddings and positional encoding underneath;
# 3. the **Transformer**: encoder, decoder and a final linear layer that scores every token of
#    the target vocabulary.
#
# We follow one small batch through the model, count the parameters of each part with a formula
# we derive and check, and show that our layers compute what PyTorch's `nn.TransformerEncoderLayer`
# and `nn.TransformerDecoderLayer` compute, to float32 rounding. Then we train the model briefly on
# a task whose answer we know, reversing a word, and look at what its cross-attention has
# learned. The chapter ends with the three families of models built from
# these parts: encoder-only (BERT), decoder-only (GPT) and encoder–decoder (the original
# Transformer, T5).
#
# Masks appear here as ready-made tensors from `make_seq2seq_masks`; chapter 08 explains them.

# %%
import math
from collections import Counter, OrderedDict

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from IPython.display import display
from torch import nn

from transformer_course.attention import MultiHeadAttention
from transformer_course.diagrams import encoder_decoder, model_families
from transformer_course.layers import PositionwiseFeedForward
from transformer_course.masking import causal_mask, make_seq2seq_masks
from transformer_course.plotting import plot_attention
from transformer_course.positional import PositionalEncoding
from transformer_course.seq2seq import greedy_decode
from transformer_course.transformer import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    LayerStack,
    TokenAndPositionEmbedding,
    Transformer,
    TransformerConfig,
    copy_weights_to_torch,
)
from transformer_course.utils import (
    Table,
    count_parameters,
    set_seed,
    show_source,
)

# %%
# the same random numbers on every run (g: a seeded torch.Generator)
g = set_seed(0)

# %% [markdown]
# The whole model in one picture, Fig. 7.1 (the one on the course map), with the paper's six layers
# per stack. The encoder reads the
# source once and turns it into the **memory**, one vector per source token. The decoder reads the
# target written so far; in every one of its layers, **cross-attention** takes its queries from
# the decoder and its keys and values from that same memory. Every sub-layer is followed by
# "add & norm": its output is added to its input (the residual connection, the grey line on the
# right) and the sum is layer-normalised (chapter 06).

# %% tags=["hide-input"] caption="The encoder–decoder Transformer with six layers per stack. The encoder turns the source into the memory; every decoder layer's cross-attention takes its queries (Q) from the decoder and its keys and values (K, V) from that memory. Each sub-layer is followed by add & norm, fed by a residual connection around it." alt="Two columns of boxes, read bottom to top. Left, the encoder: source tokens, embedding + position, then a dashed frame marked × 6 holding self-attention and feed-forward, each topped by a pink add & norm tab with a grey line bypassing the box on its right; above the frame, a green memory box. Right, the decoder: target so far, embedding + position, then a dashed frame marked × 6 holding masked self-attention, cross-attention and feed-forward, each with its add & norm tab and bypass; above it, linear + softmax, next token. A red arrow labelled K, V runs from the memory into the decoder's cross-attention box, whose input from below is labelled Q."
encoder_decoder(num_layers=6)
plt.show()

# %% [markdown]
# ## The task and a small batch to follow
#
# The model in this chapter reverses words: it reads `hello` and writes `olleh`. Chapter 06
# reversed sequences of one fixed length with an encoder alone, reading the answer off each
# position; here a decoder writes the reversal token by token, which lets the lengths vary and
# gives cross-attention a job. A translation model works the same way, with a harder mapping;
# reversal has the advantage that we know exactly which source letter each output letter must
# come from.
#
# Its vocabulary has 20 tokens, shared by source and target: `<pad>` (id 0) fills short sequences
# up to the batch's length, `<s>` (id 1) starts the decoder's input, `</s>` (id 2) ends the
# output, and the 17 letters `a`–`q` are ids 3 to 19. Each training pair gives three tensors:
#
# * the **source**, the letters of the word;
# * the **decoder input**, the reversed word behind a start token;
# * the **labels**, the reversed word followed by the end token.
#
# The decoder input is the labels shifted right by one position, so position $t$ is asked to
# predict the token at $t+1$ of its input (chapter 09 trains this way at length).

# %%
PAD, BOS, EOS = 0, 1, 2
itos = ["<pad>", "<s>", "</s>"] + list("abcdefghijklmnopq")
stoi = {token: i for i, token in enumerate(itos)}
VOCAB = len(itos)


def reversal_batch(words: list[str]):
    """(source, decoder input, labels) for a list of words, padded with
    <pad>."""
    src = [torch.tensor([stoi[c] for c in w]) for w in words]
    tgt = [
        torch.tensor([BOS] + [stoi[c] for c in w[::-1]] + [EOS]) for w in words
    ]
    pad = dict(batch_first=True, padding_value=PAD)
    src = nn.utils.rnn.pad_sequence(src, **pad)
    tgt = nn.utils.rnn.pad_sequence(tgt, **pad)
    return src, tgt[:, :-1], tgt[:, 1:]


def show_tokens(ids: torch.Tensor) -> str:
    return " ".join(itos[i] for i in ids.tolist())


src, tgt_in, labels = reversal_batch(["hello", "bad"])
for b in range(2):
    print(f"sentence {b}  source         {show_tokens(src[b])}")
    print(f"            decoder input  {show_tokens(tgt_in[b])}")
    print(f"            labels         {show_tokens(labels[b])}")
print("shapes: src", tuple(src.shape), " tgt_in", tuple(tgt_in.shape))

# %% [markdown]
# The second word is shorter, so its source ends in two pads and its decoder input in one. (Its
# decoder input still holds its own `</s>`, at position 4: cutting off the last column removed
# only the longer target's `</s>`. Its label at position 4 is a pad, which the loss will skip, so
# what the decoder makes of that `</s>` never matters.) The three masks, for exactly these tensors
# (`True` = may attend). `tgt_mask` combines two rules: position $t$ may look only at positions
# up to $t$ (causal), and never at a `<pad>`. Printed for the second word, `bad`, as 0/1 with one
# row per position that attends:

# %%
src_mask, tgt_mask, memory_mask = make_seq2seq_masks(src, tgt_in, PAD)


def show(t: torch.Tensor, name: str) -> None:
    """Print a tensor's shape, then what it is."""
    print(f"{str(tuple(t.shape)):<16} {name}")


show(src_mask, "src_mask: which source tokens may be attended to")
show(tgt_mask, "tgt_mask: which earlier target tokens, per position")
show(memory_mask, "memory_mask: which source tokens cross-attention sees")
print("tgt_mask of sentence 1, bad (row: attending, column: attended to):")
tokens_bad = show_tokens(tgt_in[1]).split()
print("      " + "".join(f"{tok:>6}" for tok in tokens_bad))
for tok, row in zip(tokens_bad, tgt_mask[1, 0].int().tolist()):
    print(f"{tok:>6}" + "".join(f"{v:>6}" for v in row))

# %% [markdown]
# The 1s fill the diagonal and the triangle below it (causal), except in the last column: the
# `<pad>` is never attended to, not even by its own row.
#
# ## Residual connections and layer norm: a reminder
#
# Chapter 06 compared the two ways of wrapping a sub-layer in a residual connection and a layer
# norm: **post-norm**, $\mathrm{LN}(x + \mathrm{Sublayer}(x))$, as in the 2017 paper, and
# **pre-norm**, $x + \mathrm{Sublayer}(\mathrm{LN}(x))$, as in GPT-2 and most models since, which
# trains more easily when the stack is deep. Every package layer in this chapter takes the choice as
# `norm_first`, the argument name PyTorch uses; the default, `False`, is the paper's post-norm.
#
# ## A minimal encoder layer
#
# An encoder layer lets every position look at every other (self-attention), then transforms
# each position on its own (feed-forward). Both steps keep the shape `(batch, length, d_model)`,
# which is what lets us stack layers. Here it is from plain `nn.Linear`, `nn.LayerNorm` and a
# softmax: first multi-head attention as in chapter 05, written so that the queries can come from
# one sequence and the keys and values from another (the decoder needs that), then the layer,
# post-norm and without dropout.


# %%
class MiniAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.h = num_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, x, memory, mask):
        """Queries from x, keys and values from memory."""
        b, d = x.size(0), x.size(-1)

        def heads(t):  # (b, L, d) -> (b, h, L, d / h)
            return t.view(b, -1, self.h, d // self.h).transpose(1, 2)

        q = heads(self.W_q(x))
        k, v = heads(self.W_k(memory)), heads(self.W_v(memory))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
        weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        return self.W_o((weights @ v).transpose(1, 2).reshape(b, -1, d))


class MiniEncoderLayer(nn.Module):
    def __init__(self, d_model: int, num_heads: int, d_ff: int) -> None:
        super().__init__()
        self.self_attn = MiniAttention(d_model, num_heads)
        self.ff = nn.Sequential(
            OrderedDict(
                linear1=nn.Linear(d_model, d_ff),
                relu=nn.ReLU(),
                linear2=nn.Linear(d_ff, d_model),
            )
        )
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x, mask):
        x = self.norm1(x + self.self_attn(x, x, mask))  # add & norm
        return self.norm2(x + self.ff(x))  # add & norm


# %% [markdown]
# Two lines of `forward`, one per sub-layer. The package's `EncoderLayer` has parameters of the
# same names and shapes, so it can hand its weights to the minimal one with `load_state_dict`;
# in evaluation mode (dropout off) the two must then compute the same function. Both compute
# in float32, which keeps about seven significant digits, so we check that their outputs agree
# to within $10^{-6}$ rather than bit for bit. The sizes are
# small on purpose, so that every shape and count below can be checked by hand:
# $d_\text{model}=32$, 4 heads, $d_\text{ff}=64$. A batch of already-embedded vectors stands in
# for the source:

# %%
d_model, num_heads, d_ff = 32, 4, 64
enc_layer = EncoderLayer(d_model, num_heads, d_ff).eval()
mini_enc = MiniEncoderLayer(d_model, num_heads, d_ff)
mini_enc.load_state_dict(enc_layer.state_dict())  # the same weights

x = torch.randn(2, 5, d_model, generator=g)  # (batch, L_src, d_model)
with torch.no_grad():
    y_mini, y_package = mini_enc(x, src_mask), enc_layer(x, src_mask)
show(y_mini, "MiniEncoderLayer output: the shape of its input")
diff = (y_mini - y_package).abs().max().item()
print(f"max |MiniEncoderLayer - EncoderLayer| below 1e-6: {diff < 1e-6}")

# %% [markdown]
# You met the package's `EncoderLayer` (folded below) in chapter 06. Besides the minimal layer's
# function it has dropout on each sub-layer's output before the addition, the pre-norm order, a
# GELU option (`activation`), a copy of its last attention weights for plotting (`attn_weights`;
# the decoder layer keeps two such copies, first plotted in Fig. 7.2), and two extras: `use_sdpa`,
# the fused attention path of chapter 05, and `cache`, a key/value cache (chapter 10 explains
# caching).

# %%
show_source(EncoderLayer)

# %% [markdown]
# ## The decoder layer
#
# A decoder layer has three sub-layers:
#
# 1. **masked self-attention** over the target so far: position $t$ may look at positions
#    $\le t$ only (the causal mask of chapter 04, which chapter 08 builds as `causal_mask`). At generation time the later tokens do not
#    exist yet; in training they do, and position $t$'s label is token $t+1$ of the very input
#    the decoder reads, so without the mask it could simply copy its answer from the next
#    position;
# 2. **cross-attention**: the *queries* come from the decoder, the *keys and values* from the
#    encoder's output, the memory. This is the only place where the target sees the source,
#    and its weights form an `L_tgt × L_src` matrix: one row per target position, one column per
#    source position;
# 3. the **feed-forward** network.
#
# In the minimal version, that is one more attention and one more norm than the encoder layer:


# %%
class MiniDecoderLayer(MiniEncoderLayer):
    def __init__(self, d_model: int, num_heads: int, d_ff: int) -> None:
        super().__init__(d_model, num_heads, d_ff)
        self.cross_attn = MiniAttention(d_model, num_heads)
        self.norm3 = nn.LayerNorm(d_model)

    def forward(self, y, memory, tgt_mask, memory_mask):
        y = self.norm1(y + self.self_attn(y, y, tgt_mask))
        y = self.norm2(y + self.cross_attn(y, memory, memory_mask))
        return self.norm3(y + self.ff(y))


# %% [markdown]
# The same check against the package's `DecoderLayer`. The memory is a stand-in here (random
# vectors of the right shape); in the full model it is the encoder's output.

# %%
dec_layer = DecoderLayer(d_model, num_heads, d_ff).eval()
mini_dec = MiniDecoderLayer(d_model, num_heads, d_ff)
mini_dec.load_state_dict(dec_layer.state_dict())

memory = torch.randn(2, 5, d_model, generator=g)  # (batch, L_src, d_model)
y = torch.randn(2, 6, d_model, generator=g)  # (batch, L_tgt, d_model)
with torch.no_grad():
    out_mini = mini_dec(y, memory, tgt_mask, memory_mask)
    out_package = dec_layer(y, memory, tgt_mask, memory_mask)
show(
    dec_layer.self_attn_weights, "self-attention weights (b, h, L_tgt, L_tgt)"
)
show(
    dec_layer.cross_attn_weights,
    "cross-attention weights (b, h, L_tgt, L_src)",
)
show(out_package, "decoder layer output (b, L_tgt, d_model)")
diff = (out_mini - out_package).abs().max().item()
print(f"max |MiniDecoderLayer - DecoderLayer| below 1e-6: {diff < 1e-6}")

# %% [markdown]
# The output has the **target's** length (6), not the source's (5): cross-attention returns one
# vector per query. The masks show in the weights. Fig. 7.2 shows both attention matrices of the
# second sentence (`bad`), in head 0. The weights are random, so the values mean nothing yet, but
# where they are zero is set by the masks:

# %% tags=["hide-input"] caption="Attention weights of one untrained decoder layer for the second sentence, head 0. Top: masked self-attention; each position sees only itself and earlier positions, and the padded last position is never looked at. Bottom: cross-attention; every target position reads the three memory positions of bad's letters (stand-in vectors here) and never the two source pads." alt="Two heatmaps, one above the other, with one colour bar from 0 to 1. Top, 6 by 6, rows and columns labelled <s> d a b </s> <pad>: everything above the diagonal is black (weight 0) and so is the last column; the first row has all its weight, 1, on the first column. Bottom, 6 target rows by 5 source columns labelled b a d <pad> <pad>: the two pad columns are black, the three letter columns hold weights between about 0.2 and 0.5 in every row."
fig, axes = plt.subplots(2, 1, figsize=(4.8, 8.0), layout="constrained")
plot_attention(
    dec_layer.self_attn_weights[1, 0],
    keys=show_tokens(tgt_in[1]).split(),
    ax=axes[0],
    title="masked self-attention",
    colorbar=False,
    vmax=1.0,
)
plot_attention(
    dec_layer.cross_attn_weights[1, 0],
    keys=show_tokens(src[1]).split(),
    queries=show_tokens(tgt_in[1]).split(),
    ax=axes[1],
    title="cross-attention",
    colorbar=False,
    vmax=1.0,
)
for ax in axes:
    ax.tick_params(axis="x", labelrotation=0, labelsize=9)
fig.colorbar(axes[0].images[0], ax=axes, shrink=0.5, label="weight")
plt.show()

# %%
show_source(DecoderLayer)

# %% [markdown]
# ## The encoder and decoder stacks
#
# Below the first layer, token ids become vectors: an embedding table (chapter 02), multiplied by
# $\sqrt{d_\text{model}}$, plus the sinusoidal positional encoding (chapter 03), then dropout.
#
# A stack is that embedding followed by $N$ layers of the same shape, each with its own weights.
# Because every layer maps `(batch, length, d_model)` to the same shape, a loop is all there is.
# The encoder and the decoder differ only in their layer and in what it reads: the decoder's
# layers also read the memory.
#
# ## The Transformer
#
# The full model adds one linear layer on top of the decoder that turns each position's vector
# into a score (a *logit*) for every token of the target vocabulary. It has two methods besides
# `forward`, because the two halves are used differently:
#
# * `encode(src, src_mask)` runs the encoder **once** per source sentence;
# * `decode(tgt_in, memory, tgt_mask, memory_mask)` runs the decoder and the output layer. In
#   training it is called once per batch on the whole decoder input (*teacher forcing*); when
#   generating, it is called once per new token, with the same memory (chapter 09).
#
# The paper also **ties** its embeddings (section 3.4): with one vocabulary shared by source and
# target, a single $V \times d_\text{model}$ matrix serves as the encoder's embedding, the
# decoder's embedding and the weights of the output layer. `tie_embeddings=True` does the same.
# The projection matrices start from Glorot (Xavier) uniform initialisation, as in the paper's
# reference code (tensor2tensor); the shared table gets that code's normal initialisation. Why
# that initialisation goes with the factor $\sqrt{d_\text{model}}$ is the subject of the section
# *Why the embedding is multiplied by $\sqrt{d_\text{model}}$*, after the model is assembled.
#
# Written in the style of the minimal layers above (post-norm, no dropout, one shared
# vocabulary), the whole model is one short class: the scaled embedding plus positions, a loop
# over each stack, the tied output layer, and `encode` and `decode`:


# %%
class MiniTransformer(nn.Module):
    def __init__(self, vocab, d_model, num_heads, d_ff, num_layers):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)  # the one shared table
        self.pe = PositionalEncoding(d_model, max_len=64).pe  # fixed
        sizes = (d_model, num_heads, d_ff)
        self.enc = nn.ModuleList(
            MiniEncoderLayer(*sizes) for _ in range(num_layers)
        )
        self.dec = nn.ModuleList(
            MiniDecoderLayer(*sizes) for _ in range(num_layers)
        )
        self.out = nn.Linear(d_model, vocab)
        self.out.weight = self.tok.weight  # tied: the same tensor

    def embed(self, ids):  # token vectors times sqrt(d), plus positions
        d = self.tok.embedding_dim
        return self.tok(ids) * math.sqrt(d) + self.pe[: ids.size(1)]

    def encode(self, src, src_mask):
        x = self.embed(src)
        for layer in self.enc:
            x = layer(x, src_mask)
        return x  # the memory

    def decode(self, tgt_in, memory, tgt_mask, memory_mask):
        y = self.embed(tgt_in)
        for layer in self.dec:
            y = layer(y, memory, tgt_mask, memory_mask)
        return self.out(y)  # logits

    def forward(self, src, tgt_in, src_mask, tgt_mask, memory_mask):
        memory = self.encode(src, src_mask)
        return self.decode(tgt_in, memory, tgt_mask, memory_mask)


# %% [markdown]
# The package builds the same model from parts, folded below. `TokenAndPositionEmbedding` is
# `embed` with dropout after the sum. `LayerStack` holds an embedding and the loop's layers; a
# pre-norm stack ends with one more layer norm, because its residual stream is never normalised
# on the way (chapter 06), and in a post-norm stack `self.norm` is an identity. `Encoder` and
# `Decoder` are the two loops, `TransformerConfig` holds the sizes, and `Transformer` puts them
# together, with `tie_embeddings` as an option.

# %%
show_source(TokenAndPositionEmbedding)

# %%
show_source(LayerStack)

# %%
show_source(Encoder)

# %%
show_source(Decoder)

# %%
show_source(TransformerConfig)

# %%
show_source(Transformer)

# %% [markdown]
# Our model: two layers per stack, the sizes above, one tied vocabulary of 20 tokens. Dropout is
# off: the task will give the model fresh random words at every training step, so there is
# little to over-fit (the training section counts how rarely a string comes back). The output
# shape of each of its main modules during one forward pass,
# recorded with forward hooks (a hook is a function PyTorch calls after a module runs):

# %%
set_seed(0)
config = TransformerConfig(
    src_vocab_size=VOCAB,
    tgt_vocab_size=VOCAB,
    d_model=d_model,
    num_heads=num_heads,
    num_encoder_layers=2,
    num_decoder_layers=2,
    d_ff=d_ff,
    dropout=0.0,
    max_len=64,
    tie_embeddings=True,
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
    TokenAndPositionEmbedding,
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
with torch.no_grad():
    logits = model(src, tgt_in, src_mask, tgt_mask, memory_mask)
for handle in handles:
    handle.remove()
Table(["module", "output shape", "attention weights"], trace)

# %% [markdown]
# The logits have shape `(batch, L_tgt, vocabulary)`: at every target position, one score per
# token; a softmax turns them into the distribution of the next token. `forward` is just `encode`
# then `decode`, and the three tables are one tensor. The minimal model, given the same weights
# part by part with `load_state_dict`, computes the same logits. We allow $10^{-5}$ here, ten
# times the tolerance for one layer, because the logits come out of four layers and the output
# layer, each adding its own rounding:

# %%
with torch.no_grad():
    memory = model.encode(src, src_mask)
    logits_2 = model.decode(tgt_in, memory, tgt_mask, memory_mask)
print("forward equals encode then decode:", torch.equal(logits, logits_2))
print(
    "encoder embedding, decoder embedding and output layer share one tensor:",
    model.encoder.embed.tok.weight
    is model.decoder.embed.tok.weight
    is model.out.weight,
)

mini = MiniTransformer(VOCAB, d_model, num_heads, d_ff, num_layers=2)
mini.tok.load_state_dict(model.encoder.embed.tok.state_dict())
mini.enc.load_state_dict(model.encoder.layers.state_dict())
mini.dec.load_state_dict(model.decoder.layers.state_dict())
mini.out.load_state_dict(model.out.state_dict())  # the table and the bias
with torch.no_grad():
    logits_mini = mini(src, tgt_in, src_mask, tgt_mask, memory_mask)
diff = (logits_mini - logits).abs().max().item()
print(f"max |MiniTransformer - Transformer| below 1e-5: {diff < 1e-5}")

# %% [markdown]
# ## Why the embedding is multiplied by $\sqrt{d_\text{model}}$
#
# The paper multiplies the embedding by $\sqrt{d_\text{model}}$ (section 3.4) without saying
# why. Its reference code (tensor2tensor, `layers/modalities.py`) suggests the reason: it initialises the shared table with a normal
# distribution of standard deviation $1/\sqrt{d_\text{model}}$, a sensible size for the output
# layer, whose logits are dot products of $d_\text{model}$ numbers. Multiplied by
# $\sqrt{d_\text{model}}$, a token vector then has entries of about 1, comparable to the sines and
# cosines added to it, so that neither drowns the other. Measured on our model:

# %%
pe = PositionalEncoding(d_model, max_len=64).pe


def rms(t: torch.Tensor) -> float:
    """Root mean square of the entries."""
    return t.pow(2).mean().sqrt().item()


shared = model.encoder.embed.tok.weight.detach()
print(f"positional encoding            RMS per entry {rms(pe):.3f}")
print(f"shared table, N(0, 1/d)        RMS per entry {rms(shared):.3f}")
scaled = shared * math.sqrt(d_model)
print(f"  ... times sqrt(d_model)      RMS per entry {rms(scaled):.3f}")
print(f"sqrt(1/2), as sin^2 and cos^2 average 1/2: {math.sqrt(0.5):.3f}")

# %% [markdown]
# The reference code pairs the scale with that initialisation, so that token vectors start at a
# size comparable to the positions' (1.020 against 0.707 here). Another common choice is to initialise
# every matrix with Glorot, the embeddings included, and keep the factor: the Annotated
# Transformer's `make_model` does this (`nn.init.xavier_uniform_` on every parameter with more
# than one dimension). Glorot's standard deviation, $\sqrt{2/(V + d_\text{model})}$, depends on
# the table's shape, so the token vectors' size then depends on the vocabulary. With our 20 tokens
# it happens to come out a little above 1; with the paper's 37,000 it does not:

# %%
for vocab, d in ((VOCAB, d_model), (37_000, 512)):
    glorot = nn.init.xavier_uniform_(torch.empty(vocab, d), generator=g)
    print(
        f"Glorot table {vocab:>6,} x {d}: times sqrt(d) RMS per entry "
        f"{rms(glorot * math.sqrt(d)):.3f}"
    )

# %% [markdown]
# With our 20 tokens the token vectors start at about 1.6 times the positions' size (1.130
# against 0.707); at the paper's size they would start under a quarter of the positions' size (0.165
# against 0.707). The package's untied models keep Glorot for every matrix, like the Annotated
# Transformer, so their token vectors' starting size depends on the vocabulary in this way.
# All of this is about where the embeddings start. Whether the factor matters to training is a
# question for an experiment, which we run once the model has a task and has been trained on it
# (*Does the factor $\sqrt{d_\text{model}}$ matter to training?*, below).
#
# ## Counting the parameters
#
# With $d = d_\text{model}$, a vocabulary of $V$ tokens and biases everywhere:
#
# * one multi-head attention has four $d \times d$ projections ($W^Q, W^K, W^V, W^O$), each with a
#   bias: $4(d^2 + d)$;
# * the feed-forward network is $d \to d_\text{ff} \to d$: $2\,d\,d_\text{ff} + d_\text{ff} + d$;
# * a layer norm has a gain and a bias: $2d$;
# * an **encoder layer** = attention + FFN + 2 norms $= 4d^2 + 2\,d\,d_\text{ff} + 9d + d_\text{ff}$;
# * a **decoder layer** = 2 attentions + FFN + 3 norms $= 8d^2 + 2\,d\,d_\text{ff} + 15d + d_\text{ff}$;
# * the tied embedding table is $V d$, counted once; the sinusoidal positions have **no**
#   parameters (a fixed buffer);
# * the output layer's weights are that table, and it adds a bias of $V$; untied, the output
#   layer has its own $d \times V_\text{tgt}$ weights and $V_\text{tgt}$ biases,
#   $d\,V_\text{tgt} + V_\text{tgt}$, and source and target get a table each;
# * a pre-norm stack adds one final norm, $2d$.
#
# The table compares the formula with `count_parameters`, which counts a shared tensor once:


# %%
def attention_params(d):
    return 4 * (d * d + d)


def ffn_params(d, d_ff):
    return 2 * d * d_ff + d_ff + d


def encoder_layer_params(d, d_ff):
    return attention_params(d) + ffn_params(d, d_ff) + 2 * (2 * d)


def decoder_layer_params(d, d_ff):
    return 2 * attention_params(d) + ffn_params(d, d_ff) + 3 * (2 * d)


rows = [
    ("tied embedding", "V·d", VOCAB * d_model, model.encoder.embed),
    (
        "encoder layers",
        "N·(4d² + 2d·d_ff + 9d + d_ff)",
        2 * encoder_layer_params(d_model, d_ff),
        model.encoder.layers,
    ),
    (
        "decoder layers",
        "N·(8d² + 2d·d_ff + 15d + d_ff)",
        2 * decoder_layer_params(d_model, d_ff),
        model.decoder.layers,
    ),
    ("output bias", "V", VOCAB, model.out.bias),
]


def counted(part) -> int:
    return (
        part.numel()
        if isinstance(part, torch.Tensor)
        else count_parameters(part)
    )


n_model = count_parameters(model)
counts = [(part, f, n, counted(m)) for part, f, n, m in rows]
counts.append(("total", "", sum(n for _, _, n, _ in counts), n_model))
Table(
    ["part", "formula", "by formula", "counted", "share"],
    [(*row, row[-1] / n_model) for row in counts],
    formats={"share": ".2%"},
)

# %% [markdown]
# PyTorch's layers hold exactly the same number of parameters (they differ only in how the
# attention projections are stored: one stacked `in_proj` matrix instead of three, chapter 05):

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

# %% [markdown]
# In our model the vocabulary has only 20 tokens, so the layers hold nearly all the parameters.
# The paper's base model is $d=512$, 8 heads, $d_\text{ff}=2048$, 6 + 6 layers, and for
# English–German a shared vocabulary of about 37,000 tokens from byte-pair encoding (subword
# units; section 5.1 of the paper). Chapter 06 split these same two layers into attention, FFN
# and norms; here we check them against the formula and count the whole model. Built on
# PyTorch's `meta` device (shapes only, no memory), with and without tying:

# %%
with torch.device("meta"):
    base = Transformer(TransformerConfig(37_000, 37_000, tie_embeddings=True))
    untied = Transformer(TransformerConfig(37_000, 37_000))
d, dff = 512, 2048
for name, layer, formula in (
    ("encoder", base.encoder.layers[0], encoder_layer_params(d, dff)),
    ("decoder", base.decoder.layers[0], decoder_layer_params(d, dff)),
):
    print(
        f"{name} layer (d=512): {count_parameters(layer):,} counted, "
        f"{formula:,} by formula"
    )
layers_base = count_parameters(base.encoder.layers) + count_parameters(
    base.decoder.layers
)
print(f"6 + 6 layers:        {layers_base / 1e6:5.1f} M parameters")
print(
    f"shared table:        {count_parameters(base.encoder.embed) / 1e6:5.1f} M"
)
print(f"tied model:          {count_parameters(base) / 1e6:5.1f} M")
print(f"untied (3 tables):   {count_parameters(untied) / 1e6:5.1f} M")
gap = 65e6 - count_parameters(base)
print(f"65 M minus the tied model: {gap / 1e6:.1f} M ({gap / 65e6:.0%})")
per_token = d + 1  # one row of the table, one output bias
print(f"vocabulary that would close it: {37_000 + gap / per_token:,.0f}")

# %% [markdown]
# Table 3 of the paper gives 65 M parameters for the base model; the tied count is 1.9 M (3 %)
# under it. The rounding of the vocabulary does not explain it: each token adds 513 parameters
# (a row of the table and an output bias), so the two counts would meet only at a vocabulary of
# about 40,700 tokens, where the paper says "about 37000". The paper does not break its count
# down, so the gap stays unexplained. At this size the one
# shared $37{,}000 \times 512$ table holds 18.9 M parameters, and untying it into three tables
# would make the model 60 % larger: 101.0 M instead of 63.1 M.
#
# ## Parity with PyTorch
#
# PyTorch ships the same two layers as `nn.TransformerEncoderLayer` and
# `nn.TransformerDecoderLayer`. With the same weights and dropout off they must compute the same
# numbers. `copy_weights_to_torch` copies our weights across (the query, key and value
# projections go into PyTorch's stacked `in_proj`, as in chapter 05). The two traps are chapter
# 05's too:
#
# * `batch_first=True`: PyTorch's default layout is `(length, batch, d_model)`.
# * PyTorch's masks use the **opposite** convention (`True` = blocked) and come as separate
#   pieces: a `(L_tgt, L_tgt)` causal `tgt_mask`, and `(batch, length)` key-padding masks. So we
#   pass the negation (`~`) of our causal mask, and padding masks built as `== PAD`.
#
# First the decoder layer, post-norm with ReLU, with all its masks:

# %% tags=["nbval-ignore-output"]
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

y = torch.randn(2, 6, d_model, generator=g)
memory = torch.randn(2, 5, d_model, generator=g)
with torch.no_grad():
    out_ours = ours(y, memory, tgt_mask, memory_mask)
    out_torch = theirs(
        y,
        memory,
        tgt_mask=~causal_mask(6)[0, 0],  # (L_tgt, L_tgt), True = blocked
        tgt_key_padding_mask=(tgt_in == PAD),  # (batch, L_tgt), True = blocked
        memory_key_padding_mask=(src == PAD),  # (batch, L_src), True = blocked
    )
diff = (out_ours - out_torch).abs().max().item()
print(f"decoder layer: max |ours - PyTorch| = {diff:.1e}")
assert diff < 1e-5  # float32 rounding: different operations, rounded apart

# %% [markdown]
# And the encoder layer, pre-norm with GELU this time:

# %% tags=["nbval-ignore-output"]
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
copy_weights_to_torch(ours, theirs)
x = torch.randn(2, 5, d_model, generator=g)
with torch.no_grad():
    out_ours = ours(x, src_mask)
    out_torch = theirs(x, src_key_padding_mask=(src == PAD))
diff = (out_ours - out_torch).abs().max().item()
print(f"encoder layer: max |ours - PyTorch| = {diff:.1e}")
assert diff < 1e-5  # float32 rounding: different operations, rounded apart

# %% [markdown]
# Differences this small are float32 rounding: the two implementations compute the same function
# with different operations (PyTorch, for one, scales the queries before their product with the
# keys, where ours scales the scores after it), and each operation rounds. In float64, whose rounding step is hundreds of millions of times finer, the
# same encoder layers, with the same weights and input, agree far below float32's rounding:

# %% tags=["nbval-ignore-output"]
ours, theirs = ours.double(), theirs.double()
with torch.no_grad():
    out_ours = ours(x.double(), src_mask)
    out_torch = theirs(x.double(), src_key_padding_mask=(src == PAD))
diff64 = (out_ours - out_torch).abs().max().item()
for dtype in (torch.float32, torch.float64):
    print(f"{dtype}: rounding step {torch.finfo(dtype).eps:.1e}")
print(f"float64 encoder layer: max |ours - PyTorch| = {diff64:.1e}")
assert diff64 < 1e-12  # float64 rounding: a far finer step

# %% [markdown]
# ## Training it: reversing words
#
# So far every weight was random, and the attention weights meant nothing. Reversal gives
# cross-attention a job with a known answer: to write the letter at position $t$ of the reversed
# word, a word of $L$ letters, the decoder must fetch the letter at position $L-1-t$ of the
# source, and cross-attention is its only way to reach the source.
#
# The training data are random strings of 3 to 8 letters, fresh at every step. There are only
# $17^3 = 4{,}913$ three-letter strings, so training sees most of them, and a test string could
# be one the model has memorised; we therefore test on strings that never occur in the training
# stream, which we can regenerate because it is seeded. Two measurements will tell what training
# changed, so we take them on the untrained model first: the cross-attention of the last decoder
# layer on one word, and, over 1,000 new strings, the share of each position's cross-attention
# weight that falls on the source letter it has to write (averaged over the four heads).

# %%
LETTERS = itos[3:]


def random_words(n: int, gen: torch.Generator) -> list[str]:
    lengths = torch.randint(3, 9, (n,), generator=gen).tolist()
    picks = torch.randint(len(LETTERS), (n, 8), generator=gen).tolist()
    return [
        "".join(LETTERS[j] for j in row[:k]) for row, k in zip(picks, lengths)
    ]


def cross_attention(m: Transformer, src, tgt_in) -> torch.Tensor:
    """Cross-attention weights of m's last decoder layer, averaged over the
    heads: (batch, L_tgt, L_src)."""
    with torch.no_grad():
        m(src, tgt_in, *make_seq2seq_masks(src, tgt_in, PAD))
    return m.decoder.layers[-1].cross_attn_weights.mean(1)


def weight_on_letter_written(m: Transformer, words: list[str]) -> float:
    """Mean weight that output position t puts on source position L-1-t."""
    weights = cross_attention(m, *reversal_batch(words)[:2])
    on_letter = [
        weights[b, t, len(w) - 1 - t]
        for b, w in enumerate(words)
        for t in range(len(w))
    ]
    return torch.stack(on_letter).mean().item()


src_f, tgt_in_f, labels_f = reversal_batch(["fabled"])
fabled_before = cross_attention(model, src_f, tgt_in_f)[0]
TRAIN_SEED = 1  # seeds the stream of training strings (the loop below)
train_gen = torch.Generator().manual_seed(TRAIN_SEED)
drawn = [w for _ in range(600) for w in random_words(64, train_gen)]
seen = set(drawn)
candidates = random_words(3000, torch.Generator().manual_seed(2))
fresh = [w for w in candidates if w not in seen][:1000]
print(f"strings drawn in 600 steps of 64: {len(drawn):,}")
print(f"distinct strings in the training stream: {len(seen):,}")
three = sum(len(w) == 3 for w in seen)
print(f"  three-letter ones: {three:,} of 4,913 ({three / 17**3:.0%})")
times = Counter(drawn)
repeated = Counter(len(w) for w in seen if times[w] > 1)
print("distinct strings drawn more than once, by length:")
print("".join(f"  {k}: {repeated[k]:,}" for k in range(3, 9)))
print(f"test strings: {len(fresh):,}; of them in that stream: ", end="")
print(len(set(fresh) & seen))
by_len = [sum(len(w) == k for w in fresh) for k in range(3, 9)]
print("test strings by length:", end="")
print("".join(f"  {k}: {n}" for k, n in zip(range(3, 9), by_len)))
share_before = weight_on_letter_written(model, fresh)

# %% [markdown]
# Almost every string of the stream is drawn once; only the short ones come back, and no string
# of six letters or more does. The stream holds most of the three-letter strings, so few of them
# are left for the test set, which is short of three-letter words and has about as many of each
# other length.
#
# One more "before": what the untrained model writes. `greedy_decode` encodes the source once,
# then calls `decode` once per new token, each time appending the most likely token, until
# `</s>` or 16 tokens (chapter 09 writes this loop out). On words of our own:


# %%
def reverse_with(m: Transformer, words: list[str]) -> list[str]:
    """Greedy-decode each word with m; the text written before </s>."""
    src_w, _, _ = reversal_batch(words)
    with torch.no_grad():
        out = greedy_decode(m, src_w, PAD, BOS, EOS, max_len=16).tolist()
    cut = [row[: row.index(EOS)] if EOS in row else row for row in out]
    return ["".join(itos[i] for i in row) for row in cut]


test_words = ["hello", "bad", "fabled", "jackal", "feedback"]
for word, written in zip(test_words, reverse_with(model, test_words)):
    print(f"{word:>9} -> {written}")

# %% [markdown]
# For every word the untrained model writes 16 tokens, the most it is allowed, without ever
# reaching `</s>`: runs of one letter, or of the start token `<s>`.
#
# The loop is the plainest one that works: the decoder input with its masks in, cross-entropy
# against the labels out (`ignore_index` skips the padded label positions), Adam with a learning
# rate that falls linearly to zero. Chapter 09 adds what a real task needs: a data set split
# into batches, label smoothing and a learning-rate warm-up.


# %%
def train(
    m: Transformer, make_batch, steps: int = 600, seed: int = TRAIN_SEED
) -> list[float]:
    """Adam at 3e-3, falling linearly to 0; 64 fresh random strings per
    step, drawn from a generator seeded with `seed`. Returns the loss of
    every step."""
    optimizer = torch.optim.Adam(m.parameters(), lr=3e-3)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 1 - s / steps
    )
    gen = torch.Generator().manual_seed(seed)
    losses = []
    m.train()
    for _ in range(steps):
        src_b, tgt_in_b, labels_b = make_batch(random_words(64, gen))
        masks = make_seq2seq_masks(src_b, tgt_in_b, PAD)
        logits_b = m(src_b, tgt_in_b, *masks)
        loss = F.cross_entropy(
            logits_b.flatten(0, 1), labels_b.flatten(), ignore_index=PAD
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return losses


losses = train(model, reversal_batch)
for step in (1, 100, 200, 400, 600):
    print(f"step {step:>3}: loss {losses[step - 1]:.3f}")

# %% [markdown]
# The loss falls from 3.41 to 0.02. The trained model, greedy-decoding the same five words, and
# the 1,000 unseen strings:

# %%
model.eval()
for word, written in zip(test_words, reverse_with(model, test_words)):
    print(f"{word:>9} -> {written}")

written = reverse_with(model, fresh)
accuracy = sum(w[::-1] == out for w, out in zip(fresh, written)) / len(fresh)
print(f"reversed exactly: {accuracy:.1%} of 1,000 unseen strings")

# %% tags=["remove-cell"]
# trained for 600 steps, the model reverses nearly every unseen string
assert accuracy > 0.9

# %% [markdown]
# What has cross-attention learned? Fig. 7.3 shows the cross-attention of the last decoder layer on
# `fabled`, with the correct decoder input, before and after training, averaged over the four heads.
# Each row is labelled with the letter that position writes:

# %% tags=["hide-input"] caption="Cross-attention of the last decoder layer on fabled, averaged over the four heads, before training (top) and after (bottom). Each row is a decoder position, labelled with the letter it writes; each column is a source letter. Before training the weight is spread over all six letters; after training each row that writes a letter puts its largest weight on that letter of the source, so the bright cells run along the anti-diagonal." alt="Two heatmaps, one above the other, each 7 rows (d, e, l, b, a, f, </s>) by 6 columns (f, a, b, l, e, d), with one colour bar from 0 to 1. Top, before training: every cell dark, weights between about 0.08 and 0.28, the rows alike. Bottom, after training: bright cells on the anti-diagonal, from row d at column d (top right, near 1) down to row f at column f (bottom left, about 0.8); the middle rows are dimmer, about 0.5 to 0.7, with some weight on the neighbouring letters; the last row, </s>, is bright at column f."
fabled_after = cross_attention(model, src_f, tgt_in_f)[0]
fig, axes = plt.subplots(2, 1, figsize=(4.2, 7.0), layout="constrained")
for ax, weights, title in (
    (axes[0], fabled_before, "before training"),
    (axes[1], fabled_after, "after training"),
):
    plot_attention(
        weights,
        keys=list("fabled"),
        queries=show_tokens(labels_f[0]).split(),
        ax=ax,
        title=title,
        colorbar=False,
        vmax=1.0,
    )
    ax.set_xlabel("source letter")
    ax.set_ylabel("letter being written")
    ax.tick_params(axis="x", labelrotation=0)
fig.colorbar(axes[0].images[0], ax=axes, shrink=0.5, label="weight")
plt.show()

# %% [markdown]
# Before training every row spreads its weight over all six letters, and the rows look alike.
# After training, the row that writes `d` puts nearly all its weight on the source's last letter,
# `d`, the row that writes `f` most of it (about 0.8) on the first, and the rows between on the letters between: the
# bright cells run along the anti-diagonal, and the model reads the source back to front. The
# weight is sharpest at the two ends of the word; in the middle rows some of it spills onto the
# neighbouring letters, and the model still writes the right letter (it printed `delbaf`). The
# row that writes `</s>` looks at `f`, the letter written just before it. Over the 1,000 unseen
# strings:

# %%
share_after = weight_on_letter_written(model, fresh)
print("weight on the source letter being written, 1,000 unseen strings:")
print(
    f"  before training {share_before:.2f}   after training {share_after:.2f}"
)
even = len(fresh) / sum(len(w) for w in fresh)  # 1/L at each of L letters
print(f"  an even spread over each word's letters: {even:.2f}")

# %% tags=["remove-cell"]
# untrained: about an even spread; trained: well over twice that
assert share_before < 1.5 * even and share_after > 2 * even

# %% [markdown]
# Before training a position puts 0.17 of its weight on the letter it has to write, about what
# an even spread would give: in a word of $L$ letters an even spread gives each letter $1/L$,
# which over all the positions of the 1,000 test strings averages to their number of words over
# their number of letters, 0.17 (a little under the $6/33 = 0.18$ of equally many words of each
# length 3 to 8, because the test set is short of three-letter words). After
# training: 0.64. This is what cross-attention is for: a lookup into the source whose pattern is
# learned from the task. In translation the pattern is less regular, because word order differs
# between languages; chapter 09 plots it for dates.
#
# The average hides how the work is divided. Here is the cross-attention on `fabled` of each head
# of both decoder layers, after training (Fig. 7.4):

# %% tags=["hide-input"] caption="Cross-attention on fabled after training, for each head (rows, head 0 at the top) of the two decoder layers: layer 0 in the left column, layer 1 in the right column. In layer 1 every head runs along the anti-diagonal, but on a few middle rows a head peaks on a neighbour of the right letter (no row is missed by all four heads); layer 0 spreads its weight more evenly." alt="Eight heatmaps in four rows of two, each 7 rows (d, e, l, b, a, f, </s>) by 6 columns (f, a, b, l, e, d), with one colour bar from 0 to 1. Left column, layer 0: mostly dark cells, weights mostly under about 0.5; head 0 is brightest at row d column d (about 0.8) and at row f column f (about 0.5). Right column, layer 1: in all four heads bright cells run along the anti-diagonal from row d at column d down to rows f and </s> at column f; in the middle rows some heads are brightest on the right letter and others on a neighbouring one."
with torch.no_grad():
    model(src_f, tgt_in_f, *make_seq2seq_masks(src_f, tgt_in_f, PAD))
fig, axes = plt.subplots(
    num_heads,
    2,
    figsize=(4.6, 9.0),
    sharex=True,
    sharey=True,
    layout="constrained",
)
for i, layer in enumerate(model.decoder.layers):
    for h in range(num_heads):
        ax = axes[h, i]
        plot_attention(
            layer.cross_attn_weights[0, h],
            keys=list("fabled"),
            queries=show_tokens(labels_f[0]).split(),
            ax=ax,
            title=f"layer {i}, head {h}",
            colorbar=False,
            vmax=1.0,
        )
        ax.tick_params(axis="x", labelrotation=0)
        ax.set_xlabel("source letter" if h == num_heads - 1 else "")
        ax.set_ylabel("letter being written" if i == 0 else "")
fig.colorbar(axes[0, 0].images[0], ax=axes, shrink=0.4, label="weight")
plt.show()

# %% [markdown]
# The same maps in letters: for each row, the source letter that gets the largest weight, in each
# head and in the mean over layer 1's heads (the averaged map of the last layer after training);
# then, for head 0 of layer 0, the weight each row puts on the letter it writes:

# %%
head_weights = [layer.cross_attn_weights[0] for layer in model.decoder.layers]
rows = []
for r, tok in enumerate(show_tokens(labels_f[0]).split()):
    peaks = [
        " ".join("fabled"[w[h, r].argmax()] for h in range(num_heads))
        for w in head_weights
    ]
    mean_peak = "fabled"[head_weights[1][:, r].mean(0).argmax()]
    rows.append((tok, *peaks, mean_peak))
display(
    Table(
        ["writes", "layer 0, heads 0-3", "layer 1, heads 0-3", "layer 1 mean"],
        rows,
    )
)
w00 = head_weights[0][0]  # layer 0, head 0
print("layer 0, head 0, weight on the letter being written, per row:")
print(
    "  "
    + "   ".join(f"{c} {w00[r, 5 - r]:.2f}" for r, c in enumerate("delbaf"))
)

# %% [markdown]
# In the second layer (the right column of Fig. 7.4) all four heads read the source back to front,
# but not every head gets every row: on some middle rows a head peaks on a neighbour of the
# right letter. The row that writes `l` peaks on `e` in head 0 and on `b` in head 1; the row that
# writes `a` peaks on `f` in heads 1 and 3; the row that writes `b` peaks on `l` in head 3. Only
# head 2 peaks on the right letter in every row. No row is missed by all four heads, and in
# their mean every row peaks on the right letter (the table's last column); the misses are the
# spill onto neighbouring letters in the middle rows of the averaged map. The first layer (left
# column) spreads its weight more evenly. Its head 0 peaks on the right letter in five of the six
# letter rows, with the most weight at the two ends of the word (0.77 on `d` and 0.54 on `f`,
# against 0.18 to 0.27 in the rows between). Per head, over the 1,000 unseen strings:

# %%
src_t, tgt_in_t, _ = reversal_batch(fresh)
with torch.no_grad():
    model(src_t, tgt_in_t, *make_seq2seq_masks(src_t, tgt_in_t, PAD))
rows = [
    (b, t, len(w) - 1 - t) for b, w in enumerate(fresh) for t in range(len(w))
]
b_i, t_i, s_i = (torch.tensor(c) for c in zip(*rows))
print("weight on the source letter being written, 1,000 unseen strings:")
for i, layer in enumerate(model.decoder.layers):
    w = layer.cross_attn_weights[b_i, :, t_i, s_i].mean(0)  # one per head
    per_head = "  ".join(f"{v:.2f}" for v in w.tolist())
    print(f"  layer {i}, heads 0-3: {per_head}   (mean {w.mean():.2f})")

# %% [markdown]
# Every head of the second layer puts 0.60 to 0.67 of its weight on the letter being written;
# the heads of the first layer put 0.20 to 0.29 there, about 1.2 to 1.7 times the even spread of
# 0.17 (head 0 the most). In this model the lookup happens mostly in the second layer, and all
# four of its heads do it.
#
# Cross-attention is one of the three attentions of the trained model. The other two, in the
# last layer of each stack, on `fabled`, averaged over the heads (Fig. 7.5):

# %% tags=["hide-input"] caption="Self-attention of the trained model on fabled, averaged over the four heads, in the last layer of each stack: the encoder (top) and the decoder (bottom). In the encoder each letter puts its largest weight on itself; in the decoder each position splits its weight between the start token, itself and the letters written in between." alt="Two heatmaps, one above the other, with one colour bar from 0 to 1. Top, 6 by 6, rows and columns f a b l e d: the diagonal cells are the brightest of their rows, between about 0.25 and 0.5, with d at the bottom right the brightest; the other cells are dark, under about 0.2. Bottom, 7 by 7, rows and columns <s> d e l b a f: every cell above the diagonal is black (masked); the <s> row has all its weight, 1, on <s>; the other rows have their brightest cells mostly in the first column and on the diagonal, and grow dimmer and more even towards the bottom row."
with torch.no_grad():
    model(src_f, tgt_in_f, *make_seq2seq_masks(src_f, tgt_in_f, PAD))
fig, axes = plt.subplots(2, 1, figsize=(4.2, 7.0), layout="constrained")
plot_attention(
    model.encoder.layers[-1].attn_weights[0].mean(0),
    keys=list("fabled"),
    ax=axes[0],
    title="encoder self-attention",
    colorbar=False,
    vmax=1.0,
)
plot_attention(
    model.decoder.layers[-1].self_attn_weights[0].mean(0),
    keys=show_tokens(tgt_in_f[0]).split(),
    ax=axes[1],
    title="decoder self-attention (masked)",
    colorbar=False,
    vmax=1.0,
)
for ax in axes:
    ax.tick_params(axis="x", labelrotation=0)
fig.colorbar(axes[0].images[0], ax=axes, shrink=0.5, label="weight")
plt.show()

# %%
enc_w = model.encoder.layers[-1].attn_weights[0].mean(0)
dec_w = model.decoder.layers[-1].self_attn_weights[0].mean(0)
on_self = " ".join(f"{c} {v:.2f}" for c, v in zip("fabled", enc_w.diagonal()))
on_diagonal = bool((enc_w.argmax(-1) == torch.arange(6)).all())
print("encoder, weight of each letter on itself:")
print(f"  {on_self}   largest in its row: {on_diagonal}")
print("decoder, weight of each position on <s>, on itself, on the rest:")
for r, tok in enumerate(show_tokens(tgt_in_f[0]).split()[1:], start=1):
    first, itself = dec_w[r, 0].item(), dec_w[r, r].item()
    rest = dec_w[r, 1:r].sum().item()  # the letters written in between
    print(
        f"  {tok}   <s> {first:.2f} (even spread {1 / (r + 1):.2f})"
        f"   itself {itself:.2f}   rest {rest:.2f}"
    )

# %% [markdown]
# The encoder's last layer puts each letter's largest weight on itself (0.25 to 0.52) and spreads
# the rest over the other letters: on this word, each position of the memory weighs its own letter most, though
# in five of the six rows with less than half of its weight. The decoder's masked self-attention
# (its rows labelled, unlike the cross-attention tables, by the token each position reads) splits
# each position's weight between `<s>`, itself and the letters written in between. Its weight on `<s>`
# falls as the position advances, from 0.45 to 0.18, but more slowly than an even spread over the
# positions it may see (0.50 to 0.14): from the position that reads `e` on, `<s>` gets more than its even
# share. Which letter comes next is fetched from the source by cross-attention.
#
# ## Does the factor $\sqrt{d_\text{model}}$ matter to training?
#
# Earlier we argued from starting sizes only. Now that the model has a task, we can train it
# without the factor: the same model, the same initialisation, and token vectors entering the
# stacks at $1/\sqrt{32}$ of their size with it. Two pairs of runs, from two model seeds,
# because one run of each says little; all four train on the same stream of strings, the one
# the test strings were kept out of. The loss of one step is that of a single batch of 64
# strings, so we print means over windows of steps:


# %%
def without_factor(m: Transformer) -> Transformer:
    """Drop the factor sqrt(d_model) from both stacks' embeddings."""
    for stack in (m.encoder, m.decoder):
        stack.embed.scale = 1.0
    return m


def accuracy_of(m: Transformer) -> float:
    m.eval()
    out = reverse_with(m, fresh)
    return sum(w[::-1] == o for w, o in zip(fresh, out)) / len(fresh)


set_seed(0)
start = rms(Transformer(config).encoder.embed.tok.weight.detach())
print(f"RMS per entry at the start: positions {rms(pe):.3f}, token vectors")
scaled_start = start * math.sqrt(d_model)
print(f"  with the factor {scaled_start:.3f}, without it {start:.3f}")
runs = [(0, True, losses, accuracy)]  # the model trained above
trained = {}  # the three new models (exercise 2 tests one on longer strings)
for model_seed, factor in ((0, False), (1, True), (1, False)):
    set_seed(model_seed)
    m = Transformer(config)
    if not factor:
        m = without_factor(m)
    run_losses = train(m, reversal_batch)  # the stream seeded TRAIN_SEED
    runs.append((model_seed, factor, run_losses, accuracy_of(m)))
    trained[model_seed, factor] = m
rows = []
for model_seed, factor, run_losses, acc in runs:
    early = sum(run_losses[150:250]) / 100
    late = sum(run_losses[550:600]) / 50
    rows.append(
        (model_seed, "with" if factor else "without", early, late, acc)
    )
Table(
    [
        "model seed",
        "sqrt(d) factor",
        "loss, steps 151-250",
        "loss, steps 551-600",
        "reversed",
    ],
    rows,
    formats={
        "loss, steps 151-250": ".3f",
        "loss, steps 551-600": ".3f",
        "reversed": ".1%",
    },
)

# %% [markdown]
# Without the factor, the token vectors start at about a quarter of the positions' size (0.180
# against 0.707), and training goes no worse. At the end (steps 551 to 600) the model without it
# has the lower mean loss in both pairs, 0.005 against 0.020 and 0.008 against 0.018, and it
# reverses all 1,000 test strings in both, against 98.6 % and 99.6 % with the factor. Earlier
# (steps 151 to 250) the pairs disagree: the first run without the factor is far ahead, 0.039
# against 0.329, the second slightly behind, 0.317 against 0.301. So the factor is not what makes
# this model learn.
# What it fixes is the balance between token and position vectors at the start; whether that
# balance pays off for a large model on real text is more than this small task can tell.
#
# ## Which architecture is which
#
# The original Transformer uses both stacks because translation has two sequences: a source to
# read and a target to write. Later models kept one half or both:
#
# | family (examples) | stacks | self-attention sees |
# |---|---|---|
# | encoder-only (BERT) | encoder | all tokens |
# | decoder-only (GPT-2, Llama) | decoder, no cross-attn. | earlier tokens |
# | encoder–decoder (T5, BART) | both + cross-attn. | encoder: all; decoder: earlier |
#
# Encoder-only models are trained to fill in masked words and used to classify or to embed text;
# decoder-only models are trained to predict the next token; encoder–decoder models map one
# sequence to another. They share the same main blocks (attention, feed-forward, residual + norm)
# and differ mainly in wiring and masks; smaller differences are where the norm goes, the
# activation, and how positions enter (below). A decoder-only block is a decoder layer with its
# cross-attention removed, which leaves exactly our `EncoderLayer` used with a causal mask
# (GPT-2 also puts the norm first and uses GELU). Chapter 10 builds GPT that way and checks that
# its block computes what such a layer computes. Fig. 7.6 shows the two one-stack wirings side
# by side, with residual connections
# and norms left out (they wrap every sub-layer, as in Fig. 7.1). How
# positions enter also differs: the 2017 model adds sinusoids to embeddings scaled by
# $\sqrt{d_\text{model}}$, BERT and GPT-2 learn a position embedding, T5 adds a learned
# relative-position bias to the attention scores, and Llama rotates its queries and keys by
# position angles (rotary embeddings, RoPE, chapter 03).

# %% tags=["hide-input"] caption="Encoder-only (left, as in BERT) and decoder-only (right, as in GPT) stacks of 12 layers. Both are a stack of self-attention and feed-forward blocks; they differ in the self-attention mask and in what the top produces." alt="Two columns of boxes, read bottom to top. Left, encoder-only (BERT): tokens, embedding + position, a dashed frame marked × 12 holding self-attention (padding mask) and feed-forward, and on top a vector per token. Right, decoder-only (GPT): the same boxes, except that the attention is masked self-attention and the top is next-token scores."
model_families(num_layers=12)  # BERT-base and GPT-2 small both have 12 layers
plt.show()

# %% [markdown]
# ## Summary
#
# * An encoder layer is self-attention + feed-forward; a decoder layer inserts cross-attention
#   over the encoder's memory between its masked self-attention and its feed-forward. Each
#   sub-layer is wrapped in dropout, a residual connection and a layer norm (post-norm in the
#   2017 paper, pre-norm in GPT-2 and most models since; chapter 06). Written from
#   `nn.Linear`, `nn.LayerNorm` and a softmax, an encoder layer's `forward` is two lines, one per sub-layer, and a decoder
#   layer's three; the package's layers compute the same function.
# * Below the layers, token embeddings are multiplied by $\sqrt{d_\text{model}}$ and added to the
#   sinusoidal positions. The factor belongs with the reference initialisation of the tied table,
#   $\mathcal N(0, 1/d_\text{model})$: together they give token vectors of about unit size per
#   entry. With Glorot on the embeddings their size depends on the vocabulary instead. On the
#   reversal task, training without the factor went no worse, in two pairs of runs.
# * The Transformer encodes a source once (`encode`) and decodes with that memory (`decode`): on
#   the whole shifted target in training, once per new token when generating. A
#   `MiniTransformer` of about 35 lines (embeddings, two lists of layers, a tied output layer)
#   computes what the package's `Transformer` computes.
# * Every layer keeps the shape `(batch, length, d_model)`; cross-attention's output has the
#   target's length; the logits are `(batch, L_tgt, V_tgt)`.
# * Parameters: $4d^2 + 2d\,d_\text{ff} + 9d + d_\text{ff}$ per encoder layer,
#   $8d^2 + 2d\,d_\text{ff} + 15d + d_\text{ff}$ per decoder layer, $Vd$ per embedding table
#   (one when tied), $d\,V_\text{tgt} + V_\text{tgt}$ for an untied output layer ($V_\text{tgt}$
#   when tied), $2d$ per pre-norm stack. The paper's base model, tied: 63.1 M (the paper: 65 M).
# * Our layers match PyTorch's to float32 rounding once the weights are copied across.
# * Trained for 600 steps on random strings (one run, seed 0), the model reverses 98.6 % of 1,000 unseen strings
#   of 3 to 8 letters (its training lengths), and the cross-attention of its last decoder layer reads the source back to front: 0.64
#   of a position's weight falls on the letter it writes, against 0.17 before training. In this
#   model the second decoder layer does the lookup (each of its four heads puts 0.60 to 0.67 on
#   that letter), the first much less (0.20 to 0.29). On `fabled`, the encoder's last layer puts
#   each letter's largest weight on itself (0.25 to 0.52), and the decoder's masked
#   self-attention gives `<s>` more than an even share from the position that reads `e` on.
# * Encoder-only (BERT), decoder-only (GPT) and encoder–decoder (T5) models are built from the
#   same main blocks; they differ in which stacks they keep, in their masks, and in smaller
#   choices: where the norm goes, the activation, and how positions enter.
#
# Next, chapter 08 looks closely at the masks this chapter used: what each one hides, how a
# wrong one leaks, and how padding and causality combine.
#
# ## Exercises
#
# **1. What cross-attention costs.** Before running anything, predict how many parameters the
# cross-attention sub-layers (the attention and the layer norm that follows it) add to the
# paper's base model, and what share of the tied model's parameters that is. Then check with
# `count_parameters` on the base model, built on the `meta` device as above.

# %% tags=["solution"]
with torch.device("meta"):
    base = Transformer(TransformerConfig(37_000, 37_000, tie_embeddings=True))
cross_params = sum(
    count_parameters(layer.cross_attn) + count_parameters(layer.norm2)
    for layer in base.decoder.layers
)
predicted = 6 * (attention_params(512) + 2 * 512)
share = cross_params / count_parameters(base)
print(
    f"cross-attention: {cross_params:,} parameters "
    f"({share:.1%} of the model); predicted {predicted:,}"
)

# %% [markdown] tags=["solution"]
# Each decoder layer's cross-attention has four $512 \times 512$ projections with biases,
# $4(512^2 + 512) = 1{,}050{,}624$, and its layer norm $2 \cdot 512 = 1{,}024$; six layers make
# 6,309,888, 10.0 % of the tied model. A decoder-only model (GPT) has none of them.

# %% [markdown]
# **2. Longer than anything in training.** The model was trained on strings of 3 to 8 letters.
# Before running: how often will it reverse random strings of exactly 8 letters? Of 9, 10, 12?
# The sinusoidal positions give every position up to the table's length (64 here) a vector; does the rule carry over?
# Check with `reverse_with` on 500 random strings of each length.


# %% tags=["solution"]
def reversed_exactly(m: Transformer, words: list[str]) -> float:
    written = reverse_with(m, words)
    return sum(w[::-1] == out for w, out in zip(words, written)) / len(words)


gen = torch.Generator().manual_seed(3)
tested = {}
for length in (8, 9, 10, 12):
    picks = torch.randint(len(LETTERS), (500, length), generator=gen)
    tested[length] = ["".join(LETTERS[j] for j in r) for r in picks.tolist()]
    rate = reversed_exactly(model, tested[length])
    print(f"{length:>2} letters: reversed exactly {rate:6.1%}")
other = reversed_exactly(trained[1, True], tested[9])
print(f"the model of seed 1 (with the factor), 9 letters: {other:.1%}")

# %% [markdown] tags=["solution"]
# It reverses 96.4 % of the 8-letter strings, the longest length it was trained on, then 17.6 %
# at 9 letters and none at 10 or 12. These are the rates of this one trained model: the model
# trained from model seed 1 (with the factor) in the experiment on $\sqrt{d_\text{model}}$
# reverses 27.6 % of the same 9-letter strings. Counting positions from 0, the sinusoids give vectors to source positions from 8 on (the ninth letter) and to decoder
# positions from 9 on, but no training example ever asked the model to use them, and what it
# learned for the positions it saw carries over only a little, at 9 letters, and not at all
# beyond. The paper chose sinusoids partly because they "may allow
# the model to extrapolate to sequence lengths longer than the ones encountered during training"
# (section 3.5); in this small experiment they do not.

# %% [markdown]
# **3. Copying instead of reversing.** Train a fresh model of the same size, in the same way, to
# **copy** its input (`hello` → `hello`). Before you look: where should the cross-attention of its
# last decoder layer put its weight?


# %% tags=["solution"]
def copy_batch(words: list[str]):
    """Like reversal_batch, but the target is the word itself."""
    src, _, _ = reversal_batch(words)
    _, tgt_in, labels = reversal_batch([w[::-1] for w in words])
    return src, tgt_in, labels


set_seed(0)
copier = Transformer(config)
train(copier, copy_batch)
copier.eval()
weights = cross_attention(copier, *copy_batch(fresh)[:2])
same, mirrored = [], []
for b, w in enumerate(fresh):
    for t in range(len(w)):
        same.append(weights[b, t, t])
        if t != len(w) - 1 - t:  # a middle letter is its own mirror: skip it
            mirrored.append(weights[b, t, len(w) - 1 - t])
same, mirrored = torch.stack(same).mean(), torch.stack(mirrored).mean()
print("weight on source position t, 1,000 unseen strings:", f"{same:.2f}")
print("weight on source position L-1-t (t != L-1-t):    ", f"{mirrored:.2f}")
copies = reverse_with(copier, fresh)  # greedy decoding, as for reversal
hits = sum(w == out for w, out in zip(fresh, copies))
print(f"copied exactly: {hits / len(fresh):.1%} of the 1,000 unseen strings")

# %% [markdown] tags=["solution"]
# The diagonal: the position that writes letter $t$ of the copy puts 0.69 of its weight on source
# position $t$, the letter it copies, and 0.04 on the mirrored position $L-1-t$ that reversal
# reads (the middle letter of an odd-length string, its own mirror, left out). And it has learned the task: it copies 99.8 % of the 1,000 unseen strings exactly. The architecture and the training are the same; where cross-attention looks is learned
# from the task.
