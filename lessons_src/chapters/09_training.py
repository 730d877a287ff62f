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
# # 09 — Training a Transformer end to end
#
# Chapters 07 and 08 built the encoder–decoder `Transformer` and its masks, and checked them
# piece by piece. What they did not show is that the model *learns*. This is where many
# tutorials stop, with a training step left for the reader, and where a classic off-by-one
# slips in: masks built for the full target while the decoder is fed the target minus its last
# token. This chapter builds everything a training run needs:
#
# 1. a task and its data: a seeded generator, train/validation/held-out splits;
# 2. tokenisers, a `Dataset`, and a `DataLoader` whose collate function pads each batch;
# 3. teacher forcing, with the masks built for exactly the shifted tensors;
# 4. the loss: cross-entropy that ignores padding, with label smoothing;
# 5. AdamW and a learning rate that warms up, then decays;
# 6. the training loop: progress bar, gradient clipping, validation, loss curves;
# 7. greedy decoding and exact-match accuracy on 1,000 held-out examples, then a test on date
#    formats the model has never seen, and an analysis of its mistakes;
# 8. what the trained model's cross-attention looks at;
# 9. saving and loading the model, and what changes for real translation data.
#
# Everything the chapter builds lives in `transformer_course.seq2seq`, so later chapters (and
# you) can reuse it.

# %%
import datetime as dt
import functools
import math
import tempfile
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from transformer_course.masking import make_seq2seq_masks
from transformer_course.plotting import plot_attention
from transformer_course.seq2seq import (
    Seq2SeqDataset,
    collate_batch,
    exact_match,
    greedy_decode,
    sequence_loss,
    shift_right,
    smoothed_targets,
    teacher_forced_logits,
    train_seq2seq,
    translate,
)
from transformer_course.tasks.dates import (
    FIRST_DATE,
    FORMATS,
    LAST_DATE,
    MONTHS,
    UNSEEN_FORMATS,
    make_splits,
    render_date,
    source_tokenizer,
    target_tokenizer,
    wrong_fields,
)
from transformer_course.training import fit, warmup_decay
from transformer_course.transformer import Transformer, TransformerConfig
from transformer_course.utils import (
    count_parameters,
    get_device,
    set_seed,
    show_source,
)

g = set_seed(0, num_threads=1)
device = get_device()
print("training on:", device)

# %% [markdown]
# Two choices in that cell matter for the rest of the page:
#
# * `get_device()` picks a GPU when there is one (CUDA, or Apple's MPS), else the CPU. Open
#   this notebook in Colab with a GPU runtime and the same code trains there, faster. The
#   outputs on this page were computed on a CPU (`TRANSFORMER_COURSE_DEVICE=cpu` forces that).
# * PyTorch runs on **one** CPU thread here (`num_threads=1`). The thread count is part of what
#   makes the printed numbers repeatable (a sum split over two threads can round differently).
#
# ## The task: normalising dates
#
# A first training task for a sequence-to-sequence model is often *copy the input* or *reverse
# it*. Both are too easy to tell us much: source and target share one vocabulary and one length,
# and output position $i$ always reads input position $i$ (or $n - i$), so they exercise little
# of what makes translation hard.
#
# We want something that looks like translation but trains on a CPU in about a minute:
# **date normalisation**. The input is a date as people write it, the output its ISO 8601 form:
#
# * the two sides have **different vocabularies** (letters, digits and punctuation in; digits
#   and `-` out) and **different lengths** (6 to 28 characters in, always 10 out);
# * the **order changes**: day–month–year, month–day–year, year–month–day;
# * some input is **translated** (`March`, `Mar`, `MAR` → `03`), some must be **ignored**
#   (weekday names, "the", "of"), some must be **inferred** (`'21` → `2021` but `'87` → `1987`).
#
# The generator writes a date in one of these formats (shown here for 14 July 2021):

# %%
example_date = dt.date(2021, 7, 14)
showcase = pd.DataFrame(
    [(name, render_date(example_date, name).source) for name in FORMATS],
    columns=["format", "source"],
)
print(showcase.to_string(index=False))
print("target:", render_date(example_date, "iso").target)

# %% [markdown]
# Two rules keep every input unambiguous, which we need before asking for ≥ 99 % accuracy:
#
# * the **separator tells the order** of numeric dates: `/` is month/day/year (US), `.` is
#   day.month.year (European), `-` with a four-digit year first is ISO. (`03/04/21` written by
#   an unknown person could be either March or April; no model can get that right.)
# * dates run from 1950-01-01 to 2049-12-31, so a two-digit year names one year: `yy ≥ 50` is
#   19yy, below is 20yy.
#
# Words are sometimes written in lower or upper case (`render_date(..., case=...)`), and each
# example remembers where its day, month and year sit in the source text (`spans`); we will use
# that to check what the model attends to.

# %%
ex = render_date(dt.date(2021, 3, 3), "weekday_long", case="upper")
print(ex.source, "->", ex.target)
print({field: ex.source[a:b] for field, (a, b) in ex.spans.items()})
assert ex.source == "WEDNESDAY, 3 MARCH 2021" and ex.target == "2021-03-03"

# %% [markdown]
# ### Train, validation and a held-out test set
#
# `make_splits` shuffles the 36,525 days of the range with a seeded generator and gives
# 1,000 of them to the **held-out test set** (one example per date), the next 500 to a
# **validation** set (used during training to watch for trouble), and draws the training
# examples from the remaining days. So not one held-out *date* appears in training, in any
# format: the final accuracy measures generalisation to dates the model has never seen, not
# memory. One pass over the training set is exactly the 800 steps × 64 examples we will train for.

# %%
STEPS, BATCH = 800, 64
splits = make_splits(n_train=STEPS * BATCH, n_val=500, n_test=1000, seed=0)
assert (LAST_DATE - FIRST_DATE).days + 1 == 36_525
print(
    f"train {len(splits.train)}, validation {len(splits.val)}, "
    f"held-out test {len(splits.test)}"
)

train_dates = {e.date for e in splits.train}
test_dates = {e.date for e in splits.test}
print(
    "distinct dates in train:",
    len(train_dates),
    "| held-out dates also in train:",
    len(test_dates & train_dates),
)
assert len(test_dates) == 1000 and not test_dates & train_dates
assert not {e.date for e in splits.val} & (train_dates | test_dates)
assert not {e.source for e in splits.test} & {e.source for e in splits.train}

