"""Tests of transformer_course.sentiment: the review data set, the baseline, the fine-tuning loop."""

from __future__ import annotations

import re
from collections import Counter

import pytest
import torch

from transformer_course.tasks import reviews as S
from transformer_course.training import accuracy


def normalise(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


@pytest.fixture(scope="module")
def data():
    return S.load_sentiment_reviews()


# ----------------------------------------------------------------------------- the data set


def test_data_set_is_large_and_balanced(data):
    train, test = data
    assert len(train) + len(test) >= 400
    for split in (train, test):
        counts = Counter(split.labels)
        assert set(counts) == {0, 1}
        assert counts[0] == counts[1], f"unbalanced split: {counts}"
    assert len(test) >= 100


def test_no_sentence_in_both_splits_and_no_duplicates(data):
    train, test = data
    tr = [normalise(t) for t in train.texts]
    te = [normalise(t) for t in test.texts]
    assert not set(tr) & set(te), f"in both splits: {sorted(set(tr) & set(te))[:3]}"
    assert len(set(tr)) == len(tr) and len(set(te)) == len(te), "duplicate reviews"


def test_reviews_are_short_and_varied(data):
    train, test = data
    texts = train.texts + test.texts
    lengths = [len(S.words(t)) for t in texts]
    assert max(lengths) <= 30 and min(lengths) >= 2
    first_words = Counter(" ".join(S.words(t)[:2]) for t in texts)
    assert first_words.most_common(1)[0][1] < 0.1 * len(texts), "too many reviews start the same way"


def test_split_is_fixed_in_the_file(data):
    again = S.load_sentiment_reviews()
    assert again[0].texts == data[0].texts and again[1].labels == data[1].labels


def test_loader_names_bad_rows(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label,split\nGreat,positive,train\nAwful,awful,test\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 3: label"):
        S.load_sentiment_reviews(bad)
    bad.write_text("text,label,split\nGreat,positive,valid\n", encoding="utf-8")
    with pytest.raises(ValueError, match="split"):
        S.load_sentiment_reviews(bad)
    bad.write_text("text,label\nGreat,positive\n", encoding="utf-8")
    with pytest.raises(ValueError, match="columns"):
        S.load_sentiment_reviews(bad)
    with pytest.raises(ValueError, match="labels"):
        S.ReviewSplit(["a", "b"], [1])


# ----------------------------------------------------------------------------- metrics


def test_confusion_matrix():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 3, (50,), generator=g)
    p = torch.randint(0, 3, (50,), generator=g)
    cm = S.confusion_matrix(p, y, num_classes=3)
    for i in range(3):
        for j in range(3):
            assert cm[i, j] == sum(1 for a, b in zip(y.tolist(), p.tolist(), strict=True) if a == i and b == j)
    assert cm.sum() == 50
    assert accuracy(p, y) == pytest.approx(cm.diag().sum().item() / 50)
    assert S.confusion_matrix([1, 1], [0, 1]).tolist() == [[0, 1], [0, 1]]  # rows: true class
    with pytest.raises(ValueError, match="class ids"):
        S.confusion_matrix([0, 2], [0, 1], num_classes=2)


def test_plot_confusion_matrix_shares_a_colour_scale():
    import matplotlib

    matplotlib.use("Agg")
    cm = torch.tensor([[15, 5], [3, 17]])
    own = S.plot_confusion_matrix(cm).images[0].get_clim()
    shared = S.plot_confusion_matrix(cm, vmax=40).images[0].get_clim()
    assert own == (0, 17) and shared == (0, 40)


# ----------------------------------------------------------------------------- baseline


def test_words_keeps_contractions():
    assert S.words("I didn't LOVE it, sadly!") == ["i", "didn't", "love", "it", "sadly"]


# ----------------------------------------------------------------------------- fine-tuning


@pytest.fixture(scope="module")
def tokenizer():
    from transformer_course.pretrained import load_minilm

    return load_minilm()[0]


def tiny_classifier(vocab_size: int):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return BertForSequenceClassification(cfg)


def test_fine_tune_learns_a_toy_task(tokenizer):
    texts = ["wonderful", "great fun", "lovely day", "superb", "terrible", "awful mess", "dreadful day", "horrid"]
    labels = [1, 1, 1, 1, 0, 0, 0, 0]
    model = tiny_classifier(tokenizer.vocab_size)
    frozen = model.bert.embeddings.position_embeddings.weight
    frozen.requires_grad_(False)
    before = frozen.clone()
    dev = S.ReviewSplit(["superb", "awful mess"], [1, 0])
    history = S.fine_tune(
        model,
        tokenizer,
        texts,
        labels,
        epochs=25,
        batch_size=4,
        lr=5e-3,
        generator=torch.Generator().manual_seed(0),
        dev=dev,
    )
    losses, dev_accuracy = history.loss, history.evals["dev_accuracy"]
    assert len(losses) == 25 * 2 and len(dev_accuracy) == 25 and dev_accuracy[-1] == 1.0
    assert history.eval_steps == list(range(2, 51, 2))  # after every epoch of 2 batches
    assert sum(losses[-4:]) / 4 < 0.5 * sum(losses[:4]) / 4
    assert not model.training
    assert torch.equal(frozen, before), "a frozen parameter changed"
    probs = S.predict_proba(model, tokenizer, texts)
    assert probs.shape == (8, 2) and torch.allclose(probs.sum(dim=1), torch.ones(8))
    assert accuracy(probs.argmax(dim=1), labels) == 1.0
    label, p = S.classify_sentiment("wonderful", model, tokenizer)
    assert label == "positive" and 0.5 < p <= 1.0
    with pytest.raises(TypeError):
        S.classify_sentiment(["wonderful"], model, tokenizer)
    with pytest.raises(TypeError):
        S.predict_proba(model, tokenizer, "wonderful")
    with pytest.raises(ValueError, match="labels"):
        S.fine_tune(model, tokenizer, texts, labels[:3])


def test_no_near_duplicates_across_splits(data):
    train, test = data
    stop = {"the", "a", "an", "and", "i", "it", "was", "is", "of", "to", "in", "on", "my", "we", "our", "but", "for"}

    def content(t: str) -> set[str]:
        return set(S.words(t)) - stop

    train_sets = [content(t) for t in train.texts]
    for t in test.texts:
        c = content(t)
        best = max(len(c & o) / len(c | o) for o in train_sets)
        assert best < 0.6, f"a near-copy of {t!r} is in the training split"


# ----------------------------------------------------------------------------- evaluation protocol


def test_train_dev_split_is_balanced_disjoint_and_seeded(data):
    train, _ = data
    tr, dev = S.train_dev_split(train, 150, seed=0)
    assert len(dev) == 150 and sum(dev.labels) == 75 and len(tr) == len(train) - 150
    assert not set(tr.texts) & set(dev.texts) and set(tr.texts) | set(dev.texts) == set(train.texts)
    assert (
        dict(zip(dev.texts, dev.labels, strict=True)).items()
        <= dict(zip(train.texts, train.labels, strict=True)).items()
    )
    assert S.train_dev_split(train, 150, seed=0)[1].texts == dev.texts
    assert S.train_dev_split(train, 150, seed=1)[1].texts != dev.texts
    with pytest.raises(ValueError, match="even"):
        S.train_dev_split(train, 151)


def test_mean_std():
    mean, sd = S.mean_std([0.8, 0.9, 1.0])
    assert mean == pytest.approx(0.9) and sd == pytest.approx(0.1)
    with pytest.raises(ValueError, match="two values"):
        S.mean_std([0.9])


def test_freeze_lower_freezes_embeddings_and_the_lowest_layers(tokenizer):
    model = tiny_classifier(tokenizer.vocab_size)
    S.freeze_lower(model, 1)
    assert not any(p.requires_grad for p in model.bert.embeddings.parameters())
    assert not any(p.requires_grad for p in model.bert.encoder.layer[0].parameters())
    assert all(p.requires_grad for p in model.bert.encoder.layer[1].parameters())
    assert all(p.requires_grad for p in model.classifier.parameters())
    with pytest.raises(ValueError, match="between 0 and 2"):
        S.freeze_lower(model, 3)


def test_predict_proba_runs_without_autograd(tokenizer):
    model = tiny_classifier(tokenizer.vocab_size)
    probs = S.predict_proba(model, tokenizer, ["fine", "bad"])
    assert torch.is_inference(probs) and not probs.requires_grad


# ----------------------------------------------------------------------------- the classifiers of chapters 13 and 14


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, tokenizer):
    """A small BERT saved as a checkpoint without a classification head, as MiniLM's is."""
    path = tmp_path_factory.mktemp("tiny-bert")
    tiny_classifier(tokenizer.vocab_size).bert.save_pretrained(path)
    return path


