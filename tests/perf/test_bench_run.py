"""`vlagym bench`: every section runs and saves comparable JSON; two runs compare; bad input is one line + exit 2.

Speed is never asserted: the quick run has tiny budgets on a busy machine, only its shape is checked.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
from pathlib import Path

import pytest

from vlagym.cli import main
from vlagym.perf.config import DEFAULT_SECTIONS
from vlagym.perf.results import compare_bench_runs, read_bench_run

TASK = "VLA-PickCup-v0"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[Path, str]:
    """One `vlagym bench --quick --repeats 2` of every section on one task at 32 px: (JSON path, stdout)."""
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = main(["bench", "--quick", "--repeats", "2", "--tasks", TASK, "--image-size", "32", "--out", str(out)])
    assert rc == 0
    return out, stdout.getvalue()


@pytest.mark.smoke
def test_quick_run_writes_every_section(quick_run):
    path, stdout = quick_run
    doc = read_bench_run(path)
    assert list(doc["sections"]) == list(DEFAULT_SECTIONS)
    assert doc["config"]["quick"] is True and doc["config"]["tasks"] == [TASK] and doc["config"]["repeats"] == 2
    assert {"vlagym", "mujoco", "gymnasium", "torch", "numpy"} <= set(doc["fingerprint"]["versions"])
    for name, section in doc["sections"].items():
        assert section["rows"], name
        for row in section["rows"]:
            assert set(section["columns"]) <= set(row), (name, row)
        assert f"### {section['title']}" in stdout
        if name == "latency":  # p50/p99 over its calls, not repeated passes
            assert all("samples" not in row for row in section["rows"])
            continue
        assert "median of 2 interleaved passes" in " ".join(section["notes"]), name
        for row in section["rows"]:  # every timed cell: its median and the two passes it came from
            timed = [c for c in section["columns"] if c not in section["key"] and c not in ("params", "env_steps")]
            assert all(len(row["samples"][c]) == 2 for c in timed if not isinstance(row[c], bool)), (name, row)
    env_row = doc["sections"]["env"]["rows"][0]
    assert env_row["task"] == TASK
    assert env_row["replay_identical"] is True  # mj_step alone ends in exactly the env's state
    parts = doc["sections"]["env-parts"]["rows"][0]
    assert parts["task"] == TASK and all(parts[c] > 0 for c in doc["sections"]["env-parts"]["columns"] if c != "task")
    assert {r["num_envs"] for r in doc["sections"]["vector"]["rows"]} == {1, 2}
    assert {r["head"] for r in doc["sections"]["latency"]["rows"]} == {"l1", "flow"}
    chunk_rows = {r["acting"] for r in doc["sections"]["latency"]["rows"] if r["acting"].startswith("chunk")}
    onnx = importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("onnxscript")
    assert chunk_rows == {"chunk per call, torch"} | ({"chunk per call, onnxruntime"} if onnx else set())
    runs = [r["run"] for r in doc["sections"]["ppo"]["rows"]]
    assert len(runs) == 2 and all(r["env_steps"] > 0 for r in doc["sections"]["ppo"]["rows"])
    for row in doc["sections"]["ppo"]["rows"]:  # where training time goes: env steps, policy, updates
        shares = [row[k] for k in ("env_share", "policy_share", "learn_share")]
        assert all(0 < x < 1 for x in shares) and sum(shares) == pytest.approx(1.0)
    fbc = doc["sections"]["filtered-bc"]["rows"]
    assert [r["run"] for r in fbc] == ["batches drawn inline", "batches prefetched (default)"]
    for row in fbc:  # collection (env steps, policy) and updates share the time
        shares = [row[k] for k in ("env_share", "policy_share", "learn_share")]
        assert all(0 < x < 1 for x in shares) and sum(shares) == pytest.approx(1.0)
        assert row["collect_steps_per_s"] > 0 and row["updates_per_s"] > 0
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

    rows = {(r["section"], r["row"], r["metric"]): r for r in compare_bench_runs(old, new)}
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
        ["bench", "--repeats", "0"],
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


def _without_passes(doc: dict) -> dict:
    """A run as saved before --repeats: no config.repeats, no per-row samples."""
    old = copy.deepcopy(doc)
    del old["config"]["repeats"]
    for section in old["sections"].values():
        for row in section["rows"]:
            row.pop("samples", None)
    return old


def test_compare_reads_runs_saved_before_repeats(quick_run, tmp_path, capsys):
    path, _ = quick_run
    new = json.loads(path.read_text())
    old_path = tmp_path / "old.json"
    old_path.write_text(json.dumps(_without_passes(new)))

    rows = compare_bench_runs(read_bench_run(old_path), new)
    rate = next(r for r in rows if r["section"] == "env" and r["metric"] == "state steps/s")
    assert rate["ratio"] == pytest.approx(1.0) and rate["old_spread"] is None and rate["new_spread"] is not None

    for a, b in ((old_path, path), (path, old_path)):
        assert main(["bench", "--compare", str(a), str(b)]) == 0
        out = capsys.readouterr().out
        assert "| env | VLA-PickCup-v0 | state steps/s |" in out
    assert "repeats 2 -> 1" in out  # an old run counts as one pass
    assert "| - / " in out  # no spread for the old run
