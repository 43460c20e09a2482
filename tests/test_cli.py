"""The `vlagym` command line: list, video, and clean errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import imageio.v3 as iio
import pytest

import vlagym
from vlagym.cli import main


def test_list_names_every_task(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for env_id in vlagym.TASKS:
        assert env_id in out
    assert "FAMILY" in out and "EXAMPLE INSTRUCTION" in out


@pytest.mark.smoke
def test_video_writes_an_mp4_and_its_config(tmp_path):
    out = tmp_path / "pick.mp4"
    assert main(["video", "VLA-PickCup-v0", "--episodes", "1", "--size", "32", "--hold", "2", "--out", str(out)]) == 0
    frames = iio.imread(out)
    config = json.loads(out.with_name(out.name + ".json").read_text())
    assert frames.ndim == 4 and frames.shape[1:] == (32, 32, 3)
    assert len(frames) == config["frames"] == config["episodes"][0]["steps"] + 1 + 2
    assert config["config"]["task"] == "VLA-PickCup-v0" and config["successes"] == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["video", "VLA-PickCap-v0"],
        ["video", "VLA-PickCup-v0", "--split", "bogus"],
        ["video", "VLA-PickCup-v0", "--size", "31"],
        ["video", "VLA-PickCup-v0", "--out", "x.avi"],
    ],
)
def test_bad_input_exits_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err


def test_a_reader_that_goes_away_ends_the_command_quietly():
    """`vlagym list | head -1`: the closed pipe gives exit code 141 and no traceback on stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "vlagym.cli", "list"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # the reader leaves before the command writes anything
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err.decode()
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()


def test_help_of_every_command_loads_neither_torch_nor_mujoco():
    """`vlagym --help` and `vlagym X --help` build the parser from the config modules alone (fast)."""
    code = """
import contextlib, io, sys
from vlagym.cli import build_parser
parser = build_parser()
commands = next(a for a in parser._actions if a.dest == "command").choices
for argv in [["--help"], *([name, "--help"] for name in commands)]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        parser.parse_args(argv)
print(len(commands), sorted(m for m in ("torch", "mujoco", "h5py", "stable_baselines3") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(
        maxsplit=1
    )
    assert int(out[0]) >= 15 and out[1].strip() == "[]", out
