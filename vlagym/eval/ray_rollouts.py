"""Evaluation episodes on Ray actors: the `ray` backend of `vlagym eval`, demos and post-training rounds.

    rollouts = RayRollouts(PolicySource.from_policy("runs/bc/checkpoints/step_5000"), workers=8, num_envs=4)
    records = rollouts.run("VLA-PickCup-v0", env_kwargs, seeds=range(100_000, 100_500))
    rollouts.close()

Each worker (`RolloutWorker`, a Ray actor) loads the policy once (a checkpoint's files arrive through Ray's
object store and are checked by SHA-256, `vlagym.distributed.ship_folder`) and keeps a rollout vector env of
`num_envs` sub-envs per task and env settings. The driver cuts the seed list into units of consecutive seeds
and gathers the records in seed order. An episode depends on its seed alone (the env's reset, the policy's
noise: `episode_noise_generator`) and on where it sits in the batch: each unit keeps its episodes' positions in
the whole run, so a worker runs episode k on sub-env k % num_envs, as the local backend does
(`vlagym.eval.rollout.run_episodes`). The records are the local backend's with the same `num_envs`, whatever the
number of workers and the unit size, bit for bit. Across different `num_envs` a torch policy's batched
products round differently, so compare policies at the same `num_envs`. A worker that dies has its unit rerun
on a fresh one (`vlagym.distributed.ActorPool`).

Per episode, only the unit's seeds go out and its records (a few hundred bytes each) come back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vlagym.distributed import ActorPool, FolderShipment, ship_folder
from vlagym.eval.configs import EXPERT, policy_kind
from vlagym.eval.layout import CHECKPOINT_FILES
from vlagym.eval.local_rollouts import Job, LocalRollouts, OnJobRecord, Rollouts
from vlagym.eval.rollout import EpisodeRecord

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicySource:
    """What a worker needs to build the policy itself: the --policy string, the checkpoint's files when it is
    one, the served mapping, and how its chunks are executed."""

    policy: str
    shipment: FolderShipment | None = None
    served_mapping: dict[str, Any] = field(default_factory=dict)
    n_action_steps: int | None = None
    temporal_ensemble: bool = False

    @classmethod
    def from_policy(
        cls,
        policy: str,
        served_mapping: dict[str, Any] | None = None,
        n_action_steps: int | None = None,
        temporal_ensemble: bool = False,
    ) -> PolicySource:
        shipment = ship_folder(policy, CHECKPOINT_FILES) if policy_kind(policy) == "checkpoint" else None
        return cls(policy, shipment, dict(served_mapping or {}), n_action_steps, temporal_ensemble)

    @property
    def expert(self) -> bool:
        return self.policy == EXPERT

    def load(self) -> Any:
        """The `EvalPolicy` (None for the expert, which acts through each vector env's experts)."""
        from vlagym.eval.loading import load_eval_policy

        if self.expert:
            return None
        where = str(self.shipment.materialize()) if self.shipment is not None else self.policy
        policy = load_eval_policy(where, self.served_mapping)
        if self.n_action_steps is not None or self.temporal_ensemble:
            policy.execute_chunks(self.n_action_steps, self.temporal_ensemble)
        return policy


class RolloutWorker:
    """A Ray actor running units (`Job`s of consecutive seeds): the policy loaded once, a `LocalRollouts`."""

    def __init__(self, source: PolicySource, num_envs: int, vectorization: str = "sync"):
        # loaded now, so a bad one fails when the worker starts
        policy = source.load()
        self.local = LocalRollouts(policy, num_envs, vectorization)

    def run(self, unit: Job) -> list[EpisodeRecord]:
        return self.local.run_many([unit])[0]

    def served_latencies(self) -> list[float]:
        """A served policy's request round trips (seconds) since the last call; [] for any other policy."""
        latencies = getattr(self.local.policy, "latencies", None)
        if latencies is None:
            return []
        taken = list(latencies)
        latencies.clear()
        return taken

    def close(self) -> None:
        self.local.close()


class RayRollouts(Rollouts):
    """A pool of `RolloutWorker`s (see the module docstring); `run` is `run_episodes` spread over them."""

    def __init__(
        self,
        source: PolicySource,
        workers: int | None = None,
        num_envs: int = 1,
        vectorization: str = "sync",
        unit_size: int | None = None,
        cpus_per_worker: float = 1.0,
    ):
        self.num_envs = num_envs
        self.unit_size = unit_size or 2 * num_envs  # small units: even shares, little lost to a dead worker
        self.pool = ActorPool(RolloutWorker, (source, num_envs, vectorization), workers, cpus_per_worker)
        self.parallel = self.workers * num_envs
        self.concurrent = True

    @property
    def workers(self) -> int:
        return len(self.pool.actors)

    def describe(self) -> dict[str, Any]:
        """What a results file records of the backend."""
        return {"name": "ray", "workers": self.workers, "num_envs": self.num_envs, "unit_size": self.unit_size}

    def run_many(self, jobs: Sequence[Job], on_record: OnJobRecord | None = None) -> list[list[EpisodeRecord]]:
        """Each job's records: the units of every job are handed out together, so small jobs (a suite's cells)
        keep many workers busy; `on_record(job, k, record)` as each unit's episodes come back."""
        size = self.unit_size
        where: list[tuple[int, int]] = []  # (job, offset of the unit's first seed)
        units: list[Job] = []
        for i, job in enumerate(jobs):
            for a in range(0, len(job.seeds), size):
                where.append((i, a))
                units.append(job.part(range(a, min(a + size, len(job.seeds)))))
        records: list[list[EpisodeRecord | None]] = [[None] * len(job.seeds) for job in jobs]
        for u, unit_records in self.pool.run("run", units):
            i, a = where[u]
            for j, record in enumerate(unit_records):
                records[i][a + j] = record
                if on_record is not None:
                    on_record(i, a + j, record)
        return records  # type: ignore[return-value]

    def served_latencies(self) -> list[float]:
        """The request round trips of a served policy's workers since the last call (the workers alive now)."""
        return [t for part in self.pool.ask("served_latencies") for t in part]

    def close(self) -> None:
        self.pool.close()


__all__ = ["PolicySource", "RayRollouts", "RolloutWorker"]