every = splits.train + splits.val + splits.test
source_lengths = [len(e.source) for e in every]
target_lengths = {len(e.target) for e in every}
shortest, longest = min(source_lengths), max(source_lengths)
print(
    f"source lengths {shortest} to {longest} characters;",
    "target lengths",
    sorted(target_lengths),
)
assert (shortest, longest) == (6, 28) and target_lengths == {10}

formats_seen = Counter(e.format for e in splits.train)
print(
    f"{len(formats_seen)} formats in training, "
    f"from {min(formats_seen.values())} "
    f"to {max(formats_seen.values())} examples each"
)
for e in splits.train[:5]:
    print(f"  {e.source!r:32} -> {e.target}")

# %% [markdown]
# ## Tokenisation
#
# Character level is all this task needs: each character is a token. Each side gets its own
# vocabulary, and both start with the same three special tokens:
#
# * `<pad>` (id 0) fills up short sequences in a batch;
# * `<bos>` (id 1), "beginning of sequence", is the decoder's first input;
# * `<eos>` (id 2), "end of sequence", is the last token of every sequence: the model must learn
#   to produce it, and decoding stops when it does.

# %%
src_tok, tgt_tok = source_tokenizer(), target_tokenizer()
PAD = src_tok.pad_id
assert PAD == tgt_tok.pad_id == 0
assert (tgt_tok.bos_id, tgt_tok.eos_id) == (1, 2)
print(
    f"source vocabulary: {len(src_tok)} tokens:",
    " ".join(src_tok.tokens[:12]),
    "...",
)
print(f"target vocabulary: {len(tgt_tok)} tokens:", " ".join(tgt_tok.tokens))

e = splits.train[0]
# the source ends with <eos>; the target is framed by <bos> ... <eos>
src_ids = src_tok.encode(e.source)
tgt_ids = tgt_tok.encode(e.target, add_bos=True)
print(repr(e.source), "->", src_ids)
print(repr(e.target), "->", tgt_ids)
assert src_tok.decode(src_ids) == e.source
assert tgt_tok.decode(tgt_ids) == e.target

# %% [markdown]
# ## A `Dataset`, a `DataLoader` and a collate function that pads
#
# `Seq2SeqDataset` encodes every pair once and returns `(src_ids, tgt_ids)`: two 1-D tensors
# of *different* lengths. A `DataLoader` cannot stack tensors of different lengths by itself,
# so we give it a **collate function** that pads each side to the longest sequence *of the
# batch* (not of the whole data set: short batches stay short).

# %%
show_source(collate_batch)

# %%
to_pairs = lambda xs: [(x.source, x.target) for x in xs]  # noqa: E731
train_ds = Seq2SeqDataset(to_pairs(splits.train), src_tok, tgt_tok)
val_ds = Seq2SeqDataset(to_pairs(splits.val), src_tok, tgt_tok)
collate = functools.partial(collate_batch, pad_id=PAD)
train_loader = DataLoader(
    train_ds, batch_size=BATCH, shuffle=True, collate_fn=collate, generator=g
)
val_loader = DataLoader(val_ds, batch_size=500, collate_fn=collate)

src, tgt = next(iter(train_loader))
print("src", tuple(src.shape), src.dtype, "| tgt", tuple(tgt.shape), tgt.dtype)
print("first 4 source rows (0 = <pad>):")
print(src[:4])
src_lengths = (src != PAD).sum(1)
assert src.size(1) == src_lengths.max() and (src_lengths < src.size(1)).any()
assert all(
    (row[n:] == PAD).all() and row[n - 1] == src_tok.eos_id
    for row, n in zip(src, src_lengths.tolist())
)

# %% [markdown]
# The source rows end with `<eos>` (2) and then padding (0). Every target has the same 10
# characters (checked above for all the data), so in *this* task only the source side is ragged. The code never relies on that:
# real translation targets have all lengths, and the collate function, the masks and the loss
# all handle padded targets.

# %%
# <bos> + 10 characters + <eos>
assert (tgt != PAD).all() and tgt.size(1) == 12

# %% [markdown]
# ## The model
#
# A small model: $d_\text{model} = 64$, 4 heads, 2 encoder and 2 decoder layers, a feed-forward
# width of 256, and no dropout: every training example is seen once, so there is little to
# over-fit. The architecture is chapter 07's, unchanged.

# %%
config = TransformerConfig(
    src_vocab_size=len(src_tok),
    tgt_vocab_size=len(tgt_tok),
    d_model=64,
    num_heads=4,
    num_encoder_layers=2,
    num_decoder_layers=2,
    d_ff=256,
    dropout=0.0,
    max_len=64,
)
model = Transformer(config).to(device)
print(f"{count_parameters(model):,} parameters")

# %% [markdown]
# ## Teacher forcing, and masks for exactly those tensors
#
# In training, the decoder does not read its own (at first, random) predictions. It reads the
# **correct** previous characters, all at once, and is asked at every position for the *next*
# one. This is **teacher forcing**, and it is a shift by one:
#
# * decoder input = the target without its last token: `<bos> y1 … yn` (shifted right);
# * labels = the target without its first token: `y1 … yn <eos>` (shifted left).
#
# Position $i$ of the input is labelled with token $i + 1$:

# %%
tgt_in, labels = shift_right(tgt)
vocab = tgt_tok.tokens
show = pd.DataFrame(
    {
        "decoder input": [vocab[i] for i in tgt_in[0].tolist()],
        "label (next character)": [vocab[i] for i in labels[0].tolist()],
    }
)
print(show.T.to_string(header=False))
assert torch.equal(tgt_in[:, 1:], labels[:, :-1])

# %% [markdown]
# The causal mask (chapter 08) is what makes this honest: without it, position $i$ could read
# the input at $i + 1$, which *is* its label. The masks must be built for the tensors the model
# actually receives, `src` and `tgt_in` (not `tgt`):
#
# * `src_mask` `(batch, 1, 1, L_src)`: encoder self-attention skips source padding;
# * `tgt_mask` `(batch, 1, L_in, L_in)`: decoder self-attention is causal and skips target padding;
# * `memory_mask` `(batch, 1, 1, L_src)`: cross-attention skips source padding.

# %%
src_mask, tgt_mask, memory_mask = make_seq2seq_masks(src, tgt_in, PAD)
masks = dict(src_mask=src_mask, tgt_mask=tgt_mask, memory_mask=memory_mask)
for name, m in masks.items():
    print(f"{name:12} {tuple(m.shape)}")
assert tgt_mask.shape == (BATCH, 1, tgt_in.size(1), tgt_in.size(1))
print("tgt_mask of the first example (1 = may attend):")
print(tgt_mask[0, 0].int())

