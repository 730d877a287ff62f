# %% [markdown]
# # 02 — Embeddings
#
# A neural network computes with numbers, and a sentence is not a list of numbers. The first
# step of every transformer is therefore to turn each token (a word or a piece of a word)
# into a vector. This chapter shows that the layer doing this, the **embedding**, is nothing
# more than a table with one row per token, that this table is learned like any other
# weight, and what a *trained* table looks like: tokens used in similar ways get rows that
# point in similar directions.
#
# What you will see:
#
# 1. an embedding is a lookup table `E[i, :]`, looking up is the same as multiplying a
#    one-hot vector by `E`, and the similarity of two rows is the angle between them;
# 2. `nn.Embedding` is that table as a trainable weight: a batch's gradient reaches only the
#    rows it used, and whether the optimiser's step also moves other rows depends on the
#    optimiser;
# 3. where the meaning comes from: a tiny model trained to predict the next word pulls the
#    rows of words that occur in the same contexts together;
# 4. the trained table of a real model (all-MiniLM-L6-v2, a small BERT): a similarity heatmap
#    and a 2-D projection in which related words cluster;
# 5. token embeddings versus contextual token embeddings versus sentence embeddings, and how
#    much of the word order survives in a sentence embedding.

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from IPython.display import display
from matplotlib.patches import Arc
from torch import nn

from transformer_course.utils import Table, count_parameters, set_seed

# %%
# the same random numbers on every run
set_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)  # 4 decimals

# %% [markdown]
# ## From tokens to ids to vectors
#
# Before a model sees a sentence, a tokenizer splits it into tokens and replaces each token by
# its index in a fixed vocabulary. We start with a toy vocabulary of five words, so that the
# whole table fits on the screen.

# %%
vocab = ["the", "cat", "dog", "car", "saw"]
token_to_id = {tok: i for i, tok in enumerate(vocab)}
sentence = ["the", "cat", "saw", "the", "dog"]
ids = torch.tensor([token_to_id[t] for t in sentence])
print("ids:", ids.tolist())

# %% [markdown]
# ### One-hot vectors: correct, but useless for meaning
#
# The simplest vector for token `i` is the *one-hot* vector: length `V` (the vocabulary
# size), all zeros except a 1 at position `i`. It identifies the token, but every pair of
# different tokens is equally far apart: the dot product of two different one-hot vectors is
# 0. "cat" is no closer to "dog" than to "car". One-hot vectors are also as long as the
# vocabulary (30,522 for BERT, 50,257 for GPT-2).

# %%
one_hot = F.one_hot(torch.arange(len(vocab)), num_classes=len(vocab)).float()
print(one_hot)
gram = one_hot @ one_hot.T  # all pairwise dot products
print("dot product 1 with itself, 0 with every other token:")
print(torch.equal(gram, torch.eye(len(vocab))))

# %% [markdown]
# ### An embedding is a lookup table
#
# An embedding gives every token a short, *dense* vector instead: a matrix $E$ of shape
# `(V, d)` whose row $i$ is the vector of token $i$,
#
# $$e_i = E[i, :].$$ (eq-02-1)
#
# Here $d = 2$, so that we can draw the rows (Fig. 2.1), and we write the numbers by hand, choosing
# them so that the two animals point in nearly the same direction; in a real model they are learned.

# %%
E = torch.tensor(
    [
        [0.1, -1.0],  # the
        [1.0, 0.3],  # cat
        [0.9, 0.5],  # dog
        [-0.6, 0.8],  # car
        [-0.5, -0.8],  # saw
    ]
)
print("E has shape", tuple(E.shape), "= (vocabulary size, embedding size)")
print("row of 'dog':", E[token_to_id["dog"]])

# %% [markdown]
# ### Similarity is an angle
#
# Two rows are similar when they point the same way. The **cosine similarity** measures
# exactly that, the cosine of the angle $\theta$ between them:
#
# $$\cos\theta = \frac{a \cdot b}{\|a\|\,\|b\|} \in [-1, 1].$$ (eq-02-2)
#
# It is 1 for vectors pointing the same way, 0 for orthogonal ones (like any two one-hot
# vectors) and −1 for opposite ones; the lengths of the vectors do not matter. Dividing each
# row by its length first makes every dot product a cosine, so one matrix product gives all
# of them.

# %%
unit_E = F.normalize(E, dim=-1)  # each row divided by its length
cos_E = unit_E @ unit_E.T
display(
    Table(
        ["", *vocab],
        [(w, *row) for w, row in zip(vocab, cos_E.tolist())],
        formats=dict.fromkeys(vocab, ".2f"),
    )
)
cat_id = token_to_id["cat"]
for other in ["dog", "car"]:
    c = cos_E[cat_id, token_to_id[other]]
    print(f"cat and {other}: {torch.rad2deg(torch.acos(c)):.0f} degrees apart")


# %% tags=["hide-input"] caption="The five rows of the hand-made table drawn as arrows in the plane. The cosine of the angle between two arrows is their similarity: cat and dog are 12 degrees apart (cosine 0.98), cat and car 110 degrees (cosine -0.34)." alt="Five arrows from the origin. cat and dog point right and slightly up, almost together, with a small arc between them labelled cos = 0.98. car points up and to the left, with a wide arc from cat labelled cos = -0.34. the points straight down, saw down and to the left."
def draw_arrows(ax, rows, labels, colour=None, side=None, fontsize=11) -> None:
    """Draw each 2-D row as an arrow from the origin, labelled past its tip.

    colour and side map a label to its colour and to a sideways shift of
    the label (-1, 0 or 1: clockwise, none, anticlockwise), which keeps
    apart the labels of arrows that point the same way.
    """
    colour, side = colour or {}, side or {}
    for label, (x, y) in zip(labels, rows.tolist()):
        c = colour.get(label, "black")
        arrow = {"arrowstyle": "->", "lw": 1.5, "color": c}
        ax.annotate("", (x, y), (0, 0), arrowprops=arrow)
        ux, uy = x / math.hypot(x, y), y / math.hypot(x, y)
        k = side.get(label, 0)
        ax.annotate(
            label,
            (x, y),
            textcoords="offset points",
            xytext=(12 * ux - 10 * k * uy, 12 * uy + 10 * k * ux),
            ha="center",
            va="center",
            color=c,
            fontsize=fontsize,
        )
    ax.axhline(0, color="grey", lw=0.5)
    ax.axvline(0, color="grey", lw=0.5)
    ax.set_aspect("equal")


