# %% [markdown]
# # 02 — Embeddings
#
# A neural network computes with numbers, and a sentence is not a list of numbers. The first
# step of every transformer is therefore to turn each token (a word or a piece of a word)
# into a vector. This chapter shows that the layer doing this, the **embedding**, is nothing
# more than a table with one row per token, that this table is learned like any other
# weight, and what a *trained* table looks like: in a real pretrained model, tokens with
# related meanings get similar rows.
#
# What you will see:
#
# 1. an embedding is a lookup table `E[i, :]`, and looking up is the same as multiplying a
#    one-hot vector by `E`;
# 2. `nn.Embedding` is that table, and training changes only the rows a batch used;
# 3. the trained table of a real model (all-MiniLM-L6-v2, a small BERT) loaded offline:
#    similarity heatmaps and a 2-D projection in which related words cluster;
# 4. token embeddings versus contextual token embeddings versus sentence embeddings.

# %%
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from transformer_course.utils import count_parameters, set_seed, show_source

set_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)

# %% [markdown]
# ## From tokens to ids to vectors
#
# Before a model sees a sentence, a tokenizer splits it into tokens and replaces each token by
# its index in a fixed vocabulary. We start with a toy vocabulary of five words, so that the
# whole table fits on the screen.

# %%
vocab = ["hello", "world", "transformer", "example", "embedding"]
token_to_id = {tok: i for i, tok in enumerate(vocab)}
sentence = ["hello", "transformer", "world"]
ids = torch.tensor([token_to_id[t] for t in sentence])
print("ids:", ids.tolist())

# %% [markdown]
# ### One-hot vectors: correct, but useless for meaning
#
# The simplest vector for token `i` is the *one-hot* vector: length `V` (the vocabulary
# size), all zeros except a 1 at position `i`. It identifies the token, but every pair of
# different tokens is equally far apart: the dot product of two different one-hot vectors is
# 0. "hello" is no closer to "world" than to "embedding". One-hot vectors are also as long as
# the vocabulary (30,522 for BERT, 50,257 for GPT-2).

# %%
one_hot = F.one_hot(torch.arange(len(vocab)), num_classes=len(vocab)).float()
print(one_hot)
gram = one_hot @ one_hot.T  # all pairwise dot products
# 1 with itself, 0 with every other token
assert torch.equal(gram, torch.eye(len(vocab)))

# %% [markdown]
# ### An embedding is a lookup table
#
# An embedding gives every token a short, *dense* vector instead: a matrix $E$ of shape
# `(V, d)` whose row $i$ is the vector of token $i$,
#
# $$e_i = E[i, :].$$
#
# Here $d = 3$ and we write the numbers by hand; in a real model they are learned.

# %%
E = torch.tensor(
    [
        [0.1, 0.2, 0.3],  # hello
        [0.4, 0.5, 0.6],  # world
        [0.7, 0.8, 0.9],  # transformer
        [1.0, 1.1, 1.2],  # example
        [1.3, 1.4, 1.5],  # embedding
    ]
)
print("E has shape", tuple(E.shape), "= (vocabulary size, embedding size)")
print("row of 'transformer':", E[token_to_id["transformer"]])

# %% [markdown]
# Looking up a row is the same as multiplying the one-hot vector by the matrix: the 1 picks
# out exactly one row and the zeros discard the others. That is why an embedding layer is
# sometimes described as "a linear layer without bias applied to one-hot inputs". The lookup
# gives the same numbers without building the `V`-long vectors or doing `V × d`
# multiplications, which matters when `V` is 50,000.

# %%
i = token_to_id["transformer"]
print("one-hot:", one_hot[i].tolist())
print("one-hot @ E:", one_hot[i] @ E)
assert torch.equal(one_hot[i] @ E, E[i])

# A whole sentence at once: index with the id tensor, or multiply its one-hot
# matrix.
looked_up = E[ids]  # (sequence length, d)
multiplied = F.one_hot(ids, len(vocab)).float() @ E
assert torch.equal(looked_up, multiplied)
print("sentence", sentence, "->", tuple(looked_up.shape))

# %% [markdown]
# ## `nn.Embedding` is that table, and it is trainable
#
# PyTorch's `nn.Embedding(V, d)` holds exactly such a `(V, d)` matrix as its `weight` and
# indexes it with integer ids of any shape: a batch of shape `(batch, length)` becomes
# `(batch, length, d)`. We copy our hand-made table into one to check that it is the same
# operation.

