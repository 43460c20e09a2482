"""Paired comparison of runs (`vlagym.eval.compare`): two runs, replicates against a baseline, reports, errors.

The bundles are written by hand (the fields `read_eval_run` reads), so no env runs here; `test_cli_bench_suite`
compares real bundles through the command line."""

from __future__ import annotations

import json

import pytest

from vlagym.eval.compare import (
    compare_runs,
    format_comparison_report,
    format_replicates_report,
    replicate_runs,
)
from vlagym.eval.configs import CompareConfig, ReplicatesConfig
from vlagym.eval.layout import BUNDLE_FORMAT, BUNDLE_JSON
from vlagym.eval.stats import A_BETTER, B_BETTER, NO_DIFFERENCE, PairingError

PICK, BUTTON = "VLA-PickCup-v0", "VLA-PressButton-v0"
SEEDS = range(5_000_000, 5_000_004)


def bundle(tmp_path, name: str, wins=lambda task, seed, split: True, version="1", splits=("train",), **top) -> str:
    """A bundle folder of two tasks x `splits`, 4 episodes each; `wins(task, seed, split)` decides success."""
    results = {
        task: {
            split: {"episodes": [{"seed": s, "success": wins(task, s, split), "success_at_end": False} for s in SEEDS]}
            for split in splits
        }
        for task in (PICK, BUTTON)
    }
    doc = {
        "format": BUNDLE_FORMAT,
        "protocol": {"name": "tiny", "version": version},
        "policy": name,
        "episodes": len(SEEDS),
        "results": results,
        "fingerprint": {"versions": {"vlagym": "1.0", "mujoco": "3.0"}},
        **top,
    }
    folder = tmp_path / name
    folder.mkdir()
    (folder / BUNDLE_JSON).write_text(json.dumps(doc))
    return str(folder)


def never(task, seed, split) -> bool:
    return False


def odd_seeds_fail(task, seed, split) -> bool:
    return seed % 2 == 0


# ---------------------------------------------------------------------------- two runs
def test_identical_runs_show_no_difference(tmp_path):
    a = bundle(tmp_path, "a")
    c = compare_runs(CompareConfig(a=a, b=f"{a}/{BUNDLE_JSON}"))
    assert list(c.tests) == [PICK, BUTTON, "all"] and c.tests["all"].n == 8
    assert c.tests["all"].verdict == NO_DIFFERENCE and c.pairing_note is None and c.version_notes == []
    report = format_comparison_report(c)
    assert report.startswith(f"A: {a}/{BUNDLE_JSON} (policy a)\nB: {a}/{BUNDLE_JSON} (policy a)\nprotocol: tiny v1;")
    assert f"| {PICK} | 4 | 100.0% | 100.0% | +0.0 pts |" in report
    assert report.endswith("verdict over all 8 paired episodes (alpha 0.05): no detectable difference")


def test_the_better_run_is_found_both_ways(tmp_path):
    good, bad = bundle(tmp_path, "good"), bundle(tmp_path, "bad", never)
    c = compare_runs(CompareConfig(a=good, b=bad))
    assert c.tests["all"].verdict == A_BETTER and c.tests["all"].a_only == 8
    assert c.tests["all"].p_value == pytest.approx(2 / 2**8)
    doc = json.loads(json.dumps(compare_runs(CompareConfig(a=bad, b=good, json=True)).to_json()))
    assert doc["tests"]["all"]["verdict"] == B_BETTER and doc["protocol"] == "tiny v1" and doc["metric"] == "success"
    assert doc["a"] == {"path": f"{bad}/{BUNDLE_JSON}", "policy": "bad"} and doc["pairing_note"] is None
    at_end = compare_runs(CompareConfig(a=good, b=bad, metric="success_at_end"))
    assert at_end.tests["all"].verdict == NO_DIFFERENCE  # no episode succeeds at its end in either run


