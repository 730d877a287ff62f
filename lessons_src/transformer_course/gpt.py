"""GPT: a decoder-only transformer in the GPT-2 design, its data and its generation (chapter 10).

The model, in the style of nanoGPT's ``model.py``:

* token embedding + *learned* position embedding (GPT-2 learns positions, no sinusoids);
* ``n_layer`` pre-norm blocks (``Block``): ``x = x + attn(norm1(x))``, then ``x = x + mlp(norm2(x))``,
  where ``attn`` is ``CausalSelfAttention``, a position attending only to itself and earlier
  positions;
* a final ``LayerNorm`` (pre-norm stacks leave the residual stream un-normalised);
* an output head whose weight is the token embedding matrix (tied weights).

A ``Block`` computes exactly what chapter 07's ``transformer.EncoderLayer(norm_first=True)``
computes with chapter 08's ``causal_mask`` (``tests/test_gpt.py`` checks it), written the way
fast GPTs are: one fused matrix for query, key and value, PyTorch's fused attention with
``is_causal=True`` instead of a mask tensor, and ``nn.LayerNorm`` (chapter 06 shows the course's
``LayerNorm`` equals it).

The data is Python's own reference documentation, which every Python ships in
``pydoc_data.topics``, read character by character by ``CharTokenizer``.

Generation (``generate``) supports greedy decoding and sampling with temperature, top-k and
top-p (nucleus) filtering, with or without a KV cache (``attention.KVCache``); both paths give
the same tokens.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KVCache
from .layers import ACTIVATIONS
from .masking import causal_mask
from .utils import check_token_ids

# ----------------------------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------------------------


@dataclass
class GPTConfig:
    """Sizes of a GPT.  ``d_ff`` defaults to ``4 * d_model`` as in GPT-2.

    GPT-2 small is ``GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12,
    d_model=768, activation="gelu_tanh")``; the course trains much smaller ones with the exact
    GELU (``"gelu"``).  ``activation`` is any of ``layers.ACTIVATIONS``.
    """

    vocab_size: int = 96
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    d_ff: int | None = None
    dropout: float = 0.0
    eps: float = 1e-5
    activation: str = "gelu"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "d_model"):
            if getattr(self, name) <= 0:
                raise ValueError(f"GPTConfig.{name} must be positive, got {getattr(self, name)}")
        if self.d_model % self.n_head != 0:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_head={self.n_head}: "
                "each head needs d_model / n_head features"
            )
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        """Build a config from a dict, ignoring keys that are not config fields."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which position ``t`` sees positions ``0..t`` only.

    ``qkv`` computes queries, keys and values with one matrix of width ``3 * d_model``;
    ``proj`` mixes the heads' outputs.  With a ``cache`` the new keys and values are appended
    to the earlier ones, and the new queries (the last positions) attend to all of them.
    """

    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.n_head = c.n_head
        self.dropout = c.dropout
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model)
        self.proj = nn.Linear(c.d_model, c.d_model)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        b, n, d = x.shape
        # (b, n, 3d) -> three (b, n, d) -> three (b, heads, n, d_head)
        q, k, v = (t.view(b, n, self.n_head, d // self.n_head).transpose(1, 2) for t in self.qkv(x).split(d, dim=2))
        past = 0
        if cache is not None:
            past = len(cache)
            k, v = cache.update(k, v)
        p = self.dropout if self.training else 0.0
        if past == 0:  # queries and keys are the same positions: the plain causal mask
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:  # new position past+i sees keys 0..past+i: the last rows of the causal mask
            mask = None if n == 1 else causal_mask(past + n, device=x.device)[:, :, past:, :]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return self.proj(y.transpose(1, 2).contiguous().view(b, n, d))


class MLP(nn.Module):
    """The feed-forward network of a block: ``proj(act(fc(x)))``, width ``d_ff`` inside."""

    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        assert c.d_ff is not None  # GPTConfig.__post_init__ sets it
        self.fc = nn.Linear(c.d_model, c.d_ff)
        self.proj = nn.Linear(c.d_ff, c.d_model)
        self.act = ACTIVATIONS[c.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.act(self.fc(x)))


class Block(nn.Module):
    """One GPT-2 block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))`` (pre-norm)."""

    def __init__(self, c: GPTConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(c.d_model, eps=c.eps)
        self.attn = CausalSelfAttention(c)
        self.norm2 = nn.LayerNorm(c.d_model, eps=c.eps)
        self.mlp = MLP(c)
        self.drop = nn.Dropout(c.dropout) if c.dropout > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x), cache))
        return x + self.drop(self.mlp(self.norm2(x)))


class GPT(nn.Module):
    """A GPT-2-style language model: ``logits = GPT(config)(tokens)``.

    ``forward(tokens, cache=None)`` takes token ids ``(batch, T)`` and returns next-token
    logits ``(batch, T, vocab_size)``: row ``t`` is the prediction for token ``t + 1``, made
    from tokens ``0..t`` only.  With ``cache`` (from ``new_cache()``) the keys and values of
    earlier calls are reused, and ``tokens`` holds only the *new* positions.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_emb = nn.Embedding(c.block_size, c.d_model)
        self.drop = nn.Dropout(c.dropout) if c.dropout > 0 else nn.Identity()
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.norm = nn.LayerNorm(c.d_model, eps=c.eps)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # tied: one matrix reads and writes tokens
        self.apply(self._init_weights)
        # GPT-2: scale the projections that write into the residual stream by 1/sqrt(2 n_layer),
        # so the variance of the stream does not grow with depth.
        for block in cast(Iterable[Block], self.blocks):
            for proj in (block.attn.proj, block.mlp.proj):
                nn.init.normal_(proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def new_cache(self) -> list[KVCache]:
        """An empty KV cache: one ``KVCache`` per block."""
        return [KVCache() for _ in self.blocks]

    def forward(self, tokens: torch.Tensor, cache: Sequence[KVCache] | None = None) -> torch.Tensor:
        check_token_ids(tokens, self.config.vocab_size)
        if cache is not None and len(cache) != len(self.blocks):
            raise ValueError(f"cache has {len(cache)} entries, the model has {len(self.blocks)} blocks")
        past = len(cache[0]) if cache is not None else 0
        n = tokens.size(1)
        if past + n > self.config.block_size:
            raise ValueError(
                f"{past} cached + {n} new positions exceed block_size={self.config.block_size}: "
                "the model has learned position embeddings for that many positions only; "
                "crop the input to its last block_size tokens"
            )
        positions = torch.arange(past, past + n, device=tokens.device)
        x = self.drop(self.tok_emb(tokens) + self.pos_emb(positions))
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[i])
        return self.lm_head(self.norm(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats per token) of next-token ``logits`` against ``targets``."""
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} disagree: "
            "targets must be logits.shape[:-1] (one target id per position)"
        )
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


# ----------------------------------------------------------------------------------------------
# Data: Python's reference documentation, one character per token
# ----------------------------------------------------------------------------------------------

#: The character vocabulary: newline and the 95 printable ASCII characters.  It is fixed (not
#: read off the corpus) so a checkpoint works with any Python's copy of the documentation.
CHARS = "\n" + "".join(chr(i) for i in range(32, 127))

_TYPOGRAPHY = {
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
    "\u2013": "-", "\u2014": "--", "\u2026": "...", "\u00df": "ss", "\u00b0": " degrees",
    "\t": "    ", "\r": "",
}


def normalize_text(text: str) -> str:
    """Map ``text`` onto ``CHARS``: typographic quotes and dashes to ASCII, accents dropped,
    anything else left outside the vocabulary becomes ``"?"``."""
    text = "".join(_TYPOGRAPHY.get(ch, ch) for ch in text)
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    allowed = set(CHARS)
    return "".join(ch if ch in allowed else "?" for ch in text)


class CharTokenizer:
    """One token per character of a fixed alphabet (``CHARS`` by default)."""

    def __init__(self, chars: str = CHARS) -> None:
        if len(set(chars)) != len(chars):
            raise ValueError("the characters of a CharTokenizer must be unique")
        self.chars = chars
        self.stoi = {ch: i for i, ch in enumerate(chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; characters outside the alphabet are an error."""
        try:
            return [self.stoi[ch] for ch in text]
        except KeyError as err:
            raise ValueError(
                f"character {err.args[0]!r} is not in the tokenizer's alphabet; "
                "pass the text through normalize_text() first"
            ) from None

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"decode takes one sequence of ids, got shape {tuple(ids.shape)}")
            ids = ids.tolist()
        bad = [i for i in ids if not 0 <= i < len(self.chars)]
        if bad:
            raise ValueError(f"ids {bad[:5]} are outside the vocabulary 0..{len(self.chars) - 1}")
        return "".join(self.chars[i] for i in ids)


