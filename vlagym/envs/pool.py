"""`PoolVectorEnv`: sub-envs stepped as batches by a few worker processes, observations in shared memory.

Gymnasium's `AsyncVectorEnv` runs one process per sub-env and exchanges a pipe message with each of them on
every step. A vlagym step costs about a millisecond of physics, so that round trip per sub-env (and the
main process's work around it) eats much of what a second core gives. Here (EnvPool's design, in Python):

- `num_workers` processes each own a contiguous slice of the sub-envs, stepped in order by a
  `SyncVectorEnv` inside the worker, so autoreset modes, seeding and `info` are exactly Gymnasium's;
- the actions, rewards, terminations, truncations and every array observation (images, proprio, state)
  live in shared memory: a step is one small "step" message per worker and one reply carrying the slice's
  `info` and the observations that are not arrays (the instruction text);
- observations handed out are copies, so the next step cannot change them.

Sub-env i of a pool behaves as sub-env i of a `SyncVectorEnv` built from the same functions: same seeds and
actions give bit-identical observations whatever the number of workers (tests check it). A worker that dies
raises `RuntimeError` naming it and its sub-envs; workers ignore SIGINT, so Ctrl-C reaches the main process,
and `close()` ends them (terminating any that do not answer within `close_timeout` seconds).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import os
import pickle
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import batch_space

Path = tuple[str, ...]  # the keys leading to one leaf of a (nested) Dict observation
#: how long a process polls its pipe before it blocks on it: a blocked process's wake-up costs ~100 us on a
#: 2-core VM, a step of a small batch ~1 ms, and the next message mostly comes within this
SPIN_S = 0.0005


def _spin(pipe: Connection, seconds: float) -> None:
    """Poll `pipe` for up to `seconds` (returns early when a message is there); the caller then reads or blocks."""
    deadline = time.perf_counter() + seconds
    while not pipe.poll() and time.perf_counter() < deadline:
        pass


def _leaves(space: gym.Space, path: Path = ()) -> list[tuple[Path, gym.Space]]:
    if isinstance(space, spaces.Dict):
        return [leaf for key, sub in space.spaces.items() for leaf in _leaves(sub, (*path, key))]
    return [(path, space)]


def _get(obs: Any, path: Path) -> Any:
    for key in path:
        obs = obs[key]
    return obs


def _assemble(space: gym.Space, values: dict[Path, Any], path: Path = ()) -> Any:
    if isinstance(space, spaces.Dict):
        return {key: _assemble(sub, values, (*path, key)) for key, sub in space.spaces.items()}
    return values[path]


class _Shared:
    """Arrays in shared memory: the batch of actions, rewards, terminations, truncations and array observations."""

    def __init__(self, ctx: Any, single_obs: gym.Space, single_action: gym.Space, n: int):
        self.specs: dict[str, tuple[tuple[int, ...], np.dtype]] = {
            "action": ((n, *single_action.shape), np.dtype(single_action.dtype)),
            "reward": ((n,), np.dtype(np.float64)),
            "terminated": ((n,), np.dtype(np.bool_)),
            "truncated": ((n,), np.dtype(np.bool_)),
        }
        self.obs_paths = [p for p, s in _leaves(single_obs) if isinstance(s, spaces.Box)]
        for p in self.obs_paths:
            leaf = _get(single_obs, p)
            self.specs["obs:" + "/".join(p)] = ((n, *leaf.shape), np.dtype(leaf.dtype))
        self.buffers = {
            name: ctx.RawArray("b", max(1, int(np.prod(shape)) * dtype.itemsize))
            for name, (shape, dtype) in self.specs.items()
        }

    def arrays(self) -> dict[str, np.ndarray]:
        """Numpy views of the buffers (call in each process that uses them)."""
        return {
            name: np.frombuffer(self.buffers[name], dtype=dtype, count=int(np.prod(shape))).reshape(shape)
            for name, (shape, dtype) in self.specs.items()
        }


def _worker(env_fns: bytes, lo: int, hi: int, shared: _Shared, pipe: Connection, autoreset_mode: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle; it closes us
    envs = None
    try:
        envs = SyncVectorEnv(cloudpickle.loads(env_fns), copy=False, autoreset_mode=AutoresetMode(autoreset_mode))
        views = {name: array[lo:hi] for name, array in shared.arrays().items()}
        pipe.send(("ok", None))
    except BaseException as e:  # noqa: BLE001 - reported to the main process, which raises it
        pipe.send(("error", _error(e)))
        return
    while True:
        try:
            _spin(pipe, SPIN_S)
            command, data = pipe.recv()
        except (EOFError, OSError):  # the main process went away
            envs.close()
            return
        try:
            if command == "close":
                envs.close()
                pipe.send(("ok", None))
                return
            pipe.send(("ok", _serve(envs, views, shared.obs_paths, command, data)))
        except BaseException as e:  # noqa: BLE001
            pipe.send(("error", _error(e)))


def _serve(envs: SyncVectorEnv, views: dict[str, np.ndarray], obs_paths: list[Path], command: str, data: Any) -> Any:
    if command == "step":
        obs, reward, terminated, truncated, info = envs.step(views["action"].copy())
        views["reward"][:], views["terminated"][:], views["truncated"][:] = reward, terminated, truncated
        return _write_obs(envs, obs, views, obs_paths), info
    if command == "reset":
        obs, info = envs.reset(**data)
        return _write_obs(envs, obs, views, obs_paths), info
    if command == "call":
        name, args, kwargs = data
        return envs.call(name, *args, **kwargs)
    if command == "set_attr":
        name, values = data
        return envs.set_attr(name, values)
    raise ValueError(f"unknown worker command {command!r}")


def _write_obs(envs: SyncVectorEnv, obs: Any, views: dict[str, np.ndarray], obs_paths: list[Path]) -> dict:
    """Array leaves into shared memory; the others (text) are returned to travel through the pipe."""
    for p in obs_paths:
        views["obs:" + "/".join(p)][:] = _get(obs, p)
    return {p: _get(obs, p) for p, _ in _leaves(envs.single_observation_space) if p not in obs_paths}


def _error(e: BaseException) -> tuple[BaseException | None, str]:
    text = "".join(traceback.format_exception(e))
    try:
        pickle.dumps(e)  # what the pipe will do with it
        return e, text
    except Exception:  # noqa: BLE001 - an exception that cannot travel is reported by its text
        return None, text


def _merge_infos(parts: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """One vector `info` from the workers' (each over its slice, Gymnasium's `key` / `_key` layout)."""
    if len(parts) == 1:
        return parts[0]  # one slice is the whole batch (a fresh dict every step)
    keys: list[str] = []
    for part in parts:
        keys += [k for k in part if k not in keys]
    merged: dict[str, Any] = {}
    for key in keys:
        present = [part[key] for part in parts if key in part]
        if isinstance(present[0], dict):
            merged[key] = _merge_infos([part.get(key, {}) for part in parts], sizes)
            continue
        like = present[0]
        chunks = []
        for part, size in zip(parts, sizes, strict=True):
            if key in part:
                chunks.append(part[key])
            elif like.dtype == object:
                chunks.append(np.full((size, *like.shape[1:]), None, dtype=object))
            else:
                chunks.append(np.zeros((size, *like.shape[1:]), dtype=like.dtype))
        merged[key] = np.concatenate(chunks)
    return merged


#: Set by a process that may use only some of the machine's CPUs (a Ray worker: `vlagym.distributed`).
CPUS_ENV = "VLAGYM_CPUS"


def usable_cpus() -> int:
    """The CPUs this process may use: $VLAGYM_CPUS when set (a Ray worker's share), else the machine's."""
    share = os.environ.get(CPUS_ENV, "")
    return max(1, int(share)) if share.isdigit() else (mp.cpu_count() or 1)


class PoolVectorEnv(VectorEnv):
    """A Gymnasium `VectorEnv` over `env_fns`, stepped by `num_workers` processes (contiguous slices).

    Args:
        env_fns: one function per sub-env, each returning the env (as for `SyncVectorEnv`).
        num_workers: worker processes (at most one per sub-env); default: the CPU count, capped at the sub-envs.
        autoreset_mode: Gymnasium's autoreset mode (``next_step``, ``same_step`` or ``disabled``).
        context: the multiprocessing start method (``None``: the platform's default, as Gymnasium's async env).
        close_timeout: seconds `close()` waits for a worker before terminating it.
        main_steps: the main process steps the first slice itself while the workers step theirs: one process
            fewer to wake per step, which pays where cores are few (see `vlagym bench --sections vector`).
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int | None = None,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        context: str | None = None,
        close_timeout: float = 10.0,
        main_steps: bool = False,
    ):
        if not env_fns:
            raise ValueError("PoolVectorEnv needs at least one env function")
        n = len(env_fns)
        workers = min(n, num_workers if num_workers is not None else usable_cpus())
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"num_workers must be a positive integer, got {num_workers!r}")
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.num_envs, self.num_workers, self.close_timeout = n, workers, close_timeout
        probe = env_fns[0]()  # the spaces and metadata (as Gymnasium's async env, from a throwaway first env)
        self.single_observation_space, self.single_action_space = probe.observation_space, probe.action_space
        self.metadata = {**probe.metadata, "autoreset_mode": self.autoreset_mode}
        self.render_mode, self.spec = probe.render_mode, probe.spec
        probe.close()
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        bounds = np.linspace(0, n, workers + 1).round().astype(int)
        self.slices = [(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
        ctx = mp.get_context(context)
        self._shared = _Shared(ctx, self.single_observation_space, self.single_action_space, n)
        self._arrays = self._shared.arrays()
        self._last_others: list[dict] = [{} for _ in self.slices]  # each slice's latest non-array observations
        self._pipes: list[Connection | None] = []
        self._processes: list[Any] = []
        self._local: SyncVectorEnv | None = None
        self._pending: tuple[list[Any], list[int]] | None = None  # a step_async's local reply and workers to hear
        if main_steps:  # slice 0 is the main process's: no worker (its envs are built after the forks)
            self._pipes.append(None)
            self._processes.append(None)
        for lo, hi in self.slices[len(self._pipes) :]:
            parent, child = ctx.Pipe()
            fns = cloudpickle.dumps(list(env_fns[lo:hi]))
            args = (fns, lo, hi, self._shared, child, self.autoreset_mode.value)
            process = ctx.Process(target=_worker, args=args, name=f"vlagym-pool-{lo}-{hi}", daemon=True)
            process.start()
            child.close()
            self._pipes.append(parent)
            self._processes.append(process)
        try:
            self._gather(range(1 if main_steps else 0, workers))
            if main_steps:
                lo, hi = self.slices[0]
                self._local = SyncVectorEnv(list(env_fns[lo:hi]), copy=False, autoreset_mode=self.autoreset_mode)
                self._local_views = {name: array[lo:hi] for name, array in self._arrays.items()}
        except BaseException:  # an env that fails to build: end the workers already started
            self.close_extras()
            raise

    # ------------------------------------------------------------------ talking to the workers
    def _gather(self, workers: Sequence[int]) -> list[Any]:
        """Each worker's reply, in order; a dead worker or an error in one raises here."""
        replies = []
        for w in workers:
            pipe, process = self._pipes[w], self._processes[w]
            _spin(pipe, SPIN_S)
            while not pipe.poll():
                if process.sentinel in wait([pipe, process.sentinel]) and not pipe.poll():
                    raise self._died(w)
            status, payload = pipe.recv()
            if status == "error":
                error, text = payload
                if error is None:
                    raise RuntimeError(f"PoolVectorEnv worker {w} failed:\n{text}")
                raise error
            replies.append(payload)
        return replies

    def _died(self, w: int) -> RuntimeError:
        lo, hi = self.slices[w]
        self._processes[w].join(1.0)
        code = self._processes[w].exitcode
        return RuntimeError(f"PoolVectorEnv worker {w} (sub-envs {lo}..{hi - 1}) died with exit code {code}")

    def _broadcast(self, command: str, per_worker: Sequence[Any]) -> list[Any]:
        local, remote = self._send(command, per_worker)
        return local + self._gather(remote)

    def _send(self, command: str, per_worker: Sequence[Any]) -> tuple[list[Any], list[int]]:
        """`command` to every worker not skipped, the main process's own slice served meanwhile: its reply (if
        it has a slice) and the workers whose replies are to be gathered."""
        if self._pending is not None:
            raise RuntimeError(f"PoolVectorEnv.{command}: a step_async is pending; call step_wait first")
        workers = [w for w, data in enumerate(per_worker) if data is not _SKIP]
        remote = [w for w in workers if self._pipes[w] is not None]
        for w in remote:
            try:
                self._pipes[w].send((command, per_worker[w]))
            except (BrokenPipeError, ConnectionResetError) as e:
                raise self._died(w) from e
        local = []
        if self._local is not None and workers and workers[0] == 0:  # the main process's own slice, meanwhile
            data = per_worker[0]
            local = [_serve(self._local, self._local_views, self._shared.obs_paths, command, data)]
        return local, remote

    def _observations(self, others: list[dict[Path, Any]]) -> Any:
        values: dict[Path, Any] = {p: self._arrays["obs:" + "/".join(p)].copy() for p in self._shared.obs_paths}
        for path, _ in _leaves(self.single_observation_space):
            if path not in values:
                parts = [part[path] for part in others]
                values[path] = np.concatenate(parts) if isinstance(parts[0], np.ndarray) else sum(map(tuple, parts), ())
        return _assemble(self.single_observation_space, values)

    # ------------------------------------------------------------------ the VectorEnv API
    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None):
        seeds = [None] * self.num_envs if seed is None else seed
        if isinstance(seeds, int):
            seeds = [seeds + i for i in range(self.num_envs)]
        if len(seeds) != self.num_envs:
            raise ValueError(f"seed is a list of {len(seeds)} but there are num_envs={self.num_envs} sub-envs")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != (self.num_envs,) or mask.dtype != np.bool_ or not mask.any():
                raise ValueError(f"options['reset_mask'] must be a bool array of shape ({self.num_envs},) with a True")
        per_worker: list[Any] = []
        for lo, hi in self.slices:
            if mask is not None and not mask[lo:hi].any():
                per_worker.append(_SKIP)  # nothing to reset here: its observations stay as they are
                continue
            worker_options = dict(options)
            if mask is not None:
                worker_options["reset_mask"] = mask[lo:hi].copy()
            per_worker.append({"seed": list(seeds[lo:hi]), "options": worker_options or None})
        replies = self._broadcast("reset", per_worker)
        obs_parts, info_parts, sizes = self._parts(per_worker, replies)
        return self._observations(obs_parts), _merge_infos(info_parts, sizes)

    def _parts(self, per_worker: list[Any], replies: list[Any]) -> tuple[list[dict], list[dict], list[int]]:
        """Per worker: its non-array observations (kept from last time when it was skipped), info and size."""
        answered = iter(replies)
        infos, sizes = [], []
        for w, data in enumerate(per_worker):
            lo, hi = self.slices[w]
            sizes.append(hi - lo)
            if data is _SKIP:
                infos.append({})
                continue
            self._last_others[w], info = next(answered)
            infos.append(info)
        return self._last_others, infos, sizes

    def step(self, actions: Any):
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Any) -> None:
        """Start a step (as Gymnasium's `AsyncVectorEnv`): the workers step while the caller goes on (the main
        process's own slice, with `main_steps`, is stepped here); `step_wait` returns the results."""
        actions = np.asarray(actions, dtype=self._arrays["action"].dtype)
        if actions.shape != self._arrays["action"].shape:
            raise ValueError(f"actions must have shape {self._arrays['action'].shape}, got {actions.shape}")
        if self._pending is not None:
            raise RuntimeError("PoolVectorEnv.step_async: a step is already pending; call step_wait first")
        self._arrays["action"][:] = actions
        self._pending = self._send("step", [None] * self.num_workers)

    def step_wait(self):
        """The results of the step `step_async` started, once every worker has answered."""
        if self._pending is None:
            raise RuntimeError("PoolVectorEnv.step_wait: no step is pending; call step_async first")
        (local, remote), self._pending = self._pending, None
        per_worker = [None] * self.num_workers
        replies = local + self._gather(remote)
        obs_parts, info_parts, sizes = self._parts(per_worker, replies)
        return (
            self._observations(obs_parts),
            self._arrays["reward"].copy(),
            self._arrays["terminated"].copy(),
            self._arrays["truncated"].copy(),
            _merge_infos(info_parts, sizes),
        )

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """`name` called (or read, when not callable) on every sub-env, in order."""
        return sum(self._broadcast("call", [(name, args, kwargs)] * self.num_workers), ())

    def get_attr(self, name: str) -> tuple[Any, ...]:
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr needs {self.num_envs} values, got {len(values)}")
        self._broadcast("set_attr", [(name, list(values[lo:hi])) for lo, hi in self.slices])

    def render(self) -> tuple[Any, ...] | None:
        return self.call("render")

    def close_extras(self, **kwargs: Any) -> None:
        if getattr(self, "_pending", None) is not None:  # hear the pending step out, so no worker blocks on it
            remote, self._pending = self._pending[1], None
            with contextlib.suppress(Exception):
                self._gather(remote)
        if self._local is not None:
            self._local.close()
        for pipe, process in zip(self._pipes, self._processes, strict=True):
            if process is None:
                continue
            if process.is_alive():
                try:
                    pipe.send(("close", None))
                except (BrokenPipeError, OSError):
                    pass
        for pipe, process in zip(self._pipes, self._processes, strict=True):
            if process is None:
                continue
            process.join(self.close_timeout)
            if process.is_alive():
                process.terminate()
                process.join(1.0)
            pipe.close()


