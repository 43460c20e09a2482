"""`FilteredBCConfig`: light to import, its checks, its defaults, and the configs of older runs."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys

import pytest
from rl_helpers import TASK

from vlagym.config import field_docs
from vlagym.rl.fbc import FilteredBCConfig


def test_importing_the_config_loads_nothing_heavy():
    # `vlagym train-fbc --help` imports it to build its options
    code = (
        "import sys; import vlagym.rl.fbc; from vlagym.rl.fbc import FilteredBCConfig; "
        "print([m for m in ('torch', 'mujoco', 'h5py', 'stable_baselines3') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_option_has_its_help():
    docs = field_docs(FilteredBCConfig)
    missing = [f.name for f in dataclasses.fields(FilteredBCConfig) if not docs.get(f.name)]
    assert not missing


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"collect_seed": 100_010}, "overlap the evaluation seeds"),
        ({"demos": ["/nonexistent.hdf5"]}, "does not exist"),
        ({"env_kwargs": {"obs_mode": "state"}}, "may not set"),
        ({"env_kwargs": {"max_episode_steps": 50}}, "may not set"),
        ({"env_kwargs": [3]}, "env_kwargs must be a dict"),
        ({"noise_std": -0.1}, "noise_std"),
        ({"noise_hold": 0}, "noise_hold"),
        ({"demo_fraction": 1.5}, "demo_fraction"),
        ({"rounds": 0}, "rounds"),
        ({"task": "VLA-Nope-v0"}, "unknown task"),
        ({"task": "VLA-PushCube-v0", "hindsight": True}, "hindsight moves the task's target"),
        ({"lr_schedule": "cosine-time"}, r"lr_schedule must be one of \['constant', 'cosine'\]"),
        ({"episodes_per_round": 10, "group_size": 4}, "must be a multiple of group_size"),
        ({"weighting": "advantage"}, r"weighting must be one of \['episode', 'state'\]"),
        ({"vectorization": "threads"}, "vectorization must be one of"),
        ({"device": "tpu"}, "device must be one of"),
        ({"gamma": 1.5}, "gamma must be"),
        ({"max_gripper_reopens": -1}, "max_gripper_reopens"),
        ({"n_action_steps": 0}, "n_action_steps"),
        ({"n_action_steps": 5}, "n_action_steps=5 must be <= the checkpoint's chunk_size=4"),
        ({"hindsight": 1}, "hindsight must be a bool"),
        ({"close_delays": "2,4"}, "close_delays must be a list of steps"),
        ({"close_delays": [2, 0]}, "each of close_delays must be an integer >= 1"),
        ({"close_delays": [2.0]}, "each of close_delays must be an integer >= 1"),
        ({"close_delays": [4, 2, 4]}, "close_delays repeats a delay"),
        ({"max_close_distance": 0.0}, "max_close_distance must be a finite number > 0.0"),
        ({"max_close_distance": -0.04}, "max_close_distance must be a finite number > 0.0"),
        ({"max_close_distance": "4cm"}, "max_close_distance must be a finite number > 0.0"),
        ({"max_minutes": 0}, "max_minutes must be a finite number > 0.0"),
    ],
)
def test_config_errors(bc_checkpoint, overrides, match):
    with pytest.raises(ValueError, match=match):
        FilteredBCConfig(**{"policy": str(bc_checkpoint), "demos": [], **overrides})


def test_task_defaults_to_the_checkpoints_and_takes_the_vlagym_prefix(bc_checkpoint):
    assert FilteredBCConfig(policy=str(bc_checkpoint), demos=[]).task == TASK
    assert FilteredBCConfig(policy=str(bc_checkpoint), demos=[], task=f"vlagym:{TASK}").task == TASK


def test_default_demos_are_the_checkpoints_training_data(bc_checkpoint, demo_file, tmp_path):
    meta = json.loads((bc_checkpoint / "config.json").read_text())
    meta["extra"]["bc_config"] = {"dataset": [str(demo_file)]}
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(meta))
    (folder / "model.safetensors").write_bytes((bc_checkpoint / "model.safetensors").read_bytes())
    assert FilteredBCConfig(policy=str(folder)).demos == [str(demo_file)]
    meta["extra"]["bc_config"] = {"dataset": [str(tmp_path / "gone.hdf5")]}
    (folder / "config.json").write_text(json.dumps(meta))
    assert FilteredBCConfig(policy=str(folder)).demos == []


@pytest.mark.parametrize(
    "bc_config, named",
    [
        (
            {"ema": 0.999, "task_balance": 0.5, "padded_actions": "gripper"},
            ["ema=0.999", "task_balance=0.5", "gripper"],
        ),
        ({"ema": 0.0, "task_balance": 0.0, "padded_actions": "mask"}, []),
        ({}, []),
    ],
)
def test_warns_of_the_checkpoints_bc_settings_its_updates_leave_out(bc_checkpoint, tmp_path, caplog, bc_config, named):
    meta = json.loads((bc_checkpoint / "config.json").read_text())
    meta["extra"]["bc_config"] = bc_config
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(meta))
    (folder / "model.safetensors").write_bytes((bc_checkpoint / "model.safetensors").read_bytes())
    with caplog.at_level(logging.WARNING, logger="vlagym.rl.fbc.config"):
        FilteredBCConfig(policy=str(folder), demos=[])
    warned = [r.getMessage() for r in caplog.records if "do not reproduce" in r.getMessage()]
    assert len(warned) == (1 if named else 0)
    for word in named:
        assert word in warned[0]


def test_to_dict_round_trips(bc_checkpoint):
    cfg = FilteredBCConfig(policy=str(bc_checkpoint), demos=[], hindsight=True, close_delays=[2, 4], gamma=0.95)
    assert FilteredBCConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def _old_config(bc_checkpoint, **changes):
    """An rl_config.json of `train-rl --algo filtered-bc` (commit 2b05d45): "algo" and the retired options."""
    retired = {
        "algo": "filtered-bc",
        "collect_env_kwargs": {},
        "advantage_beta": 0.2,
        "advantage_max_weight": 20.0,
        "critic_rounds": 4,
        "critic_updates": 300,
        "max_episode_steps": None,
        "retry_noise_std": 0.0,
        "retry_noise_hold": 10,
        "hindsight_make_room": False,
        "preference_weight": 0.0,
        "preference_beta": 1.0,
        "preference_pairs": 8,
        "preference_chunks": 2,
        "preference_rounds": 3,
        "ema": 0.0,
        "buffer_rounds": None,
    }
    kept = FilteredBCConfig(policy=str(bc_checkpoint), demos=[], hindsight=True, group_size=4).to_dict()
    return {**kept, **retired, **changes}


def test_an_old_runs_config_still_loads(bc_checkpoint):
    cfg = FilteredBCConfig.from_dict(_old_config(bc_checkpoint))
    assert cfg.hindsight is True and cfg.group_size == 4


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"preference_weight": 0.1}, "preference_weight: retired"),
        ({"ema": 0.995, "buffer_rounds": 5}, "buffer_rounds, ema: retired"),
        ({"collect_env_kwargs": {"num_cups": 3}}, "collect_env_kwargs: retired"),
        ({"weighting": "advantage"}, "weighting='advantage': retired"),
        ({"lr_schedule": "cosine-time"}, "lr_schedule='cosine-time': retired"),
        ({"algo": "ppo"}, "the config of a 'ppo' run, not of filtered BC"),
        ({"no_such_option": 1}, "unknown FilteredBCConfig fields"),
    ],
)
def test_an_old_config_with_a_retired_option_on_does_not_load(bc_checkpoint, changes, match):
    with pytest.raises(ValueError, match=match):
        FilteredBCConfig.from_dict(_old_config(bc_checkpoint, **changes))
