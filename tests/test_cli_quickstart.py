"""`vlagym quickstart`: the whole loop on a tiny budget (the real defaults take minutes)."""

from __future__ import annotations

import json

import pytest
import torch

from vlagym.cli import main
from vlagym.eval.quickstart import QuickstartConfig


@pytest.mark.smoke
def test_quickstart_runs_the_whole_loop_and_reports(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["quickstart", "--out", str(out), "--steps", "4", "--demos", "2", "--eval-episodes", "2", "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "held-out paraphrases" in printed and "VLA-PickCup-v0" in printed and "checkpoint:" in printed
    assert "three cups (instruction following)" in printed
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert summary["demos"]["demos"] == 2
    # the machine and package builds beside the figures: other ones train other weights from the same seeds
    assert summary["machine"]["versions"]["torch"] == torch.__version__ and summary["machine"]["cpu_count"] >= 1
    for folder in ("eval", "eval_heldout", "eval_three_cups"):
        results = json.loads((out / folder / "results.json").read_text())
        assert results["tasks"]["VLA-PickCup-v0"]["n"] == 2
    three_cups = json.loads((out / "eval_three_cups" / "eval_config.json").read_text())
    assert three_cups["env_kwargs"]["num_cups"] == 3
    assert (out / "bc" / "checkpoints").is_dir() and (out / "quickstart_config.json").is_file()
    assert list((out / "eval" / "videos").glob("*.mp4"))


@pytest.mark.parametrize(
    "kwargs",
    [{"steps": 0}, {"demos": -1}, {"eval_seed": 5}, {"n_action_steps": 11}, {"action_noise": -0.1}, {"ema": 1.0}],
)
def test_bad_quickstart_config_raises(kwargs):
    with pytest.raises(ValueError):
        QuickstartConfig(**kwargs)
