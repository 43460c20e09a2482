"""`vlagym dataset split-subtasks`: a demo file with each episode cut into its task's stages.

A task may label some of its steps under a sub-instruction (`VLAEnv.subtask_spans`, from the episode's privileged
state): PutCupInDrawer's steps before the drawer is out are OpenDrawer's, told "open the drawer". Each stage
becomes an episode of its own whose `instruction` is what its steps were labelled under, with the episode's
original instruction as `task_instruction`. Trained on such a file, the VLA learns which sub-instruction to act on
from the observation and the task's instruction (`VLAConfig.subtasks`): with a task's own wording, its first stage
missed the bar a third of the time; told OpenDrawer's, the same policy opened the drawer 58 times of 60
(docs/multitask.md, session 52).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import h5py

from vlagym.envs.catalog import task_class
from vlagym.io import temp_path
from vlagym.train import layout
from vlagym.train.demo_reader import data_group, demo_number, text_attr

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SplitSummary:
    path: Path
    episodes: int  # episodes read
    written: int  # episodes written
    subtask_steps: int  # steps labelled under a sub-instruction
    steps: int


def split_subtasks(src: str | os.PathLike, out: str | os.PathLike, overwrite: bool = False) -> SplitSummary:
    """Write `src`'s episodes to `out`, each cut at its task's `subtask_spans` (written beside `out`, then renamed
    into place). Episodes not marked complete are copied as they are; the file needs the privileged state
    (``obs/state``), which `vlagym demos` records."""
    src, out = Path(src), Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists (pass overwrite to replace it)")
    if out.resolve() == src.resolve():
        raise ValueError(f"{out}: write the split file elsewhere than its source")
    tmp = temp_path(out)
    written = subtask_steps = steps = 0
    try:
        with h5py.File(src, "r") as f, h5py.File(tmp, "w") as g:
            data = data_group(f, src)
            g.attrs.update(dict(f.attrs))
            dst = g.create_group("data")
            dst.attrs.update(dict(data.attrs))
            names = sorted(data, key=lambda name: demo_number(src, name))
            for name in names:
                demo = data[name]
                for start, stop, sub in _spans(src, name, demo):
                    _copy_span(demo, dst.create_group(layout.demo_name(written)), start, stop, sub)
                    written += 1
                    steps += stop - start
                    subtask_steps += (stop - start) if sub is not None else 0
            dst.attrs["total"] = steps
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    logger.info(
        "%s: %d episodes -> %d, %d of %d steps under sub-instructions", out, len(names), written, subtask_steps, steps
    )
    return SplitSummary(out, len(names), written, subtask_steps, steps)


def _spans(path: Path, name: str, demo: h5py.Group) -> list[tuple[int, int, str | None]]:
    n = int(demo.attrs["num_samples"])
    if not bool(demo.attrs.get("complete", False)):
        return [(0, n, None)]
    if "state" not in demo["obs"]:
        raise ValueError(f"{path}: /data/{name} has no obs/state, which the task's stages are read from")
    task = text_attr(demo, "task")
    try:
        spans = task_class(task).subtask_spans(demo["obs"]["state"][:])
    except gym.error.Error as e:  # an unknown task id: say which episode names it
        raise ValueError(f"{path}: /data/{name}: task {task!r}: {e}") from e
    return spans


def _copy_span(demo: h5py.Group, out: h5py.Group, start: int, stop: int, sub: str | None) -> None:
    """Steps [start, stop) of `demo` into the new episode group `out`, told `sub` (None: its own instruction)."""
    out.attrs.update(dict(demo.attrs))
    told = text_attr(demo, "task_instruction") or text_attr(demo, "instruction")
    out.attrs["instruction"] = sub if sub is not None else told
    out.attrs["task_instruction"] = told
    out.attrs["num_samples"] = stop - start

    def copy(group: h5py.Group, into: h5py.Group) -> None:
        for key, item in group.items():
            if isinstance(item, h5py.Group):
                copy(item, into.create_group(key))
                continue
            chunks = (min(item.chunks[0], stop - start), *item.chunks[1:]) if item.chunks else None
            into.create_dataset(
                key,
                data=item[start:stop],
                chunks=chunks,
                compression=item.compression,
                compression_opts=item.compression_opts,
            )

    copy(demo, out)
