"""The Ray backend on a local Ray cluster this module starts (2 CPUs, loopback only): the same records as the
local backend with the same num_envs, for the expert and checkpoints; a worker killed mid-run changes nothing;
an interrupted `vlagym eval` resumes from its journal."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")

from vlagym.distributed import ActorPool, DistributedError, backend_problem  # noqa: E402
from vlagym.eval.adapters import CheckpointPolicy, ExpertPolicy  # noqa: E402
from vlagym.eval.configs import EvalConfig, EvalError  # noqa: E402
from vlagym.eval.evaluate import evaluate  # noqa: E402
from vlagym.eval.journal import JOURNAL_DIR  # noqa: E402
from vlagym.eval.ray_rollouts import PolicySource, RayRollouts  # noqa: E402
from vlagym.eval.rollout import make_rollout_envs, run_episodes  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_served import make_checkpoint  # noqa: E402

TASK = "VLA-PickCup-v0"


@pytest.fixture(scope="module", autouse=True)
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def local_records(policy, env_kwargs, seeds, num_envs, task=TASK):
    envs = make_rollout_envs(task, num_envs, "sync", expert=policy is None, **env_kwargs)
    try:
        policy = policy or ExpertPolicy(envs)
        return run_episodes(envs, policy, seeds, on_episode_start=policy.reset, progress=False)
    finally:
        envs.close()


def ray_records(folder, env_kwargs, seeds, **options):
    """The records of a checkpoint's episodes on two Ray workers (`RayRollouts` options: num_envs, unit_size)."""
    rollouts = RayRollouts(PolicySource.from_policy(str(folder)), workers=2, **options)
    try:
        return rollouts.run(TASK, env_kwargs, seeds)
    finally:
        rollouts.close()


def episodes(results):
    return {task: r["episodes"] for task, r in results["tasks"].items()}


def test_eval_of_the_expert_equals_the_local_backend(tmp_path):
    common = dict(policy="expert", tasks=[TASK, "VLA-StackBlocks-v0"], episodes=5, num_envs=2, progress=False)
    local = evaluate(EvalConfig(**common, out=str(tmp_path / "local")))
    remote = evaluate(EvalConfig(**common, out=str(tmp_path / "ray"), backend="ray", workers=2))
    assert episodes(remote) == episodes(local)
    assert remote["backend"] == {"name": "ray", "workers": 2, "num_envs": 2, "unit_size": 4}
    assert local["backend"] == {"name": "local", "num_envs": 2}
    assert not (tmp_path / "ray" / JOURNAL_DIR).exists(), "the journal goes once results.json is written"


def test_a_checkpoint_gives_the_local_records_with_any_workers(tmp_path):
    folder = make_checkpoint(tmp_path / "ckpt", "flow")  # noise drawn per episode seed, on the workers too
    kwargs = {**CheckpointPolicy(folder).env_kwargs, "max_episode_steps": 12}
    seeds = list(range(300, 310))
    # units of 3 on 2 sub-envs: a unit's episodes keep the sub-env (batch row) they have in the local run
    want = local_records(CheckpointPolicy(folder), kwargs, seeds, num_envs=2)
    assert ray_records(folder, kwargs, seeds, num_envs=2, unit_size=3) == want


def test_a_default_size_policy_gives_the_local_records_whatever_the_threads(tmp_path):
    """The default VLA's chunks at batch 1 differ in the last bits between one and two torch threads: a Ray worker
    (one CPU) and a local run on two threads act alike because acting always uses one thread."""
    from vlagym.policies import VLAConfig, VLAPolicy, save_checkpoint

    torch.manual_seed(0)
    folder = tmp_path / "ckpt"
    save_checkpoint(VLAPolicy(VLAConfig(head="flow")), folder, extra={"env_id": TASK})
    kwargs = {**CheckpointPolicy(folder).env_kwargs, "max_episode_steps": 20}
    seeds = [400, 401, 402]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        want = local_records(CheckpointPolicy(folder), kwargs, seeds, num_envs=1)
    finally:
        torch.set_num_threads(threads)
    assert ray_records(folder, kwargs, seeds, num_envs=1, unit_size=1) == want


