"""docs/multitask_recipe.sh: every command it runs parses with today's CLI, the data reach training in the
recipe's order, and a rerun skips the demos it has and resumes the round."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "multitask_recipe.sh"

FAKE_VLAGYM = """#!{python}
# Stands in for `vlagym`: parses the command with the real parser (exit 2 on a bad option), logs it, runs nothing.
import json, sys
from vlagym.cli import build_parser
build_parser().parse_args(sys.argv[1:])
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
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _option(argv: list[str], name: str) -> list[str]:
    i = argv.index(name) + 1
    values = []
    while i < len(argv) and not argv[i].startswith("--"):
        values.append(argv[i])
        i += 1
    return values


@pytest.mark.skipif(sys.platform == "win32", reason="a bash script")
def test_recipe_commands_parse_and_chain(tmp_path):
    out = tmp_path / "mt"
    calls = _run(tmp_path, out)
    demos = [c for c in calls if c[0] == "demos"]
    assert [c[0] for c in calls] == ["demos"] * 20 + ["train-bc", "train-dagger"]
    demo_files = [_option(c, "--out")[0] for c in demos]
    assert len(set(demo_files)) == 20
    # Within a task, the seed ranges of its files never overlap.
    ranges: dict[str, list[tuple[int, int]]] = {}
    for c in demos:
        first, n = int(_option(c, "--seed")[0]), int(_option(c, "--episodes")[0])
        ranges.setdefault(_option(c, "--task")[0], []).append((first, first + n))
    assert len(ranges) == 10
    for spans in ranges.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    bc, dagger = calls[-2], calls[-1]
    assert _option(bc, "--dataset") == demo_files  # the order sets the episode indices, hence the batches
    assert _option(dagger, "--dataset") == demo_files
    assert _option(dagger, "--init") == [f"{_option(bc, '--out')[0]}/checkpoints/step_{_option(bc, '--steps')[0]}"]
    assert "--resume" in bc and "--resume" not in dagger  # nothing to resume yet

    for f in demo_files:  # a rerun after the demos and the round's start: only training and the round, resumed
        Path(f).touch()
    (out / "round").mkdir()
    (out / "round" / "dagger_config.json").write_text("{}")
    calls = _run(tmp_path, out)
    assert [c[0] for c in calls] == ["train-bc", "train-dagger"]
    assert "--resume" in calls[1]
