"""Demo files written crash-safely, in the layout of `vlagym.train.layout`: one episode at a time, by atomic commits.

FILE.hdf5 is only ever replaced, by `os.replace`, with a file that was closed cleanly; it is never open for
writing. HDF5 written in place is not crash safe: with `libver="latest"` a writer killed even right after
`flush()` leaves the file flagged "already open for write" and HDF5 refuses to open it (h5clear needed), and
with the older formats a group's index and the free space are updated in place, so a kill during a write can
leave them half-written. Instead `DemoJournal` keeps a working copy, FILE.hdf5.partial, and commits each
batch of finished episodes like this:

    1. append the new demos to FILE.hdf5.partial and close it;
    2. hard-link FILE.hdf5 as FILE.hdf5.spare (it keeps the previous version alive);
    3. os.replace(FILE.hdf5.partial, FILE.hdf5): the commit, atomic;
    4. copy the new demo groups from FILE.hdf5 into FILE.hdf5.spare (HDF5 copies the compressed
       chunks as they are: nothing is compressed twice) and rename it FILE.hdf5.partial.

A kill at any point leaves FILE.hdf5 as either the previous or the new version, both complete; the scratch
files are removed by the next run. FILE.hdf5 can be read while collection runs: a reader that still has the
previous version open when step 4 comes holds an HDF5 file lock on it, so the writer leaves that inode alone
and makes FILE.hdf5.partial by a full copy instead (readers that turn HDF5 file locking off must not keep the
file open across commits). Costs: twice the disk space while collecting, and every demo is written twice (the
second time a raw chunk copy). `DemoJournal.reopen` continues such a file after checking that it was made with
the same settings.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import h5py
import mujoco
import numpy as np

import vlagym
from vlagym.envs.catalog import explicit_kwargs
from vlagym.io import atomic_write_json
from vlagym.train import layout
from vlagym.train.configs import CONFIG_SUFFIX, DemoConfig, DemoError

logger = logging.getLogger(__name__)

PARTIAL_SUFFIX = ".partial"  # working copy (see the module docstring)
SPARE_SUFFIX = ".spare"
# Config fields that decide the file's content: a resumed run must match them.
SAME_ON_RESUME = (
    "task",
    "seed",
    "obs_mode",
    "image_size",
    "cameras",
    "keep_failures",
    "compression",
    "action_noise",
    "policy",
)


# ---------------------------------------------------------------------------- episodes
@dataclass
class DemoEpisode:
    """One episode being recorded (lists grow by one entry per step)."""

    index: int
    seed: int
    instruction: str = ""
    task: str = ""
    images: dict[str, list[np.ndarray]] = field(default_factory=dict)
    proprio: list[np.ndarray] = field(default_factory=list)
    state: list[np.ndarray] = field(default_factory=list)
    sim_states: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    expert_actions: list[np.ndarray] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    success: bool = False
    noise: np.random.Generator | None = None
    acted_by_policy: bool = False
    """another policy acted (DAgger): `actions` are its, `expert_actions` the expert's labels"""

    def __len__(self) -> int:
        return len(self.actions)


def write_demo(data: h5py.Group, name: str, ep: DemoEpisode, compression: str) -> None:
    """One complete demo group; `complete` is written last, so a reader never takes a partial demo for one."""
    n = len(ep)
    g = data.create_group(name)
    obs = g.create_group("obs")
    filters = {} if compression == "none" else {"compression": compression}
    for camera, frames in ep.images.items():
        images = np.stack(frames)
        obs.create_dataset(layout.image_key(camera), data=images, chunks=(1, *images.shape[1:]), **filters)
    obs.create_dataset("proprio", data=np.stack(ep.proprio).astype(np.float32))
    obs.create_dataset("state", data=np.stack(ep.state).astype(np.float32))
    g.create_dataset("actions", data=np.stack(ep.actions).astype(np.float32))
    if ep.noise is not None or ep.acted_by_policy:
        g.create_dataset(layout.EXPERT_ACTIONS, data=np.stack(ep.expert_actions).astype(np.float32))
    g.create_dataset("rewards", data=np.asarray(ep.rewards, np.float32))
    dones = np.zeros(n, np.uint8)
    dones[-1] = 1  # every recorded episode ran until it ended (success, time limit, or the expert gave up)
    g.create_dataset("dones", data=dones)
    g.create_dataset("states", data=np.stack(ep.sim_states).astype(np.float64))
    g.attrs.update(num_samples=n, seed=ep.seed, instruction=ep.instruction, success=bool(ep.success), task=ep.task)
    g.attrs["complete"] = True


