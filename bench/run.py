"""``make bench``: how fast the course runs, why, and what would make it faster.

    python bench/run.py                  # everything (about 20-25 min on 2 cores)
    python bench/run.py --skip-notebooks # the micro-benchmarks only
    python bench/run.py --render-only    # rewrite book/performance.md from bench/results.json
    python bench/run.py --only-precision # float32 / bfloat16 / torch.compile only, merged into the results
    python bench/run.py --only-scaling   # attention against sequence length only, merged into the results
    # on another machine (a GPU): only torch, numpy and matplotlib are needed there
    python3 bench/run.py --only-precision --devices cuda --out-json gpu.json
    python bench/run.py --merge-json gpu.json  # back here: merge per device, re-render

Writes ``bench/results.json`` (committed) and the appendix page ``book/performance.md`` with
its figure ``book/figures/bench_scaling.png``.  Every timing is the median of repeated runs
on the CPU with a fixed thread count (and on a GPU in a separate entry when one is measured);
every measurement records the machine it ran on.  Nothing here is asserted: speed is reported,
not tested.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
# The package from the working tree when it is not installed (the precision measurement runs on a
# machine that has only torch, numpy and matplotlib: ``python3 bench/run.py --only-precision ...``).
if str(ROOT / "lessons_src") not in sys.path:
    sys.path.append(str(ROOT / "lessons_src"))

from transformer_course.utils import cpu_name  # noqa: E402

RESULTS = ROOT / "bench" / "results.json"
PAGE = ROOT / "book" / "performance.md"
FIGURE = ROOT / "book" / "figures" / "bench_scaling.png"
FIGURE_LIMIT = ROOT / "book" / "figures" / "bench_limit.png"
FIGURE_SWEEP = ROOT / "book" / "figures" / "bench_sweep.png"
FIGURE_ROOF = ROOT / "book" / "figures" / "bench_roofline.png"
FIGURE_ONLINE = ROOT / "book" / "figures" / "bench_online_softmax.png"
FIGURE_KV = ROOT / "book" / "figures" / "bench_kv_cache.png"
FIGURE_PROFILE = ROOT / "book" / "figures" / "bench_profile.png"
# NVIDIA's data sheet: the H200's memory bandwidth
H200_BYTES_PER_S = 4.8e12
THREADS = 2
# Budgets of issue #8: seconds per chapter (default and exceptions) and for the whole book.
BUDGET_DEFAULT, BUDGET_LONG, BUDGET_BOOK = 180, 240, 900
LONG_CHAPTERS = ("10", "11", "15")  # 11 and 15 load a 135M-parameter model (15 trains it twice)


# --------------------------------------------------------------------------- helpers
def _course_env() -> dict[str, str]:
    """The environment the notebooks run in (``tools/course_config.py`` reads ``_config.yml``: needs yaml)."""
    import course_config

    return course_config.COURSE_ENV


def median_seconds(
    fn: Callable[[], object], repeats: int = 7, warmup: int = 2, sync: Callable[[], None] | None = None
) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def machine() -> dict:
    info = {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "torch_threads": THREADS,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "os": f"{platform.system()} {platform.release().split('-')[0]}",
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info


def devices() -> list[torch.device]:
    return [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])


def syncer(device: torch.device) -> Callable[[], None] | None:
    return torch.cuda.synchronize if device.type == "cuda" else None


# --------------------------------------------------------------------------- 1, 2: notebooks
# The headline figure of each training chapter: (what, expression, seconds expression or None), each
# expression evaluated in the notebook's kernel after its last cell (the chapter asserts the figure itself).
# The contract: every name an expression reads is bound at the top level of the chapter's source
# (tests/test_bench_contract.py checks it without running anything).
CHAPTER_METRICS = {
    "01": [
        ("GRU: first step at >= 95 % held-out accuracy, length 20", "reach[20]['gru']", None),
        ("self-attention: first step at >= 95 % held-out accuracy, length 20", "reach[20]['attention']", None),
        ("linear model on token 1 after learned attention", "acc_attend", None),
    ],
    "09": [("exact match on the 1,000 held-out dates", "accuracy", "history.wall_seconds")],
    "10": [
        ("validation loss (nats/char), trained in the notebook", "val_loss", "history.wall_seconds"),
        ("validation loss (nats/char), shipped checkpoint", "big_val", "record['train_seconds']"),
    ],
    "13": [
        ("dev accuracy, untrained classification head", "dev_untrained", None),
        ("dev accuracy, fine-tuned MiniLM (seed 0)", "final_dev[best_name]", "ft_seconds[best_name]"),
        ("dev accuracy, LoRA r = 8 on query and value (seed 0)", "lora_final[LORA_LR]", "lora_seconds[LORA_LR]"),
    ],
    "14": [
        ("test accuracy, bag-of-words logistic regression (mean of 3 seeds)", "summary['bag of words'][0]", None),
        ("test accuracy, fine-tuned MiniLM (mean of 3 seeds)", "summary['fine-tuned MiniLM'][0]", None),
        ("test accuracy, LoRA r = 8 on query and value (mean of 3 seeds)", "summary['LoRA (r = 8)'][0]", None),
    ],
}
_METRICS_MARK = "BENCH-METRICS "


def _metrics_cell(chapter: str):
    import nbformat

    spec = CHAPTER_METRICS.get(chapter, [])
    entries = ", ".join(
        f"{{'name': {name!r}, 'value': float({value}), 'seconds': {'None' if sec is None else f'float({sec})'}}}"
        for name, value, sec in spec
    )
    return nbformat.v4.new_code_cell(
        f"import json as _bench_json\nprint({_METRICS_MARK!r} + _bench_json.dumps([{entries}]))"
    )


def run_notebooks(chapters: list[str] | None = None) -> list[dict]:
    """Execute every notebook (or those of ``chapters``, numbers such as "12") as nbval does (fresh
    kernel, course environment), time it, and read back the chapter's headline figures
    (``CHAPTER_METRICS``) from the kernel afterwards."""
    import nbformat
    from nbclient import NotebookClient

    rows = []
    for nb_path in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        chapter = nb_path.name[:2]
        if chapters is not None and chapter not in chapters:
            continue
        nb = nbformat.read(nb_path, as_version=4)
        n_cells = len(nb.cells)
        nb.cells.append(_metrics_cell(chapter))
        env_backup = dict(os.environ)
        os.environ.update(_course_env())
        client = NotebookClient(
            nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "book")}}
        )
        error, metrics = None, []
        t_start = time.perf_counter()
        seconds = None
        try:
            with client.setup_kernel():
                for index, cell in enumerate(nb.cells[:n_cells]):
                    client.execute_cell(cell, index)
                seconds = time.perf_counter() - t_start
                client.execute_cell(nb.cells[n_cells], n_cells)
            text = "".join(o.get("text", "") for o in nb.cells[n_cells].outputs if o.get("name") == "stdout")
            metrics = json.loads(text.split(_METRICS_MARK, 1)[1])
        except Exception as err:  # noqa: BLE001 - a failing notebook is reported, not hidden
            error = str(err).strip().splitlines()[-1][:200] if str(err).strip() else type(err).__name__
        finally:
            os.environ.clear()
            os.environ.update(env_backup)
        if seconds is None:
            seconds = time.perf_counter() - t_start
        budget = BUDGET_LONG if chapter in LONG_CHAPTERS else BUDGET_DEFAULT
        rows.append(
            {
                "notebook": nb_path.stem,
                "seconds": round(seconds, 1),
                "budget": budget,
                "within_budget": seconds <= budget and error is None,
                "error": error,
                "metrics": metrics,
            }
        )
        print(
            f"  {nb_path.stem:40s} {seconds:6.1f} s  (budget {budget} s){'  ERROR ' + error if error else ''}",
            flush=True,
        )
    return rows


# --------------------------------------------------------------------------- 3: side by side
def bench_mha(device: torch.device) -> dict:
    """Course MultiHeadAttention (explicit and SDPA paths) vs torch.nn.MultiheadAttention, forward+backward."""
    from transformer_course.attention import MultiHeadAttention

    torch.manual_seed(0)
    b, n, d, h = 8, 256, 256, 8
    x = torch.randn(b, n, d, device=device, requires_grad=True)
    ours = MultiHeadAttention(d, h).to(device)
    ours_fast = MultiHeadAttention(d, h, use_sdpa=True).to(device)
    ref = torch.nn.MultiheadAttention(d, h, batch_first=True).to(device)

    def step(fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            fn().sum().backward()

        return run

    s = syncer(device)
    t_ours = median_seconds(step(lambda: ours(x)[0]), sync=s)
    t_fast = median_seconds(step(lambda: ours_fast(x, need_weights=False)[0]), sync=s)
    t_ref = median_seconds(step(lambda: ref(x, x, x, need_weights=False)[0]), sync=s)
    return {
        "shape": f"batch {b}, length {n}, d_model {d}, {h} heads",
        "ours_ms": t_ours * 1e3,
        "ours_sdpa_ms": t_fast * 1e3,
        "torch_ms": t_ref * 1e3,
        "ratio_ours_vs_torch": t_ours / t_ref,
        "ratio_ours_sdpa_vs_torch": t_fast / t_ref,
    }


def bench_gpt_vs_hf(device: torch.device, steps: int = 60) -> dict | None:
    """Train the course GPT and GPT2LMHeadModel with the same config, data, init and steps."""
    try:
        from transformer_course import gpt as G
        from transformer_course import tokenization, train_gpt
        from transformer_course.hf_gpt2 import to_hf
        from transformer_course.tasks import python_docs
    except ImportError as err:
        print(f"  (skipped GPT vs GPT-2: {err})")
        return None
    torch.manual_seed(0)
    tok = tokenization.CharTokenizer(python_docs.CHARS)
    train_text, val_text = python_docs.train_val_split(python_docs.load_python_docs())
    train = torch.tensor(tok.encode(train_text[:400_000]))
    val = torch.tensor(tok.encode(val_text[:60_000]))
    cfg = G.GPTConfig(vocab_size=tok.vocab_size, block_size=128, n_layer=4, n_head=4, d_model=128)
    ours = G.GPT(cfg).to(device)
    hf = to_hf(ours).to(device)  # the same initial weights
    results = {
        "config": f"{cfg.n_layer} layers, {cfg.n_head} heads, d_model {cfg.d_model}, block {cfg.block_size}",
        "steps": steps,
        "batch": 32,
    }
    for name, model, loss_of in (
        ("ours", ours, lambda m, x, y: G.lm_loss(m(x), y)),
        ("hf", hf, lambda m, x, y: G.lm_loss(m(input_ids=x).logits, y)),
    ):
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(0)
        batches = [train_gpt.get_batch(train, 32, cfg.block_size, generator=g) for _ in range(steps)]
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for x, y in batches:
            x, y = x.to(device), y.to(device)
            loss = loss_of(model, x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            g = torch.Generator().manual_seed(1)
            vals = []
            for _ in range(10):
                x, y = train_gpt.get_batch(val, 32, cfg.block_size, generator=g)
                vals.append(float(loss_of(model, x.to(device), y.to(device))))
        results[f"{name}_tokens_per_s"] = steps * 32 * cfg.block_size / seconds
        results[f"{name}_val_loss"] = statistics.mean(vals)
    results["throughput_ratio"] = results["ours_tokens_per_s"] / results["hf_tokens_per_s"]
    results["val_loss_ratio"] = results["ours_val_loss"] / results["hf_val_loss"]
    return results


def bench_gpt_vs_minimal(device: torch.device, steps: int = 300, warmup: int = 10) -> dict | None:
    """The course GPT against a minimal fused GPT-2 of identical architecture (``bench/minimal_gpt.py``):
    same initial weights, the same batches, AdamW, ``steps`` steps.  The two train step by step in
    turn (who goes first alternates), so both see the same machine; the first ``warmup`` steps of
    each are not timed.  Throughput is tokens per step over the median step time (the mean is
    recorded too).  The ratio is the median over steps of the *paired* ratio (the minimal model's
    time over ours for the same batch, taken back to back), so a slow patch of the machine that
    hits both models cancels; its interquartile range is recorded as the spread."""
    try:
        from transformer_course import gpt as G
        from transformer_course import tokenization, train_gpt
        from transformer_course.tasks import python_docs
    except ImportError as err:
        print(f"  (skipped GPT vs minimal GPT: {err})")
        return None
    sys.path.insert(0, str(ROOT / "bench"))
    from minimal_gpt import MinimalGPT, copy_from_course

    torch.manual_seed(0)
    tok = tokenization.CharTokenizer(python_docs.CHARS)
    train_text, val_text = python_docs.train_val_split(python_docs.load_python_docs())
    train = torch.tensor(tok.encode(train_text))
    val = torch.tensor(tok.encode(val_text))
    cfg = G.GPTConfig(vocab_size=tok.vocab_size, block_size=128, n_layer=4, n_head=4, d_model=128)
    models = {"ours": G.GPT(cfg).to(device)}
    models["minimal"] = copy_from_course(MinimalGPT(96, 128, 4, 4, 128), models["ours"]).to(device)
    n_params = {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()}
    probe = torch.randint(0, 96, (2, 128), device=device)
    with torch.no_grad():
        start_gap = (models["ours"](probe) - models["minimal"](probe)).abs().max().item()
    batch = 32
    g = torch.Generator().manual_seed(0)
    batches = [train_gpt.get_batch(train, batch, cfg.block_size, generator=g) for _ in range(steps)]
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in models.items()}
    seconds: dict[str, list[float]] = {k: [] for k in models}
    s = syncer(device)
    for m in models.values():
        m.train()
    for i, (x, y) in enumerate(batches):
        x, y = x.to(device), y.to(device)
        for name in ("ours", "minimal") if i % 2 == 0 else ("minimal", "ours"):
            t0 = time.perf_counter()
            loss = G.lm_loss(models[name](x), y)
            opts[name].zero_grad(set_to_none=True)
            loss.backward()
            opts[name].step()
            if s:
                s()
            if i >= warmup:
                seconds[name].append(time.perf_counter() - t0)
    out = {
        "config": f"{cfg.n_layer} layers, {cfg.n_head} heads, d_model {cfg.d_model}, block {cfg.block_size}",
        "steps": steps,
        "batch": batch,
        "parameters": n_params["ours"],
        "same_parameter_count": n_params["ours"] == n_params["minimal"],
        "initial_logits_max_diff": start_gap,
    }
    for name, m in models.items():  # the median step: robust to a step that the machine interrupted
        out[f"{name}_tokens_per_s"] = batch * cfg.block_size / statistics.median(seconds[name])
        out[f"{name}_tokens_per_s_mean_step"] = batch * cfg.block_size * len(seconds[name]) / sum(seconds[name])
        out[f"{name}_val_loss"] = train_gpt.evaluate(m, val, cfg.block_size, max_windows=256)
    paired = sorted(m / o for m, o in zip(seconds["minimal"], seconds["ours"], strict=True))
    out["timed_steps"] = len(paired)
    out["throughput_ratio"] = statistics.median(paired)
    q1, _, q3 = statistics.quantiles(paired, n=4)
    out["throughput_ratio_iqr"] = [q1, q3]
    out["throughput_ratio_of_medians"] = out["ours_tokens_per_s"] / out["minimal_tokens_per_s"]
    return out


def bench_gpt_vs_minimal_runs(device: torch.device, runs: int = 3) -> dict | None:
    """``bench_gpt_vs_minimal`` in ``runs`` fresh processes, one after the other.

    The two models run the same kernels, so their difference is no larger than what moves from one
    run to the next (two instances of the same model differ by a few tenths of a percent): one run
    is a draw, the median of a few is the figure, and their range is the spread."""
    out = []
    for _ in range(runs):
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--gpt-vs-minimal-once", device.type],
            capture_output=True,
            text=True,
            env={**os.environ, **_course_env()},
        )
        if proc.returncode != 0 or not proc.stdout.strip():
            print(f"  (GPT vs minimal GPT failed: {proc.stderr.strip()[-500:]})")
            return None
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        if r is None:
            return None
        out.append(r)
    by_ratio = sorted(out, key=lambda r: r["throughput_ratio"])
    middle = dict(by_ratio[len(by_ratio) // 2])  # the median run, reported whole
    middle["runs"] = [r["throughput_ratio"] for r in out]
    return middle


def bench_encoder_vs_bert(device: torch.device) -> dict | None:
    """The course encoder running MiniLM's weights vs transformers' BertModel, inference."""
    try:
        from transformer_course.hf_bert import bert_from_hf
        from transformer_course.pretrained import load_minilm
    except ImportError as err:
        print(f"  (skipped encoder vs BertModel: {err})")
        return None
    tokenizer, hf = load_minilm()
    hf = hf.to(device).eval()
    ours = bert_from_hf(hf).to(device).eval()
    sentences = ["The animal didn't cross the street because it was too tired."] * 16
    batch = tokenizer(sentences, padding="max_length", max_length=128, return_tensors="pt").to(device)
    s = syncer(device)
    with torch.no_grad():
        t_ours = median_seconds(
            lambda: ours(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids")), sync=s
        )
        t_hf = median_seconds(lambda: hf(**batch), sync=s)
    return {
        "shape": "batch 16, length 128 (MiniLM: 6 layers, 12 heads, 384 wide)",
        "ours_ms": t_ours * 1e3,
        "bert_ms": t_hf * 1e3,
        "ratio_ours_vs_bert": t_ours / t_hf,
    }


# --------------------------------------------------------------------------- precision and compilation
def _device_info(device: torch.device) -> dict:
    """What a measurement ran on, recorded with it (results from another machine are merged per device)."""
    info = {"torch": torch.__version__, "python": platform.python_version(), "cpu": cpu_name()}
    info["cores"] = os.cpu_count()
    if device.type == "cuda":
        info["name"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    else:
        info["name"] = f"{info['cpu']}, {torch.get_num_threads()} threads"
    return info


def measure_matmul_peak(
    device: torch.device, dtype: torch.dtype, n: int | tuple[int, int, int], tf32: bool = False
) -> float:
    """FLOP/s of one matmul, (m x k) @ (k x p) or n x n square (2 m k p FLOPs), the best of a few."""
    m, k, p = (n, n, n) if isinstance(n, int) else n
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(k, p, device=device).to(dtype)
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        s = syncer(device)
        once = time.perf_counter()
        a @ b
        if s:
            s()
        once = time.perf_counter() - once
        repeats = 10 if device.type == "cuda" else max(3, min(8, int(4 / max(once, 1e-3))))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            if s:
                s()
            times.append(time.perf_counter() - t0)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return 2 * m * k * p / min(times)  # the best run: a peak, not a typical speed


# The variants of one training run: (key, model, compiled, bfloat16 autocast).
PRECISION_VARIANTS = (
    ("ours_fp32_eager", "ours", False, False),
    ("ours_bf16_eager", "ours", False, True),
    ("ours_fp32_compiled", "ours", True, False),
    ("ours_bf16_compiled", "ours", True, True),
    ("minimal_fp32_eager", "minimal", False, False),
    ("minimal_fp32_compiled", "minimal", True, False),
)


def bench_precision_compile(
    device: torch.device, steps: int | None = None, warmup: int = 3, timing_steps: int | None = None
) -> dict:
    """Chapter 10's GPT (and the minimal GPT of ``bench/minimal_gpt.py``) trained for ``steps`` steps of the
    same batches from the same weights in float32, under bfloat16 autocast, compiled (``torch.compile``)
    and both: tokens/s at the median step after ``warmup``, the first step's extra time (compilation),
    the validation loss (in float32) after the run, FLOPs per token and the share of the measured peak."""
    import copy

    from transformer_course import gpt as G
    from transformer_course import tokenization, train_gpt
    from transformer_course.tasks import python_docs

    sys.path.insert(0, str(ROOT / "bench"))
    from minimal_gpt import MinimalGPT, copy_from_course

    if steps is None:
        steps = 200 if device.type == "cuda" else 60
    if device.type == "cpu":
        torch.set_num_threads(THREADS)
    # a cold compile every time: no cache from an earlier run of this script on this machine
    cache = tempfile.mkdtemp(prefix="bench-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
    s = syncer(device)
    out: dict = {"device": _device_info(device), "date": time.strftime("%Y-%m-%d"), "steps": steps}
    out["warmup_steps"] = warmup

    # The machine's matmul peaks: the best of a few sizes, measured before the training runs and again after them
    # (a machine shared with other work is slow now and then; a peak is the best it does).
    sizes: tuple = (4096, 8192) if device.type == "cuda" else (1024, 2048)
    # and the shapes of the model's own largest products (batch x block tokens, d_model to 4 d_model and back)
    tokens = 32 * 128
    sizes += ((tokens, 128, 512), (tokens, 512, 128))
    formats = {"fp32": (torch.float32, False), "bf16": (torch.bfloat16, False)}
    if device.type == "cuda":
        formats["tf32"] = (torch.float32, True)

    def measure_peaks() -> dict[str, float]:
        return {
            name: max(measure_matmul_peak(device, dtype, n, tf32=tf32) for n in sizes)
            for name, (dtype, tf32) in formats.items()
        }

    peaks = measure_peaks()
    out["peak_flops"] = peaks
    out["peak_matmul_sizes"] = [list(n) if isinstance(n, tuple) else n for n in sizes]
    print(f"  {device.type} matmul peaks (TFLOP/s): " + ", ".join(f"{k} {v / 1e12:.2f}" for k, v in peaks.items()))

    torch.manual_seed(0)
    tok = tokenization.CharTokenizer(python_docs.CHARS)
    train_text, val_text = python_docs.train_val_split(python_docs.load_python_docs())
    train = torch.tensor(tok.encode(train_text))
    val = torch.tensor(tok.encode(val_text))
    cfg = G.GPTConfig(vocab_size=tok.vocab_size, block_size=128, n_layer=4, n_head=4, d_model=128)
    batch = 32
    start = G.GPT(cfg)
    g = torch.Generator().manual_seed(0)
    batches = [train_gpt.get_batch(train, batch, cfg.block_size, generator=g) for _ in range(steps)]
    n_params = sum(p.numel() for p in start.parameters())
    # nanoGPT's estimate_mfu (after PaLM, appendix B): 6 FLOPs per weight per token (2 forward, 4 backward) for
    # every weight that multiplies activations (all but the position table; the token table counts once, as the
    # tied output layer), plus 12 * n_layer * d_model * T for attention's two n x n products (as if not causal).
    n_matmul = n_params - start.pos_emb.weight.numel()
    flops_per_token = 6 * n_matmul + 12 * cfg.n_layer * cfg.d_model * cfg.block_size
    out.update(
        config=f"{cfg.n_layer} layers, {cfg.n_head} heads, d_model {cfg.d_model}, block {cfg.block_size}",
        batch=batch,
        tokens_per_step=batch * cfg.block_size,
        parameters=n_params,
        parameters_counted=n_matmul,
        flops_per_token=flops_per_token,
        flops_formula="6 N + 12 n_layer d_model T",
        flops_attention_per_token=12 * cfg.n_layer * cfg.d_model * cfg.block_size,
    )
    variants: dict[str, dict] = {}
    live = {}  # what the timing round below steps again: (step function, model, optimiser)

    def make_step(run: torch.nn.Module, opt: torch.optim.Optimizer, bf16: bool) -> Callable:
        def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = G.lm_loss(run(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss

        return step

    def timed(step: Callable, x: torch.Tensor, y: torch.Tensor) -> tuple[float, torch.Tensor]:
        if s:
            s()
        t0 = time.perf_counter()
        loss = step(x, y)
        if s:
            s()
        return time.perf_counter() - t0, loss

    torch._dynamo.reset()
    for key, kind, compiled, bf16 in PRECISION_VARIANTS:
        torch.manual_seed(0)
        model: torch.nn.Module = copy.deepcopy(start)
        if kind == "minimal":
            model = copy_from_course(MinimalGPT(cfg.vocab_size, cfg.block_size, 4, 4, cfg.d_model), start)
        model = model.to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        row: dict = {"model": kind, "compiled": compiled, "bf16": bf16}
        torch._dynamo.utils.counters.clear()
        times = []
        try:
            step = make_step(torch.compile(model) if compiled else model, opt, bf16)
            for x, y in batches:
                t, loss = timed(step, x.to(device), y.to(device))
                times.append(t)
        except Exception as err:  # noqa: BLE001 - a variant that does not run here is reported, not hidden
            text = str(err).strip().splitlines()
            row["error"] = f"{type(err).__name__}: {text[0][:300] if text else ''}"
            print(f"  {device.type} {key}: not available here: {row['error']}", flush=True)
            variants[key] = row
            continue
        steady = statistics.median(times[warmup:])
        row.update(
            run_step_s=steady,
            first_step_s=times[0],
            first_step_extra_s=times[0] - steady,
            final_train_loss=loss.item(),
            val_loss=train_gpt.evaluate(model, val, cfg.block_size, max_windows=256),
        )
        if compiled:  # places where the compiler had to cut the model into separate graphs
            row["graph_breaks"] = sum(torch._dynamo.utils.counters["graph_break"].values())
        variants[key] = row
        live[key] = (step, model, opt)
        print(
            f"  {device.type} {key:22s} first step {times[0]:6.2f} s, then {steady * 1e3:7.2f} ms a step, "
            f"val {row['val_loss']:.4f}",
            flush=True,
        )
    # The speeds: every variant steps again, in turn (the order rotating), so all of them see the same machine
    # (a GPU this small waits on the CPU that launches its kernels, and that CPU's speed drifts).
    rounds = timing_steps if timing_steps is not None else (200 if device.type == "cuda" else 40)
    keys = list(live)
    per: dict[str, list[float]] = {k: [] for k in keys}
    for i in range(rounds):
        x, y = batches[i % len(batches)]
        x, y = x.to(device), y.to(device)
        for k in keys[i % len(keys) :] + keys[: i % len(keys)]:
            per[k].append(timed(live[k][0], x, y)[0])
    out["timing_rounds"] = rounds
    again = measure_peaks()
    peaks = {k: max(v, again[k]) for k, v in peaks.items()}
    out["peak_flops"] = peaks
    print(f"  {device.type} matmul peaks (TFLOP/s): " + ", ".join(f"{k} {v / 1e12:.2f}" for k, v in peaks.items()))
    for k in keys:
        row = variants[k]
        row["step_s"] = statistics.median(per[k][warmup:])
        row["tokens_per_s"] = batch * cfg.block_size / row["step_s"]
        row["achieved_flops"] = flops_per_token * row["tokens_per_s"]
        row["peak_key"] = "bf16" if row["bf16"] else "fp32"
        row["share_of_peak"] = row["achieved_flops"] / peaks[row["peak_key"]]
        print(f"  {device.type} {k:22s} {row['tokens_per_s']:9.0f} tokens/s", flush=True)
    out["variants"] = variants
    shutil.rmtree(cache, ignore_errors=True)
    return out


# --------------------------------------------------------------------------- checks of the explanations (CPU)
def bench_cpu_checks(steps: int = 8) -> dict:
    """Measured on this CPU: which dtype each operation
    returns under CPU bfloat16 autocast; the bfloat16 / float32 speed of the model's own matmul shapes; and a
    profile of eager training steps (float32 and bfloat16 autocast) split into matmuls, casts and the rest."""
    import copy

    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    from transformer_course import gpt as G
    from transformer_course import tokenization, train_gpt
    from transformer_course.tasks import python_docs

    torch.set_num_threads(THREADS)
    dev = torch.device("cpu")
    out: dict = {"device": _device_info(dev), "date": time.strftime("%Y-%m-%d")}
    # 1. the dtype autocast gives each operation's output, from float32 inputs
    x = torch.randn(8, 64, 128)
    w = torch.randn(256, 128)
    q = torch.randn(2, 4, 64, 32)
    ops = {
        "linear": lambda: F.linear(x, w),
        "matmul": lambda: x @ w.T,
        "softmax": lambda: torch.softmax(x, -1),
        "layer_norm": lambda: F.layer_norm(x, (128,)),
        "gelu": lambda: F.gelu(x),
        "scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
        "cross_entropy": lambda: F.cross_entropy(x.reshape(-1, 128), torch.zeros(512, dtype=torch.long)),
    }
    dtypes = {}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for name, op in ops.items():
            dtypes[name] = str(op().dtype).removeprefix("torch.")
        # and on a bfloat16 input (what a layer after a linear one receives)
        xb = x.to(torch.bfloat16)
        dtypes["softmax of bfloat16"] = str(torch.softmax(xb, -1).dtype).removeprefix("torch.")
        dtypes["layer_norm of bfloat16"] = str(F.layer_norm(xb, (128,)).dtype).removeprefix("torch.")
        dtypes["gelu of bfloat16"] = str(F.gelu(xb).dtype).removeprefix("torch.")
        ce = F.cross_entropy(xb.reshape(-1, 128), torch.zeros(512, dtype=torch.long))
        dtypes["cross_entropy of bfloat16"] = str(ce.dtype).removeprefix("torch.")
    out["autocast_dtypes"] = dtypes
    # 2. the model's own matmul shapes in both formats (best of several)
    shapes = {}
    for n in ((4096, 128, 512), (4096, 512, 128), (4096, 128, 384)):
        f32 = max(measure_matmul_peak(dev, torch.float32, n) for _ in range(3))
        b16 = max(measure_matmul_peak(dev, torch.bfloat16, n) for _ in range(3))
        shapes["x".join(map(str, n))] = {"fp32": f32, "bf16": b16, "ratio": b16 / f32}
    out["matmul_shapes"] = shapes
    # 3. a profile of eager training steps: self CPU time per operation, grouped
    torch.manual_seed(0)
    tok = tokenization.CharTokenizer(python_docs.CHARS)
    train_text, _ = python_docs.train_val_split(python_docs.load_python_docs())
    train = torch.tensor(tok.encode(train_text[:400_000]))
    cfg = G.GPTConfig(vocab_size=tok.vocab_size, block_size=128, n_layer=4, n_head=4, d_model=128)
    start = G.GPT(cfg)
    g = torch.Generator().manual_seed(0)
    batches = [train_gpt.get_batch(train, 32, cfg.block_size, generator=g) for _ in range(steps + 3)]
    matmul_ops = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
    attention_ops = ("flash_attention", "scaled_dot_product")
    cast_ops = {"aten::copy_", "aten::_to_copy", "aten::to"}
    # the two formats take turns step by step (each step under its own profiler), so both see the same machine
    runs = {}
    for name, bf16 in (("fp32", False), ("bf16", True)):
        model = copy.deepcopy(start).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step(x: torch.Tensor, y: torch.Tensor, model=model, opt=opt, bf16=bf16) -> None:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = G.lm_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        runs[name] = step
    groups = {name: dict.fromkeys(("matmul", "attention", "casts", "optimiser", "rest"), 0.0) for name in runs}
    plain: dict[str, list[float]] = {name: [] for name in runs}
    top: dict[str, dict[str, float]] = {name: {} for name in runs}
    for i, (xb_, yb_) in enumerate(batches):
        for name, step in runs.items():
            if i < 3:  # warm-up
                step(xb_, yb_)
                continue
            t0 = time.perf_counter()
            step(xb_, yb_)  # unprofiled, for the step time
            plain[name].append(time.perf_counter() - t0)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step(xb_, yb_)
            for e in prof.key_averages():
                us = e.self_cpu_time_total
                top[name][e.key] = top[name].get(e.key, 0.0) + us
                if e.key in matmul_ops:
                    groups[name]["matmul"] += us
                elif any(a in e.key for a in attention_ops):
                    groups[name]["attention"] += us
                elif e.key in cast_ops:
                    groups[name]["casts"] += us
                elif "_foreach_" in e.key or "Optimizer" in e.key or "adamw" in e.key.lower():
                    groups[name]["optimiser"] += us
                else:
                    groups[name]["rest"] += us
    profiled = len(batches) - 3
    profiles = {}
    for name in runs:
        total = sum(groups[name].values())
        profiles[name] = {
            "step_s": statistics.median(plain[name]),
            "seconds_per_step": {k: v / 1e6 / profiled for k, v in groups[name].items()},
            "share": {k: v / total for k, v in groups[name].items()},
            "top_ops_ms": {k: v / 1e3 / profiled for k, v in sorted(top[name].items(), key=lambda kv: -kv[1])[:12]},
        }
        print(
            f"  profile {name}: {profiles[name]['step_s'] * 1e3:.1f} ms a step unprofiled; "
            + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in profiles[name]["seconds_per_step"].items()),
            flush=True,
        )
        print("    " + ", ".join(f"{k} {v:.1f}" for k, v in profiles[name]["top_ops_ms"].items()), flush=True)
    out["profile"] = profiles
    out["profile_steps"] = profiled
    out["model"] = f"{cfg.n_layer} layers, {cfg.n_head} heads, d_model {cfg.d_model}, block {cfg.block_size}, batch 32"
    return out


# --------------------------------------------------------------------------- 4: scaling
_PEAK_SCRIPT = r"""
import re, sys, torch
import torch.nn.functional as F
from pathlib import Path
from transformer_course.attention import scaled_dot_product_attention
torch.set_num_threads(int(sys.argv[2]))
n, impl = int(sys.argv[1]), sys.argv[3]
attend = scaled_dot_product_attention if impl == "explicit" else F.scaled_dot_product_attention
if impl == "blocked":
    exec(sys.argv[4])
    attend = blocked_attention
