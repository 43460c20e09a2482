"""Residual RL on a frozen VLA: the env, the agent's changes to SAC, the teacher, exact resume, the CLI."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import torch

import vlagym
from vlagym.eval.adapters import CheckpointPolicy
from vlagym.eval.compare import compare_runs
from vlagym.eval.configs import CompareConfig
from vlagym.eval.evaluate import EvalConfig, evaluate
from vlagym.eval.rollout import make_rollout_envs, run_episodes
from vlagym.rl.residual import ResidualConfig
from vlagym.rl.residual.agent import LayerNormCritic
from vlagym.rl.residual.loop import env_kwargs, residual_probability, train_residual
from vlagym.rl.residual.teacher import load_teacher
from vlagym.rl.residual.venv import LocalSubEnvs, ResidualVecEnv, apply_residual

TINY_RUN = dict(
    n_envs=2,
    vectorization="sync",
    total_timesteps=120,
    warmup_steps=40,
    critic_warmup_updates=10,
    exploration_steps=40,
    checkpoint_every=60,
    eval_every=0,
    eval_episodes=2,
    batch_size=16,
    buffer_size=400,
    hidden=[32, 32],
    progress=False,
)


def tiny_config(bc_checkpoint, out, **overrides) -> ResidualConfig:
    return ResidualConfig(policy=str(bc_checkpoint), out=str(out), **{**TINY_RUN, **overrides})


def make_venv(bc_checkpoint, n=2, seed=0, **kwargs) -> ResidualVecEnv:
    base = CheckpointPolicy(bc_checkpoint)
    cfg = tiny_config(bc_checkpoint, "unused")
    envs = make_rollout_envs(cfg.task, n, "sync", **env_kwargs(cfg, base))
    return ResidualVecEnv(LocalSubEnvs(envs, base, alpha=0.1), seed=seed, **kwargs)


def test_apply_residual_is_bounded_and_leaves_the_gripper():
    rng = np.random.default_rng(0)
    base = rng.uniform(-1, 1, (64, 7)).astype(np.float32)
    residual = rng.uniform(-5, 5, (64, 6)).astype(np.float32)  # out of range: clipped to [-1, 1] first
    out = apply_residual(base, residual, alpha=0.2)
    assert np.all(np.abs(out[:, :6] - base[:, :6]) <= 0.2 + 1e-6)
    assert np.all(np.abs(out) <= 1.0)
    np.testing.assert_array_equal(out[:, 6], base[:, 6])


def test_zero_residual_reproduces_the_base_policys_episodes(bc_checkpoint):
    """With the residual forced to zero the env executes the base's actions: the same episodes as `vlagym eval`."""
    seeds = [0, 1, 2]
    venv = make_venv(bc_checkpoint, n=1)
    try:
        venv.reset()
        lengths, successes = [], []
        while len(lengths) < len(seeds):
            _, _, done, infos = venv.step(np.zeros((1, 6), np.float32))
            if done[0]:
                lengths.append(infos[0]["episode"]["l"])
                successes.append(infos[0]["is_success"])
    finally:
        venv.close()
    base = CheckpointPolicy(bc_checkpoint)
    envs = make_rollout_envs("VLA-PickCup-v0", 1, "sync", **base.env_kwargs)
    try:
        records = run_episodes(envs, base, seeds, base.reset, progress=False)
    finally:
        envs.close()
    assert lengths == [r.length for r in records]
    assert successes == [r.success for r in records]


