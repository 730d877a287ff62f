# %% [markdown]
# # 15 — Instruction tuning with LoRA
#
# Chapter 11 loaded SmolLM2-135M-Instruct, a model that already follows instructions in a chat
# format. Chapter 09 trained a small Transformer from scratch to rewrite dates such as
# `3rd of March, 2021` in ISO form, `2021-03-03`. This chapter puts the two together: we
# **teach the pretrained model the date task** with 128 examples, in 16 training steps that
# run on a CPU, and measure what it gained and, on a small scale, what it lost.
#
# *Instruction tuning* in the wide sense turns a **base** model, which only continues text, into
# an assistant: it is trained further on many varied (instruction, answer) conversations, with the
# loss on the answers. SmolLM2-135M-Instruct is the base SmolLM2-135M after that step (and a
# further one on preferences; Hugging Face, 2024). Here we apply the same recipe, supervised
# fine-tuning on chat-formatted pairs, to a model that has been through it already, to teach it
# **one narrow task**: task-specific fine-tuning. The tools are the same either way.
#
# 1. **Before**: how well does the untuned model do, scored by exact match on dates it will
#    never see in training?
# 2. **Data the way the model expects it**: each example rendered with the model's own chat
#    template, with the loss on the answer's tokens only.
# 3. **LoRA** (chapter 13): instead of changing the 135 million weights, we train a low-rank
#    update of two kinds of matrix in every layer, with the package's layer and with `peft`.
# 4. **Training two ways**: with the course's loop (`fit`, chapter 09), then a test of the
#    answer-only loss against a loss on every token, then with `trl`'s `SFTTrainer` on the same
#    data, schedule and seed as `fit`.
# 5. **After**: the same held-out score, the adapter switched on and off, saved, merged into
#    the weights, and what the tuning cost the model elsewhere.

# %% tags=["remove-cell"]
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")
warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=FutureWarning)

import datasets

datasets.disable_progress_bars()

# %%
import copy
import datetime as dt
import math
import re
import statistics
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import display
from torch import nn

from transformer_course.instruct import (
    IGNORE,
    LoRALinear,
    add_lora,
    chat_example,
    pad_batch,
)
from transformer_course.pretrained import load_smollm2
from transformer_course.tasks.dates import (
    FORMATS,
    make_splits,
    render_date,
    wrong_fields,
)
from transformer_course.training import fit, warmup_decay
from transformer_course.utils import (
    Table,
    count_parameters,
    get_device,
    set_seed,
    show_source,
)

# %%
set_seed(0)  # the same random numbers on every run
device = get_device()

# %% [markdown]
# `get_device()` picks a GPU when there is one, the CPU otherwise.
#
# The model is SmolLM2-135M-Instruct in chapter 11's quantised copy (`gguf`, Q4_1 and Q8_0),
# expanded to 32-bit floats when it is loaded; the weights keep the rounding error of the
# quantisation. So this chapter trains LoRA adapters on a frozen base
# that carries the rounding error of 4-bit storage (Q4_1 keeps 4-bit values with a scale and an
# offset for each block of 32, about 5 bits a weight; the embedding, which is also the output
# head, is kept in the finer Q8_0), which is QLoRA's setting (Dettmers et al., 2023), except
# that QLoRA keeps the weights in 4 bits (its own NF4 type rather than Q4_1) and dequantises them
# to bfloat16 on the fly for each product, while we hold them dequantised in float32: the same
# kind of rounding error, without the memory saving. The original bfloat16 weights can score
# differently.

# %%
tok, base, source = load_smollm2(device)
print(f"weights from {source}: {base.dtype}, on {device}")

# %% [markdown]
# ## The task, and the model before tuning
#
# Chapter 09's data: a date drawn from 1950–2049 is written in one of chapter 09's 15 formats:
# numeric (ISO, compact `19771118`, month/day/year with slashes, day.month.year with dots, with
# four-digit or two-digit years), with the month in words, with ordinals, with weekdays, in lower
# or upper case. The answer is its ISO form. Three conventions of the data are never stated in
# the question: a two-digit year `yy` means 19yy for yy ≥ 50 and 20yy below (`'34` is 2034), a
# slash means month/day, and a dot means day.month. In one format a weekday comes with the
# two-digit year, `Tue, Oct 10, '34`; a date and the same date a hundred years away never fall
# on the same day of the week (the last line below checks it), so there the weekday settles
# the century. `make_splits` keeps the *dates* of the held-out set out of the training set in
# every format, so a correct held-out answer cannot be remembered, only worked out. We take 128 training examples, ask in plain words, and keep two
# sets of 40 dates out of training: a *dev* set, on which we watch the training run, and a
# *test* set, scored before tuning and once after it (chapter 13's rule: settings are judged on
# a dev split, the test set is used once). `make_splits` draws the test dates first, so asked
# for more test dates it returns the same 40 and then new ones; the next 40 of those that are
# not training dates form the dev set.

# %%
N_TRAIN, N_DEV, N_TEST = 128, 40, 40
splits = make_splits(n_train=N_TRAIN, n_val=0, n_test=N_TEST, seed=0)
PROMPT = "Write this date in ISO 8601 form (YYYY-MM-DD), nothing else: {}"
for ex in splits.train[:4]:
    print(f"{PROMPT.format(ex.source):78}\n  -> {ex.target}")
train_dates = {ex.date for ex in splits.train}
print(f"{N_TRAIN} training examples on {len(train_dates)} dates;")
wider = make_splits(n_train=0, n_val=0, n_test=3 * N_TEST, seed=0).test
dev = [e for e in wider[N_TEST:] if e.date not in train_dates][:N_DEV]
test_dates = {ex.date for ex in splits.test}
dev_dates = {ex.date for ex in dev}
print(f"{N_TEST} test dates, none of them in training:", end=" ")
print(not train_dates & test_dates)
print(f"{len(dev)} dev dates, in neither training nor test:", end=" ")
print(not dev_dates & (train_dates | test_dates))
same_weekday = 0
for day in range(
    dt.date(1950, 1, 1).toordinal(), dt.date(2050, 1, 1).toordinal()
):
    d = dt.date.fromordinal(day)
    if d.month == 2 and d.day == 29:  # not a date in every century
        continue
    other = d.replace(year=d.year + (100 if d.year < 2000 else -100))
    same_weekday += d.weekday() == other.weekday()
print(f"dates of 1950-2049 on the same weekday 100 years away: {same_weekday}")

# %% tags=["remove-cell"]
assert wider[:N_TEST] == splits.test and len(dev_dates) == N_DEV

# %% [markdown]
# To ask the model, we render the question with its chat template (chapter 11), let it answer
# greedily (always the most likely next token, so the answer is reproducible) and compare the
# answer with the ISO date, character for character: **exact match**. The prompts of a batch
# have different lengths, so they are padded on the left (`padding_side = "left"`), where the
# attention mask hides the padding and the answer can follow each prompt's last token directly.


# %%
def chat_prompt(question, context=()):
    """``question`` as the user's turn, after the messages ``context``."""
    messages = [*context, {"role": "user", "content": question}]
    return tok.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )


@torch.inference_mode()
def answer(model, questions, context=(), max_new_tokens=12, batch_size=40):
    """The model's greedy answers to ``questions``, one string each."""
    model.eval()
    tok.padding_side = "left"
    out = []
    for i in range(0, len(questions), batch_size):
        chunk = questions[i : i + batch_size]
        texts = [chat_prompt(q, context) for q in chunk]
        batch = tok(texts, return_tensors="pt", padding=True).to(device)
        ids = model.generate(
            **batch, max_new_tokens=max_new_tokens, do_sample=False
        )
        new = ids[:, batch["input_ids"].shape[1] :]
        out += [a.strip() for a in tok.batch_decode(new, True)]
    return out


def score(answers, examples):
    """Exact match, and the share of answers that start with the date."""
    exact = sum(a == e.target for a, e in zip(answers, examples))
    starts = sum(a.startswith(e.target) for a, e in zip(answers, examples))
    return exact / len(examples), starts / len(examples)


def show(answers, examples, n=6):
    rows = [
        ("✓" if a == e.target else "✗", e.source, e.target, repr(a))
        for a, e in list(zip(answers, examples))[:n]
    ]
    display(Table(["", "question", "right answer", "model's answer"], rows))


def only_a_date(a):
    """Is the answer one ISO-shaped date and nothing else?"""
    return re.fullmatch(r"\d{4}-\d{2}-\d{2}", a) is not None


def date_then_more(a):
    """Does the answer start with an ISO-shaped date and then go on?"""
    return re.match(r"\d{4}-\d{2}-\d{2}.", a) is not None


