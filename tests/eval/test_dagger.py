"""DAgger demos: a policy acts, the recovering expert labels (`vlagym.eval.dagger`, `vlagym demos --policy`)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from vlagym.eval.dagger import collect_dagger_demos
from vlagym.policies import VLAConfig, VLAPolicy
from vlagym.policies.checkpoint import save_checkpoint
from vlagym.train.configs import DemoConfig, DemoError
from vlagym.train.demos import collect_demos
from vlagym.wrappers.language import Tokenizer
from vlagym.wrappers.normalize import NormStats

TASK = "VLA-PickCup-v0"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny untrained VLA on 32 px front + wrist images: it acts, and fails."""
    import torch

    torch.manual_seed(0)
    config = VLAConfig(image_size=32, vision_channels=(8,), hidden_dim=16, text_layers=1, text_heads=2,
                       chunk_size=4, trunk_layers=1)  # fmt: skip
    policy = VLAPolicy(config, Tokenizer.from_tasks())
    rng = np.random.default_rng(0)
    actions = np.concatenate([rng.normal(0.0, 0.3, (200, 6)), rng.choice([-1.0, 1.0], (200, 1))], axis=1)
    policy.set_stats(NormStats.from_arrays({"action": actions, "proprio": rng.normal(0.0, 0.5, (200, 23))}))
    folder = tmp_path_factory.mktemp("dagger") / "ckpt"
    save_checkpoint(policy, folder, extra={"env_id": TASK, "env_kwargs": {"image_size": 32}})
    return str(folder)


def dagger_cfg(tmp_path, checkpoint, name="dagger.hdf5", **kwargs) -> DemoConfig:
    values = dict(task=TASK, policy=checkpoint, episodes=3, image_size=32, keep_failures=True,
                  env_kwargs={"max_episode_steps": 12}, out=str(tmp_path / name))  # fmt: skip
    return DemoConfig(**{**values, **kwargs})


def read(path):
    with h5py.File(path, "r") as f:
        return {
            name: {key: f["data"][name][key][()] for key in ("actions", "expert_actions", "states")}
            | {"success": bool(f["data"][name].attrs["success"]), "seed": int(f["data"][name].attrs["seed"])}
            for name in f["data"]
        }


def test_the_policy_acts_and_the_expert_labels(tmp_path, checkpoint):
    summary = collect_dagger_demos(dagger_cfg(tmp_path, checkpoint, num_envs=2))
    demos = read(summary.path)
    assert summary.demos == 3 and summary.successes == 0  # an untrained policy: every episode kept as a failure
    for demo in demos.values():
        assert len(demo["actions"]) == len(demo["expert_actions"]) == 12
        # the executed actions are the policy's, not the expert's approach (which opens the gripper and moves)
        assert not np.allclose(demo["actions"], demo["expert_actions"])
        assert np.all(demo["expert_actions"][:, -1] == -1.0)  # the expert is still approaching, hand open


def test_the_file_replays_and_is_the_same_run_after_run(tmp_path, checkpoint):
    import gymnasium as gym

    first = read(collect_dagger_demos(dagger_cfg(tmp_path, checkpoint, "a.hdf5")).path)
    second = read(collect_dagger_demos(dagger_cfg(tmp_path, checkpoint, "b.hdf5", num_envs=2)).path)
    for name, demo in first.items():
        np.testing.assert_allclose(demo["actions"], second[name]["actions"], atol=1e-5)
    demo = first["demo_0"]  # the recorded actions, replayed in a plain env, give the recorded states
    env = gym.make(TASK, obs_mode="state", max_episode_steps=12)
    env.reset(seed=demo["seed"])
    for t, action in enumerate(demo["actions"]):
        np.testing.assert_array_equal(env.unwrapped.sim_state(), demo["states"][t])
        env.step(action)
    env.close()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"action_noise": 0.1}, "action_noise"),
        ({"obs_mode": "state"}, "camera images"),
        ({"backend": "ray"}, "backend 'local'"),
        ({"policy": ""}, "checkpoint folder"),
        ({"task": "VLA-PushCube-v0"}, "cannot label"),  # its expert's re-approach rule made the policy worse
        ({"task": "VLA-MultiTask-v0"}, "cannot label"),
    ],
)
def test_bad_configs_are_refused(tmp_path, checkpoint, kwargs, match):
    with pytest.raises(DemoError, match=match):
        dagger_cfg(tmp_path, checkpoint, **kwargs)


def test_a_policy_trained_on_other_images_is_refused(tmp_path, checkpoint):
    with pytest.raises(DemoError, match="image_size 32"):
        collect_dagger_demos(dagger_cfg(tmp_path, checkpoint, image_size=64))
    with pytest.raises(DemoError, match="does not exist"):
        collect_dagger_demos(dagger_cfg(tmp_path, str(tmp_path / "nothing")))
    with pytest.raises(DemoError, match="plain demos"):
        collect_dagger_demos(dagger_cfg(tmp_path, "expert"))


def test_collect_demos_wants_the_loaded_policy(tmp_path, checkpoint):
    with pytest.raises(DemoError, match="collect_dagger_demos"):
        collect_demos(dagger_cfg(tmp_path, checkpoint))


def test_a_resume_must_keep_the_policy(tmp_path, checkpoint):
    cfg = dagger_cfg(tmp_path, checkpoint, episodes=1)
    collect_dagger_demos(cfg)
    with pytest.raises(DemoError, match="policy"):
        collect_demos(DemoConfig(task=TASK, episodes=2, image_size=32, keep_failures=True, out=cfg.out, resume=True,
                                 env_kwargs={"max_episode_steps": 12}))  # fmt: skip


def test_an_episode_the_expert_gives_up_on_ends_there(tmp_path, checkpoint, monkeypatch):
    from vlagym.envs.expert import PickExpert

    steps = {"n": 0}

    def hopeless_after_four(self):  # as if the policy knocked the cup over on its 4th step
        steps["n"] += 1
        return steps["n"] % 4 == 0

    monkeypatch.setattr(PickExpert, "hopeless", hopeless_after_four)
    summary = collect_dagger_demos(dagger_cfg(tmp_path, checkpoint, episodes=2))
    assert summary.cut_short == 2 and summary.failures == 2 and summary.demos == 2
    for demo in read(summary.path).values():
        assert len(demo["actions"]) == len(demo["expert_actions"]) == 4 and not demo["success"]
    # the plain expert's demos never ask
    plain = collect_demos(DemoConfig(task=TASK, episodes=1, image_size=32, env_kwargs={"max_episode_steps": 12},
                                     out=str(tmp_path / "plain.hdf5"), keep_failures=True))  # fmt: skip
    assert plain.cut_short == 0 and steps["n"] == 8
