"""The three model configs share one style: frozen dataclasses, checked when made, dict round trip."""

from __future__ import annotations

import dataclasses

import pytest

from transformer_course.bert import BertConfig
from transformer_course.gpt import GPTConfig
from transformer_course.transformer import Transformer, TransformerConfig

CONFIGS = [
    TransformerConfig(11, 13, d_model=16, num_heads=2),
    GPTConfig(d_model=32, n_head=4),
    BertConfig(d_model=32, num_heads=4),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: type(c).__name__)
def test_configs_are_frozen_and_round_trip_through_a_dict(config):
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 64
    d = config.to_dict()
    assert type(config).from_dict({**d, "not_a_field": 1}) == config


def test_gpt_config_fills_in_d_ff_once():
    assert GPTConfig(d_model=32, n_head=4).d_ff == 128
    assert GPTConfig(d_model=32, n_head=4, d_ff=50).d_ff == 50


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: TransformerConfig(11, 13, d_model=30, num_heads=4), "not divisible by num_heads"),
        (lambda: TransformerConfig(0, 13), "src_vocab_size must be a positive int"),
        (lambda: TransformerConfig(11, 13, dropout=1.0), "dropout"),
        (lambda: GPTConfig(d_model=30, n_head=4), "not divisible by n_head"),
        (lambda: GPTConfig(n_layer=0), "n_layer must be a positive int"),
        (lambda: GPTConfig(activation="swish"), "activation"),
        (lambda: BertConfig(d_model=30, num_heads=4), "not divisible by num_heads"),
        (lambda: BertConfig(max_len=-1), "max_len must be a positive int"),
    ],
)
def test_impossible_sizes_say_what_is_wrong(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_transformer_takes_a_config():
    model = Transformer(TransformerConfig(11, 13, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1))
    assert model.config.tgt_vocab_size == 13 and model.out.out_features == 13
    for wrong in (11, {"src_vocab_size": 11, "tgt_vocab_size": 13}):
        with pytest.raises(TypeError, match=r"Transformer\(TransformerConfig\("):
            Transformer(wrong)