q, k, v = (torch.randn(1, 1, n, 64) for _ in range(3))
attend(q[..., :8, :], k[..., :8, :], v[..., :8, :])
def status(key):
    return int(re.search(key + r":\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024
Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark to the current size
base = status("VmRSS")
attend(q, k, v)
print(status("VmHWM") - base)
"""

# The two ways to compute attention that the page compares over sequence length.
ATTENTION_IMPLS = ("explicit", "fused")
REPEATS_SCALING = 15


def _peak_extra_bytes(n: int, impl: str, source: str = "") -> int | None:
    """Growth of resident memory while attention over ``n`` positions runs, in a fresh process (``source``:
    the code of ``blocked_attention``, for impl ``blocked``)."""
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(n), str(THREADS), impl, source],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    return int(proc.stdout.strip()) if proc.returncode == 0 else None


def bench_scaling() -> dict:
    """Attention time and peak extra memory against sequence length (one head, d_k = 64), for the course's
    explicit ``scaled_dot_product_attention`` (chapter 04: scores, softmax, weights times values, returning
    the weights) and PyTorch's fused ``torch.nn.functional.scaled_dot_product_attention``."""
    import torch.nn.functional as F

    from transformer_course.attention import scaled_dot_product_attention

    torch.set_num_threads(THREADS)
    impls = {"explicit": scaled_dot_product_attention, "fused": F.scaled_dot_product_attention}
    lengths = [128, 256, 512, 1024, 2048, 4096]
    rows = []
    for n in lengths:
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, 1, n, 64) for _ in range(3))
        row: dict = {"n": n, "score_matrix_mib": n * n * 4 / 2**20}
        # the two take turns call by call, so that both see the machine in the same state
        times: dict[str, list[float]] = {name: [] for name in impls}
        for i in range(REPEATS_SCALING + 2):
            for name, attend in impls.items():
                t0 = time.perf_counter()
                attend(q, k, v)
                if i >= 2:  # two calls of warm-up
                    times[name].append(time.perf_counter() - t0)
        for name in impls:
            peak = _peak_extra_bytes(n, name)
            row[f"{name}_ms"] = statistics.median(times[name]) * 1e3
            row[f"{name}_peak_mib"] = None if peak is None else peak / 2**20
        rows.append(row)
        print(f"  n={n}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items() if k != "n" and v is not None))
    return {
        "lengths": lengths,
        "rows": rows,
        "d_k": 64,
        "threads": THREADS,
        "repeats": REPEATS_SCALING,
        "device": _device_info(torch.device("cpu")),
        "date": time.strftime("%Y-%m-%d"),
    }


def bench_kv_cache() -> dict | None:
    try:
        from transformer_course import generation
        from transformer_course import gpt as G
    except ImportError as err:
        print(f"  (skipped KV cache: {err})")
        return None
    torch.manual_seed(0)
    model = G.GPT(G.GPTConfig(vocab_size=96, block_size=1024, n_layer=4, n_head=4, d_model=128)).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    rows = []
    for new in (64, 128, 256, 512):
        with torch.no_grad():
            t_no = median_seconds(
                functools.partial(generation.generate, model, prompt, new, use_cache=False), repeats=3, warmup=1
            )
            t_kv = median_seconds(
                functools.partial(generation.generate, model, prompt, new, use_cache=True), repeats=3, warmup=1
            )
        rows.append({"new_tokens": new, "no_cache_s": t_no, "cache_s": t_kv, "speedup": t_no / t_kv})
    return {"model": "4 layers, 4 heads, d_model 128, block 1024", "rows": rows}


# --------------------------------------------------------------------------- what the explanations rest on
# fmt: off
def blocked_attention(q, k, v, block=128):
    """Attention over blocks of keys with a running max and sum
    (online softmax): no n x n matrix."""
    scale = q.shape[-1] ** -0.5
    m = torch.full((*q.shape[:-1], 1), float("-inf"),
                   dtype=q.dtype, device=q.device)  # max so far
    s = torch.zeros_like(m)  # sum of exp(score - m)
    out = torch.zeros_like(q)  # the same sum, weighting the values
    for j in range(0, k.shape[-2], block):
        kj, vj = k[..., j:j + block, :], v[..., j:j + block, :]
        scores = q @ kj.transpose(-2, -1) * scale  # n x block
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))
        p = torch.exp(scores - m_new)
        fix = torch.exp(m - m_new)  # rescale sums under the old max
        s = s * fix + p.sum(-1, keepdim=True)
        out = out * fix + p @ vj
        m = m_new
    return out / s
# fmt: on


REPEATS_ONLINE = 21


def time_in_turn(fns: dict[str, Callable[[], object]], repeats: int, warmup: int = 2) -> dict[str, list[float]]:
    """Seconds of each call of each function, the functions taking turns call by call (who goes first rotates),
    so that all of them see the machine in the same state; the first ``warmup`` rounds are thrown away."""
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(repeats + warmup):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            if i >= warmup:
                times[name].append(time.perf_counter() - t0)
    return times


def bench_online_softmax() -> list[dict]:
    """Blocked attention with an online softmax against the explicit attention of chapter 04 and the fused
    kernel (no mask, one head, d_k = 64): the largest difference of the outputs, every call's time (the three
    taking turns, with 2 PyTorch threads and with 1) and the peak extra memory."""
    import inspect

    import torch.nn.functional as F

    from transformer_course.attention import scaled_dot_product_attention

    rows = []
    for n in (1024, 4096):
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, 1, n, 64) for _ in range(3))
        explicit = scaled_dot_product_attention(q, k, v)[0]
        blocked = blocked_attention(q, k, v)
        row: dict = {"n": n, "block": 128, "max_abs_diff": (explicit - blocked).abs().max().item()}
        fns = {
            "explicit": lambda q=q, k=k, v=v: scaled_dot_product_attention(q, k, v),
            "blocked": lambda q=q, k=k, v=v: blocked_attention(q, k, v),
            "fused": lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v),
        }
        row["timings"] = {}
        for threads in (THREADS, 1):
            torch.set_num_threads(threads)
            times = time_in_turn(fns, REPEATS_ONLINE)
            row["timings"][str(threads)] = {name: [t * 1e3 for t in ts] for name, ts in times.items()}
            ratio = sorted(b / e for b, e in zip(times["blocked"], times["explicit"], strict=True))
            print(
                f"  online softmax n={n}, {threads} thread(s): "
                + ", ".join(
                    f"{name} {statistics.median(ts) * 1e3:.1f} ms ({min(ts) * 1e3:.1f}-{max(ts) * 1e3:.1f})"
                    for name, ts in times.items()
                )
                + f"; blocked/explicit per round {statistics.median(ratio):.2f} ({ratio[0]:.2f}-{ratio[-1]:.2f})",
                flush=True,
            )
        torch.set_num_threads(THREADS)
        for impl in ("explicit", "blocked"):  # each in a fresh process, as in bench_scaling
            peak = _peak_extra_bytes(n, impl, inspect.getsource(blocked_attention))
            row[f"{impl}_peak_mib"] = None if peak is None else peak / 2**20
        rows.append(row)
        print(
            f"  online softmax n={n}: diff {row['max_abs_diff']:.1e}, peaks {row['explicit_peak_mib']:.1f} / "
            f"{row['blocked_peak_mib']:.1f} MiB",
            flush=True,
        )
    return rows


def bench_fresh_vs_buffer() -> list[dict]:
    """QK^T alone at the two longest lengths, into a fresh result on every call (as the explicit attention
    does) and into a buffer allocated once (``out=``), taking turns call by call, 2 threads."""
    torch.set_num_threads(THREADS)
    rows = []
    for n in (2048, 4096):
        torch.manual_seed(0)
        q, k = (torch.randn(1, 1, n, 64) for _ in range(2))
        buffer = torch.empty(1, 1, n, n)
        times = time_in_turn(
            {
                "fresh": lambda q=q, k=k: torch.matmul(q, k.transpose(-2, -1)),
                "buffer": lambda q=q, k=k, b=buffer: torch.matmul(q, k.transpose(-2, -1), out=b),
            },
            REPEATS_ONLINE,
        )
        rows.append({"n": n, **{f"{name}_ms": [t * 1e3 for t in ts] for name, ts in times.items()}})
        print(
            f"  QK^T n={n}: "
            + ", ".join(
                f"{a} {statistics.median(t) * 1e3:.2f} ms ({min(t) * 1e3:.2f}-{max(t) * 1e3:.2f})"
                for a, t in times.items()
            ),
            flush=True,
        )
    return rows


def bench_graph_breaks() -> dict:
    """Where ``torch.compile`` cuts the course's GPT into separate graphs: dynamo's own count of each reason
    (the ``eager`` backend traces exactly as the default one does, without generating kernels)."""
    from transformer_course import gpt as G

    torch.manual_seed(0)
    model = G.GPT(G.GPTConfig(vocab_size=96, block_size=128, n_layer=4, n_head=4, d_model=128))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.compile(model, backend="eager")(torch.randint(0, 96, (2, 64)))
    reasons = dict(torch._dynamo.utils.counters["graph_break"])
    torch._dynamo.reset()
    return {
        "breaks": sum(reasons.values()),
        "reasons": [{"reason": str(k).strip().splitlines()[0][:200], "count": n} for k, n in reasons.items()],
    }


def bench_copy_bandwidth() -> dict:
    """Memory bandwidth: the best of several copies of a 256 MiB float32 tensor (each reads and writes it)."""
    a = torch.randn(64 * 2**20)
    b = torch.empty_like(a)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        b.copy_(a)
        times.append(time.perf_counter() - t0)
    return {"bytes_moved": 2 * a.nbytes, "bytes_per_s": 2 * a.nbytes / min(times)}


def bench_extra_checks() -> dict:
    """Online softmax, the graph breaks' reasons and the copy bandwidth, on this CPU."""
    torch.set_num_threads(THREADS)
    out: dict = {"device": _device_info(torch.device("cpu")), "date": time.strftime("%Y-%m-%d")}
    try:  # the processor's caches, as lscpu reports them ("L3 cache: 32 MiB (1 instance)")
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
        out["caches"] = {a.strip(): b.strip() for a, b in (x.split(":", 1) for x in lscpu if " cache:" in x)}
    except OSError:
        pass
    out["online_softmax"] = bench_online_softmax()
    out["fresh_vs_buffer"] = bench_fresh_vs_buffer()
    out["graph_breaks"] = bench_graph_breaks()
    print(f"  graph breaks: {out['graph_breaks']}", flush=True)
    out["copy_bandwidth"] = bench_copy_bandwidth()
    print(f"  copy bandwidth: {out['copy_bandwidth']['bytes_per_s'] / 1e9:.1f} GB/s", flush=True)
    return out


# --------------------------------------------------------------------------- the page
ANCHOR_N = 1024


# Figures are drawn narrower than the column and with larger text, so that they stay readable when a phone's
# screen shrinks them to about 350 px.
_FIG_RC = {
    "font.size": 13,
    "axes.titlesize": 13,
    "axes.labelsize": 13,
    "xtick.labelsize": 12,
    "ytick.labelsize": 12,
    "legend.fontsize": 12,
}
_PHONE_PX = 350


def _save(fig, path: Path, what: str) -> None:
    """Check the figure's smallest text at page width and on a phone, then store it at twice its size."""
    from transformer_course.plotting import MIN_TEXT_PT, smallest_text_pt

    fig.canvas.draw()
    for px in (None, _PHONE_PX):
        size, text = smallest_text_pt(fig) if px is None else smallest_text_pt(fig, px)
        floor = MIN_TEXT_PT if px is None else 0.8 * MIN_TEXT_PT
        if size < floor:
            raise SystemExit(f"the {what} figure's text {text!r} would appear {size:.1f} pt tall")
    path.parent.mkdir(parents=True, exist_ok=True)
    # stored at twice the size it is shown (sharp on high-density screens); render() sets the shown width
    fig.savefig(path, bbox_inches="tight", dpi=2 * fig.dpi)


