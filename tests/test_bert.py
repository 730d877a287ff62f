"""Tests of transformer_course.bert: the course encoder running BERT (MiniLM) weights."""

from __future__ import annotations

import pytest
import torch

from transformer_course.bert import (
    IGNORE_INDEX,
    BertConfig,
    BertEncoder,
    BertForMLM,
    cosine_similarity,
    mask_tokens,
    mlm_windows,
    pretrain_mlm,
    semantic_search,
)
from transformer_course.hf_bert import (
    bert_from_hf,
    hf_to_course_state_dict,
    load_bert_weights,
    to_hf_masked_lm,
    train_wordpiece,
    wordpiece_subset,
)
from transformer_course.pretrained import embed_sentences, load_minilm, mean_pool
from transformer_course.tasks.python_docs import python_docs_prose

PAIR_A = ["The cat sat on the mat.", "A much longer first sentence, with commas, and many more words in it."]
PAIR_B = ["It was asleep.", "Short."]


@pytest.fixture(scope="module")
def minilm():
    torch.manual_seed(0)
    tokenizer, model = load_minilm(attn_implementation="eager")
    return tokenizer, model


@pytest.fixture(scope="module")
def ours(minilm):
    return bert_from_hf(minilm[1])


def tiny_config() -> BertConfig:
    return BertConfig(vocab_size=50, d_model=16, num_layers=2, num_heads=4, d_ff=32, max_len=12, dropout=0.0)


def test_config_from_hf(minilm):
    cfg = BertConfig.from_hf(minilm[1].config)
    assert (cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.d_ff, cfg.eps) == (384, 6, 12, 1536, 1e-12)
    assert cfg.vocab_size == minilm[0].vocab_size


