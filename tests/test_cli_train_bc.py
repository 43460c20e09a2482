"""`vlagym train-bc`: a tiny run end to end, its outputs and printout, resume, and one-line errors with exit 2."""

from __future__ import annotations

import dataclasses
import json

import pytest

from vlagym.cli import build_parser, main, parse_config
from vlagym.train.configs import BCConfig
from vlagym.train.demos import DemoConfig, collect_demos


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli_bc") / "pick.hdf5"
    collect_demos(DemoConfig(task="VLA-PickCup-v0", episodes=2, out=str(path), image_size=32, progress=False))
    return path


@pytest.mark.smoke
def test_train_bc_runs_and_resumes(demos, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train-bc", "--dataset", str(demos), "--out", str(out), "--steps", "6", "--batch-size", "4"]
    argv += ["--chunk-size", "4", "--head", "flow", "--checkpoint-every", "3", "--no-progress", "--device", "cpu"]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    assert "trained 6 steps" in stdout and str(out / "checkpoints" / "step_6") in stdout
    saved = json.loads((out / "bc_config.json").read_text())
    # The policy takes the demos' image size and cameras unless told otherwise.
    assert saved["policy"]["image_size"] == 32 and saved["policy"]["head"] == "flow"
    assert saved["policy"]["chunk_size"] == 4 and saved["steps"] == 6
    assert (out / "checkpoints" / "step_3" / "model.safetensors").is_file()
    # Resuming a finished run trains no further step, but longer --steps continue it.
    assert main([*argv[:6], "8", *argv[7:], "--resume"]) == 0
    assert "trained 8 steps" in capsys.readouterr().out
    assert json.loads((out / "checkpoints" / "last.json").read_text())["step"] == 8


def test_init_fine_tunes_with_the_checkpoints_architecture(demos, tmp_path, capsys):
    first = tmp_path / "first"
    argv = ["train-bc", "--dataset", str(demos), "--steps", "2", "--batch-size", "4", "--no-progress"]
    assert main([*argv, "--out", str(first), "--chunk-size", "4", "--head", "flow"]) == 0
    checkpoint = first / "checkpoints" / "step_2"
    assert main([*argv, "--out", str(tmp_path / "tuned"), "--init", str(checkpoint)]) == 0
    saved = json.loads((tmp_path / "tuned" / "bc_config.json").read_text())
    assert saved["init"] == str(checkpoint) and saved["policy"]["head"] == "flow" and saved["policy"]["chunk_size"] == 4
    capsys.readouterr()
    assert main([*argv, "--out", str(tmp_path / "other"), "--init", str(checkpoint), "--chunk-size", "8"]) == 2
    assert "architecture in ['chunk_size']" in capsys.readouterr().err
    # How the checkpoint acts is not architecture: the fine-tuned one acts as told.
    assert main([*argv, "--out", str(tmp_path / "te"), "--init", str(checkpoint), "--temporal-ensemble"]) == 0
    saved = json.loads((tmp_path / "te" / "bc_config.json").read_text())["policy"]
    assert saved["temporal_ensemble"] and saved["n_action_steps"] == 1 and saved["chunk_size"] == 4


def test_options_left_out_keep_the_config_defaults(demos):
    cfg = parse_config(["train-bc", "--dataset", str(demos)])
    defaults = {f.name: f.default for f in dataclasses.fields(BCConfig) if f.default is not dataclasses.MISSING}
    for name in ("out", "steps", "batch_size", "lr", "eval_every", "eval_episodes", "checkpoint_every", "seed"):
        assert getattr(cfg, name) == defaults[name], name


def test_no_augment_turns_the_augmentation_off(demos):
    on = parse_config(["train-bc", "--dataset", str(demos)])
    off = parse_config(["train-bc", "--dataset", str(demos), "--no-augment"])
    assert on.augment is True and off.augment is False
    # The wrist view is only colour-jittered by default; the flag alone zooms and shifts every camera.
    every = parse_config(["train-bc", "--dataset", str(demos), "--unshifted-cameras"])
    both = parse_config(["train-bc", "--dataset", str(demos), "--unshifted-cameras", "wrist", "front"])
    assert on.augmentation.unshifted_cameras == ("wrist",) and every.augmentation.unshifted_cameras == ()
    assert both.augmentation.unshifted_cameras == ("wrist", "front")
    # The gain field: off by default, the hand camera left out of it unless the flag comes without a name.
    shaded = parse_config(["train-bc", "--dataset", str(demos), "--shading", "0.3", "--unshaded-cameras"])
    assert on.augmentation.shading == 0.0 and on.augmentation.unshaded_cameras == ("wrist",)
    assert shaded.augmentation.shading == 0.3 and shaded.augmentation.unshaded_cameras == ()


def test_help_shows_each_fields_docstring_and_default(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train-bc", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--steps N total optimiser steps" in text and "(default: 3000)" in text
    assert "--no-augment" in text and "--chunk-size N" in text


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--steps", "0"], "steps must be an integer >= 1, got 0"),
        (["--lr", "-1"], "lr must be"),
        (["--head", "mse"], "'mse'"),
        (["--chunk-size", "0"], "chunk_size"),
        (["--device", "tpu"], "'tpu'"),
        (["--batch-size", "100000"], "batch_size=100000"),
        (["--dataset", "MISSING"], "does not exist"),
        (["--dataset", "NOTDEMO"], "not a vlagym demo file"),
        (["--init", "MISSING"], "--init: "),
        (["--unshifted-cameras", "wirst"], "unshifted_cameras must be camera names among ['front', 'wrist', 'side']"),
    ],
)
def test_bad_input_exits_2_with_one_line(demos, tmp_path, capsys, extra, needle):
    files = {"MISSING": str(tmp_path / "missing.hdf5"), "NOTDEMO": str(tmp_path / "notes.txt")}
    (tmp_path / "notes.txt").write_text("not hdf5")
    extra = [files.get(a, a) for a in extra]
    argv = ["train-bc", "--dataset", str(demos), "--out", str(tmp_path / "o"), "--steps", "1", "--no-progress"]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vlagym train-bc: error:") and needle in err, err
    assert "\n" not in err and "Traceback" not in err
