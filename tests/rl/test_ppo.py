"""train_rl: tiny post-training and baseline runs, checkpoints `vlagym eval` loads, resume, truncation bootstrapping,
same seed same result, config errors."""

from __future__ import annotations

import json
import tempfile

import numpy as np
import pytest
import torch
from rl_helpers import TASK
from safetensors.torch import load_file
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vlagym.eval.evaluate import EvalConfig, evaluate
from vlagym.policies import VLAPolicy
from vlagym.rl.ppo import RLConfig, build_run, restart_seed, train_env_kwargs, train_rl

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:stable_baselines3.*")


def _post(bc_checkpoint, out, **overrides) -> RLConfig:
    kwargs = dict(
        policy=str(bc_checkpoint),
        out=str(out),
        total_timesteps=16,
        n_envs=2,
        n_steps=4,
        batch_size=4,
        n_epochs=2,
        bc_coef=0.1,
        critic_warmup_steps=8,
        checkpoint_every=8,
        eval_every=16,
        eval_episodes=2,
        device="cpu",
        progress=False,
    )
    return RLConfig(**{**kwargs, **overrides})


def _weights(folder) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


@pytest.mark.smoke
def test_post_training_smoke_resume_and_eval(bc_checkpoint, tmp_path, in_tmp_dir):
    out = tmp_path / "run"
    result = train_rl(_post(bc_checkpoint, out))
    assert result["timesteps"] == 16 and result["env_steps"] == 16 * 4
    ckpts = out / "checkpoints"
    assert json.loads((ckpts / "last.json").read_text()) == {"step": 16, "path": "step_16"}
    # Critic warmup: the update at timestep 8 trained only the value head; the next one moved the VLA.
    bc, warm, moved = _weights(bc_checkpoint), _weights(ckpts / "step_8"), _weights(ckpts / "step_16")
    assert all(torch.equal(bc[k], warm[k]) for k in bc)
    assert any(not torch.equal(bc[k], moved[k]) for k in bc)
    curve = json.loads((out / "eval" / "curve.json").read_text())
    assert [p["timesteps"] for p in curve] == [16] and curve[0]["n"] == 2
    assert (out / "tb").is_dir() and json.loads((out / "rl_config.json").read_text())["reward"] == "dense"

    resumed = train_rl(_post(bc_checkpoint, out, total_timesteps=24, resume=True))
    assert resumed["timesteps"] == 24 and resumed["env_steps"] == 24 * 4
    state = torch.load(ckpts / "step_24" / "training_state.pt", weights_only=True)
    assert state["num_timesteps"] == 24
    assert [p["timesteps"] for p in json.loads((out / "eval" / "curve.json").read_text())] == [16, 24]

    # The checkpoint is a self-contained VLA checkpoint: `vlagym eval` runs it.
    policy = VLAPolicy.from_pretrained(ckpts / "step_24")
    assert policy.config.chunk_size == 4
    results = evaluate(
        EvalConfig(policy=str(ckpts / "step_24"), episodes=2, out=str(tmp_path / "eval"), progress=False)
    )
    assert results["tasks"][TASK]["n"] == 2


def test_resume_refuses_other_bc_weights(bc_checkpoint, tmp_path, in_tmp_dir):
    from rl_helpers import make_bc_checkpoint

    out = tmp_path / "run"
    train_rl(_post(bc_checkpoint, out, total_timesteps=8, eval_every=0, critic_warmup_steps=0))
    other = make_bc_checkpoint(tmp_path / "other", seed=1)
    with pytest.raises(ValueError, match="other BC weights"):
        train_rl(_post(other, out, total_timesteps=16, eval_every=0, critic_warmup_steps=0, resume=True))


