"""collect_demos: the file layout, seeds independent of num_envs, replay, failures, crash safety and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import gymnasium as gym
import h5py
import mujoco
import numpy as np
import pytest

import vlagym
from vlagym.envs.catalog import explicit_kwargs
from vlagym.eval.expert import expert_outcomes
from vlagym.train import layout
from vlagym.train.demos import CONFIG_SUFFIX, DemoConfig, DemoError, collect_demos
from vlagym.train.validate import check_dataset

TASK = "VLA-PickCup-v0"
BASE_SEED = 100
EPISODES = 4


def collect(path: Path, **kwargs):
    """collect_demos with small, fast defaults (32 px, no progress bar)."""
    kwargs = {"task": TASK, "seed": BASE_SEED, "episodes": EPISODES, "image_size": 32, "progress": False} | kwargs
    return collect_demos(DemoConfig(out=str(path), **kwargs))


def file_content(path: Path) -> dict[str, object]:
    """Every attribute and dataset of a file by path (the creation time left out)."""
    out: dict[str, object] = {f"@{k}": v for k, v in h5py.File(path, "r").attrs.items() if k != "created"}
    with h5py.File(path, "r") as f:

        def visit(name, obj):
            out.update({f"{name}@{k}": v for k, v in obj.attrs.items()})
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]

        f.visititems(visit)
    return out


def assert_same_content(a: Path, b: Path) -> None:
    ca, cb = file_content(a), file_content(b)
    assert ca.keys() == cb.keys(), sorted(set(ca) ^ set(cb))
    differ = [k for k in ca if not np.array_equal(ca[k], cb[k])]
    assert not differ, differ


def seeds_of(path: Path) -> list[int]:
    with h5py.File(path, "r") as f:
        return [int(f["data"][layout.demo_name(i)].attrs["seed"]) for i in range(len(f["data"]))]


@pytest.fixture(scope="module")
def pick_k1(tmp_path_factory) -> Path:
    """Episodes 0..3 (seeds 100..103) of PickCup, one env."""
    path = tmp_path_factory.mktemp("k1") / "pick.hdf5"
    collect(path, num_envs=1)
    return path


@pytest.fixture(scope="module")
def pick_k2(tmp_path_factory) -> Path:
    """The same episodes with two sync sub-envs."""
    path = tmp_path_factory.mktemp("k2") / "pick.hdf5"
    collect(path, num_envs=2)
    return path


@pytest.fixture(scope="module")
def noisy_k2(tmp_path_factory) -> Path:
    """Episodes 0..3 with action noise, two sync sub-envs."""
    path = tmp_path_factory.mktemp("noisy") / "pick.hdf5"
    collect(path, num_envs=2, action_noise=0.3)
    return path


# ---------------------------------------------------------------------------- layout
@pytest.mark.smoke
def test_file_follows_the_layout(pick_k1):
    env = gym.make(TASK)
    state_size = mujoco.mj_stateSize(env.unwrapped.model, mujoco.mjtState.mjSTATE_INTEGRATION)
    env.close()
    with h5py.File(pick_k1, "r") as f:
        assert f.attrs["format"] == layout.FORMAT and f.attrs["format_version"] == layout.FORMAT_VERSION
        assert f.attrs["vlagym_version"] == vlagym.__version__ and f.attrs["mujoco_version"] == mujoco.__version__
        datetime.fromisoformat(f.attrs["created"])
        data = f["data"]
        assert data.attrs["env_id"] == TASK
        assert json.loads(data.attrs["env_kwargs"]) == {
            "obs_mode": "rgb",
            "image_size": 32,
            "cameras": ["front", "wrist"],
        }
        assert json.loads(data.attrs["obs_keys"]) == ["front_rgb", "wrist_rgb", "proprio", "state"]
        assert sorted(data) == [layout.demo_name(i) for i in range(EPISODES)]
        total = 0
        for i in range(EPISODES):
            g = data[layout.demo_name(i)]
            n = int(g.attrs["num_samples"])
            total += n
            assert g.attrs["seed"] == BASE_SEED + i and g.attrs["task"] == TASK
            assert bool(g.attrs["success"]) and bool(g.attrs["complete"]) and g.attrs["instruction"]
            for cam in ("front", "wrist"):
                ds = g["obs"][layout.image_key(cam)]
                assert ds.shape == (n, 32, 32, 3) and ds.dtype == np.uint8
                assert ds.chunks == (1, 32, 32, 3) and ds.compression == "gzip"
                assert ds[0].std() > 0  # a rendered scene, not a blank frame
            assert g["obs/proprio"].shape == (n, 23) and g["obs/proprio"].dtype == np.float32
            assert g["obs/state"].shape == (n, 83) and g["obs/state"].dtype == np.float32
            assert g["actions"].shape == (n, 7) and g["actions"].dtype == np.float32
            assert g["rewards"].shape == (n,) and g["rewards"].dtype == np.float32
            assert g["dones"].dtype == np.uint8 and g["dones"][()].tolist() == [0] * (n - 1) + [1]
            assert g["states"].shape == (n, state_size) and g["states"].dtype == np.float64
        assert data.attrs["total"] == total
    config = json.loads(pick_k1.with_name(pick_k1.name + CONFIG_SUFFIX).read_text())
    assert config["task"] == TASK and config["episodes"] == EPISODES and config["seed"] == BASE_SEED
    assert check_dataset(pick_k1) == []
    assert not list(pick_k1.parent.glob("*.partial")) and not list(pick_k1.parent.glob("*.spare"))


def test_state_mode_records_no_images(tmp_path):
    path = tmp_path / "state.hdf5"
    collect(path, episodes=2, obs_mode="state")
    with h5py.File(path, "r") as f:
        assert json.loads(f["data"].attrs["obs_keys"]) == ["proprio", "state"]
        obs = f["data/demo_0/obs"]
        assert sorted(obs) == ["proprio", "state"]
        np.testing.assert_array_equal(obs["proprio"][()], obs["state"][:, :23])
    assert check_dataset(path) == []


# ---------------------------------------------------------------------------- seeds and replay
def test_demos_do_not_depend_on_num_envs(pick_k1, pick_k2):
    assert seeds_of(pick_k1) == seeds_of(pick_k2) == [BASE_SEED + i for i in range(EPISODES)]
    assert_same_content(pick_k1, pick_k2)


def test_async_vector_env_writes_the_same_file(pick_k1, tmp_path):
    path = tmp_path / "async.hdf5"
    collect(path, num_envs=3, vectorization="async")  # 3 workers for 4 episodes: two sit idle at the end
    assert_same_content(pick_k1, path)


@pytest.mark.parametrize("which", ["pick_k1", "pick_k2", "noisy_k2"])
def test_replaying_actions_reproduces_the_observations(which, request):
    path = request.getfixturevalue(which)
    with h5py.File(path, "r") as f:
        data = f["data"]
        env = gym.make(data.attrs["env_id"], **json.loads(data.attrs["env_kwargs"]))
        sim = env.unwrapped
        try:
            for name in data:
                g = data[name]
                obs, info = env.reset(seed=int(g.attrs["seed"]))
                assert info["instruction"] == g.attrs["instruction"]
                actions, n = g["actions"][()], int(g.attrs["num_samples"])
                state = np.empty(g["states"].shape[1])
                for t in range(n):
                    for cam in ("front", "wrist"):
                        assert np.array_equal(obs["images"][cam], g["obs"][layout.image_key(cam)][t]), (name, t, cam)
                    assert np.array_equal(obs["proprio"], g["obs/proprio"][t]), (name, t)
                    assert np.array_equal(sim.state_vector(), g["obs/state"][t]), (name, t)
                    mujoco.mj_getState(sim.model, sim.data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
                    assert np.array_equal(state, g["states"][t]), (name, t)
                    obs, reward, terminated, truncated, info = env.step(actions[t])
                    assert np.float32(reward) == g["rewards"][t]
                    assert (terminated or truncated) == (t == n - 1), (name, t)
                assert info["success"] == bool(g.attrs["success"])
        finally:
            env.close()


def test_action_noise_perturbs_the_executed_arm_actions_and_keeps_the_experts(noisy_k2, pick_k1, tmp_path):
    with h5py.File(noisy_k2, "r") as f:
        assert check_dataset(noisy_k2) == []
        for name in f["data"]:
            executed, labels = f["data"][name]["actions"][()], f["data"][name][layout.EXPERT_ACTIONS][()]
            assert np.array_equal(executed[:, -1], labels[:, -1])  # the gripper command is never perturbed
            noise = executed[:, :-1] - labels[:, :-1]
            assert np.all(np.abs(executed) <= 1.0) and 0.1 < noise.std() < 0.4
    with h5py.File(pick_k1, "r") as f:
        assert layout.EXPERT_ACTIONS not in f["data"][layout.demo_name(0)]  # no noise, no second copy
    # The noise of an episode depends only on its seed: one env gives the same file as two.
    path = tmp_path / "noisy_k1.hdf5"
    collect(path, num_envs=1, action_noise=0.3)
    assert_same_content(noisy_k2, path)


def test_dataset_learns_the_experts_actions_not_the_executed_ones(noisy_k2):
    from vlagym.train.dataset import DemoDataset, compute_stats

    dataset = DemoDataset(noisy_k2, chunk_size=3)
    with h5py.File(noisy_k2, "r") as f:
        labels = f["data"][layout.demo_name(0)][layout.EXPERT_ACTIONS][()]
    assert np.allclose(dataset[0]["action"].numpy(), labels[:3])
    stats = compute_stats(noisy_k2)
    with h5py.File(noisy_k2, "r") as f:
        every = np.concatenate([f["data"][n][layout.EXPERT_ACTIONS][()] for n in f["data"]])
    assert np.allclose(stats["actions"]["mean"], every.mean(0))


def test_multitask_records_each_episodes_task(tmp_path):
    a, b = tmp_path / "k1.hdf5", tmp_path / "k2.hdf5"
    kwargs = {"task": "VLA-MultiTask-v0", "episodes": 3, "obs_mode": "state", "keep_failures": True}
    collect(a, num_envs=1, **kwargs)
    collect(b, num_envs=2, **kwargs)
    assert_same_content(a, b)
    with h5py.File(a, "r") as f:
        data = f["data"]
        assert data.attrs["env_id"] == "VLA-MultiTask-v0"
        for name in data:
            task = data[name].attrs["task"]
            assert task in vlagym.TASKS and task != "VLA-MultiTask-v0"
            env = gym.make(task)
            size = mujoco.mj_stateSize(env.unwrapped.model, mujoco.mjtState.mjSTATE_INTEGRATION)
            env.close()
            assert data[name]["states"].shape[1] == size
    assert check_dataset(a) == []


# ---------------------------------------------------------------------------- failures
LIMIT = 34  # time limit under which the expert fails seeds 100, 101 and 103 and solves 102 (checked below)


@pytest.mark.parametrize("keep", [False, True])
def test_failures_are_dropped_unless_kept(keep, tmp_path):
    seeds = [BASE_SEED + i for i in range(EPISODES)]
    outcomes = expert_outcomes(TASK, seeds, max_episode_steps=LIMIT)
    assert any(outcomes) and not all(outcomes)  # the test needs both
    path = tmp_path / "f.hdf5"
    summary = collect(path, env_kwargs={"max_episode_steps": LIMIT}, keep_failures=keep)
    failed = [s for s, ok in zip(seeds, outcomes, strict=True) if not ok]
    assert summary.failures == len(failed) and summary.failed_seeds == failed
    assert summary.successes == sum(outcomes) and summary.episodes == EPISODES
    expected = seeds if keep else [s for s, ok in zip(seeds, outcomes, strict=True) if ok]
    assert seeds_of(path) == expected and summary.demos == len(expected)
    with h5py.File(path, "r") as f:
        for i, seed in enumerate(expected):
            g = f["data"][layout.demo_name(i)]
            assert bool(g.attrs["success"]) == outcomes[seeds.index(seed)]
            if not g.attrs["success"]:
                assert g.attrs["num_samples"] == LIMIT and g["dones"][-1] == 1
    assert check_dataset(path) == []


# ---------------------------------------------------------------------------- crash safety and resume
CHILD = """
import os, signal, sys, json
from vlagym.train import demo_writer, demos
point, at, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
kwargs = json.loads(sys.argv[4])
write, replace, commit = demo_writer.write_demo, os.replace, demo_writer.DemoJournal.commit

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def half_write(data, name, ep, compression):
    if point == "writing" and name == f"demo_{at}":
        data.create_group(name).create_dataset("actions", data=ep.actions)  # then killed mid-demo
        data.file.flush()
        die()
    write(data, name, ep, compression)

