"""The episodes of an evaluation as they finish, so an interrupted `vlagym eval` resumes (`--resume`).

    OUT/.episodes/<task>.jsonl    one `EpisodeRecord` per line, appended (and fsynced) as episodes finish

`evaluate` reads the file of a task when it resumes, runs only the seeds it lacks, and deletes the folder once
results.json is written. A line cut short by a crash is ignored (its episode runs again). Records keep every
field exactly (JSON floats round-trip), so a resumed evaluation's results equal an uninterrupted one's (for a
checkpoint at `num_envs=1`, or the expert: see `vlagym.eval.rollout` on batching).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from pathlib import Path

from vlagym.eval.rollout import EpisodeRecord

logger = logging.getLogger(__name__)

JOURNAL_DIR = ".episodes"


class EpisodeJournal:
    """The journal of one task's episodes in an evaluation's output folder."""

    def __init__(self, out: str | os.PathLike, task: str):
        self.path = Path(out) / JOURNAL_DIR / f"{task}.jsonl"

    def load(self) -> dict[int, EpisodeRecord]:
        """The complete records already journaled, by seed."""
        if not self.path.exists():
            return {}
        fields = {f.name for f in dataclasses.fields(EpisodeRecord)}
        records = {}
        for n, line in enumerate(self.path.read_text().splitlines(), 1):
            try:
                d = json.loads(line)
                if not isinstance(d, dict) or set(d) != fields:
                    raise ValueError("not an episode record")
            except ValueError:
                logger.warning(
                    "%s line %d is not a complete record (an interrupted write?): it runs again", self.path, n
                )
                continue
            records[int(d["seed"])] = EpisodeRecord(**d)
        return records

    def start(self, keep: bool) -> None:
        """Begin appending; `keep` False drops what an earlier run journaled."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not keep:
            self.path.unlink(missing_ok=True)
        elif self.path.exists():  # cut a line a crash left unfinished, so the next record starts a line of its own
            data = self.path.read_bytes()
            if data and not data.endswith(b"\n"):
                with open(self.path, "r+b") as f:
                    f.truncate(data.rfind(b"\n") + 1)

    def append(self, record: EpisodeRecord) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(dataclasses.asdict(record)) + "\n")
            f.flush()
            os.fsync(f.fileno())


def remove_journals(out: str | os.PathLike) -> None:
    """Delete an evaluation's journals (its results are written)."""
    shutil.rmtree(Path(out) / JOURNAL_DIR, ignore_errors=True)


__all__ = ["JOURNAL_DIR", "EpisodeJournal", "remove_journals"]