def _scratch(out, algo: str, **overrides) -> RLConfig:
    kwargs = dict(
        from_scratch=True,
        algo=algo,
        task=TASK,
        out=str(out),
        total_timesteps=64,
        n_envs=2,
        n_steps=16,
        batch_size=16,
        eval_every=64,
        eval_episodes=2,
        device="cpu",
        progress=False,
    )
    if algo == "sac":
        kwargs.update(learning_starts=16, buffer_size=1000, chunk_size=2)
    return RLConfig(**{**kwargs, **overrides})


@pytest.mark.smoke
@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_from_scratch_smoke(algo, tmp_path, in_tmp_dir):
    out = tmp_path / algo
    result = train_rl(_scratch(out, algo))
    assert result["timesteps"] == 64
    assert 0.0 <= result["success_rate"] <= 1.0
    folder = out / "checkpoints" / "step_64"
    assert (folder / "sb3.zip").is_file() and not (folder / "model.safetensors").exists()
    results = json.loads((out / "eval" / "step_64" / "results.json").read_text())
    assert results["tasks"][TASK]["n"] == 2 and results["seed"] == 100_000
    if algo == "ppo":  # the rollout's time split: env stepping + the rest, each a part of the rollout
        scalars = EventAccumulator(str(out / "tb")).Reload()
        rollout, env_s, policy_s = (
            [e.value for e in scalars.Scalars(f"time/{name}")]
            for name in ("rollout_s", "rollout_env_s", "rollout_policy_s")
        )
        assert len(rollout) == len(env_s) == len(policy_s) >= 2
        for total, env_part, policy_part in zip(rollout, env_s, policy_s, strict=True):
            assert 0 < env_part < total and 0 < policy_part < total
            assert env_part + policy_part == pytest.approx(total, rel=1e-4)


def test_max_minutes_stops_early_and_still_saves(tmp_path, in_tmp_dir):
    out = tmp_path / "timed"
    result = train_rl(_scratch(out, "ppo", total_timesteps=10_000, max_minutes=1e-6, eval_every=0))
    assert 0 < result["timesteps"] < 10_000
    assert (out / "checkpoints" / f"step_{result['timesteps']}" / "sb3.zip").is_file()


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), True])
def test_bad_max_minutes_raises(bad, tmp_path):
    with pytest.raises(ValueError, match="max_minutes"):
        _scratch(tmp_path, "ppo", max_minutes=bad)


def test_same_seed_same_weights(tmp_path, in_tmp_dir):
    a = train_rl(_scratch(tmp_path / "a", "ppo", eval_every=0))["model"].policy.state_dict()
    b = train_rl(_scratch(tmp_path / "b", "ppo", eval_every=0))["model"].policy.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


class _Infos(BaseCallback):
    def __init__(self):
        super().__init__()
        self.steps: list[list[dict]] = []

    def _on_step(self) -> bool:
        self.steps.append([dict(info) for info in self.locals["infos"]])
        return True


def test_truncation_is_bootstrapped(tmp_path, private_tempdir):
    """Sparse reward (0 without success): the stored reward of a truncated step is exactly gamma * V(last obs)."""
    cfg = _scratch(
        tmp_path, "ppo", reward="sparse", max_episode_steps=8, chunk_size=4, total_timesteps=8, n_steps=4, batch_size=8
    )
    model = build_run(cfg).model  # with its own logger (OUT/tb), so SB3 writes no tempdir/SB3-<date> folder
    try:
        recorder = _Infos()
        _, callback = model._setup_learn(8, recorder)
        assert model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=4)
        rewards = model.rollout_buffer.rewards  # (n_steps, n_envs)
        assert len(recorder.steps) == 4
        for t, step_infos in enumerate(recorder.steps):
            for i, info in enumerate(step_infos):
                if t % 2 == 1:  # every second chunk ends at the 8-step limit
                    assert info["TimeLimit.truncated"]
                    obs, _ = model.policy.obs_to_tensor(info["terminal_observation"])
                    with torch.no_grad():
                        value = model.policy.predict_values(obs).item()
                    assert rewards[t, i] == pytest.approx(cfg.gamma * value, rel=1e-5) and value != 0
                else:
                    assert rewards[t, i] == 0.0
    finally:
        model.env.close()
    assert not list(private_tempdir.glob("SB3-*"))  # `learn()` pieces on a bare `build_run` model log to OUT/tb


