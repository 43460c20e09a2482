"""The episodes of an evaluation as they finish, so an interrupted run resumes (`vlagym eval --resume`).

    OUT/.episodes/run.json                   what makes the run the same one: policy, seeds, settings
    OUT/.episodes/<task>-<key>.jsonl          one `EpisodeRecord` per line, appended (and fsynced) as episodes
                                              finish; key: a hash of the env kwargs and reset options

`vlagym.eval.backends.Journaled` appends to these files, and with `resume` reads them and runs only the seeds
they lack; the evaluation deletes the folder once its results are written. A resume whose run.json differs is
refused. A line cut short by a crash is dropped (its episode runs again). Records keep every field exactly
(JSON floats round-trip), so a resumed run's results equal an uninterrupted one's wherever the episodes
themselves do (see `vlagym.eval.ray_rollouts` on `num_envs`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from vlagym.eval.configs import EvalError
from vlagym.eval.rollout import EpisodeRecord
from vlagym.io import atomic_write_json

logger = logging.getLogger(__name__)

JOURNAL_DIR = ".episodes"
RUN_JSON = "run.json"


def check_run(out: str | os.PathLike, run_config: dict[str, Any], resume: bool) -> None:
    """Start the journal folder of a run (`resume`: check it is the journaled run's; else start it afresh)."""
    folder = Path(out) / JOURNAL_DIR
    if resume:
        try:
            before = json.loads((folder / RUN_JSON).read_text())
        except (OSError, ValueError) as e:
            raise EvalError(f"cannot resume {str(out)!r}: it holds no journal of an interrupted run") from e
        now = json.loads(json.dumps(run_config, default=str))
        changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
        if changed:
            raise EvalError(f"cannot resume {str(out)!r}: it was run with other {', '.join(changed)}")
        return
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / RUN_JSON, json.loads(json.dumps(run_config, default=str)))


def has_journal(out: str | os.PathLike) -> bool:
    """Whether `out` holds the journal of a run that was started and not finished (one `resume` continues)."""
    return (Path(out) / JOURNAL_DIR / RUN_JSON).is_file()


class EpisodeJournal:
    """The journal of one task's episodes under some env kwargs and reset options."""

    def __init__(
        self, out: str | os.PathLike, task: str, env_kwargs: dict[str, Any], reset_options: dict[str, Any] | None
    ):
        key = hashlib.sha256(json.dumps([env_kwargs, reset_options], sort_keys=True, default=str).encode())
        self.path = Path(out) / JOURNAL_DIR / f"{task}-{key.hexdigest()[:12]}.jsonl"

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
                logger.warning("%s line %d is not a complete record: its episode runs again", self.path, n)
                continue
            records[int(d["seed"])] = EpisodeRecord(**d)
        return records

    def start(self) -> None:
        """Begin appending (after the records already there: `check_run` started the folder of a fresh run)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():  # cut a line a crash left unfinished, so the next record starts a line of its own
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
    """Delete a run's journals (its results are written)."""
    shutil.rmtree(Path(out) / JOURNAL_DIR, ignore_errors=True)


__all__ = ["JOURNAL_DIR", "EpisodeJournal", "check_run", "has_journal", "remove_journals"]