logits = model(
    src.to(device),
    tgt_in.to(device),
    src_mask.to(device),
    tgt_mask.to(device),
    memory_mask.to(device),
)
print(
    "logits",
    tuple(logits.shape),
    "= (batch, decoder positions, target vocabulary)",
)
assert logits.shape == (BATCH, tgt_in.size(1), len(tgt_tok))

# %% [markdown]
# A common pitfall: building the masks from the unshifted `tgt` (12 positions) and then feeding
# the decoder `tgt[:, :-1]` (11 positions). Our attention checks mask shapes and says so,
# instead of silently broadcasting the wrong thing:

# %%
# the mistake: built for tgt
_, unshifted_tgt_mask, _ = make_seq2seq_masks(src, tgt, PAD)
try:
    model(
        src.to(device),
        tgt_in.to(device),
        src_mask.to(device),
        unshifted_tgt_mask.to(device),
        memory_mask.to(device),
    )
except ValueError as err:
    print("ValueError:", err)
else:
    raise AssertionError("a mask for 12 positions must not be accepted for 11")

# %% [markdown]
# (Its masks had a second problem, a padding mask with `1 = padding` combined by `max` with a
# look-ahead mask with `1 = allowed`; chapter 08 takes that one apart.) The package keeps the
# three steps (shift, masks, forward pass) together in one function, used by the training loop:

# %%
show_source(teacher_forced_logits)

# %% [markdown]
# ## The loss: cross-entropy that ignores padding, with label smoothing
#
# At every decoder position the model outputs a score (logit) for each of the 14 target tokens,
# and the loss is the usual cross-entropy with the label, averaged over positions. Two details:
#
# **Padding is not a prediction.** A position whose label is `<pad>` exists only because another
# sequence in the batch is longer. It must contribute nothing to the loss, and it must not be
# counted in the average either (otherwise batches with much padding would get smaller losses).
#
# **Label smoothing** (used in the original Transformer, with $\varepsilon = 0.1$) trains
# against a softened target: instead of probability 1 on the label, the target distribution is
#
# $$q_k = (1 - \varepsilon)\,[k = \text{label}] + \frac{\varepsilon}{K}$$
#
# over the $K$ classes. The model is then never pushed to be infinitely sure (logits growing
# without bound), which tends to help generalisation and calibration. (Its price: the paper
# notes it makes perplexity worse while improving accuracy and BLEU.) The loss is the
# cross-entropy with $q$, which splits into two familiar parts:
#
# $$-\sum_k q_k \log p_k = (1 - \varepsilon)\,(-\log p_\text{label}) + \varepsilon \cdot \frac{1}{K}\sum_k (-\log p_k).$$

# %%
show_source(sequence_loss)

# %% [markdown]
# It agrees with PyTorch's `F.cross_entropy(..., ignore_index=pad, label_smoothing=ε)`, which
# uses the same definition ($\varepsilon/K$ on every class, the label included):

# %%
labels_d = labels.to(device)
for eps in (0.0, 0.1):
    ours = sequence_loss(logits, labels_d, PAD, label_smoothing=eps)
    ref = F.cross_entropy(
        logits.reshape(-1, len(tgt_tok)),
        labels_d.reshape(-1),
        ignore_index=PAD,
        label_smoothing=eps,
    )
    print(f"ε = {eps}: ours {ours.item():.4f}, PyTorch {ref.item():.4f}")
    assert torch.allclose(ours, ref, atol=1e-5)
print(
    f"guessing uniformly would give ln({len(tgt_tok)}) = "
    f"{math.log(len(tgt_tok)):.4f}; "
    "the untrained model's random preferences do worse"
)
assert sequence_loss(logits, labels_d, PAD).item() > math.log(len(tgt_tok))

# %% [markdown]
# Our targets contain no padding, so to see padding ignored we cut the labels after 5 positions
# by hand. Whatever the model says at the padded positions then changes nothing, and the loss
# is the average over the 5 real positions only:

# %%
cut = labels_d.clone()
cut[:, 5:] = PAD
noisy = logits.detach().clone()
noise_gen = torch.Generator().manual_seed(1)
noise = torch.randn(noisy[:, 5:].shape, generator=noise_gen)
noisy[:, 5:] = 100 * noise.to(device)
loss_cut = sequence_loss(logits, cut, PAD)
loss_noisy = sequence_loss(noisy, cut, PAD)
loss_first5 = sequence_loss(logits[:, :5], labels_d[:, :5], PAD)
print(f"loss with labels cut after 5:         {loss_cut.item():.4f}")
print(f"... with nonsense at padded positions: {loss_noisy.item():.4f}")
print(f"mean over the first 5 positions:       {loss_first5.item():.4f}")
assert torch.allclose(loss_noisy, loss_cut)
assert torch.allclose(loss_cut, loss_first5)

# %% [markdown]
# The smoothed target for the label `3`, next to the plain one-hot target:

# %%
EPS = 0.1
label_3 = torch.tensor([tgt_tok.index["3"]])
q = smoothed_targets(label_3, len(tgt_tok), EPS)[0]
fig, ax = plt.subplots(figsize=(7, 2.8))
xs = np.arange(len(tgt_tok))
one_hot = F.one_hot(label_3, len(tgt_tok))[0].numpy()
ax.bar(xs - 0.2, one_hot, width=0.4, label="one-hot (ε = 0)")
ax.bar(xs + 0.2, q.numpy(), width=0.4, label=f"smoothed (ε = {EPS})")
ax.set_xticks(xs, tgt_tok.tokens, rotation=45)
ax.set_ylabel("target probability")
note = f"every other token: ε/K = {EPS / len(tgt_tok):.4f}"
ax.text(xs[-1], 0.15, note, ha="right", fontsize=8)
ax.set_title("The label '3' as a training target")
ax.legend()
fig.tight_layout()
plt.show()
print(
    f"label: {q[label_3].item():.4f} = 1 - ε + ε/K; "
    f"every other token: {q[0].item():.4f} = ε/K; "
    f"sum {q.sum().item():.4f}"
)
assert abs(q[label_3].item() - (1 - EPS + EPS / len(tgt_tok))) < 1e-6
assert abs(q.sum().item() - 1) < 1e-6

# %% [markdown]
# One consequence to remember when reading the loss curves: with label smoothing the loss cannot
# go to 0. It is smallest when the model predicts exactly $q$, and that minimum is the entropy of
# $q$, a **floor** that a perfect model sits on:

# %%
floor = -(q * q.log()).sum().item()
print(
    f"smallest possible smoothed loss (entropy of q): {floor:.4f} "
    "nats per token"
)

# %% [markdown]
# ## Optimiser and learning-rate schedule
#
# **AdamW** (Adam with decoupled weight decay), with the original paper's $\beta_2 = 0.98$. The
# learning rate follows a **warm-up then decay** schedule: it rises linearly from almost 0 to its
# peak over the first 80 steps, then falls along a half cosine to 5 % of the peak at the last step.
#
# Why warm up? At the start, Adam's estimates of the gradient's scale come from very few steps,
# and the weights are random; large steps then can push a post-norm Transformer into a bad
# region that it leaves only slowly (exercise 2 shows this). The decay at the end lets the
# weights settle. The 2017 paper used a related schedule (linear warm-up, then decay with
# $1/\sqrt{\text{step}}$); warm-up + cosine is what most models use today (GPT-2 in chapter 10 as well).

# %%
show_source(warmup_decay)

# %%
PEAK_LR, WARMUP = 3e-3, 80
optimizer = torch.optim.AdamW(
    model.parameters(), lr=PEAK_LR, betas=(0.9, 0.98), weight_decay=0.01
)
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: warmup_decay(s, WARMUP, STEPS)
)

planned = [PEAK_LR * warmup_decay(s, WARMUP, STEPS) for s in range(STEPS)]
fig, ax = plt.subplots(figsize=(6.5, 2.8))
ax.plot(planned)
ax.axvline(WARMUP, color="gray", ls=":", lw=1)
ax.text(WARMUP + 10, PEAK_LR * 0.5, "end of warm-up", fontsize=8, color="gray")
ax.set_xlabel("step")
ax.set_ylabel("learning rate")
ax.set_title("Linear warm-up, then cosine decay")
fig.tight_layout()
plt.show()
print(
    f"step 0: {planned[0]:.1e}, "
    f"step {WARMUP - 1}: {planned[WARMUP - 1]:.1e} (peak), "
    f"step {STEPS - 1}: {planned[-1]:.1e}"
)
assert int(np.argmax(planned)) == WARMUP - 1 and planned[-1] < 0.06 * PEAK_LR

# %% [markdown]
# ## The training loop
#
# One step: a batch, the teacher-forced forward pass, the label-smoothed loss, backward,
# **gradient clipping** (if the gradient's total norm exceeds 1, it is scaled down to norm 1,
# so one unlucky batch cannot throw the weights far), the optimiser step, the scheduler step.
# Every 100 steps the loss on the validation set is measured, with the same label smoothing, so
# the two curves can be compared. A progress bar (`tqdm`) shows the running loss.
#
# The steps after the loss are the same for every model in this course, so they live in one
# function, `fit`, which chapters 10 and 12 use as well. Its heart is this loop, where
# `step_loss` is the task's part (a batch, the forward pass, the loss):
#
# ```python
# for step in range(steps):
#     loss = step_loss(step)
#     optimizer.zero_grad()
#     loss.backward()
#     torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
#     optimizer.step()
#     scheduler.step()
# ```
#
# Around it, `fit` records the loss and learning rate of every step, runs the evaluation and
# returns what it measured as a `History`. `train_seq2seq` only says what a step's loss is here
# (the next batch, teacher forcing, the label-smoothed loss) and what to evaluate.

# %%
show_source(fit)
show_source(train_seq2seq)

# %% tags=["nbval-ignore-output"]
history = train_seq2seq(
    model,
    train_loader,
    STEPS,
    optimizer,
    PAD,
    scheduler=scheduler,
    label_smoothing=EPS,
    clip_norm=1.0,
    val_loader=val_loader,
    eval_every=100,
    device=device,
)
assert len(history.loss) == STEPS

# %% [markdown]
# The numbers (rounded, so that they are the same run after run on the CPU):

# %%
final_train = float(np.mean(history.loss[-50:]))
print(f"training loss, mean of the last 50 steps: {final_train:.3f}")
print(
    "validation loss every 100 steps:",
    [round(v, 3) for v in history.evals["val_loss"]],
)
print(f"floor (entropy of the smoothed target): {floor:.3f}")
val_curve = history.evals["val_loss"]
assert history.loss[0] > 3
assert val_curve[2] < floor + 0.1 and val_curve[-1] < floor + 0.02
# the optimiser followed the planned schedule
assert np.allclose(history.lr, planned)

# %% [markdown]
# How long it took. Wall-clock time depends on what else the machine is doing, so the cell also
# reports **CPU time** (`time.process_time()`): on one thread it is what the training would take
# on an otherwise idle machine (or a little more), and it is what the budget of 120 s is
# checked against.

# %% tags=["nbval-ignore-output"]
wall_s, cpu_s = history.wall_seconds, history.cpu_seconds
print(
    f"{STEPS} steps in {wall_s:.1f} s wall-clock "
    f"({STEPS / wall_s:.1f} steps/s), "
    f"{cpu_s:.1f} s of CPU time "
    f"({STEPS / cpu_s:.1f} steps per CPU-second)"
)
assert history.cpu_seconds <= 120, (
    "training took more than the chapter's budget of 120 s"
)

# %% [markdown]
# The loss curves. The training loss (one value per step, and its average over 25 steps) falls
# from above 3 to near the floor within 300 steps; the validation loss, on dates the model never
# trains on, follows it, so the model is not memorising.

# %%
fig, ax = plt.subplots(figsize=(6.5, 3.5))
steps = np.arange(1, STEPS + 1)
ax.plot(steps, history.loss, color="C0", alpha=0.3, lw=0.8)
smooth = np.convolve(history.loss, np.ones(25) / 25, mode="valid")
ax.plot(steps[24:], smooth, color="C0", label="training (25-step average)")
ax.plot(history.eval_steps, val_curve, "s-", color="C1", label="validation")
ax.axhline(floor, color="gray", ls=":", lw=1)
ax.text(
    STEPS,
    floor - 0.05,
    "floor: entropy of the smoothed target",
    ha="right",
    va="top",
    fontsize=8,
    color="gray",
)
ax.set_ylim(0, 3)
ax.set_xlabel("step")
ax.set_ylabel("label-smoothed loss (nats per token)")
ax.set_title("Training the date normaliser")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Greedy decoding
#
# After training, there is no target to teacher-force with: the model must read its own output.
# **Greedy decoding** does this one token at a time:
#
# 1. encode the source **once**; the encoder output ("memory") does not change while decoding;
# 2. start the decoder input with `<bos>`;
# 3. run the decoder on the input so far (causal mask), take the most likely next token at the
#    last position, and append it;
# 4. stop at `<eos>` (or after a maximum length).
#
# By hand, for one held-out example, printing the output as it grows:

