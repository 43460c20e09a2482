"""What every training run shares beyond its folder (`run_files`): seeding, RNG state, device, EMA."""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlagym.train.configs import DEVICES
from vlagym.train.run_files import STATE_NAME


# ---------------------------------------------------------------------------- training state
def load_state(folder: str | os.PathLike) -> dict[str, Any]:
    """The training state saved beside a checkpoint (tensors and plain values only: ``weights_only=True``)."""
    return torch.load(Path(folder) / STATE_NAME, map_location="cpu", weights_only=True)


# ---------------------------------------------------------------------------- seeding and RNG state
def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's (CPU and CUDA) global generators."""
    random.seed(seed)
    # The global NumPy generator on purpose: it is what third-party code (and old scripts) draw from.
    np.random.seed(seed % 2**32)  # noqa: NPY002
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """The global RNG states as tensors and plain values (loadable with ``torch.load(weights_only=True)``)."""
    np_state = np.random.get_state()  # noqa: NPY002
    py_state = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": {
            "version": py_state[0],
            "state": torch.tensor(py_state[1], dtype=torch.int64),
            "gauss_next": py_state[2],
        },
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of `rng_state`."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(  # noqa: NPY002
        ("MT19937", n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"])
    )
    p = state["python"]
    random.setstate((p["version"], tuple(int(x) for x in p["state"].tolist()), p["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@contextlib.contextmanager
def preserved_rng() -> Iterator[None]:
    """Run a block (an evaluation) without moving the training's global RNG streams."""
    saved = rng_state()
    try:
        yield
    finally:
        set_rng_state(saved)


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `n` for the block (None: left as they are); the caller's process-wide
    setting is restored after."""
    threads = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------------------- device and optimisation
def resolve_device(name: str) -> torch.device:
    """ "auto" (CUDA when available), "cpu" or "cuda" (this process's ``LOCAL_RANK`` GPU under torchrun)."""
    if name not in DEVICES:
        raise ValueError(f"device must be one of {list(DEVICES)}, got {name!r}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device 'cuda' was asked for but CUDA is not available")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups that decay the weight matrices only: decaying biases and norm gains fights the normalisation."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    other = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0.0}]


@torch.no_grad()
def ema_update(ema: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    """``ema ← decay · ema + (1 − decay) · model`` for the parameters; buffers copied."""
    for e, p in zip(ema.parameters(), model.parameters(), strict=True):
        e.lerp_(p.detach(), 1.0 - decay)
    for e, b in zip(ema.buffers(), model.buffers(), strict=True):
        e.copy_(b)
