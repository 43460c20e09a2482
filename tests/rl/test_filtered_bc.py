"""Filtered-BC post-training runs: checkpoints, curve and logs, exact resume, the schedule and time limit, the
weights and filters of the successes, and the recipe end to end."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from rl_helpers import TASK
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vlagym.eval.configs import EvalConfig
from vlagym.eval.diagnostics import OUTCOMES
from vlagym.eval.evaluate import evaluate
from vlagym.policies.vla import VLAPolicy
from vlagym.rl.collection.episodes import gripper_reopens
from vlagym.rl.fbc import FilteredBCConfig, train_filtered_bc
from vlagym.rl.fbc.buffer import read_sample_weights, rollout_path
from vlagym.rl.fbc.loop import out_of_time
from vlagym.rl.fbc.phases import lr_at
from vlagym.train.run_files import latest_checkpoint


def _reopen_after_first_close(episode):
    """Make an episode's gripper open again one step after it first closed (in place)."""
    closed = np.flatnonzero(episode.actions[:, -1] > 0)
    episode.actions[closed[0] + 1, -1] = -1.0


def _config(checkpoint, demo_file, out, **overrides):
    kwargs = dict(
        policy=str(checkpoint),
        demos=[str(demo_file)],
        out=str(out),
        rounds=2,
        episodes_per_round=2,
        n_envs=2,
        updates_per_round=2,
        batch_size=4,
        eval_every=1,
        eval_episodes=1,
        device="cpu",
        progress=False,
    )
    return FilteredBCConfig(**{**kwargs, **overrides})