# %%
emb = nn.Embedding(num_embeddings=len(vocab), embedding_dim=3)
with torch.no_grad():
    emb.weight.copy_(E)
batch = torch.tensor(
    [
        [0, 2, 1],  # hello transformer world
        [3, 3, 4],  # example example embedding
    ]
)
out = emb(batch)
print("input ids", tuple(batch.shape), "-> embeddings", tuple(out.shape))
assert torch.equal(out, E[batch])
assert torch.equal(out, F.embedding(batch, E))
print(
    "weight is a Parameter:",
    isinstance(emb.weight, nn.Parameter),
    "| trainable numbers:",
    count_parameters(emb),
)

# %% [markdown]
# The table is a parameter, so gradients reach it. Which rows do they reach? Only the rows
# the batch looked up: the output does not depend on the other rows at all. Below, a batch
# without "world" (id 1) gets a made-up regression loss; the row of "world" receives a zero
# gradient and every used row a non-zero one. An optimiser step then changes
# exactly the used rows (plain SGD here; optimisers with weight decay would also shrink the
# unused rows).

# %%
emb.zero_grad()
batch = torch.tensor([[0, 2, 4], [3, 3, 2]])  # no id 1 ("world")
target = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(0))
out = emb(batch)
# keep the gradient with respect to the looked-up vectors too
out.retain_grad()
loss = F.mse_loss(out, target)
loss.backward()
row_grad_norm = emb.weight.grad.norm(dim=1)
for tok, g in zip(vocab, row_grad_norm):
    print(f"{tok:>12}: gradient norm {g:.4f}")
used = torch.zeros(len(vocab), dtype=torch.bool)
used[batch.unique()] = True
assert torch.all(row_grad_norm[used] > 0)
assert torch.all(row_grad_norm[~used] == 0)

before = emb.weight.detach().clone()
torch.optim.SGD(emb.parameters(), lr=0.5).step()
changed = (emb.weight.detach() != before).any(dim=1)
changed_rows = [tok for tok, c in zip(vocab, changed) if c]
print("rows changed by one SGD step:", changed_rows)
assert torch.equal(changed, used)

# %% [markdown]
# Token "example" (id 3) appears twice in the batch; its row's gradient is the *sum* of the
# gradients of both occurrences, because both read the same row:

# %%
# gradient at each place "example" was looked up: (2, 3)
occurrences = out.grad[batch == 3]
print("gradient of the row 'example':     ", emb.weight.grad[3])
print("sum over its two occurrences:      ", occurrences.sum(dim=0))
assert occurrences.shape == (2, 3)
assert torch.allclose(emb.weight.grad[3], occurrences.sum(dim=0))

# %% [markdown]
# A real embedding table is trained this
# way, together with the rest of the network, on millions of sentences: rows of tokens that
# play similar roles receive similar gradients and drift towards each other.
#
# ### How big is the table?
#
# The size is `V × d` numbers. A table with a row for every word form grows huge: the
# pretrained word2vec vectors released with Google News have 3 million rows of 300 numbers.
# Subword tokenizers (below) keep the vocabulary at 30,000–50,000 entries.

# %%
for name, V, d in [
    ("word2vec, Google News", 3_000_000, 300),
    ("BERT / MiniLM", 30_522, 384),
    ("GPT-2 small", 50_257, 768),
]:
    n = V * d
    print(
        f"{name:>22}: {V:>9,} x {d} = {n / 1e6:6.1f} M numbers "
        f"= {4 * n / 2**20:7.1f} MiB in float32"
    )

# %% [markdown]
# ## A real, pretrained embedding table
#
# A table with random rows knows nothing. To see what training puts into it, we load a
# pretrained model: **all-MiniLM-L6-v2**, a 6-layer BERT with 384-dimensional vectors,
# trained by the sentence-transformers project to give similar sentences similar vectors.
# The course's helper `load_minilm()` returns its tokenizer and model. It loads them without a
# network, from files installed with the course and checked against a checksum, so every reader
# gets the same weights and the same numbers on this page.

# %%
from transformer_course.pretrained import MINILM_DIM, load_minilm

tokenizer, model = load_minilm()
# word_embeddings is an nn.Embedding, like ours
table = model.embeddings.word_embeddings.weight.detach()
print(
    "embedding table:",
    tuple(table.shape),
    "= (vocabulary size, embedding size)",
)
print(
    f"parameters: embedding table {table.numel():,} "
    f"of {count_parameters(model):,} in the model "
    f"({table.numel() / count_parameters(model):.0%})"
)
assert table.shape == (tokenizer.vocab_size, MINILM_DIM)

