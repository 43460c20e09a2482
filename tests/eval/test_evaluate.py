"""Success-rate evaluation: statistics, output files, paired seeds, env kwargs, checkpoint adapter."""

from __future__ import annotations

import json
import math
import re
import sys
import types

import imageio.v3 as iio
import mujoco
import numpy as np
import pytest

import vlagym
from vlagym.envs.pick_cup import PickCupEnv
from vlagym.eval.adapters import CheckpointPolicy
from vlagym.eval.configs import EvalConfig, EvalError
from vlagym.eval.evaluate import evaluate
from vlagym.eval.summary import format_results

PICK = "VLA-PickCup-v0"
Z2 = 1.96**2
SUMMARY_KEYS = {"n", "successes", "success_rate", "ci95", "success_at_end_rate", "mean_length", "mean_return"}
EPISODE_KEYS = {
    *("seed", "task", "instruction", "success", "success_at_end", "length", "return", "outcome"),
    *("ever_grasped", "grasped_at_end", "wrong_object", "min_reach_distance", "sim_unstable"),
}


def expert_cfg(tmp_path, **kwargs) -> EvalConfig:
    kwargs.setdefault("tasks", [PICK])
    kwargs.setdefault("episodes", 4)
    kwargs.setdefault("seed", 40)
    return EvalConfig(policy="expert", out=str(tmp_path / "out"), progress=False, **kwargs)


@pytest.mark.smoke
def test_expert_on_pickcup_succeeds_and_writes_results(tmp_path):
    results = evaluate(expert_cfg(tmp_path, num_envs=2))
    s = results["tasks"][PICK]
    assert SUMMARY_KEYS <= set(s)
    assert s["n"] == 4 and s["successes"] == 4 and s["success_rate"] == 1.0 and s["success_at_end_rate"] == 1.0
    # closed form of the Wilson interval at p = 1: [n / (n + z^2), 1]
    assert s["ci95"][0] == pytest.approx(4 / (4 + Z2)) and s["ci95"][1] == 1.0
    assert [e["seed"] for e in s["episodes"]] == [40, 41, 42, 43]
    assert all(set(e) == EPISODE_KEYS and e["task"] == PICK and e["instruction"] for e in s["episodes"])
    assert s["mean_length"] == pytest.approx(np.mean([e["length"] for e in s["episodes"]]))
    assert s["mean_return"] == pytest.approx(np.mean([e["return"] for e in s["episodes"]]))
    assert 0 < s["mean_length"] < 100 and s["mean_return"] > 0

    out = tmp_path / "out"
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(results))
    config = json.loads((out / "eval_config.json").read_text())
    assert config["config"]["policy"] == "expert" and config["config"]["seed"] == 40 and config["tasks"] == [PICK]
    # the machine beside the figures: the expert ran on state observations, so nothing was rendered
    assert results["machine"]["versions"]["mujoco"] == mujoco.__version__
    assert results["machine"]["gl_renderer"].startswith("not used")
    lines = (out / "results.md").read_text().strip().splitlines()
    assert lines[0] == "| task | n | success | 95% CI | success at end | mean length | mean return |"
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[:3] == [PICK, "4", "100.0%"] and lines[3] == ""
    assert lines[4].startswith("Outcomes") and lines[-1].startswith(f"| {PICK} | 4 | 0 |")  # 4 successes, no failures
    assert cells[3] == f"[{4 / (4 + Z2):.1%}, 100.0%]"
    assert not list(out.glob(".*tmp*"))  # atomic writes leave no temp files


def test_same_seeds_give_identical_records_for_any_num_envs(tmp_path):
    one = evaluate(expert_cfg(tmp_path / "a", episodes=5, num_envs=1))["tasks"][PICK]["episodes"]
    two = evaluate(expert_cfg(tmp_path / "b", episodes=5, num_envs=2))["tasks"][PICK]["episodes"]
    assert one == two
    other = evaluate(expert_cfg(tmp_path / "c", episodes=5, seed=41))["tasks"][PICK]["episodes"]
    assert other[:4] == one[1:]  # seed BASE+i: shifting the base shifts the episodes


def test_env_kwargs_reach_the_env(tmp_path):
    results = evaluate(expert_cfg(tmp_path, episodes=6, env_kwargs={"instruction_split": "heldout"}))
    patterns = [re.escape(t).replace(re.escape("{color}"), r"\w+") for t in PickCupEnv.templates["heldout"]]
    instructions = [e["instruction"] for e in results["tasks"][PICK]["episodes"]]
    assert all(any(re.fullmatch(p, text) for p in patterns) for text in instructions), instructions
    assert results["env_kwargs"]["instruction_split"] == "heldout"


