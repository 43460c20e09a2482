"""Validation helpers of the config dataclasses: one wording for every "must be a number" error."""

from __future__ import annotations

import math
from typing import Any


def check_int(name: str, value: Any, low: int) -> None:
    """`ValueError` naming `name` unless `value` is an int (not a bool) >= `low`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def check_float(name: str, value: Any, low: float, high: float = math.inf, low_open: bool = False) -> None:
    """`ValueError` naming `name` unless `value` is a finite real (not a bool) in [low, high] ((low, high] when
    `low_open`)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bound = f"> {low}" if low_open else f">= {low}"
        raise ValueError(
            f"{name} must be a finite number {bound}{'' if high == math.inf else f' and <= {high}'}, got {value!r}"
        )
