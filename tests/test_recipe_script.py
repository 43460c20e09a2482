"""docs/multitask_recipe.sh: every command it runs parses with today's CLI, the demo sets come in the order that
reproduced session 48's checkpoint, and every stage resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlagym.cli import build_parser

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "multitask_recipe.sh"

FAKE_VLAGYM = """#!{python}
# Stands in for `vlagym`: logs the command, runs nothing (the test parses every logged command with the real parser:
# one import of the CLI rather than one per command).
import json, sys
with open({log!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
"""


def _run(tmp_path: Path, out: Path) -> list[list[str]]:
    log = tmp_path / "calls.jsonl"
    log.unlink(missing_ok=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "vlagym"
    fake.write_text(FAKE_VLAGYM.format(python=sys.executable, log=str(log)))
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    parser = build_parser()
    for argv in calls:
        parser.parse_args(argv)  # a bad option exits with code 2: the test fails on it
    return calls


def _option(argv: list[str], name: str) -> list[str]:
    i = argv.index(name) + 1
    values = []
    while i < len(argv) and not argv[i].startswith("--"):
        values.append(argv[i])
        i += 1
    return values


# (task, first seed, episodes) in the order of session 50's rebuild (docs/multitask.md): the order numbers the
# episodes and with them the batches, so another order trains another policy than the documented one.
REBUILT_ORDER = [
    *[(t, 0, 150) for t in ("CloseDrawer", "OpenDrawer", "PickCup", "PickObject")],
    *[(t, 0, 300) for t in ("PlaceCupInBowl", "PlaceCupOnPlate")],
    *[(t, 0, 150) for t in ("PressButton", "PushCube")],
    *[(t, 0, 300) for t in ("PutCupInDrawer", "StackBlocks")],
    ("StackBlocks", 300, 900),
    ("PutCupInDrawer", 300, 700),
    *[(t, 150, 300) for t in ("CloseDrawer", "OpenDrawer", "PickCup", "PickObject")],
    *[(t, 300, 600) for t in ("PlaceCupInBowl", "PlaceCupOnPlate")],
    *[(t, 150, 300) for t in ("PressButton", "PushCube")],
]


@pytest.mark.skipif(sys.platform == "win32", reason="a bash script")
def test_recipe_commands_parse_and_chain(tmp_path):
    calls = _run(tmp_path, tmp_path / "mt")
    assert [c[0] for c in calls] == ["demos"] * len(REBUILT_ORDER) + ["train-bc", "train-dagger"]
    demos = calls[:-2]
    got = [(_option(c, "--task")[0], int(_option(c, "--seed")[0]), int(_option(c, "--episodes")[0])) for c in demos]
    assert got == [(f"VLA-{t}-v0", seed, n) for t, seed, n in REBUILT_ORDER]
    demo_files = [_option(c, "--out")[0] for c in demos]
    assert len(set(demo_files)) == len(demo_files)
    bc, dagger = calls[-2], calls[-1]
    assert _option(bc, "--dataset") == demo_files
    assert _option(dagger, "--dataset") == demo_files
    assert _option(dagger, "--init") == [f"{_option(bc, '--out')[0]}/checkpoints/step_{_option(bc, '--steps')[0]}"]
    assert all("--resume" in c for c in calls)  # a rerun after a stop continues every stage
