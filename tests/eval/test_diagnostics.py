"""Failure taxonomy (synthetic records and real short runs), language-control summaries, the heatmap."""

from __future__ import annotations

import numpy as np
import pytest

from vlagym.eval.diagnostics import (
    OUTCOMES,
    REACH_TOLERANCE,
    applicable_outcomes,
    classify,
    outcome_counts,
    summarize_controls,
    supports_language_controls,
    write_heatmap,
)
from vlagym.eval.rollout import EpisodeRecord, VectorExpert, make_rollout_envs, run_episodes

PICK = "VLA-PickCup-v0"
NEAR, FAR = REACH_TOLERANCE / 2, 4 * REACH_TOLERANCE


def record(task=PICK, success=False, grasped=None, at_end=None, wrong=None, reach=None, unstable=False):
    return EpisodeRecord(
        seed=0,
        task=task,
        instruction="",
        success=success,
        success_at_end=success,
        length=10,
        episode_return=0.0,
        ever_grasped=grasped,
        grasped_at_end=at_end,
        wrong_object=wrong,
        min_reach_distance=reach,
        sim_unstable=unstable,
    )


@pytest.mark.parametrize(
    ("rec", "expected"),
    [
        (record(success=True, grasped=True, at_end=True, wrong=True, reach=NEAR), "success"),
        (record(grasped=True, at_end=True, wrong=False, reach=NEAR, unstable=True), "sim_unstable"),
        (record(grasped=False, at_end=False, wrong=True, reach=FAR), "wrong_object"),
        (record(grasped=False, at_end=False, wrong=False, reach=FAR), "never_reached"),
        (record(grasped=False, at_end=False, wrong=False, reach=NEAR), "failed_grasp"),
        (record(grasped=True, at_end=False, wrong=False, reach=NEAR), "dropped"),
        (record(grasped=True, at_end=True, wrong=False, reach=NEAR), "timeout"),
        # a grasp from beyond the tolerance (a large object) still counts as reached
        (record(grasped=True, at_end=True, wrong=False, reach=FAR), "timeout"),
        # tasks without a grasp: reached but unfinished is a timeout, never a failed grasp
        (record(task="VLA-PushCube-v0", grasped=False, at_end=False, wrong=False, reach=NEAR), "timeout"),
        (record(task="VLA-PressButton-v0", wrong=True, reach=NEAR), "wrong_object"),
        (record(task="VLA-CloseDrawer-v0", reach=FAR), "never_reached"),
        # StackBlocks has no wrong-object predicate: the flag is ignored
        (record(task="VLA-StackBlocks-v0", grasped=True, at_end=False, wrong=True, reach=NEAR), "dropped"),
        # a task the table does not know: success or timeout only
        (record(task="VLA-Unknown-v0", grasped=False, at_end=False, wrong=True, reach=FAR), "timeout"),
        # no information at all
        (record(), "timeout"),
    ],
)
def test_classify_synthetic_records(rec, expected):
    assert classify(rec) == expected
    assert expected in applicable_outcomes(rec.task)


def test_applicable_outcomes_and_counts():
    assert applicable_outcomes(PICK) == OUTCOMES
    assert "failed_grasp" not in applicable_outcomes("VLA-PushCube-v0")
    assert "wrong_object" not in applicable_outcomes("VLA-StackBlocks-v0")
    counts = outcome_counts(["timeout", "success", "success"])
    assert list(counts) == list(OUTCOMES) and counts["success"] == 2 and counts["timeout"] == 1
    assert sum(counts.values()) == 3


def test_language_control_support_is_read_from_the_env_class():
    assert supports_language_controls(PICK) and supports_language_controls("VLA-PickObject-v0")
    assert not supports_language_controls("VLA-PushCube-v0")
    assert not supports_language_controls("VLA-NoSuchTask-v0")
    assert not supports_language_controls("VLA-MultiTask-v0")


