"""Sequential stopping of suite runs (`vlagym eval --suite NAME --sequential-width W`): where a cell stops, that the
stop depends only on the outcomes in seed order (not on --num-envs), the bundle, reproduction, `compare`, bad input."""

from __future__ import annotations

import json
import math
import shlex
import zlib

import numpy as np
import pytest

from vlagym.cli import main
from vlagym.eval import local_rollouts, suites
from vlagym.eval.adapters import ExpertPolicy
from vlagym.eval.bundle import reproduction_command
from vlagym.eval.configs import EvalError, SuiteRunConfig
from vlagym.eval.runs import check_comparable, paired_outcomes, read_eval_run
from vlagym.eval.sequential import earliest_stop, stopping_index
from vlagym.eval.stats import PairingError, compare_outcomes, wilson_interval
from vlagym.eval.suite_run import run_suite
from vlagym.eval.suites import SuiteProtocol

BUTTON = "VLA-PressButton-v0"
EPISODES = 24
BASE = 5_000_000
#: outcomes of `FlakyExpert` on the first 24 seeds of the tiny protocol (1 = success), checked in a test below
FLAKY = "110111111011001011011111"


def tiny_protocol(**kwargs) -> SuiteProtocol:
    fields = dict(
        name="tiny-seq",
        version="0",
        description="the quickest task, one split",
        tasks=(BUTTON,),
        splits=("train",),
        episodes=EPISODES,
        base_seed=BASE,
        horizons=((BUTTON, 80),),
    )
    return SuiteProtocol(**(fields | kwargs))


class FlakyExpert:
    """The scripted expert, except that it stands still (and fails) on the seeds whose first observation's bytes
    hash to 0 mod 3: outcomes that depend only on the seed, mixed enough to stop somewhere in the middle."""

    def __init__(self, envs):
        self.expert = ExpertPolicy(envs)
        self.fresh = np.ones(envs.num_envs, bool)
        self.fail = np.zeros(envs.num_envs, bool)

    def reset(self, mask) -> None:
        self.expert.reset(mask)
        self.fresh |= np.asarray(mask, bool)

    def __call__(self, obs) -> np.ndarray:
        for i in np.flatnonzero(self.fresh):
            self.fail[i] = zlib.crc32(np.asarray(obs[i]).tobytes()) % 3 == 0
        self.fresh[:] = False
        action = self.expert(obs)
        action[self.fail] = 0.0
        return action


class IdlePolicy(FlakyExpert):
    """Always stands still: every episode fails."""

    def __call__(self, obs) -> np.ndarray:
        return np.zeros((len(obs), 7), np.float32)


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(suites.SUITES, "tiny-seq", tiny_protocol())
    return monkeypatch


def flaky(monkeypatch) -> None:
    monkeypatch.setattr(local_rollouts, "ExpertPolicy", FlakyExpert)


def run(tmp_path, name: str, **kwargs) -> dict:
    return run_suite(
        SuiteRunConfig(suite="tiny-seq", policy="expert", out=str(tmp_path / name), progress=False, **kwargs)
    )


def cell(bundle: dict) -> dict:
    return bundle["results"][BUTTON]["train"]


def outcomes(bundle: dict) -> str:
    return "".join("1" if e["success"] else "0" for e in cell(bundle)["episodes"])


# ---------------------------------------------------------------------------- the rule on outcome lists
def brute_stop(outcomes, width, least):
    """Independent of the code under test: the Wilson width of every prefix, straight from `wilson_interval`."""
    for n in range(least, len(outcomes) + 1):
        lo, hi = wilson_interval(sum(outcomes[:n]), n)
        if hi - lo <= width:
            return n
    return None


def test_stopping_index_is_the_first_prefix_whose_interval_is_narrow_enough():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n, p = int(rng.integers(1, 60)), float(rng.uniform())
        seq = list(rng.uniform(size=n) < p)
        width, least = float(rng.uniform(0.1, 0.9)), int(rng.integers(1, 30))
        assert stopping_index(seq, width, least) == brute_stop(seq, width, least)
    assert stopping_index([True] * 10, 0.5, 2) == 4  # 4/4: [51.0%, 100%], 3/3 is wider than 0.5
    assert stopping_index([True] * 10, 0.5, 6) == 6
    assert stopping_index([True, False] * 5, 0.3, 1) is None