def head(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.classifier.parameters()])


def test_fresh_classifier_draws_its_head_from_the_seed(tiny_checkpoint):
    a, report = S.fresh_classifier(0, tiny_checkpoint, output_loading_info=True)
    assert sorted(report["missing_keys"]) == ["classifier.bias", "classifier.weight"]
    assert a.config.id2label == {0: "negative", 1: "positive"}
    assert torch.equal(head(a), head(S.fresh_classifier(0, tiny_checkpoint)))
    assert not torch.equal(head(a), head(S.fresh_classifier(1, tiny_checkpoint)))


def test_lora_classifier_starts_as_the_base_model_and_trains_few_weights(tiny_checkpoint, tokenizer):
    lora = S.lora_classifier(0, tiny_checkpoint, r=2, alpha=4).eval()
    base = S.fresh_classifier(0, tiny_checkpoint).eval()
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or "pooler" in n or "classifier" in n for n in trainable)
    assert sum("lora_A" in n for n in trainable) == 2 * 2  # query and value in each of 2 layers
    batch = tokenizer(["fine", "a bad day"], padding=True, return_tensors="pt")
    with torch.no_grad():  # B starts at zero: the adapters change nothing yet
        assert torch.allclose(lora(**batch).logits, base(**batch).logits, atol=1e-6)
    with pytest.raises(ValueError, match="rank"):
        S.lora_classifier(0, tiny_checkpoint, r=0)


