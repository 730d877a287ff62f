"""Tests of transformer_course.instruct (chapter 15): chat examples with answer-only labels, padding,
and the minimal LoRA layer against peft's."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from transformer_course.instruct import IGNORE, LoRALinear, add_lora, chat_example, pad_batch


class FakeChatTokenizer:
    """A chat template in the ChatML style of SmolLM2, over a character vocabulary."""

    def __init__(self, prefix_breaks: bool = False):
        self.prefix_breaks = prefix_breaks

    def _render(self, messages, add_generation_prompt=False):
        text = "<s>system\nbe brief</s>\n"
        for m in messages:
            text += f"<s>{m['role']}\n{m['content']}</s>\n"
        if add_generation_prompt:
            text += "<s>assistant\n" + ("X" if self.prefix_breaks else "")
        return text

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False, return_dict=False):
        text = self._render(messages, add_generation_prompt)
        return [ord(c) for c in text] if tokenize else text

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def test_chat_example_puts_the_loss_on_the_answer_and_the_end_of_turn_only():
    tok = FakeChatTokenizer()
    ex = chat_example(tok, "when?", "2021-03-03")
    assert len(ex["input_ids"]) == len(ex["labels"])
    kept = [i for i, label in zip(ex["input_ids"], ex["labels"], strict=True) if label != IGNORE]
    assert tok.decode(kept) == "2021-03-03</s>\n"
    first = ex["labels"].index(next(label for label in ex["labels"] if label != IGNORE))
    assert set(ex["labels"][:first]) == {IGNORE}
    assert tok.decode(ex["input_ids"][:first]).endswith("<s>assistant\n")


def test_chat_example_refuses_a_template_whose_prompt_is_not_a_prefix():
    with pytest.raises(ValueError, match="prefix"):
        chat_example(FakeChatTokenizer(prefix_breaks=True), "when?", "2021")


@pytest.mark.parametrize("prompt, answer", [("", "x"), ("q", "  ")])
def test_chat_example_refuses_empty_text(prompt, answer):
    with pytest.raises(ValueError, match="non-empty"):
        chat_example(FakeChatTokenizer(), prompt, answer)


def test_pad_batch_pads_on_the_right_and_ignores_padding():
    a = {"input_ids": [5, 6, 7], "labels": [IGNORE, 6, 7]}
    b = {"input_ids": [8], "labels": [8]}
    batch = pad_batch([a, b], pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["labels"].tolist() == [[IGNORE, 6, 7], [8, IGNORE, IGNORE]]


def test_pad_batch_errors():
    with pytest.raises(ValueError, match="no examples"):
        pad_batch([], 0)
    with pytest.raises(ValueError, match="differ in length"):
        pad_batch([{"input_ids": [1, 2], "labels": [1]}], 0)


def test_lora_starts_as_the_base_layer_and_trains_only_a_and_b():
    torch.manual_seed(0)
    base = nn.Linear(10, 6)
    layer = LoRALinear(copy.deepcopy(base), r=2, alpha=4)
    x = torch.randn(3, 10)
    assert torch.equal(layer(x), base(x))
    assert layer.scale == 2.0
    trainable = {n for n, p in layer.named_parameters() if p.requires_grad}
    assert trainable == {"A", "B"}
    layer(x).sum().backward()
    assert layer.B.grad is not None and layer.B.grad.abs().sum() > 0


def test_lora_matches_peft():
    peft = pytest.importorskip("peft")
    from peft.tuners.lora import Linear as PeftLoraLinear

    torch.manual_seed(0)
    base = nn.Linear(16, 12)
    theirs = PeftLoraLinear(base, "default", peft.LoraConfig(r=4, lora_alpha=8), r=4, lora_alpha=8)
    ours = LoRALinear(copy.deepcopy(base), r=4, alpha=8)
    with torch.no_grad():
        theirs.lora_B["default"].weight.normal_()
        ours.A.copy_(theirs.lora_A["default"].weight)
        ours.B.copy_(theirs.lora_B["default"].weight)
    x = torch.randn(5, 16)
    assert not torch.allclose(theirs(x), base(x), atol=1e-3)
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("r", [0, -1, 2.0])
def test_lora_refuses_a_bad_rank(r):
    with pytest.raises(ValueError, match="rank"):
        LoRALinear(nn.Linear(4, 4), r=r)


def test_lora_refuses_a_non_linear_layer():
    with pytest.raises(TypeError, match="nn.Linear"):
        LoRALinear(nn.Conv1d(4, 4, 1))  # type: ignore[arg-type]


def test_add_lora_wraps_the_named_layers_and_freezes_the_rest():
    model = nn.Sequential(nn.ModuleDict({"q_proj": nn.Linear(4, 4), "o_proj": nn.Linear(4, 4)}))
    names = add_lora(model, ["q_proj"], r=2)
    assert names == ["0.q_proj"]
    assert isinstance(model[0]["q_proj"], LoRALinear)
    assert isinstance(model[0]["o_proj"], nn.Linear)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable == ["0.q_proj.A", "0.q_proj.B"]
    with pytest.raises(ValueError, match="no nn.Linear"):
        add_lora(nn.Sequential(nn.Linear(2, 2)), ["v_proj"])
