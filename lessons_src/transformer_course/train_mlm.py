"""Pre-train chapter 12's small BERT on the prose of Python's documentation
and save a checkpoint (masked-language modelling).

The data (``mlm_data``), the masked held-out text (``masked_heldout``) and
the held-out score (``heldout_accuracy``) are the ones chapter 12 uses; the
loop is :func:`~transformer_course.bert.pretrain_mlm`.  Run as a script it
trains the checkpoint shipped in ``checkpoints/``::

    python -m transformer_course.train_mlm --help
    python -m transformer_course.train_mlm --out /tmp/bert_mlm

It writes ``<out>.safetensors`` and ``<out>.json``: the model's config, the
size and a fingerprint of its vocabulary (the WordPiece subset that
``mlm_data`` builds from MiniLM's tokenizer), and a record of the run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

from .bert import (
    BertConfig,
    BertForMLM,
    mask_tokens,
    mlm_windows,
    pretrain_mlm,
)
from .train_gpt import _checkpoint_files, checkpoint_dir
from .utils import cpu_name, set_seed

#: The checkpoint shipped with the package (written by
#: ``python -m transformer_course.train_mlm``).
CHECKPOINT_NAME = "bert_mlm_python_docs"


def mlm_paragraphs() -> tuple[list[str], list[str]]:
    """``(train, heldout)``: the prose paragraphs of Python's documentation,
    split for masked-LM pre-training.

    The first 90 % train.  The rest are held out, less any paragraph that
    also occurs word for word among the training ones (the documentation
    repeats itself, and a model that memorised it would look as if it
    generalised).
    """
    from .tasks.python_docs import python_docs_prose

    prose = python_docs_prose()
    cut = int(0.9 * len(prose))
    seen = set(prose[:cut])
    return prose[:cut], [p for p in prose[cut:] if p not in seen]


def mlm_data(tokenizer: Any) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """``(mlm_tok, train_ids, heldout_ids)``: a tokenizer and two streams of
    ids for masked-LM pre-training.

    ``mlm_tok`` is ``tokenizer`` (MiniLM's WordPiece) restricted to the
    pieces of the training paragraphs of :func:`mlm_paragraphs`; the ids are
    all paragraphs of a part in one 1-D tensor, each closed by ``[SEP]``.
    """
    from .hf_bert import wordpiece_subset

    train, heldout = mlm_paragraphs()
    mlm_tok = wordpiece_subset(tokenizer, train)

    def to_ids(paragraphs: list[str]) -> torch.Tensor:
        encoded = mlm_tok(paragraphs, add_special_tokens=False)["input_ids"]
        return torch.tensor(
            [t for ids in encoded for t in ids + [mlm_tok.sep_token_id]]
        )

    return mlm_tok, to_ids(train), to_ids(heldout)


def masked_heldout(
    mlm_tok: Any, heldout_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(windows, inputs, labels)``: the held-out text in 64-token windows
    every 63 tokens, masked once (15 %, generator seed 1), so that every
    model is scored at the same positions.
    """
    windows = mlm_windows(
        heldout_ids,
        torch.arange(0, len(heldout_ids) - 63, 63),
        64,
        mlm_tok.cls_token_id,
    )
    inputs, labels = mask_tokens(
        windows,
        mlm_tok.mask_token_id,
        len(mlm_tok),
        torch.isin(windows, torch.tensor(mlm_tok.all_special_ids)),
        generator=torch.Generator().manual_seed(1),
    )
    return windows, inputs, labels


@torch.no_grad()
def heldout_accuracy(
    model: BertForMLM, mlm_tok: Any, heldout_ids: torch.Tensor
) -> tuple[float, float]:
    """Top-1 and top-5 accuracy at the ``[MASK]`` positions of the held-out
    text, masked by :func:`masked_heldout`.  The model is left in eval mode.
    """
    _, inputs, labels = masked_heldout(mlm_tok, heldout_ids)
    at_mask = inputs == mlm_tok.mask_token_id
    model.eval()
    device = next(model.parameters()).device
    top5 = model(inputs.to(device))[at_mask.to(device)].topk(5, dim=-1)
    target = labels[at_mask].to(device)[:, None]
    top1 = (top5.indices[:, :1] == target).float().mean().item()
    return top1, (top5.indices == target).any(1).float().mean().item()


# -----------------------------------------------------------------------------
# Checkpoints
# -----------------------------------------------------------------------------


def vocab_fingerprint(mlm_tok: Any) -> str:
    """SHA-256 of the vocabulary, its pieces in id order."""
    pieces = mlm_tok.convert_ids_to_tokens(list(range(len(mlm_tok))))
    return hashlib.sha256("\n".join(pieces).encode()).hexdigest()


def save_mlm_checkpoint(
    model: BertForMLM,
    mlm_tok: Any,
    path: str | Path,
    record: dict | None = None,
) -> None:
    """Write ``model``'s weights to ``<path>.safetensors`` and its config,
    vocabulary size and fingerprint and ``record`` to ``<path>.json``.
    """
    from safetensors.torch import save_model

    if len(mlm_tok) != model.config.vocab_size:
        raise ValueError(
            f"the tokenizer has {len(mlm_tok)} pieces but the model "
            f"{model.config.vocab_size}: save it with the tokenizer it "
            "was trained with"
        )
    weights, meta_file = _checkpoint_files(path)
    weights.parent.mkdir(parents=True, exist_ok=True)
    save_model(model, str(weights))
    meta = {
        "config": model.config.to_dict(),
        "vocab_size": len(mlm_tok),
        "vocab_sha256": vocab_fingerprint(mlm_tok),
        "record": record or {},
    }
    meta_file.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def load_mlm_checkpoint(
    mlm_tok: Any,
    path: str | Path | None = None,
    device: torch.device | str = "cpu",
) -> tuple[BertForMLM, dict]:
    """Load ``(model, record)``; by default the shipped checkpoint.

    ``mlm_tok`` must be the vocabulary the model was trained with (from
    ``mlm_data``); its size and fingerprint are checked.  The model is
    returned in eval mode.
    """
    from safetensors.torch import load_model

    weights, meta_file = _checkpoint_files(
        checkpoint_dir() / CHECKPOINT_NAME if path is None else path
    )
    for f in (weights, meta_file):
        if not f.exists():
            raise FileNotFoundError(f"checkpoint file {f} not found")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    if (len(mlm_tok), vocab_fingerprint(mlm_tok)) != (
        meta["vocab_size"],
        meta["vocab_sha256"],
    ):
        raise ValueError(
            f"{meta_file.name} was trained with another vocabulary "
            f"({meta['vocab_size']} pieces, sha256 "
            f"{meta['vocab_sha256'][:12]}...) than this tokenizer's "
            f"({len(mlm_tok)}, {vocab_fingerprint(mlm_tok)[:12]}...); build "
            "it with train_mlm.mlm_data(tokenizer) from MiniLM's tokenizer"
        )
    model = BertForMLM(BertConfig.from_dict(meta["config"]))
    load_model(model, str(weights), device=str(device))
    return model.to(device).eval(), meta.get("record", {})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m transformer_course.train_mlm",
        description=(
            "Pre-train chapter 12's BERT (2 layers, width 128) as a masked "
            "language model on the prose of Python's documentation, on the "
            "CPU, and save <out>.safetensors + <out>.json."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--out",
        default=str(checkpoint_dir() / CHECKPOINT_NAME),
        help="checkpoint path without suffix (default: the shipped one)",
    )
    parser.add_argument(
        "--steps", type=int, default=12000, help="optimiser steps"
    )
    parser.add_argument(
        "--batch-size", type=int, default=32, help="windows per step"
    )
    parser.add_argument("--lr", type=float, default=3e-3, help="peak lr")
    parser.add_argument(
        "--warmup", type=int, default=200, help="warm-up steps"
    )
    parser.add_argument(
        "--mask-prob", type=float, default=0.4, help="masking rate"
    )
    parser.add_argument(
        "--betas", type=float, nargs=2, default=[0.9, 0.98], help="AdamW"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads")
    parser.add_argument(
        "--eval-every",
        type=int,
        default=1000,
        help="steps between held-out measurements",
    )
    args = parser.parse_args(argv)

    from .pretrained import load_minilm

    mlm_tok, train_ids, heldout_ids = mlm_data(load_minilm()[0])
    # the research run's order: global seed, generator, model init
    generator = set_seed(args.seed, num_threads=args.threads)
    model = BertForMLM(
        BertConfig(
            vocab_size=len(mlm_tok),
            d_model=128,
            num_layers=2,
            num_heads=4,
            d_ff=512,
            max_len=64,
            dropout=0.0,
        )
    )
    eval_time = [0.0, 0.0]  # wall, CPU seconds spent measuring

    def measure() -> dict[str, float]:
        w, c = time.perf_counter(), time.process_time()
        top1, top5 = heldout_accuracy(model, mlm_tok, heldout_ids)
        print(f"held-out [MASK] top-1 {top1:.1%} top-5 {top5:.1%}", flush=True)
        eval_time[0] += time.perf_counter() - w
        eval_time[1] += time.process_time() - c
        return {"mask_top1": top1, "mask_top5": top5}

    load_start = os.getloadavg()[0]
    history = pretrain_mlm(
        model,
        train_ids,
        mlm_tok,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup=args.warmup,
        generator=generator,
        mask_prob=args.mask_prob,
        betas=(args.betas[0], args.betas[1]),
        evaluate=measure,
        eval_every=args.eval_every,
        show_progress=False,
    )
    loss = history.loss
    record = {
        "command": shlex.join(
            ["python", "-m", "transformer_course.train_mlm", *sys.argv[1:]]
            if argv is None
            else ["python", "-m", "transformer_course.train_mlm", *argv]
        ),
        "steps": args.steps,
        "lr": args.lr,
        "warmup": args.warmup,
        "mask_prob": args.mask_prob,
        "betas": list(args.betas),
        "batch_size": args.batch_size,
        "seed": args.seed,
        "threads": torch.get_num_threads(),
        "train_seconds": round(history.wall_seconds - eval_time[0], 1),
        "train_cpu_seconds": round(history.cpu_seconds - eval_time[1], 1),
        "device": f"cpu ({cpu_name()})",
        "load_average": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "torch": torch.__version__,
        "python": platform.python_version(),
        "mask_top1": round(history.evals["mask_top1"][-1], 6),
        "mask_top5": round(history.evals["mask_top5"][-1], 6),
        "history": {
            "step": history.eval_steps,
            "loss_last20": [
                round(sum(loss[max(0, s - 20) : s]) / min(s, 20), 4)
                for s in history.eval_steps
            ],
            **{
                k: [round(v, 6) for v in vals]
                for k, vals in history.evals.items()
            },
        },
        "loss": [round(v, 4) for v in loss],
    }
    save_mlm_checkpoint(model, mlm_tok, args.out, record)
    print(
        f"loss last 20 steps {record['history']['loss_last20'][-1]:.2f}; "
        f"{record['train_seconds']} s; wrote {args.out}.safetensors and "
        ".json",
        flush=True,
    )


if __name__ == "__main__":
    main()
