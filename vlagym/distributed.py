"""Work units on Ray actors, for rollouts that outgrow one machine (`pip install 'vlagym[ray]'`).

    pool = ActorPool(MyWorker, args=(...,), workers=4)     # MyWorker: a plain class with the unit method
    for index, result in pool.run("run", units):           # results as units finish, any order
        ...
    results = pool.map("run", units)                       # or all of them, in the order of the units
    pool.close()

Each worker is a Ray actor holding an instance of a plain class (importable on every node: vlagym installed
there). The pool hands out one unit at a time to each idle worker, so fast workers take more. What a worker
logs at WARNING or above (Python warnings included) comes back with each call and is logged by the driver's
`vlagym.distributed` logger, naming the worker's node and process; Ray's own streaming of worker output stays
off. Ray sets each worker's `OMP_NUM_THREADS` to its CPUs (`cpus_per_worker`), and a worker's pool vector envs
(`vlagym.envs.pool`) use as many processes at most; vlagym's import selects headless rendering there too. A
worker whose process or node dies (`RayActorError`) has its unit given to another worker and is replaced by a
fresh actor; a unit whose code raises stops the run with that error (a bug is not retried). Units must be
deterministic functions of their content, so a rerun unit gives what the lost one would have.

`ship_folder` / `FolderShipment.materialize` move a checkpoint folder's files to the workers through Ray's
object store, checked by SHA-256 on arrival: nodes need no shared file system.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: How many dead workers one run tolerates (each time the unit moves to another worker) before it gives up.
MAX_WORKER_FAILURES = 8
#: How long a fresh worker may wait for a CPU; past it, the run goes on without (the cluster lost a node).
REPLACE_TIMEOUT_S = 120.0


#: The `backend` values of the commands that can run their episodes on Ray.
BACKENDS = ("local", "ray")


def backend_problem(backend: str, address: str | None, workers: Any, unit_size: Any, multiple_of: int = 1) -> str:
    """What is wrong with a command's backend options ("" when nothing): the backend, Ray-only options given for
    the local one, `workers` and `unit_size` (a multiple of `multiple_of`) positive integers."""
    if backend not in BACKENDS:
        return f"backend must be one of {list(BACKENDS)}, got {backend!r}"
    given = [n for n, v in (("address", address), ("workers", workers), ("unit_size", unit_size)) if v is not None]
    if backend != "ray" and given:
        return f"{' and '.join(given)} only with backend 'ray'"
    for name, value in (("workers", workers), ("unit_size", unit_size)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            return f"{name} must be a positive integer, got {value!r}"
    if unit_size is not None and unit_size % multiple_of:
        return f"unit_size must be a multiple of {multiple_of} (whole groups of tries), got {unit_size}"
    return ""


class DistributedError(Exception):
    """Ray is missing, the cluster cannot be reached, a worker cannot start, or too many workers died."""


def require_ray() -> Any:
    """The `ray` module; `DistributedError` naming the extra to install when it is missing."""
    try:
        import ray
    except ImportError as e:
        raise DistributedError("the Ray backend needs the 'ray' package: pip install 'vlagym[ray]'") from e
    return ray


def connect(address: str | None = None) -> Any:
    """Ray, connected: to `address` ("auto", "ray://host:10001", "host:6379"), else to the cluster this process
    already joined, else to a new local one on this machine's CPUs."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    try:
        ray.init(address=address, log_to_driver=False, include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DistributedError(f"cannot connect to the Ray cluster at {address or 'a new local one'}: {first}") from e
    return ray


def default_workers(ray: Any, cpus_per_worker: float) -> int:
    """One worker per `cpus_per_worker` CPUs of the cluster (at least one)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1) // cpus_per_worker))


#: The most log records one call of a worker sends back; the rest are counted.
MAX_RELAYED_LOGS = 50


class _LogBuffer(logging.Handler):
    """Keeps the records a worker logs between two calls, as (level, text)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[tuple[int, str]] = []
        self.dropped = 0
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.records) < MAX_RELAYED_LOGS:
            self.records.append((record.levelno, self.format(record)))
        else:
            self.dropped += 1

    def take(self) -> tuple[list[tuple[int, str]], int]:
        taken, dropped = self.records, self.dropped
        self.records, self.dropped = [], 0
        return taken, dropped


class _Host:
    """The Ray actor: `cls(*args)` built in the worker, its methods called through `call`, which also returns what
    the worker logged since the last call."""

    def __init__(self, cls: type, args: tuple[Any, ...]):
        import ray

        from vlagym.envs.pool import CPUS_ENV

        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
        if cpus:  # a pool vector env in this worker uses its share, not every CPU of the node
            os.environ[CPUS_ENV] = str(max(1, int(cpus)))
        self.logs = _LogBuffer()
        logging.getLogger().addHandler(self.logs)
        logging.captureWarnings(True)
        self.where = f"{os.uname().nodename} pid {os.getpid()}"
        self.obj = cls(*args)

    def call(self, method: str, *args: Any) -> tuple[Any, str, tuple[list[tuple[int, str]], int]]:
        return getattr(self.obj, method)(*args), self.where, self.logs.take()

    def pid(self) -> int:
        """The worker's process id (tests kill workers by it)."""
        return os.getpid()