# %%
example = next(x for x in splits.test if x.format == "weekday_short")
one_src = torch.tensor([src_tok.encode(example.source)], device=device)
one_mask = (one_src != PAD)[:, None, None, :]  # (1, 1, 1, source length)
with torch.inference_mode():
    memory = model.encode(one_src, one_mask)  # step 1: once
    ys = torch.tensor([[tgt_tok.bos_id]], device=device)  # step 2
    for _ in range(12):
        n = ys.size(1)
        causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        out = model.decode(ys, memory, causal[None, None], one_mask)
        next_id = out[:, -1].argmax(-1)  # step 3
        ys = torch.cat([ys, next_id[:, None]], dim=1)
        token = tgt_tok.tokens[next_id.item()]
        print(f"step {n}: + {token:5} -> {tgt_tok.decode(ys[0].tolist())!r}")
        if next_id.item() == tgt_tok.eos_id:  # step 4
            break
print(f"{example.source!r} -> {tgt_tok.decode(ys[0].tolist())!r}")
assert tgt_tok.decode(ys[0].tolist()) == example.target

# %% [markdown]
# The package's `greedy_decode` does the same for a whole batch at once; a sequence that has
# finished gets `<pad>` while the others go on, and the loop stops when all have produced `<eos>`.
# (Each step recomputes the decoder over the whole prefix, which is fine for 11 tokens; chapter 10
# adds a key/value cache that avoids it.)

# %%
show_source(greedy_decode)

# %%
ids = greedy_decode(
    model, one_src, PAD, tgt_tok.bos_id, tgt_tok.eos_id, max_len=16
)
assert torch.equal(ids[0], ys[0, 1:])

# %% [markdown]
# One held-out example per format, decoded:

# %%
per_format = [next(x for x in splits.test if x.format == f) for f in FORMATS]
predicted = translate(
    model, [x.source for x in per_format], src_tok, tgt_tok, device=device
)
ok = ["✓" if p == x.target else "✗" for p, x in zip(predicted, per_format)]
table = pd.DataFrame(
    {
        "input": [x.source for x in per_format],
        "prediction": predicted,
        "target": [x.target for x in per_format],
        "ok": ok,
    }
)
print(table.to_string(index=False))

# %% [markdown]
# ## Exact-match accuracy on the held-out set
#
# For dates there is a single right answer, so the metric is **exact match**: a prediction counts
# only if every character is right. (For real translation, where many outputs are right, one
# uses BLEU or chrF instead.)

# %%
test_sources = [x.source for x in splits.test]
test_targets = [x.target for x in splits.test]
predictions = translate(model, test_sources, src_tok, tgt_tok, device=device)
accuracy = exact_match(predictions, test_targets)
print(
    f"exact match on the {len(test_targets)} held-out examples: "
    f"{100 * accuracy:.1f} %"
)
by_format = (
    pd.Series([p == x.target for p, x in zip(predictions, splits.test)])
    .groupby([x.format for x in splits.test])
    .mean()
)
print(
    f"accuracy per format: from {100 * by_format.min():.1f} % "
    f"to {100 * by_format.max():.1f} %"
)
mistakes = [
    (x.source, p, x.target)
    for p, x in zip(predictions, splits.test)
    if p != x.target
]
print("mistakes:", mistakes if mistakes else "none")
assert accuracy >= 0.99

# %% [markdown]
# ## Where the model fails: dates written in ways it has never seen
#
# 99.7 % on the held-out set says that the model generalises to new *dates*. Its three mistakes
# are small: two years off by ten (2033 for 2023, 1988 for 1998) and a day with its digits
# swapped (13 for 31). Every one of those dates was written in one of the 15 formats it trained on. People write dates in many more ways. A
# fair next question: what happens with formats that are just as clear to a reader but never
# occur in training? `UNSEEN_FORMATS` has six, built from the same pieces (day, month name or
# number, year, the same separators), each rendered for 200 of the held-out dates:

# %%
unseen = [
    render_date(x.date, name, formats=UNSEEN_FORMATS)
    for name in UNSEEN_FORMATS
    for x in splits.test[:200]
]
unseen_pred = translate(
    model, [x.source for x in unseen], src_tok, tgt_tok, device=device
)
wrong = [wrong_fields(p, x.target) for p, x in zip(unseen_pred, unseen)]
ood = pd.DataFrame(
    {
        "format": [x.format for x in unseen],
        "example": [x.source for x in unseen],
        "prediction": unseen_pred,
        "target": [x.target for x in unseen],
        "wrong": wrong,
    }
)
ood["correct"] = ood["wrong"].map(len) == 0
summary = ood.groupby("format", sort=False).agg(
    example=("example", "first"), exact_match=("correct", "mean")
)
print(summary.to_string(formatters={"exact_match": "{:.1%}".format}))
print(
    f"all six formats: {ood['correct'].mean():.1%} exact match "
    f"({(~ood['correct']).sum()} mistakes out of {len(ood)})"
)
assert set(ood["format"]) == set(UNSEEN_FORMATS)
assert not set(UNSEEN_FORMATS) & set(FORMATS)
assert 0.2 < ood["correct"].mean() < 0.95
assert summary["exact_match"].min() < 0.5

# %% [markdown]
# Now there are mistakes to analyse. `wrong_fields` compares a prediction with the target field
# by field (year, month, day; "malformed" if the output is not even shaped like a date). Counting
# the fields that go wrong, per format, tells *what kind* of mistake each format provokes:

# %%
fields_wrong = (
    ood.explode("wrong")
    .dropna(subset=["wrong"])
    .groupby(["format", "wrong"], sort=False)
    .size()
    .unstack(fill_value=0)
    .reindex(index=list(UNSEEN_FORMATS), fill_value=0)
)
cols = [c for c in ["year", "month", "day", "malformed"] if c in fields_wrong]
fields_wrong = fields_wrong.reindex(columns=cols)
print(
    "number of predictions with this field wrong "
    "(a prediction can have several):"
)
print(fields_wrong.to_string())
for name in UNSEEN_FORMATS:
    rows = ood[(ood["format"] == name) & ~ood["correct"]].head(2)
    for r in rows.itertuples():
        print(
            f"  {name:24} {r.example!r:24} -> {r.prediction!r:14} "
            f"(target {r.target}; wrong: {', '.join(r.wrong)})"
        )