@pytest.fixture
def private_tempdir(tmp_path, monkeypatch):
    """A fresh folder as `tempfile.gettempdir()`, where SB3 puts the SB3-<date> folder of a model without a logger."""
    folder = tmp_path / "tempdir"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    return folder


def test_runs_write_nothing_to_the_temp_dir(bc_checkpoint, tmp_path, in_tmp_dir, private_tempdir):
    """Post-training, its resume, and both baselines (with their evaluation) log under their `out` folder only."""
    post = tmp_path / "post"
    train_rl(_post(bc_checkpoint, post, total_timesteps=8, eval_every=8, eval_episodes=1, critic_warmup_steps=0))
    train_rl(_post(bc_checkpoint, post, total_timesteps=16, eval_every=0, critic_warmup_steps=0, resume=True))
    for algo in ("ppo", "sac"):
        train_rl(_scratch(tmp_path / algo, algo, total_timesteps=32, eval_every=32, eval_episodes=1))
        assert list((tmp_path / algo / "tb").glob("events.out.tfevents.*"))
    assert not list(private_tempdir.glob("SB3-*"))
    configure(None, [])  # the check looks where SB3 writes: its default folder lands in the private tempdir
    assert len(list(private_tempdir.glob("SB3-*"))) == 1


BAD = [
    (lambda ck: {}, "BC checkpoint"),
    (lambda ck: {"from_scratch": True}, "needs a task"),
    (lambda ck: {"policy": ck, "from_scratch": True, "task": TASK}, "not both"),
    (lambda ck: {"policy": "/nonexistent/ckpt"}, "not a policy checkpoint"),
    (lambda ck: {"policy": ck, "algo": "dqn"}, "algo must be one of"),
    (lambda ck: {"policy": ck, "algo": "sac"}, "uses PPO"),
    (lambda ck: {"policy": ck, "reward": "shaped"}, "reward must be one of"),
    (lambda ck: {"policy": ck, "env_kwargs": {"obs_mode": "rgb"}}, "may not set"),
    (lambda ck: {"from_scratch": True, "task": "VLA-Nope-v0"}, "unknown task"),
    (lambda ck: {"policy": ck, "n_envs": 1, "n_steps": 8, "batch_size": 64}, "larger than a rollout"),
    (lambda ck: {"policy": ck, "chunk_size": 2}, "n_action_steps"),
    (lambda ck: {"policy": ck, "gamma": 0.0}, "gamma"),
    (lambda ck: {"policy": ck, "lr": -1.0}, "lr"),
    (lambda ck: {"from_scratch": True, "task": TASK, "bc_coef": 0.5}, "post-training"),
    (lambda ck: {"policy": ck, "vectorization": "threads"}, "vectorization"),
    (lambda ck: {"policy": ck, "seed": 99_998, "n_envs": 4}, "overlap the evaluation seeds 100000..100019"),
]


@pytest.mark.parametrize("make, match", BAD)
def test_bad_config(bc_checkpoint, make, match):
    with pytest.raises(ValueError, match=match):
        RLConfig(**make(str(bc_checkpoint)))


def test_restart_seeds_step_past_the_evaluation_seeds(bc_checkpoint):
    cfg = RLConfig(policy=str(bc_checkpoint), n_envs=4, eval_seed=100_000, eval_episodes=10)
    assert restart_seed(cfg, 12) == 7919 * 13  # no clash: seed + 7919 * (t + 1)
    for eval_seed in (7919 * 13 + 2, 7919 * 13 - 2):  # sub-envs 102947..102950 would meet an evaluation seed
        clash = RLConfig(policy=str(bc_checkpoint), n_envs=4, eval_seed=eval_seed, eval_episodes=3)
        assert restart_seed(clash, 12) == 7919 * 14


