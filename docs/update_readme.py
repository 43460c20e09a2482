"""Regenerate the README's task and split tables from the code: `python docs/update_readme.py`."""

from __future__ import annotations

from pathlib import Path

from vlagym.envs.catalog import render_readme

README = Path(__file__).resolve().parent.parent / "README.md"

if __name__ == "__main__":
    README.write_text(render_readme(README.read_text()))
