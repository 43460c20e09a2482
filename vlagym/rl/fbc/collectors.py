"""Where a round's episodes are collected: here (`LocalCollector`) or on Ray workers (`RayCollector`).

Both run `collect_round` with the run's noisy actor on collection envs of `n_envs` sub-envs. A Ray worker
(`CollectionWorker`) loads the BC checkpoint once (its files shipped through Ray's object store, SHA-256
checked) and before each round receives the policy's current weights (put in the object store once per round,
and given again to a worker that replaces a dead one). Units are whole groups of tries of consecutive states:
the k-th try of a state gets the noise of (seed, k) on whichever worker runs it, and each episode the sub-env it
has in the local run (`collect_round`'s `first`), so the round is the local one's episode by episode, bit for
bit, whatever the number of workers. Per episode the seed goes out and the recorded episode comes back
(images, proprio, actions: ~2.5 MB for 100 steps of two 64 px cameras).
"""

from __future__ import annotations

import logging
from typing import Any

from vlagym.eval.layout import CHECKPOINT_FILES
from vlagym.policies.vla import VLAPolicy
from vlagym.rl.collection.rollouts import Collection, collect_round, join_collections
from vlagym.rl.fbc.collect import NoisyVLA, load_policy, make_collection_envs
from vlagym.rl.fbc.config import FilteredBCConfig

logger = logging.getLogger(__name__)


class LocalCollector:
    """The round's episodes on this process's collection envs, with the run's actor."""

    def __init__(self, cfg: FilteredBCConfig, env_kwargs: dict[str, Any], actor: NoisyVLA):
        self.actor = actor
        self.envs = make_collection_envs(cfg, env_kwargs)

    def collect(self, seeds: list[int], first: int = 0) -> tuple[Collection, float]:
        """The round's collection (or a part's, from position `first`) and the seconds spent choosing actions."""
        before = self.actor.seconds
        return collect_round(self.envs, self.actor, seeds, first=first), self.actor.seconds - before

    def close(self) -> None:
        self.envs.close()


class CollectionWorker:
    """A Ray actor: the BC checkpoint's policy (weights set each round) collecting through a `LocalCollector`."""

    def __init__(self, cfg: FilteredBCConfig, env_kwargs: dict[str, Any], shipment: Any):
        self.policy = load_policy(cfg, shipment.materialize(), device="cpu").eval()
        self.local = LocalCollector(cfg, env_kwargs, NoisyVLA(self.policy, cfg.noise_std, cfg.noise_hold))

    def set_weights(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state, strict=True)
        self.policy.eval()

    def run(self, unit: tuple[int, tuple[int, ...]]) -> tuple[Collection, float]:
        first, seeds = unit
        return self.local.collect(list(seeds), first)

    def close(self) -> None:
        self.local.close()


class RayCollector:
    """The round's episodes on Ray workers; `collect` gets the policy whose weights the workers should use."""

    def __init__(self, cfg: FilteredBCConfig, env_kwargs: dict[str, Any], policy: VLAPolicy):
        from vlagym.distributed import ActorPool, connect, ship_folder

        connect(cfg.address)
        self.policy = policy
        self.unit = cfg.unit_size or cfg.group_size * max(1, 2 * cfg.n_envs // cfg.group_size)
        shipment = ship_folder(cfg.policy, CHECKPOINT_FILES)
        self.pool = ActorPool(CollectionWorker, (cfg, env_kwargs, shipment), cfg.workers)

    def collect(self, seeds: list[int]) -> tuple[Collection, float]:
        import ray

        state = {k: v.detach().cpu() for k, v in self.policy.state_dict().items()}
        self.pool.broadcast("set_weights", ray.put(state))
        size = self.unit  # whole groups: a state's tries stay on one worker
        units = [(i, tuple(seeds[i : i + size])) for i in range(0, len(seeds), size)]
        parts = self.pool.map("run", units)
        return join_collections([c for c, _ in parts]), sum(seconds for _, seconds in parts)

    def close(self) -> None:
        self.pool.close()


__all__ = ["CollectionWorker", "LocalCollector", "RayCollector"]
