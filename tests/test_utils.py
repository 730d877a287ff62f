import random
import textwrap

import numpy as np
import pytest
import torch

from transformer_course.utils import count_parameters, get_device, set_seed, show_source


def test_set_seed_repeats_every_generator():
    set_seed(123)
    a = (random.random(), np.random.rand(), torch.rand(3))
    set_seed(123)
    b = (random.random(), np.random.rand(), torch.rand(3))
    assert a[0] == b[0] and a[1] == b[1] and torch.equal(a[2], b[2])


def test_set_seed_fixes_threads_and_returns_generator():
    old = torch.get_num_threads()
    try:
        g = set_seed(5, num_threads=1)
        assert torch.get_num_threads() == 1
        assert torch.equal(torch.rand(2, generator=g), torch.rand(2, generator=torch.Generator().manual_seed(5)))
    finally:
        torch.set_num_threads(old)


def test_set_seed_rejects_bad_input():
    with pytest.raises(TypeError, match="seed must be an int"):
        set_seed(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_threads"):
        set_seed(1, num_threads=0)


def test_get_device_honours_preference(monkeypatch):
    assert get_device("cpu") == torch.device("cpu")
    monkeypatch.setenv("TRANSFORMER_COURSE_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            get_device("cuda")


def test_count_parameters_counts_shared_once():
    lin = torch.nn.Linear(3, 4)
    model = torch.nn.ModuleList([lin, lin])
    assert count_parameters(model) == 3 * 4 + 4
    lin.bias.requires_grad_(False)
    assert count_parameters(model) == 12
    assert count_parameters(model, trainable_only=False) == 16


def test_show_source_shows_the_package_code():
    code = show_source(set_seed)
    assert "def set_seed" in code.data


def test_show_source_can_leave_out_argument_checks():
    from transformer_course.interpret import attention_rollout

    full = show_source(set_seed).data
    short = show_source(set_seed, checks=False).data
    assert "raise" in full and "raise" not in short
    assert "# (checks left out)" in short
    assert "torch.manual_seed(seed)" in short  # the work stays
    compile(textwrap.dedent(short), "<listing>", "exec")  # still valid Python
    rollout = show_source(attention_rollout, checks=False).data
    assert "raise" not in rollout and "_check_rows" not in rollout
    compile(textwrap.dedent(rollout), "<listing>", "exec")
    # nothing to leave out: the listing is the source
    assert show_source(show_source, checks=False).data == show_source(show_source).data


def test_show_source_reads_sphinx_cross_references_as_code_names():
    from transformer_course.bert import pretrain_mlm
    from transformer_course.utils import _plain_cross_references

    assert _plain_cross_references(":func:`~transformer_course.training.fit`") == "``fit``"
    assert _plain_cross_references(":class:`History` and :func:`mask_tokens`") == "``History`` and ``mask_tokens``"
    listing = show_source(pretrain_mlm, checks=False).data
    assert ":func:" not in listing and ":class:" not in listing
    assert "``fit``" in listing and "``History``" in listing


def test_finished_progress_bar_shows_no_timing(capsys) -> None:
    """While it runs the bar shows speed and time left; its last state, what a page keeps, does not."""
    from transformer_course.utils import progress

    bar = progress(range(20), desc="training")
    for i in bar:
        bar.set_postfix(loss=f"{1 / (i + 1):.3f}")
    last = capsys.readouterr().out.replace("\r\n", "\n").split("\n")[-2].rsplit("\r", 1)[-1]
    assert last.rstrip() == "training: 100%|██████████| 20/20, loss=0.050", last


def test_captured_logs_collects_warnings_and_restores_the_logger():
    import logging

    from transformer_course.utils import captured_logs

    log = logging.getLogger("course.test.captured")
    level, propagate = log.level, log.propagate
    with captured_logs("course.test.captured") as records:
        log.warning("right-padding was detected")
        log.info("not at warning level")
    assert [r.getMessage() for r in records] == ["right-padding was detected"]
    assert (log.level, log.propagate, log.handlers) == (level, propagate, [])
    with pytest.raises(ValueError, match="logger name"):
        with captured_logs(""):
            pass


def test_cpu_name_reads_cpuinfo_and_falls_back(monkeypatch, tmp_path) -> None:
    from transformer_course import utils

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Example CPU 9000\n")
    real_path = utils.Path
    monkeypatch.setattr(utils, "Path", lambda p: info if p == "/proc/cpuinfo" else real_path(p))
    assert utils.cpu_name() == "Example CPU 9000"
    monkeypatch.setattr(utils, "Path", lambda p: tmp_path / "missing")
    monkeypatch.setattr(utils.platform, "processor", lambda: "")
    monkeypatch.setattr(utils.platform, "machine", lambda: "x86_64")
    assert utils.cpu_name() == "x86_64"


def test_print_wrapped_breaks_long_lines_at_their_indent(capsys):
    from transformer_course.utils import print_wrapped

    print_wrapped("short\n    " + "word " * 30, width=40)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "short"
    assert all(len(line) <= 40 for line in lines)
    assert all(line.startswith("    word") for line in lines[1:])
    with pytest.raises(TypeError, match="decode token ids first"):
        print_wrapped([1, 2, 3])


def test_table_prints_aligned_text_and_renders_html():
    from transformer_course.utils import Table

    t = Table(
        ["format", "accuracy", "n"],
        [["iso <b>", 0.985, 200], ["us_slash", 0.5, 40]],
        formats={"accuracy": ".1%"},
        caption="Accuracy by format",
    )
    assert repr(t).splitlines() == [
        "Accuracy by format",
        "format    accuracy    n",
        "iso <b>      98.5%  200",
        "us_slash     50.0%   40",
    ]
    html = t._repr_html_()
    assert "<caption>Accuracy by format</caption>" in html
    assert "iso &lt;b&gt;" in html  # values are escaped
    assert '<td style="text-align:right">98.5%</td>' in html
    assert '<td style="text-align:left">us_slash</td>' in html


def test_table_rejects_ragged_rows_and_unknown_formats():
    import pytest

    from transformer_course.utils import Table

    with pytest.raises(ValueError, match="row 1 has 1 values for 2 columns"):
        Table(["a", "b"], [[1, 2], [3]])
    with pytest.raises(ValueError, match="not columns"):
        Table(["a"], [[1]], formats={"b": ".1f"})
    with pytest.raises(ValueError, match="at least one column"):
        Table([], [])
