"""The Gymnasium API contract: spaces, observations, rendering, info keys."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import gymnasium as gym
import mujoco
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import vlagym

ENV_IDS = sorted(vlagym.TASKS)
OBS_MODES = ("state", "rgb", "rgb+state")

# Gymnasium warns about unbounded Box spaces; proprioception and object poses
# are genuinely unbounded, so these two (and nothing else) are tolerated.
TOLERATED_WARNINGS = (
    "Box observation space minimum value is -infinity",
    "Box observation space maximum value is infinity",
)


def _untolerated(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if not any(tolerated in str(w.message) for tolerated in TOLERATED_WARNINGS)
    ]


@pytest.mark.parametrize("obs_mode", OBS_MODES)
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env(env_id, obs_mode, make_env):
    env = make_env(env_id, obs_mode=obs_mode, image_size=32).unwrapped
    env.reset(seed=0)  # check_env's first reset() is unseeded; seed it so the test is reproducible
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert not _untolerated(caught), _untolerated(caught)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_tolerated_warnings_are_the_ones_gymnasium_emits(env_id, make_env):
    """Guard the allowlist: if Gymnasium rewords these warnings, the allowlist must follow."""
    env = make_env(env_id).unwrapped
    env.reset(seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    messages = " | ".join(str(w.message) for w in caught)
    for tolerated in TOLERATED_WARNINGS:
        assert tolerated in messages


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_check_env_state_mode(env_id, make_env):
    env = make_env(env_id, obs_mode="state").unwrapped
    env.reset(seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb3_check_env(env, warn=True)
    assert not _untolerated(caught), _untolerated(caught)


def test_human_render_without_display_raises(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    with pytest.raises(RuntimeError, match="display"):
        gym.make("VLA-PickCup-v0", render_mode="human")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_action_space(env_id, make_env):
    env = make_env(env_id)
    space = env.action_space
    assert isinstance(space, gym.spaces.Box)
    assert space.shape == (7,) and space.dtype == np.float32
    assert np.all(space.low == -1.0) and np.all(space.high == 1.0)


@pytest.mark.parametrize(
    ("image_size", "hw"),
    [(32, (32, 32)), ((24, 40), (24, 40)), ([40, 24], (40, 24))],
)
def test_rgb_observation_structure(image_size, hw, make_env):
    env = make_env(obs_mode="rgb", image_size=image_size)
    obs, info = env.reset(seed=0)
    assert set(obs) == {"images", "proprio", "instruction"}
    assert set(obs["images"]) == {"front", "wrist"}
    for cam, img in obs["images"].items():
        assert img.dtype == np.uint8, cam
        assert img.shape == (*hw, 3), cam
        assert img.std() > 1.0, f"{cam} image is (nearly) constant: nothing rendered"
    assert not np.array_equal(obs["images"]["front"], obs["images"]["wrist"])
    assert obs["proprio"].dtype == np.float32
    assert obs["proprio"].shape == env.observation_space["proprio"].shape
    assert isinstance(obs["instruction"], str)
    assert env.observation_space["instruction"].contains(obs["instruction"])
    assert obs["instruction"] == info["instruction"]
    assert env.observation_space.contains(obs)


@pytest.mark.parametrize("cameras", [("side",), ("wrist", "front", "side"), "front"])
def test_images_keyed_by_cameras_kwarg(cameras, make_env):
    env = make_env(obs_mode="rgb", image_size=16, cameras=cameras)
    expected = {cameras} if isinstance(cameras, str) else set(cameras)
    assert set(env.observation_space["images"].spaces) == expected
    obs, _ = env.reset(seed=1)
    assert set(obs["images"]) == expected
    obs, *_ = env.step(env.action_space.sample())
    assert set(obs["images"]) == expected
    assert env.observation_space.contains(obs)


def test_rgb_state_mode_adds_state(make_env):
    env = make_env(obs_mode="rgb+state", image_size=16)
    state_env = make_env(obs_mode="state")
    obs, _ = env.reset(seed=3)
    state_obs, _ = state_env.reset(seed=3)
    assert set(obs) == {"images", "proprio", "instruction", "state"}
    assert obs["state"].dtype == np.float32
    np.testing.assert_array_equal(obs["state"], state_obs)
    assert env.observation_space.contains(obs)


def test_state_mode_observation(make_env):
    env = make_env(obs_mode="state")
    obs, info = env.reset(seed=0)
    assert isinstance(env.observation_space, gym.spaces.Box)
    assert obs.dtype == np.float32 and obs.shape == env.observation_space.shape
    assert env.observation_space.contains(obs)
    for _ in range(5):
        obs, *_ = env.step(env.action_space.sample())
        assert obs.dtype == np.float32
        assert env.observation_space.contains(obs)
        assert np.isfinite(obs).all()


def test_rgb_array_render(make_env):
    env = make_env(render_mode="rgb_array", render_size=(40, 56))
    env.reset(seed=0)
    frame = env.render()
    assert isinstance(frame, np.ndarray)
    assert frame.dtype == np.uint8 and frame.shape == (40, 56, 3)
    assert frame.std() > 1.0


def test_render_without_render_mode_returns_none(make_env):
    env = make_env()
    env.reset(seed=0)
    assert env.render() is None


def test_model_and_data_are_mujoco_objects(make_env):
    env = make_env()
    env.reset(seed=0)
    assert isinstance(env.unwrapped.model, mujoco.MjModel)
    assert isinstance(env.unwrapped.data, mujoco.MjData)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_info_has_success_flags_every_step(env_id, make_env):
    env = make_env(env_id)
    _, info = env.reset(seed=0)
    infos = [info]
    rng = np.random.default_rng(0)
    for _ in range(10):
        *_, info = env.step(rng.uniform(-1, 1, 7).astype(np.float32))
        infos.append(info)
    for info in infos:
        assert type(info["success"]) is bool
        assert type(info["is_success"]) is bool
        assert info["success"] == info["is_success"]
        assert type(info["sim_unstable"]) is bool


def test_close_is_idempotent(make_env):
    env = make_env(obs_mode="rgb", image_size=16, render_mode="rgb_array", render_size=(16, 16))
    env.reset(seed=0)
    env.render()
    env.close()
    env.close()


def test_rgb_renders_when_mujoco_is_imported_before_vlagym():
    """`import mujoco` sorts before `import vlagym`. On MuJoCo 4 headless rendering
    must still work; MuJoCo 3 cannot switch backends after import, so there the
    render must fail with an error naming the fix, twice, without killing the process."""
    code = textwrap.dedent(
        """
        import mujoco
        import gymnasium as gym
        import vlagym

        env = gym.make("VLA-PickCup-v0", obs_mode="rgb", image_size=16)
        if int(mujoco.__version__.split(".")[0]) >= 4:
            obs, _ = env.reset(seed=0)
            assert obs["images"]["front"].std() > 1.0
        else:
            for _ in range(2):
                try:
                    env.reset(seed=0)
                except RuntimeError as err:
                    assert "MUJOCO_GL=egl" in str(err), err
                else:
                    raise AssertionError("rendering through GLFW without a display should fail")
        env.close()
        print("OK")
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("OK")
