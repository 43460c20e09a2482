"""Repeated, interleaved passes and what a table cell makes of them (median, per-pass ratios, every sample).

A slow drift of the machine's speed (a background job, throttling) must hit every measurement of a table
alike, so measurements run pass by pass (`interleaved`), ratios are taken within a pass (`ratios`), and a
cell is the median of its passes with every pass's value kept (`summarise`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

logger = logging.getLogger(__name__)
T = TypeVar("T")


def interleaved(measures: dict[str, Callable[[], T]], repeats: int, section: str = "") -> dict[str, list[T]]:
    """Pass 1 of every measurement (in the dict's order), then pass 2 of every one, ...; each one's results
    in pass order.

    A slow drift of the machine's speed (a background job, throttling) then hits every measurement alike,
    instead of whichever ran last, and ratios between them taken within a pass stay fair.
    """
    samples: dict[str, list[T]] = {name: [] for name in measures}
    for p in range(repeats):
        for name, measure in measures.items():
            logger.info("%s: %s, pass %d/%d", section, name, p + 1, repeats)
            samples[name].append(measure())
    return samples


def transpose(passes: Sequence[dict[str, T]]) -> dict[str, list[T]]:
    """Per-pass dicts of metrics -> metric: the values in pass order."""
    return {k: [d[k] for d in passes] for k in passes[0]}


def ratios(values: Sequence[float], bases: Sequence[float]) -> list[float]:
    """Pass by pass `value / base` (the same pass's, so a drift between passes cancels)."""
    return [v / b if b else math.nan for v, b in zip(values, bases, strict=True)]


def summarise(samples: dict[str, Sequence[float]]) -> dict[str, Any]:
    """Row cells: per metric the median of its passes, and every pass's value under "samples"."""
    row: dict[str, Any] = {k: float(np.median(v)) for k, v in samples.items()}
    row["samples"] = {k: [float(x) for x in v] for k, v in samples.items()}
    return row


def passes_note(repeats: int) -> str:
    """The footnote saying what a cell of a repeated table is."""
    if repeats == 1:
        return "a single pass per cell (--repeats 1)"
    return f"median of {repeats} interleaved passes (ratios: median of each pass's ratio)"


@contextlib.contextmanager
def pinned_to_one_core(enabled: bool) -> Iterator[str]:
    """Pin the process to its first allowed core while inside (one core: no migration, no SMT sibling noise)."""
    if not (enabled and hasattr(os, "sched_setaffinity")):
        yield "not pinned"
        return
    before = os.sched_getaffinity(0)
    core = min(before)
    os.sched_setaffinity(0, {core})
    try:
        yield f"pinned to core {core}"
    finally:
        os.sched_setaffinity(0, before)