def test_a_served_policy_on_ray_workers_gives_the_local_episodes_and_their_latency(tmp_path):
    from vlagym.eval.server import PolicyServer

    folder = make_checkpoint(tmp_path / "ckpt", "flow")  # the workers send each episode's noise
    with PolicyServer(str(folder), port=0) as server:
        common = dict(policy=server.uri, tasks=[TASK], episodes=4, progress=False)
        local = evaluate(EvalConfig(**common, out=str(tmp_path / "local")))
        remote = evaluate(EvalConfig(**common, out=str(tmp_path / "ray"), backend="ray", workers=2))
    assert episodes(remote) == episodes(local)
    assert remote["served_latency"]["requests"] == local["served_latency"]["requests"] > 0


def test_a_worker_killed_mid_run_changes_nothing():
    seeds = list(range(500, 516))
    want = local_records(None, {"obs_mode": "state"}, seeds, num_envs=1)
    rollouts = RayRollouts(PolicySource.from_policy("expert"), workers=2, num_envs=1, unit_size=2)
    pids = [ray.get(a.pid.remote()) for a in rollouts.pool.actors]
    killed: list[int] = []

    def kill_one(k, record):  # after the first unit is back, the other worker is busy with its own
        if not killed:
            os.kill(pids[1], signal.SIGKILL)
            killed.append(k)

    try:
        got = rollouts.run(TASK, {"obs_mode": "state"}, seeds, on_record=kill_one)
        assert got == want
        assert rollouts.pool.failures == 1 and rollouts.workers == 2
        assert pids[1] not in [ray.get(a.pid.remote()) for a in rollouts.pool.actors], "the dead worker was replaced"
    finally:
        rollouts.close()


def test_a_run_goes_on_with_fewer_workers_when_there_is_no_room_for_a_fresh_one(monkeypatch):
    seeds = list(range(600, 608))
    want = local_records(None, {"obs_mode": "state"}, seeds, num_envs=1)
    rollouts = RayRollouts(PolicySource.from_policy("expert"), workers=2, num_envs=1, unit_size=2)
    victim = ray.get(rollouts.pool.actors[1].pid.remote())

    def no_room(n, timeout=None):  # as when the dead worker's node is gone with its CPUs
        raise TimeoutError(f"no room for {n} Ray worker(s) within {timeout} s")

    monkeypatch.setattr(rollouts.pool, "_start", no_room)
    killed: list[int] = []

    def kill_one(k, record):
        if not killed:
            os.kill(victim, signal.SIGKILL)
            killed.append(k)

    try:
        assert rollouts.run(TASK, {"obs_mode": "state"}, seeds, on_record=kill_one) == want
        assert rollouts.workers == 1 and rollouts.pool.failures == 1
    finally:
        rollouts.close()


