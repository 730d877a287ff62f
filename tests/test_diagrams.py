"""The diagrams: readable sizes, numbers computed from the arguments, clear errors."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from transformer_course import diagrams

ALL = {
    "soft_lookup": diagrams.soft_lookup,
    "attention_steps": diagrams.attention_steps,
    "hard_lookup": diagrams.hard_lookup,
    "multi_head": diagrams.multi_head,
    "norm_placement": diagrams.norm_placement,
    "encoder_decoder": diagrams.encoder_decoder,
    "model_families": diagrams.model_families,
    "feed_forward": diagrams.feed_forward,
    "norm_axes": diagrams.norm_axes,
    "gpt2_vs_llama": diagrams.gpt2_vs_llama,
    "gpt_model": diagrams.gpt_model,
    "kv_cache": diagrams.kv_cache,
    "bert_input": lambda: diagrams.bert_input(
        ["[CLS]", "the", "cat", "sat", "[SEP]", "it", "slept", "[SEP]"],
        [101, 1996, 4937, 2938, 102, 2009, 7771, 102],
        [0, 0, 0, 0, 0, 1, 1, 1],
    ),
}


def texts(fig):
    return [t for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip()]


@pytest.mark.parametrize("name", sorted(ALL))
def test_readable_on_page_and_phone(name):
    fig = ALL[name]()
    try:
        width, height = fig.get_size_inches()
        assert width <= diagrams.MAX_WIDTH_IN and height <= 9
        sizes = [t.get_fontsize() for t in texts(fig)]
        assert sizes and min(sizes) >= diagrams.MIN_FONT_PT
        # on a 390 px phone (about 360 px of content) the smallest text stays at 6.5 pt or more
        shown_px = width * fig.dpi
        assert min(sizes) * min(1.0, 360 / shown_px) >= 6.5
        # nothing is drawn outside the canvas
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for t in texts(fig):
            box = t.get_window_extent(renderer)
            assert box.x0 >= -1 and box.x1 <= width * fig.dpi + 1, t.get_text()
            assert box.y0 >= -1 and box.y1 <= height * fig.dpi + 1, t.get_text()
    finally:
        plt.close(fig)


def test_soft_lookup_draws_the_softmax_of_the_scores():
    scores = [1.0, 3.0, 0.0]
    fig = diagrams.soft_lookup(scores)
    shown = [float(t.get_text()) for t in texts(fig) if t.get_text().replace(".", "").isdigit()]
    plt.close(fig)
    expected = torch.softmax(torch.tensor(scores), 0).tolist()
    assert shown == pytest.approx(expected, abs=0.006)


def test_multi_head_shapes_follow_the_arguments():
    fig = diagrams.multi_head(batch=3, length=7, d_model=96, num_heads=4)
    labels = {t.get_text() for t in texts(fig)}
    plt.close(fig)
    assert {"(3, 7, 96)", "(3, 4, 7, 24)", "d_head = 96/4 = 24", "4 × 24 = 96"} <= labels


def test_encoder_decoder_shows_the_layer_count():
    fig = diagrams.encoder_decoder(num_layers=2)
    labels = [t.get_text() for t in texts(fig)]
    plt.close(fig)
    assert labels.count("× 2") == 2


def test_model_families_shows_both_stacks():
    fig = diagrams.model_families(num_layers=3)
    labels = [t.get_text() for t in texts(fig)]
    plt.close(fig)
    assert labels.count("× 3") == 2 and "encoder-only (BERT)" in labels and "decoder-only (GPT)" in labels


def test_recurrence_vs_attention_counts_the_steps():
    fig = diagrams.recurrence_vs_attention(num_tokens=4)
    labels = [t.get_text() for t in texts(fig)]
    plt.close(fig)
    assert [lab for lab in labels if lab.isdigit()] == ["1", "2", "3"]
    assert any("in 3 steps" in lab for lab in labels) and any("in 1 step" in lab for lab in labels)


def test_encoder_decoder_attention_draws_the_softmax_of_the_scores():
    scores = [0.5, -1.0, 2.0, 0.0]
    fig = diagrams.encoder_decoder_attention(scores, source=("a", "b", "c", "d"), written=("x",))
    labels = [t.get_text() for t in texts(fig)]
    plt.close(fig)
    shown = [float(lab) for lab in labels if lab.replace(".", "").isdigit() and "." in lab]
    assert shown == pytest.approx(torch.softmax(torch.tensor(scores), 0).tolist(), abs=0.006)
    assert "(start)" in labels and "x" in labels  # nothing written before x


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: diagrams.multi_head(d_model=100, num_heads=8), "not divisible"),
        (lambda: diagrams.multi_head(num_heads=0), "num_heads must be positive"),
        (lambda: diagrams.soft_lookup([1.0]), "2 to 6 slots"),
        (lambda: diagrams.encoder_decoder(num_layers=0), "num_layers must be positive"),
        (lambda: diagrams.model_families(num_layers=-1), "num_layers must be positive"),
        (lambda: diagrams.feed_forward(d_model=0), "must be positive"),
        (lambda: diagrams.feed_forward(d_model=8, d_ff=4), "d_model <= d_ff <= 20"),
        (lambda: diagrams.norm_axes(tokens=1), "2 to 8 tokens"),
    ],
)
def test_bad_input_names_the_problem(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_feed_forward_draws_its_sizes():
    fig = diagrams.feed_forward(d_model=3, d_ff=12)
    labels = {t.get_text() for t in texts(fig)}
    circles = [p for p in fig.axes[0].patches if isinstance(p, matplotlib.patches.Circle)]
    plt.close(fig)
    assert "x: 3 numbers" in labels and len(circles) == 3 + 12 + 3


def test_gpt2_vs_llama_shows_the_sizes_and_refuses_uneven_groups():
    fig = diagrams.gpt2_vs_llama(gpt2_heads=4, gpt2_layers=2, llama_heads=8, llama_kv_heads=2, llama_layers=5)
    labels = [t.get_text() for t in texts(fig)]
    plt.close(fig)
    assert "attention\n4 q, 4 kv heads" in labels and "attention + RoPE\n8 q, 2 kv heads" in labels
    assert "× 2" in labels and "× 5" in labels and labels.count("RMSNorm") == 3
    with pytest.raises(ValueError, match="llama_heads=9 is not divisible by llama_kv_heads=2"):
        diagrams.gpt2_vs_llama(llama_heads=9, llama_kv_heads=2)


def test_gpt_model_shows_its_sizes():
    fig = diagrams.gpt_model(n_layer=6, n_head=8, d_model=64, block_size=32, vocab_size=50)
    labels = " ".join(t.get_text() for t in texts(fig))
    plt.close(fig)
    assert "× 6" in labels and "8 heads" in labels and "64 → 256 → 64" in labels
    assert "32 learned position" in labels and "50 tokens" in labels


def test_kv_cache_appends_one_key_and_value_per_step():
    fig = diagrams.kv_cache(steps=3)
    labels = [t.get_text() for t in texts(fig)]
    plt.close(fig)
    # step t holds keys k1..kt and values v1..vt: 1 + 2 + 3 of each
    assert labels.count("k1") == 3 and labels.count("k3") == 1 and labels.count("v2") == 2
    assert "3 keys" in labels and "q3" in labels
    with pytest.raises(ValueError, match="1 to 5 steps"):
        diagrams.kv_cache(steps=0)


def test_bert_input_writes_ids_segments_and_positions():
    fig = diagrams.bert_input(["[CLS]", "hi", "[SEP]"], [101, 7632, 102], [0, 0, 1], num_layers=4)
    try:
        shown = {t.get_text() for t in texts(fig)}
        assert {"[CLS]", "hi", "101", "7632", "A", "B", "0", "1", "2", "4 encoder layers"} <= shown
    finally:
        plt.close(fig)


@pytest.mark.parametrize(
    "args, match",
    [
        ((["a", "b"], [1], [0, 0]), "as many token ids"),
        ((["a"], [1], [2]), "must be 0 or 1"),
        ((["a"] * 12, [1] * 12, [0] * 12), "do not fit"),
    ],
)
def test_bert_input_refuses_what_it_cannot_draw(args, match):
    with pytest.raises(ValueError, match=match):
        diagrams.bert_input(*args)