def test_venv_keys_episodes_by_seed_and_reports_truncation(bc_checkpoint):
    venv = make_venv(bc_checkpoint, n=2, seed=7)
    try:
        obs = venv.reset()
        assert obs.shape == (2, venv.observation_space.shape[0])
        assert list(venv.next_seeds()) == [9, 10]  # sub-envs 0 and 1 took seeds 7 and 8, each its own next
        done_infos = []
        for _ in range(120):  # past the 100-step time limit
            _, reward, done, infos = venv.step(np.ones((2, 6), np.float32))
            assert np.all(reward <= 0.0)
            done_infos += [info for d, info in zip(done, infos, strict=True) if d]
        assert done_infos
        for info in done_infos:
            assert info["terminal_observation"].shape == obs.shape[1:]
            assert not (info["TimeLimit.truncated"] and info["is_success"])  # a success ends the episode
        assert venv.episodes.sum() == 2 + len(done_infos)
        np.testing.assert_array_equal(venv.next_seeds(), 7 + np.arange(2) + 2 * venv.episodes)
        old = {"next_seed": 9, "rng": venv.rng.bit_generator.state, "env_s": 0.0, "base_s": 0.0}
        with pytest.raises(ValueError, match="written by an older vlagym"):  # seeds counted over all sub-envs
            venv.load_state_dict(old)
        with pytest.raises(ValueError, match="the checkpoint ran 3 sub-envs, this run has 2"):
            venv.load_state_dict({**venv.state_dict(), "episodes": [1, 1, 1]})
    finally:
        venv.close()


def test_episodes_with_the_residual_off_execute_the_base(bc_checkpoint):
    venv = make_venv(bc_checkpoint, n=2)
    try:
        venv.residual_probability = 0.0
        venv.reset()
        assert not venv.residual_on.any()
        executed = []
        original = venv.sub.envs.step
        venv.sub.envs.step = lambda a: (executed.append(np.array(a)), original(a))[1]
        base_action = venv.sub.base_action.copy()
        venv.step(np.ones((2, 6), np.float32))
        np.testing.assert_array_equal(executed[0], base_action)
    finally:
        venv.close()


def test_critic_has_layer_norm_and_the_residual_starts_at_zero():
    from vlagym.rl.residual.teacher import make_policy

    policy = make_policy(obs_dim=20, residual_dims=6, hidden=[16, 16])
    assert isinstance(policy.critic, LayerNormCritic)
    for q in policy.critic.q_networks:
        assert sum(isinstance(m, torch.nn.LayerNorm) for m in q) == 2
    obs = torch.randn(5, 20)
    assert torch.equal(policy.actor(obs, deterministic=True), torch.zeros(5, 6))


def test_progressive_exploration_schedule():
    cfg = SimpleNamespace(warmup_steps=100, exploration_steps=200)
    assert residual_probability(cfg, 50) == 0.0
    assert residual_probability(cfg, 200) == pytest.approx(0.5)
    assert residual_probability(cfg, 1000) == 1.0
    cfg.exploration_steps = 0
    assert residual_probability(cfg, 0) == 1.0


def test_tiny_run_end_to_end_and_its_teacher(bc_checkpoint, tmp_path):
    result = train_residual(tiny_config(bc_checkpoint, tmp_path / "run"))
    assert result["timesteps"] == 120
    ckpt = Path(result["checkpoint"])
    curve = json.loads((tmp_path / "run" / "eval" / "curve.json").read_text())
    assert [p["timesteps"] for p in curve] == [120]
    assert list((tmp_path / "run" / "checkpoints").glob("step_*/replay.npz")) == [ckpt / "replay.npz"]
    teacher = load_teacher(ckpt)
    envs = make_rollout_envs(teacher.task, 2, "sync", **teacher.env_kwargs)
    try:
        records = run_episodes(envs, teacher, [300_000, 300_001], teacher.reset, progress=False)
    finally:
        envs.close()
    assert len(records) == 2 and teacher.alpha == 0.2
    # the teacher's evaluation pairs with `vlagym eval` of its base on the same seeds
    cfg = tiny_config(bc_checkpoint, tmp_path / "run")
    base_out = tmp_path / "base_eval"
    evaluate(
        EvalConfig(
            policy=str(bc_checkpoint),
            episodes=cfg.eval_episodes,
            seed=cfg.eval_seed,
            num_envs=1,
            out=str(base_out),
            progress=False,
        )
    )
    comparison = compare_runs(CompareConfig(a=str(base_out), b=str(tmp_path / "run" / "eval" / "step_120")))
    assert comparison.tests["all"].n == cfg.eval_episodes
    teacher_results = json.loads((tmp_path / "run" / "eval" / "step_120" / "results.json").read_text())
    assert comparison.tests["all"].b_successes == teacher_results["tasks"]["VLA-PickCup-v0"]["successes"]