questions = [PROMPT.format(e.source) for e in splits.test]
before = answer(base, questions)
em_before, starts_before = score(before, splits.test)
print(f"exact match before tuning: {em_before:.1%}", end="; ")
print(f"answer starts with the date: {starts_before:.1%}")
n_dates = sum(only_a_date(a) for a in before)
n_more = sum(date_then_more(a) for a in before)
print(f"answers that are one ISO date and nothing else: {n_dates} of {N_TEST}")
print(f"answers with an ISO date, then more text: {n_more} of {N_TEST}")
show(before, splits.test)

# %% tags=["remove-cell"]
assert em_before <= 0.2

# %% [markdown]
# The untuned model gets 2.5 % exactly right. Some answers begin with the right date and then
# go on (a space and a digit above, where the cap of 12 new tokens cuts them off); strict exact
# match counts them as wrong, and it should: a program that reads the answer needs the date and
# nothing else. The second number, 17.5 % of answers that *start* with the right date, shows how
# little of the skill is there before tuning: the model also copies the question back, or
# misreads the month or the day.
#
# This is a zero-shot score on a question that leaves the data's conventions unsaid. A fairer
# baseline without any training states them in the system message, with the instruction, and
# puts three worked examples from the training set before the question, as earlier turns of the
# conversation (a *few-shot* prompt):

# %%
RULES = (
    "Write the date in ISO 8601 form (YYYY-MM-DD), nothing else. "
    "A two-digit year yy means 19yy if yy >= 50, else 20yy; "
    "a/b/yy and a/b/yyyy are month/day/year; "
    "a.b.yy and a.b.yyyy are day.month.year."
)
shots = [
    next(e for e in splits.train if e.format == f)
    for f in ("us_slash_short", "eu_dot_short", "weekday_short")
]
few_shot = [{"role": "system", "content": RULES}]
for e in shots:
    few_shot.append({"role": "user", "content": e.source})
    few_shot.append({"role": "assistant", "content": e.target})
for line in chat_prompt(splits.test[0].source, few_shot).splitlines():
    print(textwrap.fill(line, 80))
hinted = answer(base, [e.source for e in splits.test], context=few_shot)
em_hinted, starts_hinted = score(hinted, splits.test)
print(f"\nexact match, few-shot: {em_hinted:.1%}", end="; ")
print(f"starts with the date: {starts_hinted:.1%}")
n_dates = sum(only_a_date(a) for a in hinted)
print(f"answers that are one ISO date and nothing else: {n_dates} of {N_TEST}")
show(hinted, splits.test)

# %% [markdown]
# The conventions and three examples lift the untuned model from 2.5 % to 25.0 % exact match,
# and with examples to copy, 30 of its 40 answers are one ISO date and nothing else; but three
# answers in four are still wrong, some partly copied from an example (`'2018-02-23'` for
# `'23-oct-62'`), some against a rule the system message states (`'02/07/2026'` is
# month/day/year, yet answered with day 22). That is the score to beat with training.
#
# ## Instruction data the way the model expects it
#
# An instruction-tuned model was trained on conversations rendered by its chat template, so our
# examples are rendered the same way: a system message (the template inserts its default one,
# since our conversations have none), the user's turn, the assistant's turn, each framed by
# `<|im_start|>` and `<|im_end|>`. We want the model to learn to *produce the answer*, not to
# predict the prompt, so the labels are the token ids only on the answer and the
# end of its turn, and $-100$ everywhere else: PyTorch's cross-entropy (and the loss of every
# Hugging Face model) skips the label $-100$.
#
# Rendered twice, once as the prompt alone (with the opening of the assistant's turn, as when we
# ask a question) and once as the whole exchange, the first must be a prefix of the second; the
# labels are then $-100$ for the prefix and the token ids for the rest:


# %%
def answer_only_labels(prompt_ids, full_ids):
    """-100 on the prompt's tokens, the token ids on the rest."""
    assert full_ids[: len(prompt_ids)] == prompt_ids, "not a prefix"
    n = len(prompt_ids)
    return [IGNORE] * n + full_ids[n:]


first = splits.train[0]
user = [{"role": "user", "content": PROMPT.format(first.source)}]
full = [*user, {"role": "assistant", "content": first.target}]
prompt_ids = tok.apply_chat_template(
    user, add_generation_prompt=True, return_dict=False
)
full_ids = tok.apply_chat_template(full, return_dict=False)
labels = answer_only_labels(prompt_ids, full_ids)
print(f"prompt: {len(prompt_ids)} tokens; whole exchange: {len(full_ids)}")
print(f"tokens that carry loss: {sum(x != IGNORE for x in labels)}")

# %% [markdown]
# The package's `chat_example` does the same and returns `input_ids` and `labels`. It checks
# the prefix because not every chat template has that property: some rewrite earlier turns when
# a new one is added (for example, templates of reasoning models strip the reasoning block from
# past answers), and in a text tokenised as one string the last characters of the prompt can
# merge with the first of the answer into one token. Counting the prompt's tokens would then put
# the labels in the wrong place, without any error.

# %%
show_source(chat_example)

# %% [markdown]
# Each token belongs to one part of the example: the system message, the instruction (with the
# user's header), the typed date, the template's markers that close the question and open the
# answer, and the answer. `token_parts` finds the parts from where each token sits in the
# rendered text. In the tokens printed below, `Ċ` is the newline: byte-level BPE writes the
# newline byte as `Ċ`, as it writes the space as `Ġ` (chapter 11). Fig. 15.1, after them, draws
# the newline as ⏎ and the space as ␣:


# %%
def token_parts(text, typed):
    """The token ids of the rendered ``text`` and the part each is in."""
    enc = tok(text, return_offsets_mapping=True)
    user_at = text.index("<|im_start|>user")
    d0 = text.index(typed, user_at)
    d1 = d0 + len(typed)
    head = "<|im_start|>assistant\n"
    a0 = text.index(head, d1) + len(head)
    parts = []
    for start, end in enc["offset_mapping"]:
        if end <= user_at:
            parts.append("system message")
        elif end <= d0:
            parts.append("instruction")
        elif start < d1:
            parts.append("typed date")
        elif start < a0:
            parts.append("markers")
        else:
            parts.append("answer")
    return enc["input_ids"], parts


ex = chat_example(tok, PROMPT.format(first.source), first.target)
text = tok.apply_chat_template(full, tokenize=False)
ids, parts = token_parts(text, first.source)
pieces = tok.convert_ids_to_tokens(ex["input_ids"])
n_loss = sum(label != IGNORE for label in ex["labels"])
print(f"{len(pieces)} tokens, {n_loss} of them carry loss:")
for part, n in Counter(parts).items():
    print(f"  {part:15} {n:3}")
fixed = sum(p not in ("typed date", "answer") for p in parts)
print(f"system message, instruction, markers: {fixed} of {len(pieces)}")
n_instr = Counter()
for e in splits.train:
    text_e = chat_prompt(PROMPT.format(e.source))
    n_instr[token_parts(text_e, e.source)[1].count("instruction")] += 1
print("instruction tokens over the 128 training examples:")
for n, k in sorted(n_instr.items()):
    print(f"  {n} tokens in {k} examples")
last = range(len(pieces) - 14, len(pieces))
Table(
    ["position", "token", "label"],
    [(i, repr(pieces[i]), ex["labels"][i]) for i in last],
)

# %% tags=["remove-cell"]
assert [p == "answer" for p in parts] == [x != IGNORE for x in ex["labels"]]

# %% tags=["hide-input"] caption="The training example above as the model reads it, token by token, in reading order, coloured by the five parts counted above (⟨s⟩ and ⟨e⟩ stand for <|im_start|> and <|im_end|>, ␣ for a space, ⏎ for a newline). Only the tokens with a heavy black border carry loss: the answer's ten characters, the end of the assistant's turn and the newline after it. Everything before them has the label -100." alt="A grid of boxes, five per row, one per token of the chat-formatted example, each holding the token's text. The first rows are grey (the system message), then blue (the instruction), green (the typed date), purple (the markers that close the user's turn and open the assistant's), and orange (the answer). Only the last twelve boxes, the digits and dashes of 2033-09-01, the end-of-turn marker and the newline, have a heavy black border."
short = {"<|im_start|>": "⟨s⟩", "<|im_end|>": "⟨e⟩"}
colour_of = {
    "system message": "0.85",
    "instruction": "#a6cee3",
    "typed date": "#b2df8a",
    "markers": "#cab2d6",
    "answer": "#fdbf6f",
}
per_row = 5
rows = math.ceil(len(pieces) / per_row)
fig, ax = plt.subplots(figsize=(5.2, 0.42 * rows + 0.9))
for i, (piece, part, label) in enumerate(zip(pieces, parts, ex["labels"])):
    r, c = divmod(i, per_row)
    loss_here = label != IGNORE
    ax.add_patch(
        plt.Rectangle(
            (c + 0.03, -r + 0.05),
            0.94,
            0.8,
            facecolor=colour_of[part],
            edgecolor="black" if loss_here else "none",
            linewidth=2.2 if loss_here else 0,
        )
    )
    shown = short.get(piece, piece.replace("Ġ", "␣").replace("Ċ", "⏎"))
    size = 12 if len(shown) <= 5 else 11 if len(shown) <= 7 else 9
    ax.text(c + 0.5, -r + 0.45, shown, ha="center", va="center", fontsize=size)
