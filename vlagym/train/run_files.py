"""A training run's folder: the names of what it holds, and its checkpoint folders (no torch at import).

A run folder ``OUT`` of `train-bc`, `train-fbc` or `train-rl`:

    OUT/bc_config.json | rl_config.json the run's config
    OUT/tb/                             TensorBoard events
    OUT/eval/step_<n>/, OUT/eval/curve.json
                                        the periodic evaluations and their curve
    OUT/checkpoints/step_<n>/           a policy checkpoint + `STATE_NAME` (what exact resume needs)
    OUT/checkpoints/last.json           {"step": n, "path": "step_<n>"}: the latest complete checkpoint

A checkpoint folder is filled under a temporary name and renamed into place before ``last.json`` is replaced
atomically, so a run killed at any moment resumes from a complete checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from vlagym.io import atomic_write_json

BC_CONFIG_NAME = "bc_config.json"
RL_CONFIG_NAME = "rl_config.json"
TB_DIR = "tb"
EVAL_DIR = "eval"
CURVE_NAME = "curve.json"
CHECKPOINTS_DIR = "checkpoints"
LAST_NAME = "last.json"
STATE_NAME = "training_state.pt"


def checkpoint_dir(out: str | os.PathLike) -> Path:
    """Where a run keeps its checkpoints."""
    return Path(out) / CHECKPOINTS_DIR


def latest_checkpoint(out: str | os.PathLike, *required: str) -> Path | None:
    """The latest complete checkpoint folder of a run (from ``checkpoints/last.json``), or None.

    Complete means it holds `STATE_NAME` and every file named in `required`.
    """
    pointer = checkpoint_dir(out) / LAST_NAME
    if not pointer.is_file():
        return None
    folder = checkpoint_dir(out) / json.loads(pointer.read_text())["path"]
    return folder if all((folder / name).is_file() for name in (STATE_NAME, *required)) else None


def commit_checkpoint(out: str | os.PathLike, step: int, fill: Callable[[Path], None]) -> Path:
    """``checkpoints/step_<step>``: `fill` writes into a temporary folder, which is renamed into place; then
    ``last.json`` points at it."""
    root = checkpoint_dir(out)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step}"
    tmp = root / f".tmp_step_{step}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        fill(tmp)
        if final.exists():  # a leftover of a run that died before moving last.json on: replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    atomic_write_json(root / LAST_NAME, {"step": step, "path": final.name})
    return final
