"""The README's generated tables match the code, and its two set-up commands are the ones CI runs."""

from __future__ import annotations

from pathlib import Path

from vlagym.envs.catalog import render_readme

ROOT = Path(__file__).resolve().parent.parent


def test_generated_tables_are_current():
    text = (ROOT / "README.md").read_text()
    assert render_readme(text) == text, "README tables are stale: run `python docs/update_readme.py`"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    command = 'pip install "torch==2.13.0" -e ".[test]" && python -m pytest -q'
    assert command in readme
    assert command in (ROOT / ".ci" / "run").read_text()
