import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
import torch

from transformer_course.plotting import plot_attention, plot_attention_grid


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


def test_plot_attention_one_query_row():
    # one query (e.g. the last position's weights): a 1 x keys map, not squeezed away
    ax = plot_attention(torch.tensor([[0.5, 0.25, 0.25]]), keys=list("abc"), queries=["q"], annotate=True)
    assert ax.images[0].get_array().shape == (1, 3)
    assert len(ax.texts) == 3
    plt.close("all")


def test_plot_attention_errors_name_the_problem():
    with pytest.raises(ValueError, match="one \\(queries, keys\\) matrix"):
        plot_attention(torch.rand(2, 3, 4))
    with pytest.raises(ValueError, match="2 keys labels for a matrix with 4 keys"):
        plot_attention(torch.rand(3, 4), keys=["a", "b"], queries=list("xyz"))


def test_plot_attention_grid_shape():
    att = [torch.softmax(torch.randn(1, 2, 3, 3), -1) for _ in range(3)]
    fig = plot_attention_grid(att, ["a", "b", "c"], layers=[0, 2], heads=[0, 1])
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 4 and len(fig.axes) == 5  # 4 maps and one colour bar
    # one colour scale for all maps
    assert {im.get_clim() for ax in panels for im in ax.images} == {(0.0, 1.0)}
    plt.close("all")


def test_plot_attention_grid_panels_and_titles():
    att = [torch.softmax(torch.randn(1, 3, 4, 4), -1) for _ in range(2)]
    fig = plot_attention_grid(
        att, list("abcd"), panels=[(0, 2), (1, 0), (1, 1)], titles=["x", "y", "z"], colorbar=False
    )
    assert [ax.get_title() for ax in fig.axes] == ["x", "y", "z"]
    assert len(fig.axes) == 3
    plt.close("all")
    with pytest.raises(ValueError, match="either layers and heads, or panels"):
        plot_attention_grid(att, list("abcd"), layers=[0], heads=[0], panels=[(0, 0)])
    with pytest.raises(ValueError, match="2 titles for 3 panels"):
        plot_attention_grid(att, list("abcd"), panels=[(0, 0), (0, 1), (1, 1)], titles=["a", "b"])


@pytest.mark.parametrize("n_tokens, n_heads", [(14, 2), (16, 3), (40, 4)])
def test_plot_attention_grid_labels_do_not_overlap(n_tokens, n_heads):
    att = [torch.softmax(torch.randn(1, n_heads, n_tokens, n_tokens), -1)]
    fig = plot_attention_grid(att, [f"t{i}" for i in range(n_tokens)], layers=[0], heads=list(range(n_heads)))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    for labels in (ax.get_yticklabels(), ax.get_xticklabels()):
        boxes = [t.get_window_extent(renderer) for t in labels if t.get_text()]
        assert boxes
        assert not any(a.overlaps(b) for a, b in zip(boxes[:-1], boxes[1:], strict=True))
    plt.close("all")


# --- Figures readable at the page's width ---------------------------------------------------------


def _drawn(fig):
    fig.canvas.draw()
    return fig


def test_importing_the_package_applies_the_course_figure_defaults():
    import matplotlib

    import transformer_course  # noqa: F401
    from transformer_course import plotting

    assert matplotlib.rcParams["font.size"] == plotting.COURSE_STYLE["font.size"]
    assert "transformer_course.plotting:watch_readability" in matplotlib.rcParams["figure.hooks"]


def test_a_default_figure_is_readable_and_a_wide_small_one_is_not():
    from transformer_course import plotting

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    ax.set_title("loss")
    size, _ = plotting.smallest_text_pt(_drawn(fig))
    assert size >= plotting.MIN_TEXT_PT
    wide, ax = plt.subplots(figsize=(14, 3))
    ax.plot([0, 1], [0, 1])
    ax.tick_params(labelsize=7)
    size, text = plotting.smallest_text_pt(_drawn(wide))
    assert size < plotting.MIN_TEXT_PT  # 7 pt shrunk by 688 / ~1400 px
    plt.close("all")


def test_drawing_an_unreadable_figure_is_recorded():
    from transformer_course import plotting

    before = len(plotting.UNREADABLE)
    fig, ax = plt.subplots(figsize=(16, 2))
    ax.set_xticks(range(10))
    ax.set_xticklabels([f"token {i}" for i in range(10)], fontsize=6)
    fig.canvas.draw()
    assert len(plotting.UNREADABLE) == before + 1
    _, size, _ = plotting.UNREADABLE[-1]
    assert size < plotting.MIN_TEXT_PT
    del plotting.UNREADABLE[before:]
    plt.close("all")


@pytest.mark.parametrize("heads", [1, 4, 12])
def test_the_package_figures_are_readable(heads):
    from transformer_course import plotting

    tokens = [f"tok{i}" for i in range(12)]
    att = [torch.rand(1, heads, 12, 12).softmax(-1) for _ in range(2)]
    grid = plotting.plot_attention_grid(att, tokens, layers=[0, 1], heads=list(range(heads)))
    assert plotting.smallest_text_pt(_drawn(grid))[0] >= plotting.MIN_TEXT_PT
    ax = plotting.plot_attention(att[0][0, 0], tokens, annotate=True)
    assert plotting.smallest_text_pt(_drawn(ax.figure))[0] >= plotting.MIN_TEXT_PT
    plt.close("all")
