"""Every command, fed malformed input, answers with one line on stderr and exit code 2 (never a traceback)."""

from __future__ import annotations

import json

import pytest

from vlagym.cli import EXIT_USAGE, main


@pytest.fixture()
def bad(tmp_path):
    """Files a user might point a command at by mistake: {name: path}."""
    foreign = tmp_path / "foreign"  # a checkpoint-looking folder of another library
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (foreign / "model.safetensors").write_bytes(b"")
    broken = tmp_path / "broken"  # a vlagym config naming a field that does not exist
    broken.mkdir()
    meta = {"format": "vlagym-policy", "format_version": 1, "policy_type": "vla", "config": {"bogus": 1}}
    (broken / "config.json").write_text(json.dumps(meta))
    (broken / "model.safetensors").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a demo file")
    (tmp_path / "bench.json").write_text("{}")
    paths = {"FOREIGN": foreign, "BROKEN": broken, "TEXT": tmp_path / "notes.txt", "MISSING": tmp_path / "missing"}
    return {**{k: str(v) for k, v in paths.items()}, "BENCH": str(tmp_path / "bench.json"), "OUT": str(tmp_path / "o")}


CASES = [
    (["list", "--bogus"], "unrecognized arguments: --bogus"),
    (["video", "VLA-PickCap-v0"], "unknown task"),
    (["video", "VLA-PickCup-v0", "--size", "x"], "invalid int value"),
    (["demos", "--task", "VLA-PickCup-v0", "--episodes", "0", "--out", "OUT/d.hdf5"], "episodes"),
    (["demos", "--task", "VLA-PickCup-v0", "--env-kwargs", "{oops", "--out", "OUT/d.hdf5"], "not valid JSON"),
    (["demos", "--task", "VLA-PickCup-v0", "--split", "bogus", "--out", "OUT/d.hdf5"], "--split must be one of"),
    (["dataset", "info", "MISSING"], "no such file"),
    (["dataset", "check", "OUT"], "no such file"),
    (["dataset", "frobnicate", "TEXT"], "invalid choice"),
    (["dataset", "export", "MISSING", "--out", "OUT"], "no such file"),
    (["dataset", "export", "TEXT", "--out", "OUT"], "not an HDF5 file"),
    (["dataset", "export", "TEXT", "--format", "zarr"], "--format must be one of ['lerobot']"),
    (["dataset", "export", "TEXT", "--crf", "99"], "--crf must be between 0 and 51"),
    (["dataset", "export", "TEXT", "--pix-fmt", "rgb24"], "--pix-fmt must be one of"),
    (["eval", "--policy", "FOREIGN", "--episodes", "1", "--out", "OUT"], "not a vlagym policy config"),
    (["eval", "--policy", "BROKEN", "--episodes", "1", "--out", "OUT"], "unknown VLAConfig fields ['bogus']"),
    (["eval", "--policy", "MISSING", "--out", "OUT"], "does not exist"),
    (["eval", "--policy", "expert", "--tasks", "VLA-Nope-v0", "--out", "OUT"], "unknown task"),
    (["eval", "--policy", "expert", "--env-kwargs", "[1]", "--out", "OUT"], "must be a JSON object"),
    (["eval", "--policy", "expert", "--language-controls", "--out", "OUT"], "add --suite NAME"),
    (["eval", "--suite", "vlagym-pick", "--policy", "expert", "--seed", "3", "--out", "OUT"], "--suite fixes"),
    (["eval", "--suite", "no-such-suite", "--policy", "expert", "--out", "OUT"], "no-such-suite"),
    (
        ["eval", "--policy", "expert", "--tasks", "VLA-PickCup-v0", "--unit-size", "4", "--out", "OUT"],
        "--unit-size only with backend 'ray'",
    ),
    (
        [
            "eval",
            "--policy",
            "expert",
            "--tasks",
            "VLA-PickCup-v0",
            "--backend",
            "ray",
            "--unit-size",
            "0",
            "--out",
            "OUT",
        ],
        "positive integer",
    ),
    (["demos", "--task", "VLA-PickCup-v0", "--workers", "2", "--out", "OUT/d.hdf5"], "only with backend 'ray'"),
    (["curve", "MISSING"], "MISSING"),
    (["curve", "MISSING", "--start", "x", "--no-start"], "not both"),
    (["report", "MISSING"], "MISSING"),
    (["compare", "MISSING", "TEXT"], "MISSING"),
    (["compare", "TEXT", "TEXT", "--alpha", "2"], "alpha"),
    (["replicates", "TEXT"], "the following arguments are required"),
    (["bench", "--sections", "warp-drive"], "warp-drive"),
    (["bench", "--compare", "BENCH", "MISSING"], "not a vlagym bench result"),
    (["bench-suite", "show", "no-such-suite"], "no-such-suite"),
    (["export", "FOREIGN", "--out", "OUT/m.onnx"], "not a vlagym policy config"),
    (["export", "BROKEN", "--out", "OUT/m.onnx"], "unknown VLAConfig fields ['bogus']"),
    (["export", "BROKEN", "--format", "tflite"], "--format must be one of ['onnx']"),
    (["export", "BROKEN", "--opset", "0"], "--opset must be an integer >= 1"),
    (["serve", "MISSING"], "does not exist"),
    (["serve", "FOREIGN"], "not a vlagym policy config"),
    (["serve", "FOREIGN", "--port", "-1"], "--port must be between 0 and 65535"),
    (["eval", "--policy", "ws://127.0.0.1:1", "--tasks", "VLA-PickCup-v0", "--out", "OUT"], "cannot reach a policy"),
    (["eval", "--policy", "no_such_module_xyz:make", "--out", "OUT"], "cannot import 'no_such_module_xyz'"),
    (["train-bc", "--dataset", "MISSING"], "does not exist"),
    (["train-bc", "--dataset", "TEXT"], "not a vlagym demo file"),
    (["train-bc", "--dataset", "FOREIGN"], "not a LeRobot dataset (no meta/info.json)"),
    (["train-fbc", "--policy", "FOREIGN"], "not a vlagym policy config"),
    (["train-fbc", "--policy", "MISSING"], "not a policy checkpoint"),
    (["train-rl", "--policy", "FOREIGN"], "not a vlagym policy config"),
    (["train-rl", "--from-scratch", "--task", "VLA-PickCup-v0", "--algo", "dqn"], "algo"),
    (["train-residual", "--policy", "MISSING"], "not a policy checkpoint"),
    (["train-residual", "--policy", "FOREIGN"], "not a vlagym policy config"),
    (["distill", "--teacher", "MISSING"], "is not a residual teacher"),
    (["train-dagger", "--init", "MISSING", "--dataset", "TEXT"], "init: checkpoint folder"),
    (["train-dagger", "--init", "FOREIGN", "--dataset", "TEXT"], "init: "),
    (["train-dagger", "--init", "BROKEN", "--dataset", "TEXT"], "unknown VLAConfig fields ['bogus']"),
    (["distill", "--teacher", "TEXT", "--episodes", "0"], "episodes"),
    (["quickstart", "--steps", "0"], "--steps must be"),
    (["quickstart", "--eval-seed", "5"], "overlap"),
]


@pytest.mark.parametrize(
    ("argv", "needle"), CASES, ids=[" ".join(argv[:2]) + f" [{i}]" for i, (argv, _) in enumerate(CASES)]
)
def test_malformed_input_is_one_line_and_exit_2(argv, needle, bad, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [bad.get(a, a.replace("OUT", bad["OUT"])) for a in argv]
    needle = bad.get(needle, needle)
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert needle in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_every_command_is_covered():
    from vlagym.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == {argv[0] for argv, _ in CASES}