# %%
no_comma = ood[(ood["format"] == "month_day_year_no_comma") & ~ood["correct"]]
predicted_day = no_comma["prediction"].str[8:]
last_digit = no_comma["target"].str[9]
lost_tens = (predicted_day == "0" + last_digit).mean()
print(
    "'July 14 2021' mistakes whose day is '0' + the last digit "
    f"of the true day: {lost_tens:.0%}"
)
assert summary.loc["iso_slash", "exact_match"] < 0.05
assert summary.loc["year_month_day", "exact_match"] < 0.05
assert fields_wrong.loc["day_mon_yyyy", ["month", "day"]].sum() == 0
assert fields_wrong.loc["day_mon_yyyy", "year"] > 0
# (nearly) only the day goes wrong
for name in ("month_day_year_no_comma", "mon_dot_day_year"):
    others = fields_wrong.loc[name, ["year", "month"]].sum()
    assert fields_wrong.loc[name, "day"] > 20 * others
assert lost_tens > 0.4

# %% [markdown]
# The table is the analysis; read it format by format.
#
# * **`1962/10/23`** (0 %): in training, `/` *always* meant month/day/year, so the model trusts
#   the separator over the shape of the numbers. Every field goes wrong, and some outputs are not
#   even dates. **`1962 October 23`** (0.5 %) fails the same way: the year was always at the
#   end or in a purely numeric date, so the model reads the day where it expects the year.
# * **`23-Oct-1962`** (80.5 %): this pattern appeared in training only with a two-digit year
#   (`23-Oct-62`). Month and day are always right; only the year goes wrong, with its digits
#   mixed up (`08-Mar-2021` → 2001).
# * **`October 23 1962`** (59 %): almost only the day goes wrong, and in nearly half of these
#   mistakes the same way: a two-digit day loses its first digit (23 → 03). Training wrote the full
#   month name with a comma after the day (`October 23, 1962`) and only the short name without one
#   (`Oct 23 1962`); this mixture of the two misleads the model about where the day is.
#   `Oct. 23, 1962` (73 %), with a `.` that training never put after a month, shows the same kind
#   of day error, less often.
# * **`23 October '62`** (97.5 %) is close to a training format (`23 October 1962`) and mostly
#   right; its few errors are in the two-digit year.
#
# So the model has learned the regularities of its training formats, including ones that are not
# the real rule: a `/` *implies* month-first, a `-Oct-` *implies* a two-digit year, a comma ends
# the day. A held-out set drawn from the training distribution shares those regularities, so it
# could not reveal them; 99.7 % there measured interpolation. To know how a model behaves on the
# inputs you will actually get, test on those, and look at *which* mistakes it makes: here they
# point straight at the fix (more varied training formats; exercise 3 adds one by fine-tuning).
#
# Years are a second axis. The model has never seen a year outside 1950–2049:

# %%
outside = "14th of July, 1789"
guess = translate(model, [outside], src_tok, tgt_tok, device=device)[0]
print(f"{outside!r} -> {guess!r}")
assert guess != "1789-07-14" and guess[:2] in ("19", "20")

# %% [markdown]
# It answers with a year in the range it knows: a model does not say "I don't know" unless it
# was trained to.
#
# %% [markdown]
# ## What the model looks at: cross-attention
#
# Each decoder layer keeps the weights of its last cross-attention call in
# `cross_attn_weights`, shaped `(batch, heads, L_tgt, L_src)`: for every output position, how
# much it reads from each source character. We run the model once more, teacher-forced with its
# own prediction, and plot the last decoder layer, averaged over its 4 heads. Row $i$ is the
# position that *produces* output character $i$.

# %%
example = next(x for x in splits.test if x.format == "month_ordinal")
one_src = torch.tensor([src_tok.encode(example.source)], device=device)
pred = translate(model, [example.source], src_tok, tgt_tok, device=device)[0]
one_tgt = torch.tensor([tgt_tok.encode(pred, add_bos=True)], device=device)
with torch.inference_mode():
    teacher_forced_logits(model, one_src, one_tgt, PAD)
# (L_tgt, L_src), heads averaged
weights = model.decoder.layers[-1].cross_attn_weights[0].mean(0)
title = f"cross-attention, last decoder layer: {example.source!r} -> {pred!r}"
ax = plot_attention(
    weights,
    keys=list(example.source) + ["<eos>"],
    queries=list(pred) + ["<eos>"],
    title=title,
)
ax.set_xlabel("source character")
ax.set_ylabel("output character being produced")
plt.show()

# where each output character looks most
looks_at = weights.argmax(-1).tolist()
ya, yz = example.spans["year"]
ma, mz = example.spans["month"]
da, dz = example.spans["day"]
print("year digits look most at:", [example.source[j] for j in looks_at[0:4]])
print("month digits look most at:", [example.source[j] for j in looks_at[5:7]])
print("day digits look most at:", [example.source[j] for j in looks_at[8:10]])
# each year digit reads its own source digit
assert looks_at[0:4] == list(range(ya, yz))
assert all(ma <= j < mz for j in looks_at[5:7])
assert all(da <= j < dz for j in looks_at[8:10])
assert example.source.startswith("November")
assert [example.source[j] for j in looks_at[5:7]] == ["v", "v"]
assert [m for m in MONTHS if "v" in m.lower()] == ["November"]

# %% [markdown]
# The model has learned the *reordering*: the year digits read the year at the end of the
# source, each digit its own source digit; the month digits read the month name at the start
# (for November mostly its `v`: no other month name has one); the day digits read the day in the
# middle. The same holds on average over all 1,000 held-out examples. For each field of the
# output (rows), the table gives the share of the last layer's cross-attention that falls on
# each field of the source (columns; the rest goes to separators, weekday names and `<eos>`):

# %%
test_src = torch.nn.utils.rnn.pad_sequence(
    [torch.tensor(src_tok.encode(s)) for s in test_sources],
    batch_first=True,
    padding_value=PAD,
).to(device)
test_tgt = torch.tensor(
    [tgt_tok.encode(t, add_bos=True) for t in test_targets], device=device
)
with torch.inference_mode():
    teacher_forced_logits(model, test_src, test_tgt, PAD)

# positions in "YYYY-MM-DD"
out_rows = {"year": [0, 1, 2, 3], "month": [5, 6], "day": [8, 9]}
fields = list(out_rows)