def test_resume_continues_the_same_run(bc_checkpoint, tmp_path):
    # Evaluations between segments (the uninterrupted run's at 60 acts with the training's base) change nothing.
    whole = train_residual(tiny_config(bc_checkpoint, tmp_path / "whole", eval_every=60))
    train_residual(tiny_config(bc_checkpoint, tmp_path / "cut", total_timesteps=60))  # "killed" after a segment
    resumed = train_residual(tiny_config(bc_checkpoint, tmp_path / "cut", resume=True))
    a = torch.load(Path(whole["checkpoint"]) / "training_state.pt", weights_only=True)
    b = torch.load(Path(resumed["checkpoint"]) / "training_state.pt", weights_only=True)
    assert a["venv"]["episodes"] == b["venv"]["episodes"]
    for name, params in a["params"]["policy"].items():
        assert torch.equal(params, b["params"]["policy"][name]), name
    assert torch.equal(a["log_ent_coef"], b["log_ent_coef"])


def test_resume_keeps_the_time_trained(bc_checkpoint, tmp_path):
    first = train_residual(tiny_config(bc_checkpoint, tmp_path / "run", total_timesteps=60))
    again = train_residual(tiny_config(bc_checkpoint, tmp_path / "run", total_timesteps=60, resume=True))
    assert again["timesteps"] == 60 and again["train_minutes"] == first["train_minutes"] > 0


def test_resume_refuses_other_settings(bc_checkpoint, tmp_path):
    train_residual(tiny_config(bc_checkpoint, tmp_path / "run", total_timesteps=60))
    with pytest.raises(ValueError, match="alpha=0.2 \\(now 0.3\\)"):
        train_residual(tiny_config(bc_checkpoint, tmp_path / "run", resume=True, alpha=0.3))


def test_teacher_refuses_changed_base_weights(bc_checkpoint, tmp_path):
    import shutil

    from rl_helpers import make_bc_checkpoint

    base = tmp_path / "base"
    shutil.copytree(bc_checkpoint, base)
    result = train_residual(tiny_config(base, tmp_path / "run", total_timesteps=60, checkpoint_every=60))
    make_bc_checkpoint(base, seed=1)  # other weights at the same path
    with pytest.raises(ValueError, match="no longer holds"):
        load_teacher(result["checkpoint"])


def test_n_action_steps_sets_how_the_base_acts_in_training_and_in_the_teacher(bc_checkpoint, tmp_path):
    """`--n-action-steps` makes the base execute that many actions per chunk (a checkpoint trained with the temporal
    ensemble, or with another count); the teacher records it and acts so again when loaded."""
    own = CheckpointPolicy(bc_checkpoint).chunk_execution()
    n = 3 if own["n_action_steps"] != 3 else 2
    result = train_residual(tiny_config(bc_checkpoint, tmp_path / "run", total_timesteps=60, n_action_steps=n))
    teacher = load_teacher(result["checkpoint"])
    assert teacher.base.chunk_execution() == {**own, "n_action_steps": n, "temporal_ensemble": False}
    recorded = json.loads((Path(result["checkpoint"]) / "teacher.json").read_text())["chunk_execution"]
    assert recorded["n_action_steps"] == n
    # The teacher's base acts as `vlagym eval --n-action-steps n` of the checkpoint, and unlike its own setting.
    actions = {}
    for name, execution in (("teacher", None), ("eval", (n, False)), ("own", None)):
        policy = teacher.base if name == "teacher" else CheckpointPolicy(bc_checkpoint)
        if execution is not None:
            policy.execute_chunks(*execution)
        envs = make_rollout_envs(teacher.task, 1, "sync", **policy.env_kwargs)
        try:
            obs, _ = envs.reset(seed=[5])
            policy.reset(np.ones(1, bool))
            steps = []
            for _ in range(12):
                steps.append(np.asarray(policy(obs)))
                obs, *_ = envs.step(steps[-1])
        finally:
            envs.close()
        actions[name] = np.stack(steps)
    np.testing.assert_array_equal(actions["teacher"], actions["eval"])
    assert not np.array_equal(actions["teacher"], actions["own"])
    with pytest.raises(ValueError, match="n_action_steps"):
        tiny_config(bc_checkpoint, tmp_path / "bad", n_action_steps=own["chunk_size"] + 1)


