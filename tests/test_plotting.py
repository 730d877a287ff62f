import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from transformer_course.plotting import plot_attention, plot_attention_grid  # noqa: E402


def test_plot_attention_labels_axes():
    w = torch.softmax(torch.randn(3, 4), dim=-1)
    ax = plot_attention(w, keys=list("abcd"), queries=list("xyz"), annotate=True, title="t")
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcd")
    assert [t.get_text() for t in ax.get_yticklabels()] == list("xyz")
    assert ax.get_title() == "t"
    assert len(ax.texts) == 12
    plt.close("all")


def test_plot_attention_square_defaults_queries_to_keys():
    ax = plot_attention(torch.eye(3)[None, None], keys=["a", "b", "c"])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    plt.close("all")


def test_plot_attention_errors_name_the_problem():
    with pytest.raises(ValueError, match="one \\(queries, keys\\) matrix"):
        plot_attention(torch.rand(2, 3, 4))
    with pytest.raises(ValueError, match="2 keys labels for a matrix with 4 keys"):
        plot_attention(torch.rand(3, 4), keys=["a", "b"], queries=list("xyz"))


def test_plot_attention_grid_shape():
    att = [torch.softmax(torch.randn(1, 2, 3, 3), -1) for _ in range(3)]
    fig = plot_attention_grid(att, ["a", "b", "c"], layers=[0, 2], heads=[0, 1])
    assert len(fig.axes) == 4
    plt.close("all")
