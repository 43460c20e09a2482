"""Bad input gets a clear error; never a silent corruption or a hang."""

from __future__ import annotations

import logging
import re

import gymnasium as gym
import numpy as np
import pytest

import vlagym

ENV_IDS = sorted(vlagym.TASKS)


# ---------------------------------------------------------------------------- actions


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("bad_value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("indices", [[0], [3], [2, 5], [6]])
def test_non_finite_action_raises_naming_indices(env_id, bad_value, indices, make_env):
    env = make_env(env_id)
    env.reset(seed=0)
    data = env.unwrapped.data
    qpos, time = data.qpos.copy(), data.time
    action = np.zeros(7, np.float32)
    action[indices] = bad_value
    with pytest.raises(ValueError) as excinfo:
        env.step(action)
    named = {int(n) for n in re.findall(r"\b\d+\b", str(excinfo.value))}
    assert set(indices) <= named, f"message does not name indices {indices}: {excinfo.value}"
    assert not named & ({0, 1, 2, 3, 4, 5, 6} - set(indices)), f"message names good entries: {excinfo.value}"
    # Nothing was simulated.
    assert data.time == time
    np.testing.assert_array_equal(data.qpos, qpos)


def test_non_finite_action_as_list_raises(make_env):
    env = make_env()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="4"):
        env.step([0.0, 0.0, 0.0, 0.0, float("nan"), 0.0, 0.0])


@pytest.mark.parametrize("shape", [(6,), (2, 7), (8,), (), (7, 1)])
def test_wrong_action_shape_raises(shape, make_env):
    env = make_env()
    env.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(shape, np.float32))


@pytest.mark.parametrize(
    "action",
    [np.full(7, 5.0), np.full(7, -5.0), np.array([5.0, -3.0, 1.5, -1.01, 0.3, 100.0, -7.0])],
    ids=["all+5", "all-5", "mixed"],
)
def test_out_of_range_action_behaves_like_clipped(action, make_env):
    env_raw, env_clip = make_env(), make_env()
    obs_raw, _ = env_raw.reset(seed=4)
    obs_clip, _ = env_clip.reset(seed=4)
    start = obs_raw.copy()
    for _ in range(5):
        obs_raw, r_raw, *_ = env_raw.step(action.astype(np.float32))
        obs_clip, r_clip, *_ = env_clip.step(np.clip(action, -1, 1).astype(np.float32))
        assert np.array_equal(obs_raw, obs_clip)
        assert r_raw == r_clip
    assert not np.array_equal(start, obs_raw), "the action did nothing, so the comparison proves nothing"


# ---------------------------------------------------------------------------- instability


def _break_velocities(data):
    data.qvel[:] = 1e12


def _break_positions(data):
    data.qpos[:] = np.nan


def test_the_divergence_warnings_read_after_each_step_are_exactly_mujocos_three():
    import mujoco

    from vlagym.envs.base import _BAD_WARNINGS

    read = set(range(len(mujoco.mjtWarning.__members__))[_BAD_WARNINGS])
    w = mujoco.mjtWarning
    assert read == {int(w.mjWARN_BADQPOS), int(w.mjWARN_BADQVEL), int(w.mjWARN_BADQACC)}