def test_multitask_records_the_drawn_task(tmp_path):
    results = evaluate(expert_cfg(tmp_path, tasks=["VLA-MultiTask-v0"], episodes=4, num_envs=2))
    s = results["tasks"]["VLA-MultiTask-v0"]
    drawn = [e["task"] for e in s["episodes"]]
    assert all(t in vlagym.TASKS and t != "VLA-MultiTask-v0" for t in drawn)
    assert set(s["by_task"]) == set(drawn)
    assert sum(b["n"] for b in s["by_task"].values()) == 4
    table = format_results(results)
    assert all(f"| ↳ {task} |" in table for task in drawn)


def test_videos_of_the_first_episodes(tmp_path):
    results = evaluate(expert_cfg(tmp_path, episodes=2, videos=1, image_size=32))
    s = results["tasks"][PICK]
    assert len(s["videos"]) == 1 and s["videos"][0].endswith(f"{PICK}_seed40.mp4")
    frames = iio.imread(s["videos"][0])
    assert frames.shape == (s["episodes"][0]["length"] + 1, 32, 32, 3)
    assert not results["machine"]["gl_renderer"].startswith("not used")  # the videos rendered: name the renderer


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"tasks": ["VLA-Nope-v0"]}, "unknown task"),
        ({"episodes": 0}, "episodes"),
        ({"vectorization": "threads"}, "vectorization must be one of"),
        ({"tasks": []}, "at least one task"),
        ({"image_size": 31}, "31"),
    ],
)
def test_bad_config_raises(tmp_path, kwargs, match):
    with pytest.raises(EvalError, match=match):
        expert_cfg(tmp_path, **kwargs)


def test_not_a_checkpoint_raises(tmp_path):
    with pytest.raises(EvalError, match="does not exist"):
        EvalConfig(policy=str(tmp_path / "missing"), tasks=[PICK])
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(EvalError, match="missing model.safetensors"):
        EvalConfig(policy=str(tmp_path), tasks=[PICK])


# ---------------------------------------------------------------------------- checkpoint adapter (fake VLAPolicy)
class ZeroVLA:
    """Stands in for vlagym.policies.VLAPolicy: always the zero action; records what it was given."""

    instances: list[ZeroVLA] = []

    def __init__(self):
        self.resets, self.batches = 0, []

    @classmethod
    def from_pretrained(cls, folder):
        policy = cls()
        cls.instances.append(policy)
        return policy

    def eval(self):
        return self

    def reset(self):
        self.resets += 1

    def batch_from_obs(self, obs):
        self.batches.append(obs)
        return obs

    def select_action(self, batch):
        import torch

        return torch.zeros(len(batch["proprio"]), 7)


@pytest.fixture
def zero_checkpoint(tmp_path, monkeypatch):
    ZeroVLA.instances.clear()
    monkeypatch.setitem(sys.modules, "vlagym.policies", types.SimpleNamespace(VLAPolicy=ZeroVLA))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    env_kwargs = {"obs_mode": "rgb", "image_size": 32, "cameras": ["front"], "max_episode_steps": 6}
    (folder / "config.json").write_text(json.dumps({"extra": {"env_id": PICK, "env_kwargs": env_kwargs}}))
    return folder


def test_zero_policy_fails_with_valid_intervals(tmp_path, zero_checkpoint):
    cfg = EvalConfig(policy=str(zero_checkpoint), episodes=3, num_envs=2, out=str(tmp_path / "out"), progress=False)
    results = evaluate(cfg)
    s = results["tasks"][PICK]  # the checkpoint's own task when none is given
    assert s["successes"] == 0 and s["success_rate"] == 0.0 and s["success_at_end_rate"] == 0.0
    assert s["ci95"][0] == 0.0 and s["ci95"][1] == pytest.approx(Z2 / (3 + Z2))
    assert [e["length"] for e in s["episodes"]] == [6, 6, 6]  # the checkpoint's env kwargs reach the env
    policy = ZeroVLA.instances[0]
    assert policy.batches[0]["images"]["front"].shape == (2, 32, 32, 3)
    assert policy.resets >= 2  # no per-row reset: the whole queue is cleared at each episode start
    assert math.isfinite(s["mean_return"])


def test_env_kwargs_override_the_checkpoints(tmp_path, zero_checkpoint):
    cfg = EvalConfig(
        policy=str(zero_checkpoint),
        tasks=[PICK],
        episodes=1,
        out=str(tmp_path / "out"),
        env_kwargs={"image_size": 16, "max_episode_steps": 3},
        progress=False,
    )
    results = evaluate(cfg)
    assert results["tasks"][PICK]["episodes"][0]["length"] == 3
    assert ZeroVLA.instances[0].batches[0]["images"]["front"].shape == (1, 16, 16, 3)


