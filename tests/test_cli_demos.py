"""`vlagym demos` and `vlagym dataset info|check|split-subtasks`: outputs, exit codes, one-line errors, Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import h5py
import pytest

from vlagym.cli import main
from vlagym.train.validate import check_dataset

FAST = ["--task", "VLA-PickCup-v0", "--image-size", "16", "--no-progress"]


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "pick.hdf5"
    assert main(["demos", *FAST, "--episodes", "2", "--num-envs", "2", "--seed", "4", "--out", str(path)]) == 0
    return path


@pytest.mark.smoke
def test_demos_writes_the_file_and_its_config(demo_file, capsys):
    config = json.loads(demo_file.with_name(demo_file.name + ".config.json").read_text())
    assert config["episodes"] == 2 and config["num_envs"] == 2 and config["seed"] == 4
    assert config["env_kwargs"] == {"split": "train"} and config["image_size"] == 16
    assert check_dataset(demo_file) == []
    with h5py.File(demo_file, "r") as f:
        assert [f["data"][f"demo_{i}"].attrs["seed"] for i in range(2)] == [4, 5]


def test_demos_resume_and_existing_file(demo_file, capsys):
    argv = ["demos", *FAST, "--episodes", "3", "--seed", "4", "--out", str(demo_file)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "exists" in err and "\n" not in err
    assert main([*argv, "--resume"]) == 0
    out = capsys.readouterr().out
    assert "3 demos" in out and "from episode 2" in out
    assert main([*argv, "--resume", "--split", "lighting"]) == 2
    assert "cannot resume" in capsys.readouterr().err


def test_dataset_info_and_check(demo_file, capsys):
    assert main(["dataset", "check", str(demo_file)]) == 0
    assert capsys.readouterr().out.strip().endswith("ok")
    assert main(["dataset", "info", str(demo_file)]) == 0
    out = capsys.readouterr().out
    assert "VLA-PickCup-v0" in out and "front_rgb" in out and "actions" in out
    assert main(["dataset", "info", "--json", str(demo_file)]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] >= 2


def test_dataset_split_subtasks(demo_file, tmp_path, capsys):
    out = tmp_path / "split.hdf5"
    assert main(["dataset", "split-subtasks", str(demo_file), "--out", str(out)]) == 0
    assert re.search(r"(\d+) episodes -> \1; 0 of", capsys.readouterr().out)  # PickCup has one stage: nothing cut
    assert check_dataset(out) == []
    for argv in (
        ["dataset", "split-subtasks", str(demo_file), "--out", str(out)],
        ["dataset", "split-subtasks", str(tmp_path / "missing.hdf5"), "--out", str(tmp_path / "x.hdf5")],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert ("exists" in err or "no such file" in err) and "\n" not in err and "Traceback" not in err
    assert main(["dataset", "split-subtasks", str(demo_file), "--out", str(out), "--overwrite"]) == 0


def test_dataset_check_exits_1_on_problems(demo_file, tmp_path, capsys):
    cut = tmp_path / "cut.hdf5"
    cut.write_bytes(demo_file.read_bytes()[:5000])
    assert main(["dataset", "check", str(cut)]) == 1
    assert "truncated" in capsys.readouterr().out
    assert main(["dataset", "info", str(cut)]) == 1
    err = capsys.readouterr().err.strip()
    assert "truncated" in err and "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["demos", "--task", "VLA-PickCap-v0"],
        ["demos", *FAST, "--split", "bogus"],
        ["demos", *FAST, "--cameras", "top"],
        ["demos", *FAST, "--obs-mode", "depth"],
        ["demos", *FAST, "--vectorization", "ray"],
        ["demos", *FAST, "--episodes", "0"],
        ["demos", *FAST, "--out", "x.npz"],
        ["demos", *FAST, "--policy", "/nonexistent/checkpoint"],
        ["demos", *FAST, "--policy", "expert"],
        ["demos", *FAST, "--policy", "ckpt", "--action-noise", "0.1"],
        ["dataset", "info", "/nonexistent/file.hdf5"],
        ["dataset", "check", "/nonexistent/file.hdf5"],
    ],
)
def test_bad_input_exits_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_ctrl_c_leaves_a_valid_file(vectorization, tmp_path):
    path = tmp_path / "int.hdf5"
    argv = [sys.executable, "-m", "vlagym.cli", "demos", *FAST, "--episodes", "500", "--out", str(path)]
    argv += ["--num-envs", "2", "--vectorization", vectorization]
    # Its own process group, signalled as a whole: what Ctrl-C in a terminal does (async workers get it too).
    # SIGINT back to its default in the child: a shell ignores it in commands it starts in the background (`&`),
    # the ignore is inherited, and Python then installs no KeyboardInterrupt handler.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    demos, deadline = 0, time.monotonic() + 60
    try:
        while demos < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
            if path.exists():
                with h5py.File(path, "r") as f:
                    demos = len(f["data"])
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # CPython drops a KeyboardInterrupt raised inside a finalizer: press again
            os.killpg(proc.pid, signal.SIGINT)
            _, err = proc.communicate(timeout=60)
    text = err.decode()
    assert demos >= 2 and proc.returncode == 130, text[-2000:]
    assert "Traceback" not in text and "--resume" in text and "interrupted" in text, text[-2000:]
    assert check_dataset(path) == []
    assert not list(tmp_path.glob("*.partial")) and not list(tmp_path.glob("*.spare"))
