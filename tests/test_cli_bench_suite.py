"""`vlagym bench-suite list|show`, `vlagym eval --suite` errors and `vlagym compare`: outputs and exit codes."""

from __future__ import annotations

import json

import pytest

from vlagym.cli import main
from vlagym.eval.suites import get_suite

PICK = "VLA-PickCup-v0"


def one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vlagym {command}: error:"), err
    assert "\n" not in err and "Traceback" not in err
    return err


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory):
    """One real quick bundle of the expert: vlagym-pick, 2 episodes per split (8 episodes, all successful)."""
    out = tmp_path_factory.mktemp("bundle") / "expert"
    argv = ["eval", "--suite", "vlagym-pick", "--policy", "expert", "--out", str(out), "--episodes", "2"]
    assert main([*argv, "--no-progress"]) == 0
    return out


def edited(bundle_dir, tmp_path, name: str, edit) -> str:
    """A copy of the bundle with `edit(doc)` applied, as tmp_path/name/bundle.json."""
    doc = json.loads((bundle_dir / "bundle.json").read_text())
    edit(doc)
    folder = tmp_path / name
    folder.mkdir()
    (folder / "bundle.json").write_text(json.dumps(doc))
    return str(folder)


def fail_all(doc) -> None:
    for by_split in doc["results"].values():
        for cell in by_split.values():
            for e in cell["episodes"]:
                e["success"] = e["success_at_end"] = False


