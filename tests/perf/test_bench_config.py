"""`BenchConfig`: its defaults, and a module light enough for the CLI's `--help`."""

from __future__ import annotations

import subprocess
import sys

from vlagym.perf.config import BenchConfig


def test_repeats_default_to_three_and_to_one_when_quick():
    assert BenchConfig(out=None).repeats == 3
    assert BenchConfig(out=None, quick=True).repeats == 1
    assert BenchConfig(out=None, quick=True, repeats=5).repeats == 5


def test_config_module_does_not_import_torch():
    code = "import sys, vlagym.perf.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