def test_an_interrupted_eval_resumes_on_any_backend(tmp_path):
    args = ["--policy", "expert", "--tasks", TASK, "--episodes", "24", "--out", str(tmp_path / "cut"), "--no-progress"]
    folder = tmp_path / "cut" / JOURNAL_DIR

    def journaled() -> int:
        return sum(len(p.read_text().splitlines()) for p in folder.glob(f"{TASK}-*.jsonl"))

    proc = subprocess.Popen([sys.executable, "-m", "vlagym", "eval", *args], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and journaled() < 5:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert not (tmp_path / "cut" / "results.json").exists(), "killed before the end"
    assert 5 <= journaled() < 24
    cfg = dict(policy="expert", tasks=[TASK], episodes=24, progress=False)
    with pytest.raises(EvalError, match="it was run with other episodes"):
        evaluate(EvalConfig(**{**cfg, "episodes": 30}, out=str(tmp_path / "cut"), resume=True))
    resumed = evaluate(EvalConfig(**cfg, out=str(tmp_path / "cut"), resume=True, backend="ray", workers=2))
    whole = evaluate(EvalConfig(**cfg, out=str(tmp_path / "whole")))
    assert episodes(resumed) == episodes(whole)
    with pytest.raises(EvalError, match="holds no journal of an interrupted run"):
        evaluate(EvalConfig(**cfg, out=str(tmp_path / "cut"), resume=True))


def test_a_worker_that_cannot_start_is_a_clear_error(tmp_path):
    broken = PolicySource(str(tmp_path / "nowhere"))  # a path no worker has
    with pytest.raises(DistributedError, match="a Ray worker could not start: .*does not exist"):
        RayRollouts(broken, workers=1)


def test_what_workers_log_reaches_the_driver_and_their_pools_keep_to_their_cpus(caplog):
    class Chatty:  # defined here, so Ray ships the class itself to the workers
        def __init__(self):
            logging.getLogger("chatty").info("below WARNING")

        def run(self, unit):
            logging.getLogger("chatty").warning("unit %d", unit)
            if unit == 0:
                warnings.warn("a Python warning", UserWarning, stacklevel=1)
            return 2 * unit

        def flood(self, n):
            for i in range(n):
                logging.getLogger("chatty").error("line %d", i)

        def cpus(self):
            from vlagym.envs.pool import usable_cpus

            return usable_cpus()

    caplog.set_level(logging.INFO, logger="vlagym.distributed")
    with ActorPool(Chatty, workers=1) as pool:
        assert pool.map("run", [0, 1]) == [0, 2]
        pool.ask("flood", 60)
        assert pool.ask("cpus") == [1]  # its one CPU, not the cluster's two: a pool vector env forks no more
    lines = [r.getMessage() for r in caplog.records if r.name == "vlagym.distributed"]
    assert any(line.endswith("] chatty: unit 0") and "Ray worker on" in line for line in lines)
    assert any(line.endswith("] chatty: unit 1") for line in lines)
    assert any("UserWarning: a Python warning" in line for line in lines)
    assert not any("below WARNING" in line for line in lines)
    assert sum("chatty: line" in line for line in lines) == 50
    assert any(line.endswith("10 more log records not shown") for line in lines)
    errors = [r for r in caplog.records if "chatty: line" in r.getMessage()]
    assert all(r.levelno == logging.ERROR for r in errors)


def test_backend_options_are_checked():
    with pytest.raises(EvalError, match="backend must be one of"):
        EvalConfig(policy="expert", tasks=[TASK], backend="dask")
    with pytest.raises(EvalError, match="workers only with backend 'ray'"):
        EvalConfig(policy="expert", tasks=[TASK], workers=2)
    with pytest.raises(EvalError, match="unit_size must be a positive integer, got 0"):
        EvalConfig(policy="expert", tasks=[TASK], backend="ray", unit_size=0)
    # filtered BC's units are whole groups of tries (its config passes group_size)
    assert backend_problem("ray", None, None, 4, multiple_of=3) == (
        "unit_size must be a multiple of 3 (whole groups of tries), got 4"
    )


def test_a_suite_on_ray_equals_the_local_bundle(tmp_path, monkeypatch):
    from test_sequential_suite import tiny_protocol

    from vlagym.eval import suites
    from vlagym.eval.configs import SuiteRunConfig
    from vlagym.eval.suite_run import run_suite

    # two tasks x two splits, and the language controls of the one that has them: all handed out at once on Ray
    horizons = ((TASK, 100), ("VLA-PressButton-v0", 80))
    protocol = tiny_protocol(tasks=tuple(t for t, _ in horizons), splits=("train", "lighting"), horizons=horizons)
    monkeypatch.setitem(suites.SUITES, "tiny-seq", protocol)
    common = dict(suite="tiny-seq", policy="expert", episodes=4, num_envs=2, language_controls=True, progress=False)
    local = run_suite(SuiteRunConfig(**common, out=str(tmp_path / "local")))
    remote = run_suite(SuiteRunConfig(**common, out=str(tmp_path / "ray"), backend="ray", workers=2, unit_size=3))
    assert remote["results"] == {
        task: {split: {**cell, "seconds": None} for split, cell in splits.items()}
        for task, splits in local["results"].items()
    }
    assert "episodes" in remote["language_controls"][TASK]
    assert remote["language_controls"] == local["language_controls"]
    assert remote["fingerprint"]["backend"] == {"name": "ray", "workers": 2, "num_envs": 2, "unit_size": 3}
    assert local["fingerprint"]["backend"] == {"name": "local", "num_envs": 2}


def test_demos_on_ray_write_the_local_file_and_resume(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent.parent / "train"))
    from test_demos import assert_same_content, collect

    # noisy actions and kept failures: the noise streams and the failure bookkeeping travel too
    common = dict(episodes=6, num_envs=2, action_noise=0.5, keep_failures=True)
    local = collect(tmp_path / "local.hdf5", **common)
    collect(tmp_path / "ray.hdf5", **{**common, "episodes": 3}, backend="ray", workers=2)
    remote = collect(tmp_path / "ray.hdf5", **common, backend="ray", workers=2, resume=True)
    assert (remote.first_episode, remote.demos) == (3, local.demos)
    assert_same_content(tmp_path / "local.hdf5", tmp_path / "ray.hdf5")


