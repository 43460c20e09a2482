"""What a collection episode leaves behind: the recorded episode, the outcome of its replays, and the gripper
facts the filters read (where and when it first closed, how often it opened again)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vlagym.envs.robot import PROPRIO_EE_POS


@dataclass
class RolloutEpisode:
    """A recorded episode, the demos layout's arrays (a dataclass, not a dict: vector envs would split a dict)."""

    seed: int
    instruction: str
    task: str
    images: dict[str, np.ndarray]
    """camera -> (T, H, W, 3) uint8: the observation each action was chosen on"""
    proprio: np.ndarray
    state: np.ndarray
    """(T, D) float32 privileged state (`VLAEnv.state_vector`)"""
    states: np.ndarray
    """(T, S) the simulator states (`VLAEnv.sim_state`), which replay the episode exactly"""
    actions: np.ndarray
    rewards: np.ndarray
    target_xy: tuple[float, float] | None = None
    """a hindsight replay's: where the target was moved (`reset(options={"target_xy": ...})`); None otherwise"""
    close_delay: int = 0
    """a delayed-close replay's: the steps its first close was put off"""
    close_distance: float | None = None
    """the task's reach distance (grasp site to reach point, metres) when the gripper was first commanded to
    close; None when it never closed or the task reports none"""


@dataclass
class Replay:
    """What the hindsight (or delayed-close) replays of one failed episode gave.

    `episode` is the replay that succeeded (None when none did or none ran), `steps` the env steps simulated,
    `skipped` why none ran ("no_close", "at_target", "layout", "at_start"; "" when one ran), and
    `close_delay` the delay of the delayed-close replay that succeeded."""

    seed: int
    episode: RolloutEpisode | None
    steps: int
    skipped: str
    close_delay: int = 0

    def order(self) -> tuple:
        """A key that sorts the replays of one seed by their content (not by which sub-env finished first)."""
        e = self.episode
        return (self.skipped, self.steps, self.close_delay, e is None, b"" if e is None else e.actions.tobytes())


def first_close(actions: np.ndarray) -> int | None:
    """The step of an episode's first closing command (gripper entry >= 0); None when the gripper never closed."""
    closing = np.flatnonzero(np.asarray(actions)[:, -1] >= 0)
    return int(closing[0]) if len(closing) else None


def close_point(actions: np.ndarray, proprio: np.ndarray) -> np.ndarray | None:
    """Where the gripper first closed: the grasp site's position when the first closing command was issued;
    None when the gripper never closed."""
    t = first_close(actions)
    return None if t is None else np.asarray(proprio)[t, PROPRIO_EE_POS].astype(np.float64)


def gripper_reopens(actions: np.ndarray) -> int:
    """How often the gripper command (the last entry of each action: -1 open ... +1 closed) goes from closed
    (>= 0, the threshold of the VLA's binary gripper) to open (< 0) in an episode's executed actions."""
    closed = np.asarray(actions)[:, -1] >= 0
    return int(np.count_nonzero(closed[:-1] & ~closed[1:]))


def without_reopens(successes: list[RolloutEpisode], max_reopens: int | None) -> list[RolloutEpisode]:
    """The successes whose gripper re-opened at most `max_reopens` times (all of them when None)."""
    if max_reopens is None:
        return successes
    return [e for e in successes if gripper_reopens(e.actions) <= max_reopens]


def near_closes(successes: list[RolloutEpisode], max_distance: float | None) -> list[RolloutEpisode]:
    """The successes whose first close was at most `max_distance` from the reach point, and those with no close
    distance (all of them when None)."""
    if max_distance is None:
        return successes
    return [e for e in successes if e.close_distance is None or e.close_distance <= max_distance]