def test_by_split_tests_each_split_over_its_tasks(tmp_path):
    splits = ("train", "camera")
    a = bundle(tmp_path, "a", splits=splits)
    b = bundle(tmp_path, "b", lambda task, seed, split: split == "train", splits=splits)  # fails every camera episode
    by_task = compare_runs(CompareConfig(a=a, b=b))
    by_split = compare_runs(CompareConfig(a=a, b=b, by="split"))
    assert list(by_task.tests) == [PICK, BUTTON, "all"] and list(by_split.tests) == ["camera", "train", "all"]
    camera, train = by_split.tests["camera"], by_split.tests["train"]
    assert (camera.n, camera.a_only, camera.b_only, camera.verdict) == (8, 8, 0, A_BETTER)
    assert (train.n, train.a_only, train.b_only, train.verdict) == (8, 0, 0, NO_DIFFERENCE)
    assert by_split.tests["all"] == by_task.tests["all"]  # the grouping changes the rows, not the overall test
    report = format_comparison_report(by_split)
    assert "| split | n | A | B |" in report and "| camera | 8 | 100.0% | 0.0% | +100.0 pts |" in report
    assert by_split.to_json()["by"] == "split" and set(by_split.to_json()["tests"]) == {"camera", "train", "all"}
    with pytest.raises(PairingError, match="--by must be one of"):
        CompareConfig(a=a, b=b, by="seed")


def test_notes_software_versions_and_sequential_pairing(tmp_path):
    a = bundle(tmp_path, "a")
    b = bundle(tmp_path, "b", fingerprint={"versions": {"vlagym": "1.0", "mujoco": "9.9"}})
    report = format_comparison_report(compare_runs(CompareConfig(a=a, b=b)))
    assert report.endswith("note: the runs used different software versions: mujoco: 3.0 vs 9.9")
    short = bundle(tmp_path, "short", sequential={"target_width": 0.5})
    doc = json.loads((tmp_path / "short" / BUNDLE_JSON).read_text())
    doc["results"][PICK]["train"]["episodes"] = doc["results"][PICK]["train"]["episodes"][:2]
    (tmp_path / "short" / BUNDLE_JSON).write_text(json.dumps(doc))
    c = compare_runs(CompareConfig(a=a, b=short))
    assert c.tests["all"].n == 6 and "left out 2 of A's 8" in c.pairing_note
    assert f"\nnote: {c.pairing_note}\n\n| task |" in format_comparison_report(c)


@pytest.mark.parametrize(
    "b_kwargs, needle",
    [
        ({"version": "2"}, "different protocols: A is tiny v1"),
        ({"episodes": 2}, "A ran 4 episodes per task and split, B 2"),
    ],
)
def test_runs_that_do_not_pair_raise(tmp_path, b_kwargs, needle):
    a, b = bundle(tmp_path, "a"), bundle(tmp_path, "b", **b_kwargs)
    with pytest.raises(PairingError, match=needle):
        compare_runs(CompareConfig(a=a, b=b))
    with pytest.raises(PairingError, match="does not exist"):
        compare_runs(CompareConfig(a=a, b=str(tmp_path / "nope")))


# ---------------------------------------------------------------------------- replicates
def test_replicates_pair_each_run_and_average_across_runs(tmp_path):
    base = bundle(tmp_path, "base", never)
    runs = [bundle(tmp_path, "all"), bundle(tmp_path, "half", odd_seeds_fail)]
    r = replicate_runs(ReplicatesConfig(baseline=base, runs=runs))
    assert [(run.policy, t.a_only, t.b_only) for run, t in r.rows] == [("all", 8, 0), ("half", 4, 0)]
    report = format_replicates_report(r)
    assert report.startswith(f"baseline: {base}/{BUNDLE_JSON} (policy base); protocol: tiny v1; metric: success")
    assert "mean difference over 2 runs: +75.0 pts (sd 35.4)" in report and "baseline 0.0%" in report
    doc = json.loads(json.dumps(r.to_json()))
    assert doc["mean_difference"]["mean"] == pytest.approx(0.75) and doc["mean_difference"]["n"] == 2
    assert [x["policy"] for x in doc["runs"]] == ["all", "half"]
    one = replicate_runs(ReplicatesConfig(baseline=base, runs=runs[:1]))
    assert "one run: give more replicates" in format_replicates_report(one)
    assert json.loads(json.dumps(one.to_json()))["mean_difference"]["sd"] is None  # NaN spread as null


def test_a_replicate_that_does_not_pair_is_named(tmp_path):
    base = bundle(tmp_path, "base")
    other = bundle(tmp_path, "other", version="2")
    with pytest.raises(PairingError, match=f"{other} against the baseline {base}: the runs follow different"):
        replicate_runs(ReplicatesConfig(baseline=base, runs=[other]))
