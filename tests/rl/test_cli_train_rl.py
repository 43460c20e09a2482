"""`vlagym train-rl`: tiny runs end to end, `vlagym eval` on its checkpoint, user errors as one line + exit code 2."""

from __future__ import annotations

import json

import pytest
from rl_helpers import TASK

from vlagym.cli import EXIT_OK, EXIT_USAGE, main

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:stable_baselines3.*")

TINY_PPO = ["--n-envs", "2", "--n-steps", "4", "--batch-size", "4", "--device", "cpu", "--no-progress"]


@pytest.mark.smoke
def test_post_training_then_eval(bc_checkpoint, tmp_path, in_tmp_dir, capsys):
    out = tmp_path / "rl"
    argv = ["train-rl", "--policy", str(bc_checkpoint), "--timesteps", "8", "--out", str(out), *TINY_PPO]
    assert main([*argv, "--eval-every", "8", "--eval-episodes", "1", "--reward", "dense", "--bc-coef", "0.1"]) == 0
    printed = capsys.readouterr().out
    assert "trained 8 timesteps" in printed and "success rate at the last evaluation" in printed
    config = json.loads((out / "rl_config.json").read_text())
    assert config["reward"] == "dense" and config["bc_coef"] == 0.1 and config["task"] == TASK
    ckpt = out / "checkpoints" / "step_8"
    assert main(["eval", "--policy", str(ckpt), "--episodes", "1", "--out", str(tmp_path / "ev"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "ev" / "results.json").read_text())["tasks"][TASK]["n"] == 1


@pytest.mark.smoke
def test_from_scratch_sac(tmp_path, in_tmp_dir, capsys):
    out = tmp_path / "sac"
    argv = ["train-rl", "--from-scratch", "--algo", "sac", "--task", TASK, "--timesteps", "32", "--out", str(out)]
    argv += ["--learning-starts", "8", "--batch-size", "8", "--buffer-size", "100", "--device", "cpu", "--no-progress"]
    assert main(argv) == EXIT_OK
    assert f"checkpoint: {out / 'checkpoints' / 'step_32'}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra, match",
    [
        ([], "--policy DIR"),
        (["--from-scratch"], "needs a task"),
        (["--from-scratch", "--task", "VLA-PickCupp-v0"], "did you mean"),
        (["--policy", "/nonexistent"], "not a policy checkpoint"),
        (["--from-scratch", "--task", TASK, "--algo", "dqn"], "algo must be one of"),
        (["--from-scratch", "--task", TASK, "--env-kwargs", "{oops"], "not valid JSON"),
        (["--from-scratch", "--task", TASK, "--env-kwargs", '{"colour": 1}', "--batch-size", "8"], "colour"),
        (["--from-scratch", "--task", TASK, "--eval-seed", "-1"], "--eval-seed must be an integer >= 0"),
    ],
)
def test_user_errors(extra, match, tmp_path, in_tmp_dir, capsys):
    assert main(["train-rl", "--out", str(tmp_path / "x"), "--n-envs", "1", "--no-progress", *extra]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--rounds", "--hindsight", "--close-delays", "--max-close-distance", "--no-augment"])
def test_filtered_bc_options_belong_to_train_fbc(flag, tmp_path, in_tmp_dir, capsys):
    argv = ["train-rl", "--from-scratch", "--task", TASK, "--out", str(tmp_path / "x"), flag]
    assert main(argv + (["1"] if flag in ("--rounds", "--close-delays", "--max-close-distance") else [])) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {flag}" in err and len(err.strip().splitlines()) == 1


def test_timesteps_is_an_alias_of_total_timesteps():
    from vlagym.cli import parse_config

    argv = ["train-rl", "--from-scratch", "--task", TASK]
    assert parse_config([*argv, "--timesteps", "64"]).total_timesteps == 64
    assert parse_config([*argv, "--total-timesteps", "64"]).total_timesteps == 64
