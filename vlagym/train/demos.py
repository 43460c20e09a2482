"""Scripted-expert demonstrations, collected in a vector env and written in the layout of `vlagym.train.layout`.

    summary = collect_demos(DemoConfig(task="VLA-PickCup-v0", episodes=200, num_envs=2, out="pick.hdf5"))

Seeding: episode i (0, 1, ...) is reset with seed `seed + i` whichever sub-env runs it, and demos are
written in episode order, so the file is the same for any `num_envs` and vectorization mode.

Experts need privileged simulator state, which an async vector env keeps in its worker processes. So
the expert runs *inside* each sub-env, in a small wrapper (`_ExpertRecorder`, given to `gym.make_vec`
through `wrappers=`): after every reset and step it computes the expert's next action and reads the
privileged state and the MuJoCo state, and returns them in `info`. The main process only sends those
actions back. The same code path serves sync and async vector envs.

Crash safety: FILE.hdf5 is only ever replaced, by `os.replace`, with a file that was closed cleanly;
it is never open for writing. HDF5 written in place is not crash safe: with `libver="latest"` a
writer killed even right after `flush()` leaves the file flagged "already open for write" and
HDF5 refuses to open it (h5clear needed), and with the older formats a group's index and the free
space are updated in place, so a kill during a write can leave them half-written. Instead the
writer keeps a working copy, FILE.hdf5.partial, and commits each finished episode (as soon as all
earlier episodes have finished) like this:

    1. append the new demos to FILE.hdf5.partial and close it;
    2. hard-link FILE.hdf5 as FILE.hdf5.spare (it keeps the previous version alive);
    3. os.replace(FILE.hdf5.partial, FILE.hdf5): the commit, atomic;
    4. copy the new demo groups from FILE.hdf5 into FILE.hdf5.spare (HDF5 copies the compressed
       chunks as they are: nothing is compressed twice) and rename it FILE.hdf5.partial.

A kill at any point leaves FILE.hdf5 as either the previous or the new version, both complete; the
scratch files are removed by the next run. FILE.hdf5 can be read while collection runs: a reader that
still has the previous version open when step 4 comes holds an HDF5 file lock on it, so the writer
leaves that inode alone and makes FILE.hdf5.partial by a full copy instead (readers that turn HDF5
file locking off must not keep the file open across commits). Costs: twice the disk space while collecting, and every
demo is written twice (the second time a raw chunk copy). `resume=True` continues such a file from
the episode after its last demo; episodes are deterministic given their seed, so the result equals an
uninterrupted run's.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import shutil
import signal
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import mujoco
import numpy as np
from gymnasium.vector import AutoresetMode

import vlagym
from vlagym.envs.multitask import MultiTaskEnv
from vlagym.envs.robot import Robot
from vlagym.io import atomic_write_json
from vlagym.train import layout
from vlagym.train.configs import COMPRESSIONS, CONFIG_SUFFIX, VECTORIZATION_MODES, DemoConfig, DemoError

logger = logging.getLogger(__name__)

PARTIAL_SUFFIX = ".partial"  # working copy (see the module docstring)
SPARE_SUFFIX = ".spare"
RECORD_KEY = "demo_record"  # the info key `_ExpertRecorder` fills
# Config fields that decide the file's content: a resumed run must match them.
SAME_ON_RESUME = (
    "task",
    "seed",
    "obs_mode",
    "image_size",
    "cameras",
    "env_kwargs",
    "keep_failures",
    "compression",
    "action_noise",
)
NOISE_STREAM = 0x4E015E  # the action noise of episode `seed` comes from default_rng([NOISE_STREAM, seed])


@dataclass
class DemoSummary:
    """What `collect_demos` did."""

    path: str
    """the demo file"""
    first_episode: int
    """index of the first episode this call ran (0 unless resumed)"""
    episodes: int
    """episodes this call ran"""
    successes: int
    """episodes of this call the expert solved"""
    failures: int
    """episodes of this call the expert failed (dropped unless keep_failures)"""
    failed_seeds: list[int]
    """their seeds"""
    demos: int
    """complete demos in the file now"""
    steps: int
    """samples (steps) in those demos"""
    seconds: float
    """wall time of this call"""
    file_bytes: int
    """size of the file"""


# ---------------------------------------------------------------------------- expert inside each sub-env
@dataclass(frozen=True)
class _StepRecord:
    """What the collector needs besides the observation, made in the sub-env's own process."""

    seed: int | None
    """seed of the reset that began this episode"""
    t: int
    """steps since that reset"""
    action: np.ndarray
    """the expert's action for this observation"""
    proprio: np.ndarray
    state: np.ndarray
    sim_state: np.ndarray
    """mj_getState(mjSTATE_INTEGRATION): before the action, after the observation"""
    task: str


