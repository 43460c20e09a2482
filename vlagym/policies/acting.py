"""How a policy's predicted chunks become executed actions, shared by `VLAPolicy.select_action` and the served
client (`vlagym.eval.served`): ACT's temporal ensemble, one step at a time."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def temporal_ensemble_step(
    chunk: Tensor, average: Tensor, count: Tensor, coeff: float
) -> tuple[Tensor, Tensor, Tensor]:
    """One step of ACT's temporal ensemble, as an online weighted mean with weights exp(-coeff * i), i = 0 the
    oldest prediction: (the action to execute (B, A), the new running averages (B, K-1, A), the new counts).

    `average[r, j]` is row r's running average for the step j ahead over `count[r, j]` earlier predictions (0
    for a row that was just reset); `chunk` (B, K, A) is this step's prediction."""
    b, k = chunk.shape[:2]
    weights = torch.exp(-coeff * torch.arange(k, device=chunk.device, dtype=chunk.dtype))
    cum = F.pad(weights.cumsum(0), (1, 0))  # cum[n]: total weight of the n oldest predictions
    n = count  # steps 0 .. K-2 of this chunk overlap the running averages
    overlap = (average * cum[n][..., None] + chunk[:, :-1] * weights[n][..., None]) / cum[n + 1][..., None]
    avg = torch.cat([overlap, chunk[:, -1:]], dim=1)
    ones = torch.ones(b, 1, dtype=torch.long, device=chunk.device)
    return avg[:, 0], avg[:, 1:], torch.cat([(n[:, 1:] + 1).clamp_max(k - 1), ones], dim=1)
