"""Checks of the env's arguments and reset options: one clear `ValueError` naming the problem."""

from __future__ import annotations

import difflib
import inspect
import string
from typing import Any

import numpy as np

from vlagym.envs.constants import CAMERAS

INSTRUCTION_CHARSET = string.ascii_letters + string.digits + " ,.;:'?!-()"
INSTRUCTION_MAX_LENGTH = 160


def choice_error(name: str, value: Any, choices: tuple[str, ...]) -> ValueError:
    hint = difflib.get_close_matches(str(value), choices, n=1)
    did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
    return ValueError(f"unknown {name} {value!r}{did_you_mean}; valid choices: {list(choices)}")


def unknown_kwarg_error(env_cls: type, name: str) -> TypeError:
    """The error for a keyword argument that no `__init__` of `env_cls` (or of its bases) takes."""
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    valid = sorted(
        {
            param
            for cls in env_cls.__mro__
            if "__init__" in vars(cls)
            for param, p in inspect.signature(vars(cls)["__init__"]).parameters.items()
            if param != "self" and p.kind in named
        }
    )
    hint = difflib.get_close_matches(name, valid, n=1)
    did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
    return TypeError(f"{env_cls.__name__} got unknown keyword argument {name!r}{did_you_mean}; valid: {valid}")


def check_cameras(cameras: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    cameras = (cameras,) if isinstance(cameras, str) else tuple(cameras)
    if not cameras:
        raise ValueError(f"cameras must name at least one camera; valid choices: {list(CAMERAS)}")
    for cam in cameras:
        if cam not in CAMERAS:
            raise choice_error("camera", cam, CAMERAS)
    if len(set(cameras)) != len(cameras):
        raise ValueError(f"cameras has duplicates: {list(cameras)}")
    return cameras


def check_xy(value: Any) -> tuple[float, float]:
    """`options["target_xy"]` as two finite floats."""
    try:
        xy = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        xy = None
    if xy is None or xy.shape != (2,) or not np.all(np.isfinite(xy)):
        raise ValueError(f"options['target_xy'] must be two finite numbers (x, y) in metres, got {value!r}")
    return float(xy[0]), float(xy[1])


def as_hw(value: int | tuple[int, int] | list[int], name: str) -> tuple[int, int]:
    """An image size (an int, or height and width) as (height, width), each 8..2048."""
    if isinstance(value, (int, np.integer)):
        hw = (int(value), int(value))
    else:
        hw = tuple(int(v) for v in value)
    if len(hw) != 2 or min(hw) < 8 or max(hw) > 2048:
        raise ValueError(f"{name} must be an int or (height, width) between 8 and 2048, got {value!r}")
    return hw  # type: ignore[return-value]


def check_instruction(text: Any) -> str:
    """`options["instruction"]`: a string of at most `INSTRUCTION_MAX_LENGTH` characters of `INSTRUCTION_CHARSET`."""
    if not isinstance(text, str):
        raise ValueError(f"options['instruction'] must be a string, got {type(text).__name__}")
    bad = sorted(set(text) - set(INSTRUCTION_CHARSET))
    if len(text) > INSTRUCTION_MAX_LENGTH or bad:
        raise ValueError(
            f"options['instruction'] must have at most {INSTRUCTION_MAX_LENGTH} characters from "
            f"{INSTRUCTION_CHARSET!r}; got {len(text)} characters, invalid: {bad}"
        )
    return text