def test_train_classifier_is_one_model_per_seed(tiny_checkpoint, tokenizer):
    train = S.ReviewSplit(["wonderful", "great fun", "terrible", "awful mess"], [1, 1, 0, 0])
    dev = S.ReviewSplit(["superb", "dreadful"], [1, 0])
    runs = [S.train_classifier(0, tokenizer, train, dev, lr=1e-3, model=tiny_checkpoint) for _ in range(2)]
    (m0, h0), (m1, h1) = runs
    assert h0.loss == h1.loss and len(h0.loss) == S.EPOCHS and len(h0.evals["dev_accuracy"]) == S.EPOCHS
    assert not any(p.requires_grad for p in m0.bert.embeddings.parameters())
    _, h_lora = S.train_classifier(1, tokenizer, train, lora=True, model=tiny_checkpoint)
    assert len(h_lora.loss) == S.EPOCHS and "dev_accuracy" not in h_lora.evals
    with pytest.raises(TypeError, match="ReviewSplit"):
        S.train_classifier(0, tokenizer, (train.texts, train.labels), model=tiny_checkpoint)


def test_train_classifier_trains_a_prepared_model_as_it_is(tiny_checkpoint, tokenizer):
    train = S.ReviewSplit(["wonderful", "great fun", "terrible", "awful mess"], [1, 1, 0, 0])
    mine = S.fresh_classifier(0, tiny_checkpoint)  # nothing frozen, embeddings included
    before = mine.bert.embeddings.word_embeddings.weight.detach().clone()
    trained, history = S.train_classifier(0, tokenizer, train, classifier=mine, lr=1e-3, show_progress=False)
    assert trained is mine and len(history.loss) == S.EPOCHS
    assert not torch.equal(before, mine.bert.embeddings.word_embeddings.weight)
    # the batch order is the seed's, as with a fresh classifier
    again = S.fresh_classifier(0, tiny_checkpoint)
    _, h_again = S.train_classifier(0, tokenizer, train, classifier=again, lr=1e-3, show_progress=False)
    assert h_again.loss == history.loss
    with pytest.raises(ValueError, match="lr="):
        S.train_classifier(0, tokenizer, train, classifier=again)
    with pytest.raises(ValueError, match="leave them out"):
        S.train_classifier(0, tokenizer, train, classifier=again, lr=1e-3, lora=True)
