"""The policy's own image encoder: stride-2 conv blocks, FiLM-conditioned on the instruction, read out as
spatial-softmax keypoints and an average pool (`VLAConfig.vision_channels`; pretrained backbones replace it)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _groups(channels: int) -> int:
    return math.gcd(channels, 8)


class FiLMConvEncoder(nn.Module):
    """Stride-2 conv blocks (conv, GroupNorm, optional FiLM, GELU), then spatial-softmax keypoints and a
    global average pool, projected.

    The keypoints (the expected image position of each channel's activation) keep *where* things are;
    an average pool alone throws position away, and a policy must know where the named object stands.
    """

    def __init__(self, channels: tuple[int, ...], cond_dim: int, out_dim: int, film: bool):
        super().__init__()
        self.convs, self.norms = nn.ModuleList(), nn.ModuleList()
        self.films = nn.ModuleList() if film else None
        c_in = 3
        for c in channels:
            self.convs.append(nn.Conv2d(c_in, c, kernel_size=3, stride=2, padding=1))
            self.norms.append(nn.GroupNorm(_groups(c), c))
            if self.films is not None:
                f = nn.Linear(cond_dim, 2 * c)
                # Zero init: FiLM starts as the identity, so early training is not disturbed by random modulation.
                nn.init.zeros_(f.weight)
                nn.init.zeros_(f.bias)
                self.films.append(f)
            c_in = c
        self.proj = nn.Linear(3 * c_in, out_dim)

    def forward(self, images: Tensor, cond: Tensor) -> Tensor:
        x = images
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            x = norm(conv(x))
            if self.films is not None:
                gamma, beta = self.films[i](cond).chunk(2, dim=-1)
                x = x * (1 + gamma[:, :, None, None]) + beta[:, :, None, None]
            x = F.gelu(x)
        return self.proj(torch.cat([_spatial_softmax(x), x.mean(dim=(-2, -1))], dim=-1))


def _spatial_softmax(x: Tensor) -> Tensor:
    """(B, C, H, W) feature maps -> (B, 2C) expected (x, y) positions in [-1, 1] of each channel's softmax."""
    b, c, h, w = x.shape
    attention = torch.softmax(x.flatten(2), dim=-1).view(b, c, h, w)
    ys = torch.linspace(-1.0, 1.0, h, device=x.device, dtype=x.dtype)
    xs = torch.linspace(-1.0, 1.0, w, device=x.device, dtype=x.dtype)
    expected_x = (attention.sum(dim=2) * xs).sum(dim=-1)
    expected_y = (attention.sum(dim=3) * ys).sum(dim=-1)
    return torch.cat([expected_x, expected_y], dim=-1)