# %% [markdown]
# Half of this small model is its embedding table. Its tokenizer uses *WordPiece*: frequent
# words are one token, rarer words are split into pieces (`##` marks a piece that continues a
# word), so 30,522 entries cover any English text.

# %%
for word in ["cat", "transformer", "embeddings", "unbelievable"]:
    pieces = tokenizer.tokenize(word)
    piece_ids = tokenizer.convert_tokens_to_ids(pieces)
    print(f"{word:>13} -> {pieces} -> ids {piece_ids}")
assert tokenizer.tokenize("embeddings") == ["em", "##bed", "##ding", "##s"]

# %% [markdown]
# ### Similar words have similar rows
#
# We take twenty single-token words in four groups and compare their rows with the **cosine
# similarity** $\cos(a, b) = \frac{a \cdot b}{\|a\|\,\|b\|}$: 1 for vectors pointing the same way,
# 0 for orthogonal ones (like any two one-hot vectors).

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
# every word is one token of the vocabulary
assert tokenizer.unk_token_id not in word_ids

vectors = table[word_ids]  # (20, 384): twenty rows of the table
unit = F.normalize(vectors, dim=-1)  # unit length, so dot product = cosine
cos = unit @ unit.T

same_group = group_of[:, None] == group_of[None, :]
off_diagonal = ~torch.eye(len(words), dtype=torch.bool)
within = cos[same_group & off_diagonal].mean().item()
between = cos[~same_group].mean().item()
print(
    f"mean cosine similarity within a group: {within:.3f}, "
    f"between groups: {between:.3f}"
)
assert within > between + 0.1

nearest = cos.masked_fill(~off_diagonal, -2).argmax(dim=1)
agree = (group_of[nearest] == group_of).float().mean().item()
print(
    f"the nearest other word is in the same group for {agree:.0%} of the words"
)
assert agree >= 0.8

# %%
fig, ax = plt.subplots(figsize=(6.4, 5.6))
# the diagonal (always 1) left blank, for contrast
shown = cos.clone().fill_diagonal_(float("nan"))
im = ax.imshow(shown, cmap="viridis", vmin=-0.1, vmax=0.6)
ax.set_xticks(range(len(words)), words, rotation=90)
ax.set_yticks(range(len(words)), words)
for k in range(1, len(groups)):  # lines between the groups
    ax.axhline(5 * k - 0.5, color="white", lw=1)
    ax.axvline(5 * k - 0.5, color="white", lw=1)
fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="cosine similarity")
ax.set_title("Rows of MiniLM's input embedding table")
fig.tight_layout()
plt.show()

# %% [markdown]
# The bright blocks on the diagonal are the groups. No one told the model that a cow is an
# animal: the rows came out this way because animal words occur in similar sentences. One
# fruit stands out: "orange" is also a colour, and its row is closer to the colours than to
# the other fruit.


# %%
def mean_cos(word: str, group: str) -> float:
    """Mean cosine similarity of `word` with the other words of `group`."""
    others = [words.index(w) for w in groups[group] if w != word]
    return cos[words.index(word), others].mean().item()


print(
    f"orange vs colours: {mean_cos('orange', 'colours'):.3f}, "
    f"orange vs other fruit: {mean_cos('orange', 'fruit'):.3f}"
)
assert mean_cos("orange", "colours") > mean_cos("orange", "fruit")

# %% [markdown]
# ### A 2-D picture: principal component analysis
#
# 384 dimensions cannot be drawn. **PCA** finds the two directions along which the twenty
# vectors vary most and projects onto them: centre the vectors, take the singular value
# decomposition, keep the first two right singular vectors. (A singular vector's sign is
# arbitrary; we fix it so the picture is the same on every machine.)


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
within_2d = distance[same_group & off_diagonal].mean().item()
between_2d = distance[~same_group].mean().item()
print(
    f"mean distance in the plot within a group: {within_2d:.3f}, "
    f"between groups: {between_2d:.3f}"
)
assert within_2d < between_2d

fig, ax = plt.subplots(figsize=(6.5, 5))
colours = plt.get_cmap("tab10")
for g, name in enumerate(groups):
    pts = xy[group_of == g]
    ax.scatter(pts[:, 0], pts[:, 1], color=colours(g), label=name, s=40)
for (x, y), w in zip(xy.tolist(), words):
    ax.annotate(
        w, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=9
    )
