"""`vlagym train-rl`: tiny runs end to end, `vlagym eval` on its checkpoint, user errors as one line + exit code 2."""

from __future__ import annotations

import json

import pytest
from rl_helpers import TASK
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

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
        (["--from-scratch", "--task", TASK, "--eval-seed", "-1"], "eval_seed"),
    ],
)
def test_user_errors(extra, match, tmp_path, in_tmp_dir, capsys):
    assert main(["train-rl", "--out", str(tmp_path / "x"), "--n-envs", "1", "--no-progress", *extra]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1


@pytest.mark.smoke
def test_filtered_bc_then_eval(bc_checkpoint, tmp_path, in_tmp_dir, capsys):
    out = tmp_path / "fbc"
    argv = ["train-rl", "--algo", "filtered-bc", "--policy", str(bc_checkpoint), "--out", str(out), "--rounds", "1"]
    argv += ["--episodes-per-round", "1", "--n-envs", "1", "--eval-episodes", "1", "--device", "cpu", "--no-progress"]
    argv += ["--collect-seed", "20000000", "--eval-seed", "300000", "--max-episode-steps", "5", "--no-augment"]
    argv += ["--collect-env-kwargs", '{"num_cups": 3}', "--n-action-steps", "2", "--hindsight", "--hindsight-make-room"]
    argv += ["--close-delays", "2", "4", "--max-close-distance", "0.04"]
    assert main(argv) == EXIT_OK
    printed = capsys.readouterr().out
    assert "trained 1 rounds" in printed and "success rate at the last evaluation" in printed
    config = json.loads((out / "rl_config.json").read_text())
    assert config["algo"] == "filtered-bc" and config["demos"] == [] and config["rounds"] == 1
    assert config["collect_seed"] == 20_000_000 and config["eval_seed"] == 300_000
    assert config["max_episode_steps"] == 5  # the collection's time limit; the evaluation keeps the task's
    assert config["augment"] is False and config["hindsight"] is True and config["hindsight_make_room"] is True
    tb = EventAccumulator(str(out / "tb"))
    tb.Reload()
    replays = [tb.Scalars(f"hindsight/{name}")[0].value for name in ("replays", "skipped_no_close", "skipped_at_target",
                                                                        "skipped_layout")]  # fmt: skip
    assert sum(replays) == 1  # the one failed episode: replayed or skipped, and why
    assert config["close_delays"] == [2, 4] and config["max_close_distance"] == 0.04
    delayed = [tb.Scalars(f"delay/{name}")[0].value for name in ("replayed", "skipped_no_close", "skipped_at_start")]
    assert sum(delayed) == 1  # ... and the same for its delayed-close replays
    assert config["collect_env_kwargs"] == {"num_cups": 3} and config["env_kwargs"] == {}
    results = json.loads((out / "eval" / "step_0" / "results.json").read_text())
    assert results["seed"] == 300_000 and results["tasks"][TASK]["episodes"][0]["length"] > 5
    ckpt = out / "checkpoints" / "step_0"  # no demos and no success: the round trained nothing
    assert json.loads((ckpt / "config.json").read_text())["config"]["n_action_steps"] == 2
    assert main(["eval", "--policy", str(ckpt), "--episodes", "1", "--out", str(tmp_path / "ev"), "--no-progress"]) == 0


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--algo", "filtered-bc", "--timesteps", "8"], "--timesteps do(es) not apply to --algo filtered-bc"),
        (["--algo", "filtered-bc", "--no-critic-state"], "--no-critic-state do(es) not apply"),
        (["--algo", "filtered-bc", "--from-scratch"], "post-trains a BC checkpoint"),
        (["--rounds", "3"], "--rounds apply only to --algo filtered-bc"),
        (["--algo", "filtered-bc", "--noise-std", "-1"], "noise_std"),
        (["--algo", "filtered-bc", "--noise-hold", "0"], "noise_hold"),
        (["--noise-hold", "10"], "--noise-hold apply only to --algo filtered-bc"),
        (["--freeze-encoders"], "--freeze-encoders apply only to --algo filtered-bc"),
        (["--no-augment"], "--no-augment apply only to --algo filtered-bc"),
        (["--weighting", "advantage"], "--weighting apply only to --algo filtered-bc"),
        (["--algo", "filtered-bc", "--gamma", "0"], "gamma must be"),
        (["--algo", "filtered-bc", "--advantage-beta", "-1"], "advantage_beta"),
        (["--algo", "filtered-bc", "--max-gripper-reopens", "-1"], "max_gripper_reopens"),
        (["--max-gripper-reopens", "0"], "--max-gripper-reopens apply only to --algo filtered-bc"),
        (["--algo", "filtered-bc", "--demos", "/nonexistent.hdf5"], "does not exist"),
        (["--algo", "filtered-bc", "--collect-seed", "100010"], "overlap the evaluation seeds"),
        (["--collect-seed", "5"], "--collect-seed apply only to --algo filtered-bc"),
        (["--algo", "filtered-bc", "--retry-noise-std", "-0.1"], "retry_noise_std"),
        (["--algo", "filtered-bc", "--retry-noise-hold", "0"], "retry_noise_hold"),
        (["--retry-noise-std", "0.2"], "--retry-noise-std apply only to --algo filtered-bc"),
        (["--algo", "filtered-bc", "--max-episode-steps", "0"], "max_episode_steps"),
        (["--algo", "filtered-bc", "--collect-env-kwargs", "{num_cups: 3}"], "--collect-env-kwargs is not valid JSON"),
        (["--algo", "filtered-bc", "--collect-env-kwargs", "[3]"], "--collect-env-kwargs must be a JSON object"),
        (["--algo", "filtered-bc", "--collect-env-kwargs", '{"obs_mode": "state"}'], "may not set ['obs_mode']"),
        (["--algo", "filtered-bc", "--collect-env-kwargs", '{"num_cups": 7}'], "num_cups must be"),
        (["--collect-env-kwargs", '{"num_cups": 3}'], "--collect-env-kwargs apply only to --algo filtered-bc"),
        (["--n-action-steps", "5"], "--n-action-steps apply only to --algo filtered-bc"),
        (["--hindsight"], "--hindsight apply only to --algo filtered-bc"),
        (["--algo", "filtered-bc", "--hindsight", "--task", "VLA-PushCube-v0"], "which VLA-PushCube-v0 cannot"),
        (["--hindsight-make-room"], "--hindsight-make-room apply only to --algo filtered-bc"),
        (["--algo", "filtered-bc", "--hindsight-make-room"], "it needs hindsight"),
        (["--algo", "filtered-bc", "--n-action-steps", "9"], "must be <= the checkpoint's chunk_size"),
        (["--close-delays", "2"], "--close-delays apply only to --algo filtered-bc"),
        (["--algo", "filtered-bc", "--close-delays", "0"], "each of close_delays must be an integer >= 1"),
        (["--algo", "filtered-bc", "--close-delays", "2", "2"], "close_delays repeats a delay"),
        (["--max-close-distance", "0.04"], "--max-close-distance apply only to --algo filtered-bc"),
        (["--algo", "filtered-bc", "--max-close-distance", "0"], "max_close_distance must be a finite number > 0"),
        (["--preference-weight", "1"], "--preference-weight apply only to --algo filtered-bc"),
        (["--algo", "filtered-bc", "--preference-weight", "1"], "it needs group_size >= 2 and noise_std > 0"),
        (["--algo", "filtered-bc", "--preference-beta", "0"], "preference_beta must be a finite number > 0"),
        (["--algo", "filtered-bc", "--preference-pairs", "0"], "preference_pairs"),
    ],
)
def test_filtered_bc_user_errors(bc_checkpoint, extra, match, tmp_path, in_tmp_dir, capsys):
    argv = ["train-rl", "--policy", str(bc_checkpoint), "--out", str(tmp_path / "x"), "--no-progress", *extra]
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert match in err and len(err.strip().splitlines()) == 1


def test_filtered_bc_preference_flags_reach_the_config(bc_checkpoint):
    from vlagym.cli import build_parser, train_rl_config

    argv = ["train-rl", "--algo", "filtered-bc", "--policy", str(bc_checkpoint), "--group-size", "4"]
    argv += ["--preference-weight", "0.5", "--preference-beta", "0.2", "--preference-pairs", "4"]
    argv += ["--preference-chunks", "3", "--preference-rounds", "2"]
    cfg = train_rl_config(build_parser().parse_args(argv))
    assert (cfg.preference_weight, cfg.preference_beta, cfg.preference_pairs) == (0.5, 0.2, 4)
    assert (cfg.preference_chunks, cfg.preference_rounds, cfg.group_size) == (3, 2, 4)
