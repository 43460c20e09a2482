"""Proprio history for `VLAPolicy` (`VLAConfig.proprio_lags`): what the policy reads of its past, and where the
past comes from.

The proprio MLP reads the proprio now and, for each lag, its change since that many steps ago (both in the
policy's normalised units), so a still hand and a hand on its way up look different although one frame shows
them alike. Training batches carry the past as ``observation.proprio_lagged`` ``(B, L, 23)`` (`DemoDataset`'s
``proprio_lags``); acting, `ProprioHistory` keeps each row's past itself and a reset row repeats its first
step, as the dataset repeats an episode's first frame before its start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

LAGGED_KEY = "observation.proprio_lagged"

# `policy` below is a `vlagym.policies.vla.VLAPolicy` (which imports this module: annotated as Any, not imported).


def proprio_input(policy: Any, batch: Mapping[str, Any], proprio: Tensor) -> Tensor:
    """(B, D * (1 + L)) the proprio MLP's input: the normalised proprio `proprio` (B, D), then per lag its change."""
    lags = policy.config.proprio_lags
    if not lags:
        return proprio
    if LAGGED_KEY not in batch:
        raise KeyError(
            f"the policy reads proprio {list(lags)} steps back (proprio_lags): the batch needs {LAGGED_KEY!r} "
            f"(B, {len(lags)}, {policy.config.proprio_dim}) (DemoDataset(proprio_lags=...) gives it; acting, "
            f"select_action keeps it); its keys: {sorted(batch)}"
        )
    past = torch.as_tensor(batch[LAGGED_KEY], device=proprio.device).float()
    if past.shape != (proprio.shape[0], len(lags), proprio.shape[1]):
        raise ValueError(
            f"{LAGGED_KEY!r} must be ({proprio.shape[0]}, {len(lags)}, {proprio.shape[1]}), got {tuple(past.shape)}"
        )
    past = (past - policy.proprio_offset) / policy.proprio_scale
    return torch.cat([proprio, (proprio[:, None] - past).flatten(1)], dim=-1)


def set_proprio_lags(policy: Any, lags: Sequence[int]) -> None:
    """Give a policy without proprio history these lags (a fine-tuning start): the proprio MLP's first layer gains
    zero weights for the new inputs, so the policy acts exactly as before until training moves them."""
    lags = tuple(lags)
    if lags == policy.config.proprio_lags:
        return
    if policy.config.proprio_lags:
        raise ValueError(f"the policy reads proprio lags {list(policy.config.proprio_lags)}, not {list(lags)}")
    first = policy.proprio[0]
    if not isinstance(first, nn.Linear):
        raise TypeError(f"the proprio MLP starts with {type(first).__name__}, not a Linear layer")
    grown = nn.Linear(first.in_features * (1 + len(lags)), first.out_features).to(first.weight.device)
    with torch.no_grad():
        grown.weight.zero_()
        grown.weight[:, : first.in_features] = first.weight
        grown.bias.copy_(first.bias)
    policy.proprio[0] = grown
    policy.config = dataclasses.replace(policy.config, proprio_lags=lags)
    policy._history = ProprioHistory(lags)


class ProprioHistory:
    """Each batch row's proprio over the last ``max(lags)`` steps, for acting: `push` the proprio of every step."""

    def __init__(self, lags: Sequence[int]) -> None:
        self.lags = tuple(lags)
        self._past: Tensor | None = None  # (B, max_lag + 1, D), newest first
        self._fresh: Tensor | None = None  # (B,) rows whose next push starts an episode

    def reset(self, rows: Tensor | None = None) -> None:
        """Forget the past of `rows` (bool (B,)), or of every row (None, or another batch size)."""
        if rows is None or self._fresh is None or rows.shape != self._fresh.shape:
            self._past = self._fresh = None
        else:
            self._fresh[rows.to(self._fresh.device)] = True

    def push(self, proprio: Tensor) -> Tensor:
        """Record this step's proprio (B, D); returns (B, L, D) the proprio `lags` steps back (a row's first step
        where it has no past)."""
        b = proprio.shape[0]
        if self._past is None or self._past.shape[0] != b:
            self._past = proprio[:, None].repeat(1, max(self.lags) + 1, 1)
            self._fresh = torch.zeros(b, dtype=torch.bool, device=proprio.device)
        else:
            self._past = torch.cat([proprio[:, None], self._past[:, :-1]], dim=1)
            fresh = self._fresh
            if bool(fresh.any()):
                self._past[fresh] = proprio[fresh][:, None].expand(-1, self._past.shape[1], -1)
                fresh.zero_()
        return self._past[:, list(self.lags)]