def test_config_round_trip(bc_checkpoint):
    cfg = RLConfig(policy=str(bc_checkpoint))
    assert cfg.chunk_size == 4 and cfg.lr == 5e-6 and cfg.batch_size == 128
    assert RLConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="unknown RLConfig fields"):
        RLConfig.from_dict({**cfg.to_dict(), "lerning_rate": 1.0})


def test_scratch_eval_executes_chunks():
    from vlagym.rl.ppo import SB3ChunkPolicy

    class _Model:
        calls = 0

        def predict(self, obs, deterministic):
            _Model.calls += 1
            return np.tile(np.arange(6, dtype=np.float32), (len(obs), 1)), None

    policy = SB3ChunkPolicy(_Model(), chunk_size=3, action_dim=2)
    obs = np.zeros((2, 5))
    got = [policy(obs) for _ in range(4)]
    np.testing.assert_array_equal(got[1][0], [2, 3])
    assert _Model.calls == 2  # a new chunk after three actions
    policy.reset(np.array([True, False]))
    np.testing.assert_array_equal(policy(obs)[:, 0], [0, 2])  # row 0 restarts its chunk, row 1 goes on


@pytest.mark.parametrize("post", [True, False], ids=["post-training", "from-scratch"])
@pytest.mark.parametrize("reward", ["dense", "sparse"])
def test_dense_training_episodes_run_past_success_and_evaluation_keeps_the_task_s(
    post, reward, bc_checkpoint, tmp_path
):
    """A dense reward is highest in the success state; ending the episode there would forfeit the steps left
    (an agent learns to hover short of success), so dense training runs to the time limit. Sparse keeps it."""
    cfg = _post(bc_checkpoint, tmp_path, reward=reward) if post else _scratch(tmp_path, "ppo", reward=reward)
    run = build_run(cfg)
    try:
        for sub_env in run.model.env.envs:
            assert sub_env.unwrapped.reward_mode == reward
            assert sub_env.unwrapped.terminate_on_success == (reward == "sparse")
    finally:
        run.model.env.close()
    assert not {"reward_mode", "terminate_on_success"} & set(run.eval_env_kwargs)
    # dense: a chunk's reward is its mean per-step reward; sparse keeps the success reward 1
    assert cfg.reward_scale == (1.0 / cfg.chunk_size if reward == "dense" else 1.0)


def test_train_env_kwargs_keep_a_users_terminate_on_success():
    assert train_env_kwargs("dense", {"terminate_on_success": True})["terminate_on_success"] is True
    assert train_env_kwargs("dense", {}) == {"reward_mode": "dense", "terminate_on_success": False}
    assert train_env_kwargs("sparse", {"num_cups": 1}) == {"num_cups": 1, "reward_mode": "sparse"}


def test_defaults_depend_on_the_kind_of_run(bc_checkpoint, tmp_path):
    """Post-training defaults are the measured-stable ones (small lr, a KL limit, BC pull, critic warmup);
    from scratch keeps SB3-like ones and the post-training-only options neutral."""
    post = RLConfig(policy=str(bc_checkpoint), out=str(tmp_path))
    assert (post.lr, post.target_kl, post.n_steps, post.batch_size) == (5e-6, 0.03, 64, 128)
    assert (post.bc_coef, post.critic_warmup_steps, post.reward) == (0.1, 4096, "dense")
    scratch = RLConfig(from_scratch=True, task=TASK, out=str(tmp_path))
    assert (scratch.lr, scratch.target_kl, scratch.n_steps, scratch.batch_size) == (3e-4, None, 32, 64)
    assert (scratch.bc_coef, scratch.critic_warmup_steps, scratch.actor_layers) == (0.0, 0, "all")
    assert RLConfig.from_dict(post.to_dict()) == post  # resolved values survive the round trip
