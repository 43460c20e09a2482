"""`vlagym eval`: the results table on stdout, the output files, and one-line errors with exit code 2."""

from __future__ import annotations

import json

import pytest

from vlagym.cli import main


@pytest.mark.smoke
def test_eval_expert_prints_the_table_and_folder(tmp_path, capsys):
    out = tmp_path / "ev"
    argv = ["eval", "--policy", "expert", "--tasks", "VLA-PickCup-v0", "--episodes", "2", "--num-envs", "2"]
    argv += ["--seed", "7", "--out", str(out), "--env-kwargs", '{"instruction_split": "heldout"}', "--no-progress"]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    assert "| task | n | success | 95% CI |" in stdout
    assert "| VLA-PickCup-v0 | 2 | 100.0% |" in stdout
    assert str(out) in stdout
    results = json.loads((out / "results.json").read_text())
    assert [e["seed"] for e in results["tasks"]["VLA-PickCup-v0"]["episodes"]] == [7, 8]
    config = json.loads((out / "eval_config.json").read_text())["config"]
    assert config["env_kwargs"] == {"instruction_split": "heldout"} and config["num_envs"] == 2
    assert (out / "results.md").read_text().strip() in stdout


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--env-kwargs", "{bad"], "not valid JSON"),
        (["--env-kwargs", "[1]"], "JSON object"),
        (["--env-kwargs", '{"nope": 1}'], "nope"),
        (["--tasks", "VLA-PickCap-v0"], "did you mean 'VLA-PickCup-v0'"),
        (["--policy", "MISSING"], "does not exist"),
        (["--policy", "FOLDER"], "not a checkpoint folder"),
        (["--vectorization", "threads"], "vectorization must be one of"),
        (["--episodes", "0"], "episodes"),
        (["--n-action-steps", "2"], "not the expert"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, extra, needle):
    argv = ["eval", "--policy", "expert", "--tasks", "VLA-PickCup-v0", "--episodes", "1", "--out", str(tmp_path / "o")]
    argv += ["--no-progress"]
    extra = [{"MISSING": str(tmp_path / "missing"), "FOLDER": str(tmp_path)}.get(a, a) for a in extra]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vlagym eval: error:") and needle in err
    assert "\n" not in err and "Traceback" not in err


def test_eval_without_tasks_for_the_expert_is_a_usage_error(capsys):
    assert main(["eval", "--policy", "expert"]) == 2
    assert "at least one task" in capsys.readouterr().err
