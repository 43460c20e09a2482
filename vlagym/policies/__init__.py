"""Policies: the VLA (config dataclass + nn.Module) and its checkpoint format.

`VLAConfig` imports without torch (the command line builds its options from it); the rest loads torch on
first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from vlagym.policies.config import VLAConfig

_LAZY = {
    "VLAPolicy": "vlagym.policies.vla",
    "load_policy": "vlagym.policies.vla",
    "read_checkpoint_config": "vlagym.policies.checkpoint",
    "save_checkpoint": "vlagym.policies.checkpoint",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["VLAConfig", "VLAPolicy", "load_policy", "read_checkpoint_config", "save_checkpoint"]
