"""Policy checkpoints: a folder with ``model.safetensors`` (the state dict, normalisation buffers included) and
``config.json`` (format, policy config, tokenizer vocabulary, normalisation statistics, vlagym version, and the
caller's `extra`: env id, env kwargs, wrapper settings). Both files are written atomically; weights first, so a
folder whose ``config.json`` exists has complete weights. Loading is strict: every key and shape must match.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from vlagym.io import atomic_write_json, temp_path

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
FORMAT = "vlagym-policy"
FORMAT_VERSION = 1
POLICY_TYPES = ("vla",)


def save_checkpoint(policy: torch.nn.Module, folder: str | os.PathLike, extra: Mapping[str, Any] | None = None) -> Path:
    """Write `policy` (a `VLAPolicy`: config, tokenizer, norm_stats, weights) to `folder` (created if needed);
    `extra` (JSON-serialisable) is stored under ``"extra"``."""
    from vlagym import __version__

    folder = Path(folder)
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "policy_type": "vla",
        "vlagym_version": __version__,
        "config": policy.config.to_dict(),
        "tokenizer": policy.tokenizer.to_dict(),
        "stats": policy.norm_stats.to_dict() if policy.norm_stats is not None else None,
        "extra": dict(extra or {}),
    }
    try:  # before touching the folder: a bad `extra` must not leave new weights beside an old config
        text = json.dumps(meta, indent=2) + "\n"
    except (TypeError, ValueError) as err:
        raise ValueError(f"checkpoint extra must be JSON-serialisable: {err}") from err
    folder.mkdir(parents=True, exist_ok=True)
    # safetensors refuses shared or non-contiguous storage; copies on the CPU are both, whatever the device.
    state = {k: v.detach().to("cpu").contiguous().clone() for k, v in policy.state_dict().items()}
    weights = folder / WEIGHTS_NAME
    tmp = temp_path(weights)
    try:
        save_file(state, str(tmp), metadata={"format": FORMAT})
        os.replace(tmp, weights)
    finally:
        tmp.unlink(missing_ok=True)
    atomic_write_json(folder / CONFIG_NAME, json.loads(text))
    return folder


def read_checkpoint_config(folder: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``config.json`` of a checkpoint folder, checked to be one (raises `ValueError` otherwise)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a policy checkpoint: no such folder")
    missing = [name for name in (CONFIG_NAME, WEIGHTS_NAME) if not (folder / name).is_file()]
    if missing:
        raise ValueError(f"{folder} is not a policy checkpoint: it lacks {missing}")
    try:
        meta = json.loads((folder / CONFIG_NAME).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{folder / CONFIG_NAME} is not valid JSON: {err}") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise ValueError(f"{folder / CONFIG_NAME} is not a vlagym policy config (format {got!r}, expected {FORMAT!r})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{folder / CONFIG_NAME}: unsupported format_version {meta.get('format_version')!r}; "
            f"this vlagym reads {FORMAT_VERSION}"
        )
    if meta.get("policy_type") not in POLICY_TYPES:
        raise ValueError(f"unknown policy_type {meta.get('policy_type')!r}; known: {list(POLICY_TYPES)}")
    return meta


def check_state_dict(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Raise `ValueError` naming every missing key, unexpected key and shape mismatch of `state` for `model`."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    shapes = sorted(
        f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(expected[k].shape)}"
        for k in set(expected) & set(state)
        # a 4-bit layer's serialised quantization state (bitsandbytes) has the length of its text, not a shape
        if state[k].shape != expected[k].shape and ".quant_state." not in k
    )
    problems = [
        f"{label} {items}"
        for label, items in (("missing keys", missing), ("unexpected keys", unexpected), ("shape mismatches", shapes))
        if items
    ]
    if problems:
        raise ValueError("checkpoint weights do not match the model: " + "; ".join(problems))


def read_weights(folder: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The checkpoint's weights (safetensors, on the CPU)."""
    return load_file(str(Path(folder) / WEIGHTS_NAME), device="cpu")
