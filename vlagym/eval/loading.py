"""Which policy a --policy names, loaded: the scripted expert (None), a checkpoint folder, a policy server
(ws://HOST:PORT) or a user's ``package.module:factory``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from vlagym.eval.adapters import CheckpointPolicy
from vlagym.eval.configs import EvalError, policy_kind
from vlagym.eval.served import ServedPolicy


class FactoryPolicy:
    """A user's policy from ``package.module:factory`` as an `EvalPolicy`.

    ``factory()`` returns an object with ``__call__(obs) -> actions (B, A)`` on the vector env's batched
    observations and, optionally, ``reset(mask, seeds)`` (called when sub-envs start episodes), ``env_kwargs``
    (what it observes, default ``{"obs_mode": "rgb"}``) and ``env_id`` (its task when --tasks is not given).
    """

    def __init__(self, spec: str):
        import importlib

        module_name, _, name = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise EvalError(f"cannot import {module_name!r} for --policy {spec}: {e}") from e
        factory = getattr(module, name, None)
        if not callable(factory):
            raise EvalError(f"{module_name!r} has no callable {name!r} (--policy {spec})")
        self.spec, self.policy = spec, factory()
        if not callable(self.policy):
            raise EvalError(f"{spec}() returned {type(self.policy).__name__}, which is not callable on observations")
        self.env_id: str | None = getattr(self.policy, "env_id", None)
        self.env_kwargs: dict[str, Any] = dict(getattr(self.policy, "env_kwargs", None) or {"obs_mode": "rgb"})

    def chunk_execution(self) -> dict[str, Any] | None:
        return None

    def execute_chunks(self, n_action_steps: int | None = None, temporal_ensemble: bool = False) -> None:
        raise ValueError(f"{self.spec} executes its own actions: n_action_steps and temporal_ensemble do not apply")

    def reset(self, mask: np.ndarray, seeds: np.ndarray | Sequence[int] | None = None) -> None:
        reset = getattr(self.policy, "reset", None)
        if reset is not None:
            reset(np.asarray(mask, bool), seeds)

    def __call__(self, obs: Any) -> np.ndarray:
        return np.asarray(self.policy(obs), np.float32)


def load_eval_policy(policy: str, served_mapping: dict[str, Any] | None = None) -> Any:
    """The `EvalPolicy` a --policy names (`vlagym.eval.configs.policy_kind`); None for the scripted expert."""
    kind = policy_kind(policy)
    if kind == "expert":
        return None
    if kind == "served":
        return ServedPolicy(policy, served_mapping or None)
    if kind == "factory":
        return FactoryPolicy(policy)
    return CheckpointPolicy(policy)