def angle_deg(v: torch.Tensor) -> float:
    """Direction of a 2-D vector, in degrees."""
    return torch.rad2deg(torch.atan2(v[1], v[0])).item()


fig, ax = plt.subplots(figsize=(4.6, 4.2))
draw_arrows(ax, E, vocab)
# an arc for two angles, each labelled with its cosine away from the arrows
for other, radius, label_at in [
    ("dog", 0.6, (0.3, -0.3)),
    ("car", 0.3, (0.05, 0.75)),
]:
    a = angle_deg(E[token_to_id["cat"]])
    b = angle_deg(E[token_to_id[other]])
    ax.add_patch(Arc((0, 0), 2 * radius, 2 * radius, theta1=a, theta2=b))
    mid = torch.deg2rad(torch.tensor((a + b) / 2))
    c = cos_E[token_to_id["cat"], token_to_id[other]].item()
    ax.annotate(
        f"cat–{other}: cos = {c:.2f}",
        (radius * torch.cos(mid).item(), radius * torch.sin(mid).item()),
        xytext=label_at,
        fontsize=9,
        arrowprops={"arrowstyle": "-", "lw": 0.8, "color": "grey"},
    )
ax.set_xlim(-1.3, 1.6)
ax.set_ylim(-1.3, 1.1)
ax.set_title("A hand-made table with d = 2")
fig.tight_layout()
plt.show()

# %% [markdown]
# In the matrix, "cat" and "dog" have a cosine of 0.98; "cat" and "car" −0.34 (Fig. 2.1), and "cat"
# and "saw" −0.75: they point away from each other. The numbers are ours; training has to find such
# rows by itself, as the section "Where the meaning comes from" shows.
#
# ### Looking up is multiplying by a one-hot vector
#
# Looking up a row is the same as multiplying the one-hot vector by the matrix: the 1 picks
# out exactly one row and the zeros discard the others. That is why an embedding layer is
# sometimes described as "a linear layer without bias applied to one-hot inputs". The lookup
# gives the same numbers without building the `V`-long vectors or doing `V × d`
# multiplications, which matters when `V` is 50,000.

# %%
i = token_to_id["dog"]
print("one-hot:", one_hot[i].tolist())
print("one-hot @ E:", one_hot[i] @ E)

# A whole sentence at once: index with the id tensor, or multiply its one-hot
# matrix.
looked_up = E[ids]  # (sequence length, d)
multiplied = F.one_hot(ids, len(vocab)).float() @ E
print("sentence", sentence, "->", tuple(looked_up.shape))
print("row i of E:", torch.equal(one_hot[i] @ E, E[i]))
print("looking up = multiplying:", torch.equal(looked_up, multiplied))

# %% [markdown]
# ## `nn.Embedding` is that table, and it is trainable
#
# PyTorch's `nn.Embedding(V, d)` holds exactly such a `(V, d)` matrix as its `weight` and
# indexes it with integer ids of any shape: a batch of shape `(batch, length)` becomes
# `(batch, length, d)`. We copy our hand-made table into one to check that it is the same
# operation.

# %%
emb = nn.Embedding(num_embeddings=len(vocab), embedding_dim=2)
with torch.no_grad():
    emb.weight.copy_(E)
batch = torch.tensor(
    [
        [0, 1, 4, 0, 2],  # the cat saw the dog
        [0, 2, 4, 0, 3],  # the dog saw the car
    ]
)
out = emb(batch)
print("input ids", tuple(batch.shape), "-> embeddings", tuple(out.shape))
print(
    "weight is a Parameter:",
    isinstance(emb.weight, nn.Parameter),
    "| trainable numbers:",
    count_parameters(emb),
)

# %% tags=["remove-cell"]
assert torch.equal(out, E[batch])

# %% [markdown]
# ### Which rows does the gradient reach?
#
# The table is a parameter, so gradients reach it. Which rows do they reach? Only the rows
# the batch looked up: the output does not depend on the other rows at all. Below, the
# sentence "the cat saw the dog", which has no "car" (id 3), gets a made-up regression loss;
# the row of "car" receives a zero gradient and every used row a non-zero one.

# %%
emb.zero_grad()
sent = ids[None]  # the cat saw the dog, as a batch of one: (1, 5)
target = torch.randn(1, 5, 2, generator=torch.Generator().manual_seed(0))
out = emb(sent)
# keep the gradient with respect to the looked-up vectors too
out.retain_grad()
F.mse_loss(out, target).backward()
row_grad_norm = emb.weight.grad.norm(dim=1)
for tok, g in zip(vocab, row_grad_norm):
    print(f"{tok:>4}: gradient norm {g:.4f}")
used = torch.zeros(len(vocab), dtype=torch.bool)
used[sent.unique()] = True
print("gradient only on the rows looked up:")
print(torch.equal(row_grad_norm > 0, used))

# %% [markdown]
# "the" (id 0) appears twice in the sentence; its row's gradient is the *sum* of the
# gradients at both places it was looked up, because both read the same row:

# %%
# gradient at each place "the" was looked up: one row per occurrence
occurrences = out.grad[sent == 0]
print("gradient of the row 'the':", emb.weight.grad[0])
print("at its first occurrence:  ", occurrences[0])
print("at its second occurrence: ", occurrences[1])
same = torch.allclose(emb.weight.grad[0], occurrences.sum(dim=0))
print("the row's gradient = the sum of the two:", same)

# %% [markdown]
# ### Which rows does the optimiser move?
#
# A zero gradient does not always mean an unchanged row: that depends on the optimiser. Plain
# SGD subtracts the gradient times the learning rate, so it moves exactly the rows the batch
# used. Adam keeps a running average of past gradients (its *momentum*), so a row used in an
# earlier step keeps moving after the batches stop using it. AdamW, the optimiser chapter 09
# trains with, also shrinks every weight a little at every step (*weight decay*), used or
# not. Below, step 1 uses "cat" and "dog" and step 2 only "cat", and we list the rows that
# step 2 changed.


