"""The VLA's own instruction encoder: word ids in, one vector per instruction out."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vlagym.wrappers.language import PAD_ID


class InstructionEncoder(nn.Module):
    """Token + position embeddings, a small transformer encoder, mean pool over the non-padding tokens."""

    def __init__(self, vocab_size: int, max_tokens: int, dim: int, layers: int, heads: int, position_std: float = 0.02):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, dim, padding_idx=PAD_ID)
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
        x = self.tokens(ids) + self.positions[: ids.shape[1]]
        if self.encoder is not None:
            x = self.encoder(x, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        return self.norm((x * keep).sum(1) / keep.sum(1).clamp_min(1.0))
