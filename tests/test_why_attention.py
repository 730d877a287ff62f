"""Tests of the data generators and small models of chapter 01 (``transformer_course.tasks.why_attention``)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_course.tasks.why_attention import (
    AttendThenLinear,
    AttentionClassifier,
    GRUClassifier,
    LinearOnToken,
    first_token_data,
    held_out_accuracy,
    one_informative_token_data,
    steps_to_reach,
    train_classifier,
)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- data


def test_first_token_data_labels_are_the_first_token():
    tokens, labels = first_token_data(500, 21, vocab_size=5, generator=gen())
    assert tokens.shape == (500, 21) and labels.shape == (500,)
    assert tokens.dtype == torch.int64 and labels.dtype == torch.int64
    assert torch.equal(labels, tokens[:, 0])
    assert int(tokens.min()) == 0 and int(tokens.max()) == 4  # every id of the vocabulary occurs
    # labels are a copy: changing the tokens afterwards does not change them
    tokens[:, 0] = 0
    assert labels.ne(0).any()


def test_first_token_data_is_deterministic_given_a_generator():
    a = first_token_data(64, 20, generator=gen(3))
    b = first_token_data(64, 20, generator=gen(3))
    c = first_token_data(64, 20, generator=gen(4))
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_samples=0, seq_len=5), "num_samples"),
        (dict(num_samples=4, seq_len=0), "seq_len"),
        (dict(num_samples=4, seq_len=5, vocab_size=1), "vocab_size"),
    ],
)
def test_first_token_data_rejects_bad_sizes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        first_token_data(**kwargs)


def test_one_informative_token_data_only_the_informative_token_carries_the_label():
    x, y = one_informative_token_data(4000, num_tokens=6, dim=3, generator=gen())
    assert x.shape == (4000, 6, 3) and x.dtype == torch.float32
    assert y.shape == (4000,) and y.dtype == torch.int64
    # the first token is all +1 (label 1) or all -1 (label 0)
    assert torch.equal(x[:, 0], (2.0 * y - 1.0)[:, None].expand(-1, 3))
    # the other tokens are noise in [-1, 1), and not constant vectors
    noise = x[:, 1:]
    assert noise.min() >= -1 and noise.max() < 1
    assert (noise.std(dim=-1) > 0).all()
    # ... independent of the label: their mean is (close to) 0 in both classes
    for c in (0, 1):
        assert noise[y == c].mean().abs() < 0.03
    assert 0.45 < y.float().mean() < 0.55  # balanced classes


def test_one_informative_token_data_can_move_the_informative_token():
    x, y = one_informative_token_data(200, num_tokens=5, dim=4, informative=-1, generator=gen())
    assert torch.equal(x[:, 4, 0], 2.0 * y - 1.0)
    x, y = one_informative_token_data(2000, num_tokens=5, dim=4, informative=None, generator=gen())
    where = x.abs().eq(1).all(dim=-1)  # the one constant +-1 token of each sentence
    assert torch.equal(where.sum(dim=1), torch.ones(2000, dtype=torch.int64))
    assert (where.sum(dim=0) > 300).all()  # it lands at every index
    idx = where.float().argmax(dim=1)
    assert torch.equal(x[torch.arange(2000), idx, 0], 2.0 * y - 1.0)


def test_one_informative_token_data_rejects_bad_arguments():
    with pytest.raises(ValueError, match="informative=4"):
        one_informative_token_data(10, num_tokens=4, informative=4)
    with pytest.raises(ValueError, match="dim"):
        one_informative_token_data(10, dim=0)


# ----------------------------------------------------------------------------- models


def test_gru_classifier_shapes_and_input_checks():
    torch.manual_seed(0)
    model = GRUClassifier(vocab_size=6, d_model=8, hidden_size=16)
    tokens, _ = first_token_data(5, 9, vocab_size=6, generator=gen())
    assert model(tokens).shape == (5, 6)
    with pytest.raises(TypeError, match="integer"):
        model(tokens.float())
    with pytest.raises(ValueError, match=r"outside the vocabulary 0\.\.5"):
        model(tokens + 6)
    with pytest.raises(ValueError, match=r"\(batch, length\)"):
        model(tokens[0])


def test_attention_classifier_reads_every_position_and_keeps_weights():
    torch.manual_seed(0)
    model = AttentionClassifier(vocab_size=6, max_len=10, d_model=8, num_heads=2)
    tokens, _ = first_token_data(4, 7, vocab_size=6, generator=gen())
    logits = model(tokens)
    assert logits.shape == (4, 6)
    w = model.attn_weights
    assert w is not None and w.shape == (4, 7, 7)
    torch.testing.assert_close(w.sum(dim=-1), torch.ones(4, 7))
    assert (w[:, -1] > 0).all()  # the last position reads all positions, the first one included
    with pytest.raises(ValueError, match="max_len=10"):
        model(first_token_data(2, 11, vocab_size=6)[0])


def test_attention_without_positions_cannot_tell_the_order():
    torch.manual_seed(0)
    tokens, _ = first_token_data(8, 12, vocab_size=6, generator=gen())
    perm = torch.cat([torch.randperm(11, generator=gen(1)), torch.tensor([11])])  # shuffle all but the last
    blind = AttentionClassifier(6, 12, d_model=8, use_positions=False).eval()
    torch.testing.assert_close(blind(tokens[:, perm]), blind(tokens))
    seeing = AttentionClassifier(6, 12, d_model=8).eval()
    assert not torch.allclose(seeing(tokens[:, perm]), seeing(tokens))


def test_linear_on_token_sees_only_its_token():
    torch.manual_seed(0)
    model = LinearOnToken(dim=3, index=2)
    x = torch.randn(5, 4, 3)
    y = x.clone()
    y[:, [0, 1, 3]] = torch.randn(5, 3, 3)
    torch.testing.assert_close(model(x), model(y))
    torch.testing.assert_close(model(x), model.fc(x[:, 2]))
    with pytest.raises(ValueError, match="dim=3"):
        model(torch.randn(5, 4, 2))
    with pytest.raises(ValueError, match="token index 2"):
        model(torch.randn(5, 2, 3))


def test_attend_then_linear_matches_attention_written_out():
    torch.manual_seed(0)
    model = AttendThenLinear(dim=4, index=1, d_k=3)
    x = torch.randn(6, 5, 4)
    logits = model(x)
    q = x[:, 1] @ model.W_q.weight.T + model.W_q.bias  # (6, 3)
    k = x @ model.W_k.weight.T  # (6, 5, 3)
    scores = torch.einsum("bd,btd->bt", q, k) / math.sqrt(3)
    w = torch.softmax(scores, dim=-1)
    torch.testing.assert_close(model.attn_weights, w)
    torch.testing.assert_close(logits, model.fc(torch.einsum("bt,btd->bd", w, x)))


def test_attend_then_linear_scores_flip_with_the_token():
    """Scores are linear in each key's token: flipping token 0's sign flips its score."""
    torch.manual_seed(0)
    model = AttendThenLinear(dim=4, index=1, d_k=4)
    x = torch.randn(3, 5, 4)
    flipped = x.clone()
    flipped[:, 0] = -flipped[:, 0]
    # log-weights are the scores minus one constant per row, so score differences survive
    log_w, log_w_flip = model.attend(x)[1].log(), model.attend(flipped)[1].log()
    q = model.W_q(x[:, 1])
    s0, s2 = (q * model.W_k(x[:, 0])).sum(-1) / 2, (q * model.W_k(x[:, 2])).sum(-1) / 2  # sqrt(d_k) = 2
    torch.testing.assert_close(log_w[:, 0] - log_w[:, 2], s0 - s2)
    torch.testing.assert_close(log_w_flip[:, 0] - log_w_flip[:, 2], -s0 - s2)


def test_attend_then_linear_with_a_zero_query_averages_the_tokens():
    torch.manual_seed(0)
    model = AttendThenLinear(dim=4, index=0)
    torch.nn.init.zeros_(model.W_q.weight)
    torch.nn.init.zeros_(model.W_q.bias)
    x = torch.randn(3, 6, 4)
    new, w = model.attend(x)
    torch.testing.assert_close(w, torch.full((3, 6), 1 / 6))
    torch.testing.assert_close(new, x.mean(dim=1))


# ----------------------------------------------------------------------------- training


def test_held_out_accuracy_counts_correct_argmax_in_eval_mode():
    model = LinearOnToken(dim=2, index=0)
    with torch.no_grad():  # predicts class 1 when the first feature is positive
        model.fc.weight.copy_(torch.tensor([[-1.0, 0.0], [1.0, 0.0]]))
        model.fc.bias.zero_()
    x = torch.tensor([[[1.0, 0.0]], [[-1.0, 0.0]], [[2.0, 0.0]], [[-3.0, 0.0]]])
    model.train()
    assert held_out_accuracy(model, x, torch.tensor([1, 0, 0, 0])) == 0.75
    assert not model.training
    with pytest.raises(ValueError, match="4 inputs but 3 labels"):
        held_out_accuracy(model, x, torch.tensor([1, 0, 0]))


def test_train_classifier_learns_the_first_token_with_attention():
    torch.manual_seed(0)
    model = AttentionClassifier(vocab_size=5, max_len=12, d_model=16)
    test = first_token_data(300, 12, vocab_size=5, generator=gen(1))
    curve = train_classifier(
        model,
        lambda b, g: first_token_data(b, 12, 5, g),
        steps=80,
        batch_size=32,
        lr=1e-2,
        generator=gen(0),
        eval_data=test,
        eval_every=20,
    ).curve("accuracy")
    assert [s for s, _ in curve] == [0, 20, 40, 60, 80]
    assert curve[0][1] < 0.5 and curve[-1][1] >= 0.95
    assert not model.training
    model(test[0])
    assert model.attn_weights is not None and model.attn_weights[:, -1, 0].mean() > 0.8


def test_train_classifier_is_deterministic_and_checks_arguments():
    def run() -> list[tuple[int, float]]:
        torch.manual_seed(0)
        model = AttendThenLinear(dim=4)
        test = one_informative_token_data(200, generator=gen(1))
        return train_classifier(
            model,
            lambda b, g: one_informative_token_data(b, generator=g),
            steps=30,
            generator=gen(0),
            eval_data=test,
            eval_every=10,
        ).curve("accuracy")

    assert run() == run()
    model = LinearOnToken(dim=4)
    make = lambda b, g: one_informative_token_data(b, generator=g)  # noqa: E731
    assert train_classifier(model, make, steps=2).evals == {}
    with pytest.raises(ValueError, match="eval_data"):
        train_classifier(model, make, steps=2, eval_every=1)
    with pytest.raises(ValueError, match="steps"):
        train_classifier(model, make, steps=0)


def test_train_classifier_lowers_the_loss_of_a_gru():
    torch.manual_seed(0)
    model = GRUClassifier(vocab_size=4, d_model=8, hidden_size=16)
    x, y = first_token_data(256, 4, vocab_size=4, generator=gen(1))
    before = F.cross_entropy(model(x), y).item()
    train_classifier(model, lambda b, g: first_token_data(b, 4, 4, g), steps=60, lr=1e-2, generator=gen(0))
    with torch.no_grad():
        after = F.cross_entropy(model(x), y).item()
    assert after < 0.5 * before


def test_steps_to_reach():
    curve = [(0, 0.1), (25, 0.5), (50, 0.96), (75, 0.94), (100, 1.0)]
    assert steps_to_reach(curve, 0.95) == 50
    assert steps_to_reach(curve, 0.99) == 100
    assert steps_to_reach(curve[:2], 0.95) is None
    with pytest.raises(ValueError, match="target"):
        steps_to_reach(curve, 95)
