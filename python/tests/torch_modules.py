"""Small torch modules the tests compile and capture."""

from __future__ import annotations

import torch

import jattn


class FusedQKVAttention(torch.nn.Module):
    """A DiT attention block: fused QKV projection, views into it, jattn, output projection."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, dim = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, dim // self.heads).unbind(2)
        return self.proj(jattn.attention(q, k, v, layout="bshd").flatten(2))
