"""Train the course GPT on Shakespeare's plays (or Python's reference
documentation) and save a checkpoint (chapter 10).

Random windows of the text (``get_batch``), the loss on windows spread over a
text (``evaluate``), the training run (``train``, on ``training.fit``) and the
checkpoint files (``save_checkpoint``, ``load_checkpoint``).  Chapter 10 calls
``train`` for a short run inside the notebook.  Run as a script it trains the
longer checkpoint that the chapter's generation part loads::

    python -m transformer_course.train_gpt --help
    python -m transformer_course.train_gpt --steps 5000 \\
        --out lessons_src/transformer_course/checkpoints/gpt_shakespeare

On several processes, PyTorch's launcher runs the same script, each process
with a replica of the model (``DistributedDataParallel``; gloo on CPUs, nccl
on GPUs) and the same global batch split between them::

    torchrun --nproc_per_node=2 -m transformer_course.train_gpt --steps 5000

It uses the GPU when there is one (``--device`` overrides) and writes
``<out>.safetensors`` and ``<out>.json``: the model's config, its alphabet, and
a record of the run (validation loss in nats per character on the whole
validation text, training seconds, steps, device).
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .gpt import GPT, GPTConfig, lm_loss
from .tasks.python_docs import (
    CHARS,
    corpus_fingerprint,
    load_python_docs,
    train_val_split,
)
from .tasks.shakespeare import load_shakespeare, split_plays
from .tokenization import CharTokenizer
from .training import History, fit, param_groups, warmup_decay
from .utils import count_parameters, get_device, set_seed

# -----------------------------------------------------------------------------
# Batches and evaluation of a language model
# -----------------------------------------------------------------------------


def get_batch(
    data: torch.Tensor,
    batch_size: int,
    block_size: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``data`` (1-D ids): inputs ``x`` and
    targets ``y = x`` shifted left by one, both ``(batch_size, block_size)``.
    """
    if data.dim() != 1:
        raise ValueError(
            "data must be a 1-D tensor of token ids, "
            f"got shape {tuple(data.shape)}"
        )
    if data.numel() <= block_size:
        raise ValueError(
            f"data has {data.numel()} tokens, "
            f"need more than block_size={block_size}"
        )
    starts = torch.randint(
        data.numel() - block_size, (batch_size,), generator=generator
    )
    offsets = torch.arange(block_size + 1)
    windows = data[starts[:, None] + offsets]
    return windows[:, :-1], windows[:, 1:]


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: torch.Tensor,
    block_size: int | None = None,
    batch_size: int = 64,
    max_windows: int | None = None,
) -> float:
    """Mean next-token cross-entropy (nats per token) over ``data``,
    deterministically.

    ``data`` is cut into consecutive windows of ``block_size + 1`` tokens that
    overlap by one, so every token after the first is predicted exactly once
    (the ragged tail is dropped).  With ``max_windows`` smaller than the number
    of windows, that many windows spread evenly over the whole of ``data`` (the
    first and the last included) are scored instead, so a sample measures all
    of the text, not its beginning.  ``model`` maps ids ``(batch, T)`` to
    logits ``(batch, T, vocab)``.  ``exp`` of the result is the perplexity.
    """
    if data.dim() != 1:
        raise ValueError(
            f"data must be one long 1-D sequence of token ids, got shape "
            f"{tuple(data.shape)}; flatten a batch of texts with "
            "data.reshape(-1) (evaluate cuts its own windows)"
        )
    if block_size is None:
        block_size = cast(GPTConfig, model.config).block_size
    if max_windows is not None and max_windows < 1:
        raise ValueError(f"max_windows must be at least 1, got {max_windows}")
    n = (data.numel() - 1) // block_size
    if n < 1:
        raise ValueError(
            f"data has {data.numel()} tokens, "
            f"too few for one window of {block_size + 1}"
        )
    index = torch.arange(n)
    if max_windows is not None and max_windows < n:
        index = torch.linspace(0, n - 1, max_windows).round().long()
        n = max_windows
    starts = index * block_size
    windows = data[starts[:, None] + torch.arange(block_size + 1)]
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total = 0.0
    for i in range(0, n, batch_size):
        w = windows[i : i + batch_size].to(device)
        logits = model(w[:, :-1])
        total += F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(),
            w[:, 1:].reshape(-1),
            reduction="sum",
        ).item()
    model.train(was_training)
    return total / (n * block_size)