def test_filtered_bc_rounds_collect_on_ray_as_they_do_locally(tmp_path):
    """Filtered BC's collection on two Ray workers: each round's weights reach the workers, and a round's
    episodes (tries of a state, their noise) are the local collector's, record by record."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "rl"))
    from rl_helpers import make_bc_checkpoint

    from vlagym.rl.fbc import FilteredBCConfig
    from vlagym.rl.fbc.collect import round_seeds
    from vlagym.rl.fbc.session import open_run

    bc = make_bc_checkpoint(tmp_path / "bc")
    meta = json.loads((bc / "config.json").read_text())
    meta["extra"]["env_kwargs"]["max_episode_steps"] = 25  # short episodes: the test is about who runs them
    (bc / "config.json").write_text(json.dumps(meta))
    common = dict(policy=str(bc), demos=[], episodes_per_round=6, group_size=3, n_envs=2, noise_std=0.3, device="cpu")
    local = open_run(FilteredBCConfig(**common, out=str(tmp_path / "local")), tmp_path / "local")
    remote = open_run(FilteredBCConfig(**common, out=str(tmp_path / "ray"), backend="ray", workers=2), tmp_path / "ray")
    try:
        for r in range(2):  # new weights each round, as training would leave them
            torch.manual_seed(r)
            with torch.no_grad():
                for p in local.policy.head.parameters():
                    p.add_(0.5 * torch.randn_like(p))
            remote.policy.load_state_dict(local.policy.state_dict())
            seeds = round_seeds(local.cfg, r)
            (mine, _), (theirs, _) = local.collector.collect(seeds), remote.collector.collect(seeds)
            assert [x.seed for x in theirs.records] == seeds
            assert theirs.records == mine.records
            assert len({(x.length, x.episode_return) for x in mine.records}) > 1, "the tries differ"
            assert [e.actions.tobytes() for e in theirs.successes] == [e.actions.tobytes() for e in mine.successes]
    finally:
        local.close()
        remote.close()


@pytest.mark.slow  # 10 s of pools starting: `vlagym bench --sections rollouts --quick` checks the same by hand
def test_bench_rollouts_section_runs_the_backends_side_by_side(tmp_path):
    from vlagym.perf.config import BenchConfig
    from vlagym.perf.rollouts import CONFIGS, bench_rollouts

    cfg = BenchConfig(sections=["rollouts"], quick=True, tasks=["VLA-PressButton-v0"], image_size=32, out=None)
    table = bench_rollouts(cfg, work=None)
    assert [(r["obs"], r["backend"]) for r in table.rows] == [(o, c[0]) for o in ("state", "rgb") for c in CONFIGS]
    assert all(r["episodes_per_s"] > 0 and r["startup_s"] >= 0 for r in table.rows)
    assert [r["x_sync_1"] for r in table.rows if r["backend"] == "local sync x1"] == [1.0, 1.0]
    assert any(note.startswith("the driver's ceiling: ") for note in table.notes)


def test_residual_sub_envs_on_ray_step_as_local_ones_and_train(tmp_path):
    """train-residual's sub-envs in slices on two Ray workers: the local sub-envs' steps (seeds, resets, rewards;
    the base's actions up to batched rounding), a tiny run that trains and checkpoints, a dead worker a clear
    error."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "rl"))
    from rl_helpers import make_bc_checkpoint
    from test_residual import tiny_config

    from vlagym.rl.residual.loop import env_kwargs, train_residual
    from vlagym.rl.residual.remote import RaySubEnvs
    from vlagym.rl.residual.venv import LocalSubEnvs, ResidualVecEnv

    bc = make_bc_checkpoint(tmp_path / "bc")
    cfg = tiny_config(bc, tmp_path / "unused", env_kwargs={"max_episode_steps": 12})
    kwargs = env_kwargs(cfg, CheckpointPolicy(bc))
    here = ResidualVecEnv(LocalSubEnvs(make_rollout_envs(TASK, 2, "sync", **kwargs), CheckpointPolicy(bc), 0.1), seed=5)
    there = ResidualVecEnv(RaySubEnvs(str(bc), TASK, kwargs, 0.1, 1, "sync", workers=2, address=None), seed=5)
    try:
        assert there.num_envs == 2 and there.observation_space == here.observation_space
        np.testing.assert_allclose(there.reset(), here.reset(), atol=1e-5)
        actions = np.random.default_rng(0).uniform(-1, 1, (30, 2, 6)).astype(np.float32)
        for a in actions:
            (f1, r1, d1, i1), (f2, r2, d2, i2) = here.step(a), there.step(a)
            np.testing.assert_array_equal(d2, d1)
            np.testing.assert_allclose(r2, r1, atol=1e-5)
            np.testing.assert_allclose(f2, f1, atol=1e-4)
            assert [i.get("TimeLimit.truncated") for i in i2] == [i.get("TimeLimit.truncated") for i in i1]
        assert there.episodes.tolist() == here.episodes.tolist() and here.episodes.min() >= 3  # resets happened
        os.kill(ray.get(there.sub.pool.actors[1].pid.remote()), signal.SIGKILL)
        with pytest.raises(DistributedError, match="a Ray worker died"):
            there.step(actions[0])
    finally:
        here.close()
        there.close()
    run = dataclasses.replace(cfg, out=str(tmp_path / "ray"), backend="ray", workers=2, n_envs=1, total_timesteps=60)
    remote = train_residual(run)
    assert remote["timesteps"] == 60 and Path(remote["checkpoint"], "actor.safetensors").is_file()


@pytest.mark.slow  # ~25-45 s: a residual teacher to train, and 16 episodes of 100 steps
def test_distill_collections_on_ray_equal_the_local_ones(tmp_path):
    """The residual teacher's episodes and a DAgger round's labelled student episodes, on two Ray workers
    (teacher, base and student shipped): the local collections, record by record and label by label."""
    sys.path.insert(0, str(Path(__file__).parent.parent / "rl"))
    from rl_helpers import make_bc_checkpoint
    from test_residual import tiny_config

    from vlagym.rl.collection.rollouts import collect_round
    from vlagym.rl.residual import DistillConfig
    from vlagym.rl.residual.dagger import collect_labelled, recording_envs
    from vlagym.rl.residual.loop import train_residual
    from vlagym.rl.residual.remote import RayTeacher
    from vlagym.rl.residual.teacher import load_teacher

    bc = make_bc_checkpoint(tmp_path / "bc")
    folder = train_residual(tiny_config(bc, tmp_path / "residual", total_timesteps=60))["checkpoint"]
    teacher = load_teacher(folder)
    seeds = [7_000_000 + i for i in range(6)]
    cfg = DistillConfig(
        teacher=folder, out=str(tmp_path / "d"), n_envs=2, vectorization="sync", backend="ray", workers=2
    )
    remote = RayTeacher(dataclasses.replace(cfg, workers=2), teacher.description["base"])
    try:
        envs = recording_envs(teacher, 2, "sync")
        try:
            mine = collect_round(envs, teacher, seeds)
        finally:
            envs.close()
        assert remote.teach(seeds).records == mine.records
        student, labelled = collect_labelled(CheckpointPolicy(bc), teacher, seeds, 2, "sync")
        their_student, their_labelled = remote.label(str(bc), seeds)
        assert their_student.records == student.records
        assert [e.actions.tobytes() for e in their_labelled] == [e.actions.tobytes() for e in labelled]
    finally:
        remote.close()