def write_header(
    f: h5py.File, env_id: str, env_kwargs: dict[str, Any], obs_keys: list[str], total: int = 0
) -> h5py.Group:
    """The file attributes and the /data group (returned) of a new demo file, as `vlagym.train.layout` says."""
    f.attrs.update(
        format=layout.FORMAT,
        format_version=layout.FORMAT_VERSION,
        vlagym_version=vlagym.__version__,
        mujoco_version=mujoco.__version__,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    data = f.create_group("data")
    data.attrs.update(env_id=env_id, env_kwargs=json.dumps(env_kwargs), total=total, obs_keys=json.dumps(obs_keys))
    return data


# ---------------------------------------------------------------------------- the file, committed atomically
class DemoJournal:
    """The demo file and its working copy, committed as the module docstring says."""

    def __init__(self, path: Path, compression: str):
        self.path = path
        self.partial = path.with_name(path.name + PARTIAL_SUFFIX)
        self.spare = path.with_name(path.name + SPARE_SUFFIX)
        self.compression = compression
        self.demos = 0
        self.total = 0
        self.last_seed: int | None = None
        self.copy_warned = False

    def remove_scratch(self) -> None:
        self.partial.unlink(missing_ok=True)
        self.spare.unlink(missing_ok=True)

    def create(self, cfg: DemoConfig) -> None:
        """A new file with no demos (the header only), replacing any file at the path."""
        self.remove_scratch()
        with h5py.File(self.spare, "w") as f:
            write_header(f, cfg.task, cfg.make_kwargs(), cfg.obs_keys())
        os.replace(self.spare, self.path)
        shutil.copyfile(self.path, self.partial)

    def reopen(self, cfg: DemoConfig) -> None:
        """Continue an existing file: check it fits `cfg`, drop incomplete demos, find the last seed."""
        self.remove_scratch()
        _check_resumable(self.path, cfg)
        with h5py.File(self.path, "r") as f:
            data = f["data"]
            clean = all(bool(data[n].attrs.get("complete", False)) for n in data)
            clean = clean and int(data.attrs["total"]) == sum(int(data[n].attrs["num_samples"]) for n in data)
        if not clean:  # fix a copy, then swap it in: the file stays valid throughout
            shutil.copyfile(self.path, self.spare)
            with h5py.File(self.spare, "a") as f:
                _drop_incomplete(f["data"], self.path)
                f["data"].attrs["total"] = sum(int(g.attrs["num_samples"]) for g in f["data"].values())
            os.replace(self.spare, self.path)
        with h5py.File(self.path, "r") as f:
            data = f["data"]
            self.demos = len(data)
            self.total = int(data.attrs["total"])
            seeds = [int(g.attrs["seed"]) for g in data.values()]
            self.last_seed = max(seeds) if seeds else None
        shutil.copyfile(self.path, self.partial)

    def commit(self, episodes: list[DemoEpisode]) -> None:
        """Append finished episodes to the file, atomically."""
        names = []
        with h5py.File(self.partial, "a") as f:
            for ep in episodes:
                name = layout.demo_name(self.demos + len(names))
                write_demo(f["data"], name, ep, self.compression)
                names.append(name)
            f["data"].attrs["total"] = self.total + sum(len(ep) for ep in episodes)
        self.spare.unlink(missing_ok=True)
        try:
            os.link(self.path, self.spare)
        except OSError:  # no hard links on this filesystem: a full copy does the same, in time O(file size)
            if not self.copy_warned:
                logger.warning("%s: no hard links here; every commit copies the whole file", self.path.parent)
                self.copy_warned = True
            shutil.copyfile(self.path, self.spare)
        os.replace(self.partial, self.path)
        self.demos += len(names)
        self.total += sum(len(ep) for ep in episodes)
        self.last_seed = episodes[-1].seed
        try:
            dst = h5py.File(self.spare, "a")
        except OSError as e:
            # A reader still has the previous version open (HDF5 locks files it opens): leave that inode
            # alone and make the twin afresh instead, a full copy.
            logger.info("%s is still open elsewhere (%s); copying the new version instead", self.path, e)
            self.spare.unlink()
            shutil.copyfile(self.path, self.spare)
        else:
            with dst, h5py.File(self.path, "r") as src:
                for name in names:
                    dst["data"].copy(src["data"][name], name)
                dst["data"].attrs["total"] = self.total
        os.replace(self.spare, self.partial)


def _drop_incomplete(data: h5py.Group, path: Path) -> None:
    """Delete demo groups without complete=True and renumber the rest 0, 1, ..."""
    names = sorted(data, key=lambda n: int(n.removeprefix(layout.DEMO_PREFIX)))
    dropped = [n for n in names if not bool(data[n].attrs.get("complete", False))]
    for name in dropped:
        del data[name]
    if dropped:
        logger.warning("%s: dropped %d incomplete demo(s): %s", path, len(dropped), dropped)
    kept = [n for n in names if n not in dropped]
    for i, name in enumerate(kept):
        if name != layout.demo_name(i):
            data.move(name, layout.demo_name(i))


def _check_resumable(path: Path, cfg: DemoConfig) -> None:
    """Raise `DemoError` unless `path` is a valid demo file made with the same settings as `cfg`."""
    from vlagym.train.validate import DatasetError, check_dataset

    problems = check_dataset(path, allow_incomplete=True)
    if problems:
        raise DemoError(f"cannot resume {path}: " + "; ".join(problems[:5]))
    try:
        with h5py.File(path, "r") as f:
            env_id = str(f["data"].attrs["env_id"])
            env_kwargs = json.loads(f["data"].attrs["env_kwargs"])
    except (OSError, KeyError, DatasetError) as e:  # pragma: no cover - check_dataset reports these first
        raise DemoError(f"cannot resume {path}: {e}") from e
    wanted = json.loads(json.dumps(cfg.make_kwargs()))
    if env_id != cfg.task or explicit_kwargs(env_id, env_kwargs) != explicit_kwargs(env_id, wanted):
        raise DemoError(
            f"cannot resume {path}: it holds {env_id} demos made with env kwargs {env_kwargs}, "
            f"this run asks for {cfg.task} with {wanted}"
        )
    config_path = path.with_name(path.name + CONFIG_SUFFIX)
    try:
        stored = json.loads(config_path.read_text())
    except (OSError, ValueError) as e:
        raise DemoError(f"cannot resume {path}: its config {config_path} is missing or unreadable ({e})") from e
    stored.setdefault("action_noise", 0.0)  # files from before the option were collected without noise
    stored.setdefault("policy", None)  # ... and from before a policy could act
    mine = json.loads(json.dumps(cfg.to_dict()))
    differ = {k: (stored.get(k), mine[k]) for k in SAME_ON_RESUME if stored.get(k) != mine[k]}
    if differ:
        detail = ", ".join(f"{k}: file {a!r} vs now {b!r}" for k, (a, b) in differ.items())
        raise DemoError(f"cannot resume {path} with different settings ({detail})")


def write_config(path: Path, cfg: DemoConfig) -> None:
    """The run's config beside the demo file (FILE.hdf5.config.json): what a resume checks against."""
    atomic_write_json(path.with_name(path.name + CONFIG_SUFFIX), cfg.to_dict())