def test_masked_reset_is_used_when_the_policy_offers_it(zero_checkpoint):
    class MaskedZeroVLA(ZeroVLA):
        def reset(self, mask=None):
            self.resets += 1
            self.last_mask = mask

    sys.modules["vlagym.policies"].VLAPolicy = MaskedZeroVLA
    policy = CheckpointPolicy(zero_checkpoint)
    policy.reset(np.array([True, False]))
    assert policy.policy.last_mask.tolist() == [True, False]
    assert policy.env_id == PICK and policy.env_kwargs["image_size"] == 32


def test_missing_policies_package_is_a_clear_error(zero_checkpoint, monkeypatch):
    monkeypatch.setitem(sys.modules, "vlagym.policies", None)  # makes the import fail
    with pytest.raises(EvalError, match="vlagym.policies is not available"):
        CheckpointPolicy(zero_checkpoint)


# ---------------------------------------------------------------------------- a real VLAPolicy checkpoint
def tiny_checkpoint(tmp_path, **env_kwargs):
    """A tiny untrained VLA checkpoint (one camera, 32 px, chunks of 4) for PickCup, with `env_kwargs`."""
    policies = pytest.importorskip("vlagym.policies", reason="vlagym.policies (the VLA) is not available")
    config = policies.VLAConfig(
        cameras=("front",), image_size=32, vision_channels=(8,), hidden_dim=16, text_layers=1, text_heads=2,
        chunk_size=4, trunk_layers=1,
    )  # fmt: skip
    folder = tmp_path / "ckpt"
    policies.save_checkpoint(policies.VLAPolicy(config), folder, extra={"env_id": PICK, "env_kwargs": env_kwargs})
    return folder


def test_real_checkpoint_is_evaluated_with_its_own_env_settings(tmp_path):
    folder = tiny_checkpoint(tmp_path, max_episode_steps=5)
    runs = []
    for name, num_envs in (("a", 1), ("b", 1), ("c", 2)):
        cfg = EvalConfig(policy=str(folder), episodes=3, num_envs=num_envs, out=str(tmp_path / name), progress=False)
        runs.append(evaluate(cfg))
    s = runs[0]["tasks"][PICK]
    assert runs[0]["env_kwargs"] == {"obs_mode": "rgb", "image_size": 32, "cameras": ["front"], "max_episode_steps": 5}
    assert s["n"] == 3 and [e["length"] for e in s["episodes"]] == [5, 5, 5]
    assert 0.0 <= s["ci95"][0] <= s["success_rate"] <= s["ci95"][1] <= 1.0
    assert runs[1]["tasks"][PICK]["episodes"] == s["episodes"]  # deterministic head, same seeds: same episodes
    assert [e["instruction"] for e in runs[2]["tasks"][PICK]["episodes"]] == [e["instruction"] for e in s["episodes"]]


@pytest.mark.parametrize(
    "execution, calls, recorded",
    [
        ({}, 2, (4, False)),  # the checkpoint's own: a chunk of 4 at steps 0 and 4
        ({"n_action_steps": 2}, 3, (2, False)),
        ({"temporal_ensemble": True}, 5, (1, True)),
    ],
)
def test_chunk_execution_can_be_overridden(tmp_path, monkeypatch, execution, calls, recorded):
    folder = tiny_checkpoint(tmp_path, max_episode_steps=5)
    policies = pytest.importorskip("vlagym.policies")
    predicted = []
    real = policies.VLAPolicy.predict_action_chunk
    monkeypatch.setattr(
        policies.VLAPolicy, "predict_action_chunk", lambda *a, **k: predicted.append(1) or real(*a, **k)
    )
    cfg = EvalConfig(policy=str(folder), episodes=1, out=str(tmp_path / "out"), progress=False, **execution)
    results = evaluate(cfg)
    assert results["tasks"][PICK]["episodes"][0]["length"] == 5 and len(predicted) == calls
    n, ensemble = recorded
    assert results["chunk_execution"] == {"chunk_size": 4, "n_action_steps": n, "temporal_ensemble": ensemble}


def test_chunk_execution_errors(tmp_path):
    folder = tiny_checkpoint(tmp_path)
    with pytest.raises(EvalError, match="n_action_steps=5 must be <= chunk_size=4"):
        evaluate(EvalConfig(policy=str(folder), episodes=1, out=str(tmp_path / "o"), progress=False, n_action_steps=5))
    with pytest.raises(EvalError, match="not both"):
        EvalConfig(policy=str(folder), n_action_steps=2, temporal_ensemble=True)
    with pytest.raises(EvalError, match="at least 1"):
        EvalConfig(policy=str(folder), n_action_steps=0)
    with pytest.raises(EvalError, match="not the expert"):
        expert_cfg(tmp_path, n_action_steps=2)
