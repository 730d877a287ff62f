"""The course's GPT training under PyTorch's distributed engine (torchrun + DistributedDataParallel, gloo
on the CPU): two processes sharing each step's global batch take the same steps as one process, and so
does one process adding up two micro-batches (gradient accumulation)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

TINY = (
    "--steps 4 --batch-size 8 --block-size 32 --n-layer 1 --n-head 2 --d-model 32 "
    "--eval-every 2 --warmup 2 --no-final-eval --seed 3"
).split()


def _run(out: Path, *launcher: str, extra: tuple[str, ...] = ()) -> tuple[dict, dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [*launcher, "-m", "transformer_course.train_gpt", *TINY, *extra, "--out", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(out.with_suffix(".json").read_text())["record"]
    return record, load_file(str(out.with_suffix(".safetensors")))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[dict, dict]]:
    tmp = tmp_path_factory.mktemp("ddp")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    return {
        "one": _run(tmp / "one", sys.executable, extra=("--threads", "1")),
        "accumulate": _run(tmp / "acc", sys.executable, extra=("--threads", "1", "--accumulate", "2")),
        "two": _run(tmp / "two", *torchrun),
    }


@pytest.mark.parametrize("other", ["two", "accumulate"])
def test_same_steps_as_one_process(runs, other) -> None:
    (one, w_one), (rec, w) = runs["one"], runs[other]
    assert rec["processes"] == (2 if other == "two" else 1)
    assert rec["loss"] == pytest.approx(one["loss"], abs=1e-5)
    assert rec["history"]["val_loss"] == pytest.approx(one["history"]["val_loss"], abs=1e-4)
    assert w.keys() == w_one.keys()
    for name in w_one:
        torch.testing.assert_close(w[name], w_one[name], atol=1e-5, rtol=1e-4, msg=name)
    # and the steps did something: the weights moved away from the same start
    assert one["loss"][-1] < one["loss"][0]


def test_batch_must_split_evenly(tmp_path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "transformer_course.train_gpt",
        *TINY,
        "--accumulate",
        "3",
        "--out",
        str(tmp_path / "x"),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "must split evenly" in done.stderr