def could_stop_at(n: int, done: int, successes: int, width: float, least: int) -> bool:
    """Some continuation of `done` outcomes with `successes` successes meets the rule after exactly n episodes."""
    return n >= least and any(
        np.subtract(*wilson_interval(successes + j, n)[::-1]) <= width for j in range(n - done + 1)
    )


def test_earliest_stop_is_exact():
    """No continuation of the first `done` outcomes can stop before `earliest_stop`, and some can stop there."""
    rng = np.random.default_rng(1)
    total = 14
    for _ in range(200):
        done, width, least = int(rng.integers(0, total)), float(rng.uniform(0.3, 0.9)), int(rng.integers(1, 8))
        successes = int(rng.integers(0, done + 1))
        possible = (n for n in range(done + 1, total + 1) if could_stop_at(n, done, successes, width, least))
        assert earliest_stop(done, successes, total, width, least) == next(possible, total)


# ---------------------------------------------------------------------------- suite runs
def test_always_successful_and_always_failing_policies_stop_early(tiny, tmp_path):
    bundle = run(tmp_path, "expert", sequential_width=0.5, sequential_min_episodes=2)
    c = cell(bundle)
    assert c["n"] == 4 and outcomes(bundle) == "1111"  # 3/3 is [43.9%, 100%]: wider than 0.5
    assert [e["seed"] for e in c["episodes"]] == [BASE, BASE + 1, BASE + 2, BASE + 3]
    assert c["sequential"]["stopped_early"] and c["sequential"]["width_reached"]
    assert c["sequential"]["episodes_simulated"] == 4 and c["sequential"]["episodes_discarded"] == 0
    assert c["ci95"][1] - c["ci95"][0] <= 0.5

    tiny.setattr(local_rollouts, "ExpertPolicy", IdlePolicy)
    failing = run(tmp_path, "idle", sequential_width=0.5, sequential_min_episodes=2, num_envs=3)
    c = cell(failing)
    assert c["n"] == 4 and outcomes(failing) == "0000" and c["sequential"]["stopped_early"]
    # the first block spans 4 seeds (more than num_envs), the least count that could stop: nothing is discarded
    assert c["sequential"]["episodes_simulated"] == 4 and c["sequential"]["episodes_discarded"] == 0


def test_flaky_outcomes_are_the_documented_ones(tiny, tmp_path):
    flaky(tiny)
    full = run(tmp_path, "full")
    assert outcomes(full) == FLAKY and cell(full)["n"] == EPISODES
    assert full["sequential"] is None and "sequential" not in cell(full)


@pytest.mark.parametrize("width, least, stop", [(0.4, 2, 17), (0.45, 1, 8), (0.6, 6, 6), (0.3, 2, None)])
def test_the_stop_does_not_depend_on_num_envs(tiny, tmp_path, width, least, stop):
    """Same n and the same episodes (the first n of a full run) whatever the number of sub-envs."""
    flaky(tiny)
    assert stopping_index([c == "1" for c in FLAKY], width, least) == stop
    n = stop or EPISODES
    runs = {
        k: run(tmp_path, f"k{k}", num_envs=k, sequential_width=width, sequential_min_episodes=least) for k in (1, 2, 3)
    }
    episodes = {k: cell(b)["episodes"] for k, b in runs.items()}
    assert [len(e) for e in episodes.values()] == [n, n, n]
    assert outcomes(runs[1]) == FLAKY[:n]
    assert episodes[1] == episodes[2] == episodes[3]  # seeds, outcomes, lengths, returns, instructions
    for b in runs.values():
        seq = cell(b)["sequential"]
        assert seq["stopped_early"] == (n < EPISODES) and seq["width_reached"] == (n < EPISODES)
        assert seq["episodes_simulated"] == n + seq["episodes_discarded"]
        assert b["suite_average"]["success"]["mean"] == pytest.approx(FLAKY[:n].count("1") / n)


