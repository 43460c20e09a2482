"""`PoolVectorEnv`: sub-env i behaves as sub-env i of a `SyncVectorEnv`, whatever the workers; failures are clear."""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import signal
import time

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import vlagym  # noqa: F401 - registers the tasks
from vlagym.envs.pool import PoolVectorEnv, make_pool

TASK = "VLA-PickCup-v0"
RGB = {"obs_mode": "rgb", "image_size": 32, "max_episode_steps": 12}  # short episodes: autoresets happen


def _fns(n: int, **kwargs):
    return [functools.partial(gym.make, TASK, **{**RGB, **kwargs})] * n


def _assert_same(a, b):
    """Observations, rewards, flags or infos equal to the bit (dicts and tuples of text included)."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b)
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, tuple | list) or (isinstance(a, np.ndarray) and a.dtype == object):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    else:
        assert a == b


def _rollout(envs, steps: int, seed: int = 5):
    rng = np.random.default_rng(0)
    out = [envs.reset(seed=seed)]
    for _ in range(steps):
        out.append(envs.step(rng.uniform(-1, 1, (envs.num_envs, 7)).astype(np.float32)))
    return out


@pytest.mark.parametrize(
    ("n", "workers", "main_steps", "mode"),
    [
        (3, 1, False, AutoresetMode.NEXT_STEP),
        (3, 2, False, AutoresetMode.NEXT_STEP),
        (4, 3, True, AutoresetMode.NEXT_STEP),
        (3, 2, False, AutoresetMode.SAME_STEP),
    ],
)
def test_identical_to_the_sync_vector_env(n, workers, main_steps, mode):
    sync = SyncVectorEnv(_fns(n), autoreset_mode=mode)
    pool = PoolVectorEnv(_fns(n), workers, autoreset_mode=mode, main_steps=main_steps)
    try:
        assert pool.observation_space == sync.observation_space and pool.action_space == sync.action_space
        assert pool.metadata["autoreset_mode"] == mode and pool.num_envs == n
        for expected, got in zip(_rollout(sync, 30), _rollout(pool, 30), strict=True):
            for x, y in zip(expected, got, strict=True):
                _assert_same(x, y)
    finally:
        pool.close()
        sync.close()


def test_partial_resets_with_autoreset_disabled():
    """The rollout code's pattern: autoreset off, finished sub-envs reset by mask with their own seeds."""
    mode = AutoresetMode.DISABLED
    sync = SyncVectorEnv(_fns(4), autoreset_mode=mode)
    pool = PoolVectorEnv(_fns(4), 2, autoreset_mode=mode)
    try:
        for envs in (sync, pool):
            envs.reset(seed=[10, 11, 12, 13])
        actions = np.zeros((4, 7), np.float32)
        for step in range(15):
            a, b = sync.step(actions), pool.step(actions)
            for x, y in zip(a, b, strict=True):
                _assert_same(x, y)
            done = a[2] | a[3]
            if step == 5:  # a reset that leaves one worker out entirely
                done = np.array([True, False, False, False])
            if done.any():
                seeds = [100 + step + i for i in range(4)]
                options = {"reset_mask": done}
                expected = sync.reset(seed=seeds, options=dict(options))
                for x, y in zip(expected, pool.reset(seed=seeds, options=options), strict=True):
                    _assert_same(x, y)
    finally:
        pool.close()
        sync.close()


def test_make_pool_and_attribute_access():
    pool = make_pool(TASK, num_envs=3, num_workers=2, obs_mode="state")
    try:
        assert pool.observation_space.shape[0] == 3
        assert pool.get_attr("spec")[0].id == TASK
        pool.reset(seed=0)
        instructions = pool.call("get_wrapper_attr", "instruction")
        sync = SyncVectorEnv([functools.partial(gym.make, TASK, obs_mode="state")] * 3)
        sync.reset(seed=0)
        assert instructions == sync.call("get_wrapper_attr", "instruction") and len(set(instructions)) > 1
        sync.close()
    finally:
        pool.close()