@pytest.mark.smoke
def test_run_writes_checkpoints_curve_and_evaluates(bc_checkpoint, demo_file, tmp_path):
    result = train_filtered_bc(_config(bc_checkpoint, demo_file, tmp_path / "run"))
    assert result["rounds"] == 2 and result["updates"] == 4 and result["env_steps"] > 0
    assert [(c["round"], c["updates"]) for c in result["curve"]] == [(1, 2), (2, 4)]
    assert json.loads((tmp_path / "run" / "eval" / "curve.json").read_text()) == result["curve"]
    ckpt = tmp_path / "run" / "checkpoints" / "step_4"
    assert result["checkpoint"] == str(ckpt)
    meta = json.loads((ckpt / "config.json").read_text())
    assert meta["extra"]["env_id"] == TASK
    assert FilteredBCConfig.from_dict(meta["extra"]["rl_config"]).rounds == 2  # the run's config, whole
    scalars = EventAccumulator(str(tmp_path / "run" / "tb")).Reload()
    shares = {o: [e.value for e in scalars.Scalars(f"rollout/outcome_{o}")] for o in OUTCOMES}
    assert np.allclose(np.sum(list(shares.values()), axis=0), 1.0)  # every collection episode has one outcome
    success = [e.value for e in scalars.Scalars("rollout/success_rate")]
    np.testing.assert_allclose(shares["success"], success)
    results = evaluate(EvalConfig(policy=str(ckpt), episodes=1, out=str(tmp_path / "ev"), progress=False))
    assert results["tasks"][TASK]["n"] == 1
    # the weights moved away from the BC checkpoint's
    before = load_file(str(bc_checkpoint / "model.safetensors"))
    after = load_file(str(ckpt / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize(
    "schedule, groups", [("constant", {}), ("cosine", {"group_size": 2, "weighting": "state", "gamma": 0.95})]
)
def test_resume_equals_an_uninterrupted_run(bc_checkpoint, demo_file, tmp_path, schedule, groups):
    common = dict(eval_every=0, lr_schedule=schedule, **groups)
    straight = train_filtered_bc(_config(bc_checkpoint, demo_file, tmp_path / "a", **common))
    # the first half alone, stopped by the time limit, so that its schedule is the whole run's
    train_filtered_bc(_config(bc_checkpoint, demo_file, tmp_path / "b", max_minutes=1e-9, **common))
    assert latest_checkpoint(tmp_path / "b").name == "step_2"
    resumed = train_filtered_bc(_config(bc_checkpoint, demo_file, tmp_path / "b", resume=True, **common))
    assert (resumed["rounds"], resumed["updates"], resumed["env_steps"]) == (
        straight["rounds"],
        straight["updates"],
        straight["env_steps"],
    )
    a = load_file(str(tmp_path / "a" / "checkpoints" / "step_4" / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / "checkpoints" / "step_4" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_frozen_encoders_keep_their_bc_weights(bc_checkpoint, demo_file, tmp_path):
    cfg = _config(bc_checkpoint, demo_file, tmp_path / "run", rounds=1, eval_every=0, freeze_encoders=True)
    assert train_filtered_bc(cfg)["updates"] == 2
    before = load_file(str(bc_checkpoint / "model.safetensors"))
    after = load_file(str(tmp_path / "run" / "checkpoints" / "step_2" / "model.safetensors"))
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all(k.startswith(("trunk.", "head.", "proprio.")) for k in moved), sorted(moved)
    assert any(k.startswith("head.") for k in moved)


def test_time_limit_stops_before_a_round_that_would_not_fit(bc_checkpoint):
    cfg = FilteredBCConfig(policy=str(bc_checkpoint), demos=[], max_minutes=10)
    assert not out_of_time(cfg, 0.0, 0.0)  # the first round always runs
    assert not out_of_time(cfg, 480.0, 120.0)  # it ends at 600 s: within the limit
    assert out_of_time(cfg, 481.0, 120.0)  # it would end past 600 s
    assert out_of_time(cfg, 600.0, 0.0)  # spent (a resumed run knows no round length)
    assert not out_of_time(dataclasses.replace(cfg, max_minutes=None), 1e9, 1e9)


def test_cosine_schedule_decays_to_zero_over_the_runs_updates(bc_checkpoint):
    cfg = FilteredBCConfig(policy=str(bc_checkpoint), demos=[], rounds=4, updates_per_round=25, lr_schedule="cosine")
    assert [round(lr_at(cfg, u) / cfg.lr, 6) for u in (0, 50, 100, 120)] == [1.0, 0.5, 0.0, 0.0]
    constant = dataclasses.replace(cfg, lr_schedule="constant")
    assert {lr_at(constant, u) for u in (0, 50, 100)} == {cfg.lr}


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_state_weighting_trains_on_weighted_successes(bc_checkpoint, demo_file, tmp_path, expert_collects, gamma):
    expert_collects()  # every try succeeds, so the weighted buffer is trained on
    cfg = _config(bc_checkpoint, demo_file, tmp_path / "run", group_size=2, weighting="state", eval_every=0,
                  gamma=gamma)  # fmt: skip
    result = train_filtered_bc(cfg)
    assert result["updates"] == 4
    all_lengths = []
    for r in range(2):  # one state per round, tried twice: both successes share its unit of weight
        path = rollout_path(tmp_path / "run", r)
        with h5py.File(path, "r") as f:
            lengths = np.array([len(demo["actions"]) for demo in f["data"].values()])
        np.testing.assert_allclose(read_sample_weights(path), 0.5 * gamma**lengths)
        all_lengths += list(lengths)
    scalars = EventAccumulator(str(tmp_path / "run" / "tb")).Reload()
    mean_length = [e.value for e in scalars.Scalars("buffer/mean_episode_length")]
    np.testing.assert_allclose(mean_length, [np.mean(all_lengths[:2]), np.mean(all_lengths)], rtol=1e-6)


def test_max_gripper_reopens_keeps_reopening_successes_out_of_the_buffer(
    bc_checkpoint, demo_file, tmp_path, expert_collects
):
    def reopen_first(collection, envs, actor, seeds):  # the first success of a round re-opens its gripper
        _reopen_after_first_close(collection.successes[0])
        return collection

    expert_collects(reopen_first)
    kept = {}
    for limit in (None, 0):
        out = tmp_path / f"run_{limit}"
        train_filtered_bc(_config(bc_checkpoint, demo_file, out, eval_every=0, max_gripper_reopens=limit))
        kept[limit] = []
        for r in range(2):
            with h5py.File(rollout_path(out, r), "r") as f:
                kept[limit].append([gripper_reopens(demo["actions"][()]) for demo in f["data"].values()])
        scalars = EventAccumulator(str(out / "tb")).Reload()
        assert [e.value for e in scalars.Scalars("rollout/success_reopen_share")] == [0.5, 0.5]
        filtered = [e.value for e in scalars.Scalars("rollout/successes_filtered")]
        assert filtered == ([0, 0] if limit is None else [1, 1])
    assert kept[None] == [[1, 0], [1, 0]]
    assert kept[0] == [[0], [0]]


def test_max_close_distance_keeps_successes_closed_far_away_out_of_the_buffer(
    bc_checkpoint, demo_file, tmp_path, expert_collects
):
    def close_far(collection, envs, actor, seeds):  # the first success of a round "closed" 9 cm off
        successes = collection.successes
        successes[0] = dataclasses.replace(successes[0], close_distance=0.09)
        successes[1] = dataclasses.replace(successes[1], close_distance=None)  # a task without a reach distance
        return collection

    expert_collects(close_far)
    kept = {}
    for limit in (None, 0.04):
        out = tmp_path / f"run_{limit}"
        train_filtered_bc(_config(bc_checkpoint, demo_file, out, eval_every=0, max_close_distance=limit))
        kept[limit] = []
        for r in range(2):
            with h5py.File(rollout_path(out, r), "r") as f:
                kept[limit].append([demo.attrs.get("close_distance") for demo in f["data"].values()])
        scalars = EventAccumulator(str(out / "tb")).Reload()
        assert [e.value for e in scalars.Scalars("rollout/success_close_distance_p50")] == pytest.approx([0.09] * 2)
        tags = scalars.Tags()["scalars"]
        if limit is None:
            assert not any(tag.startswith("far_close/") for tag in tags)
        else:
            assert [e.value for e in scalars.Scalars("far_close/rollout")] == [1, 1]
            assert [e.value for e in scalars.Scalars("far_close/hindsight")] == [0, 0]
    assert kept[None] == [[0.09, None], [0.09, None]]
    assert kept[0.04] == [[None], [None]]


def test_n_action_steps_sets_how_the_policy_acts_and_is_saved(bc_checkpoint, demo_file, tmp_path, monkeypatch):
    predicted = []
    real = VLAPolicy.predict_action_chunk
    monkeypatch.setattr(VLAPolicy, "predict_action_chunk", lambda *a, **k: predicted.append(1) or real(*a, **k))
    cfg = _config(bc_checkpoint, demo_file, tmp_path / "run", rounds=1, episodes_per_round=1, n_envs=1,
                  eval_every=0, n_action_steps=1)  # fmt: skip
    result = train_filtered_bc(cfg)
    # one chunk per step of the one episode (the checkpoint's 4 would predict once every 4 steps)
    assert len(predicted) == result["env_steps"] > 4
    saved = json.loads((Path(result["checkpoint"]) / "config.json").read_text())["config"]
    assert saved["n_action_steps"] == 1 and saved["temporal_ensemble"] is False
    assert json.loads((bc_checkpoint / "config.json").read_text())["config"]["n_action_steps"] == 4


def test_no_demos_and_no_successes_skips_training(bc_checkpoint, tmp_path, caplog):
    cfg = FilteredBCConfig(policy=str(bc_checkpoint), demos=[], out=str(tmp_path / "r"), rounds=1,
                           episodes_per_round=1, n_envs=1, eval_every=0, device="cpu", progress=False)  # fmt: skip
    result = train_filtered_bc(cfg)
    assert result["updates"] == 0 and "nothing to train on" in caplog.text
    assert not rollout_path(tmp_path / "r", 0).exists()  # the tiny policy succeeded nowhere: no file


@pytest.mark.smoke
def test_the_recipe_runs_and_logs_its_relabelling(bc_checkpoint, demo_file, tmp_path):
    # the documented recipe's options, on a tiny budget (the tiny policy fails, so the failures are replayed)
    cfg = _config(bc_checkpoint, demo_file, tmp_path / "run", rounds=2, episodes_per_round=2, group_size=2,
                  weighting="state", gamma=0.95, max_gripper_reopens=0, lr=3e-4, lr_schedule="cosine",
                  hindsight=True, close_delays=[2, 4, 6, 8], augment=False, max_close_distance=0.04,
                  max_minutes=45, torch_threads=1, eval_every=0)  # fmt: skip
    result = train_filtered_bc(cfg)
    assert result["rounds"] == 2 and result["updates"] == 4 and result["success_rate"] is None
    scalars = EventAccumulator(str(tmp_path / "run" / "tb")).Reload()
    tags = set(scalars.Tags()["scalars"])
    for tag in ("hindsight/replays", "hindsight/skipped_layout", "delay/replayed", "delay/steps", "delay/by_k/8",
                "far_close/delay", "train/loss", "time/env_steps", "buffer/samples"):  # fmt: skip
        assert [e.step for e in scalars.Scalars(tag)] == [2, 4], tag
    assert "eval/success_rate" not in tags
    replayed = sum(e.value for e in scalars.Scalars("delay/steps"))  # replays count as env steps
    collected = sum(e.value * 2 for e in scalars.Scalars("rollout/ep_len_mean"))
    assert result["env_steps"] >= collected + replayed