# -----------------------------------------------------------------------------
# Training
# -----------------------------------------------------------------------------


def train(
    model: GPT,
    train_ids: torch.Tensor,
    val_ids: torch.Tensor,
    steps: int,
    batch_size: int = 32,
    lr: float = 3e-3,
    warmup: int = 50,
    min_lr: float | None = None,
    weight_decay: float = 0.1,
    grad_clip: float = 1.0,
    eval_every: int = 50,
    eval_windows: int = 32,
    generator: torch.Generator | None = None,
    show_progress: bool = True,
    on_eval: Callable[[int, float, float], None] | None = None,
    accumulate: int = 1,
) -> History:
    """Train ``model`` on random windows of ``train_ids`` for ``steps``
    optimiser steps.

    AdamW (weight decay on the matrices only), a linear warm-up to ``lr`` over
    ``warmup`` steps and a cosine decay to ``min_lr`` (``lr / 10`` by default),
    gradient clipping; the loop is :func:`~transformer_course.training.fit`.
    Before the first step, every ``eval_every`` steps and after the last, the
    loss on ``eval_windows`` windows spread evenly over the training text and
    over the validation text (all of a text's windows if it has fewer) is
    measured the same way (``evaluate`` above), so the two curves
    (``"train_loss"`` and ``"val_loss"`` in the returned history) are
    comparable.

    Each step's ``batch_size`` windows are one global batch, drawn the same
    way whatever runs it.  With ``accumulate=n`` it is split into ``n``
    micro-batches whose gradients add up before the step; inside
    ``torchrun`` (``model`` wrapped in ``DistributedDataParallel``), every
    process draws the same global batch from the same ``generator`` and
    takes its own share of it.  So one process, ``n`` micro-batches, or
    several processes all take the same steps (up to float rounding).
    """
    net = model.module if isinstance(model, DistributedDataParallel) else model
    device = next(model.parameters()).device
    block = net.config.block_size
    world, rank = 1, 0
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        world, rank = (
            torch.distributed.get_world_size(),
            torch.distributed.get_rank(),
        )
    parts = world * accumulate
    if batch_size % parts:
        raise ValueError(
            f"batch_size={batch_size} must split evenly into {world} "
            f"process(es) x {accumulate} micro-batch(es)"
        )
    share = batch_size // parts
    opt = torch.optim.AdamW(
        param_groups(model, weight_decay), lr=lr, betas=(0.9, 0.99)
    )
    min_ratio = 0.1 if min_lr is None else min_lr / lr
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: warmup_decay(s, warmup, steps, min_ratio)
    )
    use_amp = device.type == "cuda"

    done = [0]  # steps taken, for on_eval
    batch: list[torch.Tensor] = []  # this step's global batch

    def step_loss(k: int) -> torch.Tensor:
        step, micro = divmod(k, accumulate)
        done[0] = step + 1
        if micro == 0:
            batch[:] = get_batch(train_ids, batch_size, block, generator)
        start = (rank * accumulate + micro) * share
        x, y = (t[start : start + share].to(device) for t in batch)
        with torch.autocast(
            device.type, dtype=torch.bfloat16, enabled=use_amp
        ):
            return lm_loss(model(x), y)

    def measure() -> dict[str, float]:
        tr = evaluate(net, train_ids, block, max_windows=eval_windows)
        va = evaluate(net, val_ids, block, max_windows=eval_windows)
        if on_eval is not None:
            on_eval(done[0], tr, va)
        return {"train_loss": tr, "val_loss": va}

    return fit(
        model,
        step_loss,
        steps,
        opt,
        sched,
        clip_norm=grad_clip or None,
        evaluate=measure,
        eval_every=eval_every,
        eval_at_start=True,
        show_progress=show_progress,
        accumulate=accumulate,
    )


# -----------------------------------------------------------------------------
# Checkpoints
# -----------------------------------------------------------------------------


