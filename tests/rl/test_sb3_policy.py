"""The VLA as an SB3 policy: its initial mean is the BC policy's chunk, the actor never reads the state, the
critic never moves the actor's features."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from rl_helpers import TASK

from vlagym.policies import VLAPolicy
from vlagym.rl.envs import NormalizedChunkAction
from vlagym.rl.ppo import RLConfig, build_run
from vlagym.rl.sb3_policy import VLAActorCriticPolicy

SEED = 123


def _run(bc_checkpoint, tmp_path, **overrides):
    cfg = RLConfig(
        policy=str(bc_checkpoint),
        out=str(tmp_path / "run"),
        n_envs=2,
        n_steps=4,
        batch_size=4,
        device="cpu",
        progress=False,
        **overrides,
    )
    return build_run(cfg)


def _chunk_wrapper(run) -> NormalizedChunkAction:
    env = run.model.env.venv.envs[0]
    while not isinstance(env, NormalizedChunkAction):
        env = env.env
    return env


def _bc_chunks(bc_checkpoint, n: int) -> np.ndarray:
    """The BC policy's first `n` actions (env units) on the raw observations of seeds SEED, SEED + 1."""
    bc = VLAPolicy.from_pretrained(bc_checkpoint)
    env = gym.make(TASK, obs_mode="rgb", image_size=32, cameras=["front", "wrist"])
    try:
        raws = [env.reset(seed=SEED + i)[0] for i in range(2)]
    finally:
        env.close()
    batch = {
        "images": {cam: np.stack([r["images"][cam] for r in raws]) for cam in ("front", "wrist")},
        "proprio": np.stack([r["proprio"] for r in raws]),
        "instruction": [r["instruction"] for r in raws],
    }
    return bc.predict_action_chunk(bc.batch_from_obs(batch))[:, :n].numpy()


def test_initial_mean_is_the_bc_chunk(bc_checkpoint, tmp_path):
    run = _run(bc_checkpoint, tmp_path)
    model, policy = run.model, run.model.policy
    assert isinstance(policy, VLAActorCriticPolicy)
    k, a = run.cfg.chunk_size, policy.vla.config.action_dim
    model.env.seed(SEED)
    obs = model.env.reset()
    expected = _bc_chunks(bc_checkpoint, k)  # (2, k, A) env units, unclipped

    obs_tensor, _ = policy.obs_to_tensor(obs)
    with torch.no_grad():
        mean = policy.get_distribution(obs_tensor).mode().reshape(2, k, a)
    unnormalised = (mean * policy.vla.action_scale + policy.vla.action_offset).numpy()
    np.testing.assert_allclose(unnormalised, expected, atol=1e-5)

    # SB3's deterministic action, mapped to the env by the wrapper, is what `vlagym eval` executes: the BC chunk
    # clipped to [-1, 1], with the gripper snapped to +-1 (the checkpoint's binary_gripper, on by default).
    assert policy.vla.config.binary_gripper
    actions, _ = model.predict(obs, deterministic=True)
    executed = _chunk_wrapper(run).action(actions[0])
    decoded = np.clip(expected[0], -1, 1)
    decoded[:, -1] = np.where(expected[0][:, -1] >= 0, 1.0, -1.0)
    np.testing.assert_allclose(executed, decoded, atol=1e-5)
    assert torch.all(policy.log_std == -2.0)
    model.env.close()


def test_actor_ignores_state_and_critic_reads_it(bc_checkpoint, tmp_path):
    run = _run(bc_checkpoint, tmp_path, critic_state=True)
    policy = run.model.policy
    run.model.env.seed(0)
    obs_tensor, _ = policy.obs_to_tensor(run.model.env.reset())
    other = dict(obs_tensor, state=torch.randn_like(obs_tensor["state"]) * 3)
    with torch.no_grad():
        mean = policy.get_distribution(obs_tensor).mode()
        mean_other = policy.get_distribution(other).mode()
        values, values_other = policy.predict_values(obs_tensor), policy.predict_values(other)
    torch.testing.assert_close(mean, mean_other, rtol=0, atol=0)
    assert not torch.allclose(values, values_other)
    run.model.env.close()


def test_feature_critic_does_not_train_the_vla(bc_checkpoint, tmp_path):
    run = _run(bc_checkpoint, tmp_path, critic_state=False)
    policy = run.model.policy
    assert "state" not in policy.observation_space.spaces
    run.model.env.seed(0)
    obs_tensor, _ = policy.obs_to_tensor(run.model.env.reset())
    policy.predict_values(obs_tensor).sum().backward()
    assert all(p.grad is None for p in policy.vla.parameters())
    assert all(p.grad is not None for p in policy.value_net.parameters())
    run.model.env.close()


def test_flow_head_is_refused(flow_checkpoint, tmp_path):
    with pytest.raises(ValueError, match="'l1' head"):
        RLConfig(policy=str(flow_checkpoint), out=str(tmp_path))


def test_head_only_actor_moves_the_head_and_nothing_else(bc_checkpoint, tmp_path):
    """actor_layers="head": PPO updates change the action head (and log-std), never the encoders or trunk, and
    the BC penalty's shortcut (the BC head on the shared frozen features) equals the full BC forward."""
    run = _run(bc_checkpoint, tmp_path, actor_layers="head", bc_coef=0.1, critic_warmup_steps=0, n_epochs=2)
    policy = run.model.policy
    before = {k: v.clone() for k, v in policy.vla.state_dict().items()}
    run.model.env.seed(0)
    obs_tensor, _ = policy.obs_to_tensor(run.model.env.reset())
    features = policy.extract_features(obs_tensor)
    assert not features.requires_grad  # the frozen trunk keeps no graph
    torch.testing.assert_close(run.model._reference_mean(obs_tensor, features), run.model._reference_mean(obs_tensor))
    try:
        run.model.learn(total_timesteps=8)
    finally:
        run.model.env.close()
    after = policy.vla.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("head.") for k in changed), sorted(changed)


def test_actor_layers_must_be_known(bc_checkpoint, tmp_path):
    with pytest.raises(ValueError, match="actor_layers"):
        RLConfig(policy=str(bc_checkpoint), out=str(tmp_path), actor_layers="trunk")
    with pytest.raises(ValueError, match="actor_layers applies to post-training"):
        RLConfig(from_scratch=True, task=TASK, out=str(tmp_path), actor_layers="head")


def test_log_std_lr_gets_its_own_param_group(bc_checkpoint, tmp_path):
    """Without log_std_lr the log-std learns at the actor's lr (two groups, as before); with it, a third group."""
    plain = _run(bc_checkpoint, tmp_path / "a")
    groups = plain.model.policy.optimizer.param_groups
    assert len(groups) == 2 and any(p is plain.model.policy.log_std for p in groups[0]["params"])
    plain.model.env.close()
    own = _run(bc_checkpoint, tmp_path / "b", log_std_lr=1e-3)
    groups = own.model.policy.optimizer.param_groups
    assert len(groups) == 3 and groups[2]["lr"] == 1e-3 and groups[2]["params"] == [own.model.policy.log_std]
    assert not any(p is own.model.policy.log_std for p in groups[0]["params"])
    own.model.env.close()
