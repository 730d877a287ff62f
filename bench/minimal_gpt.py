"""The reference the bench measures the course's GPT against: a minimal fused GPT-2.

Written the way the fastest small GPTs are (nanoGPT's ``model.py`` is the model): one fused
query/key/value projection, ``F.scaled_dot_product_attention(..., is_causal=True)`` with no mask
tensor, ``F.layer_norm``, tied embeddings, GELU, no input checks.  Independent of
``transformer_course`` on purpose: it is the yardstick, not the thing measured.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MinimalGPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer: int, n_head: int, d_model: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(block_size, d_model)
        self.h = nn.ModuleList(
            nn.ModuleDict(
                {
                    "ln_1": nn.LayerNorm(d_model),
                    "c_attn": nn.Linear(d_model, 3 * d_model),
                    "c_proj": nn.Linear(d_model, d_model),
                    "ln_2": nn.LayerNorm(d_model),
                    "c_fc": nn.Linear(d_model, 4 * d_model),
                    "mlp_proj": nn.Linear(4 * d_model, d_model),
                }
            )
            for _ in range(n_layer)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for blk in self.h:
            a = F.layer_norm(x, x.shape[-1:], blk["ln_1"].weight, blk["ln_1"].bias, 1e-5)
            q, k, v = blk["c_attn"](a).split(x.size(-1), dim=2)
            q, k, v = (z.view(b, t, self.n_head, -1).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + blk["c_proj"](y.transpose(1, 2).contiguous().view(b, t, -1))
            m = F.layer_norm(x, x.shape[-1:], blk["ln_2"].weight, blk["ln_2"].bias, 1e-5)
            x = x + blk["mlp_proj"](F.gelu(blk["c_fc"](m)))
        x = F.layer_norm(x, x.shape[-1:], self.ln_f.weight, self.ln_f.bias, 1e-5)
        return self.head(x)


@torch.no_grad()
def copy_from_course(ref: MinimalGPT, ours: nn.Module) -> MinimalGPT:
    """Give ``ref`` the weights of the course's ``GPT`` (same architecture, other names)."""
    ref.wte.weight.copy_(ours.tok_emb.weight)
    ref.wpe.weight.copy_(ours.pos_emb.weight)
    ref.ln_f.load_state_dict(ours.norm.state_dict())
    names = {
        "ln_1": "norm1",
        "c_attn": "attn.qkv",
        "c_proj": "attn.proj",
        "ln_2": "norm2",
        "c_fc": "mlp.fc",
        "mlp_proj": "mlp.proj",
    }
    for blk, block in zip(ref.h, ours.blocks, strict=True):
        for theirs, mine in names.items():
            blk[theirs].load_state_dict(block.get_submodule(mine).state_dict())
    return ref