def test_parity_with_bertmodel_on_padded_pair_batch(minilm, ours):
    tokenizer, hf = minilm
    batch = tokenizer(PAIR_A, PAIR_B, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any(), "the batch must contain padding"
    assert (batch["token_type_ids"] == 1).any(), "the batch must contain a sentence B"
    with torch.no_grad():
        ref = hf(**batch, output_hidden_states=True, output_attentions=True)
        out = ours(**batch)
    assert len(out.hidden_states) == len(ref.hidden_states) == 7
    assert (out.last_hidden_state - ref.last_hidden_state).abs().max().item() <= 1e-4
    for a, b in zip(out.hidden_states, ref.hidden_states, strict=True):
        assert (a - b).abs().max().item() <= 1e-4
    for a, b in zip(out.attentions, ref.attentions, strict=True):
        assert (a - b).abs().max().item() <= 1e-5
    # padding keys receive exactly zero attention
    pad_keys = (batch["attention_mask"] == 0)[:, None, None, :]  # (batch, 1, 1, keys)
    for a in out.attentions:
        assert (a * pad_keys).abs().max().item() == 0.0


def test_token_types_matter(ours, minilm):
    tokenizer, _ = minilm
    batch = tokenizer(PAIR_A[:1], PAIR_B[:1], return_tensors="pt")
    with torch.no_grad():
        a = ours(**batch).last_hidden_state
        b = ours(batch["input_ids"], batch["attention_mask"]).last_hidden_state  # all type 0
    assert (a - b).abs().max() > 1e-2


def test_padding_does_not_change_sentence_embedding(minilm, ours):
    tokenizer, hf = minilm
    short = "Padding must not change me."
    alone = tokenizer([short], return_tensors="pt")
    padded = tokenizer([short, PAIR_A[1]], padding=True, return_tensors="pt")
    assert padded["input_ids"].size(1) > alone["input_ids"].size(1) + 5
    for model in (ours, hf):
        with torch.no_grad():
            e_alone = mean_pool(model(**alone).last_hidden_state, alone["attention_mask"])[0]
            e_padded = mean_pool(model(**padded).last_hidden_state, padded["attention_mask"])[0]
        assert (e_alone - e_padded).abs().max().item() < 1e-5
    # ... whereas averaging over every position, padding included, does change it
    with torch.no_grad():
        naive = ours(**padded).last_hidden_state[0].mean(dim=0)
    assert (naive - e_alone).abs().max().item() > 1e-2


def test_embed_sentences_works_with_course_encoder(minilm, ours):
    tokenizer, hf = minilm
    sentences = ["A dog runs in the park.", "A puppy plays outside.", "Stock markets fell sharply today."]
    ours_emb = embed_sentences(sentences, tokenizer, ours)
    hf_emb = embed_sentences(sentences, tokenizer, hf)
    assert (ours_emb - hf_emb).abs().max().item() < 1e-5
    sim = cosine_similarity(ours_emb, ours_emb)
    assert sim[0, 1] > sim[0, 2] + 0.2


def test_state_dict_mapping_roundtrip():
    torch.manual_seed(0)
    from transformers import BertConfig as HFConfig
    from transformers import BertModel

    hf = BertModel(
        HFConfig(
            vocab_size=50,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=32,
            max_position_embeddings=12,
            attn_implementation="eager",
        )
    ).eval()
    model = bert_from_hf(hf)
    ids = torch.randint(1, 50, (3, 7))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    with torch.no_grad():
        diff = (
            model(ids, mask, types).last_hidden_state
            - hf(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        )
    assert diff.abs().max().item() < 1e-5
    # every course parameter is covered exactly once
    assert set(hf_to_course_state_dict(hf.state_dict())) == set(model.state_dict())


def test_task_model_prefix_and_unknown_keys():
    model = BertEncoder(tiny_config())
    from transformers import BertConfig as HFConfig
    from transformers import BertForSequenceClassification

    hf = BertForSequenceClassification(
        HFConfig(
            vocab_size=50,
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=32,
            max_position_embeddings=12,
            num_labels=2,
        )
    )
    load_bert_weights(model, hf.state_dict())  # "bert." prefix and classifier are handled
    assert torch.equal(model.embeddings.word.weight, hf.bert.embeddings.word_embeddings.weight)
    with pytest.raises(KeyError, match="not BERT encoder weights"):
        hf_to_course_state_dict({"decoder.layer.0.weight": torch.zeros(1)})
    wrong = BertEncoder(BertConfig(vocab_size=50, d_model=16, num_layers=3, num_heads=4, d_ff=32, max_len=12))
    with pytest.raises(KeyError, match="missing"):
        load_bert_weights(wrong, hf.state_dict())
    wide = BertEncoder(BertConfig(vocab_size=60, d_model=16, num_layers=2, num_heads=4, d_ff=32, max_len=12))
    with pytest.raises(ValueError, match="shape"):
        load_bert_weights(wide, hf.state_dict())


def test_bad_inputs_are_named():
    model = BertEncoder(tiny_config()).eval()
    ids = torch.randint(0, 50, (2, 5))
    with pytest.raises(ValueError, match="attention_mask"):
        model(ids, torch.ones(2, 4))
    with pytest.raises(ValueError, match="token_type_ids"):
        model(ids, None, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="longer than the 12 learned positions"):
        model(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(TypeError, match="input_ids must hold integer token ids"):
        model(torch.zeros(2, 5))
    with pytest.raises(TypeError, match="BERT"):
        bert_from_hf(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="gelu"):
        from transformers import BertConfig as HFConfig

        BertConfig.from_hf(HFConfig(hidden_act="relu"))


def test_cosine_and_search():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0], [-3.0, 0.0]])
    sim = cosine_similarity(a, a)
    assert torch.allclose(sim, torch.tensor([[1.0, 0.0, -1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 1.0]]))
    assert torch.allclose(cosine_similarity(a[0], a), sim[:1])
    hits = semantic_search(torch.tensor([0.9, 0.1]), a, top_k=2)
    assert [i for i, _ in hits[0]] == [0, 1]
    assert hits[0][0][1] == pytest.approx(0.9 / (0.82**0.5), abs=1e-6)
    with pytest.raises(ValueError, match="top_k"):
        semantic_search(a, a, top_k=4)
    with pytest.raises(ValueError, match="same d"):
        cosine_similarity(a, torch.zeros(2, 3))


# ----------------------------------------------------------------------------- masked-language modelling


