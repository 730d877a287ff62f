import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.collections import LineCollection

from transformer_course.interpret import (
    attention_rollout,
    leave_one_out,
    plot_attention_flow,
    top_k_overlap,
)

# Every token looks only at token 0: with the residual path mixed in (0.5 each), token 1 keeps
# half of itself per layer, so after L layers its rollout row is [1 - 0.5**L, 0.5**L].
TO_FIRST = torch.tensor([[1.0, 0.0], [1.0, 0.0]])


@pytest.mark.parametrize("num_layers", [1, 2, 3, 5])
def test_rollout_hand_example_closed_form(num_layers):
    r = attention_rollout([TO_FIRST] * num_layers)
    expected = torch.tensor([[1.0, 0.0], [1 - 0.5**num_layers, 0.5**num_layers]])
    assert torch.allclose(r, expected, atol=1e-7)


def test_rollout_two_layers_by_hand_and_head_average():
    # Layer 1: two heads, one keeps every token where it is, one sends everything to token 0;
    # their mean is [[1, 0], [0.5, 0.5]], and with the identity mixed in [[1, 0], [0.25, 0.75]].
    heads = torch.stack([torch.eye(2), TO_FIRST])
    # Layer 2: token 0 looks at token 1 only -> with the identity [[0.5, 0.5], [0, 1]].
    swap = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    r = attention_rollout([heads, torch.stack([swap, swap])])
    # [[0.5, 0.5], [0, 1]] @ [[1, 0], [0.25, 0.75]] = [[0.625, 0.375], [0.25, 0.75]]
    assert torch.allclose(r, torch.tensor([[0.625, 0.375], [0.25, 0.75]]), atol=1e-7)


def test_rollout_residual_extremes_and_batch_shape():
    g = torch.Generator().manual_seed(0)
    att = [torch.softmax(torch.randn(2, 3, 5, 5, generator=g), -1) for _ in range(4)]
    r = attention_rollout(att)
    assert r.shape == (2, 5, 5) and r.dtype == torch.float32
    assert torch.allclose(r.sum(-1), torch.ones(2, 5), atol=1e-6)  # rows are distributions
    assert torch.allclose(attention_rollout(att, residual=1.0), torch.eye(5).expand(2, 5, 5))
    plain = att[3].mean(1) @ att[2].mean(1) @ att[1].mean(1) @ att[0].mean(1)
    assert torch.allclose(attention_rollout(att, residual=0.0), plain, atol=1e-6)
    assert torch.allclose(attention_rollout(torch.stack(att)), r)  # a stacked (layers, ...) tensor works too


def test_rollout_real_tokens_ignore_padding():
    g = torch.Generator().manual_seed(1)
    real = torch.tensor([True, True, True, False, False])
    scores = torch.randn(3, 2, 5, 5, generator=g).masked_fill(~real, float("-inf"))
    att = list(torch.softmax(scores, -1))  # 3 layers of (heads, 5, 5): padding keys get weight 0
    r = attention_rollout(att)
    alone = attention_rollout([torch.softmax(s[:, :3, :3], -1) for s in scores])
    assert torch.allclose(r[:3, :3], alone, atol=1e-6)
    assert r[:3, 3:].abs().max() == 0


def test_rollout_errors_name_the_problem():
    with pytest.raises(ValueError, match="empty"):
        attention_rollout([])
    with pytest.raises(ValueError, match="between 0 and 1"):
        attention_rollout([TO_FIRST], residual=1.5)
    with pytest.raises(ValueError, match="same shape"):
        attention_rollout([TO_FIRST, torch.eye(3)])
    with pytest.raises(ValueError, match="not the scores"):
        attention_rollout([torch.randn(3, 3)])
    with pytest.raises(ValueError, match="tokens, tokens"):
        attention_rollout([torch.ones(2, 3) / 3])


def _drawn(ax):
    (lines,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    return lines


def _labels(ax):
    return [t.get_text() for t in ax.texts]


def test_flow_one_line_per_link_and_top_k():
    w = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])
    ax = plot_attention_flow(w, ["a", "b", "c"])
    lines = _drawn(ax)
    assert len(lines.get_segments()) == 9
    widths = sorted(lines.get_linewidths())
    assert widths[-1] == pytest.approx(7.0 * 0.8)  # the heaviest link is drawn widest
    assert _labels(ax).count("a") == 2  # each token once per column
    assert ax.get_legend() is not None and ax.get_legend().get_title().get_text() == "weight"
    assert len(_drawn(plot_attention_flow(w, list("abc"), top_k=1)).get_segments()) == 3
    assert len(_drawn(plot_attention_flow(w, list("abc"), min_weight=0.5)).get_segments()) == 2
    assert len(_drawn(plot_attention_flow(w, list("abc"), queries=[2])).get_segments()) == 3
    plt.close("all")


def test_flow_highlight_draws_the_link_and_colours_its_tokens():
    w = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])
    ax = plot_attention_flow(w, list("abc"), top_k=1, highlight=[(2, 0)], highlight_color="red")
    assert len(_drawn(ax).get_segments()) == 3  # the ordinary links are unchanged
    (line,) = ax.get_lines()  # the highlighted link, though top_k=1 leaves it out
    assert list(line.get_xdata()) == [0.0, 1.0] and list(line.get_ydata()) == [-2, 0]
    assert line.get_color() == "red" and line.get_linewidth() == pytest.approx(7.0 * 0.3)
    red = sorted((t.get_position()[0], t.get_text()) for t in ax.texts if t.get_color() == "red")
    assert red == [(-0.04, "c"), (1.04, "a")]  # the query on the left, the key on the right
    with pytest.raises(ValueError, match="highlight pairs"):
        plot_attention_flow(w, list("abc"), highlight=[(0, 3)])
    plt.close("all")