def replace_then(src, dst):
    if point == "spare" and str(src).endswith(".spare") and f"demo_{at}" in demo_writer.h5py.File(src, "r")["data"]:
        die()  # the new version is committed, its twin not yet renamed
    replace(src, dst)

def slow_commit(self, episodes):
    commit(self, episodes)
    import time; time.sleep(pause)

demo_writer.write_demo, os.replace, demo_writer.DemoJournal.commit = half_write, replace_then, slow_commit
demos.collect_demos(demos.DemoConfig(**kwargs))
"""


def run_child(point: str, at: int, kwargs: dict, pause: float = 0.0) -> subprocess.Popen:
    argv = [sys.executable, "-c", CHILD, point, str(at), str(pause), json.dumps(kwargs)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def child_kwargs(path: Path, **kw) -> dict:
    return {"task": TASK, "seed": BASE_SEED, "image_size": 32, "progress": False, "out": str(path)} | kw


@pytest.mark.parametrize(("point", "committed"), [("writing", 2), ("spare", 3)])
def test_sigkill_mid_commit_leaves_a_valid_file_and_resume_completes_it(point, committed, pick_k1, tmp_path):
    path = tmp_path / "killed.hdf5"
    proc = run_child(point, 2, child_kwargs(path, episodes=EPISODES))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
    assert check_dataset(path) == []
    assert seeds_of(path) == [BASE_SEED + i for i in range(committed)]
    summary = collect(path, resume=True)
    assert summary.first_episode == committed and summary.episodes == EPISODES - committed
    assert_same_content(pick_k1, path)
    assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob("*.spare"))


def test_sigkill_at_any_moment_keeps_every_committed_demo(pick_k1, tmp_path):
    path = tmp_path / "killed.hdf5"
    proc = run_child("none", -1, child_kwargs(path, episodes=200), pause=0.05)
    seen, deadline = 0, time.monotonic() + 60
    try:
        while seen < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
            if path.exists():
                with h5py.File(path, "r") as f:  # the file is readable at every moment of the run
                    seen = len(f["data"])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    assert seen >= 3 and proc.returncode == -signal.SIGKILL
    assert check_dataset(path) == []
    seeds = seeds_of(path)
    assert len(seeds) >= seen and seeds == [BASE_SEED + i for i in range(len(seeds))]
    with h5py.File(path, "r") as f, h5py.File(pick_k1, "r") as ref:
        for i in range(min(len(seeds), EPISODES)):
            name = layout.demo_name(i)
            assert np.array_equal(f["data"][name]["obs/front_rgb"][()], ref["data"][name]["obs/front_rgb"][()])


READER = """
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")  # holds the version it opened (and its HDF5 lock) until stdin closes
print(len(f["data"]), flush=True)
sys.stdin.read()
g = f["data/demo_0"]
print(len(f["data"]), int(f["data"].attrs["total"]), int(g["obs/front_rgb"][()].sum()), float(g["actions"][()].sum()))
"""


def test_a_reader_holding_the_file_open_sees_its_version_unchanged(pick_k1, tmp_path, monkeypatch):
    from vlagym.train.demo_writer import DemoJournal

    path, commit, readers = tmp_path / "read.hdf5", DemoJournal.commit, []

    def commit_then_open_a_reader(self, episodes):
        commit(self, episodes)
        if not readers:  # after the first demo: a reader opens the file and keeps it open to the end
            proc = subprocess.Popen(
                [sys.executable, "-c", READER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            )
            assert proc.stdout.readline().strip() == "1"
            readers.append(proc)

    monkeypatch.setattr(DemoJournal, "commit", commit_then_open_a_reader)
    collect(path)
    out, _ = readers[0].communicate("", timeout=60)
    with h5py.File(pick_k1, "r") as ref:
        g = ref["data/demo_0"]
        expected = [1, int(g.attrs["num_samples"]), int(g["obs/front_rgb"][()].sum()), float(g["actions"][()].sum())]
    assert [float(x) for x in out.split()] == expected  # the reader's version was not written to
    assert_same_content(pick_k1, path)


def test_resume_continues_from_the_next_seed(pick_k1, tmp_path):
    path = tmp_path / "r.hdf5"
    collect(path, episodes=2)
    summary = collect(path, resume=True)  # episodes=4 now: runs seeds 102 and 103
    assert (summary.first_episode, summary.episodes, summary.demos) == (2, 2, EPISODES)
    assert_same_content(pick_k1, path)
    again = collect(path, resume=True)
    assert again.episodes == 0 and again.demos == EPISODES


def test_resume_takes_the_env_defaults_spelled_out_or_not(pick_k1, tmp_path):
    path = tmp_path / "r.hdf5"
    collect(path, episodes=2)  # env_kwargs {}, as the quickstart writes them
    summary = collect(path, resume=True, env_kwargs={"split": "train", "instruction_split": None})  # the CLI's
    assert (summary.first_episode, summary.demos) == (2, EPISODES)
    assert_same_content(pick_k1, path)
    spelled_out = {"split": "train", "cameras": ["front", "wrist"], "image_size": 32, "max_steps": 7}
    assert explicit_kwargs(TASK, spelled_out) == {"image_size": 32, "max_steps": 7}


def test_resume_drops_incomplete_demos(pick_k1, tmp_path):
    path = tmp_path / "r.hdf5"
    collect(path, episodes=2)
    with h5py.File(path, "a") as f:  # what an interrupted in-place writer would leave
        f["data"].create_group("demo_2").create_dataset("actions", data=np.zeros((3, 7), np.float32))
    assert any("incomplete" in p for p in check_dataset(path))
    summary = collect(path, resume=True)
    assert summary.first_episode == 2
    assert_same_content(pick_k1, path)


@pytest.mark.parametrize(
    "change",
    [
        {"image_size": 48},
        {"seed": 7},
        {"cameras": ("front",)},
        {"env_kwargs": {"split": "lighting"}},
        {"task": "VLA-PushCube-v0"},
        {"action_noise": 0.2},
    ],
)
def test_resume_refuses_other_settings(change, tmp_path):
    path = tmp_path / "r.hdf5"
    collect(path, episodes=1)
    before = file_content(path)
    with pytest.raises(DemoError, match="cannot resume"):
        collect(path, resume=True, **change)
    assert file_content(path).keys() == before.keys()


def test_existing_file_needs_resume_or_overwrite(tmp_path):
    path = tmp_path / "x.hdf5"
    collect(path, episodes=1)
    with pytest.raises(DemoError, match="exists"):
        collect(path, episodes=1)
    summary = collect(path, episodes=1, seed=5, overwrite=True)
    assert summary.demos == 1 and seeds_of(path) == [5]
    path.with_name(path.name + CONFIG_SUFFIX).unlink()
    with pytest.raises(DemoError, match="config"):
        collect(path, episodes=2, seed=5, resume=True)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"task": "VLA-PickCap-v0"}, "known tasks"),
        ({"episodes": 0}, "episodes"),
        ({"obs_mode": "depth"}, "obs_mode"),
        ({"cameras": ("front", "top")}, "camera"),
        ({"compression": "zstd"}, "compression"),
        ({"vectorization": "ray"}, "vectorization"),
        ({"env_kwargs": {"obs_mode": "state"}}, "env_kwargs"),
        ({"out": "demos.npz"}, "hdf5"),
        ({"action_noise": -0.1}, "action_noise"),
        ({"action_noise": 2.0}, "action_noise"),
        ({"action_noise": True}, "action_noise"),
    ],
)
def test_bad_config_raises_naming_the_choices(kwargs, match):
    with pytest.raises(DemoError, match=match):
        DemoConfig(**({"task": TASK} | kwargs))


def test_config_and_env_kwargs_stay_out_of_each_other():
    cfg = DemoConfig(task=TASK, env_kwargs={"split": "train"})
    assert cfg.make_kwargs() == {"obs_mode": "rgb", "image_size": 128, "cameras": ["front", "wrist"], "split": "train"}
    assert os.path.basename(cfg.out) == f"{TASK}.hdf5"
