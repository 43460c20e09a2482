"""`reset(seed=...)` fully determines an episode: bit-identical observations, sync or async."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import vlagym

ENV_IDS = sorted(vlagym.TASKS)
N_STEPS = 20
HERE = Path(__file__).resolve().parent


def flatten_obs(obs, prefix: str = "") -> dict:
    """Nested observation -> {"images/front": array, ..., "instruction": str or tuple}."""
    if isinstance(obs, dict):
        out = {}
        for key, value in obs.items():
            out.update(flatten_obs(value, f"{prefix}{key}/"))
        return out
    return {prefix.rstrip("/") or "obs": obs}


def assert_obs_equal(a: dict, b: dict, where: str) -> None:
    assert a.keys() == b.keys(), where
    for key in a:
        if isinstance(a[key], np.ndarray):
            assert a[key].dtype == b[key].dtype, f"{where}: {key} dtype"
            assert np.array_equal(a[key], b[key]), f"{where}: {key} differs"
        else:
            assert a[key] == b[key], f"{where}: {key}: {a[key]!r} != {b[key]!r}"


def single_rollout(env: gym.Env, seed: int, actions: np.ndarray) -> list[dict]:
    obs, _ = env.reset(seed=seed)
    trajectory = [flatten_obs(obs)]
    for action in actions:
        obs, *_ = env.step(action)
        trajectory.append(flatten_obs(obs))
    return trajectory


def vec_rollout(env_id: str, mode: str, obs_mode: str, seeds: list[int], n_steps: int) -> list[dict]:
    """Observations of a `gym.make_vec` rollout with fixed actions (also run in a subprocess)."""
    actions = np.random.default_rng(123).uniform(-1, 1, (n_steps, len(seeds), 7)).astype(np.float32)
    envs = gym.make_vec(env_id, num_envs=len(seeds), vectorization_mode=mode, obs_mode=obs_mode, image_size=32)
    try:
        obs, _ = envs.reset(seed=seeds)
        trajectory = [flatten_obs(obs)]
        for action in actions:
            obs, *_ = envs.step(action)
            trajectory.append(flatten_obs(obs))
    finally:
        envs.close()
    # Arrays are copied out of (possibly shared) buffers; text becomes lists for JSON.
    return [
        {k: (np.array(v) if isinstance(v, np.ndarray) else list(v)) for k, v in step.items()} for step in trajectory
    ]


def run_isolated(code: str, timeout: float) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter; on timeout kill its whole process group (vector workers too)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"subprocess hung for more than {timeout} s; stderr tail:\n{err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def async_rollout_in_subprocess(tmp_path, env_id: str, obs_mode: str, seeds: list[int], n_steps: int) -> list[dict]:
    """An async rollout in a fresh interpreter.

    AsyncVectorEnv forks; a process that has already rendered (as this test
    process has) holds a software-GL state that forked children cannot use,
    so the async side runs where nothing has rendered yet. (That hazard has
    its own test below.)
    """
    out = tmp_path / "async"
    code = textwrap.dedent(
        f"""
        import json, sys
        import numpy as np
        sys.path.insert(0, {str(HERE)!r})
        from test_determinism import vec_rollout

        traj = vec_rollout({env_id!r}, "async", {obs_mode!r}, {seeds!r}, {n_steps})
        arrays, texts = {{}}, {{}}
        for t, step in enumerate(traj):
            for k, v in step.items():
                (arrays if isinstance(v, np.ndarray) else texts)[f"{{t}}|{{k}}"] = v
        np.savez({str(out) + ".npz"!r}, **arrays)
        with open({str(out) + ".json"!r}, "w") as f:
            json.dump(texts, f)
        """
    )
    result = run_isolated(code, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    trajectory: list[dict] = [{} for _ in range(n_steps + 1)]
    with np.load(str(out) + ".npz") as arrays:
        for name in arrays.files:
            t, key = name.split("|")
            trajectory[int(t)][key] = arrays[name]
    for name, value in json.loads((tmp_path / "async.json").read_text()).items():
        t, key = name.split("|")
        trajectory[int(t)][key] = value
    return trajectory


# ---------------------------------------------------------------------------- single env


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_actions_bit_identical(env_id, make_env):
    actions = np.random.default_rng(0).uniform(-1, 1, (N_STEPS, 7)).astype(np.float32)
    env_a = make_env(env_id, obs_mode="rgb+state", image_size=32)
    env_b = make_env(env_id, obs_mode="rgb+state", image_size=32)
    first = single_rollout(env_a, 7, actions)
    second = single_rollout(env_b, 7, actions)  # a second env in the same process
    third = single_rollout(env_a, 7, actions)  # the same env, reset again after an episode
    for t in range(N_STEPS + 1):
        assert_obs_equal(first[t], second[t], f"fresh env, step {t}")
        assert_obs_equal(first[t], third[t], f"reused env, step {t}")
    # The rollout actually moved something, so the comparison had something to catch.
    assert not np.array_equal(first[0]["state"], first[-1]["state"])
    assert not np.array_equal(first[0]["images/front"], first[-1]["images/front"])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_expert_rollouts_bit_identical(env_id, make_env):
    """Contacts and grasps (where chaos lives) reproduce exactly too."""
    env = make_env(env_id, obs_mode="state")
    expert = vlagym.make_expert(env)
    runs = []
    for _ in range(2):
        obs, _ = env.reset(seed=11)
        expert.reset()
        states, actions = [obs], []
        for _ in range(40):
            action = expert(obs)
            obs, *_ = env.step(action)
            states.append(obs)
            actions.append(action)
        runs.append((np.stack(states), np.stack(actions)))
    assert np.array_equal(runs[0][0], runs[1][0])
    assert np.array_equal(runs[0][1], runs[1][1])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_different_seeds_differ(env_id, make_env):
    env = make_env(env_id, obs_mode="rgb+state", image_size=32)
    obs0, _ = env.reset(seed=0)
    obs1, _ = env.reset(seed=1)
    assert not np.array_equal(obs0["state"], obs1["state"])
    assert not np.array_equal(obs0["images"]["front"], obs1["images"]["front"])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_unseeded_resets_continue_the_seeded_stream(env_id, make_env):
    """reset(seed=s), reset(), reset() is reproducible, and the unseeded episodes are new ones."""
    sequences = []
    for _ in range(2):
        env = make_env(env_id)
        sequences.append([env.reset(seed=5)[0], env.reset()[0], env.reset()[0]])
    for a, b in zip(*sequences, strict=True):
        assert np.array_equal(a, b)
    first, second, third = sequences[0]
    assert not np.array_equal(first, second) and not np.array_equal(second, third)


# ---------------------------------------------------------------------------- vector envs


@pytest.mark.parametrize("obs_mode", ["state", "rgb"])
def test_sync_vector_env_matches_single_envs(obs_mode, make_env):
    seeds = [3, 4]
    vec = vec_rollout("VLA-PickCup-v0", "sync", obs_mode, seeds, n_steps=5)
    actions = np.random.default_rng(123).uniform(-1, 1, (5, len(seeds), 7)).astype(np.float32)
    for i, seed in enumerate(seeds):
        single = single_rollout(make_env(obs_mode=obs_mode, image_size=32), seed, actions[:, i])
        for t, step in enumerate(single):
            sliced = {k: v[i] for k, v in vec[t].items()}
            assert_obs_equal(step, sliced, f"env {i}, step {t}")


@pytest.mark.parametrize("obs_mode", ["state", "rgb"])
def test_sync_and_async_arrays_bit_identical(obs_mode, tmp_path):
    seeds, n_steps = [21, 22], 8
    sync = vec_rollout("VLA-PickCup-v0", "sync", obs_mode, seeds, n_steps)
    async_ = async_rollout_in_subprocess(tmp_path, "VLA-PickCup-v0", obs_mode, seeds, n_steps)
    for t in range(n_steps + 1):
        arrays = {k for k, v in sync[t].items() if isinstance(v, np.ndarray)}
        assert arrays, "no arrays compared"
        for key in arrays:
            assert sync[t][key].shape == async_[t][key].shape, f"step {t}: {key} shape"
            assert np.array_equal(sync[t][key], async_[t][key]), f"step {t}: {key} differs between sync and async"


def test_sync_and_async_instructions_equal(tmp_path):
    seeds, n_steps = [21, 22], 2
    sync = vec_rollout("VLA-PickCup-v0", "sync", "rgb", seeds, n_steps)
    async_ = async_rollout_in_subprocess(tmp_path, "VLA-PickCup-v0", "rgb", seeds, n_steps)
    for t in range(n_steps + 1):
        assert list(sync[t]["instruction"]) == list(async_[t]["instruction"]), f"step {t}"


def test_async_vector_env_after_rendering_in_parent_does_not_hang():
    """A process that rendered (e.g. a video of an eval episode) can still start async envs."""
    code = textwrap.dedent(
        """
        import gymnasium as gym
        import numpy as np
        import vlagym

        env = gym.make("VLA-PickCup-v0", obs_mode="rgb", image_size=16)
        env.reset(seed=0)
        env.close()
        envs = gym.make_vec("VLA-PickCup-v0", num_envs=2, vectorization_mode="async", obs_mode="rgb", image_size=16)
        obs, _ = envs.reset(seed=[0, 1])
        obs, *_ = envs.step(np.zeros((2, 7), np.float32))
        assert obs["images"]["front"].shape == (2, 16, 16, 3)
        envs.close()
        print("OK")
        """
    )
    result = run_isolated(code, timeout=20)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK")