def test_residual_rl_imports_no_scripted_expert():
    """Post-training sees only the success signal and the simulator state: no module of the package imports an
    expert (vlagym.envs.expert, the tasks' expert code or the eval's expert adapters)."""
    package = Path(vlagym.__file__).parent / "rl" / "residual"
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or "", *(a.name for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            assert not any("expert" in n.lower() for n in names), (path.name, names)


@pytest.mark.parametrize(("flag", "value"), [("--alpha", "0"), ("--reward", "shaped"), ("--vectorization", "async")])
def test_cli_train_residual_bad_input_is_a_usage_error(bc_checkpoint, capsys, flag, value):
    from vlagym.cli import main

    assert main(["train-residual", "--policy", str(bc_checkpoint), flag, value]) == 2
    assert flag.removeprefix("--").replace("-", "_") in capsys.readouterr().err.replace("-", "_")


def test_dense_reward_is_the_tasks_staged_reward_minus_one(bc_checkpoint):

    cfg = tiny_config(bc_checkpoint, "unused", reward="dense")
    kwargs = env_kwargs(cfg, CheckpointPolicy(bc_checkpoint))
    assert kwargs["reward_mode"] == "dense" and kwargs["obs_mode"] == "rgb+state"
    base = CheckpointPolicy(bc_checkpoint)
    envs = make_rollout_envs(cfg.task, 1, "sync", **kwargs)
    venv = ResidualVecEnv(LocalSubEnvs(envs, base, alpha=0.1))
    try:
        venv.reset()
        rewards = [venv.step(np.zeros((1, 6), np.float32))[1][0] for _ in range(5)]
    finally:
        venv.close()
    assert all(-1.0 <= r <= 0.0 for r in rewards) and any(r > -1.0 for r in rewards)  # the reach term counts


@pytest.fixture(scope="module")
def tiny_teacher(bc_checkpoint, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("teacher")
    return Path(train_residual(tiny_config(bc_checkpoint, out, total_timesteps=60))["checkpoint"])


def distill_config(teacher, out, **overrides):
    from vlagym.rl.residual import DistillConfig

    kwargs = dict(episodes=2, steps=3, batch_size=4, eval_episodes=1, n_envs=2, vectorization="sync", progress=False)
    return DistillConfig(teacher=str(teacher), out=str(out), **{**kwargs, **overrides})


def test_distill_trains_a_student_vla_on_the_teachers_successes(tiny_teacher, tmp_path, monkeypatch):
    from rl_helpers import ExpertActor

    from vlagym.rl.residual import distillation as distill_module

    real = distill_module.collect_round
    # The tiny random base never succeeds: the test's teacher acts with the scripted expert (tests only).
    monkeypatch.setattr(
        distill_module, "collect_round", lambda envs, actor, seeds, progress: real(envs, ExpertActor(envs), seeds)
    )
    summary = distill_module.distill(distill_config(tiny_teacher, tmp_path / "d"))
    assert summary["teacher"] == {**summary["teacher"], "episodes": 2, "successes": 2}
    student = CheckpointPolicy(summary["student"]["checkpoint"])  # an ordinary VLA checkpoint
    assert student.env_kwargs["obs_mode"] == "rgb"
    assert 0.0 <= summary["student"]["success_rate"] <= 1.0
    assert (tmp_path / "d" / "eval" / "results.json").is_file()


def test_distill_refuses_a_teacher_without_successes(tiny_teacher, tmp_path):
    from vlagym.rl.residual import distill

    with pytest.raises(ValueError, match="succeeded in none"):
        distill(distill_config(tiny_teacher, tmp_path / "d"))


class ProprioLabeller:
    """A stand-in teacher whose action names the observation it was asked about: proprio[0], then zeros."""

    task = "VLA-PickCup-v0"

    def __init__(self, env_kwargs):
        self.env_kwargs = env_kwargs

    def reset(self, mask, seeds=None):
        pass

    def __call__(self, obs):
        labels = np.zeros((len(obs["proprio"]), 7), np.float32)
        labels[:, 0] = obs["proprio"][:, 0]
        return labels


def test_dagger_runs_the_student_and_labels_every_state_it_visits_with_the_teacher(bc_checkpoint):
    from vlagym.rl.residual.dagger import collect_labelled

    student = CheckpointPolicy(bc_checkpoint)
    labeller = ProprioLabeller({**student.env_kwargs, "obs_mode": "rgb+state"})
    seeds = [41, 42, 43]
    collection, episodes = collect_labelled(student, labeller, seeds, n_envs=2, vectorization="sync")
    envs = make_rollout_envs(labeller.task, 2, "sync", **student.env_kwargs)
    own = run_episodes(envs, CheckpointPolicy(bc_checkpoint), seeds, progress=False)
    envs.close()
    # The student acted: its episodes are the ones it runs alone; every one is kept, success or not.
    assert [(r.seed, r.length, r.success) for r in collection.records] == [(r.seed, r.length, r.success) for r in own]
    assert [e.seed for e in episodes] == seeds
    for episode, record in zip(episodes, collection.records, strict=True):
        assert len(episode.actions) == record.length
        np.testing.assert_array_equal(episode.actions[:, 0], episode.proprio[:, 0])  # each step's own label
        assert not episode.actions[:, 1:].any()


def test_distill_with_a_dagger_round_fine_tunes_the_student_on_labelled_states(tiny_teacher, tmp_path, monkeypatch):
    from rl_helpers import ExpertActor

    from vlagym.rl.residual import distillation as distill_module
    from vlagym.train.demo_reader import complete_demos, data_group

    real = distill_module.collect_round
    monkeypatch.setattr(
        distill_module, "collect_round", lambda envs, actor, seeds, progress: real(envs, ExpertActor(envs), seeds)
    )
    cfg = distill_config(tiny_teacher, tmp_path / "d", dagger_rounds=1, dagger_episodes=2, dagger_steps=2)
    summary = distill_module.distill(cfg)
    first, second = summary["rounds"]
    assert second["labelled"]["episodes"] == 2 and summary["student"]["checkpoint"] == second["checkpoint"]
    labelled = tmp_path / "d" / "dagger" / "round_1" / "labelled.hdf5"
    with h5py.File(labelled, "r") as f:
        assert len(complete_demos(data_group(f, labelled), labelled)) == 2  # every student episode, failed or not
    bc = json.loads((tmp_path / "d" / "dagger" / "round_1" / "bc" / "bc_config.json").read_text())
    assert bc["init"] == first["checkpoint"] and str(labelled) in bc["dataset"]
    assert set(summary["seconds"]) == {"collect", "train", "evaluate"}
    # A resume finds both rounds done and changes nothing.
    again = distill_module.distill(dataclasses.replace(cfg, resume=True))
    assert again["rounds"] == summary["rounds"]


def test_training_seeds_stay_clear_of_the_evaluation_seeds(bc_checkpoint, tmp_path):
    # Training episodes run from collect_seed + k, far from the default test seeds: a long run is accepted.
    assert tiny_config(bc_checkpoint, tmp_path, total_timesteps=1_000_000).collect_seed == 1_000_000
    with pytest.raises(ValueError, match="may reach the evaluation seeds .*move collect_seed or eval_seed"):
        tiny_config(bc_checkpoint, tmp_path, collect_seed=150_000, total_timesteps=60_000, eval_seed=200_000)