def load_python_docs() -> str:
    """Python's reference documentation (``pydoc_data.topics``) as one normalised text.

    The topics (one per statement, operator, built-in type ...) are joined in sorted order of
    their names, separated by a blank line.  The text differs a little between Python versions.
    """
    from pydoc_data.topics import topics

    return normalize_text("\n\n".join(topics[name].strip("\n") for name in sorted(topics)) + "\n")


def corpus_fingerprint(text: str) -> str:
    """A short SHA-256 of ``text``: tells whether two Pythons gave the same documentation."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def train_val_split(text: str, val_fraction: float = 0.1) -> tuple[str, str]:
    """The first ``1 - val_fraction`` of ``text`` for training, the rest for validation."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    cut = int(len(text) * (1.0 - val_fraction))
    return text[:cut], text[cut:]


def get_batch(
    data: torch.Tensor, batch_size: int, block_size: int, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch_size`` random windows of ``data`` (1-D ids): inputs ``x`` and targets ``y = x``
    shifted left by one, both ``(batch_size, block_size)``."""
    if data.dim() != 1:
        raise ValueError(f"data must be a 1-D tensor of token ids, got shape {tuple(data.shape)}")
    if data.numel() <= block_size:
        raise ValueError(f"data has {data.numel()} tokens, need more than block_size={block_size}")
    starts = torch.randint(data.numel() - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size + 1)
    windows = data[starts[:, None] + offsets]
    return windows[:, :-1], windows[:, 1:]


@torch.no_grad()
def evaluate(
    model: nn.Module,
    data: torch.Tensor,
    block_size: int | None = None,
    batch_size: int = 64,
    max_windows: int | None = None,
) -> float:
    """Mean next-token cross-entropy (nats per token) over ``data``, deterministically.

    ``data`` is cut into consecutive windows of ``block_size + 1`` tokens that overlap by one,
    so every token after the first is predicted exactly once (the ragged tail is dropped).
    With ``max_windows`` smaller than the number of windows, that many windows spread evenly
    over the whole of ``data`` (the first and the last included) are scored instead, so a
    sample measures all of the text, not its beginning.  ``model`` maps ids ``(batch, T)`` to
    logits ``(batch, T, vocab)``.  ``exp`` of the result is the perplexity.
    """
    if block_size is None:
        block_size = cast(GPTConfig, model.config).block_size
    if max_windows is not None and max_windows < 1:
        raise ValueError(f"max_windows must be at least 1, got {max_windows}")
    n = (data.numel() - 1) // block_size
    if n < 1:
        raise ValueError(f"data has {data.numel()} tokens, too few for one window of {block_size + 1}")
    index = torch.arange(n)
    if max_windows is not None and max_windows < n:
        index = torch.linspace(0, n - 1, max_windows).round().long()
        n = max_windows
    starts = index * block_size
    windows = data[starts[:, None] + torch.arange(block_size + 1)]
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total = 0.0
    for i in range(0, n, batch_size):
        w = windows[i : i + batch_size].to(device)
        logits = model(w[:, :-1])
        total += F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).float(), w[:, 1:].reshape(-1), reduction="sum"
        ).item()
    model.train(was_training)
    return total / (n * block_size)


# ----------------------------------------------------------------------------------------------
# Generation
# ----------------------------------------------------------------------------------------------


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest logits of each row, set the others to ``-inf``.

    Exactly ``k`` survive even when there are ties at the boundary.
    """
    if k < 1:
        raise ValueError(f"top_k must be at least 1, got {k}")
    k = min(k, logits.size(-1))
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, logits.topk(k, dim=-1).indices, True)
    return logits.masked_fill(~keep, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filtering: keep the smallest set of most likely tokens whose probability
    reaches ``p``; set the other logits to ``-inf``.  The most likely token always stays."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    # Probability of everything ranked strictly above each token: keep a token while that is < p.
    before = probs.cumsum(dim=-1) - probs
    keep_sorted = before < p
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def next_token_probs(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> torch.Tensor:
    """The sampling distribution for next-token ``logits`` ``(..., vocab)``: divide by the
    temperature, then apply the top-k and top-p filters, then softmax."""
    if temperature <= 0:
        raise ValueError(f"temperature must be positive (use greedy decoding for 'zero'), got {temperature}")
    logits = logits / temperature
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits.softmax(dim=-1)


@torch.no_grad()
def generate(
    model: GPT,
    tokens: torch.Tensor,
    max_new_tokens: int,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Continue ``tokens`` ``(batch, T)`` by ``max_new_tokens`` tokens; returns ``(batch, T + new)``.

    ``do_sample=False`` is greedy decoding (the most likely token every step); with
    ``do_sample=True`` each token is drawn from ``next_token_probs(logits, temperature, top_k,
    top_p)`` using ``generator``.  ``use_cache=True`` feeds only the newest token through the
    model and keeps the keys and values of the earlier ones in a ``KVCache``; once the text is
    longer than ``block_size``, the window slides and every step re-reads the last ``block_size``
    tokens, exactly as without the cache.  The model is run in eval mode.
    """
    if tokens.dim() != 2 or tokens.size(1) == 0:
        raise ValueError(f"tokens must have shape (batch, length >= 1), got {tuple(tokens.shape)}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    block = model.config.block_size
    was_training = model.training
    model.eval()
    out = tokens
    cache = model.new_cache() if use_cache else None
    step_input = tokens[:, -block:]
    for _ in range(max_new_tokens):
        if cache is not None:
            if len(cache[0]) + step_input.size(1) > block:  # window full: re-read the last block
                cache = model.new_cache()
                step_input = out[:, -block:]
            logits = model(step_input, cache=cache)[:, -1, :]
        else:
            logits = model(out[:, -block:])[:, -1, :]
        if do_sample:
            probs = next_token_probs(logits.float(), temperature, top_k, top_p)
            nxt = torch.multinomial(probs, 1, generator=generator)
        else:
            nxt = logits.argmax(dim=-1, keepdim=True)
        out = torch.cat([out, nxt], dim=1)
        step_input = nxt
    model.train(was_training)
    return out


# ----------------------------------------------------------------------------------------------
# Checkpoints
# ----------------------------------------------------------------------------------------------

#: The checkpoint shipped with the package (written by ``python -m transformer_course.train_gpt``).
CHECKPOINT_NAME = "gpt_python_docs"


def checkpoint_dir() -> Path:
    """The folder of the checkpoints shipped with the package."""
    return Path(__file__).resolve().parent / "checkpoints"


def _checkpoint_files(path: str | Path) -> tuple[Path, Path]:
    """``(<path>.safetensors, <path>.json)``; ``path`` may also name either file."""
    path = Path(path)
    if path.suffix in (".safetensors", ".json"):
        path = path.with_suffix("")
    return path.parent / f"{path.name}.safetensors", path.parent / f"{path.name}.json"


def save_checkpoint(model: GPT, path: str | Path, record: dict | None = None, chars: str = CHARS) -> None:
    """Write ``model``'s weights to ``<path>.safetensors`` and its config, alphabet and
    ``record`` (losses, training time ...) to ``<path>.json``."""
    import json

    from safetensors.torch import save_model

    weights, meta_file = _checkpoint_files(path)
    weights.parent.mkdir(parents=True, exist_ok=True)
    save_model(model, str(weights))
    meta = {"config": model.config.to_dict(), "chars": chars, "record": record or {}}
    meta_file.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def load_checkpoint(
    path: str | Path | None = None, device: torch.device | str = "cpu"
) -> tuple[GPT, CharTokenizer, dict]:
    """Load ``(model, tokenizer, record)`` from ``<path>.safetensors`` / ``<path>.json``;
    by default the checkpoint shipped in ``transformer_course/checkpoints``.  The model is
    returned in eval mode."""
    import json

    from safetensors.torch import load_model

    weights, meta_file = _checkpoint_files(checkpoint_dir() / CHECKPOINT_NAME if path is None else path)
    for f in (weights, meta_file):
        if not f.exists():
            raise FileNotFoundError(f"checkpoint file {f} not found")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    model = GPT(GPTConfig.from_dict(meta["config"]))
    load_model(model, str(weights), device=str(device))
    model.to(device).eval()
    return model, CharTokenizer(meta["chars"]), meta.get("record", {})