def test_flow_heads_are_averaged_and_numpy_works():
    heads = np.stack([np.eye(3), np.full((3, 3), 1 / 3)])
    lines = _drawn(plot_attention_flow(heads, list("abc"), top_k=1))
    assert sorted(lines.get_linewidths()) == pytest.approx([7.0 * (0.5 + 1 / 6)] * 3)
    plt.close("all")


def test_flow_leaves_padding_out():
    real = torch.tensor([1, 1, 1, 0, 0])
    scores = torch.randn(5, 5).masked_fill(real == 0, float("-inf"))
    w = torch.softmax(scores, -1)  # padding queries' rows are real softmaxes too
    tokens = ["[CLS]", "hi", "[SEP]", "[PAD]", "[PAD]"]
    for kwargs in ({"mask": real}, {"mask": real.bool().tolist()}, {}):  # the mask, or the [PAD] token itself
        ax = plot_attention_flow(w, tokens, **kwargs)
        assert "[PAD]" not in _labels(ax)
        assert len(_drawn(ax).get_segments()) == 9  # 3 real queries x 3 real keys
    ax = plot_attention_flow(w, ["a", "b", "c", "d", "e"], mask=real, pad_token=None)
    assert "d" not in _labels(ax) and "e" not in _labels(ax)
    plt.close("all")


def test_flow_errors_name_the_problem():
    w = torch.softmax(torch.randn(4, 4), -1)
    with pytest.raises(ValueError, match=r"attentions\[layer\]\[0"):
        plot_attention_flow(w[None, None], list("abcd"))
    with pytest.raises(ValueError, match="square"):
        plot_attention_flow(w[:3], list("abcd"))
    with pytest.raises(ValueError, match="3 tokens for attention over 4 positions"):
        plot_attention_flow(w, list("abc"))
    with pytest.raises(ValueError, match="mask has 3 entries for 4 tokens"):
        plot_attention_flow(w, list("abcd"), mask=[1, 1, 0])
    with pytest.raises(ValueError, match="0/1"):
        plot_attention_flow(w, list("abcd"), mask=[1, 2, 1, 1])
    with pytest.raises(ValueError, match="nothing to draw"):
        plot_attention_flow(w, list("abcd"), mask=[0, 0, 0, 0])
    with pytest.raises(ValueError, match="not the scores"):
        plot_attention_flow(torch.randn(4, 4), list("abcd"))
    with pytest.raises(ValueError, match="top_k"):
        plot_attention_flow(w, list("abcd"), top_k=0)
    with pytest.raises(ValueError, match=r"queries \[7\]"):
        plot_attention_flow(w, list("abcd"), queries=[7])
    plt.close("all")


class _SumsTokens(torch.nn.Module):
    """Logits [0, 0.5 * (number of tokens with id 5)]: each 5 in the text makes class 1 likelier."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        fives = (input_ids == 5).sum(-1).float()
        return torch.stack([torch.zeros_like(fives), 0.5 * fives], dim=-1)


def test_leave_one_out_measures_the_drop_of_each_deleted_token():
    ids = torch.tensor([[101, 5, 7, 5, 102]])
    drop = leave_one_out(_SumsTokens(), ids)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    full, one_less = sig(1.0), sig(0.5)  # P(class 1) with two 5s and with one
    assert torch.isnan(drop[[0, 4]]).all()  # [CLS] and [SEP] are kept
    assert drop[1].item() == pytest.approx(full - one_less, abs=1e-6)
    assert drop[3].item() == pytest.approx(full - one_less, abs=1e-6)
    assert drop[2].item() == pytest.approx(0.0, abs=1e-6)  # token 7 does not matter
    assert leave_one_out(_SumsTokens(), ids, target=0)[1].item() == pytest.approx(one_less - full, abs=1e-6)
    assert leave_one_out(_SumsTokens(), ids[0], positions=[0], batch_size=1)[0].item() == pytest.approx(0.0, abs=1e-6)


def test_leave_one_out_errors():
    with pytest.raises(TypeError, match="token ids"):
        leave_one_out(_SumsTokens(), torch.rand(5))
    with pytest.raises(ValueError, match="one text"):
        leave_one_out(_SumsTokens(), torch.ones(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="no position"):
        leave_one_out(_SumsTokens(), torch.tensor([101, 102]))
    with pytest.raises(ValueError, match="outside"):
        leave_one_out(_SumsTokens(), torch.tensor([101, 5, 102]), positions=[3])
    with pytest.raises(ValueError, match="class id"):
        leave_one_out(_SumsTokens(), torch.tensor([101, 5, 102]), target=2)


def test_top_k_overlap():
    a = torch.tensor([0.9, 0.1, 0.5, 0.3])
    assert top_k_overlap(a, a, 2) == 1.0
    assert top_k_overlap(a, torch.tensor([0.0, 1.0, 0.2, 0.3]), 1) == 0.0
    assert top_k_overlap(a, torch.tensor([0.0, 1.0, 0.9, 0.3]), 2) == 0.5
    with pytest.raises(ValueError, match="same positions"):
        top_k_overlap(a, a[:3], 1)
    with pytest.raises(ValueError, match="k must lie in 1..4"):
        top_k_overlap(a, a, 5)
    with pytest.raises(ValueError, match="NaN"):
        top_k_overlap(torch.tensor([float("nan"), 1.0]), torch.tensor([0.0, 1.0]), 1)