handles = [
    plt.Rectangle((0, 0), 1, 1, facecolor=c, label=p)
    for p, c in colour_of.items()
]
handles.append(
    plt.Rectangle(
        (0, 0),
        1,
        1,
        facecolor="white",
        edgecolor="black",
        linewidth=2.2,
        label="carries loss",
    )
)
ax.legend(
    handles=handles,
    loc="upper center",
    bbox_to_anchor=(0.5, 0.0),
    ncol=3,
    fontsize=10,
    frameon=False,
    handlelength=1.2,
    columnspacing=1.0,
)
ax.set_xlim(0, per_row)
ax.set_ylim(-rows + 0.9, 0.95)
ax.axis("off")
plt.show()

# %% [markdown]
# The system message and the markers are the same in every example. The instruction part (our
# fixed sentence plus the user's header) has 25 or 26 tokens: when the typed date starts with a digit, the space
# before it is a token of its own (the tokenizer splits numbers into single digits), and
# `token_parts` counts that space with the instruction. In the example above these three parts
# are 52 of the 73 tokens.
#
# Why not put the loss on the whole sequence? Loss on the answer only is the common convention,
# for two reasons. The system message, the markers and our instruction repeat in every example:
# learning to predict them teaches nothing about dates, and with the loss on every token they
# would dominate the loss, against the few tokens that matter (exercise 3 measures each part's
# loss). The typed date is the *input*: a model that learns to predict dates
# people type learns a distribution we do not care about. The convention is not settled: Shi et
# al. (2024, *Instruction Tuning With Loss Over Instructions*) found that loss on the
# instruction too can help when instructions are long compared with the answers, or when data
# are few. Both hold here: in the example above, 25 instruction tokens and 9 date tokens for 12
# answer tokens, and 128 examples in all. A run in the training section below tests the loss on
# the whole sequence.
#
# The answer's part ends with the end-of-turn token `<|im_end|>`, and it carries loss on
# purpose: it teaches the model to stop after the date. Before tuning, 3 of the 40 answers
# were one ISO date and nothing else, and 20 began with an ISO-shaped date and went on. The
# template's newline after `<|im_end|>` carries loss too; learning it does no harm, since
# generation stops at `<|im_end|>`.
#
# ## LoRA on SmolLM2
#
# Full fine-tuning changes every weight: 135 million numbers, plus a gradient and AdamW's two
# running averages for each, and a full copy of the model for every task. Chapter 13 built
# **LoRA** (low-rank adaptation, Hu et al., 2021) for a BERT classifier: each pretrained matrix
# $W$ stays frozen and a correction of low rank $r$ is learned next to it,
# $W' = W + \frac{\alpha}{r} BA$, with $B$ starting at zero so that training begins from the
# pretrained model exactly (chapter 13 draws the layer, writes it in a dozen lines as
# `TinyLoRA` and checks it against `peft`'s). The package's `LoRALinear` is that layer, with
# checks of its arguments, and $A$ and $B$ created on the device and with the dtype of the base
# weight:

# %%
show_source(LoRALinear)

# %% [markdown]
# On a language model, a further choice is which matrices get an adapter. The LoRA paper compared only the
# attention's four projections, under a fixed budget of trained parameters, and found that the
# query and value together at rank 4 did as well as or better than any single projection at
# rank 8; they tied all four at rank 2 on one task (WikiSQL) and trailed them slightly on
# another (MultiNLI). It did not try the MLP. Query and value are the paper's choice and
# `peft`'s long-standing default, and they are cheap; that is why we start with them. QLoRA
# (Dettmers et al., 2023) found that adapting all the linear layers of the block was needed to
# match full fine-tuning, and Schulman and Thinking Machines Lab (2025) found LoRA on the
# attention alone behind LoRA that includes the MLP, even when the two trained about as many
# parameters. More adapted matrices cost more parameters (exercise 2 counts them).
#
# SmolLM2 has 30 layers; each has four attention projections and three MLP matrices. We adapt
# `q_proj` and `v_proj` with $r = 8$ and $\alpha = 16 = 2r$, as chapter 13 did (`peft`'s
# defaults are $r = 8$ and $\alpha = 8$):

# %%
from peft import LoraConfig, get_peft_model

R, ALPHA, TARGETS = 8, 16, ["q_proj", "v_proj"]
layer0 = base.model.layers[0]
for name, m in layer0.named_modules():
    if isinstance(m, nn.Linear):
        shape = f"{m.out_features} x {m.in_features}"
        mark = "  <- LoRA" if name.split(".")[-1] in TARGETS else ""
        print(f"{name:18} {shape:12}{mark}")
q = layer0.self_attn.q_proj
print(
    f"q_proj: {q.weight.numel():,} weights; "
    f"rank-{R} update: {R * (q.in_features + q.out_features):,}"
)

# %% [markdown]
# Two copies of the pretrained model get the same adapters: one through `peft`
# (`get_peft_model`), one through the package's `add_lora`, which freezes the model and wraps
# every matching `nn.Linear` in a `LoRALinear`:

# %%
show_source(add_lora)

# %% [markdown]
# `lora_pair` builds both from one seed and copies `peft`'s random $A$ matrices into ours, so
# that the two start from the same point; with $B = 0$ both compute exactly what the pretrained
# model computes. The last lines count the gradients and the optimiser's state: a gradient and
# AdamW's two running averages, one float32 number each, for every trained parameter. The
# activations kept for the backward pass come on top; we measure them next.

# %%
config = LoraConfig(
    r=R, lora_alpha=ALPHA, target_modules=TARGETS, lora_dropout=0.0
)


def lora_pair(seed):
    """A peft model and a copy with `add_lora`, with the same random A's."""
    set_seed(seed)
    peft_model = get_peft_model(copy.deepcopy(base), config)
    ours = copy.deepcopy(base)
    wrapped = add_lora(ours, TARGETS, r=R, alpha=ALPHA)
    with torch.no_grad():
        for name in wrapped:
            A = peft_model.base_model.model.get_submodule(name).lora_A
            ours.get_submodule(name).A.copy_(A["default"].weight)
    return peft_model, ours, wrapped


peft_model, ours, wrapped = lora_pair(0)
n_train = count_parameters(ours)
n_all = count_parameters(ours, trainable_only=False)
n_base = n_all - n_train
print(f"{len(wrapped)} adapted matrices", end="; ")
print(f"trainable: {n_train:,} of {n_all:,} ({n_train / n_all:.2%})")
print(f"trainable in the peft model: {count_parameters(peft_model):,}")
probe = tok(chat_prompt(questions[0]), return_tensors="pt").to(device)
with torch.inference_mode():
    start = [m(**probe).logits for m in (base, ours, peft_model)]
print(
    "at the start, same logits as the pretrained model:",
    torch.equal(start[0], start[1]) and torch.equal(start[0], start[2]),
)
print("gradient + AdamW's two averages, 4 bytes each:")
print(
    f"  full fine-tuning ({n_base:,} parameters): {n_base * 12 / 1e9:.2f} GB"
)
print(f"  LoRA ({n_train:,} parameters): {n_train * 12 / 1e6:.1f} MB")

# %% [markdown]
# For this small model, full fine-tuning would keep 1.61 GB of gradients and optimiser state
# next to the weights; the LoRA adapters keep 5.5 MB.
#
# The forward pass of training also keeps, for the backward pass, the tensors each gradient
# will need, and autograd keeps only those. For a product $y = x W^\top$, the gradient of $W$
# needs the input $x$, while the gradient of $x$ needs only $W$. So a frozen matrix without an
# adapter does not keep its input; an adapted one does, since the gradient of $A$ needs it. The
# same holds for a norm: RMSNorm ends by multiplying by its scale, and keeps the normalised
# state for that product only when the scale trains. The backward pass still runs through every
# layer, and the attention, the norms and the activation functions keep what the gradient of
# their input needs. `saved_tensors_hooks` sees every tensor that the forward pass
# saves; on a batch of 8 prompts, we add up those that are not weights, each memory block once:


# %%
def saved_activations_mb(model, batch):
    """MB that the forward pass saves for the backward pass, weights
    not counted, each storage once."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(**batch)
    return sum(kept.values()) / 1e6


tok.padding_side = "left"
batch8 = tok(
    [chat_prompt(q) for q in questions[:8]], return_tensors="pt", padding=True
).to(device)
batch8["labels"] = batch8["input_ids"]
full_ft = copy.deepcopy(base).requires_grad_(True).train()
ours.train()
print(
    f"a batch of {len(batch8['input_ids'])} x {batch8['input_ids'].shape[1]}"
    " tokens; saved for the backward pass:"
)
mb_full = saved_activations_mb(full_ft, batch8)
mb_lora = saved_activations_mb(ours, batch8)
print(f"  full fine-tuning:  {mb_full:5.0f} MB")
print(
    f"  LoRA on q_proj and v_proj: {mb_lora:5.0f} MB ({mb_lora / mb_full:.0%})"
)
del full_ft

# %% [markdown]
# For this batch of 8 prompts of 65 tokens, the forward pass of full fine-tuning keeps 853 MB
# for the backward pass; with LoRA on `q_proj` and `v_proj` it keeps 647 MB, 76 % of that.
# LoRA does cut the activations, by what frozen weights no longer need (the inputs of the
# matrices without an adapter, and the normalised states kept for the norms' scales), but only
# in part, and what remains is more than a hundred times the 5.5 MB of
# the adapters' gradients and optimiser state. One of the largest tensors kept is the loss's
# own, which no choice of adapters can shrink: the log-probabilities over the 49,152-token
# vocabulary at each of the 8 × 65 positions, about 102 MB in float32.
#
# ## Training with the course's loop
#
# The settings: 16 steps of 8 examples (each training example seen once), AdamW at a learning
# rate of $2 \cdot 10^{-3}$ without weight decay, a linear warm-up over 2 steps then a linear
# decay towards 0, gradient clipping at 1 (`clip_norm=1.0` in `fit`). LoRA is usually trained
# with a larger learning rate than full fine-tuning (chapter 13 chose among 10, 30 and 100 times
# its full fine-tuning rate, after *LoRA Without Regret*).
#
# None of these settings came from a search: the rank is `peft`'s default, $\alpha$ twice its
# default scale, the targets the LoRA paper's choice; one pass over the data is the shortest run
# that uses every example; and the learning rate is a large one, as LoRA's usually is, not a
# measured best. None was tuned on a dev split either, so read the test score after tuning as
# the score of one reasonable configuration, not of the best one. From here on the run
# is watched on the dev set: after 8 steps and after 16, `fit` asks the 40 dev questions
# (`evaluate=`); the test questions wait until training is done. We also record the gradient's
# norm before clipping at each step, to see how often clipping at 1 acts.
#
# The model computes the loss itself from the `labels`, averaged over the tokens that carry
# one. `pad_batch` pads a batch's examples on the right to the longest one, with the label
# $-100$ and an attention mask of 0 on the padding:

# %%
show_source(pad_batch)

# %% [markdown]
# It masks the padding *by position*, and that matters here: SmolLM2's padding token is its
# end-of-turn token `<|im_end|>`, the token whose loss teaches the model to stop. Code that masks
# the labels wherever the input is the padding token, a common shortcut, would erase that signal
# too. Two examples of different lengths show it:

# %%
first8 = [
    chat_example(tok, PROMPT.format(e.source), e.target)
    for e in splits.train[:8]
]
shorter = min(first8, key=lambda e: len(e["input_ids"]))
longer = max(first8, key=lambda e: len(e["input_ids"]))
pair = pad_batch([shorter, longer], tok.pad_token_id)
k = len(shorter["input_ids"])
ids0, labels0 = pair["input_ids"][0], pair["labels"][0]
print(f"padding token: {tok.pad_token!r}, id {tok.pad_token_id}")
print(f"shorter example: {k} tokens, padded to {len(ids0)}")
print(f"  its last 2 tokens and the padding: {ids0[k - 2 :].tolist()}")
print(f"  their labels:                      {labels0[k - 2 :].tolist()}")
by_id = labels0.masked_fill(ids0 == tok.pad_token_id, IGNORE)
n_pos, n_id = (labels0 != IGNORE).sum(), (by_id != IGNORE).sum()
print(f"tokens with loss, masked by position: {n_pos}; by id: {n_id}")

# %% [markdown]
# The shorter example ends with `<|im_end|>` (id 2) and the newline (198), which keep their
# labels, and its five padding tokens, also id 2, get $-100$. Masked by id instead, the example
# would keep 11 of its 12 tokens with loss: the end-of-turn token would lose its label, and with
# it the signal to stop.

# %%
STEPS, BATCH, LR, WARMUP = 16, 8, 2e-3, 2  # 16 x 8 = the 128 examples
examples = [
    chat_example(tok, PROMPT.format(e.source), e.target) for e in splits.train
]


def optimizer_and_schedule(model):
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: warmup_decay(s, WARMUP, STEPS, 0.0, "linear")
    )
    return opt, sched


def step_loss(k):
    batch = pad_batch(examples[k * BATCH : (k + 1) * BATCH], tok.pad_token_id)
    return ours(**{n: t.to(device) for n, t in batch.items()}).loss


dev_questions = [PROMPT.format(e.source) for e in dev]
dev_answers = []  # the dev answers after 8 and 16 steps


def dev_exact_match():
    dev_answers.append(answer(ours, dev_questions))
    return {"dev exact match": score(dev_answers[-1], dev)[0]}


def record_grad_norms(model):
    """A list that receives, at each backward pass, the norm of the whole
    gradient of the trainable parameters, before any clipping."""
    params = [p for p in model.parameters() if p.requires_grad]
    norms, squares = [], []

    def add(p):
        squares.append(p.grad.detach().pow(2).sum().item())
        if len(squares) == len(params):  # the last gradient of this pass
            norms.append(math.sqrt(sum(squares)))
            squares.clear()

    for p in params:
        p.register_post_accumulate_grad_hook(add)
    return norms


grad_norms = record_grad_norms(ours)  # compared with another run below
opt, sched = optimizer_and_schedule(ours)
history = fit(
    ours,
    step_loss,
    STEPS,
    opt,
    sched,
    clip_norm=1.0,
    evaluate=dev_exact_match,
    eval_every=8,
    show_progress=False,
)
print(
    f"loss of the first step: {history.loss[0]:.3f}; mean of the last 4: "
    f"{sum(history.loss[-4:]) / 4:.3f}"
)
done, dev_curve = zip(*history.curve("dev exact match"))
print(f"dev exact match after {', '.join(map(str, done))} steps:", end=" ")
print(", ".join(f"{v:.1%}" for v in dev_curve))

# %% [markdown]
# The loss of the first step, 0.869, falls to a mean of 0.120 over the last four. The dev
# evaluations give the score after 8 steps, 40.0 % exact match, and after 16, 55.0 %. Both evaluations answer the same 40 questions, so we can pair them: count the questions
# that one gets right and the other wrong, each way (McNemar's test). If the model after 8 steps
# and after 16 were equally accurate on such dates, each such question would go either way with
# probability 1/2; `paired_changes` also gives the chance of a split at least as lopsided as the
# one counted.


# %%
def paired_changes(first, second, examples):
    """Questions wrong in ``first`` and right in ``second``, the reverse,
    and the two-sided chance of a split at least as lopsided if each
    way had chance 1/2."""
    pairs = [
        (a == e.target, b == e.target)
        for a, b, e in zip(first, second, examples)
    ]
    gained = sum(not a and b for a, b in pairs)
    lost = sum(a and not b for a, b in pairs)
    n = gained + lost
    tail = sum(math.comb(n, k) for k in range(min(gained, lost) + 1))
    return gained, lost, min(1.0, 2 * tail / 2**n)


gained, lost, p_value = paired_changes(dev_answers[0], dev_answers[1], dev)
print(
    f"dev questions wrong after 8 steps, right after 16: {gained}; "
    f"the reverse: {lost}; p = {p_value:.1e}"
)

# %% [markdown]
# Between step 8 and step 16, 7 dev questions went from wrong to right and 1 from right to
# wrong. The dev score rose between the two evaluations, but a split at least this lopsided
# has a chance of 7.0 × 10⁻² even if the two models were equally accurate on such dates: 40
# questions do not settle whether the second half of the run added to the score.
#
# ### Loss on the answer, or on every token?
#
# The answer-only loss was argued for above, against a finding (Shi et al., 2024) that loss on
# the instruction too can help when instructions are long compared with the answers, or when
# data are few. A second run tests the simplest alternative, the loss on the whole sequence:
# the same starting adapters, batches, learning rate, schedule and clipping, but every token of
# each example carries loss, the system message and the template's markers included (the
# padding stays masked). It is scored on the same dev dates and paired with the first run as
# above. Both runs also record the norm of their gradient before clipping, since clipping at 1
# acts only on a norm above 1.

# %%
every_token = lora_pair(0)[1]  # the same starting adapters as `ours`
all_labels = [
    {"input_ids": e["input_ids"], "labels": list(e["input_ids"])}
    for e in examples
]


def every_token_loss(k):
    chunk = all_labels[k * BATCH : (k + 1) * BATCH]
    batch = pad_batch(chunk, tok.pad_token_id)
    return every_token(**{n: t.to(device) for n, t in batch.items()}).loss


grad_norms_all = record_grad_norms(every_token)
opt_all, sched_all = optimizer_and_schedule(every_token)
fit(
    every_token,
    every_token_loss,
    STEPS,
    opt_all,
    sched_all,
    clip_norm=1.0,
    show_progress=False,
)
dev_every = answer(every_token, dev_questions)
print(f"dev exact match, loss on the answer only: {dev_curve[-1]:.1%}")
print(
    f"dev exact match, loss on every token:     {score(dev_every, dev)[0]:.1%}"
)
n_dates = sum(only_a_date(a) for a in dev_every)
print(
    "  its answers that are one ISO date and nothing else:",
    f"{n_dates} of {N_DEV}",
)
gained, lost, p_value = paired_changes(dev_every, dev_answers[-1], dev)
print(
    f"answer-only right, every-token wrong: {gained}; the reverse: {lost}; "
    f"p = {p_value:.1e}"
)
print("gradient norm before clipping:")
for name, norms in (
    ("answer only", grad_norms),
    ("every token", grad_norms_all),
):
    clipped = sum(n > 1 for n in norms)
    print(
        f"  {name}: step 1 {norms[0]:.2f}, median "
        f"{statistics.median(norms):.2f}, above 1 at {clipped}"
        f" of {len(norms)} steps"
    )

# %% [markdown]
# With the loss on every token, exact match on the dev dates is 25.0 %, against 55.0 % with the
# loss on the answer only, although 34 of its 40 answers are one ISO date and nothing else. The
# pairing is one-sided: 12 dev questions are right with the answer-only loss and wrong with the
# loss on every token, and none the other way round. If the two trained adapters were equally
# accurate on such dates, a split at least as lopsided as 12 to 0 would have a chance of
# 4.9 × 10⁻⁴. The two runs differ only in the loss, so in this pair the loss is the cause; whether
# the gap holds for other seeds, or with settings tuned for each loss, one pair cannot say. The
# comparison holds the settings chosen for the answer-only loss fixed (learning rate, $\alpha$,
# clipping); it does not tune them for each loss. The two losses also average over different
# numbers of tokens, but that alone would change little: AdamW divides each step by a running
# estimate of the gradient's size, so multiplying a loss by a roughly constant factor leaves its steps nearly
# as they were. What differs is which tokens are scored. Clipping rarely acted on either run: the
# gradient's norm was above 1, where clipping at 1 scales it down, at 2 of the 16 steps of the
# answer-only run and 3 of the every-token run (median norms 0.47 and 0.90). With those
# settings, for this task, with 128 examples and 16 steps, the loss on the whole sequence did
# clearly worse than the loss on the answer alone. Shi et al. put the loss on the instruction
# and the answer, not on the template's tokens; that middle way, which `labels` can express
# just as easily, is not tested here.
# Exercise 3 shows how the loss on every token is shared among the parts of an example.
#
# ## Training with `trl`'s `SFTTrainer`
#
# `trl` wraps the same recipe in the Hugging Face Transformers `Trainer`. Given a dataset of
# **prompt** and **completion** messages, `SFTTrainer` renders them with the tokenizer's chat
# template and, with `completion_only_loss=True`, puts the loss on the completion only: what
# `chat_example` does. We hand it the `peft` model, the same optimiser and schedule
# (`optimizers=`), the same gradient clipping at 1 (`max_grad_norm=1.0`), the same batch size
# and number of steps, the examples in the same order (`"sequential"`), 32-bit floats and no
# gradient checkpointing. The remaining settings fix the Trainer's own seed, record the loss of
# every step (`logging_steps=1`), and save and report nothing.

# %%
from datasets import Dataset
from trl import SFTConfig, SFTTrainer

records = [
    {
        "prompt": [{"role": "user", "content": PROMPT.format(e.source)}],
        "completion": [{"role": "assistant", "content": e.target}],
    }
    for e in splits.train
]
args = SFTConfig(
    output_dir=tempfile.mkdtemp(),
    per_device_train_batch_size=BATCH,
    max_steps=STEPS,
    max_grad_norm=1.0,
    completion_only_loss=True,
    train_sampling_strategy="sequential",
    seed=0,
    bf16=False,
    gradient_checkpointing=False,
    logging_steps=1,
    save_strategy="no",
    report_to="none",
)
trainer = SFTTrainer(
    model=peft_model,
    args=args,
    train_dataset=Dataset.from_list(records),
    processing_class=tok,
    optimizers=optimizer_and_schedule(peft_model),
)
same = all(
    row["input_ids"] == e["input_ids"] and row["labels"] == e["labels"]
    for row, e in zip(trainer.train_dataset, examples, strict=True)
)
print("SFTTrainer's tokens and labels for the 128 examples are ours:", same)

# %% tags=["remove-cell"]
from transformers import PrinterCallback, ProgressCallback

trainer.remove_callback(PrinterCallback)
trainer.remove_callback(ProgressCallback)

# %%
trainer.train()
logged = [r for r in trainer.state.log_history if "loss" in r]
sft_loss = [r["loss"] for r in logged]
print(
    textwrap.fill("logged at each step: " + ", ".join(sorted(logged[0])), 80)
)

# %% [markdown]
# `SFTTrainer` does more at each step than `fit`: besides the loss, it computes and logs the
# statistics listed, such as the entropy of the model's predictions and the share of the
# answer's tokens it predicts right (`mean_token_accuracy`).
#
# Both runs saw the same batches in the same order, from the same starting adapters, with the
# same optimiser and schedule, so their losses should agree step by step, up to float32
# rounding:

# %%
rows = [(k + 1, history.loss[k], sft_loss[k]) for k in range(STEPS)]
display(
    Table(
        ["step", "fit", "SFTTrainer"],
        rows,
        formats=dict.fromkeys(["fit", "SFTTrainer"], ".3f"),
    )
)
gaps = [abs(a - b) for a, b in zip(history.loss, sft_loss)]
print(f"difference at step 1, before any update: {gaps[0]:.1e}")
print(f"largest of the 16 differences: {max(gaps):.1e}")
TWO_DIGIT_YEAR = {
    f
    for f in FORMATS
    if "1999" not in render_date(dt.date(1999, 1, 2), f).source
}
NO_CENTURY = TWO_DIGIT_YEAR - {"weekday_short"}  # a weekday settles it
for k in (12, 13, 14):
    batch_formats = [
        e.format for e in splits.train[k * BATCH : (k + 1) * BATCH]
    ]
    n_iso = batch_formats.count("iso")
    n_yy = sum(f in NO_CENTURY for f in batch_formats)
    print(
        f"batch of step {k + 1}: {n_iso} already in ISO form, "
        f"{n_yy} with a two-digit year and no weekday"
    )

# %% [markdown]
# The two losses agree to the three printed decimals at every step. They go up as well as
# down: from 0.090 at step 13 to 0.236 at step 14, then 0.094 at step 15. Each batch is new to
# the model, since every example is seen once, so the loss of a step is measured on eight
# examples it has not been trained on yet, and it varies from batch to batch. Which examples
# make a batch hard, one loss per batch cannot say. The formats may explain part of the rise
# at step 14: its batch holds no date already in ISO form, which the model only has to copy,
# and 3 with a two-digit year and no weekday, whose century the question leaves unsaid; the
# batches of steps 13 and 15 hold 2 dates in ISO form each, and 1 and 2 such years.

# %% tags=["hide-input"] caption="Top: training loss per step (answer tokens only) of the two runs, the course's fit loop (wide hollow blue circles) and trl's SFTTrainer (small orange squares, dashed), drawn on top of each other: the orange line runs through every blue circle; start at 0.87, fall to 0.12 by step 7 and end at 0.06. Bottom: the absolute difference between the two losses at each step, on a logarithmic scale; the largest is the one printed above." alt="Two stacked plots sharing a step axis from 1 to 16. Top: two loss curves that coincide, a thick pale blue line with hollow circles under a thin dashed orange one with small squares, starting near 0.87, falling to about 0.35 by step 4 and about 0.12 at step 7, then wandering down to 0.06 at step 16 with a spike to about 0.24 at step 14. Bottom: one point per step on a log scale, scattered between about 2e-7 and 2e-5."
steps_axis = range(1, STEPS + 1)
fig, (top, bottom) = plt.subplots(2, 1, figsize=(5.2, 4.6), sharex=True)
top.plot(
    steps_axis,
    history.loss,
    "o-",
    ms=10,
    mfc="none",
    mew=1.8,
    lw=3,
    alpha=0.6,
    label="fit (the course's loop)",
)
top.plot(steps_axis, sft_loss, "s--", ms=4, label="trl SFTTrainer")
top.set_ylabel("loss on the answer")
top.legend()
bottom.semilogy(steps_axis, gaps, "o-", color="0.3")
bottom.set_ylabel("|difference|")
bottom.set_xlabel("step")
plt.show()

# %% [markdown]
# In the bottom panel of Fig. 15.2, the gap between the two runs stays between about 2 × 10⁻⁷ and
# 2 × 10⁻⁵ and does not grow with training. It is about 1 × 10⁻⁵ already at step 1, before any update, when both
# models are the pretrained model itself ($B = 0$) reading the same tokens. The two compute the
# loss by different routes: `fit` takes the model's own cross-entropy, while `SFTTrainer` (in the
# `trl` 1.16 installed here) asks the model for the log-probabilities of the answer tokens
# through `trl`'s fused output head and averages them itself. The two routes round differently
# in float32, and that, not the training, sets the size of the gap.
#
# ## After tuning
#
# The 40 test questions, asked once, to both tuned models:

# %%
after_ours = answer(ours, questions)
after_peft = answer(peft_model, questions)
em_ours, starts_ours = score(after_ours, splits.test)
em_peft, starts_peft = score(after_peft, splits.test)
print(f"exact match before tuning: {em_before:.1%}")
print(f"few-shot, untuned:         {em_hinted:.1%}")
print(f"after, LoRALinear + fit:   {em_ours:.1%}")
print(f"after, peft + SFTTrainer:  {em_peft:.1%}")
print("the two tuned models give the same answers:", after_ours == after_peft)
n_dates = sum(only_a_date(a) for a in after_peft)
print(f"answers that are one ISO date and nothing else: {n_dates} of {N_TEST}")
show(after_peft, splits.test, n=8)

# %% tags=["remove-cell"]
# a gain this large is what the text claims for this run
assert em_ours > em_before + 0.2 and em_peft > em_before + 0.2

# %% [markdown]
# From 2.5 % (25.0 % with the few-shot prompt) to 60 % after 128 examples seen once, in this
# run; the two ways of training give the same answers, and all 40 answers are now a date and
# nothing else. Whether a second pass over the 128 examples would lift it further, this run
# does not say.
#
# The mistakes that remain, with the fields they get wrong (`wrong_fields`, chapter 09). Some of
# them only break conventions that the question never states: the answer is the right date
# read with the other century for a two-digit year (where no weekday settles it), with month
# and day swapped, or both. `convention` finds those:


# %%
SLASH_OR_DOT = {"us_slash", "us_slash_short", "eu_dot", "eu_dot_short"}


def convention(a, e):
    """Is ``a`` the date of ``e`` read with the other century of a
    two-digit year without a weekday, with month and day swapped in a
    numeric date, or both?"""
    d = e.date
    years = {d.year}
    if e.format in NO_CENTURY:
        years.add(d.year + (100 if d.year < 2000 else -100))
    others = set()
    for y in years:
        others.add(f"{y:04d}-{d.month:02d}-{d.day:02d}")
        if e.format in SLASH_OR_DOT and d.day <= 12:
            others.add(f"{y:04d}-{d.day:02d}-{d.month:02d}")
    return a in others - {e.target}


print("formats with a two-digit year:")
print("  " + ", ".join(sorted(TWO_DIGIT_YEAR)))
wrong = [(a, e) for a, e in zip(after_peft, splits.test) if a != e.target]
rows = [
    (
        e.source,
        e.target,
        repr(a),
        ", ".join(wrong_fields(a, e.target)),
        "convention" if convention(a, e) else "",
    )
    for a, e in wrong
]
display(Table(["question", "right", "answer", "wrong fields", "kind"], rows))
counts = Counter(f for a, e in wrong for f in wrong_fields(a, e.target))
n_conv = sum(convention(a, e) for a, e in wrong)
print(f"{len(wrong)} mistakes; wrong fields:", dict(counts))
print(f"{n_conv} of them break a convention, {len(wrong) - n_conv} misread")
for a, e in wrong:  # a weekday question answered with another year
    if (
        e.format == "weekday_short"
        and only_a_date(a)
        and a[:4] != e.target[:4]
    ):
        said, answered = e.date, dt.date.fromisoformat(a)
        print(
            f"{e.source!r}: {said:%d %b %Y} is a {said:%A}, "
            f"{answered:%d %b %Y} a {answered:%A}"
        )

# %% [markdown]
# The year is the field most often wrong (11 of the 16 mistakes), then the month (7) and the
# day (5). Four mistakes break only conventions the question never states: the century of a
# two-digit year (`'1/16/46'` read as 1946, `'21.3.86'` as 2086), the order of a numeric date
# (`'02/07/2026'` read as 2 July, the European reading of the slash), or both (`'7/4/65'` read
# as 7 April 2065). Only the training examples show these conventions, and 16 steps have not
# taught them all. The other 12 misread a field outright, such as `'18 June 2046'` answered
# with 1946 although the year is written in full. `"Tue, Oct 10, '34"` answered with 1934 is
# one of them: as the last line shows, 10 October 1934 was a Wednesday, so the weekday settles
# the century, and the model does not use it. (Chapter 09's model, trained from scratch on
# 51,200 examples with its own prompt, got 99.8 % of its 1,000 held-out dates: a different
# data set, test set and prompt, so the two numbers are not a comparison.) A 16-step adapter
# has learned the form of the answer and much of the mapping, not all of it.

# %% [markdown]
# ### The adapter on and off
#
# The `peft` model keeps the pretrained weights untouched; `disable_adapter()` switches the
# update off, and the pretrained model is back. Two held-out questions, one the tuned model now
# answers right and one it still gets wrong:

# %%
pairs = list(enumerate(zip(before, after_peft, splits.test)))
now_right = next(  # the first one that is not already written in ISO form
    i
    for i, (a, b, e) in pairs
    if a != e.target and b == e.target and e.format != "iso"
)
still_wrong = next(i for i, (a, b, e) in pairs if b != e.target)
for i in (now_right, still_wrong):
    q0, e0 = questions[i], splits.test[i]
    with peft_model.disable_adapter():
        off = answer(peft_model, [q0])[0]
    on = answer(peft_model, [q0])[0]
    print(f"question: {e0.source!r} (answer {e0.target})")
    print(f"  adapter off: {off!r}")
    print(f"  adapter on:  {on!r}")
print("wrong fields with the adapter on:", wrong_fields(on, e0.target))

# %% [markdown]
# On the first question, a compact date, the untuned model answers in ISO form but with the
# wrong month (01 for 11); with the adapter the answer is right. On the second it answers with neither the right date nor the ISO form; the adapter gives the
# ISO form, with the wrong year and month (the last printed line, which is about this second
# question; it is the first mistake listed above).
#
# ### Saving the adapter
#
# As for chapter 13's classifier, only the adapter needs saving: the pretrained model is the
# same for every task.

# %%
adapter_dir = Path(tempfile.mkdtemp())
peft_model.save_pretrained(adapter_dir)
adapter_file = adapter_dir / "adapter_model.safetensors"
adapter_mb = adapter_file.stat().st_size / 1e6
model_mb = n_base * 4 / 1e6
print(f"adapter: {adapter_mb:.1f} MB; the model in float32: {model_mb:.0f} MB")
print(f"{model_mb / adapter_mb:.0f} times smaller")

# %% [markdown]
# To use it, load the pretrained model and put the saved adapter on it with
# `PeftModel.from_pretrained`; it must give the same answers to the 40 held-out questions:

# %%
from peft import PeftModel

reloaded = PeftModel.from_pretrained(copy.deepcopy(base), adapter_dir)
after_reload = answer(reloaded, questions)
print("same 40 answers as before saving:", after_reload == after_peft)

# %% [markdown]
# ### Merging: $W + \frac{\alpha}{r} B A$ as one matrix
#
# For serving, the update can be added into the weights once, `merge_and_unload()`, as chapter 13
# did for the classifier: the model is
# then an ordinary `LlamaForCausalLM` again, with no extra matrix products, and it must compute
# the same logits as the model with the adapter, up to float32 rounding (as in chapter 13: the
# merged weight is itself rounded, and the sums run in another order). `merge_and_unload` changes the
# weights of the model it is called on, so we merge the reloaded copy, and take its logits with
# the adapter on and off before merging; `peft_model` keeps its adapter switchable.

# %%
with torch.inference_mode():
    with_adapter = reloaded(**probe).logits
    with reloaded.disable_adapter():
        without_adapter = reloaded(**probe).logits
merged = reloaded.merge_and_unload()
with torch.inference_mode():
    from_merged = merged(**probe).logits
print(type(merged).__name__)
moved = (with_adapter - without_adapter).abs().max().item()
diff = (with_adapter - from_merged).abs().max().item()
print(f"largest logit change, adapter on vs off:     {moved:.2f}")
print(f"largest logit difference, merged vs adapter: {diff:.1e}")

# %% [markdown]
# The adapter moves the logits by up to 17.17; the merged model's logits differ from the
# adapter's by at most 7.4 × 10⁻⁵, the float32 rounding of summing the products in another order.
#
# ## What the tuning cost: forgetting
#
# A model tuned on one narrow task can get worse at everything else. Two checks. The perplexity
# (chapter 11) on text unrelated to dates, the first 2,048 tokens of Python's documentation cut
# into 4 windows, with the adapter off and on. Perplexity on raw text measures how well the
# model still predicts ordinary text; it says nothing directly about the chat behaviour that
# narrow tuning can damage, so the second check asks 12 varied questions before and after.

# %%
from transformer_course.tasks.python_docs import load_python_docs

doc_ids = tok(load_python_docs()[:20_000])["input_ids"][:2048]
windows = torch.tensor(doc_ids).view(4, 512).to(device)


@torch.inference_mode()
def perplexity(model):
    model.eval()
    return math.exp(model(input_ids=windows, labels=windows).loss.item())


with peft_model.disable_adapter():
    ppl_before = perplexity(peft_model)
ppl_after = perplexity(peft_model)
print(f"perplexity on Python's docs: {ppl_before:.2f} before", end=", ")
print(f"{ppl_after:.2f} after ({ppl_after / ppl_before - 1:+.1%})")

# %%
general = {  # question: words that a right answer contains
    "What is the capital of France?": ["paris"],
    "How many legs does a spider have?": ["8", "eight"],
    "Name a primary colour.": ["red", "blue", "yellow"],
    "What is 12 plus 7?": ["19", "nineteen"],
    "Translate 'thank you' into French.": ["merci"],
    "What gas do plants take in from the air?": ["carbon dioxide", "co2"],
    "Who wrote Romeo and Juliet?": ["shakespeare"],
    "What is the opposite of 'cold'?": ["hot", "warm"],
    "How many days are there in a week?": ["7", "seven"],
    "At what temperature in Celsius does water boil?": ["100"],
    "Which planet is known as the Red Planet?": ["mars"],
    "What is the largest ocean on Earth?": ["pacific"],
}
with peft_model.disable_adapter():
    general_before = answer(peft_model, list(general), max_new_tokens=20)
general_after = answer(peft_model, list(general), max_new_tokens=20)


def right(a, words):
    return any(w in a.lower() for w in words)


rows, changed = [], []
for (q, words), a, b in zip(general.items(), general_before, general_after):
    marks = ["✓" if right(x, words) else "✗" for x in (a, b)]
    rows.append((q, *marks))
    if marks[0] != marks[1]:
        changed.append(q)
display(Table(["question", "before", "after"], rows))
for name, answers in (("before", general_before), ("after", general_after)):
    n = sum(right(a, w) for a, w in zip(answers, general.values()))
    print(f"right {name}: {n} of {len(general)}", end="; ")
same = sum(a == b for a, b in zip(general_before, general_after))
print(f"word for word the same: {same}")
rows = []
for q in ["What is the capital of France?", *changed]:
    i = list(general).index(q)
    rows += [(q, "before", general_before[i]), ("", "after", general_after[i])]
Table(["question", "tuning", "answer"], rows)

# %% [markdown]
# Perplexity on the Python documentation rose by 0.5 %, from 15.19 to 15.27. On the 12
# general questions, by a crude check (does the answer contain a right word?), the tuned model
# got 7 right against 8 before: one gained (the spider's legs), two lost (the boiling point of
# water and the Red Planet). The gain says little: the untuned spider answer stops at the
# 20-token limit before it reaches a number, where the tuned one answers first. The two losses
# are real mistakes, not a paraphrase or an answer cut short: water now boils at "1.83
# Celsius", and the Red Planet is tied to an acronym. Only 3 answers stayed word for word the same. Twelve questions cannot
# measure a change of one or two answers; they do show that tuning on dates alone changed how
# the model answers questions that have nothing to do with dates.
#
# ## How far to trust these numbers
#
# Forty held-out questions are few: one answer more or less moves exact match by 2.5 points.
# The textbook interval, the measured rate plus or minus $1.96\sqrt{p(1-p)/n}$, fails at rates
# near 0 or 1: for the untuned model it reaches below 0 (first line below). The Wilson interval
# stays inside $[0, 1]$, and says which true rates are compatible with what we counted, at 95 %:


# %%
half = 1.96 * math.sqrt(em_before * (1 - em_before) / N_TEST)
print(
    f"before, textbook interval: {em_before:.1%} ± {half:.1%}, "
    f"from {em_before - half:.1%} to {em_before + half:.1%}"
)


def wilson(p, n, z=1.96):
    """95 % Wilson score interval of a proportion ``p`` measured on ``n``."""
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    return centre - half, centre + half


rows = [
    (name, p, *wilson(p, N_TEST))
    for name, p in (
        ("before", em_before),
        ("few-shot", em_hinted),
        ("after", em_peft),
    )
]
Table(
    ["model", "exact match", "95 % interval from", "to"],
    rows,
    formats=dict.fromkeys(["exact match", "95 % interval from", "to"], ".1%"),
)

# %% [markdown]
# The intervals of the untuned model, with either prompt, lie below the interval of the tuned
# one, so the gain is larger than the noise of 40 questions, for this run; but the exact match
# after tuning is only known to within about 15 points either way. The three scores are counted
# on the same 40 questions, so pairing them, as for the two loss choices, is sharper than
# comparing intervals:

# %%
rows = [
    (name, *paired_changes(earlier, after_peft, splits.test))
    for name, earlier in (("before", before), ("few-shot", hinted))
]
Table(
    ["against", "wrong → right", "right → wrong", "p"],
    rows,
    formats={"p": ".1e"},
)

# %% [markdown]
# Paired, the gain is one-sided: 23 test questions that the untuned model got wrong are right
# after tuning, and none went the other way; against the few-shot prompt, 15 became right and 1
# became wrong. If tuning had only moved answers at random, each split would be very unlikely
# (p = 2.4 × 10⁻⁷ and 5.2 × 10⁻⁴).
#
# The run is also one seed: another seed gives other starting adapters, and how far that moves
# the result after only 16 steps, one run cannot say. A claim such as "LoRA with rank 8 reaches
# X %" should rest on the mean and spread over several seeds; exercise 4 sets that study up for
# you to run.
#
# ## Summary
#
# * A pretrained chat model is tuned on data rendered with **its own chat template**; the loss
#   falls on the **answer's tokens only** (labels $-100$ elsewhere), the end-of-turn token and
#   the template's newline after it included, so the model learns to answer and to stop. The
#   padding is masked by position, since SmolLM2's padding token is that end-of-turn token.
#   With the loss on every token instead (the system message and the template's markers
#   included), and the settings chosen for the answer-only loss kept rather than tuned for it,
#   the same run got 25.0 % of the dev dates right instead of 55.0 % (12 questions lost, none
#   gained). The middle way of Shi et al., the loss on the instruction and the answer, was not
#   tested.
# * **LoRA** freezes $W$ and learns $\frac{\alpha}{r} B A$ of rank $r$, with $B = 0$ at the
#   start (chapter 13). On SmolLM2's query and value projections it trained 0.34 % of the
#   parameters, kept 5.5 MB of gradients and optimiser state instead of 1.61 GB, and was saved
#   in a file of about 1.9 MB. The activations kept for the backward pass fell only to 76 % of
#   full fine-tuning's, 647 MB against 853 MB on a batch of 8 prompts.
# * The course's `fit` with `LoRALinear` and `trl`'s `SFTTrainer` with `peft` run the same
#   training up to float32 rounding: the same tokens and labels for all 128 examples, and
#   losses that differ by at most $1.9 \times 10^{-5}$ over the 16 steps, a gap already there at
#   step 1, before any update.
# * The settings are defaults and rules of thumb, not the result of a search; training was
#   watched on 40 dev dates, and the 40 test dates were scored once after it. Exact match on the test dates went
#   from 2.5 % (25.0 % with a few-shot prompt that states the conventions) to 60 % in one run
#   (95 % interval about 45 % to 74 %; 23 questions gained and none lost against the untuned
#   model); 4 of the 16 remaining mistakes only break conventions the question never states. The
#   adapter switches on and off, reloads from its file with the same answers, and merges into
#   the weights, with logits that differ from the adapter's by at most 7.4 × 10⁻⁵.
# * The price was measured, not assumed, if on a small scale: perplexity on unrelated text rose
#   by 0.5 %; of 12 general questions the tuned model answered 7 right against 8 before, and
#   only 3 answers stayed word for word the same.
#
# ## Exercises
#
# **1. Rank 1 or rank 16?** Before running anything, predict: how many parameters would a rank-1
# and a rank-16 adapter on `q_proj` and `v_proj` train? And how many directions does the trained
# rank-8 update really use: look at the singular values of $\frac{\alpha}{r} B A$ in each of the
# adapted matrices, and at the share of the update's energy (the sum of squared singular values)
# in the largest one.

# %% tags=["solution"]
for r in (1, 8, 16):
    n = sum(
        r * (m.base.in_features + m.base.out_features)
        for m in ours.modules()
        if isinstance(m, LoRALinear)
    )
    print(f"rank {r:2}: {n:8,} trainable parameters")
shares = []
with torch.no_grad():
    for name in wrapped:
        m = ours.get_submodule(name)
        sv = torch.linalg.svdvals(m.scale * m.B @ m.A)  # all but R are 0
        shares.append((sv[0] ** 2 / (sv**2).sum()).item())
shares.sort()
print(f"share of the largest direction, over the {len(shares)} matrices:")
print(
    f"  smallest {shares[0]:.0%}, median {shares[len(shares) // 2]:.0%}, "
    f"largest {shares[-1]:.0%}"
)

# %% [markdown] tags=["solution"]
# The count grows linearly with the rank: each rank adds one row to $A$ and one column to $B$
# in each of the 60 matrices. The trained rank-8 updates do not use their eight directions
# evenly: the largest one holds from 34 % to 95 % of a matrix's update, 67 % in the median
# matrix. Whether rank 1 would be enough, these numbers do not say: train it (change `R` above
# and run the training cells again) and compare exact match; with 40 questions and one seed,
# differences of a few points are noise.

# %% [markdown]
# **2. Adapting every linear layer.** Predict by how much the trainable parameters and the time of
# one training step (forward, backward and the optimiser's update) grow when all seven matrices of
# each layer (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj`) are
# adapted instead of `q_proj` and `v_proj`. Then measure both.


# %% tags=["solution", "nbval-ignore-output"]
def step_seconds(targets, repeats=2):
    """Trainable parameters and the fastest of ``repeats`` training steps."""
    model = copy.deepcopy(base)
    add_lora(model, targets, r=R, alpha=ALPHA)
    opt = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=LR
    )
    batch = pad_batch(examples[:BATCH], tok.pad_token_id)
    batch = {n: t.to(device) for n, t in batch.items()}
    times = []
    for _ in range(1 + repeats):  # the first step only warms up
        t0 = time.perf_counter()
        model(**batch).loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    return count_parameters(model), min(times[1:])


def frozen_seconds(repeats=2):
    """The fastest forward and backward pass through the frozen model
    alone: no adapters, the gradient taken for the input embeddings."""
    model = copy.deepcopy(base).requires_grad_(False)
    batch = pad_batch(examples[:BATCH], tok.pad_token_id)
    batch = {n: t.to(device) for n, t in batch.items()}
    ids = batch.pop("input_ids")
    times = []
    for _ in range(1 + repeats):
        t0 = time.perf_counter()
        embeds = model.get_input_embeddings()(ids).requires_grad_()
        model(inputs_embeds=embeds, **batch).loss.backward()
        times.append(time.perf_counter() - t0)
    return min(times[1:])


every = ["q_proj", "k_proj", "v_proj", "o_proj"]
every += ["gate_proj", "up_proj", "down_proj"]  # the MLP's three
found = {}
for targets in (TARGETS, every):
    n, seconds = step_seconds(targets)
    found[len(targets)] = n, seconds
    print(f"{', '.join(targets)}:")
    print(f"  {n:,} trainable parameters, {seconds:.2f} s a step")
(n2, s2), (n7, s7) = found[2], found[7]
s0 = frozen_seconds()
print(f"parameters x{n7 / n2:.1f}, time of a step x{s7 / s2:.2f}")
print(
    f"the frozen model's forward and backward: {s0 / s2:.0%} of the q, v step"
)
mlp = every[4:]
per_matrix = {
    name.split(".")[-1]: R * (m.in_features + m.out_features)
    for name, m in layer0.named_modules()
    if isinstance(m, nn.Linear)
}
mlp_share = sum(per_matrix[t] for t in mlp) / sum(per_matrix[t] for t in every)
print(f"the MLP's three matrices: {mlp_share:.0%} of the adapters' parameters")
assert mlp_share > 0.5, "the MLP's matrices hold most of the parameters"

# %% [markdown] tags=["solution"]
# All seven matrices train 5.3 times as many parameters: the MLP's matrices are wide
# (1536 × 576 and back), and its three hold 62 % of the adapters' parameters. The time of a
# step hardly changes: compare the two printed ratios (each time is the fastest of two timed
# steps after one warm-up step, on the same batch of 8). The line on the frozen
# model shows why: the forward and backward pass through the frozen model alone, which is the
# same whichever matrices are adapted, takes most of the time of the q, v step. Whether the extra adapters would raise the exact match
# on dates, these counts do not say: train it to find out.

# %% [markdown]
# **3. Which part of an example is hard to predict?** If the loss fell on every token, which part
# of a training example would the untuned model find hardest to predict (the highest mean loss
# per token): the system message, the instruction, the typed date, the markers or the answer?
# Predict, then measure it on the first 8 training examples with `token_parts`, and say what
# putting the loss on every token would do to the gradient.

# %% tags=["solution"]
loss_of = {}
with torch.inference_mode():
    for e in splits.train[:BATCH]:
        user = [{"role": "user", "content": PROMPT.format(e.source)}]
        full = [*user, {"role": "assistant", "content": e.target}]
        ids, parts = token_parts(
            tok.apply_chat_template(full, tokenize=False), e.source
        )
        ids = torch.tensor([ids], device=device)
        logits = base(input_ids=ids).logits[0, :-1]
        losses = nn.functional.cross_entropy(
            logits, ids[0, 1:], reduction="none"
        )
        for part, loss in zip(parts[1:], losses.tolist()):
            loss_of.setdefault(part, []).append(loss)
n_all_tokens = sum(len(v) for v in loss_of.values())
total_loss = sum(sum(v) for v in loss_of.values())
Table(
    ["part", "tokens", "share", "mean loss", "share of the loss"],
    [
        (
            part,
            len(v),
            len(v) / n_all_tokens,
            sum(v) / len(v),
            sum(v) / total_loss,
        )
        for part, v in loss_of.items()
    ],
    formats={"share": ".0%", "mean loss": ".2f", "share of the loss": ".0%"},
)

# %% [markdown] tags=["solution"]
# Before tuning, the system message is by far the hardest part to predict (7.07 per token), then
# the instruction (2.98) and the typed date (2.23); the markers (1.03) and the answer (0.87) are
# the easiest. With the loss on every token, the mean would be taken over all of them, of which
# the answer's are only 16 %, and the parts with the highest loss would dominate it and its
# gradient: the system message would carry 55 % of the summed loss and our fixed instruction
# 30 %, the typed date 9 % and the answer 4 %. The system message and the instruction, the
# same in every example, would get most of the loss, and likely most of the first updates'
# gradient. What that did to the exact match on the dev dates, the every-token run of the
# training section measured.

# %% [markdown]
# **4. Several seeds.** One run cannot say how much of the 60 % is luck. Write a function that
# does the whole run for one seed (adapters, 16 steps with `fit`, exact match on the 40
# questions), run it for seeds 0, 1 and 2, and report the mean and the spread.


# %% tags=["solution"]
def run_seed(seed):
    """Exact match of a fresh rank-8 adapter trained with `fit`."""
    model = lora_pair(seed)[1]  # the A's drawn as in the run above
    opt, sched = optimizer_and_schedule(model)

    def loss_of_step(k):
        chunk = examples[k * BATCH : (k + 1) * BATCH]
        batch = pad_batch(chunk, tok.pad_token_id)
        return model(**{n: t.to(device) for n, t in batch.items()}).loss

    fit(model, loss_of_step, STEPS, opt, sched, show_progress=False)
    return score(answer(model, questions), splits.test)[0]


def spread_over_seeds(seeds=(0, 1, 2)):
    """Mean, smallest and largest exact match over ``seeds``."""
    results = [run_seed(s) for s in seeds]
    mean = sum(results) / len(results)
    print(f"mean {mean:.1%}, from {min(results):.1%} to {max(results):.1%}")


# %% [markdown] tags=["solution"]
# To run the study, call `spread_over_seeds()`: it trains three times, each as long as the run
# above, and prints the mean, the smallest and the largest exact match on the test dates (it
# takes about three times as long as the run above). `run_seed` draws the $A$ matrices with `lora_pair`, as the run
# above did, so seed 0 starts from the same adapters as that run and trains on the same batches
# in the same order: it should give that run's 60 % again. The seed changes only the random $A$
# matrices; the data and their order stay the same here, so the spread measures the
# initialisation alone. Scoring each run on the test set does not break the rule of using it
# once for a choice: nothing is chosen on it here, the runs are only measured. To vary the data
# as well, pass the seed to `make_splits`; but that draws new test and dev dates too, so the
# untuned and few-shot scores must be measured again on them before any comparison. A hypothesis
# to test, not a result: seeds 1 and 2 land within a few questions of seed 0, well above the
# few-shot score, since every run starts from the same pretrained model with $B = 0$ and sees the
# same 128 examples. Report the mean and the smallest and largest values, not the best run.