def field_share(layer: int) -> pd.DataFrame:
    """Share of a decoder layer's cross-attention (heads averaged) from each
    output field to each source field."""
    # (1000, 11, L_src)
    w = model.decoder.layers[layer].cross_attn_weights.mean(1).cpu()
    share = np.zeros((3, 3))  # [output field, source field]
    for b, x in enumerate(splits.test):
        for i, rows in enumerate(out_rows.values()):
            # attention of this output field, averaged over its characters
            per_src = w[b, rows].mean(0)
            for j, field in enumerate(fields):
                a, z = x.spans[field]
                share[i, j] += per_src[a:z].sum().item() / len(splits.test)
    return pd.DataFrame(
        share,
        index=[f"output {f}" for f in fields],
        columns=[f"source {f}" for f in fields],
    )


share = field_share(-1)
print(share.round(2).to_string())
diag = np.diag(share.to_numpy())
off = share.to_numpy()[~np.eye(3, dtype=bool)]
assert diag.min() > 0.5 and diag.min() > 5 * off.max()
first = np.diag(field_share(0).to_numpy())
print("first decoder layer, matching fields:", first.round(2).tolist())
assert first.min() < diag.min()

# %% [markdown]
# Every output field puts most of its attention on the matching source field and little on
# the other two, whichever order and spelling the source uses. The first decoder layer is less
# clean (the last line): attention weights show one mechanism the model uses, not a complete
# explanation of it.
#
# ## Saving and loading the trained model
#
# A model is its architecture (the `config`) plus its weights (the `state_dict`); to use it on
# new text we also need the tokenisers. We save all three in one file (the vocabularies as
# plain lists, so the file loads with `weights_only=True`, the safe default of `torch.load`),
# rebuild the model from it, and check it predicts the same.

# %%
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "date_transformer.pt"
    torch.save(
        {
            "config": config.to_dict(),
            "state_dict": model.state_dict(),
            "src_tokens": src_tok.tokens,
            "tgt_tokens": tgt_tok.tokens,
        },
        path,
    )
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)

restored = Transformer(TransformerConfig.from_dict(checkpoint["config"]))
restored.load_state_dict(checkpoint["state_dict"])
restored.to(device).eval()
assert checkpoint["src_tokens"] == src_tok.tokens
assert checkpoint["tgt_tokens"] == tgt_tok.tokens
n_tensors = len(checkpoint["state_dict"])
print("saved:", sorted(checkpoint), f"| {n_tensors} tensors")
same = (
    translate(restored, test_sources[:200], src_tok, tgt_tok, device=device)
    == predictions[:200]
)
print("the restored model gives the same 200 predictions:", same)
assert same

# %% [markdown]
# ## From dates to real translation: what changes
#
# The loop above is the whole recipe; for English→German, say, the pieces grow:
#
# * **Tokeniser.** Characters make sentences very long. Real systems use a **subword** tokeniser
#   (BPE, WordPiece, unigram; the `tokenizers` library trains them), often one vocabulary
#   of 30–40k tokens shared by both languages, so source and target embeddings can be tied.
# * **Data.** Millions of sentence pairs (WMT, OPUS), cleaned and deduplicated, read lazily instead
#   of held in memory. Batches are built from sentences of similar length (**bucketing**) and
#   sized in tokens rather than sentences, so little compute goes into padding.
# * **Size and regularisation.** The paper's base model is $d_\text{model} = 512$, 8 heads, 6 + 6
#   layers, $d_\text{ff} = 2048$, dropout 0.1, label smoothing 0.1, 4,000 warm-up steps, and a
#   100k-step run. Real data is finite, so dropout is back on.
# * **Hardware.** A GPU (or several): `device = get_device()` above already picks it. Add mixed
#   precision (`torch.autocast`) and a fused attention kernel
#   (`F.scaled_dot_product_attention`, which `MultiHeadAttention(use_sdpa=True)` calls).
# * **Decoding and evaluation.** Beam search instead of greedy, a length penalty, and BLEU/chrF
#   instead of exact match.
#
# How much bigger is "base"? With a 37,000-token vocabulary on each side, built on PyTorch's
# `meta` device (shapes only, no memory for the weights):

# %%
base_config = TransformerConfig(
    37_000,
    37_000,
    d_model=512,
    num_heads=8,
    num_encoder_layers=6,
    num_decoder_layers=6,
    d_ff=2048,
)
with torch.device("meta"):
    base = Transformer(base_config)
n_base, n_ours = count_parameters(base), count_parameters(model)
print(
    f"ours: {n_ours:,} parameters; "
    f"base with separate 37k vocabularies: {n_base:,} "
    f"(~{n_base / n_ours:.0f}x)"
)
assert n_base > 400 * n_ours

# %% [markdown]
# (The paper reports 65M for base: it shares one vocabulary between the two languages and ties
# the three embedding matrices, the encoder's, the decoder's and the output layer's.)
#
# ## Summary
#
# * `Seq2SeqDataset` + a **collate function** that pads each batch turn text pairs into
#   `(batch, L)` tensors; `<pad>`, `<bos>`, `<eos>` frame and fill them.
# * **Teacher forcing** shifts the target: the decoder reads `<bos> y1 … yn` and is labelled with
#   `y1 … yn <eos>`; the masks are built for exactly these tensors, and the causal mask keeps
#   the labels hidden.
# * The **loss** ignores padded labels; **label smoothing** trains against a softened target and
#   puts a floor under the loss (its entropy).
# * **AdamW** with **warm-up then cosine decay**, **gradient clipping**, and a validation loss
#   every 100 steps: 800 steps on one CPU thread train a 240k-parameter model to ≥ 99 % exact match
#   on 1,000 dates it has never seen.
# * **Greedy decoding** encodes once and decodes token by token until `<eos>`; the
#   **cross-attention** of the trained model shows the reordering of day, month and year.
# * 99.7 % on held-out dates is not 99.7 % on the dates people write: on six **unseen formats**
#   the model gets half right, and the fields it gets wrong show which training regularities it has
#   mistaken for rules. Test on the inputs you will get, and analyse the errors, not just count them.
#
# ## Exercises
#
# **1. Label smoothing at equal steps.** Train two fresh models for 250 steps each (warm-up 25,
# otherwise as above), one with `label_smoothing=0.1` and one with `0.0`, from the same
# initial weights and on the same batches. For each, measure on the validation set the average
# probability the model gives to the correct token, and the exact match on the held-out dates and
# on the unseen formats. Which is more confident? Compare both with the smoothed target's
# $1 - \varepsilon + \varepsilon/K$. Does smoothing change the accuracy?


