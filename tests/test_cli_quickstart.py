"""`vlagym quickstart`: the whole loop on a tiny budget (the real defaults take minutes)."""

from __future__ import annotations

import json

import pytest
import torch

from vlagym.cli import main
from vlagym.eval.quickstart import DAGGER_SEED, QuickstartConfig, dagger_applies
from vlagym.policies.checkpoint import read_checkpoint_config


@pytest.mark.smoke
def test_quickstart_runs_the_whole_loop_and_reports(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["quickstart", "--out", str(out), "--steps", "4", "--demos", "2", "--eval-episodes", "2", "--no-progress"]
    argv += ["--dagger-episodes", "2", "--dagger-steps", "3"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "held-out paraphrases" in printed and "VLA-PickCup-v0" in printed and "checkpoint:" in printed
    assert "three cups (instruction following)" in printed and "DAgger round" in printed
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert summary["demos"]["demos"] == 2
    # the DAgger round: the BC checkpoint acted on its own seeds, the fine-tuned one is what got evaluated
    dagger = summary["dagger"]
    assert dagger["episodes"] == 2 and 0 <= dagger["policy_successes"] <= 2
    assert (
        dagger["checkpoint"]
        == summary["checkpoint"]
        == str(out / "dagger" / "round_1" / "bc" / "checkpoints" / "step_3")
    )
    assert json.loads((out / "eval" / "results.json").read_text())["policy"] == summary["checkpoint"]
    dagger_config = json.loads((out / "dagger" / "dagger_config.json").read_text())
    assert dagger_config["init"] == str(out / "bc" / "checkpoints" / "step_4")
    assert dagger_config["collect_seed"] == DAGGER_SEED and dagger_config["bc"]["steps"] == 3
    # BC and the round's fine-tuning train with the gain field on the front camera (the default --shading)
    for config in (out / "bc" / "bc_config.json", out / "dagger" / "round_1" / "bc" / "bc_config.json"):
        augmentation = json.loads(config.read_text())["augmentation"]
        assert augmentation["shading"] == QuickstartConfig().shading == 0.15, config
        assert augmentation["unshaded_cameras"] == ["wrist"], config
    assert set(summary["timings_s"]) >= {"demos", "train", "dagger", "eval"}
    # the round acted, and its checkpoint acts, as the BC checkpoint: with the temporal ensemble
    for checkpoint in (dagger_config["init"], summary["checkpoint"]):
        assert read_checkpoint_config(checkpoint)["config"]["temporal_ensemble"] is True
    # the machine and package builds beside the figures: other ones train other weights from the same seeds
    assert summary["machine"]["versions"]["torch"] == torch.__version__ and summary["machine"]["cpu_count"] >= 1
    for folder in ("eval", "eval_heldout", "eval_three_cups"):
        results = json.loads((out / folder / "results.json").read_text())
        assert results["tasks"]["VLA-PickCup-v0"]["n"] == 2
    three_cups = json.loads((out / "eval_three_cups" / "eval_config.json").read_text())
    assert three_cups["env_kwargs"]["num_cups"] == 3
    assert (out / "bc" / "checkpoints").is_dir() and (out / "quickstart_config.json").is_file()
    assert list((out / "eval" / "videos").glob("*.mp4"))
    # run again into the same folder: every stage, the DAgger round included, is replaced
    assert main([*argv, "--dagger-steps", "2"]) == 0
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert summary["checkpoint"].endswith("step_2")
    assert json.loads((out / "dagger" / "dagger_config.json").read_text())["bc"]["steps"] == 2


def test_quickstart_skips_the_dagger_round_where_it_cannot_run(caplog):
    assert dagger_applies(QuickstartConfig())
    assert not dagger_applies(QuickstartConfig(dagger_episodes=0))
    with caplog.at_level("WARNING", logger="vlagym.eval.quickstart"):
        assert not dagger_applies(QuickstartConfig(task="VLA-PushCube-v0"))  # its expert labels only its own plan
    assert "cannot label" in caplog.text


@pytest.mark.parametrize(
    "kwargs",
    [
        {"steps": 0},
        {"demos": -1},
        {"eval_seed": 5},
        {"n_action_steps": 11},
        {"action_noise": -0.1},
        {"ema": 1.0},
        {"shading": 1.5},
        {"dagger_episodes": -1},
        {"dagger_steps": 0},
        {"eval_seed": DAGGER_SEED + 299},  # the evaluation would replay the DAgger round's scenes
        {"demos": DAGGER_SEED + 1, "eval_seed": 10**7},  # the demos would
    ],
)
def test_bad_quickstart_config_raises(kwargs):
    with pytest.raises(ValueError):
        QuickstartConfig(**kwargs)


def test_quickstart_without_a_dagger_round_may_use_its_seeds():
    QuickstartConfig(dagger_episodes=0, eval_seed=DAGGER_SEED)  # no round: its seeds are free