ax.set_xlabel(f"first principal component ({explained[0]:.0%} of variance)")
ax.set_ylabel(f"second principal component ({explained[1]:.0%} of variance)")
ax.set_title("Twenty rows of MiniLM's embedding table, projected to 2-D")
ax.legend(loc="best", fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# The groups separate even in two of the 384 dimensions. (A projection always loses
# something; the heatmap above, computed in all 384 dimensions, is the more faithful
# picture.)
#
# ## Token, contextual and sentence embeddings
#
# The table gives each token **one** vector, whatever the sentence around it: the row of
# "bank" is the same next to a river and next to a loan. The layers of the transformer
# (chapters 04–07) then mix information between positions, so the vectors *coming out* of
# the model are **contextual**: each one depends on the whole sentence. We compare the
# output vector at the token "bank" in four sentences.

# %%
bank_sentences = [
    "he fished from the bank of the river.",
    "the grassy bank of the stream was wet.",
    "he withdrew money from the bank.",
    "the bank raised its interest rates.",
]
enc = tokenizer(bank_sentences, padding=True, return_tensors="pt")
with torch.no_grad():
    # (4, length, 384): one vector per token
    hidden = model(**enc).last_hidden_state
print("model output:", tuple(hidden.shape), "= (sentences, tokens, 384)")

bank_id = tokenizer.convert_tokens_to_ids("bank")
# where "bank" sits in each sentence
bank_pos = [row.tolist().index(bank_id) for row in enc["input_ids"]]
at_bank = torch.stack([hidden[s, p] for s, p in enumerate(bank_pos)])
bank_cos = F.normalize(at_bank, dim=-1) @ F.normalize(at_bank, dim=-1).T
print(
    "cosine similarity of the contextual 'bank' vectors "
    "(river, river, money, money):"
)
print(bank_cos.numpy().round(2))
# The input row is one and the same; the outputs differ, and the two river
# banks are closer to each other than to either money bank (and likewise for
# the two money banks).
assert bank_cos[0, 1] > bank_cos[0, 2:].max()
assert bank_cos[2, 3] > bank_cos[2, :2].max()

# %% [markdown]
# A **sentence embedding** is one vector for a whole sentence. all-MiniLM-L6-v2 makes it by
# **mean pooling**: the average of the contextual token vectors, skipping the padding tokens
# that only make the sentences of a batch equally long. Chapter 12 looks at pooling (and at
# the `[CLS]` token that BERT classifiers use instead) in depth; here is the helper the course
# uses.

# %%
from transformer_course.pretrained import embed_sentences, mean_pool

show_source(mean_pool)

# %%
pooled = mean_pool(hidden, enc["attention_mask"])
# By hand for the first sentence: the average over its real (non-padding)
# tokens.
n_real = int(enc["attention_mask"][0].sum())
assert torch.allclose(pooled[0], hidden[0, :n_real].mean(dim=0), atol=1e-6)
assert torch.allclose(
    F.normalize(pooled, dim=-1),
    embed_sentences(bank_sentences, tokenizer, model),
    atol=1e-6,
)
print("sentence embeddings:", tuple(pooled.shape))

# %% [markdown]
# Sentence embeddings let us compare meanings. Below are eight sentences in four pairs; the
# pairs about the kitten, the stock market and the weather share almost no words, yet their
# embeddings are close.

# %%
sentences = [
    "The cat chased the dog.",
    "The dog chased the cat.",
    "A kitten naps on the couch.",
    "The cat is sleeping on the sofa.",
    "Stock prices fell sharply today.",
    "The market dropped after the announcement.",
    "It will rain tomorrow afternoon.",
    "Expect showers and cloudy skies later.",
]
# (8, 384), unit length
sent_emb = embed_sentences(sentences, tokenizer, model)
sent_cos = sent_emb @ sent_emb.T

fig, ax = plt.subplots(figsize=(4.6, 4.2))
im = ax.imshow(sent_cos, cmap="viridis", vmin=-0.1, vmax=1)
ax.set_xticks(range(len(sentences)), [f"S{k}" for k in range(len(sentences))])
ax.set_yticks(
    range(len(sentences)), [f"S{k}: {s}" for k, s in enumerate(sentences)]
)
for r in range(len(sentences)):
    for c in range(len(sentences)):
        text = f"{sent_cos[r, c]:.2f}"
        colour = "black" if sent_cos[r, c] > 0.6 else "white"
        ax.text(c, r, text, ha="center", va="center", fontsize=9, color=colour)
fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="cosine similarity")
ax.set_title("Sentence embeddings (mean-pooled MiniLM)")
fig.tight_layout()
plt.show()

