"""The VLA's own instruction encoder: word ids in, one vector per instruction out."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlagym.wrappers.language import PAD_ID


class RotaryEncoderLayer(nn.Module):
    """A pre-norm transformer encoder layer whose attention sees only relative positions: queries and keys are
    rotated by their token's position (RoPE), so a score depends on how far apart two words are, not where
    the instruction starts. Same shape of computation as `nn.TransformerEncoderLayer(norm_first=True)`."""

    def __init__(self, dim: int, heads: int, max_tokens: int, base: float = 10_000.0):
        super().__init__()
        if (dim // heads) % 2:
            raise ValueError(f"rotary positions need an even head width, got {dim} / {heads} heads")
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        half = dim // heads // 2
        angles = torch.arange(max_tokens)[:, None] * base ** (-torch.arange(half) / half)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def _rotate(self, x: Tensor) -> Tensor:
        cos, sin = self.cos[: x.shape[-2]], self.sin[: x.shape[-2]]
        a, b = x.chunk(2, dim=-1)
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    def forward(self, x: Tensor, pad: Tensor) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = self._rotate(q) @ self._rotate(k).transpose(-2, -1) / math.sqrt(d // self.heads)
        attention = F.softmax(scores.masked_fill(pad[:, None, None, :], float("-inf")), dim=-1)
        x = x + self.out((attention @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.ff(self.norm2(x))


class InstructionEncoder(nn.Module):
    """Token embeddings with learned absolute position embeddings, or rotary (relative) positions inside the
    attention, a small transformer encoder, mean pool over the non-padding tokens."""

    def __init__(
        self,
        vocab_size: int,
        max_tokens: int,
        dim: int,
        layers: int,
        heads: int,
        position_std: float = 0.02,
        positions: str = "learned",
    ):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, dim, padding_idx=PAD_ID)
        self.rotary = positions == "rotary"
        if self.rotary:
            self.positions = None
            self.encoder = nn.ModuleList(RotaryEncoderLayer(dim, heads, max_tokens) for _ in range(layers))
        else:
            self.positions = nn.Parameter(torch.randn(max_tokens, dim) * position_std)
            self.encoder = (
                nn.TransformerEncoder(
                    nn.TransformerEncoderLayer(
                        dim, heads, dim_feedforward=2 * dim, dropout=0.0, batch_first=True, norm_first=True
                    ),
                    layers,
                    enable_nested_tensor=False,
                )
                if layers > 0
                else None
            )
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids: Tensor) -> Tensor:
        # A row's encoding depends on its own tokens alone, and padding columns past every row's last token
        # change nothing (masked as keys, left out of the pool): in training, encode each distinct instruction
        # once, up to the longest one's end (a batch of demos holds few distinct instructions). Acting keeps the
        # full-width batch: its float results then stay those of earlier versions, whatever torch's thread count.
        if not self.training:
            return self._encode(ids)
        unique, inverse = torch.unique(ids, dim=0, return_inverse=True)
        used = (unique != PAD_ID).any(dim=0).nonzero()
        unique = unique[:, : int(used.max()) + 1 if len(used) else 1]
        return self._encode(unique)[inverse]

    def _encode(self, ids: Tensor) -> Tensor:
        pad = ids == PAD_ID
        # An all-padding row (empty instruction) would give NaN attention; let it attend to its first slot.
        pad[:, 0] &= ~pad.all(dim=1)
        if self.rotary:
            x = self.tokens(ids)
            for layer in self.encoder:
                x = layer(x, pad)
        else:
            x = self.tokens(ids) + self.positions[: ids.shape[1]]
            if self.encoder is not None:
                x = self.encoder(x, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        return self.norm((x * keep).sum(1) / keep.sum(1).clamp_min(1.0))