# %% tags=["hide-input", "solution"]
@torch.inference_mode()
def mean_p_correct(m: torch.nn.Module) -> float:
    """Average probability of the correct next token over the validation set
    (teacher-forced)."""
    m.eval()
    vsrc, vtgt = next(iter(val_loader))
    vlogits, vlabels = teacher_forced_logits(
        m, vsrc.to(device), vtgt.to(device), PAD
    )
    p = vlogits.softmax(-1).gather(-1, vlabels[..., None])[..., 0]
    return p[vlabels != PAD].mean().item()


def run_250(eps: float) -> dict[str, float]:
    """A fresh model (seed 0) trained 250 steps with label smoothing ``eps``;
    what it scores."""
    set_seed(0, num_threads=1)
    m = Transformer(config).to(device)
    opt = torch.optim.AdamW(
        m.parameters(), lr=PEAK_LR, betas=(0.9, 0.98), weight_decay=0.01
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: warmup_decay(s, 25, 250)
    )
    # the same batches for both runs
    loader = DataLoader(
        train_ds,
        batch_size=BATCH,
        shuffle=True,
        collate_fn=collate,
        generator=torch.Generator().manual_seed(0),
    )
    train_seq2seq(
        m,
        loader,
        250,
        opt,
        PAD,
        sched,
        label_smoothing=eps,
        device=device,
        show_progress=False,
    )
    p_correct = mean_p_correct(m)
    held_out = translate(m, test_sources, src_tok, tgt_tok, device=device)
    unseen_src = [x.source for x in unseen]
    ood_pred = translate(m, unseen_src, src_tok, tgt_tok, device=device)
    return {
        "mean p(correct)": p_correct,
        "held-out": exact_match(held_out, test_targets),
        "unseen formats": exact_match(ood_pred, [x.target for x in unseen]),
    }


runs = pd.DataFrame({f"ε = {eps}": run_250(eps) for eps in (0.1, 0.0)}).T
cap = 1 - EPS + EPS / len(tgt_tok)
print(runs.round(3).to_string())
print(f"smoothed target for the label: {cap:.3f}")
p_plain = runs.loc["ε = 0.0", "mean p(correct)"]
p_smoothed = runs.loc["ε = 0.1", "mean p(correct)"]
assert p_plain > cap > p_smoothed - 0.01
# 250 steps are far from enough, with or without smoothing
assert (runs["held-out"] < accuracy - 0.2).all()

# %% [markdown]
# At equal steps, the model trained without smoothing is more confident: its average
# p(correct) exceeds the 0.907 that the smoothed loss asks for, while the smoothed model is still
# below that cap. Being more confident does not make it more accurate: after 250 steps both models
# get only about two thirds of the held-out dates right (the full 800-step run: 99.7 %), and a third
# of the unseen formats. The differences between the two accuracies are a few points, from one seed
# each; to claim that smoothing helps or hurts accuracy, repeat the comparison over several seeds
# and look at the spread.

# %% [markdown]
# **2. Fewer warm-up steps.** Train two fresh models for 100 steps at a peak learning rate of
# `1e-2` (a bit over 3× ours): one with 80 warm-up steps, one with a single warm-up step (no warm-up),
# both with the 800-step cosine. Compare their validation losses after 100 steps.


# %% tags=["solution"]
def short_run(peak: float, warmup: int, n_steps: int = 100) -> float:
    """Validation loss of a fresh model after ``n_steps`` with the given
    peak LR and warm-up."""
    set_seed(0, num_threads=1)
    m = Transformer(config).to(device)
    opt = torch.optim.AdamW(
        m.parameters(), lr=peak, betas=(0.9, 0.98), weight_decay=0.01
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: warmup_decay(s, warmup, STEPS)
    )
    loader = DataLoader(
        train_ds,
        batch_size=BATCH,
        shuffle=True,
        collate_fn=collate,
        generator=torch.Generator().manual_seed(0),
    )
    h = train_seq2seq(
        m,
        loader,
        n_steps,
        opt,
        PAD,
        sched,
        label_smoothing=EPS,
        val_loader=val_loader,
        eval_every=n_steps,
        device=device,
        show_progress=False,
    )
    return h.evals["val_loss"][-1]


with_warmup, without_warmup = short_run(1e-2, 80), short_run(1e-2, 1)
print(
    "peak 1e-2, validation loss after 100 steps: "
    f"with warm-up {with_warmup:.3f}, without {without_warmup:.3f}"
)
# the large early steps set training back
assert without_warmup > with_warmup + 0.3

# %% [markdown]
# **3. A new date format.** Add the format `"1962, October 23"` (year, full month name, day).
# First measure how the trained model does on the held-out dates written this way. Then
# fine-tune it for 300 steps on a mix of 3,000 examples in the new format and 3,000 in the
# old ones (the training dates only), and measure again, on the new format *and* on the
# original held-out set: did it forget anything?

# %% tags=["solution"]
new_format = {
    "year_first": lambda d: [
        ("year", str(d.year)),
        (None, ", "),
        ("month", MONTHS[d.month - 1]),
        (None, " "),
        ("day", str(d.day)),
    ]
}
new_test = [
    render_date(x.date, "year_first", formats=new_format) for x in splits.test
]
print("example:", new_test[0].source, "->", new_test[0].target)


def accuracy_on(examples) -> float:
    sources = [x.source for x in examples]
    preds = translate(model, sources, src_tok, tgt_tok, device=device)
    return exact_match(preds, [x.target for x in examples])


before = accuracy_on(new_test)
mix = [
    (render_date(x.date, "year_first", formats=new_format).source, x.target)
    for x in splits.train[:3000]
]
mix += to_pairs(splits.train[3000:6000])
mix_loader = DataLoader(
    Seq2SeqDataset(mix, src_tok, tgt_tok),
    batch_size=BATCH,
    shuffle=True,
    collate_fn=collate,
    generator=torch.Generator().manual_seed(1),
)
opt_ft = torch.optim.AdamW(
    model.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=0.01
)
sched_ft = torch.optim.lr_scheduler.LambdaLR(
    opt_ft, lambda s: warmup_decay(s, 20, 300)
)
train_seq2seq(
    model,
    mix_loader,
    300,
    opt_ft,
    PAD,
    sched_ft,
    label_smoothing=EPS,
    device=device,
    show_progress=False,
)
after, old_after = accuracy_on(new_test), accuracy_on(splits.test)
print(
    f"new format: {100 * before:.1f} % before fine-tuning, "
    f"{100 * after:.1f} % after; "
    f"original held-out set after: {100 * old_after:.1f} %"
)
assert before < 0.5 and after >= 0.97 and old_after >= 0.99
