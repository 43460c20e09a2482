"""Demonstrations collected on Ray workers (`vlagym demos --backend ray`), written as a local run writes them.

Each worker (`DemoWorker`, a Ray actor) keeps a demo vector env of `num_envs` sub-envs and runs units of
consecutive episodes with the same `DemoCollector` as a local run; instead of a file it returns the episodes it
would have committed. The driver commits the units in episode order to the one file, so the file is the one a
local run writes (episode i runs from seed `seed + i`, whoever runs it), and an interrupted run resumes from
its last committed demo as a local one does. A worker that dies has its unit rerun on a fresh worker
(`vlagym.distributed.ActorPool`). Per episode the unit's two numbers go out and the episode's arrays come
back (images, proprio, states, actions: ~10 MB for 100 steps of two 128 px cameras).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from vlagym.distributed import ActorPool, connect
from vlagym.train.configs import DemoConfig
from vlagym.train.demo_collector import DemoCollector, make_demo_envs
from vlagym.train.demo_writer import DemoEpisode, DemoJournal

logger = logging.getLogger(__name__)


class _Kept:
    """Stands in for the journal and the progress bar on a worker: keeps what the collector commits."""

    def __init__(self) -> None:
        self.episodes: list[DemoEpisode] = []

    def commit(self, episodes: list[DemoEpisode]) -> None:
        self.episodes.extend(episodes)

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, **kwargs: Any) -> None:
        pass


@dataclasses.dataclass
class UnitResult:
    """What one unit of episodes gave: the demos to commit (in order), its successes and failed seeds."""

    episodes: list[DemoEpisode]
    successes: int
    failed_seeds: list[int]


class DemoWorker:
    """A Ray actor running units (first, end) of `cfg`'s episodes."""

    def __init__(self, cfg: DemoConfig):
        self.cfg = dataclasses.replace(cfg, backend="local", address=None, workers=None, unit_size=None, progress=False)
        self._envs: dict[int, Any] = {}

    def run(self, unit: tuple[int, int]) -> UnitResult:
        first, end = unit
        k = min(self.cfg.num_envs, end - first)  # the collector gives every sub-env an episode at the start
        if k not in self._envs:
            self._envs[k] = make_demo_envs(self.cfg, k)
        kept = _Kept()
        collector = DemoCollector(self._envs[k], dataclasses.replace(self.cfg, episodes=end), kept, first, kept)
        collector.run()
        return UnitResult(kept.episodes, collector.successes, collector.failed_seeds)

    def close(self) -> None:
        for envs in self._envs.values():
            envs.close()
        self._envs = {}


class RayDemoCollection:
    """Episodes first .. cfg.episodes - 1 on Ray workers, committed to `journal` in episode order."""

    def __init__(self, cfg: DemoConfig, journal: DemoJournal, first: int, bar: Any):
        self.cfg, self.journal, self.first, self.bar = cfg, journal, first, bar
        self.successes = 0
        self.failed_seeds: list[int] = []
        self.cut_short = 0  # episodes cut where the expert gave up: only with a policy acting, which runs locally

    def run(self) -> None:
        connect(self.cfg.address)
        size = self.cfg.unit_size or 2 * self.cfg.num_envs
        units = [(a, min(a + size, self.cfg.episodes)) for a in range(self.first, self.cfg.episodes, size)]
        waiting: dict[int, UnitResult] = {}
        next_unit = 0
        with ActorPool(DemoWorker, (self.cfg,), self.cfg.workers) as pool:
            for u, result in pool.run("run", units):
                waiting[u] = result
                self.bar.update(units[u][1] - units[u][0])
                while next_unit in waiting:  # commit in episode order: the file is the local run's
                    done = waiting.pop(next_unit)
                    next_unit += 1
                    self.successes += done.successes
                    self.failed_seeds += done.failed_seeds
                    if done.episodes:
                        self.journal.commit(done.episodes)
                self.bar.set_postfix(success=self.successes, failed=len(self.failed_seeds))


__all__ = ["DemoWorker", "RayDemoCollection", "UnitResult"]
