"""Benchmark protocols and suite runs: contents, errors, bundle files, exact reproduction."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex

import gymnasium as gym
import pytest

import vlagym
from vlagym.cli import main
from vlagym.envs.splits import SPLITS
from vlagym.eval import suites
from vlagym.eval.adapters import NOISE_STREAM
from vlagym.eval.bundle import checkpoint_hashes, fingerprint
from vlagym.eval.configs import SuiteRunConfig
from vlagym.eval.runs import read_eval_run
from vlagym.eval.suite_run import run_suite
from vlagym.eval.suites import DEMO_SEEDS, SuiteError, SuiteProtocol, get_suite, list_suites

PICK = "VLA-PickCup-v0"
BUTTON = "VLA-PressButton-v0"


def tiny_protocol(**kwargs) -> SuiteProtocol:
    fields = dict(
        name="tiny",
        version="0",
        description="two quick tasks",
        tasks=(PICK, BUTTON),
        splits=("train", "lighting"),
        episodes=2,
        base_seed=5_000_000,
        horizons=((PICK, 100), (BUTTON, 80)),
    )
    return SuiteProtocol(**(fields | kwargs))


# ---------------------------------------------------------------------------- protocols
def test_the_published_suites():
    assert list_suites() == ["vlagym-10", "vlagym-pick"]
    ten = get_suite("vlagym-10")
    assert set(ten.tasks) == set(vlagym.TASKS) - {"VLA-MultiTask-v0"} and len(ten.tasks) == 10
    assert ten.splits == SPLITS
    pick = get_suite("vlagym-pick")
    assert pick.tasks == (PICK,) and "train" in pick.splits and 2 <= len(pick.splits) < len(SPLITS)
    for p in (ten, pick):
        assert p.version and p.episodes >= 50 and p.n_action_steps is None
        assert "success_at_end" in p.success_definition and "any step" in p.success_definition
        # the registered step limits are the protocol's horizons
        assert dict(p.horizons) == {t: gym.spec(t).max_episode_steps for t in p.tasks}
        p.check_registered()
        seeds = p.seeds()
        assert seeds == list(range(p.base_seed, p.base_seed + p.episodes))
        assert min(seeds) >= DEMO_SEEDS.stop  # never a demonstration seed
        assert p.seeds(3) == seeds[:3]
        d = json.loads(json.dumps(p.to_dict()))
        assert d["name"] == p.name and d["horizons"][p.tasks[0]] == p.horizon(p.tasks[0]) and "seed_rule" in d


def test_protocols_are_frozen_and_validated():
    p = get_suite("vlagym-pick")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.episodes = 5  # type: ignore[misc]
    with pytest.raises(SuiteError, match="overlaps the demonstration seeds"):
        tiny_protocol(base_seed=99_999)
    with pytest.raises(SuiteError, match="unknown tasks"):
        tiny_protocol(tasks=("VLA-Nope-v0",))
    with pytest.raises(SuiteError, match="unknown splits"):
        tiny_protocol(splits=("train", "night"))
    with pytest.raises(SuiteError, match="horizons"):
        tiny_protocol(horizons=((BUTTON, 80), (PICK, 100)))
    with pytest.raises(SuiteError, match="new version"):
        tiny_protocol(horizons=((PICK, 99), (BUTTON, 80))).check_registered()


def test_unknown_suite_names_the_known_ones():
    with pytest.raises(SuiteError, match=r"unknown suite 'vlagym-pik' \(did you mean 'vlagym-pick'\?\).*vlagym-10"):
        get_suite("vlagym-pik")
    with pytest.raises(SuiteError, match="known suites: vlagym-10, vlagym-pick"):
        SuiteRunConfig(suite="nope", policy="expert")


# ---------------------------------------------------------------------------- suite runs
@pytest.mark.smoke
def test_tiny_suite_run_writes_the_bundle(tmp_path, monkeypatch):
    monkeypatch.setitem(suites.SUITES, "tiny", tiny_protocol())
    out = tmp_path / "b"
    bundle = run_suite(SuiteRunConfig(suite="tiny", policy="expert", out=str(out), progress=False))
    assert json.loads((out / "bundle.json").read_text()) == json.loads(json.dumps(bundle))
    assert bundle["protocol"]["name"] == "tiny" and bundle["protocol"]["version"] == "0"
    assert bundle["episodes"] == 2 and not bundle["partial"]
    assert list(bundle["results"]) == [PICK, BUTTON]
    for task in (PICK, BUTTON):
        assert list(bundle["results"][task]) == ["train", "lighting"]
        for split, cell in bundle["results"][task].items():
            assert cell["n"] == 2 and cell["success_rate"] == 1.0 and cell["ci95"][1] == 1.0
            assert cell["env_kwargs"] == {"obs_mode": "state", "split": split}
            assert [e["seed"] for e in cell["episodes"]] == [5_000_000, 5_000_001]
            assert all(e["task"] == task and e["success"] and e["instruction"] for e in cell["episodes"])
    for metric in ("success", "success_at_end"):
        assert bundle["suite_average"][metric]["mean"] == 1.0 and bundle["suite_average"][metric]["ci95"] == [1, 1]
    fp = bundle["fingerprint"]
    assert set(fp["versions"]) == {"vlagym", "mujoco", "gymnasium", "numpy", "torch", "python"}
    assert fp["versions"]["vlagym"] == vlagym.__version__ and fp["cpu"] and fp["gl_renderer"]
    assert fp["checkpoint_sha256"] == {"model.safetensors": "expert", "config.json": "expert", "stats": "expert"}
    assert fp["policy_noise_stream"] is None  # the expert draws no noise
    assert bundle["seeds"] == {"base_seed": 5_000_000, "count": 2, "first": 5_000_000, "last": 5_000_001}
    assert bundle["wall_clock_s"] > 0 and bundle["started_utc"]
    assert bundle["reproduce"] == f"vlagym eval --suite tiny --policy expert --out {out}"
    md = (out / "bundle.md").read_text()
    assert "# tiny v0: expert" in md and "| task | train | lighting | mean |" in md
    assert f"| {PICK} | 100.0% [34.2%, 100.0%] | 100.0% [34.2%, 100.0%] | 100.0% |" in md
    assert "| success | 100.0% | [100.0%, 100.0%] |" in md


def test_rerunning_the_reproduction_command_reproduces_every_episode(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--suite", "vlagym-pick", "--policy", "expert", "--out", "run", "--episodes", "2"]) == 0
    first = json.loads((tmp_path / "run" / "bundle.json").read_text())
    assert first["partial"] and first["episodes"] == 2
    (tmp_path / "run").rename(tmp_path / "first")
    argv = shlex.split(first["reproduce"])
    assert argv[:2] == ["vlagym", "eval"]
    assert main(argv[1:]) == 0
    again = json.loads((tmp_path / "run" / "bundle.json").read_text())
    for task, by_split in first["results"].items():
        for split, cell in by_split.items():
            assert again["results"][task][split]["episodes"] == cell["episodes"]  # seeds, outcomes, lengths, returns
    assert again["protocol"] == first["protocol"] and again["reproduce"] == first["reproduce"]
    assert read_eval_run(tmp_path / "first").outcomes == read_eval_run(tmp_path / "run").outcomes
    assert "bundle: run/bundle.json" in capsys.readouterr().out


def test_checkpoint_hashes_cover_weights_config_and_statistics(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    config = {"format": "vlagym-policy", "stats": {"action": {"mean": [0.5]}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    hashes = checkpoint_hashes(str(tmp_path))
    assert hashes["model.safetensors"] == hashlib.sha256(b"weights").hexdigest()
    assert hashes["config.json"] == hashlib.sha256(json.dumps(config).encode()).hexdigest()
    assert hashes["stats"] == hashlib.sha256(b'{"action": {"mean": [0.5]}}').hexdigest()


def test_a_checkpoint_bundle_records_the_policy_noise_rule(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "config.json").write_text(json.dumps({"format": "vlagym-policy"}))
    fp = fingerprint(SuiteRunConfig(suite="vlagym-pick", policy=str(tmp_path)), rendered=False)
    assert fp["policy_noise_stream"] == hex(NOISE_STREAM)  # changing the stream changes a flow head's outcomes
