"""`vlagym bench`: every section runs and saves comparable JSON; two runs compare; bad input is one line + exit 2.

Speed is never asserted: the quick run has tiny budgets on a busy machine, only its shape is checked.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path

import pytest

from vlagym.cli import main
from vlagym.eval import bench
from vlagym.train.validate import check_dataset

TASK = "VLA-PickCup-v0"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[Path, str]:
    """One `vlagym bench --quick` of every section on one task at 32 px: (JSON path, stdout)."""
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = main(["bench", "--quick", "--tasks", TASK, "--image-size", "32", "--out", str(out)])
    assert rc == 0
    return out, stdout.getvalue()


def test_quick_run_writes_every_section(quick_run):
    path, stdout = quick_run
    doc = bench.read_run(path)
    assert list(doc["sections"]) == list(bench.SECTIONS)
    assert doc["config"]["quick"] is True and doc["config"]["tasks"] == [TASK]
    assert {"vlagym", "mujoco", "gymnasium", "torch", "numpy"} <= set(doc["fingerprint"]["versions"])
    for name, section in doc["sections"].items():
        assert section["rows"], name
        for row in section["rows"]:
            assert set(section["columns"]) <= set(row), (name, row)
        assert f"### {section['title']}" in stdout
    env_row = doc["sections"]["env"]["rows"][0]
    assert env_row["task"] == TASK
    assert env_row["replay_identical"] is True  # mj_step alone ends in exactly the env's state
    assert {r["num_envs"] for r in doc["sections"]["vector"]["rows"]} == {1, 2}
    assert {r["head"] for r in doc["sections"]["latency"]["rows"]} == {"l1", "flow"}
    runs = [r["run"] for r in doc["sections"]["ppo"]["rows"]]
    assert len(runs) == 2 and all(r["env_steps"] > 0 for r in doc["sections"]["ppo"]["rows"])
    assert f"results: {path}" in stdout


def test_compare_prints_ratios(quick_run, tmp_path, capsys):
    old_path, _ = quick_run
    old = json.loads(old_path.read_text())
    new = copy.deepcopy(old)
    new["sections"]["env"]["rows"][0]["state_steps_per_s"] = old["sections"]["env"]["rows"][0]["state_steps_per_s"] / 2
    new["sections"]["latency"]["rows"][0]["p50_ms"] = old["sections"]["latency"]["rows"][0]["p50_ms"] * 4
    del new["sections"]["ppo"]
    new_path = tmp_path / "new.json"
    new_path.write_text(json.dumps(new))

    rows = {(r["section"], r["row"], r["metric"]): r for r in bench.compare_runs(old, new)}
    first_latency = ", ".join(str(old["sections"]["latency"]["rows"][0][k]) for k in ("head", "acting"))
    assert rows["env", TASK, "state steps/s"]["ratio"] == pytest.approx(0.5)
    assert rows["env", TASK, "state steps/s"]["speedup"] == pytest.approx(0.5)
    assert rows["latency", first_latency, "p50 ms"]["ratio"] == pytest.approx(4.0)
    assert rows["latency", first_latency, "p50 ms"]["speedup"] == pytest.approx(0.25)  # a time: old / new
    assert rows["env", TASK, "raw mj_step steps/s"]["ratio"] == pytest.approx(1.0)
    assert not any(section == "ppo" for section, _, _ in rows)

    assert main(["bench", "--compare", str(old_path), str(new_path)]) == 0
    out = capsys.readouterr().out
    assert "| env | VLA-PickCup-v0 | state steps/s |" in out and "| 0.50 | 0.50x |" in out
    assert "section ppo only in the old run" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "--sections", "env", "nope"],
        ["bench", "--tasks", "VLA-Nope-v0"],
        ["bench", "--threads", "0"],
        ["bench", "--device", "tpu"],
        ["bench", "--demos", "missing.hdf5"],
        ["bench", "--out", "no/such/folder/bench.json"],
        ["bench", "--compare", "missing_a.json", "missing_b.json"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("vlagym bench: error: ") and err.count("\n") == 1


def test_compare_rejects_files_that_are_not_bench_results(tmp_path, capsys):
    other = tmp_path / "results.json"
    other.write_text(json.dumps({"tasks": {}}))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    for path in (other, broken):
        assert main(["bench", "--compare", str(path), str(path)]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and err.count("\n") == 1


def test_synthetic_demo_file_is_a_valid_demo_file(tmp_path):
    path = bench.write_synthetic_demos(tmp_path / "demos.hdf5", TASK, episodes=2, steps=3, image_size=16)
    assert check_dataset(path) == []


def test_steady_rate_leaves_out_the_start():
    # 10 samples per step: steps 1..3 took 1 s, 1.5 s, 2 s since the start -> 20 samples/s after step 1
    points = [(1, 10 / 1.0), (2, 20 / 1.5), (3, 30 / 2.0)]
    assert bench.steady_rate(points, per_step=10) == pytest.approx(20.0)