def test_an_env_error_reaches_the_caller_as_itself():
    pool = make_pool(TASK, num_envs=2, num_workers=2, obs_mode="state")
    try:
        pool.reset(seed=0)
        actions = np.zeros((2, 7), np.float32)
        actions[1, 2] = np.nan
        with pytest.raises(ValueError, match="non-finite entries"):
            pool.step(actions)
        with pytest.raises(ValueError, match="shape"):
            pool.step(np.zeros((3, 7), np.float32))
    finally:
        pool.close()


def test_a_dead_worker_is_a_clear_error_and_close_does_not_hang():
    pool = make_pool(TASK, num_envs=4, num_workers=2, obs_mode="state")
    pool.reset(seed=0)
    os.kill(pool._processes[1].pid, signal.SIGKILL)
    pool._processes[1].join(5)
    with pytest.raises(RuntimeError, match=r"worker 1 \(sub-envs 2\.\.3\) died"):
        pool.step(np.zeros((4, 7), np.float32))
    start = time.monotonic()
    pool.close()
    assert time.monotonic() - start < 10 and not any(p.is_alive() for p in pool._processes)


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_workers"):
        PoolVectorEnv(_fns(2), num_workers=0)
    with pytest.raises(ValueError, match="at least one"):
        PoolVectorEnv([])


def test_rollouts_and_demos_through_the_pool_equal_the_sync_ones(tmp_path):
    """`vectorization="pool"` where vlagym makes vector envs: the same episodes and the same demo file."""
    import h5py

    from vlagym.eval.rollout import make_rollout_envs, run_episodes
    from vlagym.train.demos import DemoConfig, collect_demos

    def policy(obs):
        return np.tanh(np.asarray(obs, np.float32)[:, :7])  # deterministic, state-dependent actions

    records = {}
    for mode in ("sync", "pool"):
        envs = make_rollout_envs(TASK, 3, mode, obs_mode="state", max_episode_steps=15)
        try:
            records[mode] = run_episodes(envs, policy, [7, 8, 9, 10, 11], progress=False)
        finally:
            envs.close()
    assert records["sync"] == records["pool"]

    files = {}
    for mode in ("sync", "pool"):
        out = tmp_path / f"{mode}.hdf5"
        collect_demos(
            DemoConfig(
                task=TASK, episodes=3, num_envs=2, out=str(out), image_size=32, vectorization=mode, progress=False
            )
        )
        with h5py.File(out) as f:
            files[mode] = {
                name: np.asarray(f["data"][demo][name]) for demo in f["data"] for name in ("actions", "rewards")
            } | {f"{demo}/front": np.asarray(f["data"][demo]["obs"]["front_rgb"]) for demo in f["data"]}
    assert files["sync"].keys() == files["pool"].keys()
    for key in files["sync"]:
        assert np.array_equal(files["sync"][key], files["pool"][key]), key