# ---------------------------------------------------------------------------- real runs
class Scripted:
    """The expert, with a twist: "open" never closes the gripper, "drop" opens it and rises once the cup is held."""

    def __init__(self, envs, twist: str):
        self.envs, self.twist, self.expert = envs, twist, VectorExpert(envs)
        self.held = np.zeros(envs.num_envs, bool)

    def reset(self, mask):
        self.expert.reset(mask)
        self.held[mask] = False

    def __call__(self, obs):
        if self.twist == "still":
            return np.zeros((self.envs.num_envs, 7), np.float32)
        actions = self.expert(obs)
        if self.twist == "drop":
            self.held |= [env.unwrapped.evaluate()["grasped"] for env in self.envs.envs]
            actions[self.held] = 0.0
            actions[self.held, 2] = 1.0  # up, out of reach of a cup that tilted against a pad
            actions[self.held, -1] = -1.0
        else:  # open
            actions[:, -1] = -1.0
        return actions


@pytest.mark.parametrize(
    ("twist", "expected"),
    [(None, "success"), ("still", "never_reached"), ("open", "failed_grasp"), ("drop", "dropped")],
)
def test_classify_real_pickcup_runs(twist, expected):
    envs = make_rollout_envs(PICK, 1, "sync", obs_mode="state", num_cups=1)
    try:
        policy = VectorExpert(envs) if twist is None else Scripted(envs, twist)
        records = run_episodes(envs, policy, [7, 8], on_episode_start=policy.reset, progress=False)
    finally:
        envs.close()
    assert [r.outcome for r in records] == [expected, expected]
    r = records[0]
    assert r.ever_grasped is (expected in ("success", "dropped")) and r.wrong_object is False
    assert r.min_reach_distance is not None and (r.min_reach_distance > REACH_TOLERANCE) == (
        expected == "never_reached"
    )


def test_swapped_target_run_records_the_swapped_instruction():
    """The expert reads privileged state, so it follows a swapped target: success counts for the object named."""
    envs = make_rollout_envs(PICK, 2, "sync", obs_mode="state", num_cups=3)
    try:
        expert = VectorExpert(envs)
        plain = run_episodes(envs, expert, [1, 2, 3], on_episode_start=expert.reset, progress=False)
        swapped = run_episodes(
            envs, expert, [1, 2, 3], on_episode_start=expert.reset, progress=False, reset_options={"swap_target": True}
        )
    finally:
        envs.close()
    assert all(r.success for r in plain + swapped)
    assert all(a.instruction != b.instruction for a, b in zip(plain, swapped, strict=True))


# ---------------------------------------------------------------------------- language controls
def test_control_interpretations():
    n = 30
    reads = summarize_controls({"correct": [True] * n, "empty": [True] * 10 + [False] * 20, "swapped": [True] * n})
    assert reads["interpretation"].startswith("The policy reads the instruction")
    assert reads["rates"]["empty"]["success_rate"] == pytest.approx(1 / 3)
    layout = summarize_controls({"correct": [True] * n, "empty": [True] * n, "swapped": [False] * n})
    assert "does not appear to read" in layout["interpretation"]
    privileged = summarize_controls({c: [True] * n for c in ("correct", "empty", "swapped")})
    assert "even without an instruction" in privileged["interpretation"]
    small = summarize_controls({c: [True, False] for c in ("correct", "empty", "swapped")})
    assert small["interpretation"].startswith("No clear evidence")
    for s in (reads, layout, privileged, small):
        lo, hi = s["rates"]["correct"]["ci95"]
        assert 0.0 <= lo <= s["rates"]["correct"]["success_rate"] <= hi <= 1.0


# ---------------------------------------------------------------------------- heatmap
def test_heatmap_png_is_written(tmp_path):
    results = {
        "VLA-PickCup-v0": {"train": {"success_rate": 1.0}, "lighting": {"success_rate": 0.25}},
        "VLA-PushCube-v0": {"train": {"success_rate": 0.5}},  # a missing cell is drawn blank
    }
    path = write_heatmap(tmp_path / "heatmap.png", results, ["train", "lighting"], title="t")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 2000
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no temp file left
