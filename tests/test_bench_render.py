"""The performance appendix is rendered from ``bench/results.json``: it renders, it speaks of the subject only,
and a GPU machine's measurement merges into this machine's per device."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_run_render", ROOT / "bench" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
RESULTS = json.loads((ROOT / "bench" / "results.json").read_text(encoding="utf-8"))


def test_the_committed_page_is_what_the_results_render():
    assert (ROOT / "book" / "performance.md").read_text(encoding="utf-8") == BENCH.render(RESULTS) + "\n"


def test_the_page_speaks_of_the_subject_only():
    page = BENCH.render(RESULTS)
    for word in ("✓", "nbval", "make test", " CI ", "CI,", "site build", "| |\n|---|---|\n\n", "seed version"):
        assert word not in page, word
    assert not re.search(r"over its \d+ pairs", page)
    assert page.count("\n# ") == 0 and page.startswith("# ")


def test_merge_keeps_every_other_key_and_merges_precision_per_device():
    previous = {"machine": {"cpu": "x"}, "kv_cache": {"rows": []}, "precision": {"cpu": {"steps": 1}}}
    merged = BENCH.merge_results(previous, {"precision": {"cuda": {"steps": 2}}})
    assert merged["kv_cache"] == {"rows": []} and merged["machine"] == {"cpu": "x"}
    assert merged["precision"] == {"cpu": {"steps": 1}, "cuda": {"steps": 2}}
    assert previous["precision"] == {"cpu": {"steps": 1}}  # not changed in place


def test_a_variant_that_failed_is_reported_not_invented():
    results = copy.deepcopy(RESULTS)
    prec = results.get("precision", {}).get("cpu")
    if prec is None:
        return
    prec["variants"]["ours_fp32_compiled"] = {"model": "ours", "compiled": True, "bf16": False, "error": "E: no cc"}
    page = BENCH.render(results)
    assert "not available here: E: no cc" in page


def test_every_number_in_the_prose_comes_from_render():
    """No hand-typed measurement: the page's numbers change when the results do."""
    results = copy.deepcopy(RESULTS)
    for row in results["kv_cache"]["rows"]:
        row["no_cache_s"] *= 3
        row["speedup"] *= 3
    before, after = BENCH.render(RESULTS), BENCH.render(results)
    kv = re.compile(r"## Generation.*?\n## ", re.S)
    assert kv.search(before).group(0) != kv.search(after).group(0)


def test_a_compile_saving_counts_only_when_both_timings_agree_and_exceed_the_noise():
    rec = {
        "variants": {
            "e": {"step_s": 0.100, "run_step_s": 0.101},
            "c": {"step_s": 0.090, "run_step_s": 0.091},
            "c_flip": {"step_s": 0.090, "run_step_s": 0.105},
        }
    }
    turns, alone, noise, measurable = BENCH._saving(rec, "e", "c")
    assert measurable and abs(turns - 0.010) < 1e-9 and abs(noise - 0.001) < 1e-9
    assert not BENCH._saving(rec, "e", "c_flip")[3]  # the two timings disagree on the sign


def test_a_chapter_timed_later_gets_its_row_and_joins_the_total():
    results = copy.deepcopy(RESULTS)
    timed = {r["notebook"] for r in results["notebooks"]}
    book = sorted(p.stem for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    for nb in book:
        if nb not in timed:
            results["notebooks"].append({"notebook": nb, "seconds": 100.0, "error": None, "metrics": []})
    page = BENCH.render(results)
    chapters = re.search(r"## What each chapter costs a learner.*?\n## ", page, re.S).group(0)
    assert "not measured" not in chapters and "| all chapters |" in chapters
    total = sum(round(r["seconds"], 1) for r in results["notebooks"])
    assert f"| all chapters | {total:.1f} |" in chapters


def test_chapter_times_that_miss_a_chapter_stay_off_the_page():
    results = copy.deepcopy(RESULTS)
    book = sorted(p.stem for p in (ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    results["notebooks"] = [r for r in results["notebooks"] if r["notebook"] != book[-1]]  # one chapter untimed
    page = BENCH.render(results)
    assert "## What each chapter costs a learner" not in page
    assert "chapters on a" not in page and "newer than these timings" not in page
    # the section is still there when asked for, with the untimed chapter marked
    old = BENCH.SHOW_CHAPTER_TIMES
    try:
        BENCH.SHOW_CHAPTER_TIMES = True
        chapters = re.search(r"## What each chapter costs a learner.*?\n## ", BENCH.render(results), re.S).group(0)
    finally:
        BENCH.SHOW_CHAPTER_TIMES = old
    assert "not measured" in chapters


def test_blocked_attention_follows_its_inputs_dtype_and_matches_softmax_attention():
    import torch

    q, k, v = (torch.randn(1, 1, 300, 16, dtype=torch.float64) for _ in range(3))
    out = BENCH.blocked_attention(q, k, v, block=128)
    ref = torch.softmax(q @ k.transpose(-2, -1) / 4.0, -1) @ v
    assert out.dtype == torch.float64 and torch.allclose(out, ref, atol=1e-12)