class _ExpertRecorder(gym.Wrapper):
    """Runs the task's scripted expert on this sub-env and puts a `_StepRecord` in `info[RECORD_KEY]`.

    Reading state leaves the simulation untouched, so the env's trajectory is the one a plain env
    replaying the recorded actions follows (a test replays demos to check it).
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.expert = vlagym.make_expert(env)
        self._seed: int | None = None
        self._t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self.expert.reset()
        self._seed, self._t = seed, 0
        info[RECORD_KEY] = self._record(obs)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        if not (terminated or truncated):  # an ended episode needs no next action
            info[RECORD_KEY] = self._record(obs)
        return obs, reward, terminated, truncated, info

    def _record(self, obs) -> _StepRecord:
        base = self.env.unwrapped
        sim = base.current if isinstance(base, MultiTaskEnv) else base
        task = base.task if isinstance(base, MultiTaskEnv) else (self.env.spec.id if self.env.spec else "")
        state = sim.state_vector()
        proprio = np.array(obs["proprio"], np.float32) if isinstance(obs, dict) else state[: Robot.PROPRIO_DIM].copy()
        action = np.asarray(self.expert(obs), np.float32)
        return _StepRecord(self._seed, self._t, action, proprio, state, sim.sim_state(), task)


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
    if ep.noise is not None:
        g.create_dataset(layout.EXPERT_ACTIONS, data=np.stack(ep.expert_actions).astype(np.float32))
    g.create_dataset("rewards", data=np.asarray(ep.rewards, np.float32))
    dones = np.zeros(n, np.uint8)
    dones[-1] = 1  # every recorded episode ran until it ended (success or time limit)
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
class _Journal:
    """The demo file and its working copy; see "Crash safety" in the module docstring."""

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
    if env_id != cfg.task or env_kwargs != wanted:
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
    mine = json.loads(json.dumps(dataclasses.asdict(cfg)))
    differ = {k: (stored.get(k), mine[k]) for k in SAME_ON_RESUME if stored.get(k) != mine[k]}
    if differ:
        detail = ", ".join(f"{k}: file {a!r} vs now {b!r}" for k, (a, b) in differ.items())
        raise DemoError(f"cannot resume {path} with different settings ({detail})")


def _write_config(path: Path, cfg: DemoConfig) -> None:
    atomic_write_json(path.with_name(path.name + CONFIG_SUFFIX), dataclasses.asdict(cfg))


# ---------------------------------------------------------------------------- the collection loop
class _Collector:
    """Runs episodes first .. end - 1 in a vector env and hands them, in episode order, to the journal."""

    def __init__(self, envs: gym.vector.VectorEnv, cfg: DemoConfig, journal: _Journal, first: int, bar):
        self.envs, self.cfg, self.journal, self.bar = envs, cfg, journal, bar
        self.k = envs.num_envs
        self.next_episode = first
        self.next_to_write = first
        self.running: list[DemoEpisode | None] = [None] * self.k
        self.actions = np.zeros((self.k, *envs.single_action_space.shape), np.float32)
        self.labels = np.zeros_like(self.actions)  # the expert's actions (self.actions adds the noise)
        self.finished: dict[int, DemoEpisode] = {}
        self.successes = 0
        self.failed_seeds: list[int] = []

    def _assign(self, i: int) -> int | None:
        """Give sub-env i the next episode; its seed, or None when every episode has been handed out."""
        if self.next_episode >= self.cfg.episodes:
            self.running[i] = None
            return None
        ep = DemoEpisode(index=self.next_episode, seed=self.cfg.seed + self.next_episode)
        if self.cfg.action_noise > 0:
            ep.noise = np.random.default_rng([NOISE_STREAM, ep.seed])
        self.running[i] = ep
        self.next_episode += 1
        return ep.seed

    def _record(self, i: int, obs, info: dict[str, Any], at_reset: bool) -> None:
        ep = self.running[i]
        rec = info[RECORD_KEY][i] if info.get(f"_{RECORD_KEY}", np.zeros(self.k, bool))[i] else None
        # Guards the autoreset handling: every record must continue this episode, from its own seed.
        if rec is None or rec.seed != ep.seed or rec.t != len(ep):
            got = "nothing" if rec is None else f"step {rec.t} of seed {rec.seed}"
            raise RuntimeError(f"sub-env {i} is out of step: expected step {len(ep)} of seed {ep.seed}, got {got}")
        if at_reset:
            ep.instruction = str(info["instruction"][i])
            ep.task = rec.task
        if self.cfg.has_images():
            for camera in self.cfg.cameras:
                ep.images.setdefault(camera, []).append(np.array(obs["images"][camera][i]))
        ep.proprio.append(rec.proprio)
        ep.state.append(rec.state)
        ep.sim_states.append(rec.sim_state)
        self.labels[i] = rec.action
        self.actions[i] = rec.action
        if ep.noise is not None:
            arm = slice(0, len(rec.action) - 1)  # the last entry is the gripper command: never perturbed
            noisy = rec.action[arm] + ep.noise.normal(0.0, self.cfg.action_noise, len(rec.action) - 1)
            self.actions[i, arm] = np.clip(noisy, -1.0, 1.0)

    def _finish(self, ep: DemoEpisode, success: bool) -> None:
        ep.success = success
        self.finished[ep.index] = ep
        if success:
            self.successes += 1
        else:
            self.failed_seeds.append(ep.seed)
            logger.info("episode %d (seed %d) failed after %d steps", ep.index, ep.seed, len(ep))
        self.bar.update(1)
        self.bar.set_postfix(success=self.successes, failed=len(self.failed_seeds))
        # Commit in episode order, so the file does not depend on which sub-env finished first.
        batch = []
        while self.next_to_write in self.finished:
            done = self.finished.pop(self.next_to_write)
            self.next_to_write += 1
            if done.success or self.cfg.keep_failures:
                batch.append(done)
        if batch:
            self.journal.commit(batch)

    def run(self) -> None:
        seeds = [self._assign(i) for i in range(self.k)]  # k <= remaining episodes: every sub-env gets one
        obs, info = self.envs.reset(seed=seeds)
        for i in range(self.k):
            self._record(i, obs, info, at_reset=True)
        while any(ep is not None for ep in self.running):
            obs, reward, terminated, truncated, info = self.envs.step(self.actions)
            done = terminated | truncated
            restart = np.zeros(self.k, bool)
            for i, ep in enumerate(self.running):
                if ep is None:  # idle: runs throw-away episodes (autoreset, zero actions) until the others end
                    continue
                ep.actions.append(self.actions[i].copy())
                ep.expert_actions.append(self.labels[i].copy())
                ep.rewards.append(float(reward[i]))
                if done[i]:
                    self._finish(ep, bool(info["success"][i]))
                    restart[i] = self._assign(i) is not None
                    self.actions[i] = 0.0
                else:
                    self._record(i, obs, info, at_reset=False)
            # Gymnasium 1.x vector envs autoreset in NEXT_STEP mode: a sub-env whose episode ended is reset
            # by the *next* step() call, without a seed, and that call ignores its action. A sub-env that
            # starts a new episode is therefore reset here, with its episode's seed, through reset_mask:
            # that also clears its pending autoreset, so the next step() steps it with the expert's action.
            # Idle sub-envs are left to autoreset; their output is ignored. `_record` checks every
            # record's seed and step count, so a reset the vector env made on its own would fail loudly.
            if restart.any():
                seeds = [ep.seed if restart[i] else None for i, ep in enumerate(self.running)]
                obs, info = self.envs.reset(seed=seeds, options={"reset_mask": restart})
                for i in np.flatnonzero(restart):
                    self._record(i, obs, info, at_reset=True)


def ignore_sigint(env: gym.Env, main_pid: int) -> gym.Env:
    """Run in each async worker as it builds its env: Ctrl-C reaches the whole process group, and the main
    process alone should handle it (it closes the workers), instead of every worker dying with a traceback.
    AsyncVectorEnv also builds one env in the main process (to read the spaces): that one is left alone."""
    if os.getpid() != main_pid:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return env


def _make_envs(cfg: DemoConfig, num_envs: int) -> gym.vector.VectorEnv:
    vector_kwargs: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP, "copy": False}
    wrappers: list = [_ExpertRecorder]
    if cfg.vectorization == "async":
        # Gymnasium 1.4's async worker clears its pending autoreset on a masked reset only with shared
        # memory; without it a seeded reset would be followed by an unseeded one.
        vector_kwargs["shared_memory"] = True
        wrappers.append(functools.partial(ignore_sigint, main_pid=os.getpid()))
    return gym.make_vec(
        cfg.task,
        num_envs=num_envs,
        vectorization_mode=cfg.vectorization,
        vector_kwargs=vector_kwargs,
        wrappers=wrappers,
        **cfg.make_kwargs(),
    )


def _close(envs: gym.vector.VectorEnv, graceful: bool) -> None:
    """Close the vector env; after an exception, terminate async workers instead of talking to them.

    An interrupt can land inside `step_wait` after some workers' replies were read: a graceful close
    would then wait forever for replies that were already consumed.
    """
    if graceful or not isinstance(envs, gym.vector.AsyncVectorEnv):
        envs.close()
        return
    try:
        with warnings.catch_warnings():  # "Calling close while waiting for a pending call": expected here
            warnings.simplefilter("ignore")
            envs.close(terminate=True)
    except Exception:  # noqa: BLE001 - already unwinding from another error: make sure the workers end
        for process in envs.processes:
            if process.is_alive():
                process.terminate()
        envs.closed = True  # else its __del__ tries the same close again and prints the error


def _prepare_output(cfg: DemoConfig) -> tuple[_Journal, int]:
    """Create or reopen the file; returns the journal and the first episode index to run."""
    path = Path(cfg.out)
    if path.is_dir():
        raise DemoError(f"out {cfg.out!r} is a folder; give a file path ending in .hdf5")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DemoError(f"cannot create the output folder {str(path.parent)!r}: {e.strerror or e}") from e
    if not os.access(path.parent, os.W_OK):
        raise DemoError(f"cannot write to the output folder {str(path.parent)!r}")
    journal = _Journal(path, cfg.compression)
    if path.exists() and cfg.resume:
        journal.reopen(cfg)
        first = 0 if journal.last_seed is None else journal.last_seed - cfg.seed + 1
        logger.info("resuming %s: %d demos, continuing at episode %d (seed %d)", path, journal.demos, first, first)
    elif path.exists() and not cfg.overwrite:
        raise DemoError(f"{path} exists; pass resume to continue it or overwrite to replace it")
    else:
        journal.create(cfg)
        first = 0
    _write_config(path, cfg)
    return journal, first


def collect_demos(cfg: DemoConfig) -> DemoSummary:
    """Run the task's scripted expert for `cfg.episodes` episodes and write them to `cfg.out`.

    Raises `DemoError` for an output that exists (without resume/overwrite) or that a resume cannot continue.
    An interrupted call (KeyboardInterrupt, or the process killed) leaves a valid file holding every episode
    committed so far; `resume=True` continues it.
    """
    from tqdm.auto import tqdm

    start = time.perf_counter()
    journal, first = _prepare_output(cfg)
    remaining = max(0, cfg.episodes - first)
    bar = tqdm(total=cfg.episodes, initial=min(first, cfg.episodes), desc=cfg.task, unit="ep", disable=not cfg.progress)
    collector = None
    try:
        if remaining:
            envs = _make_envs(cfg, min(cfg.num_envs, remaining))
            finished = False
            try:
                collector = _Collector(envs, cfg, journal, first, bar)
                collector.run()
                finished = True
            finally:
                _close(envs, graceful=finished)
    except KeyboardInterrupt:
        logger.warning(
            "interrupted: %s holds %d complete demos; resume=True (vlagym demos --resume) continues it",
            journal.path,
            journal.demos,
        )
        raise
    finally:
        bar.close()
        journal.remove_scratch()
    successes = collector.successes if collector else 0
    failed = collector.failed_seeds if collector else []
    summary = DemoSummary(
        path=str(journal.path),
        first_episode=first,
        episodes=remaining,
        successes=successes,
        failures=len(failed),
        failed_seeds=failed,
        demos=journal.demos,
        steps=journal.total,
        seconds=time.perf_counter() - start,
        file_bytes=journal.path.stat().st_size,
    )
    if failed:
        what = "kept" if cfg.keep_failures else "dropped"
        # With action noise the perturbed expert fails now and then by design; without, a failure is news.
        level = logging.INFO if cfg.action_noise > 0 else logging.WARNING
        logger.log(level, "%d of %d episodes failed (%s); seeds %s", len(failed), remaining, what, failed[:20])
    logger.info(
        "%s: %d demos, %d steps; this run: %d episodes, %d successes, %d failures, %.1f s",
        journal.path,
        summary.demos,
        summary.steps,
        remaining,
        successes,
        len(failed),
        summary.seconds,
    )
    return summary


# The configs live in `vlagym.train.configs` (light, for the CLI); importers of this module keep their names.
__all__ = [
    "COMPRESSIONS",
    "CONFIG_SUFFIX",
    "VECTORIZATION_MODES",
    "DemoConfig",
    "DemoError",
    "DemoSummary",
    "collect_demos",
]