# ---------------------------------------------------------------------------- bench-suite
def test_list_shows_every_suite(capsys):
    assert main(["bench-suite", "list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:3] == ["SUITE", "VERSION", "TASKS"]
    assert [line.split()[0] for line in lines[1:]] == ["vlagym-10", "vlagym-pick"]
    assert "50 x 60" in lines[1]


def test_show_prints_the_protocol(capsys):
    assert main(["bench-suite", "show", "vlagym-10"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("vlagym-10 v1:")
    assert "VLA-PutCupInDrawer-v0  horizon 250 steps" in out and "VLA-MultiTask-v0" not in out
    assert "seed 5000000 + i" in out and "3000 in all" in out and "success_at_end" in out
    assert main(["bench-suite", "show", "vlagym-pick", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(get_suite("vlagym-pick").to_dict()))


def test_show_unknown_suite_exits_2(capsys):
    assert main(["bench-suite", "show", "vlagym10"]) == 2
    err = one_line_error(capsys, "bench-suite")
    assert "unknown suite 'vlagym10'" in err and "did you mean 'vlagym-10'" in err


# ---------------------------------------------------------------------------- eval --suite
@pytest.mark.smoke
def test_suite_eval_writes_the_bundle(bundle_dir):
    doc = json.loads((bundle_dir / "bundle.json").read_text())
    assert doc["protocol"]["name"] == "vlagym-pick" and doc["episodes"] == 2
    md = (bundle_dir / "bundle.md").read_text()
    assert "| task | train | heldout_paraphrase | unseen_combo | distractors | mean |" in md
    assert "--episodes 2" in doc["reproduce"] and str(bundle_dir) in doc["reproduce"]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--suite", "vlagym-pik"], "did you mean 'vlagym-pick'"),
        (["--suite", "vlagym-pick", "--tasks", PICK, "--seed", "3"], "drop --tasks, --seed"),
        (["--suite", "vlagym-pick", "--env-kwargs", '{"split": "camera"}'], "drop --env-kwargs"),
        (["--suite", "vlagym-pick", "--n-action-steps", "2", "--temporal-ensemble"], "drop --n-action-steps, --tem"),
        (["--suite", "vlagym-pick", "--episodes", "0"], "episodes must be at least 1"),
        (["--suite", "vlagym-pick", "--policy", "MISSING"], "does not exist"),
    ],
)
def test_suite_eval_bad_input_exits_2(tmp_path, capsys, extra, needle):
    extra = [str(tmp_path / "missing") if a == "MISSING" else a for a in extra]
    argv = ["eval", "--policy", "expert", "--out", str(tmp_path / "o"), *extra]
    assert main(argv) == 2
    assert needle in one_line_error(capsys, "eval")


# ---------------------------------------------------------------------------- compare
def test_compare_identical_runs(bundle_dir, capsys):
    assert main(["compare", str(bundle_dir), str(bundle_dir / "bundle.json")]) == 0
    out = capsys.readouterr().out
    assert "protocol: vlagym-pick v1" in out
    assert f"| {PICK} | 8 | 100.0% | 100.0% | +0.0 pts | [-27.7, +27.7] | 0 | 0 | 1 | no detectable difference |" in out
    assert "verdict over all 8 paired episodes (alpha 0.05): no detectable difference" in out


def test_compare_finds_the_better_policy(bundle_dir, tmp_path, capsys):
    worse = edited(bundle_dir, tmp_path, "worse", fail_all)
    assert main(["compare", str(bundle_dir), worse]) == 0
    out = capsys.readouterr().out
    # 8 discordant episodes, all for A: p = 2 / 2^8
    assert f"| {PICK} | 8 | 100.0% | 0.0% | +100.0 pts | [+42.8, +100.0] | 8 | 0 | 0.00781 | A better |" in out
    assert out.strip().endswith("A better")
    assert main(["compare", worse, str(bundle_dir), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tests"]["all"]["verdict"] == "B better" and doc["tests"]["all"]["b_only"] == 8
    assert doc["tests"]["all"]["p_value"] == pytest.approx(2 / 2**8) and doc["protocol"] == "vlagym-pick v1"
    assert doc["tests"]["all"]["difference_ci95"] == pytest.approx([-1.0, -0.428], abs=1e-3)


def test_compare_notes_different_software_versions(bundle_dir, tmp_path, capsys):
    other = edited(bundle_dir, tmp_path, "other", lambda d: d["fingerprint"]["versions"].update(mujoco="0.0"))
    assert main(["compare", str(bundle_dir), other]) == 0
    assert "note: the runs used different software versions: mujoco:" in capsys.readouterr().out


def _drop_episode(doc) -> None:
    doc["results"][PICK]["train"]["episodes"].pop()


def _other_protocol(doc) -> None:
    doc["protocol"]["version"] = "2"


def _fewer_episodes(doc) -> None:
    doc["episodes"] = 1
    for cell in doc["results"][PICK].values():
        cell["episodes"] = cell["episodes"][:1]


@pytest.mark.parametrize(
    "edit, needle",
    [
        (_drop_episode, "1 episode(s) only in A (first: task, split, seed = ('VLA-PickCup-v0', 'train', 5000001))"),
        (_other_protocol, "different protocols: A is vlagym-pick v1"),
        (_fewer_episodes, "A ran 2 episodes per task and split, B 1"),
    ],
)
def test_compare_mismatched_bundles_exits_2(bundle_dir, tmp_path, capsys, edit, needle):
    assert main(["compare", str(bundle_dir), edited(bundle_dir, tmp_path, "b", edit)]) == 2
    assert needle in one_line_error(capsys, "compare")


def test_compare_bad_paths_and_options_exit_2(bundle_dir, tmp_path, capsys):
    assert main(["compare", str(bundle_dir), str(tmp_path / "nope")]) == 2
    assert "does not exist" in one_line_error(capsys, "compare")
    assert main(["compare", str(bundle_dir), str(tmp_path)]) == 2
    assert "neither bundle.json nor results.json" in one_line_error(capsys, "compare")
    (tmp_path / "x.json").write_text("[1, 2]")
    assert main(["compare", str(bundle_dir), str(tmp_path / "x.json")]) == 2
    assert "is not a results bundle" in one_line_error(capsys, "compare")
    assert main(["compare", str(bundle_dir), str(bundle_dir), "--metric", "reward"]) == 2
    assert "--metric must be one of ['success', 'success_at_end']" in one_line_error(capsys, "compare")


def test_compare_plain_eval_results(bundle_dir, tmp_path, capsys):
    base = ["eval", "--policy", "expert", "--tasks", PICK, "--episodes", "2", "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "e1"), "--env-kwargs", '{"split": "lighting"}']) == 0
    assert main([*base, "--out", str(tmp_path / "e2"), "--env-kwargs", '{"split": "lighting"}']) == 0
    assert main([*base, "--out", str(tmp_path / "e3")]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "e1"), str(tmp_path / "e2" / "results.json")]) == 0
    assert "no detectable difference" in capsys.readouterr().out
    assert main(["compare", str(tmp_path / "e1"), str(tmp_path / "e3")]) == 2  # lighting vs train episodes
    assert "only in A (first: task, split, seed = ('VLA-PickCup-v0', 'lighting', 100000))" in capsys.readouterr().err
    assert main(["compare", str(bundle_dir), str(tmp_path / "e1")]) == 2
    assert "B is vlagym eval results" in one_line_error(capsys, "compare")


# ---------------------------------------------------------------------------- replicates
def fail_half(doc) -> None:
    """Fail the episodes of odd seeds: 4 of the 8 episodes."""
    for by_split in doc["results"].values():
        for cell in by_split.values():
            for e in cell["episodes"]:
                if e["seed"] % 2:
                    e["success"] = e["success_at_end"] = False


def test_replicates_pairs_each_run_and_averages_across_runs(bundle_dir, tmp_path, capsys):
    base = edited(bundle_dir, tmp_path, "base", fail_all)
    half = edited(bundle_dir, tmp_path, "half", fail_half)
    assert main(["replicates", base, str(bundle_dir), half]) == 0
    out = capsys.readouterr().out
    assert f"| {bundle_dir}/bundle.json | 8 | 100.0% | 0.0% | +100.0 pts | [+42.8, +100.0] | 8 | 0 | 0.00781 |" in out
    assert f"| {half}/bundle.json | 8 | 50.0% | 0.0% | +50.0 pts |" in out
    # differences 100 and 50: mean 75, sd 35.36, half-width t(0.975, 1) 35.36 / sqrt(2) = 12.706 * 25 = 317.7
    assert "mean difference over 2 runs: +75.0 pts (sd 35.4), 95% CI [-242.7, +392.7] (Student's t" in out
    assert "mean success of the runs: 75.0% (sd 35.4)" in out and "baseline 0.0%" in out
    assert main(["replicates", base, str(bundle_dir), half, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["test"]["a_only"] for r in doc["runs"]] == [8, 4]
    assert doc["mean_difference"]["mean"] == pytest.approx(0.75) and doc["mean_difference"]["n"] == 2
    assert doc["mean_difference"]["ci95"] == pytest.approx([0.75 - 12.7062 * 0.25, 0.75 + 12.7062 * 0.25], abs=1e-4)
    assert main(["replicates", base, half, "--json"]) == 0  # one run: no spread, nulls rather than NaN
    assert json.loads(capsys.readouterr().out)["mean_difference"]["sd"] is None
    assert main(["replicates", base, half]) == 0
    assert "one run: give more replicates" in capsys.readouterr().out


def test_replicates_errors_name_the_run(bundle_dir, tmp_path, capsys):
    short = edited(bundle_dir, tmp_path, "short", _drop_episode)
    assert main(["replicates", str(bundle_dir), short]) == 2
    err = one_line_error(capsys, "replicates")
    assert f"{short} against the baseline {bundle_dir}" in err and "only in B" in err
    assert main(["replicates", str(bundle_dir), short, short]) == 2
    assert "a run is given twice" in one_line_error(capsys, "replicates")
    assert main(["replicates", str(bundle_dir), str(bundle_dir), "--alpha", "2"]) == 2
    assert "--alpha must be between 0 and 1" in one_line_error(capsys, "replicates")
