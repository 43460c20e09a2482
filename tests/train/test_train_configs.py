"""The configs of `vlagym demos` and `vlagym train-bc`: light to import (the CLI's --help), documented, round-trip."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from vlagym.config import field_docs
from vlagym.policies.config import VLAConfig
from vlagym.train.configs import BCConfig, DemoConfig

HEAVY = ("torch", "mujoco", "h5py", "stable_baselines3")


def heavy_modules_after_import(module: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after importing `module` (and nothing else)."""
    code = f"import sys, json, {module}; print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


def test_importing_the_configs_loads_no_heavy_module():
    assert heavy_modules_after_import("vlagym.train.configs") == []


@pytest.mark.parametrize("cls", [DemoConfig, BCConfig])
def test_every_field_has_a_help_text(cls):
    docs = field_docs(cls)
    assert [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)] == []


def test_configs_round_trip_through_json(tmp_path):
    demo = DemoConfig(task="vlagym:VLA-PickCup-v0", cameras="front", env_kwargs={"split": "train"})
    assert DemoConfig.from_dict(json.loads(json.dumps(demo.to_dict()))) == demo
    path = tmp_path / "demos.hdf5"
    path.touch()
    bc = BCConfig(dataset=str(path), policy={"hidden_dim": 32}, steps=5)
    again = BCConfig.from_dict(json.loads(json.dumps(bc.to_dict())))
    assert again == bc and isinstance(again.policy, VLAConfig) and again.policy.hidden_dim == 32
