"""`RLConfig` and the `vlagym.rl.ppo` package: light to import (the CLI's --help), every option documented."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from vlagym.config import field_docs
from vlagym.rl.ppo.config import RLConfig

HEAVY = ("torch", "mujoco", "h5py", "stable_baselines3")


def heavy_modules_after_import(module: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after importing `module` (and nothing else)."""
    code = f"import sys, json, {module}; print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("module", ["vlagym.rl.ppo.config", "vlagym.rl.ppo", "vlagym.rl"])
def test_importing_the_config_loads_no_heavy_module(module):
    assert heavy_modules_after_import(module) == []


def test_the_package_exports_its_names_lazily():
    code = (
        "import sys, vlagym.rl.ppo as ppo; before = 'stable_baselines3' in sys.modules; "
        "from vlagym.rl.ppo import train_rl, SB3ChunkPolicy; "
        "print(before, train_rl.__module__, SB3ChunkPolicy.__module__, 'train_rl' in dir(ppo))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "vlagym.rl.ppo.loop", "vlagym.rl.ppo.evaluation", "True"]
    with pytest.raises(ImportError):
        exec("from vlagym.rl.ppo import no_such_name")


def test_every_option_has_a_help_text():
    docs = field_docs(RLConfig)
    assert [f.name for f in dataclasses.fields(RLConfig) if not docs.get(f.name)] == []


def test_a_from_scratch_config_round_trips_through_json():
    cfg = RLConfig(from_scratch=True, task="VLA-PickCup-v0", algo="sac", env_kwargs={"num_cups": 1})
    assert (cfg.lr, cfg.batch_size, cfg.chunk_size, cfg.bc_coef) == (3e-4, 256, 1, 0.0)
    assert RLConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
