"""`vlagym curve`: every checkpoint of a run evaluated on the same seeds, paired with the start."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from vlagym import cli
from vlagym.eval import curve as curve_mod
from vlagym.eval.curve import (
    CURVE_JSON,
    CURVE_MD,
    CURVE_PNG,
    CurveConfig,
    CurveError,
    chosen_checkpoints,
    run_checkpoints,
    run_curve,
)
from vlagym.eval.stats import mcnemar_exact
from vlagym.io import atomic_write_json

TASK = "VLA-PickCup-v0"


def _run_folder(tmp_path, bc_checkpoint, steps, start=None):
    """A post-training run folder whose checkpoint step_N is the tiny BC policy with round N / 2, N updates,
    1000 N env steps and 6 N training seconds in its training state."""
    run = tmp_path / "run"
    for n in steps:
        folder = run / "checkpoints" / f"step_{n}"
        shutil.copytree(bc_checkpoint, folder)
        config = json.loads((folder / "config.json").read_text())
        config["extra"].update(bc_checkpoint=str(start or bc_checkpoint), round=n // 2, num_updates=n)
        (folder / "config.json").write_text(json.dumps(config))
        torch.save({"env_steps": 1000 * n, "train_s": 6.0 * n}, folder / "training_state.pt")
    return run


@pytest.fixture
def fake_evaluate(monkeypatch):
    """`evaluate` replaced by one that writes what the real one writes, with outcomes chosen per policy:
    successes[policy name] is the list of episodes (by index) that succeed. Records every call."""
    calls, successes = [], {}

    def evaluate(cfg):
        calls.append(cfg)
        name = cfg.policy.rsplit("/", 1)[-1]
        name = name if name.startswith("step_") else "start"
        won = set(successes[name])
        episodes = [{"seed": cfg.seed + i, "success": i in won} for i in range(cfg.episodes)]
        results = {"policy": cfg.policy, "tasks": {TASK: {"episodes": episodes}}}
        Path(cfg.out).mkdir(parents=True, exist_ok=True)
        atomic_write_json(f"{cfg.out}/eval_config.json", {"config": dataclasses.asdict(cfg)})
        atomic_write_json(f"{cfg.out}/results.json", results)
        return results

    monkeypatch.setattr(curve_mod, "evaluate", evaluate)
    return calls, successes


def test_every_nth_checkpoint_and_always_the_last():
    folders = [f"step_{n}" for n in range(1, 8)]
    assert chosen_checkpoints(folders, 1) == folders
    assert chosen_checkpoints(folders, 3) == ["step_3", "step_6", "step_7"]
    assert chosen_checkpoints(folders, 7) == ["step_7"]
    assert chosen_checkpoints(folders, 10) == ["step_7"]


def test_run_checkpoints_in_step_order_skipping_partial_ones(tmp_path, bc_checkpoint):
    run = _run_folder(tmp_path, bc_checkpoint, [9, 10, 100])
    shutil.copytree(bc_checkpoint, run / "checkpoints" / ".tmp_step_200.123")  # a checkpoint being written
    (run / "checkpoints" / "step_300").mkdir()  # no policy files
    assert [f.name for f in run_checkpoints(run)] == ["step_9", "step_10", "step_100"]
    with pytest.raises(CurveError, match="no checkpoints/ folder"):
        run_checkpoints(tmp_path)
    shutil.rmtree(run / "checkpoints")
    (run / "checkpoints" / "step_1").mkdir(parents=True)
    with pytest.raises(CurveError, match="holds a VLA policy"):
        run_checkpoints(run)


def test_points_pair_with_the_start_and_carry_the_training_counters(tmp_path, bc_checkpoint, fake_evaluate):
    calls, successes = fake_evaluate
    run = _run_folder(tmp_path, bc_checkpoint, [2, 4])
    successes.update(start=[0, 1], step_2=[0, 2, 3, 4], step_4=[1, 2, 3, 4, 5, 6, 7])
    cfg = CurveConfig(run=str(run), episodes=10, seed=500, progress=False)
    curve = run_curve(cfg)
    points = curve["points"]
    assert [p["name"] for p in points] == ["start", "step_2", "step_4"]
    assert [(p["step"], p["round"], p["updates"], p["env_steps"]) for p in points] == [
        (0, 0, 0, 0),
        (2, 1, 2, 2000),
        (4, 2, 4, 4000),
    ]
    assert [p["train_minutes"] for p in points] == pytest.approx([0.0, 0.2, 0.4])
    assert [p["success_rate"] for p in points] == [0.2, 0.4, 0.7]
    assert points[0]["lift"] is None
    # step_2 vs start: episodes 2, 3, 4 only in step_2, episode 1 only in the start
    lift = points[1]["lift"]
    assert (lift["only_point"], lift["only_start"]) == (3, 1)
    assert lift["difference"] == pytest.approx(0.2) and lift["p_value"] == pytest.approx(mcnemar_exact(3, 1))
    assert lift["ci95"][0] < 0.2 < lift["ci95"][1]
    assert (points[2]["lift"]["only_point"], points[2]["lift"]["only_start"]) == (6, 1)
    assert all(c.seed == 500 and c.episodes == 10 for c in calls) and len(calls) == 3
    out = run / "test_curve"
    assert json.loads((out / CURVE_JSON).read_text()) == json.loads(json.dumps(curve))
    table = (out / CURVE_MD).read_text().splitlines()
    assert table[4].startswith("| start | 0 | 0 | 0 | 0.0 | 20.0% |")
    assert table[6].startswith("| step_4 | 2 | 4 | 4,000 | 0.4 | 70.0% |") and "+50.0 pts" in table[6]
    assert (out / CURVE_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_points_already_evaluated_the_same_way_are_read_back(tmp_path, bc_checkpoint, fake_evaluate):
    calls, successes = fake_evaluate
    run = _run_folder(tmp_path, bc_checkpoint, [2])
    successes.update(start=[0], step_2=[1], step_4=[0, 1])
    cfg = CurveConfig(run=str(run), episodes=4, progress=False)
    first = run_curve(cfg)
    assert len(calls) == 2
    assert run_curve(cfg) == first and len(calls) == 2  # nothing run again
    _run_folder(tmp_path, bc_checkpoint, [4])  # the run went on
    assert [p["name"] for p in run_curve(cfg)["points"]] == ["start", "step_2", "step_4"]
    assert [c.policy.rsplit("/", 1)[-1] for c in calls[2:]] == ["step_4"]
    run_curve(dataclasses.replace(cfg, seed=7))  # another protocol: every point again
    assert len(calls) == 6 and all(c.seed == 7 for c in calls[3:])


def test_start_point_options(tmp_path, bc_checkpoint, fake_evaluate, caplog):
    calls, successes = fake_evaluate
    successes.update(step_2=[0])
    run = _run_folder(tmp_path, bc_checkpoint, [2], start=tmp_path / "gone")
    curve = run_curve(CurveConfig(run=str(run), episodes=2, progress=False))
    assert [p["name"] for p in curve["points"]] == ["step_2"] and curve["points"][0]["lift"] is None
    assert "which is gone" in caplog.text
    successes.update(start=[])
    curve = run_curve(CurveConfig(run=str(run), episodes=2, start=str(bc_checkpoint), progress=False))
    assert [p["name"] for p in curve["points"]] == ["start", "step_2"] and curve["points"][1]["lift"]["only_point"] == 1
    with pytest.raises(CurveError, match="start: .*does not exist"):
        run_curve(CurveConfig(run=str(run), start=str(tmp_path / "nope"), progress=False))
    with pytest.raises(CurveError, match="not both"):
        CurveConfig(run=str(run), start=str(bc_checkpoint), include_start=False)
    for bad in (dict(episodes=0), dict(every=0), dict(seed=-1), dict(vectorization="threads")):
        with pytest.raises(CurveError):
            CurveConfig(run=str(run), **bad)
    with pytest.raises(CurveError, match="does not exist"):
        CurveConfig(run=str(tmp_path / "missing"))


@pytest.mark.smoke
def test_cli_curve_evaluates_a_run_for_real(tmp_path, bc_checkpoint, capsys):
    run = _run_folder(tmp_path, bc_checkpoint, [3])
    argv = ["curve", str(run), "--episodes", "2", "--num-envs", "2", "--seed", "200000", "--no-progress"]
    assert cli.main([*argv, "--out", str(tmp_path / "c")]) == 0
    printed = capsys.readouterr().out
    assert "| start | 0 | 0 | 0 | 0.0 |" in printed and "| step_3 | 1 | 3 | 3,000 | 0.3 |" in printed
    curve = json.loads((tmp_path / "c" / CURVE_JSON).read_text())
    results = [json.loads((tmp_path / "c" / p / "results.json").read_text()) for p in ("start", "step_3")]
    assert [p["success_rate"] for p in curve["points"]] == [r["tasks"][TASK]["success_rate"] for r in results]
    # the same weights on the same seeds: the same episodes, so a lift of exactly zero
    lengths = [[e["length"] for e in r["tasks"][TASK]["episodes"]] for r in results]
    assert lengths[0] == lengths[1] and curve["points"][1]["lift"]["difference"] == 0.0
    assert np.all(np.diff([e["seed"] for e in results[1]["tasks"][TASK]["episodes"]]) == 1)
    assert cli.main([*argv, "--start", "x", "--no-start"]) == 2
    assert cli.main(["curve", str(run), "--env-kwargs", "[1]"]) == 2
    assert "must be a JSON object" in capsys.readouterr().err