pair = torch.arange(len(sentences)) // 2
idx = torch.arange(len(sentences))
mate = sent_cos[idx, idx ^ 1]  # S0<->S1, S2<->S3, ...
same_pair = pair[:, None] == pair[None, :]
others = sent_cos.masked_fill(same_pair, -2).max(dim=1).values
print("similarity to its pair:", mate.numpy().round(2))
print("best other sentence:   ", others.numpy().round(2))
assert torch.all(mate > others)

# %% [markdown]
# Note the first pair: "The cat chased the dog." and "The dog chased the cat." mean opposite
# things, yet their similarity is the highest of all. The words are the same and an average
# forgets which came first; what is left of the order comes only from the model's *position
# embeddings*, the subject of the next chapter.

# %%
print(
    "cos('The cat chased the dog.', 'The dog chased the cat.') = "
    f"{sent_cos[0, 1]:.3f}"
)
assert sent_cos[0, 1] > 0.95
eye = torch.eye(len(sentences), dtype=torch.bool)
assert sent_cos[0, 1] == sent_cos.masked_fill(eye, -2).max()

# %% [markdown]
# ## Summary
#
# * An embedding is a `(V, d)` table; token `i` gets row `E[i]`, which equals `one_hot(i) @ E`.
# * `nn.Embedding` is that table as a trainable parameter; a batch's gradient touches only
#   the rows it used.
# * After training, related tokens have similar rows (cosine similarity), visible in a
#   heatmap and in a PCA projection.
# * The table gives one vector per token; the transformer's layers turn these into
#   contextual vectors; mean pooling turns those into one sentence vector.
#
# ## Exercises
#
# **1. Nearest neighbours in the whole table.** Write `neighbours(word, k)` that returns the
# `k` tokens whose rows in MiniLM's table have the highest cosine similarity with the row of
# `word` (the word itself included), and try it on a few words of your choice. Which
# neighbours does "king" have?

# %% tags=["solution"]
unit_table = F.normalize(table, dim=-1)  # (30522, 384)


def neighbours(word: str, k: int = 8) -> list[str]:
    """The k tokens whose embedding rows are most similar (cosine) to the row
    of `word`."""
    row = unit_table[tokenizer.convert_tokens_to_ids(word)]
    top = (unit_table @ row).topk(k).indices.tolist()
    return tokenizer.convert_ids_to_tokens(top)


for w in ["king", "coffee", "happy"]:
    print(f"{w:>7}: {neighbours(w)}")
assert neighbours("king")[0] == "king" and "queen" in neighbours("king")

# %% [markdown]
# **2. Training moves rows.** Take a fresh `nn.Embedding(5, 3)` over the toy vocabulary and
# train it for 50 steps of SGD to make the cosine similarity of "hello" and "world" close to 1
# (loss: `1 - cosine`). Check that the similarity went up and that the rows of the three
# other words did not change at all.

# %% tags=["solution"]
set_seed(0)
toy = nn.Embedding(len(vocab), 3)
start = toy.weight.detach().clone()
opt = torch.optim.SGD(toy.parameters(), lr=0.5)
pair_ids = torch.tensor([token_to_id["hello"], token_to_id["world"]])


def pair_cosine() -> torch.Tensor:
    a, b = toy(pair_ids)
    return F.cosine_similarity(a, b, dim=0)


print(f"cosine(hello, world) before: {pair_cosine().item():.3f}")
for _ in range(50):
    opt.zero_grad()
    (1 - pair_cosine()).backward()
    opt.step()
print(f"cosine(hello, world) after:  {pair_cosine().item():.3f}")
assert pair_cosine().item() > 0.99
untouched = [token_to_id[t] for t in ("transformer", "example", "embedding")]
assert torch.equal(toy.weight.detach()[untouched], start[untouched])

# %% [markdown]
# **3. Semantic search.** Given the eight `sentences` above, write `search(query)` that
# returns the sentence whose embedding is most similar to the query's. Which sentence does
# "Will I need an umbrella?" find? And "My pet is asleep."?


# %% tags=["solution"]
def search(query: str) -> str:
    """The sentence of `sentences` whose embedding is closest (cosine) to the
    query's."""
    q = embed_sentences([query], tokenizer, model)[0]
    return sentences[int((sent_emb @ q).argmax())]


for query in ["Will I need an umbrella?", "My pet is asleep."]:
    print(f"{query!r:>28} -> {search(query)!r}")
assert search("Will I need an umbrella?") in sentences[6:8]
assert search("My pet is asleep.") in sentences[2:4]