def test_ctrl_c_ends_the_program_without_hanging(tmp_path):
    """SIGINT to the whole process group (what a terminal's Ctrl-C does): the main process gets the
    KeyboardInterrupt, the workers ignore it and are closed; nothing is left running."""
    import subprocess
    import sys

    script = tmp_path / "loop.py"
    script.write_text(
        "import numpy as np, vlagym\n"
        "from vlagym.envs.pool import make_pool\n"
        f"envs = make_pool({TASK!r}, num_envs=4, num_workers=2, obs_mode='state')\n"
        "envs.reset(seed=0)\n"
        "print('stepping', flush=True)\n"
        "try:\n"
        "    while True:\n"
        "        envs.step(np.zeros((4, 7), np.float32))\n"
        "except KeyboardInterrupt:\n"
        "    envs.close()\n"
        "    print('closed', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # A Python started with SIGINT ignored (as a shell's background job is) never raises KeyboardInterrupt:
        # give the program the disposition a terminal's foreground job has, however the tests were launched.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout.readline().strip() == "stepping"
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0 and "closed" in out, err


def _no_such_env():
    return gym.make(TASK, obs_mode="no-such-mode")


@pytest.mark.parametrize(("workers", "main_steps"), [(3, False), (2, True)])
def test_an_env_that_fails_to_build_is_raised_and_leaves_no_worker(workers, main_steps):
    """The failing env is in a worker (started beside healthy ones) or in the main process's slice."""
    good = functools.partial(gym.make, TASK)
    before = set(mp.active_children())
    with pytest.raises(ValueError, match="no-such-mode"):
        PoolVectorEnv([good, _no_such_env, good], num_workers=workers, main_steps=main_steps)
    assert set(mp.active_children()) <= before


def test_gym_make_vec_without_a_mode_gives_the_pool_with_kwargs_passed_through():
    envs = gym.make_vec(TASK, num_envs=3, num_workers=2, **RGB)  # no vectorization_mode: the vector entry point
    sync = gym.make_vec(TASK, num_envs=3, vectorization_mode="sync", **RGB)
    try:
        assert isinstance(envs, PoolVectorEnv) and envs.num_workers == 2
        assert envs.spec is not None and envs.spec.id == TASK
        rng = np.random.default_rng(3)
        _assert_same(envs.reset(seed=7), sync.reset(seed=7))
        truncations = 0
        for _ in range(30):  # max_episode_steps=12 from the kwargs: truncations and autoresets happen
            a = rng.uniform(-1, 1, (3, 7)).astype(np.float32)
            got, want = envs.step(a), sync.step(a)
            _assert_same(got, want)
            truncations += int(got[3].sum())
        assert truncations >= 3
    finally:
        envs.close()
        sync.close()
    assert isinstance(gym.make_vec(TASK, num_envs=1, vectorization_mode="sync"), SyncVectorEnv)


def test_one_sub_env_is_the_sync_vector_env():
    from vlagym.envs.pool import make_vec

    disabled = {"autoreset_mode": AutoresetMode.DISABLED}
    for envs in (gym.make_vec(TASK, num_envs=1, **RGB), make_vec(TASK, 1, "pool", vector_kwargs=disabled, **RGB)):
        assert isinstance(envs, SyncVectorEnv)
        envs.close()
    assert make_vec(TASK, 1, "pool", vector_kwargs=disabled).metadata["autoreset_mode"] == AutoresetMode.DISABLED
    pool = gym.make_vec(TASK, num_envs=1, num_workers=1, **RGB)  # asked for explicitly: still a pool
    assert isinstance(pool, PoolVectorEnv)
    pool.close()


@pytest.mark.parametrize("main_steps", [False, True])
def test_step_async_and_wait_are_step_and_guard_their_order(main_steps):
    pool = PoolVectorEnv(_fns(3), num_workers=2, main_steps=main_steps)
    sync = SyncVectorEnv(_fns(3))
    try:
        _assert_same(pool.reset(seed=4), sync.reset(seed=4))
        rng = np.random.default_rng(5)
        for _ in range(14):  # past max_episode_steps=12: autoresets happen
            a = rng.uniform(-1, 1, (3, 7)).astype(np.float32)
            pool.step_async(a)
            _assert_same(pool.step_wait(), sync.step(a))
        pool.step_async(np.zeros((3, 7), np.float32))
        with pytest.raises(RuntimeError, match="already pending"):
            pool.step_async(np.zeros((3, 7), np.float32))
        with pytest.raises(RuntimeError, match="pending"):
            pool.reset(seed=0)
        pool.step_wait()
        with pytest.raises(RuntimeError, match="no step is pending"):
            pool.step_wait()
        pool.step_async(np.zeros((3, 7), np.float32))  # closing with a step pending hears it out
    finally:
        pool.close()
        sync.close()