def test_the_bundle_records_the_rule(tiny, tmp_path):
    flaky(tiny)
    bundle = run(tmp_path, "b", sequential_width=0.4, sequential_min_episodes=2)
    assert json.loads((tmp_path / "b" / "bundle.json").read_text()) == json.loads(json.dumps(bundle))
    seq = bundle["sequential"]
    assert seq["target_width"] == 0.4 and seq["min_episodes"] == 2 and seq["max_episodes"] == EPISODES
    assert "can_stop" in seq["rule"] and "seed order" in seq["rule"]
    assert bundle["config"]["sequential_width"] == 0.4 and bundle["config"]["sequential_min_episodes"] == 2
    assert bundle["episodes"] == EPISODES and not bundle["partial"]
    md = (tmp_path / "b" / "bundle.md").read_text()
    assert "Sequential stopping: each task x split stopped at the first n >= 2 episodes" in md
    assert "at most 40.0% wide (up to 24); 1 of 1 cells stopped early, 17 episodes counted" in md
    lo, hi = cell(bundle)["ci95"]
    assert FLAKY[:17].count("1") == 12
    assert f"| {BUTTON} | 70.6% [{100 * lo:.1f}%, {100 * hi:.1f}%] n=17 | 70.6% |" in md
    assert "Up to 24 episodes per task and split, seeds 5000000..5000023" in md
    assert "--sequential-width 0.4 --sequential-min-episodes 2" in bundle["reproduce"]


def test_rerunning_the_reproduction_command_reproduces_the_bundle(tiny, tmp_path, capsys):
    flaky(tiny)
    tiny.chdir(tmp_path)
    argv = ["eval", "--suite", "tiny-seq", "--policy", "expert", "--out", "run", "--num-envs", "2"]
    assert main([*argv, "--sequential-width", "0.45", "--sequential-min-episodes", "1", "--no-progress"]) == 0
    first = json.loads((tmp_path / "run" / "bundle.json").read_text())
    assert cell(first)["n"] == 8
    (tmp_path / "run").rename(tmp_path / "first")
    again_argv = shlex.split(first["reproduce"])
    assert again_argv[:2] == ["vlagym", "eval"] and "--sequential-width" in again_argv
    assert main([*again_argv[1:], "--no-progress"]) == 0
    again = json.loads((tmp_path / "run" / "bundle.json").read_text())
    assert cell(again)["episodes"] == cell(first)["episodes"]
    assert cell(again)["sequential"] == cell(first)["sequential"]
    assert again["sequential"] == first["sequential"] and again["reproduce"] == first["reproduce"]
    assert "Sequential stopping:" in capsys.readouterr().out


def test_reproduction_command_keeps_the_exact_width():
    cfg = SuiteRunConfig(suite="vlagym-pick", policy="expert", sequential_width=0.1 + 0.2, sequential_min_episodes=20)
    argv = shlex.split(reproduction_command(cfg))
    assert float(argv[argv.index("--sequential-width") + 1]) == 0.1 + 0.2  # repr round-trips the float
    assert argv[argv.index("--sequential-min-episodes") + 1] == "20"  # written even at its default
    assert "--sequential-width" not in reproduction_command(SuiteRunConfig(suite="vlagym-pick", policy="expert"))