def plot(results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transformer_course.plotting import use_course_style

    use_course_style()
    with plt.rc_context(_FIG_RC):
        _plot_scaling(results)
        plot_online_softmax()
        if results.get("precision"):
            plot_limit(results["precision"])
            plot_roofline(results["precision"], results.get("extra_checks"))
        sweep = (results.get("batch_sweep") or {}).get("cuda")
        if sweep:
            plot_sweep(sweep)
        if results.get("kv_cache"):
            plot_kv(results["kv_cache"])
        if (results.get("cpu_checks") or {}).get("profile"):
            plot_profile(results["cpu_checks"])


_PROFILE_SHORT = {
    "matmul": "matmuls",
    "attention": "attention",
    "casts": "casts",
    "optimiser": "optimiser",
    "rest": "the rest",
}


def plot_profile(chk: dict) -> None:
    """One stacked bar per format: the milliseconds of one training step, part by part, as the profile
    table gives them."""
    import matplotlib.pyplot as plt

    prof = chk["profile"]
    fig, ax = plt.subplots(figsize=(4.8, 3.3))
    colors = {"matmul": "C0", "attention": "C3", "casts": "C7", "optimiser": "C2", "rest": "C1"}
    for y, fmt in enumerate(("bf16", "fp32")):
        left = 0.0
        for key, _ in _PROFILE_PARTS:
            ms = prof[fmt]["seconds_per_step"][key] * 1e3
            ax.barh(
                y,
                ms,
                left=left,
                color=colors[key],
                edgecolor="white",
                height=0.6,
                label=_PROFILE_SHORT[key] if y == 0 else None,
            )
            if ms >= 12:  # a label inside every part wide enough to hold it
                ax.text(left + ms / 2, y, f"{ms:.0f}", ha="center", va="center", color="white", fontsize=13)
            left += ms
        ax.text(left + 2, y, f"{left:.0f} ms", va="center", fontsize=13)
    ax.set_yticks([0, 1], ["bf16", "fp32"], fontsize=13)
    ax.set_xlim(0, max(sum(prof[f]["seconds_per_step"].values()) for f in ("fp32", "bf16")) * 1e3 * 1.3)
    ax.set_ylim(-0.5, 1.5)
    ax.set_xlabel("milliseconds per training step")
    ax.legend(loc="upper center", bbox_to_anchor=(0.45, -0.3), ncol=3, fontsize=12, frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    _save(fig, FIGURE_PROFILE, "profile")
    plt.close(fig)


def plot_kv(kv: dict) -> None:
    """Generation time against the number of new tokens, with and without the KV cache, log-log, with
    guides of slope 1 (time in proportion to the tokens) and 2 (in proportion to their square)."""
    import matplotlib
    import matplotlib.pyplot as plt

    rows = kv["rows"]
    new = [r["new_tokens"] for r in rows]
    fig, ax = plt.subplots(figsize=(4.6, 3.8))
    for key, color, name in (("no_cache_s", "C3", "without cache"), ("cache_s", "C0", "with cache")):
        ys = [r[key] for r in rows]
        ax.plot(new, ys, "o-", color=color)
        ax.annotate(name, (new[-1], ys[-1]), xytext=(8, 0), textcoords="offset points", va="center", color=color)
    for slope, y0 in ((2, rows[0]["no_cache_s"]), (1, rows[0]["cache_s"])):
        ax.plot(new, [y0 * (n / new[0]) ** slope for n in new], "--", color="gray", lw=1)
        ax.annotate(
            f"slope {slope}",
            (new[-1], y0 * (new[-1] / new[0]) ** slope),
            xytext=(8, -12 if slope == 1 else 0),
            textcoords="offset points",
            va="center",
            color="dimgray",
            fontsize=11,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(new, [str(n) for n in new])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlim(new[0] / 1.3, new[-1] * 4.4)
    ax.set_ylim(rows[0]["cache_s"] / 1.6, rows[0]["no_cache_s"] * (new[-1] / new[0]) ** 2 * 1.8)
    ax.set_xlabel("new tokens (log scale)")
    ax.set_ylabel("seconds (log scale)")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    _save(fig, FIGURE_KV, "KV cache")
    plt.close(fig)


def plot_online_softmax(block: int = 128) -> None:
    """The online softmax's loop as a picture: the n x n scores are never held; one block of keys at a time
    gives n x block scores, which update each query's running max m, running sum s and running output."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    ax.set_xlim(-1.0, 13.4)
    ax.set_ylim(-1.5, 5.0)
    ax.set_aspect("equal")
    ax.axis("off")
    w = 1.75
    done, cur = "#d9d9d9", "#f5a25d"
    for j, (face, ls) in enumerate(((done, "-"), (done, "-"), (cur, "-"), ("white", "--"))):
        edge = "0.65" if ls == "--" else "black"  # the next block, faded: nothing comes from it yet
        ax.add_patch(Rectangle((j * w, 0), w, 4, facecolor=face, edgecolor=edge, lw=1, ls=ls))
    ax.text(
        w,
        2.0,
        "done:\nfolded\ninto\nm, s, out",
        ha="center",
        va="center",
        fontsize=12,
        bbox={"facecolor": done, "edgecolor": "none", "pad": 1},
    )
    ax.text(2.5 * w, 2.7, f"block j:\nscores\nn × {block}", ha="center", va="center", fontsize=11)
    ax.text(3.5 * w, 2.7, "next", ha="center", va="center", fontsize=13, color="0.55")
    ax.text(2 * w, 4.3, f"keys, in blocks of {block}", ha="center", va="bottom", fontsize=15)
    ax.add_patch(FancyArrowPatch((0.1, 4.18), (4 * w - 0.1, 4.18), arrowstyle="->", mutation_scale=14, lw=1.2))
    ax.text(-0.2, 2.0, "queries (all n)", rotation=90, ha="right", va="center", fontsize=15)
    ax.text(2 * w, -0.2, "n × n scores:\none block at a time", ha="center", va="top", fontsize=15)
    x0 = 8.6
    for x, bw, name in ((x0, 0.45, "m"), (x0 + 0.95, 0.45, "s"), (x0 + 1.95, 1.7, "out")):
        ax.add_patch(Rectangle((x, 0), bw, 4, facecolor="#cfe2f3", edgecolor="black", lw=1))
        ax.text(x + bw / 2, 4.18, name, ha="center", va="bottom", fontsize=15)
    ax.text(x0 + 1.95 + 0.85, 2.0, "n × d", ha="center", va="center", fontsize=15)
    ax.add_patch(
        FancyArrowPatch(
            (2.5 * w, 1.1), (x0 - 0.08, 1.1), arrowstyle="->", mutation_scale=14, lw=1.4, color="#c55a11", zorder=3
        )
    )
    ax.plot([2.5 * w], [1.1], "o", color="#c55a11", ms=5, zorder=3)  # the arrow starts inside block j
    ax.text((4 * w + x0) / 2, 1.3, "× fix,\n+ block", ha="center", va="bottom", fontsize=12, color="#c55a11")
    ax.text(x0 + 1.8, -0.2, "running state:\none row per query", ha="center", va="top", fontsize=15)
    fig.tight_layout()
    _save(fig, FIGURE_ONLINE, "online softmax")
    plt.close(fig)


def _plot_scaling(results: dict) -> None:
    import matplotlib
    import matplotlib.pyplot as plt

    rows = results["scaling"]["rows"]
    n = [r["n"] for r in rows]
    labels = {"explicit": "explicit (course's sdpa)", "fused": "fused"}
    # One panel above the other; the lengths (powers of 2) label the axis.
    fig, axes = plt.subplots(2, 1, figsize=(4.6, 7.0), sharex=True)
    # time in µs, as in the table beside the figure
    for ax, suffix, label, unit in (
        (axes[0], "ms", "time (µs)", 1e3),
        (axes[1], "peak_mib", "peak memory (MiB)", 1.0),
    ):
        for i, impl in enumerate(ATTENTION_IMPLS):
            pts = [(r["n"], r[f"{impl}_{suffix}"] * unit) for r in rows if r.get(f"{impl}_{suffix}") is not None]
            if pts:
                ax.loglog(*zip(*pts, strict=True), "os"[i] + "-", color=f"C{i}", label=labels[impl])
        # the n² reference through the explicit attention's point at n = 1024 (ANCHOR_N), not at an end of the range
        anchor = next((r for r in rows if r["n"] == ANCHOR_N), rows[len(rows) // 2])
        top = anchor.get(f"explicit_{suffix}")
        if top:
            top *= unit
            ax.loglog(n, [top * (m / anchor["n"]) ** 2 for m in n], "--", color="gray", label="slope 2 (n²)")
        if suffix == "peak_mib":
            ax.loglog(n, [r["score_matrix_mib"] for r in rows], ":", color="C3", label="one n×n matrix")
        ax.set_ylabel(label)
        ax.grid(True, which="major", alpha=0.3)
    axes[1].set_xscale("log", base=2)
    axes[1].set_xticks(n, [str(v) for v in n])
    axes[1].xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    axes[1].set_xlabel("sequence length n")
    axes[0].set_title("time")
    axes[1].set_title("memory")
    handles, names = axes[1].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0, 1, 0.91))
    fig.legend(handles, names, loc="upper center", ncol=2, bbox_to_anchor=(0.5, 1.0), frameon=False)
    _save(fig, FIGURE, "scaling")
    plt.close(fig)


_SHORT_RUN = {
    "ours_fp32_eager": "fp32",
    "ours_bf16_eager": "bf16",
    "ours_fp32_compiled": "fp32 comp.",
    "ours_bf16_compiled": "bf16 comp.",
    "minimal_fp32_eager": "min. fp32",
    "minimal_fp32_compiled": "min. comp.",
}


def plot_limit(prec: dict) -> None:
    """The FLOP/s each training run achieves, against the measured float32 and bfloat16 peaks, one panel per
    device: a dot per run on a log axis, so that no bar length starts from an arbitrary base."""
    import matplotlib
    import matplotlib.pyplot as plt

    devs = [d for d in ("cpu", "cuda") if d in prec]
    fig, axes = plt.subplots(len(devs), 1, figsize=(6.4, 3.0 * len(devs)), squeeze=False)
    for ax, dev in zip(axes[:, 0], devs, strict=True):
        rec = prec[dev]
        unit, scale = ("TFLOP/s", 1e12) if dev == "cuda" else ("GFLOP/s", 1e9)
        rows = [(k, r) for k, r in rec["variants"].items() if "error" not in r][::-1]
        for y, (_, r) in enumerate(rows):
            color = "C1" if r["bf16"] else "C0"
            ax.plot(r["achieved_flops"] / scale, y, "o", color=color, markersize=8)
            ax.annotate(  # a fixed gap in points, whatever the axis' span
                _pct(r["share_of_peak"]),
                (r["achieved_flops"] / scale, y),
                xytext=(-9, 0),
                textcoords="offset points",
                va="center",
                ha="right",
                color=color,
            )
        ax.set_yticks(range(len(rows)), [_SHORT_RUN[k] for k, _ in rows])
        for key, color, name in (("fp32", "C0", "fp32\npeak"), ("bf16", "C1", "bf16\npeak")):
            x = rec["peak_flops"][key] / scale
            ax.axvline(x, color=color, ls="--", lw=1.5)
            # each peak named beside its own line, in the empty band above the dots
            ax.annotate(
                name,
                (x, len(rows) + 0.55),
                xytext=(-5, 0),
                textcoords="offset points",
                ha="right",
                va="center",
                color=color,
                fontsize=11,
            )
        lo = min(r["achieved_flops"] for _, r in rows) / scale
        ax.set_xscale("log")
        ax.set_xlim(lo / 8, rec["peak_flops"]["bf16"] / scale * 1.6)  # room for the labels left of the dots
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_ylim(-0.6, len(rows) + 1.5)
        ax.set_xlabel(f"{unit} achieved (log scale)")
        ax.set_title(f"{_DEV[dev]}: {rec['device']['name'].split(',')[0]}")
        ax.grid(True, axis="x", which="major", alpha=0.3)
    fig.tight_layout()
    _save(fig, FIGURE_LIMIT, "limit")
    plt.close(fig)


def _sweep_printed(sweep: dict) -> dict:
    """The sweep with its tokens per second as the tables print them (whole thousands), so that every quoted
    ratio and percentage is the one a reader computes from the tables."""
    keys = ("tokens_per_s_loop", "tokens_per_s_synced")
    return {**sweep, "rows": [{**r, **{k: round(r[k] / 1e3) * 1e3 for k in keys}} for r in sweep["rows"]]}


def _sweep_worst(sweep: dict) -> dict:
    """The sweep's row whose two timings differ the most."""
    rows = _sweep_printed(sweep)["rows"]
    return max(rows, key=lambda r: abs(r["tokens_per_s_loop"] / r["tokens_per_s_synced"] - 1))


def _sweep_noise(sweep: dict, bf16: bool | None = None) -> float:
    """The largest relative difference between the sweep's two timings of the same configuration (of one
    format, with ``bf16``)."""
    rows = [r for r in _sweep_printed(sweep)["rows"] if bf16 is None or r["bf16"] == bf16]
    return max(abs(r["tokens_per_s_loop"] / r["tokens_per_s_synced"] - 1) for r in rows)


def _ratio_noise(sweep: dict) -> float:
    """How far bfloat16's tokens per second over float32's can move when each of the two is off by its format's
    largest difference between the two timings: (1 + bfloat16's) (1 + float32's) - 1."""
    return (1 + _sweep_noise(sweep, True)) * (1 + _sweep_noise(sweep, False)) - 1


def plot_sweep(sweep: dict) -> None:
    """Top: share of the measured peak against the batch size, one line per width and format (log scale).
    Bottom: bfloat16's tokens per second over float32's, one line per width, with the timings' spread."""
    import matplotlib
    import matplotlib.pyplot as plt

    batches = sorted({r["batch"] for r in sweep["rows"]})
    widths = sorted({r["d_model"] for r in sweep["rows"]})
    fig, axes = plt.subplots(2, 1, figsize=(4.6, 7.2), sharex=True)
    ax = axes[0]
    ends = []
    for bf16, color, name in ((False, "C0", "fp32"), (True, "C1", "bf16")):
        for d, style in zip(widths, ("--", "-"), strict=False):
            ys = [100 * _sweep_row(sweep, b, d, bf16)["share_of_peak_loop"] for b in batches]
            ax.plot(batches, ys, "o" + style, color=color)
            ends.append([ys[-1], f"{name}, d {d}", color])
    # labels at the lines' ends, pushed apart (log scale) where two ends are close
    ends.sort()
    for _ in range(20):  # move close neighbours apart, each half the way, so each label stays by its own end
        for below, above in zip(ends, ends[1:], strict=False):
            if above[0] < below[0] * 1.75:
                push = (below[0] * 1.75 / above[0]) ** 0.5
                below[0], above[0] = below[0] / push, above[0] * push
    for y, label, color in ends:
        ax.text(batches[-1] * 1.2, y, label, va="center", color=color)
    ax.set_yscale("log")
    ax.set_ylim(0.2, 150)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylabel("share of peak (%, log scale)")
    ax.set_title("share of the peak")
    noise = _ratio_noise(sweep)
    sweep = _sweep_printed(sweep)
    ax = axes[1]
    ax.axhspan(1 - noise, 1 + noise, color="gray", alpha=0.25, lw=0)
    ax.axhline(1, color="gray", lw=1)
    ax.text(batches[-1] * 1.2, 1 - noise - 0.05, f"±{noise * 100:.0f} %", color="dimgray", va="top")
    for d, style in zip(widths, ("--", "-"), strict=False):
        ys = [
            _sweep_row(sweep, b, d, True)["tokens_per_s_loop"] / _sweep_row(sweep, b, d, False)["tokens_per_s_loop"]
            for b in batches
        ]
        ax.plot(batches, ys, "o" + style, color="C2")
        ax.text(batches[-1] * 1.2, ys[-1], f"d {d}", va="center", color="C2")
    ax.set_ylabel("bf16 ÷ fp32 tokens/s")
    ax.set_title("bfloat16 against float32")
    ax.set_ylim(0, None)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
    axes[1].set_xticks(batches, [str(b) for b in batches])
    axes[1].xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    axes[1].set_xlim(batches[0] / 1.3, batches[-1] * 6)
    axes[1].set_xlabel("batch (windows of 128 tokens)")
    fig.suptitle(sweep["device"].get("name", "GPU"))
    fig.tight_layout()
    _save(fig, FIGURE_SWEEP, "sweep")
    plt.close(fig)


def _intensities(rec: dict) -> dict[str, float]:
    """FLOPs per byte of the model's largest product, the same at four times the width, and an addition."""
    d, m = _parse_config(rec["config"])["d_model"], rec["tokens_per_step"]

    def intensity(m: int, k: int, p: int, size: int = 4) -> float:
        return 2 * m * k * p / (size * (m * k + k * p + m * p))

    return {
        f"({m}×{d})·({d}×{4 * d})": intensity(m, d, 4 * d),
        "the same, 4× as wide": intensity(m, 4 * d, 16 * d),
        "addition": 1 / 12,
    }


def plot_roofline(prec: dict, extra: dict | None) -> None:
    """The roofline of each device in float32 (the lower of the peak and bandwidth × intensity), the
    intensities of three operations, and the FLOP/s the float32 training achieved."""
    import matplotlib
    import matplotlib.pyplot as plt

    bw = ((extra or {}).get("copy_bandwidth") or {}).get("bytes_per_s")
    cpu, gpu = prec.get("cpu"), prec.get("cuda")
    if not (cpu and bw):
        return
    devs = [(cpu, bw, "C0", "CPU")] + (
        [(gpu, H200_BYTES_PER_S, "C3", "GPU")] if gpu and "H200" in gpu["device"]["name"] else []
    )
    ops = _intensities(cpu)
    short = dict(zip(ops, ("product", "4× wider", "addition"), strict=True))
    xs = [0.02, 2000]
    g = 1e9  # drawn in GFLOP/s
    fig, ax = plt.subplots(figsize=(4.6, 4.6))
    for rec, b, color, name in devs:
        peak = rec["peak_flops"]["fp32"]
        ridge = peak / b
        ax.loglog([xs[0], ridge, xs[1]], [b * xs[0] / g, peak / g, peak / g], "-", color=color, lw=2)
        ax.plot([ridge], [peak / g], "o", color=color)
        ax.text(ridge / 1.3, peak / g * 1.4, f"{name} ridge {ridge:.0f}", ha="right", va="bottom", color=color)
        ach = rec["variants"]["ours_fp32_eager"]["achieved_flops"]
        ax.axhline(ach / g, color=color, ls=":", lw=1.5)
        if name == "CPU":
            ax.text(xs[0] * 1.3, ach / g / 1.3, f"{name} training", ha="left", va="top", color=color)
        else:
            ax.text(xs[1] / 1.2, ach / g / 1.3, f"{name} training", ha="right", va="top", color=color)
    for label, x in ops.items():
        ax.axvline(x, color="gray", ls="--", lw=1)
        ax.text(
            x * 1.15,
            0.25,
            f"{short[label]} {x:.0f}" if x >= 1 else f"{short[label]} {x:.2f}",
            rotation=90,
            va="bottom",
            ha="left",
            color="dimgray",
        )
    ax.set_xlim(*xs)
    ax.set_ylim(0.2, 5e5)
    fmt = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.xaxis.set_major_formatter(fmt)
    ax.yaxis.set_major_formatter(fmt)
    ax.set_xlabel("FLOPs per byte (log scale)")
    ax.set_ylabel("GFLOP/s (log scale)")
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    _save(fig, FIGURE_ROOF, "roofline")
    plt.close(fig)


def _shown_width(png: Path) -> int:
    """The width a figure stored at 2x is shown at (CSS px): half its pixels."""
    import struct

    with png.open("rb") as f:
        head = f.read(24)
    return struct.unpack(">I", head[16:20])[0] // 2


# The chapter 10 GPT trained for a few steps with one process and with two (torchrun, DistributedDataParallel,
# gloo), the same global batch of windows each step; each process gets half the machine's threads.
EVAL_WINDOWS = 32  # windows of each text that train_gpt's evaluation scores (its eval_windows default)
DDP_ARGS = (
    "--steps 40 --batch-size 16 --block-size 128 --n-layer 4 --n-head 6 --d-model 192 --warmup 10 "
    "--eval-every 40 --no-final-eval --seed 0 --corpus python-docs"
).split()


def bench_ddp() -> dict:
    import tempfile

    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        # (command, PyTorch threads per process)
        runs = {
            "1 process": ([sys.executable, "-m", "transformer_course.train_gpt", "--threads", str(THREADS)], THREADS),
            "1 process, 1 thread": ([sys.executable, "-m", "transformer_course.train_gpt", "--threads", "1"], 1),
            "1 process, accumulate 2": (
                [sys.executable, "-m", "transformer_course.train_gpt", "--threads", str(THREADS), "--accumulate", "2"],
                THREADS,
            ),
            "2 processes": (
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    "--nproc_per_node=2",
                    "-m",
                    "transformer_course.train_gpt",
                ],
                max(1, THREADS // 2),
            ),
        }
        for name, (cmd, threads) in runs.items():
            path = Path(tmp) / name.replace(" ", "_").replace(",", "")
            env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
            subprocess.run([*cmd, *DDP_ARGS, "--out", str(path)], check=True, capture_output=True, env=env)
            record = json.loads(path.with_suffix(".json").read_text())["record"]
            steps = record["steps"]
            out[name] = {
                "seconds_per_step": record["train_seconds"] / steps,
                "final_loss": record["loss"][-1],
                "val_loss": record["history"]["val_loss"][-1],
                "processes": record["processes"],
                "threads": threads,
            }
            print(f"  {name}: {out[name]}", flush=True)
    out["args"] = " ".join(DDP_ARGS)
    out["device"] = _device_info(torch.device("cpu"))
    out["date"] = time.strftime("%Y-%m-%d")
    return out


def _chapter_title(notebook: str) -> str:
    """'07_encoder_decoder' -> the chapter's own title, as its page shows it."""
    path = ROOT / "book" / f"{notebook}.ipynb"
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        first = "".join(cells[0]["source"]) if cells[0]["cell_type"] == "markdown" else ""
        for c in cells:
            if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("# "):
                first = "".join(c["source"])
                break
        return first.splitlines()[0].removeprefix("# ").strip()
    except (OSError, ValueError, KeyError, IndexError):
        return notebook


def _n(x: float, digits: int = 0) -> str:
    """A number as the page prints it: thousands separated, ``digits`` decimals."""
    return f"{x:,.{digits}f}"


def _sig(v: float, sig: int = 3) -> str:
    """A number to ``sig`` significant figures, without an exponent: 0.0625, 0.336, 2.47, 131."""
    if v == 0:
        return "0"
    digits = max(0, sig - 1 - math.floor(math.log10(abs(v))))
    return f"{v:,.{digits}f}"


def _sv(v: float, sig: int = 3) -> float:
    """The value a reader sees: ``v`` as ``_sig`` prints it, so that a quoted ratio is the printed numbers'."""
    return float(_sig(v, sig).replace(",", ""))


def _ms(seconds: float, dev: str) -> float:
    """A step time in ms as the page prints it: to 0.01 ms on a GPU (steps of about 10 ms), 0.1 ms on a CPU."""
    return round(seconds * 1e3, 2 if dev == "cuda" else 1)


def _msf(seconds: float, dev: str) -> str:
    return f"{_ms(seconds, dev):.{2 if dev == 'cuda' else 1}f}"


def _k(v: float) -> float:
    """Tokens per second in thousands, as the tables print them."""
    return float(round(v / 1e3))


def _x(ratio: float) -> str:
    """A ratio as the page prints it: 1.7×, 12×, 0.93×."""
    return f"{ratio:.0f}×" if ratio >= 20 else f"{ratio:.1f}×" if ratio >= 1.95 else f"{ratio:.2f}×"


def _pct(share: float) -> str:
    return f"{share * 100:.0f} %" if share >= 0.095 else f"{share * 100:.1f} %" if share >= 0.001 else "under 0.1 %"


def _flops(x: float) -> str:
    return f"{x / 1e12:.1f} TFLOP/s" if x >= 1e12 else f"{x / 1e9:.0f} GFLOP/s"


_DEV = {"cpu": "CPU", "cuda": "GPU"}

_VARIANT_LABEL = {
    "ours_fp32_eager": "float32",
    "ours_bf16_eager": "bfloat16 autocast",
    "ours_fp32_compiled": "float32, compiled",
    "ours_bf16_compiled": "bfloat16 autocast, compiled",
    "minimal_fp32_eager": "minimal GPT, float32",
    "minimal_fp32_compiled": "minimal GPT, float32, compiled",
}

# What chapter 10 itself trains: GPTConfig(block_size=64, n_layer=4, n_head=4, d_model=128).
CHAPTER10 = {"layers": 4, "heads": 4, "d_model": 128, "block": 64}
_WORDS = {2: "twice", 3: "three times", 4: "four times", 5: "five times", 6: "six times", 8: "eight times"}


def _device_label(dev: str, rec: dict) -> str:
    return f"the GPU ({rec['device']['name']})" if dev == "cuda" else f"the CPU ({rec['device']['name']})"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _parse_config(config: str) -> dict[str, int]:
    """'4 layers, 4 heads, d_model 128, block 128' -> {'layers': 4, 'heads': 4, 'd_model': 128, 'block': 128}."""
    out = {}
    for part in config.split(","):
        words = part.split()
        if len(words) == 2:
            a, b = words
            out[b if a.isdigit() else a] = int(a if a.isdigit() else b)
    return out


def _config_phrase(config: str) -> str:
    """The exact GPT a section measures, and how it differs from the one chapter 10 trains."""
    c = _parse_config(config)
    text = (
        f"chapter 10's `GPT` class with {c['layers']} layers, {c['heads']} heads, d_model {c['d_model']} and "
        f"block {c['block']}"
    )
    diff = [k for k in CHAPTER10 if c.get(k) != CHAPTER10[k]]
    if diff:
        text += (
            " (chapter 10 itself trains it with "
            + ", ".join(f"{CHAPTER10[k]} {k}" if k in ("layers", "heads") else f"{k} {CHAPTER10[k]}" for k in diff)
            + ")"
        )
    return text


def _step_noise(rec: dict, keys: tuple[str, ...], dev: str | None = None) -> float:
    """The noise of the measuring method: every variant's step was timed twice (in its own run, and with all
    variants taking turns); the largest difference between the two, over ``keys``.  With ``dev``, from the
    step times as the page prints them."""
    t = (lambda x: _ms(x, dev) / 1e3) if dev else (lambda x: x)
    return max(abs(t(rec["variants"][k]["step_s"]) - t(rec["variants"][k]["run_step_s"])) for k in keys)


def _saving(rec: dict, eager_key: str, comp_key: str, dev: str | None = None) -> tuple[float, float, float, bool]:
    """(saving taking turns, saving each alone, noise, measurable): a saving counts only when both timings
    agree on its sign and both exceed the noise of the method (``_step_noise``).  With ``dev``, from the step
    times as the page prints them, so that a reader's subtraction gives the printed figure."""
    e, c = rec["variants"][eager_key], rec["variants"][comp_key]
    t = (lambda x: _ms(x, dev) / 1e3) if dev else (lambda x: x)
    turns = t(e["step_s"]) - t(c["step_s"])
    alone = t(e["run_step_s"]) - t(c["run_step_s"])
    noise = _step_noise(rec, (eager_key, comp_key), dev)
    measurable = (turns > 0) == (alone > 0) and min(abs(turns), abs(alone)) > noise
    return turns, alone, noise, measurable


def _fp32_spread(rec: dict) -> tuple[float, float, float, float]:
    """Float32 eager training timed two ways (in turn and alone): (tokens/s in turn, alone, share in turn, alone)."""
    b = rec["variants"]["ours_fp32_eager"]
    alone = b["tokens_per_s"] * b["step_s"] / b["run_step_s"]
    return b["tokens_per_s"], alone, b["share_of_peak"], b["share_of_peak"] * b["step_s"] / b["run_step_s"]


def _span(a: float, b: float, fmt: Callable[[float], str]) -> str:
    lo, hi = sorted((a, b))
    x, y = fmt(lo), fmt(hi)
    if fmt is _x and hi >= 10:
        x, y = f"{lo:.0f}×", f"{hi:.0f}×"
    return x if x == y else f"{x.rstrip(' %×')} to {y}"


def _one_figure(x: float) -> str:
    """A count to one significant figure: 4,072 -> 'about 4,000'."""
    if x <= 0:
        return "—"
    digits = 10 ** math.floor(math.log10(x))
    return f"about {_n(round(x / digits) * digits)}"


# The code the folded boxes show: the lines that measure, written out whole with the names the page defines
# (``time_it`` from "Timing correctly"); each mirrors the measuring function named beside it.
_SHOWN_SCALING = """import statistics, time
import torch
import torch.nn.functional as F
from transformer_course.attention import scaled_dot_product_attention

impls = {"explicit": scaled_dot_product_attention, "fused": F.scaled_dot_product_attention}
n = 4096
q, k, v = (torch.randn(1, 1, n, 64) for _ in range(3))
times = {name: [] for name in impls}
for i in range(15 + 2):
    for name, attend in impls.items():  # the two take turns call by call
        t0 = time.perf_counter()
        attend(q, k, v)
        if i >= 2:  # two calls of warm-up
            times[name].append(time.perf_counter() - t0)
print({name: statistics.median(t) for name, t in times.items()})"""  # mirrors bench_scaling

_SHOWN_TIME_IN_TURN = '''def time_in_turn(fns, repeats, warmup=2):
    """Seconds of each call of each function (a dict of them), the functions taking turns
    call by call, who goes first rotating; the first warmup rounds are thrown away."""
    names = list(fns)
    times = {name: [] for name in names}
    for i in range(repeats + warmup):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            if i >= warmup:
                times[name].append(time.perf_counter() - t0)
    return times'''  # mirrors time_in_turn

_SHOWN_PEAK = """import re
from pathlib import Path

def status(key):  # one line of /proc/self/status (Linux), in bytes
    text = Path("/proc/self/status").read_text()
    return int(re.search(key + r":\\s+(\\d+) kB", text).group(1)) * 1024

q, k, v = (torch.randn(1, 1, n, 64) for _ in range(3))
attend(q[..., :8, :], k[..., :8, :], v[..., :8, :])  # a small call first, to load the code
Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark to the current size
base = status("VmRSS")
attend(q, k, v)
print(status("VmHWM") - base)  # bytes the call added at its peak"""  # mirrors _PEAK_SCRIPT

_SHOWN_KV = """from transformer_course import generation
from transformer_course import gpt as G

torch.manual_seed(0)
cfg = G.GPTConfig(vocab_size=96, block_size=1024, n_layer=4, n_head=4, d_model=128)
model = G.GPT(cfg).eval()
prompt = torch.zeros(1, 1, dtype=torch.long)
with torch.no_grad():
    for new in (64, 128, 256, 512):
        t_no = time_it(lambda: generation.generate(model, prompt, new, use_cache=False),
                       repeats=3, warmup=1)
        t_kv = time_it(lambda: generation.generate(model, prompt, new, use_cache=True),
                       repeats=3, warmup=1)
        print(new, t_no, t_kv, t_no / t_kv)"""  # mirrors bench_kv_cache

_SHOWN_PROFILE = """from torch.profiler import ProfilerActivity, profile

matmul_ops = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
attention_ops = ("flash_attention", "scaled_dot_product")
cast_ops = {"aten::copy_", "aten::_to_copy", "aten::to"}
groups = dict.fromkeys(("matmul", "attention", "casts", "optimiser", "rest"), 0.0)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    step(x, y)  # one training step, in float32 or under bfloat16 autocast
for e in prof.key_averages():
    us = e.self_cpu_time_total  # microseconds inside the operation itself
    if e.key in matmul_ops:
        groups["matmul"] += us
    elif any(a in e.key for a in attention_ops):
        groups["attention"] += us
    elif e.key in cast_ops:
        groups["casts"] += us
    elif "_foreach_" in e.key or "Optimizer" in e.key or "adamw" in e.key.lower():
        groups["optimiser"] += us
    else:
        groups["rest"] += us
print(groups)"""  # mirrors bench_cpu_checks

_SHOWN_PRECISION = """import copy, statistics, time
import torch
from transformer_course import gpt as G
from transformer_course import tokenization, train_gpt
from transformer_course.gpt import lm_loss
from transformer_course.tasks import python_docs

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
tok = tokenization.CharTokenizer(python_docs.CHARS)
train_text, val_text = python_docs.train_val_split(python_docs.load_python_docs())
train, val = torch.tensor(tok.encode(train_text)), torch.tensor(tok.encode(val_text))
cfg = G.GPTConfig(vocab_size=tok.vocab_size, block_size=128, n_layer=4, n_head=4, d_model=128)
model = G.GPT(cfg)
n_steps = 200 if device.type == "cuda" else 60
g = torch.Generator().manual_seed(0)
batches = [train_gpt.get_batch(train, 32, 128, generator=g) for _ in range(n_steps)]  # windows of the text

def make_step(model, opt, bf16):
    def step(x, y):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = lm_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step

def timed(step, x, y):  # one step; on a GPU, synchronised before and after
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    step(x, y)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0

steps = {}
for bf16 in (False, True):
    for compiled in (False, True):  # each run: its own copy of the model, its own AdamW
        torch.manual_seed(0)
        m = copy.deepcopy(model).to(device).train()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        step = make_step(torch.compile(m) if compiled else m, opt, bf16)
        alone = [timed(step, x.to(device), y.to(device)) for x, y in batches]  # training, this run alone
        val_loss = train_gpt.evaluate(m, val, 128, max_windows=256)  # in float32, after training
        print(bf16, compiled, "first step's extra:", alone[0] - statistics.median(alone[3:]),
              "alone:", statistics.median(alone[3:]), "val. loss:", val_loss)
        steps[(bf16, compiled)] = step

rounds = 200 if device.type == "cuda" else 40
names = list(steps)
times = {name: [] for name in names}
for i in range(rounds):  # in turn: every run steps once per round, who goes first rotating
    x, y = batches[i % len(batches)]
    x, y = x.to(device), y.to(device)
    for name in names[i % len(names):] + names[:i % len(names)]:
        times[name].append(timed(steps[name], x, y))
print({name: statistics.median(t[3:]) for name, t in times.items()})  # in turn, after 3 of warm-up"""

_SHOWN_PEAK_MATMUL = '''def matmul_flops(m, k, p, dtype, device):
    """FLOP/s of (m x k) @ (k x p): 2 m k p FLOPs, the best of a few calls."""
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(k, p, device=device).to(dtype)
    t0 = time.perf_counter()
    a @ b  # warm-up, timed to choose the number of calls
    if device.type == "cuda":
        torch.cuda.synchronize()
    once = time.perf_counter() - t0
    # 10 calls on a GPU; on a CPU 3 to 8, fewer for a slower product
    repeats = 10 if device.type == "cuda" else max(3, min(8, int(4 / max(once, 1e-3))))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 2 * m * k * p / min(times)  # the best call: a peak, not a typical speed'''

_SHOWN_GRAPH_BREAKS = """from transformer_course import gpt as G

torch.manual_seed(0)
model = G.GPT(G.GPTConfig(vocab_size=96, block_size=128, n_layer=4, n_head=4, d_model=128))
torch._dynamo.reset()
torch._dynamo.utils.counters.clear()
x = torch.randint(0, 96, (2, 64))
torch.compile(model, backend="eager")(x)  # traces as the default backend does, makes no kernels
for reason, count in torch._dynamo.utils.counters["graph_break"].items():
    print(count, reason)"""  # mirrors bench_graph_breaks

_SHOWN_SWEEP = """synced = time_it(step, repeats=20, warmup=5)  # each step synchronised before and after
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(20):  # back to back, as a training loop runs
    step()
torch.cuda.synchronize()
loop = (time.perf_counter() - t0) / 20
print(batch * 128 / loop, batch * 128 / synced)  # tokens per second"""  # mirrors bench_batch_sweep

_SHOWN_COPY = """a = torch.randn(64 * 2**20)  # 256 MiB of float32
b = torch.empty_like(a)
times = []
for _ in range(7):
    t0 = time.perf_counter()
    b.copy_(a)  # reads a, writes b
    times.append(time.perf_counter() - t0)
print(2 * a.nbytes / min(times), "bytes per second")"""  # mirrors bench_copy_bandwidth

_SHOWN_SIDE = """from transformer_course.gpt import lm_loss

seconds = {name: [] for name in models}
for i, (x, y) in enumerate(batches):
    for name in ("ours", "minimal") if i % 2 == 0 else ("minimal", "ours"):
        t0 = time.perf_counter()
        loss = lm_loss(models[name](x), y)
        opts[name].zero_grad(set_to_none=True)
        loss.backward()
        opts[name].step()
        if i >= 10:  # ten steps of warm-up
            seconds[name].append(time.perf_counter() - t0)
paired = [m / o for m, o in zip(seconds["minimal"], seconds["ours"])]
print(statistics.median(paired))  # the minimal GPT's time over ours, step by step"""  # mirrors bench_gpt_vs_minimal

_SHOWN_DDP = """import os, subprocess, sys

args = ("--steps 40 --batch-size 16 --block-size 128 --n-layer 4 --n-head 6 --d-model 192 "
        "--warmup 10 --eval-every 40 --no-final-eval --seed 0 --corpus python-docs").split()
train = ["-m", "transformer_course.train_gpt"]
runs = {  # command, PyTorch threads per process
    "1 process, 2 threads": ([sys.executable, *train, "--threads", "2"], 2),
    "1 process, 1 thread": ([sys.executable, *train, "--threads", "1"], 1),
    "2 processes, 1 thread each": (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *train], 1),
    "1 process, 2 half-batches": ([sys.executable, *train, "--threads", "2", "--accumulate", "2"], 2),
}
for name, (cmd, threads) in runs.items():
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    subprocess.run([*cmd, *args], check=True, env=env)  # prints its training time"""


def _fold(title: str, code: str, lang: str = "python", after: str = "") -> list[str]:
    """A block of code (or, with ``lang="text"``, a paragraph) folded behind its title, with a paragraph after
    it; the reader opens it to see how a number was measured, or an exercise's answer."""
    body = [code.rstrip("\n")] if lang == "text" else [f"```{lang}", code.rstrip("\n"), "```"]
    # the same toggle as the chapters' folded cells: "Show the code ..." or "Show the solution"
    if title.startswith("The code"):
        show, hide = "Show " + title[0].lower() + title[1:], "Hide the code"
    elif title == "Expected outcome":  # a prediction to test, not a measured answer
        show, hide = "Show what to expect", "Hide what to expect"
    elif title == "Solution and expected outcome":
        show, hide = "Show the code and what to expect", "Hide the code"
    else:
        show, hide = "Show the solution", "Hide the solution"
    # (inside a div.cell, so that the theme's rules for folded cells apply: one label at a time)
    return [
        '<div class="cell docutils container">',
        '<details class="admonition hide above-input">',
        '<summary aria-label="Toggle hidden content">',
        f'<p class="collapsed admonition-title">{show}</p>',
        f'<p class="expanded admonition-title">{hide}</p>',
        "</summary>",
        "",
        *body,
        *(["", after] if after else []),
        "",
        "</details>",
        "</div>",
        "",
    ]


def _code(*objects: object) -> str:
    """The source of the measuring functions, as they ran."""
    import inspect

    return "\n\n\n".join(inspect.getsource(o).rstrip("\n") for o in objects)


def _excerpt(obj: object, first: str, last: str) -> str:
    """The lines of ``obj``'s source (a function, or a script as a string) from the first that contains
    ``first`` to the next that contains ``last``: the measuring lines themselves, as they ran."""
    import inspect
    import textwrap

    src = (obj if isinstance(obj, str) else inspect.getsource(obj)).splitlines()
    i = next(n for n, line in enumerate(src) if first in line)
    j = next(n for n in range(i, len(src)) if last in src[n])
    return textwrap.dedent("\n".join(src[i : j + 1]))


def _render_machine(results: dict) -> list[str]:
    m = results["machine"]
    # which sections ran where: the main run's CPU, and those measured again later (on whatever the machine was)
    main = f"{m['cpu']}, {m['cores']} cores, {m['torch_threads']} PyTorch threads"
    where: dict[str, list[str]] = {}
    sc = results.get("scaling") or {}
    prec = results.get("precision") or {}

    def add(name: str, section: str) -> None:
        where.setdefault(name, []).append(section)

    if sc.get("device") and sc["device"]["cpu"] != m["cpu"]:
        add(
            f"{sc['device']['cpu']}, {sc['device']['cores']} cores, {sc['threads']} PyTorch threads",
            "attention's cost",
        )
    else:
        add(main, "attention's cost")
    kv = results.get("kv_cache") or {}
    if kv.get("device") and kv["device"]["cpu"] != m["cpu"]:
        add(f"{kv['device']['cpu']}, {kv['device']['cores']} cores, {THREADS} PyTorch threads", "generation")
    elif kv:
        add(main, "generation")
    cpu = prec.get("cpu")
    if cpu:
        name = f"{cpu['device']['cpu']}, {cpu['device']['cores']} cores, {cpu['device']['name'].rsplit(', ', 1)[-1]}"
        add(
            main if cpu["device"]["cpu"] == m["cpu"] else name.replace("threads", "PyTorch threads"),
            "precision, compilation and the limit",
        )
    chk = results.get("cpu_checks")
    if chk:
        name = f"{chk['device']['cpu']}, {chk['device']['cores']} cores, {THREADS} PyTorch threads"
        add(main if chk["device"]["cpu"] == m["cpu"] else name, "the profile and the autocast check")
    extra = results.get("extra_checks")
    if extra:
        name = f"{extra['device']['cpu']}, {extra['device']['cores']} cores, {THREADS} PyTorch threads"
        add(
            main if extra["device"]["cpu"] == m["cpu"] else name,
            "the online softmax, the graph break and the copy's bandwidth",
        )
    add(main, "the side-by-side comparisons")
    nm = results.get("notebooks_machine")
    if nm and _show_chapter_times(results):
        add(
            main
            if nm["cpu"] == m["cpu"]
            else f"{nm['cpu']}, {nm['cores']} cores, {nm['torch_threads']} PyTorch threads",
            "the chapters' run times",
        )
    ddp = results.get("ddp") or {}
    if ddp.get("device") and ddp["device"]["cpu"] != m["cpu"]:
        d = ddp["device"]
        add(f"{d['cpu']}, {d['cores']} cores, {THREADS} PyTorch threads", "several processes")
    elif ddp:
        add(main, "several processes")
    lines = ["## The machines", "", "| device | what was measured on it |", "|---|---|"]
    for name, sections in where.items():
        lines.append(f"| CPU: {name} | {', '.join(sections)} |")
    gpu_torch = None
    for dev, r in prec.items():
        if dev == "cuda":
            info = r["device"]
            gpu_torch = info["torch"]
            lines.append(
                f"| GPU: {info['name']} (CUDA {info.get('cuda')}, PyTorch {info['torch']}, Python {info['python']}; "
                f"host CPU: {info['cpu']}, {info['cores']} cores, which launches its kernels) "
                f"| precision, compilation and the limit"
                + (", the batch sweep" if (results.get("batch_sweep") or {}).get(dev) else "")
                + " |"
            )
    if "cuda" not in prec:
        lines.append("| GPU: none | |")
    lines += [
        "",
        (
            f"Software on the {m['cpu']}: Python {m['python']}, PyTorch {m['torch']}, "
            f"transformers {m.get('transformers', '?')}, {m['os']}."
            + "".join(
                f" On the {d['cpu']}: Python {d['python']}, PyTorch {d['torch']}."
                for d in {
                    r["device"]["cpu"]: r["device"]
                    for r in (prec.get("cpu"), results.get("cpu_checks"), sc)
                    if r and r.get("device") and r["device"].get("cpu") != m["cpu"] and "python" in r["device"]
                }.values()
            )
            + (
                f" The GPU ran another PyTorch ({gpu_torch}), so the comparisons of CPU and GPU (speeds, compile "
                "times) are also comparisons of two PyTorch versions."
                if gpu_torch and gpu_torch.split("+")[0] != m["torch"].split("+")[0]
                else ""
            )
        ),
        "",
    ]
    return lines


def _render_timing() -> list[str]:
    """How a timing is taken: the rules every number below follows, as code."""
    return [
        "## Timing correctly",
        "",
        (
            "Three things decide whether a timing means anything. The first calls of a function are slower than "
            "the rest (memory is allocated, kernels are chosen, a compiler runs), so they are run and thrown "
            "away. A GPU call returns as soon as its work is queued, so a timer that does not wait for the GPU "
            "measures the launch, not the work: `torch.cuda.synchronize()` waits. And a machine shared with other "
            "work is slow now and then, so the number to report is the median of several calls, which one slow "
            "call does not move."
        ),
        "",
        "```python",
        "import statistics, time",
        "import torch",
        "",
        "def time_it(fn, repeats=15, warmup=2):",
        "    for _ in range(warmup):",
        "        fn()",
        "    times = []",
        "    for _ in range(repeats):",
        "        # on a GPU: start with nothing queued,",
        "        # and wait for the work, not only its launch",
        "        if torch.cuda.is_available():",
        "            torch.cuda.synchronize()",
        "        t0 = time.perf_counter()",
        "        fn()",
        "        if torch.cuda.is_available():",
        "            torch.cuda.synchronize()",
        "        times.append(time.perf_counter() - t0)",
        "    return statistics.median(times)",
        "```",
        "",
        (
            "Without the second `synchronize()`, the timer stops when the work has been queued, not when it is "
            "done (PyTorch's notes on CUDA semantics, under asynchronous execution). The synchronising has a "
            "cost of its own: the CPU cannot queue the next call while the "
            "GPU still runs this one, which an ordinary training loop allows. The GPU training steps of the precision "
            "and compilation sections were timed this way, synchronised before and after, so their steps never "
            "overlap. The course's GPT waits for the GPU once per forward call in any case, synchronised or not: "
            "it checks its token ids by reading their smallest and largest value back into Python, and that read "
            "waits until the GPU has finished all the work queued before it (called the token-id check below). So "
            "a loop over the course's GPT that adds no synchronisation of its own still waits once per step."
        ),
        "",
        (
            "Most measurements below use one of four ways of timing, each a variant of `time_it`; the others "
            "(single calls timed alone, the total of a whole run, and the fastest of several repeats for the "
            "peaks) say how they were timed where they appear:"
        ),
        "",
        "| way | what one timing covers | reported | where |",
        "|---|---|---|---|",
        (
            "| calls in turn | one call of each function per round, who goes first rotating (for attention's "
            "cost, the explicit version first) | median over the rounds | attention's cost, the blocked loop, QKᵀ |"
        ),
        (
            "| steps in turn | one training step of each run per round, who goes first rotating; on a GPU "
            "synchronised before and after | median over the rounds | precision, compilation, the limit, the course's "
            "GPT against the minimal GPT |"
        ),
        (
            "| steps alone | one training step of one run, its runs one after the other; on a GPU synchronised "
            "before and after | median over the steps | compilation, the limit, the sweep (synced) |"
        ),
        (
            "| back to back | many steps with no synchronisation between them, as a training loop runs | mean "
            "over the steps | the sweep (loop) |"
        ),
        "",
        (
            "In turn, every run sees the machine in the same state, so a slow patch hits all of them alike; alone "
            "is closer to how one run trains. Two ways of timing the same step can disagree; "
            "the precision, compilation and limit sections count a difference between two runs only when it is "
            "larger than the gap between two ways of timing the same step. Each measurement is one run unless "
            "stated, with one seed, on the machine named; the "
            "sections say how far apart two timings of the same thing came out wherever that was measured."
        ),
        "",
    ]


def _render_scaling(sc: dict, main_cpu: str, extra: dict | None = None) -> list[str]:
    cpu = (sc.get("device") or {}).get("cpu", main_cpu)
    rows = sc["rows"]
    if "explicit_ms" not in rows[0]:
        return []
    # every quoted ratio is computed from the values the tables print
    rows = [
        {
            **r,
            "explicit_ms": round(r["explicit_ms"] * 1e3) / 1e3,
            "fused_ms": round(r["fused_ms"] * 1e3) / 1e3,
            **{k: _sv(r[k]) for k in ("explicit_peak_mib", "fused_peak_mib", "score_matrix_mib") if r.get(k)},
        }
        for r in rows
    ]
    first, last = rows[0], rows[-1]
    lines = [
        "## What attention costs as the sequence grows",
        "",
        (
            'Chapter 04 ("The price: $O(n^2)$") timed its explicit attention, which builds n×n matrices of '
            "scores and weights, against PyTorch's fused `torch.nn.functional.scaled_dot_product_attention`, "
            "which walks over blocks of keys with a running softmax so that no n×n matrix exists, and counted "
            "the bytes of the tensors each creates, at the same lengths as here. This section repeats the comparison "
            f"with three differences: it reports the median of {sc.get('repeats', 15)} calls instead of the "
            "fastest of 10, it times the course's `scaled_dot_product_attention` against the fused function's "
            "default choice of kernel "
            "(chapter 04 times its bare three lines against FlashAttention asked for by name), and it measures "
            "memory as the process sees it (its resident memory) instead of counting tensor by tensor; then it "
            "shows the fused kernel's idea in "
            f"{_words(len(_code(blocked_attention).splitlines()))} lines. Both versions are "
            f"timed on one head with d_k = {sc.get('d_k', 64)}, on the {cpu} with "
            f"{sc.get('threads', THREADS)} threads."
        ),
        "",
        "```{figure} figures/bench_scaling.png",
        (
            ":alt: Two log-log panels against sequence length n, explicit and fused attention in each: time (top) "
            "and peak extra memory (bottom), with a dashed slope-2 reference line through the explicit "
            "attention's point at n = 1024 and, for memory, the size of one n by n float32 matrix."
        ),
        f":width: {_shown_width(FIGURE)}px",
        "",
        (
            "Time (top) and peak extra memory (bottom) of one head's attention against sequence length, "
            "log-log. In both panels the dashed line has slope 2, the n² of the score matrix, drawn through the "
            "explicit attention's point at n = 1024; in the bottom panel the red dotted line is the size of one "
            "n×n float32 matrix."
        ),
        "```",
        "",
        "The times drawn in Fig. A.1, in microseconds:",
        "",
        "| n | explicit (µs) | fused (µs) | explicit ÷ fused |",
        "|---:|---:|---:|---:|",
    ]

    def mib(v: float | None) -> str:
        return "n/a" if v is None else _sig(v)

    for r in rows:
        lines.append(
            f"| {r['n']} | {_n(r['explicit_ms'] * 1e3)} | {_n(r['fused_ms'] * 1e3)} | "
            f"{r['explicit_ms'] / r['fused_ms']:.2f}× |"
        )
    lines += ["", "| n | explicit peak (MiB) | fused peak (MiB) | one n×n matrix (MiB) |", "|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['n']} | {mib(r['explicit_peak_mib'])} | {mib(r['fused_peak_mib'])} | {mib(r['score_matrix_mib'])} |"
        )
    lines += [
        "",
        (
            f"How measured: time is the median of {sc.get('repeats', 5)} calls after 2 of warm-up, the two "
            "taking turns; peak extra memory is how much the process's resident "
            "memory grew while one call ran, in a fresh process for each length; the last column is the size of "
            "one n×n matrix of float32 numbers. The process's memory growth also includes what the memory "
            "allocator keeps and the libraries add, so these figures are larger than chapter 04's exact "
            "counts. Folded boxes, the first at the end of this section, show the code that took each section's "
            "measurements."
        ),
        "",
    ]
    # the reading: the slope over the whole range for both, and the largest single doubling
    slopes = {
        impl: math.log(last[f"{impl}_ms"] / first[f"{impl}_ms"]) / math.log(last["n"] / first["n"])
        for impl in ATTENTION_IMPLS
    }
    text = [
        (
            f"Over the whole range, from n = {first['n']} to {last['n']}, the explicit attention's time grew as "
            f"about $n^{{{slopes['explicit']:.1f}}}$ and the fused kernel's as about "
            f"$n^{{{slopes['fused']:.1f}}}$ (n² alone would give 4× per doubling of n). These are the medians of "
            "one run, and a single doubling moves more from run to run than the slope over the whole range does (a "
            "second timing of the explicit attention, in the next subsection, shows by how "
            "much), so only the slope and the largest step are read here."
        )
    ]
    growth = [(a["n"], b["n"], b["explicit_ms"] / a["explicit_ms"]) for a, b in zip(rows, rows[1:], strict=False)]
    hi = max(growth, key=lambda t: t[2])
    if hi[1] == last["n"] and hi[2] > 4.5:
        prev = rows[-2]
        text.append(
            f"The largest was the last doubling, from n = {prev['n']} to {last['n']}: it multiplied the explicit "
            f"attention's time by {_x(hi[2])}, while the fused kernel, which holds no n×n matrix, grew "
            f"{_x(last['fused_ms'] / prev['fused_ms'])} there."
        )
    speed_last = last["explicit_ms"] / last["fused_ms"]
    speed_first = first["explicit_ms"] / first["fused_ms"]
    text.append(
        f"The fused kernel was {_x(speed_first)} as fast at n = {first['n']} and {_x(speed_last)} as fast at "
        f"n = {last['n']}. It does the same n² arithmetic, so its time grows too, but it never writes an n×n "
        "matrix to memory, as the memory table shows."
    )
    lines += [" ".join(text[:-1]), ""]
    lines += _fresh_vs_buffer((extra or {}).get("fresh_vs_buffer"), cpu)
    lines += [text[-1], ""]
    text = []
    if last["explicit_peak_mib"] and last["fused_peak_mib"] is not None:
        per = last["explicit_peak_mib"] / last["score_matrix_mib"]
        fused = last["fused_peak_mib"]
        starker = fused > 0 and last["explicit_peak_mib"] / fused > speed_last
        text.append(
            ("In memory the difference is starker" if starker else "In memory")
            + f": at n = {last['n']} the explicit version's peak was "
            f"{_sig(last['explicit_peak_mib'])} MiB, {per:.2f} times one n×n matrix, while the fused kernel's was "
            f"{_sig(fused)} MiB"
            + (
                f", {_x(last['explicit_peak_mib'] / fused)} less: it never holds the matrix."
                if fused > 0.05
                else ": it never holds the matrix."
            )
        )
        larger = [
            r
            for r in rows[:-1]
            if r.get("explicit_peak_mib") and r["explicit_peak_mib"] / r["score_matrix_mib"] > per + 0.25
        ]
        text.append(
            f"The {per:.2f} times fits two n×n matrices alive at once, as chapter 04 counts them"
            + (
                "; at shorter lengths the ratio was larger ("
                + ", ".join(f"{r['explicit_peak_mib'] / r['score_matrix_mib']:.2f} at n = {r['n']}" for r in larger)
                + "), presumably because what the allocator and the libraries add weighs more against a small matrix."
                if larger
                else "."
            )
        )
    text.insert(
        1 if len(text) > 1 else len(text),
        "This is why the course's `MultiHeadAttention` can take the fused path when the weights are not needed "
        "(built with `use_sdpa=True` and called with `need_weights=False`; by default it takes the explicit one), "
        "and the GPT of chapter 10 always does: the explicit version is for reading and for looking at the weights.",
    )
    lines += [" ".join(text[:2]), ""] + ([" ".join(text[2:]), ""] if text[2:] else [])
    lines += _render_online_softmax((extra or {}).get("online_softmax"), cpu, rows)
    fence = "```"
    lines += _fold(
        "The code that measured attention's time and memory",
        "\n".join(
            [
                (
                    "The timing of the first table, here at n = 4096: in every round each version is called "
                    "once, and the rounds after the two of warm-up are kept; the table shows the median."
                ),
                "",
                f"{fence}python",
                _SHOWN_SCALING,
                fence,
                "",
                (
                    "The same for any number of functions, rotating who goes first; it timed the blocked version "
                    "against the other two and QKᵀ into a fresh result against QKᵀ into a buffer:"
                ),
                "",
                f"{fence}python",
                _SHOWN_TIME_IN_TURN,
                fence,
                "",
                (
                    "The memory measurement, run in a fresh process for each version and length (`attend` is "
                    "one of the versions): it resets the process's high-water mark of resident memory, runs one "
                    "attention call and prints how much the mark rose."
                ),
                "",
                f"{fence}python",
                _SHOWN_PEAK,
                fence,
            ]
        ),
        lang="text",
    )
    return lines


_NUMBER_WORDS = {
    12: "twelve",
    14: "fourteen",
    15: "fifteen",
    16: "sixteen",
    17: "seventeen",
    18: "eighteen",
    19: "nineteen",
    20: "twenty",
}


def _words(k: int) -> str:
    return _NUMBER_WORDS.get(k, str(k))


def _med_range(ts: list[float], digits: int = 1) -> str:
    """'median (min–max)' of a list of times."""
    # word joiners around the dash: a narrow cell breaks the line before the bracket, not inside it
    return f"{statistics.median(ts):.{digits}f} ({min(ts):.{digits}f}\u2060–\u2060{max(ts):.{digits}f})"


def _fresh_vs_buffer(rows: list[dict] | None, cpu: str) -> list[str]:
    """QK^T into a fresh result against into a buffer: the part of the explicit attention's last jump that
    obtaining fresh memory explains."""
    if not rows or len(rows) < 2:
        return []
    a, b = rows[0], rows[-1]
    # the medians as the table prints them (2 decimals), so that the quoted ratios are the printed ones
    med = {(r["n"], k): round(statistics.median(r[f"{k}_ms"]), 2) for r in rows for k in ("fresh", "buffer")}
    g_fresh = med[b["n"], "fresh"] / med[a["n"], "fresh"]
    g_buf = med[b["n"], "buffer"] / med[a["n"], "buffer"]
    gap = med[b["n"], "fresh"] - med[b["n"], "buffer"]
    lines = [
        (
            "Chapter 04 separates one cause of such a jump: it times QKᵀ alone, written into a fresh result on "
            "every call, as the explicit attention does, and written into a matrix allocated once beforehand "
            "(`torch.matmul(q, kᵀ, out=buffer)`); the gap is what obtaining fresh memory costs. Measured the same "
            f"way here, on the {cpu}, the two taking turns call by call "
            f"({len(a['fresh_ms'])} calls each after 2 of warm-up; median, and in brackets the fastest and slowest "
            "call):"
        ),
        "",
        "| n | QKᵀ into a fresh result (ms) | QKᵀ into the buffer (ms) |",
        "|---:|---:|---:|",
        *[f"| {r['n']} | {_med_range(r['fresh_ms'], 2)} | {_med_range(r['buffer_ms'], 2)} |" for r in rows],
        "",
        (
            f"Into the buffer QKᵀ grew {_x(g_buf)} from n = {a['n']} to {b['n']}"
            + (", about the 4× of its arithmetic" if 3.0 <= g_buf <= 5.0 else "")
            + f"; into a fresh result it grew {_x(g_fresh)}, and at n = {b['n']} obtaining the fresh memory took "
            f"{gap:.0f} of its {med[b['n'], 'fresh']:.0f} ms. So part of the explicit attention's last jump is the "
            "price of fresh memory for its n×n matrices, as in chapter 04."
        ),
        "",
    ]
    return lines


def _render_online_softmax(rows: list[dict] | None, cpu: str, scaling: list[dict] | None = None) -> list[str]:
    """The fused kernel's idea, a dozen lines of blocked attention, checked against the explicit one."""
    lines = [
        f"### The fused kernel's idea in {_words(len(_code(blocked_attention).splitlines()))} lines",
        "",
        (
            "A softmax over a row of scores needs the row's maximum (subtracted before `exp`, so that nothing "
            "overflows) and the sum of the exponentials, which seems to need the whole row at once. The online "
            "softmax keeps both as running values instead. For each block of keys it computes that block's "
            "scores, raises the running maximum if the block holds a larger one, rescales everything summed so "
            "far by exp(old maximum − new maximum), and adds the block's terms. The scores are computed one n × "
            "block matrix at a time, never as the whole n × n matrix. The running normaliser is Milakov and "
            "Gimelshein's (2018, *Online "
            "normalizer calculation for softmax*, [arXiv:1805.02867](https://arxiv.org/abs/1805.02867)); "
            "FlashAttention (Dao et al., 2022, *FlashAttention: Fast and Memory-Efficient Exact Attention with "
            "IO-Awareness*, [arXiv:2205.14135](https://arxiv.org/abs/2205.14135)) builds attention on it, and "
            "keeps each block in the GPU's fast on-chip memory while it works on it."
        ),
        "",
        *(
            [
                "```{figure} figures/bench_online_softmax.png",
                (
                    ":alt: Left, the n by n score matrix as four column blocks of keys: two grey blocks marked done, "
                    "an orange block j holding its n by 128 scores, a faded dashed block marked next. An arrow starts "
                    "inside block j, passes the faded block and, labelled times fix plus block, reaches three column "
                    "bars on the right, m, s and out (n by d), the running state."
                ),
                f":width: {_shown_width(FIGURE_ONLINE)}px",
                "",
                (
                    "The online softmax over blocks of keys: block j's n × 128 scores, computed one block at a time, "
                    "update each "
                    "query's running maximum m, running sum s and running output out, rescaling what was summed "
                    "under the old maximum by fix. The earlier blocks are already folded into m, s and out; the "
                    "result is out / s after the last block."
                ),
                "```",
                "",
            ]
            if FIGURE_ONLINE.exists()
            else []
        ),
        "The loop of Fig. A.2 in PyTorch, with the same names:",
        "",
        "```python",
        _code(blocked_attention),
        "```",
        "",
    ]
    if not rows:
        return lines
    # the peaks as the table prints them
    rows = [{**r, **{k: _sv(r[k]) for k in ("explicit_peak_mib", "blocked_peak_mib")}} for r in rows]
    big = rows[-1]
    first = {r["n"]: r.get("explicit_peak_mib") for r in scaling or []}
    differ = [
        (r["n"], first[r["n"]], r["explicit_peak_mib"])
        for r in rows
        if first.get(r["n"]) is not None and _sig(first[r["n"]]) != _sig(r["explicit_peak_mib"])
    ]
    again = (
        "; the explicit version's peak was measured again here, "
        + ", ".join(f"{_sig(b)} MiB at n = {n} against {_sig(a)} MiB in the first memory table" for n, a, b in differ)
        if differ
        else ""
    )
    lines += [
        "| n | largest difference | explicit peak (MiB) | blocked peak (MiB) |",
        "|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']} | {r['max_abs_diff']:.0e} | {_sig(r['explicit_peak_mib'])} | {_sig(r['blocked_peak_mib'])} |"
        )
    lines += [
        "",
        (
            f"How measured: the same inputs as above (one head, d_k = 64, no mask), blocks of {big['block']} keys, "
            f"on the {cpu}; the largest absolute difference between the two outputs; peak extra memory measured as "
            f"above, in a fresh process for each version and length{again}."
        ),
        "",
        (
            f"The two outputs agree to {max(r['max_abs_diff'] for r in rows):.0e}, the rounding of float32: the "
            "running maximum and sum give the softmax exactly, only added up in another order. At n = "
            f"{big['n']} the blocked version's peak was {_sig(big['blocked_peak_mib'])} MiB against the explicit "
            f"one's {_sig(big['explicit_peak_mib'])} MiB ({_x(big['explicit_peak_mib'] / big['blocked_peak_mib'])} "
            "less), about "
            f"{big['blocked_peak_mib'] / (big['n'] * big['block'] * 4 / 2**20):.0f} times one n × block float32 "
            f"matrix ({big['n'] * big['block'] * 4 / 2**20:.0f} MiB at n = {big['n']}). "
            f"{_cap(_x(big['n'] / rows[0]['n']))} the length took "
            f"{_x(big['blocked_peak_mib'] / rows[0]['blocked_peak_mib'])} the memory: from these two lengths, "
            "consistent with a peak that grows in proportion to n, not n²."
        ),
        "",
    ]
    if all("timings" in r for r in rows):
        lines += _online_timing(rows, cpu, scaling)
    return lines


def _online_timing(rows: list[dict], cpu: str, scaling: list[dict] | None = None) -> list[str]:
    """The blocked loop's time against the explicit and the fused attention, all three taking turns call by
    call: medians with their spread, and what held in every round."""
    lines = [
        (
            f"And the time? All three versions, the explicit, the blocked and the fused, were timed on the {cpu} "
            "taking turns call by call, with 2 PyTorch threads and again with 1 (median, and in brackets the "
            "fastest and slowest call; the last column: the median and range of the blocked version's time over "
            "the explicit one's in the same round):"
        ),
        "",
        "| n | threads | explicit (ms) | blocked (ms) | fused (ms) | blocked ÷ explicit |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    facts = []
    rounds = 0
    fused_first = True
    last_all_faster = False
    for r in rows:
        per_n = []
        for threads, t in r["timings"].items():
            ratio = [b / e for b, e in zip(t["blocked"], t["explicit"], strict=True)]
            rounds = len(ratio)
            fused_first &= all(f < min(b, e) for f, b, e in zip(t["fused"], t["blocked"], t["explicit"], strict=True))
            per_n.append(ratio)
            lines.append(
                f"| {r['n']} | {threads} | {_med_range(t['explicit'])} | {_med_range(t['blocked'])} | "
                f"{_med_range(t['fused'])} | {statistics.median(ratio):.2f} "
                f"({min(ratio):.2f}\u2060–\u2060{max(ratio):.2f}) |"
            )
        allr = [x for ratio in per_n for x in ratio]
        faster = sum(x < 1 for x in allr)
        last_all_faster = faster == len(allr)
        if faster == len(allr):
            facts.append(
                f"at n = {r['n']} the blocked loop was faster than the explicit version in every round, with both "
                f"thread counts ({min(allr):.2f}× to {max(allr):.2f}× its time)"
            )
        elif faster == 0:
            facts.append(
                f"at n = {r['n']} the blocked loop was slower than the explicit version in every round "
                f"({min(allr):.2f}× to {max(allr):.2f}× its time)"
            )
        else:
            facts.append(
                f"at n = {r['n']} the blocked loop was faster than the explicit version in {faster} of the "
                f"{len(allr)} rounds and "
                f"slower in the rest, from {min(allr):.2f}× to {max(allr):.2f}× its time, so no ratio holds there"
            )
    # the explicit version with the first table's thread count is a second timing of that table's
    first = {r["n"]: r["explicit_ms"] for r in scaling or []}
    again = [
        (r["n"], statistics.median(r["timings"][str(THREADS)]["explicit"]), first[r["n"]])
        for r in rows
        if r["n"] in first and str(THREADS) in r["timings"]
    ]
    text = (
        f"How measured: the same inputs as above, {rounds} rounds after 2 of warm-up, in one process"
        + (
            f"; the explicit version with {THREADS} threads is a second timing of the first table's, and came out at "
            + " and ".join(f"{b:.1f} against {a:.1f} ms at n = {n}" for n, b, a in again)
            + ", so the first table's ratios and doublings are those of its one run"
            if again
            else ""
        )
        + ". Calls vary a great deal from round to round (see the brackets), so only what held in every round is "
        "read here. "
    )
    if fused_first:
        text += "In every round the fused kernel was the fastest of the three. "
    text += _cap("; ".join(facts)) + "."
    lines += ["", text, ""]
    if fused_first and last_all_faster:
        lines += [
            (
                f"The takeaway: at n = {rows[-1]['n']} the blocked loop, which holds no n×n matrix, beat the explicit "
                "version in every round, and the fused kernel, the same kind of loop inside one compiled kernel, "
                "beat both."
            ),
            "",
        ]
    return lines


def _render_kv(kv: dict, cpu: str) -> list[str]:
    # the times as the table prints them (3 significant figures), so that every quoted ratio is the printed one
    rows = [{**r, "no_cache_s": _sv(r["no_cache_s"]), "cache_s": _sv(r["cache_s"])} for r in kv["rows"]]
    rows = [{**r, "speedup": r["no_cache_s"] / r["cache_s"]} for r in rows]
    first, last = rows[0], rows[-1]
    lines = [
        "## Generation: the KV cache",
        "",
        (
            f"Chapter 10's `GPT` class ({kv['model']}{'' if 'block' in kv['model'] else ', block 1024'}, "
            "randomly initialised) generates greedily from a one-token "
            "prompt, so after k new tokens its context is k + 1 tokens long. Without a cache, every new token runs "
            "the model over the whole context again; with the cache of chapter 10, the keys and values of earlier "
            "positions are kept and only the new token goes through the model. Chapter 10 timed this for up to 127 "
            f"new tokens; here the context grows to {last['new_tokens'] + 1} tokens, and the cache's memory is "
            "counted."
        ),
        "",
        "| new tokens (context at the end) | without cache (s) | with cache (s) | speed-up |",
        "|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['new_tokens']} ({r['new_tokens'] + 1}) | {_sig(r['no_cache_s'])} | {_sig(r['cache_s'])} | "
            f"{_x(r['speedup'])} |"
        )
    more = last["new_tokens"] / first["new_tokens"]
    steps_up = [b["no_cache_s"] / a["no_cache_s"] for a, b in zip(rows, rows[1:], strict=False)]
    per_token = last["cache_s"] / first["cache_s"] / more
    more_text = _WORDS.get(int(more), f"{more:g} times") if more == int(more) else f"{more:.1f} times"
    kcfg = _parse_config(kv["model"])
    kv_bytes = 2 * kcfg.get("layers", 0) * kcfg.get("d_model", 0) * 4
    lines += [
        "",
        f"How measured: median of three generations after one of warm-up, on the {cpu}.",
        "",
        *(
            [
                "```{figure} figures/bench_kv_cache.png",
                (
                    ":alt: Log-log plot of generation time in seconds against new tokens, 64 to 512: the line "
                    "without the cache rises steeply, bending up towards a dashed slope-2 guide; the line with the "
                    "cache follows a dashed slope-1 guide; the gap between them widens to the right."
                ),
                f":width: {_shown_width(FIGURE_KV)}px",
                "",
                (
                    "Generation time against new tokens, log-log. Dashed: slope 2 (time in proportion to the square "
                    "of the tokens) through the first point without the cache, slope 1 (in proportion to the "
                    "tokens) through the first point with it."
                ),
                "```",
                "",
            ]
            if FIGURE_KV.exists()
            else []
        ),
        (
            f"In Fig. A.3, generating {more_text} as many tokens ({first['new_tokens']} to {last['new_tokens']}) took "
            f"{_x(last['no_cache_s'] / first['no_cache_s'])} as long without the cache and "
            f"{_x(last['cache_s'] / first['cache_s'])} as long with it. Without the cache the k-th token costs a "
            "pass over all k positions"
            + (
                ": each doubling of the tokens cost more than the one before ("
                + ", ".join(_x(g) for g in steps_up)
                + "), so the line steepens towards the slope-2 guide of the figure. "
                if all(a < b for a, b in zip(steps_up, steps_up[1:], strict=False))
                else ". "
            )
            + f"With the cache the cost per token stayed nearly flat: on average {_x(per_token)} as much per token "
            f"over {last['new_tokens']} tokens as over {first['new_tokens']}. "
            "The speed-up grows with the context: "
            f"{_x(first['speedup'])} at {first['new_tokens'] + 1} tokens, {_x(last['speedup'])} at "
            f"{last['new_tokens'] + 1}."
            + (
                f" The cache's price is memory: every layer keeps a key and a value of d_model float32 numbers per "
                f"position, 2 × {kcfg['layers']} × {kcfg['d_model']} × 4 bytes = "
                f"{kv_bytes // 1024} KiB per token for this model, {kv_bytes * (last['new_tokens'] + 1) / 2**20:.1f} "
                f"MiB at {last['new_tokens'] + 1} tokens, growing in proportion to the context."
                if kcfg.get("layers") and kcfg.get("d_model")
                else ""
            )
        ),
        "",
        *_fold("The code that measured generation", _SHOWN_KV),
    ]
    return lines


_PROFILE_PARTS = (
    ("matmul", "matrix multiplications"),
    ("attention", "fused attention (forward and backward)"),
    ("casts", "copies and casts (`copy_`, `to`)"),
    ("optimiser", "optimiser step (AdamW)"),
    ("rest", "everything else (layer norm, GELU, softmax of the loss, additions, ...)"),
)


def _render_autocast(chk: dict | None) -> str:
    """What autocast does, as checked on the CPU (or, without the check, only what holds on every device)."""
    head = (
        "`torch.autocast(device.type, dtype=torch.bfloat16)` decides operation by operation which format to "
        "compute in; the weights themselves stay float32, and so do their gradients and the optimiser's update."
    )
    dt = (chk or {}).get("autocast_dtypes")
    if not dt:
        return head
    plain = {k: v for k, v in dt.items() if " of " not in k}
    names = {
        "scaled_dot_product_attention": "the fused attention",
        "layer_norm": "layer norm",
        "gelu": "GELU",
        "cross_entropy": "the cross-entropy loss",
    }

    def listing(ops: list[str]) -> str:
        ops = [names.get(o, o) for o in ops]
        return ", ".join(ops[:-1]) + " and " + ops[-1] if len(ops) > 1 else ops[0]

    low = [k for k, v in plain.items() if v == "bfloat16"]
    high = [k for k, v in plain.items() if v == "float32"]
    text = (
        head
        + f"\n\nChecked on the CPU ({chk['device']['cpu']}, PyTorch {chk['device']['torch']}), from float32 inputs: "
    )
    parts = []
    if low:
        parts.append(f"{listing(low)} returned bfloat16")
    if high:
        parts.append(f"{listing(high)} returned float32")
    text += "; ".join(parts) + "."
    follows = [
        k
        for k in ("softmax", "layer_norm", "gelu")
        if plain.get(k) == "float32" and dt.get(f"{k} of bfloat16") == "bfloat16"
    ]
    if follows:
        text += (
            f" {_cap(listing(follows))} returned bfloat16 when given bfloat16: on the CPU they follow the "
            "format of their input. In the course's GPT, layer norm reads the residual stream, which stays float32 "
            "(a bfloat16 output added to a float32 tensor gives float32), while GELU reads a linear layer's "
            "bfloat16 output" + (", so its output is bfloat16 too (7 bits of mantissa)." if "gelu" in follows else ".")
        )
    if dt.get("cross_entropy of bfloat16"):
        text += (
            f" The cross-entropy loss, given bfloat16 logits (the output of the model's last linear layer), "
            f"returned {dt['cross_entropy of bfloat16']}."
        )
    text += (
        " On a GPU autocast's lists differ (PyTorch's automatic mixed precision documentation gives them per device)."
    )
    return text


def _render_profile(chk: dict) -> list[str]:
    prof = chk["profile"]
    f, b = prof["fp32"]["seconds_per_step"], prof["bf16"]["seconds_per_step"]
    lines = [
        "| part of one step | float32 (ms) | bfloat16 autocast (ms) |",
        "|---|---:|---:|",
    ]
    for key, label in _PROFILE_PARTS:
        lines.append(f"| {label} | {f[key] * 1e3:.1f} | {b[key] * 1e3:.1f} |")
    lines.append(f"| total | {sum(f.values()) * 1e3:.1f} | {sum(b.values()) * 1e3:.1f} |")
    return lines


def _render_precision(prec: dict, chk: dict | None = None, sweep: dict | None = None) -> list[str]:
    lines = [
        "## Precision: bfloat16",
        "",
        (
            "Every number so far was a float32: 8 bits of exponent, 23 of mantissa. bfloat16 keeps the 8 exponent "
            "bits (the same range, so no loss scaling is needed) and only 7 of the mantissa, in half the bytes. "
            + _render_autocast(chk)
        ),
        "",
        "```python",
        "with torch.autocast(device.type, dtype=torch.bfloat16):",
        "    loss = lm_loss(model(x), y)",
        "loss.backward()",
        "opt.step()",
        "```",
        "",
    ]
    said_config = None
    for dev, rec in prec.items():
        v = rec["variants"]
        base = v.get("ours_fp32_eager")
        if not base or "error" in base:
            continue
        model = (
            "The same model"
            if rec["config"] == said_config
            else f"The benchmark model, {_config_phrase(rec['config'])}"
        )
        said_config = rec["config"]
        lines += [
            (
                f"{model}, {_n(rec['parameters'])} parameters, trained for "
                f"{rec['steps']} steps of {rec['batch']} windows"
                + (
                    " of 128 characters of Python's reference documentation (the last tenth "
                    "held out for the validation loss)"
                    if model != "The same model"
                    else ""
                )
                + f" from the same weights on the same batches with AdamW, on {_device_label(dev, rec)}:"
            ),
            "",
            "| run | tokens/s (× float32) | val. loss (Δ) |",
            "|---|---:|---:|",
        ]
        for key in ("ours_fp32_eager", "ours_bf16_eager", "ours_fp32_compiled", "ours_bf16_compiled"):
            r = v.get(key)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {_VARIANT_LABEL[key]} | not available here: {r['error'][:120]} | |")
                continue
            diff = (
                "ref."
                if r is base
                else f"{round(r['val_loss'], 4) - round(base['val_loss'], 4):+.4f}".replace(
                    "-0.0000", "0.0000"
                ).replace("+0.0000", "0.0000")
            )
            lines.append(
                f"| {_VARIANT_LABEL[key]} | {_n(r['tokens_per_s'])} ({_x(r['tokens_per_s'] / base['tokens_per_s'])}) "
                f"| {r['val_loss']:.4f} ({diff}) |"
            )
        sync = " synchronised before and after every step," if dev == "cuda" else ""
        lines += [
            "",
            (
                f"How measured: after the {rec['steps']} steps, every run took {rec['timing_rounds']} more, the runs "
                f"taking turns step by step so that all see the machine in the same state;{sync} tokens/s is at the "
                f"median of those steps after {rec['warmup_steps']} of warm-up. The validation loss (in float32, on "
                f"the same held-out windows, one seed) is the one after the {rec['steps']} steps; Δ is the "
                "difference of the printed losses."
            ),
            "",
        ]
        bf, bfc, fc = v.get("ours_bf16_eager"), v.get("ours_bf16_compiled"), v.get("ours_fp32_compiled")
        text = []
        peaks = rec["peak_flops"]
        ok_bf = bf and "error" not in bf
        if ok_bf:
            ratio = bf["tokens_per_s"] / base["tokens_per_s"]
            mm = _x(peaks["bf16"] / peaks["fp32"])
            first_dev = dev == next(iter(prec))
            text.append(
                "In the table, with the steps timed in turn, bfloat16 autocast ran at "
                f"{_x(ratio)} the speed of float32, although the fastest bfloat16 "
                "matmul measured on this device"
                + (" (the best of a few shapes)" if first_dev else "")
                + f" ran {mm} as fast as the fastest float32 one."
            )
        if dev == "cpu" and ok_bf and chk and "step_s" in chk.get("profile", {}).get("fp32", {}):
            shapes = chk.get("matmul_shapes", {})
            own = [(k, s) for k, s in shapes.items()]
            f_prof, b_prof = chk["profile"]["fp32"]["seconds_per_step"], chk["profile"]["bf16"]["seconds_per_step"]
            if own:
                text.append(
                    "Measured again alongside the profile below, the model's own products ran this much faster in "
                    "bfloat16: "
                    + ", ".join(
                        f"({m}×{k})·({k}×{p}) {_x(s['ratio'])}"
                        for (m, k, p), s in ((tuple(key.split("x")), s) for key, s in own)
                    )
                    + "."
                )
            lines += [" ".join(text), ""]
            text = []
            pf, pb = chk["profile"]["fp32"], chk["profile"]["bf16"]
            lines += [
                (
                    "Where the time goes, from the profiler's time per operation, in milliseconds per step "
                    "(Fig. A.4 and the table under it):"
                ),
                "",
                *(
                    [
                        "```{figure} figures/bench_profile.png",
                        (
                            ":alt: Two horizontal stacked bars, float32 on top and bfloat16 below, of the "
                            "milliseconds of one training step split into matmuls, attention, casts, optimiser "
                            "and the rest: in bfloat16 the matmul segment is much shorter and the attention "
                            "segment much longer than in float32."
                        ),
                        f":width: {_shown_width(FIGURE_PROFILE)}px",
                        "",
                        (
                            "One training step on the CPU, part by part (the table below): bfloat16 shortens the "
                            "matrix multiplications and lengthens the fused attention."
                        ),
                        "```",
                        "",
                    ]
                    if FIGURE_PROFILE.exists()
                    else []
                ),
                *_render_profile(chk),
                "",
                (
                    f"How measured: on the {chk['device']['cpu']}, a copy of the same model, initialised from the "
                    "same seed, trained from the start on the first 400,000 characters of the training text; after 3 "
                    f"steps of warm-up, {chk['profile_steps']} steps of each format under the profiler, the two "
                    "formats taking turns, each profiled step following an unprofiled one of the same format, which "
                    f"was timed. Unprofiled, a step took {pf['step_s'] * 1e3:.0f} ms in float32 and "
                    f"{pb['step_s'] * 1e3:.0f} ms in bfloat16: {_x(pf['step_s'] / pb['step_s'])} as fast in "
                    f"bfloat16, against the table's {_x(bf['tokens_per_s'] / base['tokens_per_s'])}, measured on "
                    "other steps and in another arrangement."
                ),
                "",
                *_fold(
                    "The code that measured the profile",
                    _SHOWN_PROFILE,
                ),
            ]

            def change(key: str, f_prof: dict = f_prof, b_prof: dict = b_prof) -> str:
                a, b = round(f_prof[key] * 1e3, 1), round(b_prof[key] * 1e3, 1)  # as the table prints them
                if b > 0 and a / b >= 1.1:
                    how = f"{_x(a / b)} as fast"
                elif a > 0 and b / a >= 1.1:
                    how = f"{_x(b / a)} as long"
                else:
                    how = "about the same"
                return f"{a:.1f} → {b:.1f} ms ({how})"

            labels = {
                "matmul": "the matrix multiplications",
                "attention": "the fused attention",
                "casts": "copies and casts",
                "optimiser": "the optimiser",
                "rest": "everything else",
            }
            d_tot = sum(f_prof.values()) - sum(b_prof.values())
            lines += [
                "Part by part, from float32 to bfloat16: "
                + "; ".join(f"{labels[k]} {change(k)}" for k, _ in _PROFILE_PARTS)
                + f". In all, the profiled step was {abs(d_tot) * 1e3:.0f} ms "
                + ("shorter" if d_tot > 0 else "longer")
                + ".",
                "",
            ]
            d_att = b_prof["attention"] - f_prof["attention"]
            if d_att > 0.1 * f_prof["attention"] and d_att > b_prof["casts"]:
                bwd = [
                    (pf["top_ops_ms"].get(k, 0.0), pb["top_ops_ms"][k])
                    for k in pb.get("top_ops_ms", {})
                    if "attention" in k and "backward" in k
                ]
                fwd = [
                    (pf["top_ops_ms"].get(k, 0.0), pb["top_ops_ms"][k])
                    for k in pb.get("top_ops_ms", {})
                    if "attention" in k and "backward" not in k
                ]
                kernels = ""
                if bwd and bwd[0][0]:
                    kernels = (
                        f": PyTorch's bfloat16 attention backward kernel on this CPU took {_x(bwd[0][1] / bwd[0][0])} "
                        f"the time of its float32 one ({bwd[0][0]:.1f} → {bwd[0][1]:.1f} ms)"
                    )
                    if fwd and fwd[0][0]:
                        fa, fb = fwd[0]
                        kernels += (
                            f", while the forward kernel took about the same ({fa:.1f} → {fb:.1f} ms)"
                            if abs(fb / fa - 1) < 0.1
                            else f", the forward kernel {fa:.1f} → {fb:.1f} ms"
                        )
                text.append(
                    "What held bfloat16 back on this CPU is the fused attention, which took "
                    f"{d_att * 1e3:.0f} ms more a step than in float32" + kernels + ". The casts "
                    "that autocast adds cost little: the float32 step copies too, and the difference is about "
                    f"{(b_prof['casts'] - f_prof['casts']) * 1e3:.1f} ms a step."
                )
        if bfc and "error" not in bfc and fc and "error" not in fc:
            text.append(
                f"Compiled, bfloat16 ran at {_x(bfc['tokens_per_s'] / fc['tokens_per_s'])} the speed of compiled "
                "float32."
            )
        keys = ("ours_fp32_eager", "ours_bf16_eager", "ours_fp32_compiled", "ours_bf16_compiled")
        if dev == "cuda" and sweep and all(k in v and "error" not in v[k] for k in keys):
            lines += [" ".join(text), ""]
            text = [
                (
                    "Whether bfloat16 ever pays on this GPU, and at what size, is the subject of "
                    '"bfloat16 on the GPU, revisited", after the larger batches of the section on the limit.'
                )
            ]
        if ok_bf:
            if text:  # the loss in a paragraph of its own
                lines += [" ".join(text), ""]
                text = []
            # from the losses as the table prints them (4 decimals), so that a reader's subtraction agrees
            diffs = [
                round(r["val_loss"], 4) - round(base["val_loss"], 4)
                for r in (bf, bfc)
                if r and "error" not in r and r.get("bf16")
            ]
            worst = max(abs(d) for d in diffs)
            signs = {d > 0 for d in diffs if d != 0}
            text.append(
                f"After {rec['steps']} steps from one seed, bfloat16's validation loss differed from float32's by "
                + " and ".join(f"{d:+.4f}" for d in diffs)
                + (" (eager and compiled)" if len(diffs) == 2 else "")
                + f", at most {worst / base['val_loss'] * 100:.1f} % of it"
                + (", with the sign changing between the two" if len(signs) > 1 else "")
                + ". This shows only that bfloat16 did not visibly hurt this short run."
            )
        if text:
            lines += [" ".join(text), ""]
    lines += _fold(
        "The code that measured precision, compilation and the fastest matmul",
        _SHOWN_PRECISION + "\n\n\n" + _SHOWN_PEAK_MATMUL,
        after=(
            "`make_step` builds one training step, under bfloat16 autocast or not; `timed` times one step. "
            "Each run first trains alone on the batches of text, one run after the other: its steps give the "
            "first step's extra time (compilation) and the step time alone, and the validation loss is taken "
            "after them. Then every run "
            "steps in turn, the order rotating, so all of them see the same machine. A minimal nanoGPT-style GPT "
            "with the same configuration, compared in the compilation section, is run the same way. `matmul_flops` "
            "gives the speed "
            "of one matrix product; the fastest over a few shapes is the peak the shares are measured against."
        ),
    )
    return lines


def _render_compile(prec: dict, extra: dict | None = None) -> list[str]:
    lines = [
        "## Compilation: when it pays",
        "",
        (
            "In eager mode PyTorch runs one operation at a time: each reads its inputs from memory and writes its "
            "output back, and each costs a call from Python. `torch.compile(model)` traces the model on its first "
            "call and generates fused kernels (C++ on a CPU, Triton on a GPU), so that chains of small operations "
            "such as layer norm, GELU and the residual additions can run as fewer passes over memory. The first "
            "step pays for that compilation; every later step may be faster. Compilation pays after as many steps "
            "as it takes for the saved time to add up to the compile time."
        ),
        "",
        (
            "Besides the course's GPT, the rows below include a minimal GPT of the same size: a GPT-2 written the "
            "way nanoGPT's model is (one fused query/key/value projection, fused causal attention, no check of "
            "its inputs), which a later section compares with the course's GPT."
        ),
        "",
        (
            'Every step time below was measured both ways (section "Timing correctly"), eager → compiled: in '
            "turn, as in the table of the precision section, and alone. A saving counts only when both methods "
            "agree on its sign and both exceed the largest difference between the two methods for the row's two "
            "runs (second table)."
        ),
        "",
        "| run | compile (s) | in turn (ms) | alone (ms) |",
        "|---|---:|---:|---:|",
    ]
    savings = ["| run | saving (ms), in turn / alone | methods differ by (ms) |", "|---|---:|---:|"]
    notes = []
    breaks_noted = False
    verdicts = []
    for dev, rec in prec.items():
        v = rec["variants"]
        for eager_key, comp_key in (
            ("ours_fp32_eager", "ours_fp32_compiled"),
            ("ours_bf16_eager", "ours_bf16_compiled"),
            ("minimal_fp32_eager", "minimal_fp32_compiled"),
        ):
            e, c = v.get(eager_key), v.get(comp_key)
            if not e or not c or "error" in e:
                continue
            label = _VARIANT_LABEL[eager_key]
            if "error" in c:
                lines.append(f"| {_DEV.get(dev, dev)}, {label} | not available: {c['error'][:100]} | | | | |")
                continue
            compile_s = c["first_step_extra_s"] - max(e["first_step_extra_s"], 0.0)
            turns, alone, noise, measurable = _saving(rec, eager_key, comp_key, dev)
            verdicts.append((dev, label, measurable and turns > 0, compile_s, turns, alone))
            if measurable and turns > 0:
                notes.append(
                    f"{_DEV.get(dev, dev)}, {label}: compiling pays after about "
                    f"{_one_figure(compile_s / min(turns, alone))} steps."
                )
            lines.append(
                f"| {_DEV.get(dev, dev)}, {label} | {compile_s:.1f} | "
                f"{_msf(e['step_s'], dev)}\u00a0→ {_msf(c['step_s'], dev)} | "
                f"{_msf(e['run_step_s'], dev)}\u00a0→ {_msf(c['run_step_s'], dev)} |"
            )
            # the savings and the methods' difference from the times as printed
            pe, pc = (
                (_ms(e["step_s"], dev), _ms(e["run_step_s"], dev)),
                (_ms(c["step_s"], dev), _ms(c["run_step_s"], dev)),
            )
            d = 2 if dev == "cuda" else 1
            savings.append(
                f"| {_DEV.get(dev, dev)}, {label} | {pe[0] - pc[0]:.{d}f} / {pe[1] - pc[1]:.{d}f} | "
                f"{max(abs(pe[0] - pe[1]), abs(pc[0] - pc[1])):.{d}f} |"
            )
        ours_c, mini_c = v.get("ours_fp32_compiled") or {}, v.get("minimal_fp32_compiled") or {}
        if ours_c.get("graph_breaks") and mini_c.get("graph_breaks") == 0 and not breaks_noted:
            breaks_noted = True
            gb = (extra or {}).get("graph_breaks") or {}
            reasons = gb.get("reasons") or []
            notes.append(
                f"The compiler cut the course's GPT into {ours_c['graph_breaks'] + 1} graphs (it counted "
                f"{ours_c['graph_breaks']} graph break{'s' if ours_c['graph_breaks'] > 1 else ''}); the minimal GPT, "
                "which checks nothing, compiled as one graph."
                + (
                    " Compiling the course's GPT again on the CPU and reading the reasons the compiler records for "
                    "its breaks gave "
                    + ("one" if len(reasons) == 1 else str(len(reasons)))
                    + ": "
                    + "; ".join(f"“{r['reason'].rstrip('.')}”" for r in reasons)
                    + '. `int(v)` on a tensor calls `item()`, and the token-id check (section "Timing correctly") '
                    "does exactly that to read its smallest and largest id back into Python: by default, reading a "
                    "value back into Python ends a graph."
                    if reasons and any("item()" in r["reason"] for r in reasons)
                    else " By default, reading a value back into Python, as the token-id check does (section "
                    '"Timing correctly"), ends a graph; which operation caused this break was not recorded.'
                )
            )
    paying = [x for x in verdicts if x[2]]
    flips = [x for x in verdicts if (x[4] > 0) != (x[5] > 0)]
    if verdicts:
        lo = min(x[3] for x in verdicts)
        hi = max(x[3] for x in verdicts)
        summary = (
            f"By that rule, compilation gave no measurable saving in any of these runs: at this model size its "
            f"{lo:.0f} to {hi:.0f} s of compile time bought nothing larger than the difference between the two "
            "timing methods."
            if not paying
            else "By that rule, compilation paid only in "
            + ", ".join(f"{_DEV[d]} {lab}" for d, lab, *_ in paying)
            + "; the counts of steps below are given to one significant figure, from the smaller of the two savings."
        )
        if flips:
            summary += (
                f" In {len(flips)} of the {len(verdicts)} rows the two ways of timing do not even agree on whether "
                "the compiled step was faster."
            )
        gpu = prec.get("cuda")
        if gpu:
            steps = [r for r in gpu["variants"].values() if "step_s" in r and "run_step_s" in r]
            slower = sum(r["step_s"] > r["run_step_s"] * 1.01 for r in steps)
            if slower:
                summary += (
                    f" On the GPU the in-turn step was the slower of the two in {slower} of the {len(steps)} runs "
                    "and never the faster by more than 1 %."
                    if not any(r["run_step_s"] > r["step_s"] * 1.01 for r in steps)
                    else f" On the GPU the in-turn step was the slower of the two in {slower} of the {len(steps)} runs."
                )
        notes.insert(0, summary)
    lines += [
        "",
        (
            "How measured: compile time is the first step's time minus a steady step's, less the eager run's own "
            "first-step overhead; steady steps are medians. Only the model is compiled: the optimiser step runs "
            "eagerly in every run." + (" GPU steps were synchronised before and after each." if "cuda" in prec else "")
        ),
        "",
        *savings,
        "",
        *([notes[0], ""] if notes else []),
        *([" ".join(notes[1:]), ""] if len(notes) > 1 else []),
        *(_fold("The code that asked the compiler why", _SHOWN_GRAPH_BREAKS) if extra else []),
    ]
    return lines


def _sweep_row(sweep: dict, batch: int, d_model: int, bf16: bool) -> dict:
    return next(r for r in sweep["rows"] if (r["batch"], r["d_model"], r["bf16"]) == (batch, d_model, bf16))


def _sweep_reading(sweep: dict, rec: dict) -> list[str]:
    """What the batch-size and width sweep says about the GPU's low share, from its numbers: paragraphs."""
    rows = sweep["rows"]
    batches = sorted({r["batch"] for r in rows})
    widths = sorted({r["d_model"] for r in rows})
    b0, b1, w0, w1 = batches[0], batches[-1], widths[0], widths[-1]
    small, big = _sweep_row(sweep, b0, w0, False), _sweep_row(sweep, b1, w0, False)
    wide = _sweep_row(sweep, b1, w1, False)
    wide16 = _sweep_row(sweep, b1, w1, True)
    gain = big["tokens_per_s_loop"] / small["tokens_per_s_loop"]
    s0, s1 = _pct(small["share_of_peak_loop"]), _pct(big["share_of_peak_loop"])
    printed = _sweep_printed(sweep)
    pairs = [(_sweep_row(printed, b, w0, h), _sweep_row(printed, b, w1, h)) for b in batches for h in (False, True)]
    keys = ("tokens_per_s_loop", "tokens_per_s_synced")

    def beyond(o: dict, n: dict) -> bool:
        """The wider model slower in both timings, by more than two timings of its format can be off (each by
        its format's largest gap between the sweep's two timings)."""
        limit = (1 + _sweep_noise(sweep, o["bf16"])) ** 2
        return all(o[k] / n[k] > limit for k in keys)

    slower = [(o, n) for o, n in pairs if beyond(o, n)]
    apart = [(o, n) for o, n in pairs if not beyond(o, n)]
    widths_said = (
        f"in {len(slower)} of the {len(pairs)} pairs of the same batch and format the wider model ran fewer "
        "tokens per second in both timings, by more than the timings' spread (given under the tables)"
    )
    if apart:
        widths_said += (
            "; in "
            + " and ".join(
                ("" if i and o["bf16"] == apart[i - 1][0]["bf16"] else f"{'bfloat16' if o['bf16'] else 'float32'} ")
                + ("" if i else "at batch ")
                + f"{o['batch']} ({_n(o['tokens_per_s_synced'] / 1e3)} and {_n(n['tokens_per_s_synced'] / 1e3)} "
                "thousand tokens/s synchronised)"
                for i, (o, n) in enumerate(apart)
            )
            + " the two widths cannot be told apart: "
            + f"{_x(pairs[0][1]['flops_per_token'] / pairs[0][0]['flops_per_token'])} the arithmetic per token in "
            "about the same time, as the fixed cost per operation supposed above would have it"
        )
    cost = wide["flops_per_token"] / small["flops_per_token"]
    turn, alone, _, _ = _fp32_spread(rec)
    synced = small["tokens_per_s_synced"]
    paras = [
        (
            "The share of the peak rose from the smallest operations to the largest (Fig. A.7, top): with "
            f"{b1 // b0} times the windows per step at d_model {w0}, float32 training ran {_x(gain)} as many "
            f"tokens per second ({s0} to {s1} of the "
            f"peak), and at d_model {w1} with batch {b1} it reached {_pct(wide['share_of_peak_loop'])} of the "
            f"float32 peak, bfloat16 {_pct(wide16['share_of_peak_loop'])} of the bfloat16 one. A token of "
            f"the d_model-{w1} model costs {_x(cost)} the FLOPs of one at d_model {w0}: {widths_said}."
        ),
        (
            f"The first float32 row is the configuration of the tables above, on random tokens: "
            f"{_n(small['tokens_per_s_loop'])} tokens/s back to back and {_n(synced)} synchronised, "
            f"{abs(small['tokens_per_s_loop'] / alone - 1) * 100:.1f} % and {abs(synced / alone - 1) * 100:.1f} % "
            f"from the timing alone ({_n(alone)}), and "
            f"{_span((small['tokens_per_s_loop'] / turn - 1) * 100, (synced / turn - 1) * 100, lambda x: f'{x:.0f}')}"
            f" % above the timing in turn ({_n(turn)}). This suggests that on this "
            "GPU the steps timed in turn read slow; the GPU ratios of the precision table "
            "are in-turn ratios."
        ),
    ]
    return paras


def _bf16_gpu_revisited(rec: dict, sweep: dict) -> list[str]:
    """bfloat16 against float32 on the GPU: the precision table's runs against the timing's spread, and every
    configuration of the sweep, back to back and synchronised."""
    v = rec["variants"]
    keys = ("ours_fp32_eager", "ours_bf16_eager", "ours_fp32_compiled", "ours_bf16_compiled")
    # step times in ms as the compilation table prints them, so that every difference is the printed one
    ms = {k: (_ms(v[k]["step_s"], "cuda"), _ms(v[k]["run_step_s"], "cuda")) for k in keys}
    table = [
        "| runs | in turn (ms) | alone (ms) | speed | gap (ms) |",
        "|---|---:|---:|---:|---:|",
    ]
    verdicts = []
    for label, kb, kf in (("eager", keys[1], keys[0]), ("compiled", keys[3], keys[2])):
        t = ms[kb][0] - ms[kf][0]
        a = ms[kb][1] - ms[kf][1]
        # the rule of the compilation section, for the two runs compared
        noise = max(abs(ms[k][0] - ms[k][1]) for k in (kb, kf))
        beyond = (t > 0) == (a > 0) and min(abs(t), abs(a)) > noise
        verdicts.append((label, beyond, t > 0))
        table.append(
            f"| {label} | {t:+.2f} | {a:+.2f} | "
            f"{_x(ms[kf][0] / ms[kb][0])} / {_x(ms[kf][1] / ms[kb][1])} | {noise:.2f} |"
        )
    noise_sweep = _ratio_noise(sweep)
    sweep = _sweep_printed(sweep)
    rows = sweep["rows"]
    batches = sorted({r["batch"] for r in rows})
    widths = sorted({r["d_model"] for r in rows})

    def ratio(b: int, d: int, key: str) -> float:
        return _sweep_row(sweep, b, d, True)[key] / _sweep_row(sweep, b, d, False)[key]

    parts = [
        f"at d_model {d}: "
        + ", ".join(
            f"{_x(ratio(b, d, 'tokens_per_s_loop'))} ({_x(ratio(b, d, 'tokens_per_s_synced'))})" for b in batches
        )
        for d in widths
    ]
    slow = [label for label, beyond, more in verdicts if beyond and more]
    paras = [
        (
            "The precision table's runs: bfloat16's step time minus float32's, timed in turn and alone (as the "
            "compilation table prints them), bfloat16's speed as a multiple of float32's (in turn / alone), and "
            "the gap: the larger difference between the two timing methods of the two runs compared."
        ),
        "\n".join(table),
    ]
    text = (
        "In the sweep, bfloat16's tokens per second against float32's in the same configuration, at batch "
        f"{', '.join(map(str, batches[:-1]))} and {batches[-1]}, back to back (synchronised in brackets), were "
        + "; ".join(parts)
        + "."
    )
    for d in widths:
        seq = [ratio(b, d, "tokens_per_s_loop") for b in batches]
        drop = next((i for i in range(1, len(seq)) if seq[i] < seq[i - 1]), None)
        if drop is not None:
            syn = [ratio(b, d, "tokens_per_s_synced") for b in batches]
            text += (
                f" At d_model {d} the ratio dipped at batch {batches[drop]} in both timings "
                f"({_x(seq[drop])} and {_x(syn[drop])}, from {_x(seq[drop - 1])} and {_x(syn[drop - 1])} at batch "
                f"{batches[drop - 1]})"
                + (f" before bfloat16 paid at batch {batches[-1]}." if seq[-1] > 1 + noise_sweep else ".")
            )
            break
    near = [(b, d) for d in widths for b in batches if abs(ratio(b, d, "tokens_per_s_loop") - 1) < noise_sweep]
    if near:
        text += (
            f" Within ±{_pct(noise_sweep)} (the grey band of the figure: each of a ratio's two timings may be off "
            "by as much as its format's largest difference between the sweep's two timings), "
            + " and ".join(_x(ratio(b, d, "tokens_per_s_loop")) for b, d in near)
            + " cannot be told apart from 1."
        )
    pays = []
    for d in widths:
        b = next(
            (
                b
                for b in batches
                if min(ratio(b, d, "tokens_per_s_loop"), ratio(b, d, "tokens_per_s_synced")) > 1 + noise_sweep
            ),
            None,
        )
        if b is not None:
            pays.append(f"from batch {b} at d_model {d}")
    lost = [
        (b, d)
        for d in widths
        for b in batches
        if max(ratio(b, d, "tokens_per_s_loop"), ratio(b, d, "tokens_per_s_synced")) < 1 - noise_sweep
    ]
    if pays:
        text += (
            " The practical rule these numbers suggest: bfloat16 autocast pays once the matrix products are large "
            "enough for their arithmetic to set the pace of the step (here " + " and ".join(pays) + "); below "
            "that, on this GPU, it gained nothing"
            + (
                ", and at " + " and ".join(f"batch {b}, d_model {d}" for b, d in lost) + " it cost time."
                if lost
                else "."
            )
        )
        b0, d0 = batches[0], widths[0]
        if slow and (b0, d0) in near:
            text += (
                f" At batch {b0}, d_model {d0}, the configuration of the precision table, the two measurements "
                "differ only in degree: there bfloat16 was slower in both timings by more than their gap (the "
                f"table above, {' and '.join(slow)}), here its {_x(ratio(b0, d0, 'tokens_per_s_loop'))} and "
                f"{_x(ratio(b0, d0, 'tokens_per_s_synced'))} lie inside the band. Slower or no different, never "
                "faster."
            )
    text += (
        " `train_gpt.train`, which chapter 10 calls, turns bfloat16 autocast on for any CUDA device; at "
        "chapter 10's own size (batch 16, "
        "block 64), smaller than any configuration here, these numbers suggest it gains nothing."
    )
    paras.append(text)
    return paras


def _signed_whole_pct(x: float) -> str:
    """A signed percentage in whole percent, so that the figure a reader computes from a table's rounded entries
    and the one computed from the unrounded measurements agree."""
    return ("−" if x < 0 else "+") + f"{abs(x) * 100:.0f} %"


def _sweep_table(sweep: dict) -> list[str]:
    lines = []
    for bf16, name in ((False, "float32"), (True, "bfloat16 autocast")):
        lines += [
            f"{_cap(name)}, thousands of tokens per second, back to back (loop) and synchronised (synced):",
            "",
            "| batch | width | loop | synced | share |",
            "|---:|---:|---:|---:|---:|",
        ]
        for d_model in sorted({r["d_model"] for r in sweep["rows"]}):
            for batch in sorted({r["batch"] for r in sweep["rows"]}):
                f = _sweep_row(sweep, batch, d_model, bf16)
                lines.append(
                    f"| {batch} | {d_model} | {_n(f['tokens_per_s_loop'] / 1e3)} | "
                    f"{_n(f['tokens_per_s_synced'] / 1e3)} | {_pct(f['share_of_peak_loop'])} |"
                )
        lines.append("")
    rows = _sweep_printed(sweep)["rows"]
    gaps16 = [r["tokens_per_s_loop"] / r["tokens_per_s_synced"] - 1 for r in rows if r["bf16"]]
    gap32 = max(abs(r["tokens_per_s_loop"] / r["tokens_per_s_synced"] - 1) for r in rows if not r["bf16"])
    lo16, hi16 = min(gaps16), max(gaps16)
    worst = _sweep_worst(sweep)
    n = sweep.get("steps", 20)
    lines += [
        (
            f"How measured: on the {sweep['device'].get('name', 'GPU')}, 4 layers, 4 heads, block 128, AdamW, random "
            f"tokens, after 5 warm-up steps. Back to back: the mean of {n} steps with no synchronisation of the loop's "
            "own, only one at the end, as an ordinary training loop runs; the share of the peak is from this timing. "
            f"Synchronised: the median of {n} other steps, each synchronised before and after. The back-to-back loop "
            "still waits for the GPU once per step: the token-id check at the start of each forward call waits for "
            "the previous step's work. FLOPs "
            "per token by the formula above for each width; the peaks "
            f"measured again for this sweep: float32 {_flops(sweep['peak_flops']['fp32'])}, bfloat16 "
            f"{_flops(sweep['peak_flops']['bf16'])}. The two timings differed by at most {gap32 * 100:.0f} % in "
            f"float32 and by {_signed_whole_pct(lo16)} to {_signed_whole_pct(hi16)} in bfloat16 (back to back against "
            "synchronised). "
            + (
                "The largest gap has the sign one would not expect from synchronising less: at batch "
                f"{worst['batch']}, "
                f"d_model {worst['d_model']}, the back-to-back bfloat16 loop was the slower "
                f"({_n(worst['tokens_per_s_loop'] / 1e3)} against {_n(worst['tokens_per_s_synced'] / 1e3)} thousand "
                "tokens/s). The loop's figure is a mean and the synchronised one a median: a single slow step "
                "raises a mean and leaves a median alone, so this gap may be one such step. "
                if worst["tokens_per_s_loop"] < worst["tokens_per_s_synced"]
                else ""
            )
            + "Each timing was taken once; these gaps are the best estimate of their spread, and no figure of the "
            "sweep is read more precisely than they allow."
        ),
        "",
    ]
    return lines


def _roofline(prec: dict, chk: dict | None, extra: dict | None) -> list[str]:
    """Arithmetic intensity of the model's operations against each device's balance of FLOP/s and bandwidth."""
    cpu, gpu = prec.get("cpu"), prec.get("cuda")
    bw = ((extra or {}).get("copy_bandwidth") or {}).get("bytes_per_s")
    if not cpu or not bw:
        return []
    cfg = _parse_config(cpu["config"])
    d, m = cfg["d_model"], cpu["tokens_per_step"]

    def intensity(m: int, k: int, p: int, size: int = 4) -> float:
        return 2 * m * k * p / (size * (m * k + k * p + m * p))

    big = intensity(m, d, 4 * d)
    wide = intensity(m, 4 * d, 16 * d)
    cpu_balance = cpu["peak_flops"]["fp32"] / bw
    text = [
        "### Arithmetic intensity: which limit binds",
        "",
        (
            "An operation that keeps the device busy is limited either by arithmetic or by memory (a third cost, the "
            "fixed cost of launching each operation, can dominate when operations are small; see below). Its "
            "arithmetic intensity, the FLOPs it does per byte it reads and writes, says which: a device can do "
            "(peak FLOP/s ÷ memory bandwidth) FLOPs "
            "in the time it moves one byte, and an operation below that ratio waits for memory. A product "
            f"(m×k)·(k×p) in float32 does 2mkp FLOPs on at least 4(mk + kp + mp) bytes. The model's largest, "
            f"({m}×{d})·({d}×{4 * d}), does {2 * m * d * 4 * d / 1e6:.0f} MFLOP on "
            f"{4 * (m * d + d * 4 * d + m * 4 * d) / 1e6:.1f} MB: {big:.0f} FLOPs per byte ({wide:.0f} at four "
            "times the width). An addition of two float32 tensors does 1 FLOP per 12 bytes (two read, one "
            "written): 0.08 FLOPs per byte; layer norm and GELU do a handful of FLOPs for each element they read "
            "and write, a few FLOPs per byte at most."
        ),
        "",
    ]
    dense = cpu["flops_per_token"] - cpu["flops_attention_per_token"]
    para = (
        f"On the {cpu['device']['cpu']} the best of 7 copies of 256 MiB moved {bw / 1e9:.1f} GB/s (read and "
        f"write counted), so the balance is {_flops(cpu['peak_flops']['fp32'])} ÷ {bw / 1e9:.1f} GB/s = "
        f"{cpu_balance:.0f} FLOPs per byte (or lower, if one copy loop does not reach the memory's full "
        f"bandwidth). The products, at {big:.0f}, lie above it and can run near the peak; the small operations "
        "lie far below it."
    )
    prof = ((chk or {}).get("profile") or {}).get("fp32", {}).get("seconds_per_step")
    if prof:
        mm_rate = dense * m / prof["matmul"]
        para += (
            f" The profile agrees: its float32 matrix multiplications did about {dense * m / 1e9:.1f} GFLOP a "
            f"step (the 6N part of the formula) in {prof['matmul'] * 1e3:.0f} ms, about {_flops(mm_rate)}, "
            f"{_pct(mm_rate / cpu['peak_flops']['fp32'])} of the fastest float32 matmul."
        )
    text += [para, "", *_fold("The code that measured the copy's bandwidth", _SHOWN_COPY)]
    if gpu and "H200" in gpu["device"]["name"]:
        rated = 4.8e12
        g_bal = gpu["peak_flops"]["fp32"] / rated
        turn, alone, _, _ = _fp32_spread(gpu)
        step_alone = gpu["tokens_per_step"] / alone
        flops_step = gpu["flops_per_token"] * gpu["tokens_per_step"]
        act = 4 * m * d
        text += [
            (
                f"On the {gpu['device']['name']}, NVIDIA's data sheet gives 4.8 TB/s of memory bandwidth, so the "
                f"balance is {_flops(gpu['peak_flops']['fp32'])} ÷ 4.8 TB/s = {g_bal:.0f} FLOPs per byte: the "
                "products lie above it here too. Yet neither limit accounts for the step. Its "
                f"{flops_step / 1e9:.0f} GFLOP take {flops_step / gpu['peak_flops']['fp32'] * 1e3:.2f} ms at the "
                f"float32 peak, while a step took {step_alone * 1e3:.1f} ms timed alone. To spend those "
                f"{step_alone * 1e3:.1f} ms moving memory at the rated bandwidth, it would have to read and write "
                f"{step_alone * rated / 1e9:.0f} GB, about {round(step_alone * rated / act, -3):,.0f} times one "
                f"{m}×{d} float32 "
                f"activation ({act / 1e6:.1f} MB). At this size most of the step's time is spent at neither limit. "
                "The likely cause is the fixed cost of each of the step's many small operations (the CPU launches "
                "them one by one); the sweep below tests the prediction that follows: larger operations should "
                "reach a larger share."
            ),
            "",
        ]
    if FIGURE_ROOF.exists():
        ach = {
            dev: rec["peak_flops"]["fp32"] / rec["variants"]["ours_fp32_eager"]["achieved_flops"]
            for dev, rec in (("cpu", cpu), ("cuda", gpu))
            if rec and "achieved_flops" in rec["variants"].get("ours_fp32_eager", {})
        }
        text += [
            "```{figure} figures/bench_roofline.png",
            (
                ":alt: Log-log plot of GFLOP/s against FLOPs per byte. For the CPU (blue) and the GPU (red) a line "
                "rises with slope 1 and turns flat at the device's ridge, 13 and 11 FLOPs per byte; a dotted "
                "horizontal line per device marks the training's achieved FLOP/s; dashed vertical lines mark an "
                "addition, the model's largest product and the same product four times as wide."
            ),
            f":width: {_shown_width(FIGURE_ROOF)}px",
            "",
            (
                "The roofline of each device in float32: an operation can run no faster than the memory bandwidth "
                "times its FLOPs per byte (sloped part) nor faster than the fastest matmul (flat part). CPU "
                "bandwidth from the copy above, GPU bandwidth from NVIDIA's data sheet. Dashed: the intensities of "
                "three operations; dotted: the FLOP/s the float32 training achieved (steps timed in turn)."
            ),
            "```",
            "",
        ]
        if "cuda" in ach:
            text += [
                (
                    "Fig. A.6 sums up the section: the model's products lie to the right of both ridges, where "
                    f"the flat roof applies, and the float32 training reached {_pct(1 / ach['cpu'])} of that roof on "
                    f"the CPU but {_pct(1 / ach['cuda'])} of it on the GPU."
                ),
                "",
            ]
    return text


def _render_limit(
    prec: dict, chk: dict | None = None, sweep: dict | None = None, extra: dict | None = None
) -> list[str]:
    rec0 = next(iter(prec.values()))
    attn = rec0["flops_attention_per_token"]
    dense = rec0["flops_per_token"] - attn
    cfg = _parse_config(rec0["config"])
    lines = [
        "## How close to the limit",
        "",
        (
            "Training a model costs about 6 FLOPs per weight per token: 2 for the multiply-add of the forward "
            "pass, 4 for the two of the backward pass (the gradient with respect to the input and with respect to "
            "the weight). Attention adds its two n×n products, which hold no weights; counting them in full, "
            "as if there were no causal mask, as nanoGPT's `estimate_mfu` does after the PaLM paper's appendix B:"
        ),
        "",
        "$$",
        r"C \approx 6N + 12\, L\, d\, T",
        "$$",
        "",
        (
            "with C the FLOPs per token, L the layers, d the model width d_model, "
            f"N the parameters (all {_n(rec0['parameters'])} but the position table: "
            f"{_n(rec0['parameters_counted'])}, counted as nanoGPT counts them, biases and layer-norm parameters "
            f"included) and T = {cfg['block']} the context (the n of the attention section). "
            f"For the benchmark model that is {_n(dense)} + {_n(attn)} = "
            f"{_n(rec0['flops_per_token'])} FLOPs per token. Multiplied by the tokens per second it gives the "
            "FLOP/s the training achieves, which the tables set against the fastest matrix multiplication measured "
            "through PyTorch on the same device in the same format. That is a measured best of PyTorch's libraries, "
            "not the processor's rated peak."
        ),
        "",
    ]
    pairs = cfg["block"] * (cfg["block"] + 1) // 2
    causal = dense + attn * pairs / cfg["block"] ** 2
    over = rec0["flops_per_token"] / causal - 1
    cpu0 = (prec.get("cpu") or {}).get("variants", {}).get("ours_fp32_eager", {})
    # the same overstatement for the sweep's widest model (its attention part is 12 L d T, of which the causal
    # kernel needs the same share)
    wide = max((sweep or {}).get("rows", []), key=lambda r: r["d_model"], default=None)
    over_wide = ""
    if wide and wide["d_model"] != cfg["d_model"]:
        attn_w = 12 * cfg["layers"] * wide["d_model"] * cfg["block"]
        causal_w = wide["flops_per_token"] - attn_w * (1 - pairs / cfg["block"] ** 2)
        over_wide = (
            f"; at the sweep's d_model {wide['d_model']} (below) it overstates it by "
            f"{(wide['flops_per_token'] / causal_w - 1) * 100:.1f} %"
        )
    lines += [
        (
            f"Every run here is causal, and a causal kernel needs only the T(T+1)/2 = {_n(pairs)} "
            f"query-key pairs at or below the diagonal of the {_n(cfg['block'] ** 2)}: "
            f"{_n(attn * pairs / cfg['block'] ** 2)} "
            f"of the {_n(attn)} attention FLOPs per token. Counted that way, C would be {_n(causal)}, so the C above "
            f"overstates the work by {over * 100:.1f} %, and every share of the peak at d_model {cfg['d_model']} is "
            "that much high"
            + (
                f" (the CPU's {_pct(cpu0['share_of_peak'])} would be {_pct(cpu0['share_of_peak'] / (1 + over))})"
                if "share_of_peak" in cpu0
                else ""
            )
            + over_wide
            + ". The shares keep the common convention so that they compare with nanoGPT's."
        ),
        "",
    ]
    if FIGURE_LIMIT.exists():
        lines += [
            "```{figure} figures/bench_limit.png",
            (
                ":alt: One panel per device, a dot per training run on a logarithmic axis of achieved FLOP/s, labelled "
                "with its share of the peak, with vertical lines at the fastest measured float32 and bfloat16 matmuls. "
                "Runs: fp32 and bf16 eager and compiled (comp.), and the minimal GPT (min.) eager and compiled."
            ),
            f":width: {_shown_width(FIGURE_LIMIT)}px",
            "",
            (
                "The FLOP/s each training run achieves (dots; float32 runs blue, bfloat16 runs orange; comp.: "
                "compiled; min.: the minimal GPT, float32), against the fastest measured float32 and bfloat16 "
                "matmuls (vertical lines), log scale; each dot's label is its share of the peak of its format."
            ),
            "```",
            "",
        ]
    for dev, rec in prec.items():
        peaks = rec["peak_flops"]
        peak_text = ", ".join(
            f"{name} {_flops(val)}"
            for name, val in (("float32", peaks["fp32"]), ("TF32", peaks.get("tf32")), ("bfloat16", peaks["bf16"]))
            if val
        )
        lines += [
            f"On {_device_label(dev, rec)} the fastest matmuls ran at {peak_text} (the vertical lines of Fig. A.5).",
            "",
            "| run | tokens/s | achieved | share of peak |",
            "|---|---:|---:|---:|",
        ]
        for key, r in rec["variants"].items():
            if "error" in r:
                continue
            lines.append(
                f"| {_VARIANT_LABEL[key]} | {_n(r['tokens_per_s'])} | {_flops(r['achieved_flops'])} | "
                f"{_pct(r['share_of_peak'])} of {'bf16' if r['peak_key'] == 'bf16' else 'fp32'} |"
            )
        sizes = rec.get("peak_matmul_sizes") or sorted(set(rec["peak_matmul_n"].values()))
        shapes = [f"{n}×{n}" if isinstance(n, int) else f"({n[0]}×{n[1]})·({n[1]}×{n[2]})" for n in sizes]
        lines += [
            "",
            (
                f"How measured: for each format the fastest of {'10' if dev == 'cuda' else '3 to 8'} repeats of each "
                "product, measured before the training runs and again after them; the products: "
                + (", ".join(shapes[:-1]) + " and " + shapes[-1] if len(shapes) > 1 else shapes[0])
                + (", the last two the model's own shapes" if any(not isinstance(n, int) for n in sizes) else "")
                + ". The training speeds are those of the precision table (medians of the steps timed in turn), so "
                "each share sets a typical step against the best single call."
            ),
            "",
        ]
        v = rec["variants"]
        base = v.get("ours_fp32_eager")
        ok = [r for r in v.values() if "error" not in r and not r["bf16"]]
        if not (base and "error" not in base and ok):
            continue
        share = base["share_of_peak"]
        reading = (
            f"In float32 this training reaches {_pct(share)} of the fastest float32 matmul PyTorch ran on "
            f"{_device_label(dev, rec)}."
        )
        if dev == "cuda":
            _, _, s_turn, s_alone = _fp32_spread(rec)
            reading = (
                f"In float32 this training reaches {_span(s_turn, s_alone, _pct)} of the fastest float32 matmul "
                f"PyTorch ran on {_device_label(dev, rec)}: {_pct(s_turn)} with the step timed in turn, "
                f"{_pct(s_alone)} timed alone."
            )
        if dev == "cpu" and chk and "step_s" in chk.get("profile", {}).get("fp32", {}):
            fp = chk["profile"]["fp32"]["share"]
            reading += (
                f" In the profile of the precision section, the matrix multiplications took {_pct(fp['matmul'])} "
                f"of a float32 step and the fused attention {_pct(fp['attention'])}; the rest went to copies and "
                f"casts ({_pct(fp['casts'])}), the optimiser ({_pct(fp['optimiser'])}) and the many small "
                f"operations between them ({_pct(fp['rest'])})."
            )
        mini = v.get("minimal_fp32_eager")
        if mini and "error" not in mini:
            # the rule of the compilation section: a difference counts only when both timings agree on its sign
            # and both exceed the largest gap between the two timings of the two runs compared
            turns, alone, noise, measurable = _saving(rec, "ours_fp32_eager", "minimal_fp32_eager")
            both_within = max(abs(turns), abs(alone)) < noise
            reading += (
                f" The minimal GPT, which has no token-id check, reached {_pct(mini['share_of_peak'])} "
                f"({_n(mini['tokens_per_s'])} tokens/s against the course GPT's {_n(base['tokens_per_s'])}, "
                f"steps timed in turn); timed alone, a step took {_msf(mini['run_step_s'], dev)} ms against the "
                f"course GPT's {_msf(base['run_step_s'], dev)} ms"
                + (
                    "."
                    if measurable
                    else f". The two timings of these two runs differ by up to {_msf(noise, dev)} ms (compilation "
                    "table), "
                    + (
                        "more than the difference either measures between the models"
                        if both_within
                        else "and they do not agree on which model was faster"
                        if (turns > 0) != (alone > 0)
                        else "more than one of the two differences"
                    )
                    + ", so on this device the two cannot be told apart."
                )
            )
        lines += [reading, ""]
        if peaks.get("tf32"):
            lines += [
                (
                    "TF32 is a mode of the GPU's tensor cores for float32 matmuls: the inputs are rounded to 10 bits "
                    "of mantissa (float32's range, float16's precision) and the sums kept in float32; "
                    "`torch.backends.cuda.matmul.allow_tf32 = True` turns it on. No training run here used it."
                ),
                "",
            ]
    cpu, gpu = prec.get("cpu"), prec.get("cuda")
    if cpu and gpu:
        c, g = cpu["variants"].get("ours_fp32_eager", {}), gpu["variants"].get("ours_fp32_eager", {})
        if "tokens_per_s" in c and "tokens_per_s" in g:
            lines += [
                (
                    "Side by side: the GPU's fastest float32 matmul ran "
                    f"{_x(gpu['peak_flops']['fp32'] / cpu['peak_flops']['fp32'])} as fast as the CPU's (both through "
                    "PyTorch), yet this training ran only "
                    + _span(
                        _fp32_spread(gpu)[0] / _fp32_spread(cpu)[0], _fp32_spread(gpu)[1] / _fp32_spread(cpu)[1], _x
                    )
                    + " as fast on the GPU (steps timed in turn and alone): at this size it leaves most of the GPU's "
                    "arithmetic unused."
                ),
                "",
            ]
    lines += _roofline(prec, chk, extra)
    if gpu and sweep:
        b = sorted({r["batch"] for r in sweep["rows"]})
        w = sorted({r["d_model"] for r in sweep["rows"]})
        paras = _sweep_reading(sweep, gpu)
        lines += [
            "### Larger batches and wider models on the GPU",
            "",
            (
                f"A second measurement on an {sweep['device'].get('name', 'GPU')} trained the same architecture on "
                f"random tokens at batch sizes {', '.join(map(str, b))} and widths {' and '.join(map(str, w))}, in "
                "float32 and under bfloat16 autocast, timed back to back as an ordinary training loop runs."
            ),
            "",
        ]
        if FIGURE_SWEEP.exists():
            lines += [
                "```{figure} figures/bench_sweep.png",
                (
                    ":alt: Two panels against batch size 32, 128 and 512. Top: share of the fastest measured matmul, "
                    "on a logarithmic axis, four lines: float32 and bfloat16 at d_model 128 and 512. Bottom: "
                    "bfloat16's tokens per second divided by float32's, one line per width, with a grey band "
                    "around 1 for the "
                    "spread of the timings."
                ),
                f":width: {_shown_width(FIGURE_SWEEP)}px",
                "",
                (
                    "Top: share of the fastest measured matmul in the run's format against the batch size (timed back "
                    "to back, log scale), one line per width and format. Bottom: bfloat16's tokens per second over "
                    "float32's, also timed back to back, one line per width; inside the grey band (±"
                    f"{_pct(_ratio_noise(sweep))}) a ratio cannot be told apart from 1: each of its two timings may be "
                    "off by as much as the largest difference between the sweep's two timings of one configuration "
                    f"in its format ({_pct(_sweep_noise(sweep, True))} in bfloat16, "
                    f"{_pct(_sweep_noise(sweep, False))} in float32, in the tables below). Dashed: d_model "
                    f"{min(r['d_model'] for r in sweep['rows'])}; solid: d_model "
                    f"{max(r['d_model'] for r in sweep['rows'])}."
                ),
                "```",
                "",
            ]
        lines += [paras[0], "", *_sweep_table(sweep)]
        lines += _fold(
            "The code that measured the sweep",
            _SHOWN_SWEEP,
            after="`step` is one training step of the model at this batch and width, in float32 or bfloat16.",
        )
        lines += [paras[1], ""]
        lines += ["### bfloat16 on the GPU, revisited", "", *(p + "\n" for p in _bf16_gpu_revisited(gpu, sweep))]
    return lines


def _other_machine_note(results: dict, dev: str) -> str:
    """Where the limit section ran the same minimal GPT on another CPU, say so next to the number."""
    cpu = (results.get("precision") or {}).get("cpu")
    mini = (cpu or {}).get("variants", {}).get("minimal_fp32_eager") or {}
    if dev != "cpu" or "tokens_per_s" not in mini or cpu["device"]["cpu"] == results["machine"]["cpu"]:
        return ""
    return (
        f" These runs were on the {results['machine']['cpu']}; the section on the limit ran the minimal GPT, same "
        f"configuration, on the {cpu['device']['cpu']} at {_n(mini['tokens_per_s'])} tokens/s."
    )


def _render_side_by_side(results: dict) -> list[str]:
    m = results["machine"]
    where = f"on the {m['cpu']}, {m['torch_threads']} threads" if m.get("cpu") else ""

    def on(dev: str) -> str:
        return where if dev == "cpu" else f"on the {_DEV.get(dev, dev)}"

    side = []
    for dev, r in results.get("mha", {}).items():
        side.append(
            "`MultiHeadAttention` vs `torch.nn.MultiheadAttention`, forward + backward "
            f"({r['shape']}; {on(dev)}): {r['ours_ms']:.2f} vs {r['torch_ms']:.2f} ms, "
            f"**{r['ratio_ours_vs_torch']:.2f}×** the time (with `use_sdpa=True`: "
            f"{r['ratio_ours_sdpa_vs_torch']:.2f}×). Each the median of 7 calls after 2 of warm-up, one module after "
            "the other, in one run, not repeated; the two modules "
            "are initialised separately (the weights do not matter for the time), and PyTorch's is called with "
            "`need_weights=False`, which lets it take its fused path, while ours, by default, takes the explicit "
            "one and returns the weights."
        )
    for dev, r in (results.get("gpt_vs_minimal") or {}).items():
        side.append(
            "The course's `GPT` vs the minimal GPT of the compilation section, training "
            f"({r['config']}, {r['steps']} steps of {r['batch']}; {on(dev)}): "
            f"{_n(r['ours_tokens_per_s'])} vs {_n(r['minimal_tokens_per_s'])} tokens/s at the median step; "
            f"validation loss {r['ours_val_loss']:.4f} vs {r['minimal_val_loss']:.4f}. The same initial weights and "
            "batches; the two train in turn, step by step. For each pair of steps, our speed over the minimal "
            f"GPT's (its time over ours): median **{r['throughput_ratio']:.3f}×**"
            + (
                f", and half the pairs between {r['throughput_ratio_iqr'][0]:.3f}× and "
                f"{r['throughput_ratio_iqr'][1]:.3f}×"
                if r.get("throughput_ratio_iqr")
                else ""
            )
            + f"; the median came out {', '.join(f'{x:.3f}×' for x in r['runs'])} in {len(r['runs'])} fresh "
            "processes, the bold figure being their middle value." + _other_machine_note(results, dev)
        )
    for dev, r in (results.get("gpt_vs_hf") or {}).items():
        side.append(
            f"The course's `GPT` vs `GPT2LMHeadModel`, training ({r['config']}, {r['steps']} steps of "
            f"{r['batch']}; {on(dev)}): "
            f"{_n(r['ours_tokens_per_s'])} vs {_n(r['hf_tokens_per_s'])} tokens/s, "
            f"**{r['throughput_ratio']:.2f}×** the throughput; validation loss "
            f"{r['ours_val_loss']:.3f} vs {r['hf_val_loss']:.3f} (**{r['val_loss_ratio']:.3f}×**). The same initial "
            f"weights and batches, but timed differently: the total time of one {r['steps']}-step run of each, one "
            "after the other, first step included, one run of each, not repeated, so its spread is unknown."
        )
    for dev, r in (results.get("encoder_vs_bert") or {}).items():
        side.append(
            f"The course's encoder with MiniLM's weights vs `BertModel`, inference ({r['shape']}; "
            f"{on(dev)}): {r['ours_ms']:.1f} vs {r['bert_ms']:.1f} ms, "
            f"**{r['ratio_ours_vs_bert']:.2f}×** the time. The same weights and inputs; each the median of 7 calls "
            "after 2 of warm-up, one model after the other, in one run, not repeated. Ours, like "
            "`MultiHeadAttention` by default, takes the explicit attention path."
        )
    if not side:
        return []
    lines = [
        "## The course's models side by side with library implementations",
        "",
        (
            "Each of the course's modules against the library class it mirrors, and the course's GPT against the "
            "minimal GPT of the compilation section, with the same configuration and inputs; each item says how "
            "it was measured. A time ratio above 1 means ours is slower; a throughput ratio below 1 means ours is "
            "slower."
        ),
        "",
        *[f"* {item}" for item in side],
        "",
    ]
    gm = next(iter((results.get("gpt_vs_minimal") or {}).values()), None)
    mha = next(iter(results.get("mha", {}).values()), None)
    text = []
    if mha:
        text.append(
            f"The course's `MultiHeadAttention` took {mha['ratio_ours_vs_torch']:.2f}× PyTorch's time with the "
            "explicit attention the chapters teach (it builds three n×n matrices, QKᵀ, its scaled copy and the "
            "weights, two of them alive at once, and multiplies the weights with the values) against PyTorch's "
            "fused path, and "
            f"{mha['ratio_ours_sdpa_vs_torch']:.2f}× with "
            "`use_sdpa=True`, when both take a fused kernel, the one of the attention section above. Each figure, "
            "like the encoder's, comes from one sequence of 7 calls, not repeated, so its spread is unknown."
        )
    if gm:
        text.append(
            "The GPT of chapter 10 uses the same fast kernels as the minimal GPT: one fused query/key/value "
            "matrix and fused attention told `is_causal=True` instead of a mask tensor, and the two reach the same "
            "validation loss"
            + (" to the last digit" if gm["ours_val_loss"] == gm["minimal_val_loss"] else "")
            + (
                f". The median of ours against its per-step speed was within {(1 - min(gm['runs'])) * 100:.1f} % "
                f"in each of {len(gm['runs'])} fresh processes ({min(gm['runs']):.3f}× to "
                f"{max(gm['runs']):.3f}×; single steps differ more); it also runs the token-id check on every call."
                if gm.get("runs") and max(gm["runs"]) < 1
                else ". It also runs the token-id check on every call."
            )
        )
    if text:
        lines += [" ".join(text), ""]
    lines += _fold(
        "The code that measured these comparisons",
        _SHOWN_SIDE,
        after=(
            '`models` holds the course\'s GPT (`"ours"`) and the minimal GPT with the same weights, `opts` an '
            "AdamW for each. The two models train step by step in turn, who goes first alternating; the ratio is "
            "the median over steps of the minimal model's time over ours for the same batch."
        ),
    )
    return lines


# The chapter run times are shown only when they cover every chapter of the book (or when asked for with
# ``--show-chapter-times``): timings that predate a chapter describe another course.
SHOW_CHAPTER_TIMES = False


def _show_chapter_times(results: dict) -> bool:
    nbs = results.get("notebooks")
    if not nbs:
        return False
    timed = {r["notebook"] for r in nbs}
    current = {p.stem for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb")}
    return SHOW_CHAPTER_TIMES or current <= timed


def _render_notebooks(results: dict) -> list[str]:
    nbs = results.get("notebooks")
    if not nbs or not _show_chapter_times(results):
        return []
    shown = {r["notebook"]: f"{r['seconds']:.1f}" for r in nbs}  # the table's values; the total adds these
    total = sum(float(x) for x in shown.values())
    m = results.get("notebooks_machine") or results["machine"]
    longest = max(nbs, key=lambda r: r["seconds"])
    lines = [
        "## What each chapter costs a learner",
        "",
        (
            f"How long a learner waits for each chapter, run from top to bottom on a {m['cores']}-core CPU (the "
            f"{m['cpu']}, {m['torch_threads']} PyTorch threads). No GPU was measured for the "
            "chapters."
        ),
        "",
        "| chapter | seconds |",
        "|---|---:|",
    ]
    for r in nbs:
        lines.append(f"| {_chapter_title(r['notebook'])} | {shown[r['notebook']]} |")
    timed = {r["notebook"] for r in nbs}
    missing = [p.stem for p in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")) if p.stem not in timed]
    for nb in missing:  # a chapter newer than these measurements
        lines.append(f"| {_chapter_title(nb)} | not measured |")
    lines += [
        f"| {'all of the above that were measured' if missing else 'all chapters'} | {total:.1f} |",
        "",
    ]
    if missing:
        lines += [
            (
                f"The {len(nbs)} chapters measured took {total / 60:.0f} minutes together then; the longest of them, "
                f"{_chapter_title(longest['notebook'])}, took {longest['seconds'] / 60:.1f} minutes, "
                f"{longest['seconds'] / total * 100:.0f} % of the measured total. "
                + ("Chapter " if len(missing) == 1 else "Chapters ")
                + ", ".join(nb[:2] for nb in missing)
                + (" is" if len(missing) == 1 else " are")
                + " newer than these timings, so the whole course takes longer than this, by an unknown amount."
            ),
            "",
        ]
    else:
        lines += [
            (
                f"Together that is {total / 60:.0f} minutes of computing; the longest, "
                f"{_chapter_title(longest['notebook'])}, takes {longest['seconds'] / 60:.1f} minutes, "
                f"{longest['seconds'] / total * 100:.0f} % of the whole."
            ),
            "",
        ]
    return lines


def _render_ddp(results: dict) -> list[str]:
    ddp = results.get("ddp")
    if not ddp:
        return []
    one, two = ddp["1 process"], ddp["2 processes"]
    single = ddp.get("1 process, 1 thread")
    acc = ddp.get("1 process, accumulate 2")
    m = results["machine"]
    if ddp.get("device"):
        m = {**m, "cpu": ddp["device"]["cpu"], "cores": ddp["device"]["cores"], "torch_threads": one.get("threads", 2)}
    args = ddp["args"].split()
    opt = {a.removeprefix("--"): b for a, b in zip(args, args[1:], strict=False) if a.startswith("--")}
    config = f"{opt['n-layer']} layers, {opt['n-head']} heads, d_model {opt['d-model']}, block {opt['block-size']}"

    def total(r: dict) -> float:  # the run's recorded time, to the 0.1 s it was recorded to
        return round(r["seconds_per_step"] * int(opt["steps"]), 1)

    return [
        "## Scaling out: several processes",
        "",
        (
            "When one process is not enough, PyTorch's own launcher runs the same training script once per "
            "device. Each process holds a full replica of the model; `DistributedDataParallel` adds an "
            "all-reduce to the backward pass, so that every replica ends the step with the average of all "
            "processes' gradients and takes the same optimiser step. The course's training loop runs "
            "unchanged: each step's global batch is drawn the same way in every process, and each takes its "
            "own share of it."
        ),
        "",
        (
            "Written out by hand, one data-parallel step is a few lines. Each of the `world` processes runs it "
            "with its own `rank` (after `torch.distributed.init_process_group`), on the same global batch:"
        ),
        "",
        "```python",
        "import torch.distributed as dist",
        "from transformer_course.gpt import lm_loss",
        "",
        "def data_parallel_step(model, opt, x, y, rank, world):",
        "    share = x.shape[0] // world  # this process's part of the batch",
        "    mine = slice(rank * share, (rank + 1) * share)",
        "    loss = lm_loss(model(x[mine]), y[mine])",
        "    opt.zero_grad(set_to_none=True)",
        "    loss.backward()",
        "    for p in model.parameters():  # sum over the processes, then the mean",
        "        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)",
        "        p.grad /= world",
        "    opt.step()  # the same gradient everywhere: the replicas stay equal",
        "```",
        "",
        (
            "With equal shares, the mean of the processes' mean gradients is the gradient of the whole batch, so "
            "the step is the one a single process would take. An all-reduce arranged as a ring sends and receives "
            "about 2(p − 1)/p times the gradients' bytes per process, for p processes: never more than twice "
            "the gradients, however many processes there are. `DistributedDataParallel` does the same exchange "
            "more cleverly: it groups "
            "the gradients into buckets and starts a bucket's all-reduce as soon as the backward pass has "
            "produced it, so the exchange overlaps the rest of the backward pass (PyTorch's DistributedDataParallel "
            "design notes)."
        ),
        "",
        "```bash",
        "torchrun --standalone --nproc_per_node=2 \\",
        "    -m transformer_course.train_gpt --steps 5000",
        "```",
        "",
        (
            "On CPUs the processes talk through the gloo backend, on NVIDIA GPUs through nccl (one process "
            "per GPU). Gradient accumulation (`--accumulate 2`) is the same idea inside one process: two "
            "half-batches, one after the other, gradients added, one step"
            + ("; the last row of the table below runs it." if acc else ".")
        ),
        "",
        (
            f"Measured on the {m['cpu']} ({m['cores']} cores): {_config_phrase(config)}, batch {opt['batch-size']}, "
            f"{opt['steps']} steps (`{ddp['args']}`). The time is the run's whole training loop: the "
            f"{opt['steps']} steps, the first one included, and the two evaluations on "
            f"{EVAL_WINDOWS} training and {EVAL_WINDOWS} validation windows, before the first step and after "
            "the last:"
        ),
        "",
        "| run | time of the run (s) | last training loss | validation loss |",
        "|---|---:|---:|---:|",
        *[
            f"| {label} | {total(r):.1f} | {r['final_loss']:.4f} | {r['val_loss']:.4f} |"
            for label, r in (
                (f"1 process, {m['torch_threads']} threads", one),
                ("1 process, 1 thread", single),
                (f"2 processes, {max(1, m['torch_threads'] // 2)} thread each", two),
                (f"1 process, {m['torch_threads']} threads, 2 half-batches", acc),
            )
            if r
        ],
        "",
        _ddp_reading(one, two, single, m, acc, int(opt["steps"])),
        "",
        (
            "Across machines the same script runs under `torchrun --nnodes=2 --nproc_per_node=8 "
            "--rdzv_backend=c10d --rdzv_endpoint=HOST:29500` on every node. When the model itself no longer "
            "fits one device, data parallelism is not enough: fully sharded data parallelism "
            "(`torch.distributed.fsdp.fully_shard(block)` for each block, then for the model) keeps only a "
            "shard of every weight, gradient and optimiser state on each device and gathers a layer's weights "
            "just before it runs."
        ),
        "",
        *_fold(
            "The code that measured one process against two",
            _SHOWN_DDP,
            after=(
                "Each command runs with its own number of PyTorch threads per process and trains the same model "
                "for the same steps; `train_gpt` times its own training loop and prints the time."
            ),
        ),
    ]


def _ddp_reading(one: dict, two: dict, single: dict | None, m: dict, acc: dict | None = None, steps: int = 40) -> str:
    runs = [one, two] + ([single] if single else []) + ([acc] if acc else [])
    shown = {(f"{r['val_loss']:.4f}", f"{r['final_loss']:.4f}") for r in runs}

    def total(r: dict) -> float:  # as the table prints it
        return round(r["seconds_per_step"] * steps, 1)

    text = ("The losses are the same" if len(shown) == 1 else "The losses agree") + (
        f" to the digits shown: {'all ' if len(runs) > 2 else 'the '}{_number_word(len(runs))} runs take the same "
        "steps"
        + (
            ", including the one with `--accumulate 2`, which adds the gradients of two half-batches before each step. "
            if acc
            else ". "
        )
    )
    if single:
        gain = total(single) / total(two)
        text += (
            f"Two processes with one thread each, which the {m['cores']} cores can run at the same time, took "
            f"{total(two):.1f} s against one process with one thread's {total(single):.1f} s: about {gain:.1f}× as "
            "fast, less than 2×, in one run of each, not repeated. Where the rest went was not measured; each "
            "process works on half-size batches, runs the two evaluations in full and exchanges gradients every "
            "step, and the two share the memory bandwidth. "
        )
    text += (
        f"Against one process that already used both of the {m['cores']} cores with {m['torch_threads']} threads, "
        f"two processes took {total(two):.1f} s against its {total(one):.1f} s: with no core left over, splitting the "
        "batch between processes gained nothing. Data parallelism pays when each process brings hardware the others do "
        "not use: here a core, on GPUs a GPU for each process."
    )
    if acc:
        text += (
            f" Accumulating took {total(acc):.1f} s against {total(one):.1f} s for the same process's undivided batch; "
            "what accumulation is for is memory: only half a batch's activations are held at a time."
        )
    return text


def _number_word(k: int) -> str:
    return {2: "two", 3: "three", 4: "four", 5: "five"}.get(k, str(k))


def _render_summary(results: dict) -> list[str]:
    """The page's answers, one line per section, each computed from the measurements below it."""
    items = []
    sc = results.get("scaling")
    if sc and "explicit_ms" in sc["rows"][0]:
        last = sc["rows"][-1]
        speed = [r["explicit_ms"] / r["fused_ms"] for r in sc["rows"]]
        text = "Attention's n×n matrix: " + (
            f"at n = {last['n']} the fused kernel needs "
            f"{_x(_sv(last['explicit_peak_mib']) / _sv(last['fused_peak_mib']))} "
            "less memory than the explicit attention; it is "
            if last["explicit_peak_mib"] and last["fused_peak_mib"] and last["fused_peak_mib"] > 0.05
            else "the fused kernel is "
        )
        if min(speed) > 1:
            text += f"faster at every length measured ({_span(min(speed), max(speed), _x)} as fast, in one run)."
        else:
            text += f"{_span(min(speed), max(speed), _x)} as fast as it, depending on the length."
        online = ((results.get("extra_checks") or {}).get("online_softmax") or [None])[-1]
        if online and online.get("blocked_peak_mib"):
            text += (
                f" {_cap(_words(len(_code(blocked_attention).splitlines())))} lines of blocked attention with an "
                "online softmax give the same output, to float32 rounding, in "
                f"{_sig(online['blocked_peak_mib'])} MiB instead of {_sig(online['explicit_peak_mib'])} MiB "
                f"(n = {online['n']})."
            )
        items.append(text)
    kv = results.get("kv_cache")
    if kv:
        r = kv["rows"][-1]
        items.append(
            f"Generation: the KV cache makes {r['new_tokens']} new tokens "
            f"{_x(_sv(r['no_cache_s']) / _sv(r['cache_s']))} faster."
        )
    prec = results.get("precision") or {}
    cpu, gpu = prec.get("cpu"), prec.get("cuda")
    sweep = (results.get("batch_sweep") or {}).get("cuda")
    if cpu and "error" not in cpu["variants"].get("ours_bf16_eager", {"error": 1}):
        v = cpu["variants"]
        cpu_ratios = [v["ours_bf16_eager"]["tokens_per_s"] / v["ours_fp32_eager"]["tokens_per_s"]]
        if "run_step_s" in v["ours_bf16_eager"] and "run_step_s" in v["ours_fp32_eager"]:
            cpu_ratios.append(v["ours_fp32_eager"]["run_step_s"] / v["ours_bf16_eager"]["run_step_s"])
        prof = (results.get("cpu_checks") or {}).get("profile") or {}
        if "step_s" in prof.get("fp32", {}) and "step_s" in prof.get("bf16", {}):
            cpu_ratios.append(prof["fp32"]["step_s"] / prof["bf16"]["step_s"])
        cpu_said = _span(min(cpu_ratios), max(cpu_ratios), _x)
        text = f"bfloat16 autocast: on the CPU it trained {cpu_said} as fast as float32" + (
            ", depending on the run and how it was timed" if " to " in cpu_said else ""
        )
        if gpu and "error" not in gpu["variants"].get("ours_bf16_eager", {"error": 1}):
            g = gpu["variants"]
            ratios = [
                g["ours_bf16_eager"]["tokens_per_s"] / g["ours_fp32_eager"]["tokens_per_s"],
                g["ours_fp32_eager"]["run_step_s"] / g["ours_bf16_eager"]["run_step_s"],
            ]
            d0 = _parse_config(gpu["config"]).get("d_model")
            same = sweep and any(r["batch"] == gpu["batch"] and r["d_model"] == d0 for r in sweep["rows"])
            if same:
                for key in ("tokens_per_s_loop", "tokens_per_s_synced"):
                    ratios.append(
                        _sweep_row(sweep, gpu["batch"], d0, True)[key] / _sweep_row(sweep, gpu["batch"], d0, False)[key]
                    )
            comp = [
                g["ours_bf16_compiled"]["tokens_per_s"] / g["ours_fp32_compiled"]["tokens_per_s"],
                g["ours_fp32_compiled"]["run_step_s"] / g["ours_bf16_compiled"]["run_step_s"],
            ]
            comp_said = _x(comp[0]) if _x(comp[0]) == _x(comp[1]) else _span(min(comp), max(comp), _x)
            text += (
                "; on the GPU it was "
                + ("slower" if max(ratios + comp) < 0.95 else "no faster")
                + " at this size (eager against eager "
                f"{_span(min(ratios), max(ratios), _x)}, depending on the run and how it was timed; compiled against "
                f"compiled {comp_said})"
            )
            if sweep:
                b = max(r["batch"] for r in sweep["rows"])
                d = max(r["d_model"] for r in sweep["rows"])
                ratio = (
                    _sweep_row(sweep, b, d, True)["tokens_per_s_loop"]
                    / _sweep_row(sweep, b, d, False)["tokens_per_s_loop"]
                )
                text += f", but {_x(ratio)} at d_model {d}, batch {b}"
        items.append(text + ".")
    verdicts = []
    for rec in prec.values():
        for e, c in (
            ("ours_fp32_eager", "ours_fp32_compiled"),
            ("ours_bf16_eager", "ours_bf16_compiled"),
            ("minimal_fp32_eager", "minimal_fp32_compiled"),
        ):
            ve, vc = rec["variants"].get(e, {"error": 1}), rec["variants"].get(c, {"error": 1})
            if "error" not in ve and "error" not in vc:
                compile_s = vc["first_step_extra_s"] - max(ve["first_step_extra_s"], 0.0)
                verdicts.append((_saving(rec, e, c)[3] and _saving(rec, e, c)[0] > 0, compile_s))
    if verdicts and not any(v for v, _ in verdicts):
        lo, hi = min(s for _, s in verdicts), max(s for _, s in verdicts)
        items.append(
            f"Compilation: no measurable saving at this size, on either device, for {lo:.0f} to {hi:.0f} s of "
            "compile time."
        )
    if cpu and "tokens_per_s" in cpu["variants"].get("ours_fp32_eager", {}):
        text = (
            f"The limit: float32 training reaches {_pct(cpu['variants']['ours_fp32_eager']['share_of_peak'])} of "
            "the fastest float32 matmul on the CPU."
        )
        if gpu and "tokens_per_s" in gpu["variants"].get("ours_fp32_eager", {}):
            t, a = _fp32_spread(gpu)[0] / _fp32_spread(cpu)[0], _fp32_spread(gpu)[1] / _fp32_spread(cpu)[1]
            fmt = (lambda r: f"{r:.0f}×") if max(t, a) >= 10 else _x
            text += (
                f" On the GPU it runs {fmt(t)} to {fmt(a)} as fast as on the CPU, yet reaches only "
                f"{_span(_fp32_spread(gpu)[2], _fp32_spread(gpu)[3], _pct)} of the GPU's fastest float32 matmul: "
                "a model this small leaves most of the GPU's arithmetic unused"
            )
            if sweep:
                b = max(r["batch"] for r in sweep["rows"])
                d = max(r["d_model"] for r in sweep["rows"])
                text += (
                    f"; with larger operations (d_model {d}, batch {b}) the same architecture reached "
                    f"{_pct(_sweep_row(sweep, b, d, False)['share_of_peak_loop'])}"
                )
            text += "."
        items.append(text)
    mha = next(iter((results.get("mha") or {}).values()), None)
    gm = next(iter((results.get("gpt_vs_minimal") or {}).values()), None)
    if mha or gm:
        text = "Against the libraries: "
        if mha:
            text += (
                f"the course's `MultiHeadAttention` took {mha['ratio_ours_vs_torch']:.2f}× PyTorch's time with its "
                f"explicit attention and {mha['ratio_ours_sdpa_vs_torch']:.2f}× with the fused one, in one run each"
            )
            enc = next(iter((results.get("encoder_vs_bert") or {}).values()), None)
            if enc:
                text += f"; its encoder took {enc['ratio_ours_vs_bert']:.2f}× `BertModel`'s time, in one run"
        if gm:
            runs = gm.get("runs") or [gm["throughput_ratio"]]
            gm_cpu = next(iter((results.get("gpt_vs_minimal") or {}).keys()))
            where = results["machine"]["cpu"] if gm_cpu == "cpu" else _DEV.get(gm_cpu, gm_cpu)
            text += ("; " if mha else "") + (
                (
                    f"on the {where} the median step-for-step speed of its GPT was within "
                    f"{(1 - min(runs)) * 100:.1f} % of a minimal nanoGPT-style GPT's (median "
                    if max(runs) < 1
                    else f"on the {where} its GPT trained step for step as fast as a minimal nanoGPT-style GPT (median "
                )
                + f"per-step ratio {gm['throughput_ratio']:.3f}×"
                + (
                    f", in the middle of {len(runs)} runs, which ranged from {min(runs):.3f}× to {max(runs):.3f}×"
                    if len(runs) > 1
                    else ""
                )
                + ")"
            )
        items.append(text + ".")
    nbs = results.get("notebooks") if _show_chapter_times(results) else None
    if nbs:
        total = sum(round(r["seconds"], 1) for r in nbs)
        longest = max(nbs, key=lambda r: r["seconds"])
        m = results["machine"]
        items.append(
            f"A learner who runs all {len(nbs)} chapters on a {m['cores']}-core CPU waits {total / 60:.0f} minutes "
            f"in all, the longest {longest['seconds'] / 60:.1f} minutes for chapter "
            f"{longest['notebook'][:2].lstrip('0')}."
        )
    ddp = results.get("ddp")
    if ddp:
        n_steps = int(ddp["args"].split("--steps")[1].split()[0])

        def run_s(r: dict) -> float:  # the run's time as the table prints it
            return round(r["seconds_per_step"] * n_steps, 1)

        ratio = run_s(ddp["2 processes"]) / run_s(ddp["1 process"])
        single = ddp.get("1 process, 1 thread")
        items.append(
            "Several processes: "
            + (
                "two single-thread processes ran the same training "
                f"about {run_s(single) / run_s(ddp['2 processes']):.1f}× as fast as one "
                "single-thread process; against one process already using both cores they gained nothing "
                f"({run_s(ddp['2 processes']):.1f} against {run_s(ddp['1 process']):.1f} s), one run each."
                if single
                else f"two on the same cores as one took {ratio:.2f}× its time."
            )
        )
    items = [i for i in items if i]
    if not items:
        return []
    return ["In short:", "", *[f"* {i}" for i in items], ""]


def _exercise1_outcome(gpu: dict | None, sweep: dict | None) -> str:
    """What the unsynchronised timer reads: the launch of the step, which at the page's size may be most of it."""
    text = (
        "The token-id check runs before the embedding lookup, so it waits only for work queued before the "
        "step, and the first `synchronize()` has already emptied the queue. Without the second one, the timer "
        "stops once the forward pass, the backward pass and the optimiser step have been queued: it measures "
        "how long the CPU takes to launch the step, and the synchronised number is the time of the work. How "
        "far apart the two are depends on whether the GPU keeps up with the launches."
    )
    v = (gpu or {}).get("variants", {}).get("ours_fp32_eager", {})
    if gpu and "achieved_flops" in v:
        per_step = v["achieved_flops"] / v["tokens_per_s"] * gpu["tokens_per_step"]
        text += (
            f" For the model of the precision table, expect them to be close: its step holds "
            f"{per_step / gpu['peak_flops']['fp32'] * 1e3:.2f} ms of arithmetic at the float32 peak in a "
            f"{v['run_step_s'] * 1e3:.1f} ms step, so if, as the section on the limit supposes, the CPU's launching "
            "of the many small operations sets the pace, the GPU is done soon after the last launch, and the "
            "unsynchronised timer reads nearly the whole step. If you find that, it supports the hypothesis."
        )
    if sweep:
        b = max(r["batch"] for r in sweep["rows"])
        d = max(r["d_model"] for r in sweep["rows"])
        big = _sweep_row(sweep, b, d, False)
        text += (
            f" At the sweep's batch {b}, d_model {d}, a float32 step took "
            f"{b * 128 / big['tokens_per_s_loop'] * 1e3:.0f} ms at {_pct(big['share_of_peak_loop'])} of the float32 "
            "peak: there the arithmetic fills the step, so expect the unsynchronised timer to read well short of it."
        )
    return text + (
        " (In a loop without `time_it`, the next step's token-id check waits for this step's work, so the total "
        "time of many steps is right to within the last step's, even without any `synchronize()`.)"
    )


def _render_exercises(results: dict | None = None) -> list[str]:
    """Predict, then measure: each exercise repeats one of the page's measurements with one thing changed."""
    results = results or {}
    gpu = (results.get("precision") or {}).get("cuda")
    sweep = (results.get("batch_sweep") or {}).get("cuda")
    cpu = (results.get("precision") or {}).get("cpu")
    lines = [
        "## Exercises",
        "",
        (
            "Before each measurement, write down what you expect, then run it with `time_it` from the start of this "
            "appendix."
        ),
        "",
        (
            "**1. What the timer includes.** "
            "On a GPU, time one training step of chapter 10's `GPT` with and without the second "
            "`torch.cuda.synchronize()` in `time_it`. The model's token-id check waits for the GPU at the start "
            "of every forward call: which parts of the step does the timer without the second `synchronize()` "
            "still include?"
        ),
        "",
        *_fold("Expected outcome", _exercise1_outcome(gpu, sweep), "text"),
        (
            "**2. The batch and the peak, on your machine.** "
            "The batch sweep above was measured on a GPU. On your own device, train the same model for a few steps "
            "at batch sizes 16, 64 and 256, and compute the share of the fastest matmul as the section on the "
            "limit does. How does the share change with the batch, and why differently from the sweep?"
        ),
        "",
    ]
    sol2 = (
        "n = sum(p.numel() for p in model.parameters()) - model.pos_emb.weight.numel()\n"
        "cfg = model.config\n"
        "flops_per_token = 6 * n + 12 * cfg.n_layer * cfg.d_model * cfg.block_size\n"
        "tokens_per_s = batch * cfg.block_size / time_it(step)\n"
        "share = flops_per_token * tokens_per_s / peak_flops  # peak_flops: your fastest matmul\n"
    )
    expect = []
    if sweep:
        sh = {r["batch"]: r["share_of_peak_loop"] for r in sweep["rows"] if r["d_model"] == 128 and not r["bf16"]}
        expect.append(
            f"On a GPU, expect the share to grow with the batch, as in the sweep on the "
            f"{sweep['device'].get('name', 'GPU')} ("
            + ", ".join(f"batch {k}: {_pct(sh[k])}" for k in sorted(sh))
            + ")."
        )
    if cpu:
        expect.append(
            "On a CPU, float32 training already reached "
            f"{_pct(cpu['variants']['ours_fp32_eager']['share_of_peak'])} of the fastest float32 matmul at batch "
            f"{cpu['batch']}, so expect a smaller change there."
        )
    lines += _fold("Solution and expected outcome", sol2, after=" ".join(expect))
    lines += [
        (
            "**3. TF32 in a training step.** The section on the limit measured what TF32 does for a large "
            "matmul. On a GPU, set `torch.backends.cuda.matmul.allow_tf32 = True` and time a float32 training step "
            "of the model above with and without it: how much of the matmul's speed-up does the step keep?"
        ),
        "",
    ]
    if gpu and gpu["peak_flops"].get("tf32"):
        p = gpu["peak_flops"]
        lines += _fold(
            "Expected outcome",
            f"On the {gpu['device']['name']} the fastest float32 matmul ran at {_flops(p['fp32'])} and the fastest "
            f"TF32 one at {_flops(p['tf32'])}, {_x(p['tf32'] / p['fp32'])} as fast. The training step of the "
            "model above spends most of its time outside arithmetic (it reached "
            f"{_span(_fp32_spread(gpu)[2], _fp32_spread(gpu)[3], _pct)} of the float32 peak), so expect it to gain "
            "far less than the matmul.",
            "text",
        )
    lines += [
        (
            "**4. When compiling pays.** "
            "Compile a model four times as wide (d_model 512) and count the steps after which the compile "
            "time is paid back, if it is."
        ),
        "",
        *_fold(
            "Expected outcome",
            "A prediction to test. The compiler fuses the small operations between the matrix "
            "multiplications and leaves the products to the same libraries. At four times the width each "
            "weight-matrix product does 16 times the arithmetic (attention's two n×n products and the output "
            "layer only 4 times) while each small operation touches only 4 times the memory, so the "
            "share of the step that fusion can shorten falls: expect a saving that is small against the step, if "
            "it is measurable at all, and count the steps from the smaller of the two savings.",
            "text",
        ),
    ]
    return lines


def plain_marks(text: str) -> str:
    """A processor's name as a reader writes it: "Intel Xeon", not the "Intel(R) Xeon(R)" it reports."""
    return re.sub(r"\s?\((?:R|TM)\)", "", text)


def render(results: dict) -> str:
    """The appendix page for ``results``."""
    return plain_marks(_render(results))


def _render(results: dict) -> str:
    lines = [
        "# Performance",
        "",
        (
            "Why is a model slow, and what would make it fast? This appendix answers with measurements of the "
            "course's own models: where the time goes in attention, what a KV cache saves in generation, what a "
            "smaller number format and a compiler buy in training, and how far all of it is from the fastest "
            "arithmetic the device was measured to do."
        ),
        "",
    ]
    lines += _render_summary(results)
    lines += _render_machine(results)
    lines += _render_timing()
    if results.get("scaling"):
        lines += _render_scaling(results["scaling"], results["machine"]["cpu"], results.get("extra_checks"))
    if results.get("kv_cache"):
        lines += _render_kv(
            results["kv_cache"], (results["kv_cache"].get("device") or {}).get("cpu", results["machine"]["cpu"])
        )
    prec = results.get("precision")
    chk = results.get("cpu_checks")
    if prec:
        sweep = (results.get("batch_sweep") or {}).get("cuda")
        lines += _render_precision(prec, chk, sweep)
        lines += _render_compile(prec, results.get("extra_checks"))
        lines += _render_limit(prec, chk, sweep, results.get("extra_checks"))
    lines += _render_side_by_side(results)
    lines += _render_notebooks(results)
    lines += _render_ddp(results)
    lines += _render_exercises(results)
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines)


def bench_batch_sweep(device: torch.device, steps: int = 20, warmup: int = 5) -> dict:
    """Chapter 10's GPT (4 layers, 4 heads, block 128) trained on random tokens at several batch sizes and
    widths, in float32 and under bfloat16 autocast: tokens/s when every step is synchronised before and after
    (as in bench_precision_compile), and when ``steps`` steps run back to back with one synchronisation at the end
    (an ordinary training loop); with FLOPs per token (nanoGPT's estimate) and the share of the measured peak."""
    from transformer_course import gpt as G

    s = syncer(device)
    peaks = {
        "fp32": max(
            measure_matmul_peak(device, torch.float32, n) for n in ((4096, 8192) if device.type == "cuda" else (1024,))
        ),
        "bf16": max(
            measure_matmul_peak(device, torch.bfloat16, n) for n in ((4096, 8192) if device.type == "cuda" else (1024,))
        ),
    }
    out: dict = {"device": _device_info(device), "date": time.strftime("%Y-%m-%d"), "peak_flops": peaks, "rows": []}
    grid = [(b, d) for d in (128, 512) for b in (32, 128, 512)] if device.type == "cuda" else [(32, 128), (128, 128)]
    for batch, d_model in grid:
        cfg = G.GPTConfig(vocab_size=96, block_size=128, n_layer=4, n_head=4, d_model=d_model)
        torch.manual_seed(0)
        model = G.GPT(cfg).to(device).train()
        n_matmul = sum(p.numel() for p in model.parameters()) - model.pos_emb.weight.numel()
        flops_per_token = 6 * n_matmul + 12 * cfg.n_layer * d_model * cfg.block_size
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randint(0, 96, (batch, cfg.block_size), device=device)
        y = torch.randint(0, 96, (batch, cfg.block_size), device=device)
        for bf16 in (False, True):

            def step(model=model, opt=opt, x=x, y=y, bf16=bf16) -> None:
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                    loss = G.lm_loss(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            synced = median_seconds(step, repeats=steps, warmup=warmup, sync=s)
            if s:
                s()
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            if s:
                s()
            loop = (time.perf_counter() - t0) / steps
            tokens = batch * cfg.block_size
            row = {
                "batch": batch,
                "d_model": d_model,
                "bf16": bf16,
                "parameters_counted": n_matmul,
                "flops_per_token": flops_per_token,
                "tokens_per_s_synced": tokens / synced,
                "tokens_per_s_loop": tokens / loop,
            }
            row["share_of_peak_loop"] = flops_per_token * row["tokens_per_s_loop"] / peaks["bf16" if bf16 else "fp32"]
            out["rows"].append(row)
            print(
                f"  {device.type} batch {batch:4d} d_model {d_model:4d} {'bf16' if bf16 else 'fp32'}: "
                f"{row['tokens_per_s_synced']:10.0f} tokens/s synced, {row['tokens_per_s_loop']:10.0f} in a loop, "
                f"{100 * row['share_of_peak_loop']:5.1f} % of peak",
                flush=True,
            )
    return out


def merge_results(previous: dict, new: dict) -> dict:
    """``previous`` with the sections of ``new``; a section keyed by device (``precision``) is merged per
    device, so a GPU machine's measurement joins this machine's CPU one."""
    out = dict(previous)
    for key, value in new.items():
        if key in PER_DEVICE_SECTIONS and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


PER_DEVICE_SECTIONS = ("precision", "batch_sweep")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-notebooks", action="store_true", help="keep the notebook timings of the last results")
    parser.add_argument("--render-only", action="store_true", help="only rewrite the page from bench/results.json")
    parser.add_argument(
        "--show-chapter-times",
        action="store_true",
        help="show the chapter run times even when they do not cover every chapter",
    )
    parser.add_argument(
        "--chapters", nargs="+", metavar="NN", help="with --only-notebooks: time only these chapters (e.g. 12 13)"
    )
    parser.add_argument("--only-ddp", action="store_true", help="measure only one vs two processes, then render")
    parser.add_argument(
        "--only-notebooks", action="store_true", help="time only the chapters' notebooks (after an edit), then render"
    )
    parser.add_argument(
        "--only-precision",
        action="store_true",
        help="measure only precision and compilation (float32, bfloat16, torch.compile), merge, render",
    )
    parser.add_argument(
        "--only-cpu-checks",
        action="store_true",
        help="measure only the checks behind the precision section's explanations (CPU), merge, render",
    )
    parser.add_argument(
        "--only-batch-sweep",
        action="store_true",
        help="measure only throughput against batch size and width (meant for a GPU), merge, render",
    )
    parser.add_argument(
        "--only-scaling", action="store_true", help="measure only attention against sequence length, merge, render"
    )
    parser.add_argument(
        "--only-online-softmax",
        action="store_true",
        help="measure only blocked attention with an online softmax against the explicit one (seconds), merge, render",
    )
    parser.add_argument(
        "--only-graph-breaks",
        action="store_true",
        help="ask the compiler only why it breaks the course's GPT into graphs (seconds), merge, render",
    )
    parser.add_argument(
        "--only-extra-checks",
        action="store_true",
        help="measure only blocked attention (online softmax), the graph breaks' reasons and a copy's bandwidth "
        "(CPU, seconds), merge, render",
    )
    parser.add_argument(
        "--devices",
        default=None,
        help="with --only-precision: comma-separated devices to measure (default: cpu, and cuda when present)",
    )
    parser.add_argument(
        "--out-json",
        metavar="FILE",
        type=Path,
        help="with --only-precision: write only that section's JSON to FILE; bench/results.json and the page "
        "are left alone",
    )
    parser.add_argument(
        "--merge-json",
        metavar="FILE",
        type=Path,
        help="merge the sections of FILE (e.g. another machine's --out-json) into bench/results.json, then render",
    )
    parser.add_argument("--gpt-vs-minimal-once", metavar="DEVICE", help=argparse.SUPPRESS)  # one run, as JSON
    args = parser.parse_args()
    global SHOW_CHAPTER_TIMES
    SHOW_CHAPTER_TIMES = args.show_chapter_times
    if args.gpt_vs_minimal_once:
        torch.set_num_threads(THREADS)
        print(json.dumps(bench_gpt_vs_minimal(torch.device(args.gpt_vs_minimal_once))))
        return
    if args.only_precision or args.only_batch_sweep:
        chosen = [torch.device(d.strip()) for d in args.devices.split(",") if d.strip()] if args.devices else devices()
        name = "batch_sweep" if args.only_batch_sweep else "precision"
        section: dict = {name: {}}
        for d in chosen:
            print(f"{name} on {d.type} ...", flush=True)
            section[name][d.type] = bench_batch_sweep(d) if args.only_batch_sweep else bench_precision_compile(d)
        if args.out_json:
            args.out_json.parent.mkdir(parents=True, exist_ok=True)
            args.out_json.write_text(json.dumps(section, indent=1) + "\n")
            print(f"wrote {args.out_json}")
            return
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.only_precision or args.only_batch_sweep:
        results = merge_results(previous, section)
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    elif args.merge_json:
        results = merge_results(previous, json.loads(args.merge_json.read_text()))
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    elif args.only_cpu_checks:
        results = {**previous, "cpu_checks": bench_cpu_checks()}
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    elif args.only_online_softmax:
        torch.set_num_threads(THREADS)
        extra = {
            **previous.get("extra_checks", {}),
            "online_softmax": bench_online_softmax(),
            "fresh_vs_buffer": bench_fresh_vs_buffer(),
        }
        results = {**previous, "extra_checks": extra}
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    elif args.only_graph_breaks:
        extra = {**previous.get("extra_checks", {}), "graph_breaks": bench_graph_breaks()}
        results = {**previous, "extra_checks": extra}
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    elif args.only_extra_checks:
        results = {**previous, "extra_checks": bench_extra_checks()}
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    elif args.only_scaling:
        results = {**previous, "scaling": bench_scaling()}
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    elif args.only_ddp:
        results = {**previous, "ddp": bench_ddp()}
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    elif args.only_notebooks:
        os.environ.update(_course_env())
        print("1-2. notebooks ...", flush=True)
        notebooks = run_notebooks(args.chapters)
        date = time.strftime("%Y-%m-%d")
        if args.chapters:  # the others keep their rows; rows of notebooks that no longer exist go
            existing = {p.stem for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb")}
            timed = {row["notebook"] for row in notebooks}
            kept = [r for r in previous.get("notebooks", []) if r["notebook"] in existing - timed]
            notebooks = sorted(kept + notebooks, key=lambda r: r["notebook"])
            since = previous.get("notebooks_date", "?")
            date = f"{since}; chapters {', '.join(args.chapters)} on {date}"
        results = {
            **previous,
            "notebooks": notebooks,
            "notebooks_date": date,
            "notebooks_machine": machine(),  # may differ from the main run's
        }
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    elif args.render_only:
        results = previous
    else:
        torch.set_num_threads(THREADS)
        os.environ.update(_course_env())
        results = {"machine": machine(), "date": time.strftime("%Y-%m-%d")}
        if args.skip_notebooks:
            results["notebooks"] = previous.get("notebooks")
        else:
            print("1-2. notebooks ...", flush=True)
            results["notebooks"] = run_notebooks()
        print("3. side by side ...", flush=True)
        results["mha"] = {d.type: bench_mha(d) for d in devices()}
        gpt = {d.type: r for d in devices() if (r := bench_gpt_vs_minimal_runs(d))}
        results["gpt_vs_minimal"] = gpt or None
        gpt = {d.type: r for d in devices() if (r := bench_gpt_vs_hf(d))}
        results["gpt_vs_hf"] = gpt or None
        enc = {d.type: r for d in devices() if (r := bench_encoder_vs_bert(d))}
        results["encoder_vs_bert"] = enc or None
        print("4. scaling ...", flush=True)
        results["scaling"] = bench_scaling()
        results["kv_cache"] = bench_kv_cache()
        print("   precision and compilation ...", flush=True)
        results["precision"] = {
            **previous.get("precision", {}),
            **{d.type: bench_precision_compile(d) for d in devices()},
        }
        results["cpu_checks"] = bench_cpu_checks()
        print("   several processes ...", flush=True)
        results["ddp"] = bench_ddp()
        RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    plot(results)
    PAGE.write_text(render(results) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS.relative_to(ROOT)} and {PAGE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