@pytest.mark.parametrize("warning", ["mjWARN_BADQPOS", "mjWARN_BADQVEL", "mjWARN_BADQACC"])
def test_each_divergence_warning_ends_the_episode(warning, make_env, caplog):
    import mujoco

    env = make_env("VLA-PickCup-v0")
    env.reset(seed=0)
    env.unwrapped.data.warning[getattr(mujoco.mjtWarning, warning)].number = 1  # what MuJoCo does on divergence
    with caplog.at_level(logging.WARNING, logger="vlagym"):
        *_, truncated, info = env.step(np.zeros(7, np.float32))
    assert truncated is True and info["sim_unstable"] is True


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("corrupt", [_break_velocities, _break_positions], ids=["qvel=1e12", "qpos=nan"])
def test_unstable_sim_truncates_and_reset_recovers(env_id, corrupt, make_env, in_tmp_dir, caplog):
    env = make_env(env_id)
    env.reset(seed=9)
    corrupt(env.unwrapped.data)
    with caplog.at_level(logging.WARNING, logger="vlagym"):
        _, _, terminated, truncated, info = env.step(np.zeros(7, np.float32))
    assert truncated is True
    assert info["sim_unstable"] is True
    assert terminated is False and info["success"] is False
    assert any(r.levelno >= logging.WARNING and r.name.startswith("vlagym") for r in caplog.records)

    # reset recovers, and to exactly the state a fresh env reaches from that seed
    obs, info = env.reset(seed=9)
    assert info["sim_unstable"] is False
    fresh = make_env(env_id)
    fresh_obs, _ = fresh.reset(seed=9)
    assert np.array_equal(obs, fresh_obs)
    action = np.full(7, 0.3, np.float32)
    obs, _, terminated, truncated, info = env.step(action)
    fresh_obs, *_ = fresh.step(action)
    assert truncated is False and info["sim_unstable"] is False
    assert np.isfinite(obs).all()
    assert np.array_equal(obs, fresh_obs)


# ---------------------------------------------------------------------------- constructor kwargs


def test_misspelt_obs_mode_lists_choices():
    with pytest.raises(ValueError, match="obs_mode") as excinfo:
        gym.make("VLA-PickCup-v0", obs_mode="rbg")
    message = str(excinfo.value)
    for choice in ("rgb", "state", "rgb+state"):
        assert choice in message


def test_misspelt_kwarg_name_suggests_the_right_one():
    # The env raises TypeError (as Python does for unknown keywords); gym.make
    # re-raises it as TypeError with the env id appended.
    with pytest.raises(TypeError, match="obs_mode") as excinfo:
        gym.make("VLA-PickCup-v0", obs_mod="rgb")
    assert "obs_mod'" in str(excinfo.value)


@pytest.mark.parametrize(
    ("kwargs", "must_mention"),
    [
        ({"cameras": ("front", "wirst")}, ["wirst", "wrist", "front"]),
        ({"cameras": ()}, ["front"]),
        ({"cameras": ("front", "front")}, ["front"]),
        ({"instruction_split": "test"}, ["train", "heldout"]),
        ({"reward_mode": "dens"}, ["dense", "sparse"]),
        ({"control_mode": "joint_pos"}, ["ee_delta_pose", "joint_delta_pos"]),
        pytest.param(
            {"render_mode": "rgb"},
            ["rgb_array"],
            marks=pytest.mark.filterwarnings("ignore:.*render_mode='rgb' that is not in the possible"),
        ),
        ({"image_size": 0}, ["image_size"]),
        ({"image_size": -32}, ["image_size"]),
        ({"image_size": (0, 32)}, ["image_size"]),
        ({"image_size": (32,)}, ["image_size"]),
        ({"render_size": (-1, 64)}, ["render_size"]),
        ({"control_freq": 7}, ["control_freq"]),
        ({"control_freq": 0}, ["control_freq"]),
        ({"control_freq": -20}, ["control_freq"]),
        ({"reward_weights": {"reech": 1.0}}, ["reech", "reach"]),
        ({"reward_weights": {"reach": -0.5}}, ["reach"]),
        ({"reward_weights": {"reach": float("nan")}}, ["reach"]),
        ({"reward_weights": {"reach": 0.0, "grasp": 0.0, "lift": 0.0}}, ["zero"]),
    ],
)
def test_bad_kwargs_raise_value_error(kwargs, must_mention):
    with pytest.raises(ValueError) as excinfo:
        gym.make("VLA-PickCup-v0", **kwargs)
    message = str(excinfo.value)
    for word in must_mention:
        assert word in message, f"{word!r} not in {message!r}"


def test_valid_reward_weights_are_used(make_env):
    env = make_env(reward_weights={"reach": 0.0, "grasp": 1.0, "lift": 1.0})
    weights = env.unwrapped.reward_weights
    assert weights["reach"] == 0.0
    assert weights["grasp"] == pytest.approx(weights["lift"])
    assert sum(weights.values()) == pytest.approx(1.0)