# ---------------------------------------------------------------------------- compare
def test_compare_pairs_a_sequential_run_on_the_episodes_both_hold(tiny, tmp_path, capsys):
    flaky(tiny)
    run(tmp_path, "full")
    run(tmp_path, "seq", sequential_width=0.4, sequential_min_episodes=2)  # n = 17
    tiny.setattr(local_rollouts, "ExpertPolicy", ExpertPolicy)
    run(tmp_path, "expert", episodes=10, sequential_width=0.5, sequential_min_episodes=2)  # n = 4, all successes

    full, seq, expert = (read_eval_run(tmp_path / name) for name in ("full", "seq", "expert"))
    assert seq.sequential and not full.sequential
    check_comparable(seq, full)  # different counts per cell are fine when a run stopped early
    a, b, note = paired_outcomes(seq, full)
    assert set(a) == set(b) and len(a) == 17 and note is not None and "left out 0 of A's 17 and 7 of B's 24" in note
    assert compare_outcomes(a, b)["all"].a_only == 0 and compare_outcomes(a, b)["all"].b_only == 0
    check_comparable(expert, full)  # at most 10 episodes per cell against 24: still the same seed order

    assert main(["compare", str(tmp_path / "expert"), str(tmp_path / "full")]) == 0
    out = capsys.readouterr().out
    assert "note: sequential stopping: paired on the 4 episodes both runs hold" in out
    # the first four flaky outcomes are 1101: one episode only the expert solved
    assert (
        f"| {BUTTON} | 4 | 100.0% | 75.0% | +25.0 pts | [-38.3, +71.7] | 1 | 0 | 1 | no detectable difference |" in out
    )
    assert main(["compare", str(tmp_path / "seq"), str(tmp_path / "expert"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tests"]["all"]["n"] == 4 and "paired on the 4 episodes" in doc["pairing_note"]


def test_compare_without_sequential_stopping_still_needs_the_same_episodes(tiny, tmp_path, capsys):
    flaky(tiny)
    run(tmp_path, "full")
    run(tmp_path, "short", episodes=10)
    assert paired_outcomes(read_eval_run(tmp_path / "full"), read_eval_run(tmp_path / "full"))[2] is None
    with pytest.raises(PairingError, match="A ran 24 episodes per task and split, B 10"):
        check_comparable(read_eval_run(tmp_path / "full"), read_eval_run(tmp_path / "short"))
    assert main(["compare", str(tmp_path / "full"), str(tmp_path / "short")]) == 2
    assert "compare runs with the same --episodes" in capsys.readouterr().err


def test_compare_refuses_sequential_runs_that_are_not_one_seed_order(tiny, tmp_path, capsys):
    flaky(tiny)
    run(tmp_path, "full")
    run(tmp_path, "seq", sequential_width=0.4, sequential_min_episodes=2)
    doc = json.loads((tmp_path / "seq" / "bundle.json").read_text())
    doc["results"][BUTTON]["train"]["episodes"].pop(0)  # seeds 5000001.. : not the first seeds of the full run
    (tmp_path / "gap").mkdir()
    (tmp_path / "gap" / "bundle.json").write_text(json.dumps(doc))
    with pytest.raises(PairingError, match="cannot be paired on a common prefix"):
        paired_outcomes(read_eval_run(tmp_path / "gap"), read_eval_run(tmp_path / "full"))
    assert main(["compare", str(tmp_path / "gap"), str(tmp_path / "full")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vlagym compare: error:") and f"{BUTTON} / train" in err


# ---------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"sequential_width": 0.0}, r"sequential_width \(--sequential-width\) must be in \(0, 1\]"),
        ({"sequential_width": -0.1}, r"sequential_width .* got -0.1"),
        ({"sequential_width": 1.5}, r"sequential_width .* got 1.5"),
        ({"sequential_width": math.nan}, r"sequential_width .* got nan"),
        ({"sequential_width": 0.2, "sequential_min_episodes": 0}, r"sequential_min_episodes .* at least 1, got 0"),
        ({"sequential_width": 0.2, "sequential_min_episodes": 25}, r"is 25, more than the 24 episodes"),
        ({"sequential_width": 0.2, "sequential_min_episodes": 6, "episodes": 5}, r"is 6, more than the 5 episodes"),
        ({"sequential_min_episodes": 5}, r"sequential stopping is off: set sequential_width"),
    ],
)
def test_bad_options_raise_naming_the_option(tiny, kwargs, needle):
    with pytest.raises(EvalError, match=needle):
        SuiteRunConfig(suite="tiny-seq", policy="expert", **kwargs)
    assert issubclass(EvalError, ValueError)


def test_width_one_and_min_equal_to_the_episodes_are_allowed(tiny):
    SuiteRunConfig(suite="tiny-seq", policy="expert", sequential_width=1.0, sequential_min_episodes=EPISODES)


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--suite", "tiny-seq", "--sequential-width", "2"], "sequential_width (--sequential-width) must be in"),
        (
            ["--suite", "tiny-seq", "--sequential-min-episodes", "3"],
            "sequential stopping is off: set sequential_width (--sequential-width) too",
        ),
        (["--suite", "tiny-seq", "--sequential-width", "0.2", "--sequential-min-episodes", "0"], "at least 1, got 0"),
        (["--tasks", BUTTON, "--sequential-width", "0.2"], "--sequential-width runs with a benchmark protocol"),
        (["--sequential-min-episodes", "3"], "--sequential-min-episodes runs with a benchmark protocol"),
    ],
)
def test_cli_bad_options_exit_2(tiny, tmp_path, capsys, extra, needle):
    assert main(["eval", "--policy", "expert", "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vlagym eval: error:") and "\n" not in err and needle in err
    assert not (tmp_path / "o").exists()
