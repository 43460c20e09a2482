"""`ScriptedExpert.recover`: the expert follows the scene when another policy acts (DAgger labels)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import vlagym


def run_expert(task: str, seed: int, recover: bool, open_in: str | None = None, open_steps: int = 3):
    """Run the expert; from the first step it is in phase `open_in`, open the gripper for `open_steps` steps
    instead of its own command (a policy letting go). Returns (success, executed actions, phases)."""
    env = gym.make(task)
    try:
        obs, _ = env.reset(seed=seed)
        expert = vlagym.make_expert(env)
        expert.recover = recover
        actions, phases, opened = [], [], 0
        while True:
            action = expert(obs)
            phases.append(expert.phase)
            if open_in is not None and (expert.phase == open_in or opened) and opened < open_steps:
                action = action.copy()
                action[-1] = -1.0
                opened += 1
            actions.append(action)
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                return bool(info["success"]), np.stack(actions), phases
    finally:
        env.close()


@pytest.mark.parametrize("task", ["VLA-PickCup-v0", "VLA-PlaceCupOnPlate-v0"])
def test_recovering_expert_acts_as_the_plain_one_when_nothing_goes_wrong(task):
    ok_plain, plain, _ = run_expert(task, 0, recover=False)
    ok_recover, recovering, _ = run_expert(task, 0, recover=True)
    assert ok_plain and ok_recover
    np.testing.assert_array_equal(plain, recovering)


def test_a_dropped_cup_is_picked_again_only_with_recover():
    # The cup is let go as it is lifted: the plain expert keeps "holding" an empty hand, the recovering one
    # goes back to the approach and picks it again.
    ok_plain, _, _ = run_expert("VLA-PickCup-v0", 0, recover=False, open_in="lift", open_steps=6)
    ok_recover, _, phases = run_expert("VLA-PickCup-v0", 0, recover=True, open_in="lift", open_steps=6)
    assert not ok_plain
    assert ok_recover
    first_lifted = phases.index("lift")
    assert "approach" in phases[first_lifted:]


def test_a_block_let_go_while_lifting_is_picked_again():
    ok_plain, _, _ = run_expert("VLA-StackBlocks-v0", 0, recover=False, open_in="lift")
    ok_recover, _, _ = run_expert("VLA-StackBlocks-v0", 0, recover=True, open_in="lift")
    assert not ok_plain
    assert ok_recover


def test_a_hand_taken_off_the_handle_goes_back_to_it():
    env = gym.make("VLA-OpenDrawer-v0")
    try:
        obs, _ = env.reset(seed=0)
        expert = vlagym.make_expert(env)
        expert.recover = True
        while expert.phase != "h_pull":
            obs, *_ = env.step(expert(obs))
        for _ in range(6):  # the acting policy lifts the open hand away from the bar
            obs, *_ = env.step(np.array([0, 0, 1, 0, 0, 0, -1], np.float32))
        action = expert(obs)
        assert expert.phase in ("h_approach", "h_descend")  # back to the bar (already above it: descending)
        assert action[-1] < 0  # open, not "pull" with an empty hand
    finally:
        env.close()


@pytest.mark.parametrize("task", ["VLA-PickCup-v0", "VLA-PlaceCupOnPlate-v0"])
def test_a_hold_far_from_the_grasp_point_is_lifted_at_a_chosen_yaw(task, monkeypatch):
    # A policy can catch the cup by its rim or handle before the expert chose its grasp yaw (within
    # `turn_distance`): the relabelled "lift" then chooses one instead of servoing to none.
    env = gym.make(task)
    try:
        obs, _ = env.reset(seed=0)
        expert = vlagym.make_expert(env)
        expert.recover = True
        monkeypatch.setattr(expert, "holding", lambda: True)
        action = expert(obs)
        assert expert.phase == "lift" and expert.yaw is not None and np.isfinite(action).all()
    finally:
        env.close()


def test_the_multitask_expert_passes_recover_on():
    env = gym.make("VLA-MultiTask-v0")
    try:
        obs, _ = env.reset(seed=0)
        expert = vlagym.make_expert(env)
        expert.recover = True
        expert(obs)
        assert expert.expert.recover
    finally:
        env.close()


def test_a_drawer_the_policy_opened_sends_the_expert_on_to_the_cup():
    import mujoco

    env = gym.make("VLA-PutCupInDrawer-v0")
    try:
        obs, _ = env.reset(seed=0)
        plain = vlagym.make_expert(env)
        while plain.phase != "transit":  # the drawer opened and the hand lifted off the bar (by "the policy")
            obs, *_ = env.step(plain(obs))
        fresh = vlagym.make_expert(env)  # still planning to open it
        fresh.recover = True
        fresh(obs)
        assert not fresh.phase.startswith("h_")
        base = env.unwrapped  # now shut it again before the cup is in: back to the handle
        base.data.qpos[base.slide_qpos] = 0.0
        mujoco.mj_forward(base.model, base.data)
        fresh(obs)
        assert fresh.phase.startswith("h_")
    finally:
        env.close()


def lay_down(env, degrees: float) -> None:
    """Tip the target object `degrees` about the world x axis where it stands (a policy knocked it over)."""
    import mujoco

    base = env.unwrapped
    a = base.target.qpos_adr
    half = np.deg2rad(degrees) / 2
    base.data.qpos[a + 3 : a + 7] = (np.cos(half), np.sin(half), 0.0, 0.0)
    base.data.qpos[a + 2] += 0.03
    mujoco.mj_forward(base.model, base.data)


@pytest.mark.parametrize(
    "task, degrees, hopeless",
    [
        ("VLA-PickCup-v0", 0, False),
        ("VLA-PickCup-v0", 30, False),  # tilted, not fallen: still graspable from above
        ("VLA-PickCup-v0", 90, True),
        ("VLA-PlaceCupInBowl-v0", 90, True),
        ("VLA-PutCupInDrawer-v0", 90, True),
        ("VLA-StackBlocks-v0", 90, False),  # a block lies on a face whichever way it falls
    ],
)
def test_the_expert_gives_up_on_a_cup_knocked_over(make_env, task, degrees, hopeless):
    env = make_env(task, obs_mode="state")
    env.reset(seed=0)
    expert = vlagym.make_expert(env)
    expert.recover = True
    assert not expert.hopeless()
    lay_down(env, degrees)
    assert expert.hopeless() is hopeless
