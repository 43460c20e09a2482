"""The evaluation configs: a light import (the command line builds its options from them), field help, JSON
round trips, the checkpoint-folder check."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from vlagym.config import field_docs
from vlagym.eval.configs import (
    CompareConfig,
    CurveConfig,
    EvalConfig,
    EvalError,
    ReplicatesConfig,
    SuiteRunConfig,
    check_checkpoint_folder,
)
from vlagym.eval.stats import PairingError

PICK = "VLA-PickCup-v0"
CONFIGS = (EvalConfig, SuiteRunConfig, CurveConfig, CompareConfig, ReplicatesConfig)
HEAVY = ("torch", "mujoco", "h5py", "stable_baselines3")


def test_importing_the_configs_loads_no_heavy_module():
    code = (
        "import json, sys\n"
        "import vlagym.eval.configs, vlagym.eval.layout\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_field_has_help_text(cls):
    docs = field_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
    assert not missing, f"{cls.__name__} fields without a docstring: {missing}"
    # the command line shows defaults itself; the help says what a value means
    assert not [name for name, doc in docs.items() if "None" in doc], docs


def test_json_round_trips(tmp_path):
    made = [
        EvalConfig(policy="expert", tasks=[PICK], episodes=3, env_kwargs={"split": "lighting"}),
        SuiteRunConfig("vlagym-pick", "expert", episodes=4, sequential_width=0.5, sequential_min_episodes=2),
        CurveConfig(run=str(tmp_path), every=2),
        CompareConfig(a="x", b="y", metric="success_at_end", alpha=0.1),
        ReplicatesConfig(baseline="x", runs=["y", "z"]),
    ]
    for cfg in made:
        assert type(cfg).from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="unknown EvalConfig fields"):
        EvalConfig.from_dict({"policy": "expert", "tasks": [PICK], "episode": 3})


@pytest.mark.parametrize(
    "make, error, needle",
    [
        (lambda: CompareConfig(a="x", b="y", metric="reward"), PairingError, "--metric must be one of"),
        (lambda: CompareConfig(a="x", b="y", alpha=1.0), PairingError, "--alpha must be between 0 and 1"),
        (lambda: ReplicatesConfig(baseline="x", runs=[]), PairingError, "at least one run"),
        (lambda: ReplicatesConfig(baseline="x", runs=["y", "y"]), PairingError, "a run is given twice"),
        (lambda: SuiteRunConfig(suite="vlagym-pick", policy="expert", num_envs=0), EvalError, "num_envs"),
    ],
)
def test_bad_values_raise_naming_them(make, error, needle):
    with pytest.raises(error, match=needle):
        make()


def test_check_checkpoint_folder(tmp_path):
    with pytest.raises(EvalError, match="does not exist"):
        check_checkpoint_folder(tmp_path / "nope")
    (tmp_path / "file").write_text("")
    with pytest.raises(EvalError, match="is not a folder"):
        check_checkpoint_folder(tmp_path / "file")
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("[1]")
    with pytest.raises(EvalError, match="missing model.safetensors"):
        check_checkpoint_folder(folder)
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(EvalError, match="is not a JSON object"):
        check_checkpoint_folder(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(EvalError, match="cannot read"):
        check_checkpoint_folder(folder)
    (folder / "config.json").write_text('{"extra": {"env_id": "VLA-PickCup-v0"}}')
    assert check_checkpoint_folder(folder) == {"extra": {"env_id": PICK}}
