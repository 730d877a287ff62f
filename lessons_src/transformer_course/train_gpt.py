"""Train the course GPT on Python's reference documentation and save a checkpoint (chapter 10).

Chapter 10 calls ``train`` for a short run inside the notebook.  Run as a script it trains the
longer checkpoint that the chapter's generation part loads::

    python -m transformer_course.train_gpt --help
    python -m transformer_course.train_gpt --steps 5000 \\
        --out lessons_src/transformer_course/checkpoints/gpt_python_docs

It uses the GPU when there is one (``--device`` overrides) and writes ``<out>.safetensors`` and
``<out>.json``: the model's config, its alphabet, and a record of the run (validation loss in
nats per character on the whole validation text, training seconds, steps, device).
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from collections.abc import Callable

import torch

from .gpt import (
    CHECKPOINT_NAME,
    GPT,
    CharTokenizer,
    GPTConfig,
    checkpoint_dir,
    corpus_fingerprint,
    evaluate,
    get_batch,
    lm_loss,
    load_python_docs,
    save_checkpoint,
    train_val_split,
)
from .utils import count_parameters, get_device, progress, set_seed


def learning_rate(step: int, steps: int, lr: float, warmup: int, min_lr: float) -> float:
    """Linear warm-up for ``warmup`` steps, then cosine decay from ``lr`` to ``min_lr``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * min(t, 1.0)))


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (not on biases and LayerNorm gains)."""
    params = list(dict.fromkeys(p for p in model.parameters() if p.requires_grad))
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99))


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
) -> dict[str, list[float]]:
    """Train ``model`` on random windows of ``train_ids`` for ``steps`` optimiser steps.

    Every ``eval_every`` steps (and at the end) the loss on ``eval_windows`` windows spread
    evenly over the training text and over the validation text (all of a text's windows if it
    has fewer) is measured the same way (``gpt.evaluate``), so the two curves are comparable.  Returns ``{"step", "train_loss", "val_loss"}`` lists and
    ``"seconds"`` (training time, evaluations included).
    """
    device = next(model.parameters()).device
    block = model.config.block_size
    opt = make_optimizer(model, lr, weight_decay)
    min_lr = lr / 10 if min_lr is None else min_lr
    use_amp = device.type == "cuda"
    history: dict[str, list[float]] = {"step": [], "train_loss": [], "val_loss": []}

    def record(step: int) -> None:
        tr = evaluate(model, train_ids, block, max_windows=eval_windows)
        va = evaluate(model, val_ids, block, max_windows=eval_windows)
        history["step"].append(step)
        history["train_loss"].append(tr)
        history["val_loss"].append(va)
        if on_eval is not None:
            on_eval(step, tr, va)

    start = time.perf_counter()
    model.train()
    # Not `for step in bar`: a bar that is iterated closes itself when the loop ends, before the
    # final measurement could be shown in it.
    bar = progress(total=steps, desc="training", disable=not show_progress)
    for step in range(steps):
        if step % eval_every == 0:
            record(step)
            bar.set_postfix(train=f"{history['train_loss'][-1]:.3f}", val=f"{history['val_loss'][-1]:.3f}")
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, steps, lr, warmup, min_lr)
        x, y = get_batch(train_ids, batch_size, block, generator)
        x, y = x.to(device), y.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_amp):
            loss = lm_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        bar.update(1)
    record(steps)
    bar.set_postfix(train=f"{history['train_loss'][-1]:.3f}", val=f"{history['val_loss'][-1]:.3f}")
    bar.close()
    model.eval()
    history["seconds"] = [time.perf_counter() - start]
    return history


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_course.train_gpt",
        description="Train the course's character-level GPT on Python's reference documentation "
        "(pydoc_data.topics) and save <out>.safetensors + <out>.json.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--out", default=str(checkpoint_dir() / CHECKPOINT_NAME),
                        help="checkpoint path without suffix; the default is the checkpoint shipped in the package")
    parser.add_argument("--steps", type=int, default=5000, help="optimiser steps")
    parser.add_argument("--batch-size", type=int, default=8, help="windows per step")
    parser.add_argument("--block-size", type=int, default=128, help="context length in characters")
    parser.add_argument("--n-layer", type=int, default=4, help="transformer blocks")
    parser.add_argument("--n-head", type=int, default=6, help="attention heads per block")
    parser.add_argument("--d-model", type=int, default=192, help="width of the residual stream")
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout probability while training")
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (AdamW)")
    parser.add_argument("--warmup", type=int, default=100, help="linear warm-up steps")
    parser.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay of the matrices")
    parser.add_argument("--eval-every", type=int, default=500, help="steps between loss measurements")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: PyTorch's choice)")
    parser.add_argument("--device", default=None, help="cpu, cuda, mps (default: the best available)")
    parser.add_argument("--keep-latest", action="store_true",
                        help="also save the model at every loss measurement, to <out>-latest")
    args = parser.parse_args(argv)

    generator = set_seed(args.seed, num_threads=args.threads)
    device = get_device(args.device)
    text = load_python_docs()
    train_text, val_text = train_val_split(text)
    tok = CharTokenizer()
    train_ids = torch.tensor(tok.encode(train_text))
    val_ids = torch.tensor(tok.encode(val_text))
    config = GPTConfig(
        vocab_size=tok.vocab_size, block_size=args.block_size, n_layer=args.n_layer,
        n_head=args.n_head, d_model=args.d_model, dropout=args.dropout,
    )
    model = GPT(config).to(device)
    print(f"{count_parameters(model):,} parameters on {device}; {len(train_ids):,} training and "
          f"{len(val_ids):,} validation characters", flush=True)

    def report(step: int, tr: float, va: float) -> None:
        print(f"step {step:6d}  train {tr:.4f}  val {va:.4f}", flush=True)
        if args.keep_latest:
            save_checkpoint(model, f"{args.out}-latest", {"step": step, "val_loss_first_windows": round(va, 4)})

    history = train(
        model, train_ids, val_ids, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
        warmup=args.warmup, weight_decay=args.weight_decay, eval_every=args.eval_every,
        generator=generator, show_progress=False, on_eval=report,
    )
    model.cpu().eval()
    val_loss = evaluate(model, val_ids)
    record = {
        "val_loss": round(val_loss, 4),
        "val_loss_unit": "nats per character, whole validation text, windows of block_size",
        "train_loss": round(evaluate(model, train_ids, max_windows=512), 4),
        "train_seconds": round(history["seconds"][0], 1),
        "steps": args.steps,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "seed": args.seed,
        "device": str(device) if device.type != "cuda" else torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "corpus_sha256": corpus_fingerprint(text),
        "history": {k: [round(v, 4) for v in vals] for k, vals in history.items() if k != "seconds"},
    }
    save_checkpoint(model, args.out, record)
    print(f"validation loss {val_loss:.4f} nats/char after {record['train_seconds']} s; wrote {args.out}"
          ".safetensors and .json", flush=True)


if __name__ == "__main__":
    main()