# %%
def rows_moved_by_step_2(make_optimiser, sparse: bool = False) -> list[str]:
    """Two steps on a copy of E: step 1 looks up cat and dog, step 2 only cat.

    Returns the tokens whose rows step 2 changed.
    """
    table = nn.Embedding(len(vocab), 2, sparse=sparse)
    with torch.no_grad():
        table.weight.copy_(E)
    optimiser = make_optimiser(table.parameters())
    for step_ids in (["cat", "dog"], ["cat"]):
        before = table.weight.detach().clone()
        optimiser.zero_grad()
        looked_up = table(torch.tensor([token_to_id[t] for t in step_ids]))
        looked_up.pow(2).sum().backward()  # any loss will do
        optimiser.step()
    changed = (table.weight.detach() != before).any(dim=1)
    return [tok for tok, c in zip(vocab, changed) if c]


optimisers = {
    "SGD": lambda p: torch.optim.SGD(p, lr=0.1),
    "Adam": lambda p: torch.optim.Adam(p, lr=0.1),
    "AdamW (weight decay 0.01)": lambda p: torch.optim.AdamW(
        p, lr=0.1, weight_decay=0.01
    ),
}
moved = {name: rows_moved_by_step_2(make) for name, make in optimisers.items()}
sparse_adam = rows_moved_by_step_2(
    lambda p: torch.optim.SparseAdam(p, lr=0.1), sparse=True
)
moved["SparseAdam (sparse=True gradients)"] = sparse_adam
Table(
    ["optimiser", "rows that step 2 changed"],
    [(name, ", ".join(rows)) for name, rows in moved.items()],
)

# %% [markdown]
# So "a batch's gradient touches only its rows" is always true, but "a step changes only
# those rows" holds for plain SGD, not for Adam and AdamW, the usual optimisers of
# transformers. When the table is huge and each batch uses few rows, PyTorch offers
# `nn.Embedding(sparse=True)`, whose gradient stores only the used rows, together with
# optimisers that accept it, such as `torch.optim.SparseAdam`, a "masked" Adam that updates
# only the rows present in the gradient ([PyTorch documentation](https://pytorch.org/docs/stable/generated/torch.optim.SparseAdam.html)).
#
# ## Where the meaning comes from
#
# Why would training make "cat" and "dog" similar? Because the loss asks the same of both
# rows. Take the smallest language model there is: an embedding table followed by one linear
# layer that scores every word of the vocabulary as the *next* word (chapter 10 trains a real
# one). In a corpus where "cat" and "dog" are followed by the same verbs, the two rows must
# produce the same predictions, and the simplest way is the same row, so training pulls
# them towards the same place; "car" and "bus"
# are followed by other verbs and end up elsewhere. This is the idea behind word2vec (whose
# skip-gram model predicts the words around a word, and whose CBOW model predicts a word from
# the words around it; Mikolov et al., 2013,
# [*Efficient Estimation of Word Representations in Vector Space*](https://arxiv.org/abs/1301.3781))
# and its successors, and the linguist J. R. Firth (1957, *A synopsis of linguistic theory
# 1930–1955*) put it in one line: "You shall know a word by the company it keeps."

# %%
nouns = {"animal": ["cat", "dog"], "vehicle": ["car", "bus"]}
verbs = {
    "animal": ["eats", "sleeps", "runs"],
    "vehicle": ["drives", "stops", "parks"],
}
words_lm = ["the", *nouns["animal"], *nouns["vehicle"]]
words_lm += [*verbs["animal"], *verbs["vehicle"]]
id_lm = {w: i for i, w in enumerate(words_lm)}
corpus = [
    ["the", noun, verb]
    for kind in nouns
    for noun in nouns[kind]
    for verb in verbs[kind]
]
print(
    f"{len(corpus)} sentences:", " | ".join(map(" ".join, corpus[::3])), "..."
)

# %% [markdown]
# The model reads one word, looks up its row, and turns the row into a score for every word
# of the vocabulary; the cross-entropy loss rewards a high score for the word that actually
# comes next. Both the table and the linear layer are trained, with Adam.


