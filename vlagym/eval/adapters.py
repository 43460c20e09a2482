"""The policies `vlagym eval` runs, behind one batched interface: the scripted experts and a VLA checkpoint (a
policy server: `vlagym.eval.served`; a user's factory and the choice among them: `vlagym.eval.loading`).

`EvalPolicy` is what `vlagym.eval.rollout.run_episodes` drives: batched observations in, batched actions out,
and `reset(mask, seeds)` when sub-envs start new episodes. `ExpertPolicy` wraps the scripted experts of a sync
vector env (they read simulator state); `CheckpointPolicy` loads a checkpoint folder (torch and the policy code
only then) with the env settings it was trained with. A sampling (flow) head draws each episode's noise from
`episode_noise_generator(seed)`, a generator of its own made from the episode's seed and `NOISE_STREAM`.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from vlagym.eval.configs import EvalError, check_checkpoint_folder
from vlagym.eval.rollout import VectorExpert

#: Mixed with the episode seed into the seed of the episode's noise generator, so the policy's noise stream is
#: not the environment's (`reset(seed)`) stream; changing it changes every flow checkpoint's evaluation.
NOISE_STREAM = 0x5EED_F10A


class EvalPolicy(Protocol):
    """A batched policy for `run_episodes`: per-sub-env state is cleared by `reset(mask, seeds)`."""

    def reset(self, mask: np.ndarray, seeds: np.ndarray | None = None) -> None:
        """Forget the state of the sub-envs in `mask` (bool, one per sub-env): they start new episodes, sub-env i
        with seed `seeds[i]` (None: unknown)."""

    def __call__(self, obs: Any) -> np.ndarray:
        """Batched observations of the vector env -> actions (B, A)."""


class ExpertPolicy:
    """The scripted experts of a vector env's sub-envs (they read privileged simulator state): called directly
    in a sync env; in envs made with ``make_rollout_envs(..., expert=True)`` whose sub-envs live in worker
    processes they act inside them (`ExpertActs`) and this sends placeholders."""

    def __init__(self, envs: gym.vector.VectorEnv):
        self._expert: VectorExpert | None = None
        if getattr(envs, "expert_inside", False):
            self._placeholder = np.zeros((envs.num_envs, *envs.single_action_space.shape), np.float32)
        elif hasattr(envs, "envs"):
            self._expert = VectorExpert(envs)
        else:
            raise EvalError(
                "the expert reads each sub-env's simulator state: use a sync vector env, or make the envs with "
                "make_rollout_envs(..., expert=True)"
            )

    def reset(self, mask: np.ndarray, seeds: np.ndarray | None = None) -> None:
        if self._expert is not None:
            self._expert.reset(mask)  # deterministic: the seeds are not needed

    def __call__(self, obs: Any) -> np.ndarray:
        return self._placeholder.copy() if self._expert is None else self._expert(obs)


def episode_noise_generator(seed: int):
    """A CPU `torch.Generator` for the policy noise of the episode with env seed `seed`.

    Seeded from (`NOISE_STREAM`, seed) through numpy's `SeedSequence`, which is stable across platforms and
    Python runs (unlike `hash`). On CPU, so the draws are the same whatever device the model runs on.
    """
    import torch

    state = np.random.SeedSequence([NOISE_STREAM, int(seed)]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


class CheckpointPolicy:
    """A `VLAPolicy` checkpoint as an `EvalPolicy`.

    `reset(mask)` restarts the action queues of the rows in `mask` only, when the
    policy's `reset` takes a mask; otherwise it clears the whole queue, so the
    other sub-envs replan one chunk early and outcomes depend (slightly) on `num_envs`.
    A flow head draws each row's noise from its own generator, made from the
    row's episode seed at `reset(mask, seeds)` (`episode_noise_generator`); rows
    reset without seeds draw from torch's global generator. The L1 head draws
    nothing and gets no generators.
    """

    def __init__(self, folder: str | os.PathLike, device: str | None = None):
        config = check_checkpoint_folder(folder)
        try:
            from vlagym.policies import VLAPolicy  # lazy: torch and the policy code only when a checkpoint is used
        except ImportError as e:
            raise EvalError(f"cannot evaluate a checkpoint: vlagym.policies is not available ({e})") from e
        extra = config.get("extra") or {}
        self.folder = Path(folder)
        self.env_id: str | None = extra.get("env_id")
        # What the policy reads (rgb, its cameras, its image size), then whatever env kwargs training used.
        policy_config = config.get("config") or {}
        self.env_kwargs: dict[str, Any] = {"obs_mode": "rgb"}
        if "image_size" in policy_config:
            self.env_kwargs["image_size"] = policy_config["image_size"]
        if "cameras" in policy_config:
            self.env_kwargs["cameras"] = list(policy_config["cameras"])
        self.env_kwargs.update(extra.get("env_kwargs") or {})
        try:
            self.policy = VLAPolicy.from_pretrained(self.folder)
        except Exception as e:  # noqa: BLE001 - whatever a user's folder holds, it is reported, never a traceback
            raise EvalError(f"{str(folder)!r} cannot be loaded as a vlagym policy: {e}") from e
        if device is not None:
            self.policy.to(device)
        self.policy.eval()
        try:
            self._masked_reset = "mask" in inspect.signature(self.policy.reset).parameters
        except (TypeError, ValueError):
            self._masked_reset = False
        # A flow head draws noise: it gets one generator per row. Others (L1) are called exactly as before.
        self.samples = getattr(getattr(self.policy, "config", None), "head", None) == "flow"
        self._generators: list[Any] = []

    def execute_chunks(self, n_action_steps: int | None = None, temporal_ensemble: bool = False) -> None:
        """Act with `n_action_steps` actions of each predicted chunk (no ensembling), or with the temporal ensemble,
        instead of the checkpoint's own setting; ValueError (from the policy config) when the chunk cannot."""
        self.policy.config = self.policy.config.executing(n_action_steps, temporal_ensemble)

    def chunk_execution(self) -> dict[str, Any] | None:
        """How the actions are executed: chunk size, actions run per chunk, temporal ensembling (None for a policy
        without a VLA config)."""
        c = getattr(self.policy, "config", None)
        if c is None:
            return None
        return {
            "chunk_size": c.chunk_size,
            "n_action_steps": c.n_action_steps,
            "temporal_ensemble": c.temporal_ensemble,
        }

    def reset(self, mask: np.ndarray, seeds: np.ndarray | Sequence[int] | None = None) -> None:
        """Restart the rows in `mask`; a flow head's row i then draws its noise from
        `episode_noise_generator(seeds[i])` (from torch's global generator when `seeds` is None)."""
        mask = np.asarray(mask, bool)
        if self._masked_reset:
            self.policy.reset(mask=mask)
        else:
            self.policy.reset()  # whole queue: see the class docstring
        if not self.samples:
            return
        if len(self._generators) != len(mask):
            self._generators = [None] * len(mask)
        if seeds is not None and len(seeds) != len(mask):
            raise ValueError(f"reset got {len(seeds)} seeds for {len(mask)} rows: pass one per row")
        for i in np.flatnonzero(mask):
            self._generators[i] = None if seeds is None else episode_noise_generator(int(seeds[i]))

    def __call__(self, obs: Any) -> np.ndarray:
        import torch

        with torch.inference_mode():
            batch = self.policy.batch_from_obs(obs)
            if self.samples:
                action = self.policy.select_action(batch, self._generators or None)
            else:
                action = self.policy.select_action(batch)
        if isinstance(action, torch.Tensor):
            action = action.detach().float().cpu().numpy()
        return np.asarray(action, np.float32)
