"""`vlagym train-fbc`: a tiny run end to end, `vlagym eval` on its checkpoint, the deprecated
`train-rl --algo filtered-bc` spelling, user errors as one line + exit code 2."""

from __future__ import annotations

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vlagym.cli import EXIT_OK, EXIT_USAGE, main, parse_config
from vlagym.train.configs import AugmentConfig

TINY = ["--rounds", "1", "--episodes-per-round", "1", "--n-envs", "1", "--eval-episodes", "1", "--device", "cpu"]


@pytest.mark.smoke
def test_filtered_bc_then_eval(bc_checkpoint, tmp_path, in_tmp_dir, capsys):
    out = tmp_path / "fbc"
    argv = ["train-fbc", "--policy", str(bc_checkpoint), "--out", str(out), *TINY, "--no-progress"]
    argv += ["--collect-seed", "20000000", "--eval-seed", "300000", "--no-augment", "--n-action-steps", "2"]
    argv += ["--hindsight", "--close-delays", "2", "4", "--max-close-distance", "0.04"]
    assert main(argv) == EXIT_OK
    printed = capsys.readouterr().out
    assert "trained 1 rounds" in printed and "success rate at the last evaluation" in printed
    config = json.loads((out / "rl_config.json").read_text())
    assert config["demos"] == [] and config["rounds"] == 1 and "algo" not in config
    assert config["collect_seed"] == 20_000_000 and config["eval_seed"] == 300_000
    assert config["augment"] is False and config["hindsight"] is True
    assert config["close_delays"] == [2, 4] and config["max_close_distance"] == 0.04
    tb = EventAccumulator(str(out / "tb"))
    tb.Reload()
    replays = [tb.Scalars(f"hindsight/{name}")[0].value for name in ("replays", "skipped_no_close", "skipped_at_target",
                                                                        "skipped_layout")]  # fmt: skip
    assert sum(replays) == 1  # the one failed episode: replayed or skipped, and why
    delayed = [tb.Scalars(f"delay/{name}")[0].value for name in ("replayed", "skipped_no_close", "skipped_at_start")]
    assert sum(delayed) == 1  # ... and the same for its delayed-close replays
    results = json.loads((out / "eval" / "step_0" / "results.json").read_text())
    assert results["seed"] == 300_000
    ckpt = out / "checkpoints" / "step_0"  # no demos and no success: the round trained nothing
    assert json.loads((ckpt / "config.json").read_text())["config"]["n_action_steps"] == 2
    assert main(["eval", "--policy", str(ckpt), "--episodes", "1", "--out", str(tmp_path / "ev"), "--no-progress"]) == 0


def test_the_old_spelling_still_works_with_a_warning(bc_checkpoint, capsys):
    new = parse_config(["train-fbc", "--policy", str(bc_checkpoint), "--group-size", "4", "--gamma", "0.95"])
    for algo in (["--algo", "filtered-bc"], ["--algo=filtered-bc"]):
        old = parse_config(["train-rl", *algo, "--policy", str(bc_checkpoint), "--group-size", "4", "--gamma", "0.95"])
        assert old == new
        assert "deprecated: use `vlagym train-fbc`" in capsys.readouterr().err


def test_the_recipe_parses_to_its_config(bc_checkpoint):
    argv = ["train-fbc", "--policy", str(bc_checkpoint), "--out", "DIR", "--rounds", "15", "--max-minutes", "45"]
    argv += ["--group-size", "4", "--weighting", "state", "--gamma", "0.95", "--max-gripper-reopens", "0"]
    argv += ["--lr", "3e-4", "--lr-schedule", "cosine", "--hindsight", "--close-delays", "2", "4", "6", "8"]
    argv += ["--no-augment", "--max-close-distance", "0.04", "--torch-threads", "2"]
    cfg = parse_config(argv)
    assert (cfg.rounds, cfg.max_minutes, cfg.group_size, cfg.weighting, cfg.gamma) == (15, 45, 4, "state", 0.95)
    assert (cfg.max_gripper_reopens, cfg.lr, cfg.lr_schedule, cfg.hindsight) == (0, 3e-4, "cosine", True)
    assert (cfg.close_delays, cfg.augment, cfg.max_close_distance, cfg.torch_threads) == ([2, 4, 6, 8], False, 0.04, 2)


def test_the_augmentation_ranges_are_train_bcs_and_settable(bc_checkpoint):
    base = ["train-fbc", "--policy", str(bc_checkpoint), "--group-size", "4"]
    assert parse_config(base).augmentation == AugmentConfig()
    cfg = parse_config([*base, "--brightness", "0.2", "--crop-scale", "0.7", "1.0"])
    assert (cfg.augmentation.brightness, cfg.augmentation.crop_scale) == (0.2, (0.7, 1.0))


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--timesteps", "8"], "unrecognized arguments: --timesteps"),
        (["--from-scratch"], "unrecognized arguments: --from-scratch"),
        (["--noise-std", "-1"], "--noise-std must be"),
        (["--noise-hold", "0"], "--noise-hold must be"),
        (["--gamma", "0"], "gamma must be"),
        (["--weighting", "advantage"], "invalid choice: 'advantage'"),
        (["--lr-schedule", "cosine-time"], "invalid choice: 'cosine-time'"),
        (["--preference-weight", "1"], "--preference-weight was retired: it measured no gain"),
        (["--hindsight-make-room"], "--hindsight-make-room was retired"),
        (["--ema", "0.995"], "--ema was retired"),
        (["--max-gripper-reopens", "-1"], "--max-gripper-reopens must be"),
        (["--demos", "/nonexistent.hdf5"], "does not exist"),
        (["--collect-seed", "100010"], "overlap the evaluation seeds"),
        (["--env-kwargs", "{num_cups: 3}"], "not valid JSON"),
        (["--env-kwargs", "[3]"], "must be a JSON object"),
        (["--hindsight", "--task", "VLA-PushCube-v0"], "which VLA-PushCube-v0 cannot"),
        (["--task", "VLA-PickCupp-v0"], "did you mean"),
        (["--n-action-steps", "9"], "must be <= the checkpoint's chunk_size"),
        (["--close-delays", "0"], "each of close_delays must be an integer >= 1"),
        (["--close-delays", "2", "2"], "--close-delays repeats a delay"),
        (["--max-close-distance", "0"], "--max-close-distance must be a finite number > 0"),
    ],
)
def test_user_errors(bc_checkpoint, extra, match, tmp_path, in_tmp_dir, capsys):
    argv = ["train-fbc", "--policy", str(bc_checkpoint), "--out", str(tmp_path / "x"), "--no-progress", *extra]
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1, err


def test_a_missing_checkpoint_is_one_line(tmp_path, capsys):
    assert main(["train-fbc", "--policy", str(tmp_path / "nope"), "--out", str(tmp_path / "x")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "not a policy checkpoint" in err and len(err.strip().splitlines()) == 1