def test_mask_tokens_follows_berts_recipe():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (200, 64), generator=g)
    ids[:, 0] = 2  # [CLS]
    special = ids == 2
    inputs, labels = mask_tokens(ids, mask_id=4, vocab_size=1000, special=special, generator=g)
    chosen = labels != IGNORE_INDEX
    assert not chosen[special].any(), "a special token was chosen"
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(inputs[~chosen], ids[~chosen])
    assert abs(chosen.float().mean().item() * 64 / 63 - 0.15) < 0.01
    as_mask = (inputs[chosen] == 4).float().mean().item()
    kept = (inputs[chosen] == ids[chosen]).float().mean().item()
    assert abs(as_mask - 0.8) < 0.02 and abs(kept - 0.1) < 0.02
    a = mask_tokens(ids, 4, 1000, special, generator=torch.Generator().manual_seed(5))
    b = mask_tokens(ids, 4, 1000, special, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(ValueError, match="prob"):
        mask_tokens(ids, 4, 1000, prob=1.5)
    with pytest.raises(ValueError, match="special"):
        mask_tokens(ids, 4, 1000, special=special[:, :3])


def test_mlm_head_is_tied_and_loss_scores_only_labelled_positions():
    torch.manual_seed(0)
    model = BertForMLM(tiny_config()).eval()
    assert model.head.decoder.weight is model.bert.embeddings.word.weight
    x = torch.randint(5, 50, (2, 10))
    labels = torch.full_like(x, IGNORE_INDEX)
    labels[0, 3], labels[1, 7] = 11, 12
    logits = model(x)
    expected = torch.nn.functional.cross_entropy(torch.stack([logits[0, 3], logits[1, 7]]), torch.tensor([11, 12]))
    assert torch.allclose(model.loss(x, labels), expected, atol=1e-6)
    with pytest.raises(ValueError, match="no position"):
        model.loss(x, torch.full_like(x, IGNORE_INDEX))


def test_to_hf_masked_lm_gives_the_same_logits():
    torch.manual_seed(0)
    model = BertForMLM(tiny_config()).eval()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2)  # not the initial values, so that a wrong copy would show
    hf = to_hf_masked_lm(model)
    assert type(hf).__name__ == "BertForMaskedLM"
    x = torch.randint(5, 50, (3, 12))
    mask = torch.ones_like(x)
    mask[0, 8:] = 0
    with torch.inference_mode():
        ours, theirs = model(x, mask), hf(input_ids=x, attention_mask=mask).logits
    assert (ours - theirs)[mask.bool()].abs().max() < 1e-5
    with pytest.raises(TypeError, match="BertForMLM"):
        to_hf_masked_lm(BertEncoder(tiny_config()))


def test_train_wordpiece_and_windows():
    texts = ["The assert statement checks a condition.", "Generators are defined with the yield statement."] * 20
    tok = train_wordpiece(texts, vocab_size=120)
    assert tok.convert_ids_to_tokens(list(range(5))) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    enc = tok("The yield statement")["input_ids"]
    assert enc[0] == tok.cls_token_id and enc[-1] == tok.sep_token_id
    assert tok.decode(enc, skip_special_tokens=True) == "the yield statement"
    ids = torch.arange(10, 30)
    w = mlm_windows(ids, torch.tensor([0, 5]), 6, cls_id=2)
    assert w.tolist() == [[2, 10, 11, 12, 13, 14], [2, 15, 16, 17, 18, 19]]
    with pytest.raises(ValueError, match="runs past"):
        mlm_windows(ids, torch.tensor([18]), 6, cls_id=2)
    with pytest.raises(ValueError, match="non-empty"):
        train_wordpiece("one string", 100)


def test_python_docs_prose_has_no_code_or_underlines():
    prose = python_docs_prose()
    assert len(prose) > 500
    assert not any("***" in p or ">>>" in p or "::=" in p for p in prose)
    assert all(p[0].isupper() and len(p.split()) >= 8 and "\n" not in p for p in prose)


def test_pretrain_mlm_lowers_the_loss():
    texts = ["the cat sat on the mat and the dog sat on the rug"] * 50
    tok = train_wordpiece(texts, vocab_size=60)
    ids = torch.tensor([t for _ in range(50) for t in tok(texts[0], add_special_tokens=False)["input_ids"] + [3]])
    torch.manual_seed(0)
    model = BertForMLM(BertConfig(vocab_size=len(tok), d_model=32, num_layers=1, num_heads=2, d_ff=64, max_len=16))
    losses = pretrain_mlm(
        model, ids, tok, steps=60, batch_size=16, lr=3e-3, warmup=5, generator=torch.Generator().manual_seed(0)
    ).loss
    assert len(losses) == 60 and not model.training
    assert sum(losses[-10:]) < 0.7 * sum(losses[:10])  # from ln 60 = 4.1 towards the ambiguity of the text


def test_wordpiece_subset_is_deterministic_and_keeps_berts_pieces(minilm):
    tokenizer = minilm[0]
    texts = ["Generators are defined with the yield statement.", "The assert statement checks a condition."]
    a, b = wordpiece_subset(tokenizer, texts), wordpiece_subset(tokenizer, texts)
    assert a.get_vocab() == b.get_vocab()
    assert a.convert_ids_to_tokens(list(range(5))) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert a.tokenize(texts[0]) == tokenizer.tokenize(texts[0])
    assert a.tokenize("zebra") == ["[UNK]"]  # a word with pieces outside the subset
    with pytest.raises(ValueError, match="non-empty"):
        wordpiece_subset(tokenizer, [])
