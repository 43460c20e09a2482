"""The rollout backend a command asks for: `LocalRollouts` or Ray workers (`vlagym.eval.ray_rollouts`).

rollouts = make_rollouts(checkpoint, "runs/bc/checkpoints/step_5000", backend="ray", workers=8)
records = rollouts.run("VLA-PickCup-v0", env_kwargs, seeds)      # in seed order, either backend
rollouts.close()
"""

from __future__ import annotations

from typing import Any

from vlagym.eval.configs import EvalError
from vlagym.eval.local_rollouts import LocalRollouts, Rollouts


def make_rollouts(
    policy_object: Any,
    policy: str,
    backend: str = "local",
    num_envs: int = 1,
    vectorization: str = "sync",
    progress: bool = False,
    address: str | None = None,
    workers: int | None = None,
    served_mapping: dict[str, Any] | None = None,
    n_action_steps: int | None = None,
    temporal_ensemble: bool = False,
    unit_size: int | None = None,
) -> Rollouts:
    """The rollouts of a backend: local ones act with `policy_object` (None: the expert); Ray workers rebuild the
    policy from `policy` (the --policy string) and the chunk execution given, and run units of `unit_size`
    episodes (None: twice `num_envs`)."""
    if backend == "local":
        return LocalRollouts(policy_object, num_envs, vectorization, progress)
    from vlagym.distributed import DistributedError, connect
    from vlagym.eval.ray_rollouts import PolicySource, RayRollouts

    try:
        connect(address)
        source = PolicySource.from_policy(policy, served_mapping, n_action_steps, temporal_ensemble)
        return RayRollouts(source, workers, num_envs, vectorization, unit_size)
    except DistributedError as e:
        raise EvalError(str(e)) from e


__all__ = ["make_rollouts"]