#: The checkpoint shipped with the package (written by
#: ``python -m transformer_course.train_gpt``).
CHECKPOINT_NAME = "gpt_shakespeare"

#: The texts ``--corpus`` can name, each with the way it is split into
#: training and validation text: whole plays held out; the last tenth of the
#: documentation.
CORPORA: dict[
    str, tuple[Callable[[], str], Callable[[str], tuple[str, str]]]
] = {
    "shakespeare": (load_shakespeare, split_plays),
    "python-docs": (load_python_docs, train_val_split),
}


def checkpoint_dir() -> Path:
    """The folder of the checkpoints shipped with the package."""
    return Path(__file__).resolve().parent / "checkpoints"


def _checkpoint_files(path: str | Path) -> tuple[Path, Path]:
    """``(<path>.safetensors, <path>.json)``; ``path`` may also name either
    file.
    """
    path = Path(path)
    if path.suffix in (".safetensors", ".json"):
        path = path.with_suffix("")
    return (
        path.parent / f"{path.name}.safetensors",
        path.parent / f"{path.name}.json",
    )


def save_checkpoint(
    model: GPT,
    path: str | Path,
    record: dict | None = None,
    chars: str = CHARS,
) -> None:
    """Write ``model``'s weights to ``<path>.safetensors`` and its config,
    alphabet and ``record`` (losses, training time ...) to ``<path>.json``.
    """
    import json

    from safetensors.torch import save_model

    weights, meta_file = _checkpoint_files(path)
    weights.parent.mkdir(parents=True, exist_ok=True)
    save_model(model, str(weights))
    meta = {
        "config": model.config.to_dict(),
        "chars": chars,
        "record": record or {},
    }
    meta_file.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def load_checkpoint(
    path: str | Path | None = None, device: torch.device | str = "cpu"
) -> tuple[GPT, CharTokenizer, dict]:
    """Load ``(model, tokenizer, record)`` from ``<path>.safetensors`` /
    ``<path>.json``; by default the checkpoint shipped in
    ``transformer_course/checkpoints``.  The model is returned in eval mode.
    """
    import json

    from safetensors.torch import load_model

    weights, meta_file = _checkpoint_files(
        checkpoint_dir() / CHECKPOINT_NAME if path is None else path
    )
    for f in (weights, meta_file):
        if not f.exists():
            raise FileNotFoundError(f"checkpoint file {f} not found")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    model = GPT(GPTConfig.from_dict(meta["config"]))
    load_model(model, str(weights), device=str(device))
    model.to(device).eval()
    return model, CharTokenizer(meta["chars"]), meta.get("record", {})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_course.train_gpt",
        description=(
            "Train the course's character-level GPT on Shakespeare's plays "
            "(or Python's reference documentation) and save "
            "<out>.safetensors + <out>.json."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--out",
        default=str(checkpoint_dir() / CHECKPOINT_NAME),
        help=(
            "checkpoint path without suffix; the default is the checkpoint "
            "shipped in the package"
        ),
    )
    parser.add_argument(
        "--corpus",
        choices=sorted(CORPORA),
        default="shakespeare",
        help="the text to train on (its last tenth or so is the validation "
        "text: whole plays for shakespeare)",
    )
    parser.add_argument(
        "--steps", type=int, default=5000, help="optimiser steps"
    )
    parser.add_argument(
        "--batch-size", type=int, default=8, help="windows per step"
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=128,
        help="context length in characters",
    )
    parser.add_argument(
        "--n-layer", type=int, default=4, help="transformer blocks"
    )
    parser.add_argument(
        "--n-head", type=int, default=6, help="attention heads per block"
    )
    parser.add_argument(
        "--d-model", type=int, default=192, help="width of the residual stream"
    )
    parser.add_argument(
        "--dropout",
        type=float,
        default=0.0,
        help="dropout probability while training",
    )
    parser.add_argument(
        "--lr", type=float, default=2e-3, help="peak learning rate (AdamW)"
    )
    parser.add_argument(
        "--warmup", type=int, default=100, help="linear warm-up steps"
    )
    parser.add_argument(
        "--weight-decay",
        type=float,
        default=0.1,
        help="AdamW weight decay of the matrices",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=500,
        help="steps between loss measurements",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads (default: PyTorch's choice)",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="cpu, cuda, mps (default: the best available)",
    )
    parser.add_argument(
        "--accumulate",
        type=int,
        default=1,
        help="micro-batches per step (gradients added up; same result)",
    )
    parser.add_argument(
        "--no-final-eval",
        action="store_true",
        help="skip measuring the whole validation text at the end",
    )
    parser.add_argument(
        "--keep-latest",
        action="store_true",
        help="also save the model at every loss measurement, to <out>-latest",
    )
    args = parser.parse_args(argv)

    # Launched by torchrun (WORLD_SIZE > 1): one process per device, each
    # with a replica of the model; DistributedDataParallel averages their
    # gradients (all-reduce) in every backward pass.
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    threads = args.threads
    if world > 1 and threads is None:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        threads = max(1, (os.cpu_count() or 1) // local)
    generator = set_seed(args.seed, num_threads=threads)
    device = get_device(args.device)
    if world > 1:
        import torch.distributed as dist

        if device.type == "cuda":
            device = torch.device("cuda", local_rank)
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    main_process = int(os.environ.get("RANK", "0")) == 0
    load, split = CORPORA[args.corpus]
    text = load()
    train_text, val_text = split(text)
    tok = CharTokenizer(CHARS)
    train_ids = torch.tensor(tok.encode(train_text))
    val_ids = torch.tensor(tok.encode(val_text))
    config = GPTConfig(
        vocab_size=tok.vocab_size,
        block_size=args.block_size,
        n_layer=args.n_layer,
        n_head=args.n_head,
        d_model=args.d_model,
        dropout=args.dropout,
    )
    model = GPT(config).to(device)
    replica: nn.Module = model
    if world > 1:
        replica = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    if main_process:
        print(
            f"{count_parameters(model):,} parameters on {device}"
            + (f" x {world} processes" if world > 1 else "")
            + f"; {len(train_ids):,} training and "
            f"{len(val_ids):,} validation characters",
            flush=True,
        )

    def report(step: int, tr: float, va: float) -> None:
        if not main_process:
            return
        print(f"step {step:6d}  train {tr:.4f}  val {va:.4f}", flush=True)
        if args.keep_latest:
            save_checkpoint(
                model,
                f"{args.out}-latest",
                {"step": step, "val_loss_first_windows": round(va, 4)},
            )

    history = train(
        cast(GPT, replica),
        train_ids,
        val_ids,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup=args.warmup,
        weight_decay=args.weight_decay,
        eval_every=args.eval_every,
        generator=generator,
        show_progress=False,
        on_eval=report,
        accumulate=args.accumulate,
    )
    if world > 1:
        torch.distributed.destroy_process_group()
    if not main_process:
        return
    model.cpu().eval()
    val_loss = (
        history.evals["val_loss"][-1]
        if args.no_final_eval
        else evaluate(model, val_ids)
    )
    record = {
        "val_loss": round(val_loss, 4),
        "val_loss_unit": (
            "nats per character, whole validation text, windows of block_size"
        ),
        "train_loss": (
            history.evals["train_loss"][-1]
            if args.no_final_eval
            else round(evaluate(model, train_ids, max_windows=512), 4)
        ),
        "train_seconds": round(history.wall_seconds, 1),
        "steps": args.steps,
        "batch_size": args.batch_size,
        "processes": world,
        "accumulate": args.accumulate,
        "loss": [round(v, 6) for v in history.loss],
        "lr": args.lr,
        "seed": args.seed,
        "device": (
            str(device)
            if device.type != "cuda"
            else torch.cuda.get_device_name(device)
        ),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "corpus": args.corpus,
        "corpus_sha256": corpus_fingerprint(text),
        "history": {
            "step": history.eval_steps,
            **{
                k: [round(v, 4) for v in vals]
                for k, vals in history.evals.items()
            },
        },
    }
    save_checkpoint(model, args.out, record)
    print(
        f"validation loss {val_loss:.4f} nats/char after "
        f"{record['train_seconds']} s; wrote {args.out}"
        ".safetensors and .json",
        flush=True,
    )


if __name__ == "__main__":
    main()