_SKIP = object()  # a worker left out of a command (its slice has nothing to reset)


def make_pool(
    env_id: str,
    num_envs: int,
    num_workers: int | None = None,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    main_steps: bool = False,
    context: str | None = None,
    **env_kwargs: Any,
) -> PoolVectorEnv:
    """A `PoolVectorEnv` of `num_envs` copies of ``gym.make(env_id, **env_kwargs)`` (its `TimeLimit` included).

    The signature of a Gymnasium ``vector_entry_point`` (``num_envs`` and the env's kwargs), so a task can
    register it.
    """
    make = functools.partial(_make_wrapped, env_id, (), env_kwargs)
    return PoolVectorEnv(
        [make] * num_envs, num_workers, autoreset_mode=autoreset_mode, context=context, main_steps=main_steps
    )


#: what ``vector_kwargs`` of `make_vec` may set for "pool" (`PoolVectorEnv`'s options)
POOL_OPTIONS = ("autoreset_mode", "num_workers", "main_steps", "context")


def make_vec(
    env_id: str,
    num_envs: int,
    vectorization_mode: str = "sync",
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] = (),
    **env_kwargs: Any,
) -> VectorEnv:
    """`gymnasium.make_vec`, plus ``vectorization_mode="pool"``: a `PoolVectorEnv` with a worker per CPU and
    the main process stepping a slice too (what measured fastest on 2 cores; `vlagym bench --sections vector`),
    unless `vector_kwargs` sets `POOL_OPTIONS` otherwise; with one sub-env and no workers asked for, the sync
    vector env (the same episodes, a copy less per step). Gymnasium's sync/async options in `vector_kwargs`
    are dropped for "pool", `POOL_OPTIONS` but ``autoreset_mode`` kept from "sync"/"async"."""
    options = dict(vector_kwargs or {})
    if vectorization_mode == "pool" and num_envs == 1 and not {"num_workers", "main_steps"} & set(options):
        vectorization_mode = "sync"  # a pool of one sub-env is the sync vector env
        options = {k: v for k, v in options.items() if k in ("autoreset_mode", "copy")}
    if vectorization_mode != "pool":
        return gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=vectorization_mode,
            vector_kwargs=options,
            wrappers=list(wrappers) or None,
            **env_kwargs,
        )
    pool = {k: v for k, v in options.items() if k in POOL_OPTIONS}
    pool.setdefault("num_workers", usable_cpus())
    pool.setdefault("main_steps", True)
    make = functools.partial(_make_wrapped, env_id, tuple(wrappers), env_kwargs)
    return PoolVectorEnv([make] * num_envs, **pool)


def _make_wrapped(env_id: str, wrappers: tuple, env_kwargs: dict[str, Any]) -> gym.Env:
    env = gym.make(env_id, **env_kwargs)
    for wrapper in wrappers:
        env = wrapper(env)
    return env