# %%
def train_bigram(
    sentences: list[list[str]], dim: int = 2, seed: int = 0, steps: int = 300
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Train an embedding table and a linear layer to predict each next word.

    Returns the table before and after training, and the final loss.
    """
    torch.manual_seed(seed)
    table = nn.Embedding(len(words_lm), dim)
    head = nn.Linear(dim, len(words_lm))  # a score for every next word
    pairs = [(id_lm[a], id_lm[b]) for s in sentences for a, b in zip(s, s[1:])]
    x, y = torch.tensor(pairs).T  # each word, and the word after it
    params = [*table.parameters(), *head.parameters()]
    optimiser = torch.optim.Adam(params, lr=0.1)
    start = table.weight.detach().clone()
    for _ in range(steps):
        optimiser.zero_grad()
        loss = F.cross_entropy(head(table(x)), y)
        loss.backward()
        optimiser.step()
    return start, table.weight.detach().clone(), loss.item()


def cos_lm(table: torch.Tensor, a: str, b: str) -> float:
    """Cosine similarity of the rows of words a and b."""
    return F.cosine_similarity(table[id_lm[a]], table[id_lm[b]], dim=0).item()


# %%
before, after, final_loss = train_bigram(corpus)
for a, b in [("cat", "dog"), ("car", "bus"), ("cat", "car")]:
    print(
        f"cos({a}, {b}): {cos_lm(before, a, b):6.3f} before training, "
        f"{cos_lm(after, a, b):6.3f} after"
    )
# After "the", each of the 4 nouns is equally likely; after a noun, each of
# its 3 verbs: no model can do better than this average cross-entropy.
best = (torch.log(torch.tensor(4.0)) + torch.log(torch.tensor(3.0))) / 2
print(f"final loss {final_loss:.3f}; the lowest possible {best:.3f}")
verb_ids = [id_lm[v] for kind in verbs for v in verbs[kind]]
print(
    "rows of the verbs changed by training:",
    not torch.equal(before[verb_ids], after[verb_ids]),
)
tables = [train_bigram(corpus, seed=s)[1] for s in range(10)]
spread = [cos_lm(t, "cat", "car") for t in tables]
print(
    f"cos(cat, car) after training, seeds 0 to 9: {min(spread):.3f} "
    f"to {max(spread):.3f}"
)
in_order = sum(
    min(cos_lm(t, "cat", "dog"), cos_lm(t, "car", "bus"))
    > cos_lm(t, "cat", "car")
    for t in tables
)
print(f"seeds where both pairs end closer than cat-car: {in_order} of 10")

# %% tags=["remove-cell"]
# each pair ends closer together than the animals are to the vehicles
for a, b in [("cat", "dog"), ("car", "bus")]:
    assert cos_lm(after, a, b) > cos_lm(after, "cat", "car")

# %% [markdown]
# Training starts from random rows (the cosines before training mean nothing) and ends within
# 0.001 of the lowest loss this corpus allows. On the way, the rows of "cat" and "dog" turned
# towards each other, as did "car" and "bus", while the animals and the vehicles ended up
# nearly at right angles in this run (cosine −0.078). That angle is not fixed: over ten
# seeds, cos(cat, car) ranges from −0.835 to −0.056, and a run can even end with a positive
# cosine (exercise 2 meets one, in two dimensions). What held in all ten runs is the order: cat–dog and car–bus
# end closer than cat–car. Fig. 2.2 shows the five rows that
# the model reads, before and after, in this run.

# %% tags=["hide-input"] caption="The rows of the, cat, dog, car and bus in the 2-dimensional table of the tiny next-word model. Left: random rows before training. Right: after 300 steps, cat and dog point nearly the same way, and so do car and bus. Both panels have the same scale: training also made the rows longer." alt="Two panels of arrows from the origin, on the same scale. Left, before training: five short arrows in unrelated directions. Right, after training: longer arrows; the cat and dog arrows point almost the same way, up and to the right; the car and bus arrows lie on top of each other, pointing up and to the left; the arrow of the points down and to the left."
shown_words = ["the", "cat", "dog", "car", "bus"]
colour_of = {"the": "grey", "cat": "tab:orange", "dog": "tab:orange"}
colour_of |= {"car": "tab:blue", "bus": "tab:blue"}
shown_ids = [id_lm[w] for w in shown_words]
# the same scale in both panels
reach = torch.cat([before[shown_ids], after[shown_ids]]).abs().max().item()
reach *= 1.45  # room for the labels past the tips
fig, axes = plt.subplots(1, 2, figsize=(6.0, 3.3))
for ax, lm_table, title in [
    (axes[0], before, "before training"),
    (axes[1], after, "after training"),
]:
    rows = lm_table[shown_ids]
    tip = dict(zip(shown_words, rows))
    # two arrows less than 25 degrees apart: their labels move apart, sideways
    side = {}
    for k, a in enumerate(shown_words):
        for b in shown_words[k + 1 :]:
            if F.cosine_similarity(tip[a], tip[b], dim=0) < math.cos(
                math.radians(25)
            ):
                continue
            u = F.normalize(tip[a] + tip[b], dim=0)
            across = torch.stack([-u[1], u[0]])  # u turned by 90 degrees
            side[a] = 1 if (tip[a] - tip[b]) @ across >= 0 else -1
            side[b] = -side[a]
    draw_arrows(ax, rows, shown_words, colour_of, side, fontsize=13)
    ax.set_xlim(-reach, reach)
    ax.set_ylim(-reach, reach)
    ax.set_title(title)
fig.tight_layout()
plt.show()

# %% [markdown]
# The verbs' rows did not move at all: in this corpus no verb is ever followed by a word, so
# no verb row is ever looked up. The table of a GPT is trained the same way, by predicting
# the next token, only with a deeper network above it and on billions of tokens.
#
# ## How big is the table?
#
# The size is `V × d` numbers. A table with a row for every word form grows huge: the word2vec
# vectors that Google released, trained on Google News, have 3 million rows (words and
# phrases) of 300 numbers.
# Subword tokenizers (below) keep the vocabulary to tens of thousands of entries, 30,522 for
# BERT and 50,257 for GPT-2; recent large models use more, such as the 128,256 of Llama 3,
# whose 8B model has 4,096 numbers per row.

# %%
rows = []
for name, V, d in [
    ("word2vec, Google News", 3_000_000, 300),
    ("BERT-base", 30_522, 768),
    ("MiniLM (BERT vocab)", 30_522, 384),
    ("GPT-2 small", 50_257, 768),
    ("Llama 3 8B", 128_256, 4096),
]:
    n = V * d
    rows.append((name, V, d, n / 1e6, 4 * n / 2**20))
Table(
    ["model", "V", "d", "M numbers", "MiB"],
    rows,
    formats={"V": ",", "M numbers": ".1f", "MiB": ".0f"},
    caption="table size, at 4 bytes per number (float32)",
)

# %% [markdown]
# ## A real, pretrained embedding table
#
# A table with random rows knows nothing. To see what training on real text puts into it, we
# load a pretrained model: **all-MiniLM-L6-v2**, a 6-layer BERT with 384-dimensional vectors,
# trained by the sentence-transformers project to give similar sentences similar vectors.
# The course's helper `load_minilm()` returns its tokenizer and model.
# Its embedding layer holds three tables, all added together at the input: one row per token,
# one row per position (the subject of chapter 03), and one per segment of a sentence pair.

# %%
from transformer_course.pretrained import load_minilm

tokenizer, model = load_minilm()
# word_embeddings is an nn.Embedding, like ours
table = model.embeddings.word_embeddings.weight.detach()
total = count_parameters(model)
rows = []
for name, layer in [
    ("token table", model.embeddings.word_embeddings),
    ("position table", model.embeddings.position_embeddings),
    ("segment table", model.embeddings.token_type_embeddings),
]:
    V, d = layer.weight.shape
    n = layer.weight.numel()
    rows.append((name, V, d, n, n / total))
display(
    Table(
        ["table", "rows", "d", "parameters", "share"],
        rows,
        formats={"rows": ",", "parameters": ",", "share": ".1%"},
    )
)
print(f"whole model: {total:,} parameters")

# %% [markdown]
# Half of this small model is its token table; the position and segment tables add 0.9 %.
# Its tokenizer uses *WordPiece*: frequent words are one token, rarer words are split into
# pieces (`##` marks a piece that continues a word), so its 30,522 entries cover nearly any
# English text (a word containing a character it has no entry for, such as most emoji, becomes
# one `[UNK]`).
# Chapter 11 trains a subword vocabulary of another kind (byte-pair encoding) and checks its
# first merge by hand, and chapter 12 looks at BERT's tokenizer in detail.

# %%
for word in ["cat", "unbelievable", "tokenization", "embeddings"]:
    pieces = tokenizer.tokenize(word)
    piece_ids = tokenizer.convert_tokens_to_ids(pieces)
    print(f"{word:>13} -> {pieces} -> ids {piece_ids}")

# %% [markdown]
# "unbelievable" has a row of its own; "tokenization" needs two pieces and "embeddings" four.
#
# ### Similar words have similar rows
#
# We take twenty single-token words in four groups and compare their rows with the cosine
# similarity. As a scale, we also compare 2,000 tokens drawn at random from the vocabulary.

# %%
groups = {
    "animals": ["cat", "dog", "horse", "cow", "lion"],
    "fruit": ["apple", "banana", "orange", "grape", "cherry"],
    "vehicles": ["car", "truck", "bus", "train", "bicycle"],
    "colours": ["red", "green", "blue", "yellow", "purple"],
}
words = [w for ws in groups.values() for w in ws]
group_of = torch.tensor(
    [g for g, ws in enumerate(groups.values()) for _ in ws]
)
word_ids = tokenizer.convert_tokens_to_ids(words)
# a word missing from the vocabulary would get the id of [UNK]
print(
    f"all {len(words)} words are single tokens of the vocabulary:",
    tokenizer.unk_token_id not in word_ids,
)

unit_table = F.normalize(table, dim=-1)  # (30522, 384), rows of length 1
unit = unit_table[word_ids]  # (20, 384): the twenty words' rows
cos = unit @ unit.T

same_group = group_of[:, None] == group_of[None, :]
off_diagonal = ~torch.eye(len(words), dtype=torch.bool)
by_group = [
    cos[same_group & off_diagonal & (group_of[:, None] == g)].mean().item()
    for g in range(len(groups))
]
# 2,000 different tokens
random_ids = torch.randperm(
    len(table), generator=torch.Generator().manual_seed(0)
)[:2000]
random_cos = unit_table[random_ids] @ unit_table[random_ids].T
print("mean cosine similarity of two different words")
print(f"  in the same group:      {cos[same_group & off_diagonal].mean():.3f}")
print(
    "    (" + ", ".join(f"{g} {c:.3f}" for g, c in zip(groups, by_group)) + ")"
)
print(f"  in different groups:    {cos[~same_group].mean():.3f}")
print(
    "  drawn at random:        "
    f"{random_cos[~torch.eye(2000, dtype=torch.bool)].mean():.3f}"
)

nearest = cos.masked_fill(~off_diagonal, -2).argmax(dim=1)
agree = group_of[nearest] == group_of
print(
    "the nearest of the other 19 words is in the same group for "
    f"{agree.float().mean():.0%}"
)
for k in torch.nonzero(~agree).flatten().tolist():
    n = nearest[k].item()
    print(f"  except {words[k]} -> {words[n]} ({cos[k, n]:.3f})")

# %% tags=["hide-input"] caption="Cosine similarity of the rows of twenty words in MiniLM's token table, grouped into animals, fruit, vehicles and colours (white lines). The colour block on the diagonal is the brightest and the fruit block the faintest, and the orange row is bright in the colour columns (brighter, on average, than in the fruit block itself)." alt="A 20 by 20 heatmap with the words on both axes and the diagonal left blank. Four 5 by 5 blocks along the diagonal are lighter, teal to yellow-green, than most of the rest, which is blue to dark purple; the colour block is the brightest and the fruit block the faintest. The orange row is green in the colour columns, brighter than in the fruit columns; the cherry row is teal at red."
fig, ax = plt.subplots(figsize=(5.4, 5.0))
# the diagonal (always 1) left blank, for contrast
shown = cos.clone().fill_diagonal_(float("nan"))
im = ax.imshow(shown, cmap="viridis", vmin=-0.1, vmax=0.6)
ax.set_xticks(range(len(words)), words, rotation=90)
ax.set_yticks(range(len(words)), words)
for k in range(1, len(groups)):  # lines between the groups
    ax.axhline(5 * k - 0.5, color="white", lw=1)
    ax.axvline(5 * k - 0.5, color="white", lw=1)
ax.tick_params(labelsize=11)
bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
bar.set_label("cosine similarity", fontsize=12)
bar.ax.tick_params(labelsize=11)
ax.set_title("Rows of MiniLM's token embedding table")
fig.tight_layout()
plt.show()

# %% [markdown]
# No one told the model that a cow is an animal: the rows came out this way from training on
# ordinary text, in which animal words occur in similar sentences. MiniLM was not trained like
# our tiny model: its weights come (Wang et al., 2020) from distilling the self-attention of a larger model
# trained to fill in masked words, then from fine-tuning on pairs of related sentences
# (chapter 12 tells the story). The objective differs; the source of the similarity, words that occur in similar
# contexts, is the same. Two words of a group have a
# mean cosine of 0.306, about three times the 0.104 of words from different groups, against
# 0.017 for random tokens. The fruit block of Fig. 2.3 is the faintest, and the two misses are
# both fruit: orange and cherry are also colours, and their nearest rows are yellow and red.
# On average, though, the two differ:


# %%
def mean_cos(word: str, group: str) -> float:
    """Mean cosine similarity of `word` with the other words of `group`."""
    others = [words.index(w) for w in groups[group] if w != word]
    return cos[words.index(word), others].mean().item()


for word in ["orange", "cherry"]:
    print(
        f"{word}: vs the other fruit {mean_cos(word, 'fruit'):.3f}, "
        f"vs the colours {mean_cos(word, 'colours'):.3f}"
    )

# %% [markdown]
# "orange" is closer to the colours on average as well; "cherry" is closer to the fruit, and
# only its single nearest neighbour, "red", is a colour.
#
# ### A 2-D picture: principal component analysis
#
# 384 dimensions cannot be drawn. **PCA** finds the two directions along which the twenty
# unit-length rows vary most and projects onto them: centre the rows, take the singular value
# decomposition, keep the first two right singular vectors. Each direction mixes all 384
# coordinates. (A singular vector's sign is arbitrary, and flipping it mirrors the picture in
# Fig. 2.4; we make each component's largest entry positive.)


# %%
def pca_2d(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Project the rows of x onto their first two principal components.

    Returns the (n, 2) coordinates and the fraction of the variance each
    component explains.
    """
    centred = x - x.mean(dim=0)
    _, s, vh = torch.linalg.svd(centred, full_matrices=False)
    components = vh[:2]
    largest = components.abs().argmax(dim=1)
    signs = torch.sign(components[torch.arange(2), largest])
    # largest entry of each component positive
    components = components * signs[:, None]
    return centred @ components.T, (s[:2] ** 2) / (s**2).sum()


xy, explained = pca_2d(unit)
print(
    "variance explained by the two components:",
    [round(v, 3) for v in explained.tolist()],
)
distance = torch.cdist(xy, xy)
print(
    "mean distance in the plot within a group: "
    f"{distance[same_group & off_diagonal].mean():.3f}, "
    f"between groups: {distance[~same_group].mean():.3f}"
)

# %% tags=["hide-input"] caption="The twenty unit-length rows projected onto their first two principal components, which keep 26 % of the variance. The four groups occupy four regions, and orange sits between the fruit and the colours." alt="A scatter plot of twenty labelled points in four colours. Animals are at the top left, vehicles at the bottom left, fruit in the middle and colours on the right, tightly packed; orange lies between the other fruit and the colours."
# labels of crowded points moved aside: (dx, dy) in points, left or right
label_offset = {
    "green": (-5, 0, "right"),
    "blue": (5, -4, "left"),
    "purple": (4, -11, "left"),
    "car": (5, -8, "left"),
    "truck": (-5, 0, "right"),
}
fig, ax = plt.subplots(figsize=(6.5, 5))
colours = plt.get_cmap("tab10")
for g, name in enumerate(groups):
    pts = xy[group_of == g]
    ax.scatter(pts[:, 0], pts[:, 1], color=colours(g), label=name, s=40)
for (x, y), w in zip(xy.tolist(), words):
    ax.annotate(
        w,
        (x, y),
        textcoords="offset points",
        xytext=label_offset.get(w, (4, 3, "left"))[:2],
        ha=label_offset.get(w, (4, 3, "left"))[2],
        va="center" if w in label_offset else "baseline",
        fontsize=9,
    )
ax.set_xlabel(f"first principal component ({explained[0]:.0%} of variance)")
ax.set_ylabel(f"second principal component ({explained[1]:.0%} of variance)")
ax.set_title("Twenty rows of MiniLM's token table, projected to 2-D")
ax.legend(loc="best", fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# The groups separate even in this 2-D projection (Fig. 2.4): two points of a group are 0.179
# apart on average, two points of different groups 0.709. The projection keeps only 26 % of
# the variance (17 % + 9 %). A projection always loses something; the heatmap of Fig. 2.3,
# computed in all 384 dimensions, is the more faithful picture.
#
# ## Token, contextual and sentence embeddings
#
# The table gives each token **one** vector, whatever the sentence around it: the row of
# "bank" is the same next to a river and next to a loan. The layers of the transformer
# (chapters 04–07) then mix information between positions, so the vectors *coming out* of
# the model are **contextual**: each one depends on the whole sentence. We compare the vector
# at the token "bank" in four sentences, twice: as it enters the first layer (the token row
# plus a position row and the segment row, layer-normalised), and as it leaves the sixth.

# %%
bank_sentences = [
    "he fished from the bank of the river.",
    "the grassy bank of the stream was wet.",
    "he withdrew money from the bank.",
    "the bank raised its interest rates.",
]
enc = tokenizer(bank_sentences, padding=True, return_tensors="pt")
with torch.no_grad():
    outputs = model(**enc, output_hidden_states=True)
# hidden_states[0]: into layer 1; hidden_states[6]: out of layer 6
hidden = outputs.last_hidden_state  # (4, length, 384): one vector per token
print("model output:", tuple(hidden.shape), "= (sentences, tokens, 384)")

bank_id = tokenizer.convert_tokens_to_ids("bank")
# where "bank" sits in each sentence
bank_pos = [row.tolist().index(bank_id) for row in enc["input_ids"]]
print("position of 'bank' in the four sentences:", bank_pos)
for layer, when in [(0, "entering layer 1"), (6, "leaving layer 6")]:
    h = outputs.hidden_states[layer]
    at_bank = F.normalize(
        torch.stack([h[s, p] for s, p in enumerate(bank_pos)]), dim=-1
    )
    print(f"cosine of the 'bank' vectors {when} (river, river, money, money):")
    print((at_bank @ at_bank.T).numpy().round(2))

# as a scale: "bank" leaving layer 6 against the other tokens of its sentence
h6 = F.normalize(outputs.hidden_states[6], dim=-1)
closest = []
for s, p in enumerate(bank_pos):
    n = int(enc["attention_mask"][s].sum())  # real tokens, [CLS] and [SEP] too
    c = h6[s, :n] @ h6[s, p]
    c[p] = -1  # not "bank" itself
    k = c.argmax().item()
    word = tokenizer.convert_ids_to_tokens(enc["input_ids"][s, k].item())
    closest.append(f"{word} {c[k]:.2f}")
print("leaving layer 6, the other token closest to 'bank' in its sentence:")
print("   ", ", ".join(closest))

# %% [markdown]
# Entering the first layer, the four vectors differ only because their position rows differ,
# and they group by position: "bank" at positions 5 and 6 (a river and a money sentence) has
# a cosine of 0.99, and so has "bank" at positions 3 and 2. Leaving the sixth layer, they
# group by meaning: 0.89 for the two river banks, 0.90 for the two money banks, 0.71 to 0.81
# across. The four "bank" vectors are still closer to each other than any of them is to
# another token of its own sentence (at most 0.64, for "money"): the token's identity still
# dominates its vector, and the context adjusts it.
#
# What enters the first layer is the sum of three rows, one from each table, normalised by a
# LayerNorm (chapter 06). We rebuild it from the tables:

# %%
tables = model.embeddings
input_ids = enc["input_ids"]  # (4, 11)
positions_used = torch.arange(input_ids.shape[1])  # 0, 1, ..., 10
with torch.no_grad():
    summed = (
        tables.word_embeddings(input_ids)  # (4, 11, 384)
        + tables.position_embeddings(positions_used)  # (11, 384), broadcast
        + tables.token_type_embeddings(enc["token_type_ids"])  # all segment 0
    )
    rebuilt = tables.LayerNorm(summed)
print(
    "LayerNorm(token + position + segment rows) equals hidden_states[0]:",
    torch.allclose(rebuilt, outputs.hidden_states[0], atol=1e-5),
)

# %% [markdown]
# A **sentence embedding** is one vector for a whole sentence. all-MiniLM-L6-v2 makes it by
# **mean pooling**: the average of the contextual token vectors. A batch pads the shorter
# sentences to the length of the longest with `[PAD]` tokens; they have output vectors too,
# and the attention mask (1 at real tokens, 0 at padding) keeps them out of the average:

# %%
mask = enc["attention_mask"].unsqueeze(-1).float()  # (4, length, 1)
pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1)  # (4, 384)
print("sentence embeddings:", tuple(pooled.shape))

n_real = enc["attention_mask"].sum(dim=1).tolist()
print("real tokens per sentence:", n_real, "of", hidden.shape[1])
s = 2  # "he withdrew money from the bank.": 9 real tokens, 2 padding
plain = hidden[s].mean(dim=0)  # padding included
print(
    "sentence 2, plain mean vs masked mean: largest difference "
    f"{(plain - pooled[s]).abs().max():.2f}, "
    f"cosine {F.cosine_similarity(plain, pooled[s], dim=0):.3f}"
)

# %% tags=["remove-cell"]
# the masked mean is the average over the sentence's real tokens only
assert torch.allclose(pooled[s], hidden[s, : n_real[s]].mean(dim=0), atol=1e-6)

# %% [markdown]
# Averaging the two padding vectors in would turn the sentence's vector by an angle whose
# cosine is 0.965. The course's
# `embed_sentences(texts, tokenizer, model)` does all the steps at once: tokenize, run the
# model, mean-pool with the mask, and scale each vector to length 1, so that a dot product is
# a cosine. Chapter 13 lists the package's mean pooling and uses `embed_sentences` to search
# a collection of texts by meaning.

# %%
from transformer_course.pretrained import embed_sentences

# `pooled` (mean pooling, above), scaled to unit length, is what it returns
same = torch.allclose(
    F.normalize(pooled, dim=-1),
    embed_sentences(bank_sentences, tokenizer, model),
    atol=1e-5,
)
print("embed_sentences equals the normalised masked mean, to 1e-5:", same)

# %% [markdown]
# ### How much word order survives?
#
# An average does not care about the order of what it averages. A sentence embedding can
# still depend on word order, but only if the encoder gave the tokens different vectors in
# the two orders. We compare five sentences with the first two: S1 swaps the roles of S0,
# S2 says what S0 says, in the passive voice (so its nouns come in S1's order), S3 says
# roughly what S0 says with other words, and S4 is about something else.

# %%
order_sentences = [
    "The cat chased the dog.",
    "The dog chased the cat.",
    "The dog was chased by the cat.",
    "A kitten ran after a puppy.",
    "Interest rates rose again.",
]
order_emb = embed_sentences(order_sentences, tokenizer, model)
order_cos = order_emb @ order_emb.T
Table(
    ["", "sentence", "vs S0", "vs S1"],
    [
        (f"S{k}", text, order_cos[k, 0].item(), order_cos[k, 1].item())
        for k, text in enumerate(order_sentences)
    ],
    formats={"vs S0": ".3f", "vs S1": ".3f"},
)

# %% [markdown]
# S0 and S1 say different things (who chases whom is swapped), yet their similarity is 0.991,
# far above the 0.568 of S3, which says roughly the same as S0 in other words. For scale:
# averaging in two padding vectors turned another sentence's vector further (cosine 0.965). S2
# means the same as S0, but is, if anything, closer to S1 (0.973 against 0.971), whose order
# of nouns it shares and whose meaning it does not. For these sentences, which words they
# contain counts for much more than their order.
#
# What tells the encoder the order at all? Attention, the only layer that mixes the tokens,
# gives a reordered input the same output vectors, reordered (chapter 01 showed it), and the
# mean over the tokens does not see the order; the other layers work on each token
# separately, and the token and segment rows do not depend on the position. What is left is
# the position table. We set it to zero for a moment:

# %%
positions = model.embeddings.position_embeddings.weight
saved = positions.detach().clone()
with torch.no_grad():
    positions.zero_()
    no_pos = embed_sentences(order_sentences[:2], tokenizer, model)
    positions.copy_(saved)  # put the table back
print(f"cos(S0, S1) without position embeddings: {no_pos[0] @ no_pos[1]:.3f}")

# %% [markdown]
# Without the position table, "The cat chased the dog." and "The dog chased the cat." get the
# same vector (cosine 1.000): the same tokens in another order, and nothing left to tell the
# orders apart. All the difference between 0.991 and 1 came from the position rows. How
# positions are encoded is the subject of the next chapter.
#
# ## Summary
#
# * An embedding is a `(V, d)` table; token `i` gets row `E[i]`, which equals `one_hot(i) @ E`.
#   The similarity of two rows is the cosine of the angle between them, from −1 to 1.
# * `nn.Embedding` is that table as a trainable parameter. A batch's gradient reaches only the
#   rows it looked up, and a token used twice gets the sum of both gradients. Plain SGD then
#   moves only those rows; Adam's momentum keeps moving rows used earlier, and weight decay
#   shrinks all of them.
# * Training puts the meaning in: words that occur in the same contexts are asked for the same
#   predictions, and their rows turn towards each other.
# * The table holds `V × d` numbers; subword tokenizers such as WordPiece keep `V` to tens of
#   thousands. In MiniLM the token table is half of the model.
# * In a pretrained table, related words have similar rows: visible in a heatmap and in a PCA
#   projection, with the ambiguities of real words (orange, cherry).
# * The table gives one vector per token; the transformer's layers turn these into
#   contextual vectors ("bank" by a river or a loan); mean pooling over the real tokens turns
#   those into one sentence vector.
# * In an encoder like MiniLM, the order of the words reaches a sentence embedding only through
#   the position embeddings: without them, a sentence and its reordering get the same vector.
#
# ## Exercises
#
# **1. Analogies.** In word vectors trained by word2vec, the vector of "king" minus "man" plus
# "woman" lands near "queen". Compute $u_\text{king} - u_\text{man} + u_\text{woman}$ from
# the unit-length rows of MiniLM's token table and list the five tokens whose rows have the
# highest cosine similarity with it; do the same for paris − france + italy. Before you run
# it, write down which token you expect first in each list. Then find the best answer that
# is not one of the three query words.


# %% tags=["solution"]
def analogy(a: str, b: str, c: str, k: int = 5) -> list[tuple[str, float]]:
    """The k tokens whose rows are closest (cosine) to u_a - u_b + u_c."""
    u = unit_table[tokenizer.convert_tokens_to_ids([a, b, c])]
    query = F.normalize(u[0] - u[1] + u[2], dim=0)
    top = (unit_table @ query).topk(k)
    found = tokenizer.convert_ids_to_tokens(top.indices.tolist())
    return [(w, round(s, 3)) for w, s in zip(found, top.values.tolist())]


for a, b, c in [("king", "man", "woman"), ("paris", "france", "italy")]:
    found = analogy(a, b, c)
    print(f"{a} - {b} + {c}:")
    print("   ", ", ".join(f"{w} {score:.3f}" for w, score in found))
    answer = next(w for w, _ in found if w not in (a, b, c))
    print("    best answer that is not a query word:", answer)
# with the query words left out, the classic answer
king_answers = [w for w, _ in analogy("king", "man", "woman")]
king_answers = [w for w in king_answers if w not in ("king", "man", "woman")]

# %% [markdown] tags=["solution"]
# The first answer is a query word each time: "king" for the first sum and "italy" for the
# second. Each query word added to the sum brings its whole row into it, so the sum keeps a
# large component along that row, while another word such as "queen" scores only through
# what its row shares with the three. Once the query words are excluded (as word2vec's own analogy test,
# [`compute-accuracy.c`](https://github.com/tmikolov/word2vec/blob/master/compute-accuracy.c),
# does), "queen" comes first, as in word2vec. For the capitals, "rome" comes only after
# "italian": the sum lands near everything Italian, and the adjective is closer than the
# capital. An input table trained as part of a sentence model is not a word2vec table, and
# analogies hold in it only roughly.

# %% [markdown]
# **2. A word with two kinds of company.** Add three sentences to the tiny corpus in which
# "dog" is followed by the vehicle verbs ("the dog drives", ...), so that "dog" occurs in
# both kinds of context. Predict how the cosine of "dog" with "cat", and with "car", will
# differ from training on the original corpus. Then train `train_bigram` on both corpora and
# compare, for ten seeds, with `dim=4`. Then try `dim=2` for twenty seeds: does your
# prediction still hold for every seed?

# %% tags=["solution"]
mixed = corpus + [["the", "dog", verb] for verb in verbs["vehicle"]]
compared = [("dog", "cat"), ("dog", "car"), ("cat", "car")]
Cosines = dict[tuple[str, str], tuple[float, float]]  # pair -> (first, mixed)


def both_runs(dim: int, seed: int) -> Cosines:
    """Cosine of each compared pair after training on the first corpus and
    after training on the mixed one, with the same seed."""
    first = train_bigram(corpus, dim=dim, seed=seed)[1]
    second = train_bigram(mixed, dim=dim, seed=seed)[1]
    return {
        (a, b): (cos_lm(first, a, b), cos_lm(second, a, b))
        for a, b in compared
    }


def as_predicted(c: Cosines) -> bool:
    """Did dog move away from cat and towards car?"""
    cat, car = c["dog", "cat"], c["dog", "car"]
    return cat[1] < cat[0] and car[1] > car[0]


columns = [
    "seed",
    "cos(dog, cat) first",
    "cos(dog, cat) mixed",
    "cos(dog, car) first",
    "cos(dog, car) mixed",
]
rows = []
held = 0
for seed in range(10):
    c = both_runs(4, seed)
    cat, car = c["dog", "cat"], c["dog", "car"]
    rows.append((seed, *cat, *car))
    held += as_predicted(c)
display(
    Table(
        columns,
        rows,
        formats=dict.fromkeys(columns[1:], ".3f"),
        caption="dim=4, trained on the first corpus and on the mixed one",
    )
)
print(f"dim=4: the prediction held for {held} of 10 seeds")
print("dim=2: the seeds of 0 to 19 where the prediction fails")
for seed in range(20):
    c = both_runs(2, seed)
    if not as_predicted(c):
        print(f"  seed {seed}:")
        for a, b in compared:
            print(f"    cos({a}, {b}): {c[a, b][0]:6.3f} -> {c[a, b][1]:6.3f}")

# %% [markdown] tags=["solution"]
# With `dim=4`, "dog" moves away from "cat" and towards "car" for all ten seeds: its cosine
# with "cat" falls and its cosine with "car" rises. Its row must now predict a mixture, the
# animal verbs half of the time and the vehicle verbs the other half, so it ends up between
# the two groups. With `dim=2` the prediction fails for one seed of twenty, seed 18: "dog"
# turns towards "car" but also ends closer to "cat". In that run "cat" itself ends closer to
# "car" than in the first one: the two runs are separate trainings that arrange all the rows
# anew, and the prediction is about the typical run, not every run. A word with two kinds of use
# (like "orange", or "bank") gets one row that compromises between them; the contextual
# vectors of a transformer can separate the uses again, as they did for "bank".

# %% [markdown]
# **3. The gradient of a linear layer on one-hot vectors.** An `nn.Linear(V, d, bias=False)`
# whose weight is $E^\top$ gives the same output on one-hot inputs as `nn.Embedding` with
# weight $E$. Predict, before running: after the same loss on "the cat saw the dog", which
# entries of the linear layer's weight gradient are non-zero, and how does that gradient
# compare with the embedding's? Then check it.

# %% tags=["solution"]
linear = nn.Linear(len(vocab), 2, bias=False)
table_layer = nn.Embedding(len(vocab), 2)
with torch.no_grad():
    linear.weight.copy_(E.T)
    table_layer.weight.copy_(E)
one_hots = F.one_hot(sent, len(vocab)).float()  # (1, 5, V)
F.mse_loss(linear(one_hots), target).backward()
F.mse_loss(table_layer(sent), target).backward()
print("linear layer's weight gradient (d x V):")
print(linear.weight.grad)

# %% [markdown] tags=["solution"]
# The gradients are the same, transposed: the linear layer's gradient is `grad_outᵀ @ inputs`,
# and a one-hot input is zero outside its token's column, so the column of "car", the only
# token the sentence does not use, is zero, and the column of "the" is the sum of its two
# occurrences. The two layers compute the same function and learn the same way; the
# embedding just skips the multiplications by zero.

# %% tags=["remove-cell"]
assert torch.allclose(linear.weight.grad.T, table_layer.weight.grad)
assert torch.all(linear.weight.grad[:, token_to_id["car"]] == 0)