def _relay(where: str, logs: tuple[list[tuple[int, str]], int]) -> None:
    """Log a worker's records here, at their own levels."""
    records, dropped = logs
    for level, text in records:
        logger.log(level, "[Ray worker on %s] %s", where, text)
    if dropped:
        logger.warning("[Ray worker on %s] %d more log records not shown", where, dropped)


class ActorPool:
    """`workers` Ray actors of `cls(*args)`, running units with fault tolerance (see the module docstring)."""

    def __init__(
        self,
        cls: type,
        args: Sequence[Any] = (),
        workers: int | None = None,
        cpus_per_worker: float = 1.0,
        env_vars: dict[str, str] | None = None,
        max_failures: int = MAX_WORKER_FAILURES,
    ):
        self.ray = require_ray()
        if not self.ray.is_initialized():
            connect()
        self._cls = cls
        self._remote = self.ray.remote(num_cpus=cpus_per_worker, max_restarts=0)(_Host)
        # No runtime_env: it would make Ray start a fresh process per worker (1.9x slower to start, measured);
        # Ray itself gives each worker OMP_NUM_THREADS = its CPUs, which torch and BLAS read when they load.
        self._options = {"runtime_env": {"env_vars": env_vars}} if env_vars else {}
        self._args = tuple(args)
        self.max_failures = max_failures
        self.failures = 0
        self._broadcasts: list[tuple[str, tuple[Any, ...]]] = []
        n = workers or default_workers(self.ray, cpus_per_worker)
        self.actors = self._start(n)

    def _start(self, n: int, timeout: float | None = None) -> list[Any]:
        """`n` started workers; `TimeoutError` when they could not be placed within `timeout` seconds."""
        actors = [self._remote.options(**self._options).remote(self._cls, self._args) for _ in range(n)]
        try:
            self.ray.get([a.__ray_ready__.remote() for a in actors], timeout=timeout)
        except self.ray.exceptions.GetTimeoutError as e:
            for a in actors:
                self.ray.kill(a)
            raise TimeoutError(f"no room for {n} Ray worker(s) within {timeout} s") from e
        except self.ray.exceptions.RayError as e:
            for a in actors:
                self.ray.kill(a)
            raise DistributedError(f"a Ray worker could not start: {_first_line(e)}") from e
        return actors

    def run(self, method: str, units: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        """(index of the unit, `worker.method(unit)`) for every unit, as they finish."""
        ray = self.ray
        pending = deque(range(len(units)))
        idle = list(self.actors)
        in_flight: dict[Any, tuple[int, Any]] = {}
        try:
            while pending or in_flight:
                while pending and idle:
                    actor, i = idle.pop(), pending.popleft()
                    in_flight[actor.call.remote(method, units[i])] = (i, actor)
                [ref], _ = ray.wait(list(in_flight), num_returns=1)
                i, actor = in_flight.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    pending.appendleft(i)
                    fresh = self._replace(actor, i, e)
                    if fresh is not None:
                        idle.append(fresh)
                    elif not self.actors:
                        raise DistributedError(f"every Ray worker died (the last one: {_first_line(e)})") from e
                    continue
                except ray.exceptions.RayTaskError as e:
                    raise DistributedError(f"unit {i} failed on a Ray worker: {_first_line(e)}") from e
                idle.append(actor)
                value, where, logs = result
                _relay(where, logs)
                yield i, value
        finally:
            for ref in in_flight:  # an abandoned run (error, interrupt) cancels what is still running
                with contextlib.suppress(Exception):  # best effort: close() ends the workers anyway
                    ray.cancel(ref, force=False)

    def map(self, method: str, units: Sequence[Any]) -> list[Any]:
        """`worker.method(unit)` for every unit, in the order of `units` (`run` without the streaming)."""
        results = dict(self.run(method, units))
        return [results[i] for i in range(len(units))]

    def _replace(self, dead: Any, unit: int, error: Exception) -> Any:
        """A fresh worker in place of `dead`, given what was broadcast; None when the cluster has no room for one
        (a lost node's CPUs): the run goes on with the workers left."""
        self.failures += 1
        if self.failures > self.max_failures:
            raise DistributedError(f"{self.failures} Ray workers died (the last one: {_first_line(error)})")
        logger.warning("a Ray worker died running unit %d (%s); it reruns on a fresh worker", unit, _first_line(error))
        try:
            [fresh] = self._start(1, timeout=REPLACE_TIMEOUT_S)
        except TimeoutError as e:
            self.actors.remove(dead)
            logger.warning("%s (a lost node?): going on with %d workers", e, len(self.actors))
            return None
        for method, args in self._broadcasts:  # the state the others were given
            _relay(*self.ray.get(fresh.call.remote(method, *args))[1:])
        self.actors[self.actors.index(dead)] = fresh
        return fresh

    def broadcast(self, method: str, *args: Any) -> list[Any]:
        """`worker.method(*args)` on every worker, and on every worker started later to replace a dead one (e.g.
        a round's weights: put them in the object store once, `ray.put`, and pass the reference); the results."""
        self._broadcasts = [(m, a) for m, a in self._broadcasts if m != method] + [(method, args)]
        return self.ask(method, *args)

    def ask(self, method: str, *args: Any) -> list[Any]:
        """`worker.method(*args)` on every worker alive now, once (not given to later workers); the results."""
        return self.each(method, [args] * len(self.actors))

    def each(self, method: str, args: Sequence[Sequence[Any]]) -> list[Any]:
        """`worker_k.method(*args[k])` on the workers, at once; the results in worker order. For workers that
        hold state no other can take over (envs mid-episode): one that dies is a `DistributedError` here."""
        if len(args) != len(self.actors):
            raise ValueError(f"got {len(args)} argument tuples for {len(self.actors)} workers")
        try:
            results = self.ray.get([a.call.remote(method, *x) for a, x in zip(self.actors, args, strict=True)])
        except self.ray.exceptions.RayActorError as e:
            raise DistributedError(f"a Ray worker died: {_first_line(e)}") from e
        except self.ray.exceptions.RayTaskError as e:
            raise DistributedError(f"{method} failed on a Ray worker: {_first_line(e)}") from e
        out = []
        for value, where, logs in results:
            _relay(where, logs)
            out.append(value)
        return out

    def close(self, timeout: float = 30.0) -> None:
        """Let the workers close what they hold (their `close()`, when the class has one), then end them."""
        if hasattr(self._cls, "close"):
            try:
                for _, where, logs in self.ray.get([a.call.remote("close") for a in self.actors], timeout=timeout):
                    _relay(where, logs)
            except self.ray.exceptions.RayError as e:  # a dead or stuck worker: it is killed below anyway
                logger.warning("a Ray worker did not close cleanly: %s", _first_line(e))
        for a in self.actors:
            self.ray.kill(a)
        self.actors = []

    def __enter__(self) -> ActorPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_line(error: BaseException) -> str:
    """One line for a Ray error: the last line of its text, where a remote traceback ends with the exception
    (``EvalError: checkpoint folder ... does not exist``), without the exception's module path."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return re.sub(r"^(?:[A-Za-z_]\w*\.)+(?=\w+(?:Error|Exception)\b)", "", lines[-1])


# ---------------------------------------------------------------------------- a folder to every node
@dataclass(frozen=True)
class FolderShipment:
    """Some files of a folder (contents in Ray's object store) and their joint SHA-256."""

    name: str
    files: dict[str, Any]
    """file name -> object ref of its bytes"""
    digest: str

    def materialize(self, root: str | os.PathLike | None = None) -> Path:
        """The folder on this node, written once per digest under `root` (default: the temp dir), verified."""
        import ray

        root = Path(root or tempfile.gettempdir()) / "vlagym-shipped"
        folder = root / f"{self.name}-{self.digest[:16]}"
        if folder.is_dir() and folder_digest(folder, self.files) == self.digest:
            return folder
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=".incoming-"))
        try:
            for name, data in zip(self.files, ray.get(list(self.files.values())), strict=True):
                (tmp / name).write_bytes(data)
            got = folder_digest(tmp, self.files)
            if got != self.digest:
                raise DistributedError(
                    f"the shipped folder {self.name!r} arrived corrupt: sha256 {got} != {self.digest}"
                )
            shutil.rmtree(folder, ignore_errors=True)  # a stale or partial copy
            try:
                os.rename(tmp, folder)
            except OSError:  # another worker of this node placed it first
                if folder_digest(folder, self.files) != self.digest:
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return folder


def folder_digest(folder: str | os.PathLike, names: Iterable[str]) -> str:
    """SHA-256 over the names and contents of the files `names` of `folder`, in sorted order."""
    h = hashlib.sha256()
    for name in sorted(names):
        h.update(name.encode() + b"\0" + (Path(folder) / name).read_bytes() + b"\0")
    return h.hexdigest()


def ship_folder(folder: str | os.PathLike, names: Sequence[str]) -> FolderShipment:
    """Put the files `names` of `folder` into Ray's object store, once, for every worker to fetch."""
    ray = require_ray()
    folder = Path(folder)
    files = {name: ray.put((folder / name).read_bytes()) for name in sorted(names)}
    return FolderShipment(folder.resolve().name, files, folder_digest(folder, names))


__all__ = [
    "BACKENDS",
    "ActorPool",
    "DistributedError",
    "FolderShipment",
    "backend_problem",
    "connect",
    "default_workers",
    "folder_digest",
    "require_ray",
    "ship_folder",
]
