"""Named, versioned benchmark protocols: what `vlagym eval --suite NAME` runs.

A protocol fixes everything that moves a success rate: the tasks, the
generalization splits, the episodes per task and split, the seeds, the horizon,
the success definition and how action chunks are executed. Two results bundles
of the same protocol (name and version) are comparable episode by episode.

Seeds: episode i of every task and split uses seed `base_seed + i`. Demonstrations
use seeds 0..99999 (`vlagym demos` counts from 0), `vlagym eval` and periodic
evaluation during training 100000 + i, the quickstart 1000000 + i; benchmark
seeds start at 5000000, so no policy is trained or selected on them. The same
seed gives the same layout under train, heldout_paraphrase, lighting and camera
(see `vlagym.envs.splits`), so those splits are paired with each other too.

Changing anything a protocol fixes (a task's registered step limit included)
means a new version string; `check_registered` refuses to run a protocol whose
horizons no longer match the registry.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

import vlagym
from vlagym.envs.splits import SPLITS

DEMO_SEEDS = range(0, 100_000)
SUCCESS_DEFINITION = (
    "`success` = info['success'] is true at any step of the episode (the headline rate); "
    "`success_at_end` = info['success'] at the last step. Episodes end on success or at the horizon."
)


class SuiteError(ValueError):
    """Unknown suite, or a protocol that no longer matches the registered tasks."""


@dataclass(frozen=True)
class SuiteProtocol:
    """One benchmark protocol. Frozen: a protocol changes only by a new version."""

    name: str
    """suite name, e.g. "vlagym-10\""""
    version: str
    """protocol version; any change to the fields below bumps it"""
    description: str
    """one line: what the suite measures"""
    tasks: tuple[str, ...]
    """registered task ids"""
    splits: tuple[str, ...]
    """generalization splits (`vlagym.envs.splits.SPLITS`); each task runs on each"""
    episodes: int
    """episodes per task and split"""
    base_seed: int
    """episode i of every task and split is reset with seed base_seed + i"""
    horizons: tuple[tuple[str, int], ...]
    """(task, steps): the registered max_episode_steps each task is run with"""
    n_action_steps: int | None = None
    """actions of each predicted chunk executed before predicting again; None: the checkpoint's own setting"""
    success_definition: str = SUCCESS_DEFINITION
    """what counts as success (both rates are reported)"""

    def __post_init__(self) -> None:
        if not self.name or not self.version:
            raise SuiteError("a protocol needs a name and a version")
        unknown = [t for t in self.tasks if t not in vlagym.TASKS]
        if unknown:
            raise SuiteError(f"protocol {self.name}: unknown tasks {unknown}; known: {', '.join(sorted(vlagym.TASKS))}")
        bad = [s for s in self.splits if s not in SPLITS]
        if bad:
            raise SuiteError(f"protocol {self.name}: unknown splits {bad}; known: {', '.join(SPLITS)}")
        if not self.tasks or not self.splits:
            raise SuiteError(f"protocol {self.name}: needs at least one task and one split")
        if self.episodes < 1:
            raise SuiteError(f"protocol {self.name}: episodes must be at least 1, got {self.episodes}")
        if self.base_seed < DEMO_SEEDS.stop:
            raise SuiteError(
                f"protocol {self.name}: base_seed {self.base_seed} overlaps the demonstration seeds "
                f"{DEMO_SEEDS.start}..{DEMO_SEEDS.stop - 1}"
            )
        if [t for t, _ in self.horizons] != list(self.tasks):
            raise SuiteError(f"protocol {self.name}: horizons must list the tasks in order")
        if self.n_action_steps is not None and self.n_action_steps < 1:
            raise SuiteError(f"protocol {self.name}: n_action_steps must be None or at least 1")

    @property
    def label(self) -> str:
        """The protocol as "NAME vVERSION", e.g. "vlagym-10 v1"."""
        return f"{self.name} v{self.version}"

    def seeds(self, episodes: int | None = None) -> list[int]:
        """The seeds of every task and split: base_seed + i for i < episodes (the protocol's by default)."""
        n = self.episodes if episodes is None else episodes
        return [self.base_seed + i for i in range(n)]

    def horizon(self, task: str) -> int:
        return dict(self.horizons)[task]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: tuples become lists, horizons a {task: steps} object."""
        d = dataclasses.asdict(self)
        d["tasks"], d["splits"] = list(self.tasks), list(self.splits)
        d["horizons"] = dict(self.horizons)
        d["seed_rule"] = f"episode i of every task and split uses seed {self.base_seed} + i"
        return d

    def check_registered(self) -> None:
        """`SuiteError` when a task's registered step limit differs from the protocol's horizon."""
        for task, steps in self.horizons:
            registered = gym.spec(task).max_episode_steps
            if registered != steps:
                raise SuiteError(
                    f"{self.label} runs {task} for {steps} steps but it is registered with max_episode_steps="
                    f"{registered}: the protocol needs a new version"
                )


def _horizons(tasks: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    return tuple((t, _HORIZONS[t]) for t in tasks)


#: the step limits the version-1 protocols were published with (`check_registered` keeps them honest)
_HORIZONS = {
    "VLA-PickCup-v0": 100,
    "VLA-PickObject-v0": 100,
    "VLA-PlaceCupOnPlate-v0": 150,
    "VLA-PlaceCupInBowl-v0": 150,
    "VLA-PushCube-v0": 150,
    "VLA-StackBlocks-v0": 150,
    "VLA-PressButton-v0": 80,
    "VLA-OpenDrawer-v0": 120,
    "VLA-CloseDrawer-v0": 120,
    "VLA-PutCupInDrawer-v0": 250,
}
_BASE_SEED = 5_000_000
_PICK = ("VLA-PickCup-v0",)
_TEN = tuple(_HORIZONS)

SUITES: dict[str, SuiteProtocol] = {
    p.name: p
    for p in (
        SuiteProtocol(
            name="vlagym-pick",
            version="1",
            description="picking the named cup: train layouts, held-out wordings, unseen colour x kind, more "
            "distractors",
            tasks=_PICK,
            splits=("train", "heldout_paraphrase", "unseen_combo", "distractors"),
            episodes=50,
            base_seed=_BASE_SEED,
            horizons=_horizons(_PICK),
        ),
        SuiteProtocol(
            name="vlagym-10",
            version="1",
            description="the ten single tasks (MultiTask excluded) on every generalization split",
            tasks=_TEN,
            splits=SPLITS,
            episodes=50,
            base_seed=_BASE_SEED,
            horizons=_horizons(_TEN),
        ),
    )
}


def list_suites() -> list[str]:
    """Names of the benchmark suites."""
    return sorted(SUITES)


def get_suite(name: str) -> SuiteProtocol:
    """The protocol named `name`; `SuiteError` with the known names (and a close match) otherwise."""
    if name in SUITES:
        return SUITES[name]
    hint = difflib.get_close_matches(name, list(SUITES), n=1)
    did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
    raise SuiteError(f"unknown suite {name!r}{did_you_mean}; known suites: {', '.join(list_suites())}")


def format_protocol(protocol: SuiteProtocol) -> str:
    """A readable description of every field of `protocol` (what `vlagym bench-suite show` prints)."""
    n_cells = len(protocol.tasks) * len(protocol.splits)
    chunks = "the checkpoint's own n_action_steps" if protocol.n_action_steps is None else protocol.n_action_steps
    lines = [
        f"{protocol.label}: {protocol.description}",
        f"tasks ({len(protocol.tasks)}):",
        *(f"  {task}  horizon {steps} steps" for task, steps in protocol.horizons),
        f"splits ({len(protocol.splits)}): {', '.join(protocol.splits)}",
        f"episodes: {protocol.episodes} per task and split ({protocol.episodes * n_cells} in all)",
        f"seeds: episode i uses seed {protocol.base_seed} + i ({protocol.base_seed}.."
        f"{protocol.base_seed + protocol.episodes - 1}), the same for every task and split",
        f"success definition: {protocol.success_definition}",
        f"chunk execution: {chunks}",
        "suite average: mean over tasks of the task's mean success over splits; 95% bootstrap interval "
        "(tasks, then episodes within each task's splits)",
    ]
    return "\n".join(lines)
