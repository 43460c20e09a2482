"""Training runs as the bc, ppo and filtered-bc sections measure them: the policy they train, one `train_bc`
run, and the TensorBoard logs the rates are read from (start-up left out)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from vlagym.perf.config import TINY_POLICY, BenchConfig
from vlagym.train.run_files import TB_DIR


def policy_config(cfg: BenchConfig, head: str) -> Any:
    """The `VLAConfig` the sections train and time: the default VLA, or a tiny one with `quick`."""
    from vlagym.policies import VLAConfig

    return VLAConfig(head=head, image_size=cfg.image_size, **(TINY_POLICY if cfg.quick else {}))


def read_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every TensorBoard scalar under `folder`: tag -> [(step, value), ...] in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: sorted((e.step, e.value) for e in acc.Scalars(tag)) for tag in acc.Tags()["scalars"]}


def steady_rate(points: list[tuple[int, float]], per_step: int) -> float:
    """The rate between the first and the last log point of a cumulative `samples_per_s` log.

    Point k says k * per_step samples took k * per_step / rate_k seconds since the start; the difference of
    two points leaves out the start-up before the first one (the first batches, the DataLoader's start).
    """
    (k0, r0), (k1, r1) = points[0], points[-1]
    if k1 == k0:
        return r1
    return (k1 - k0) * per_step / (k1 * per_step / r1 - k0 * per_step / r0)


def bc_pass(cfg: BenchConfig, demos: Path, out: Path) -> tuple[dict[str, float], Path]:
    """One `train_bc` run from scratch on `demos` into the empty folder `out`: its rates and wall time, and
    its final checkpoint."""
    from vlagym.train.bc import BCConfig, train_bc

    b = cfg.budget
    bc = BCConfig(
        dataset=[str(demos)],
        out=str(out),
        policy=policy_config(cfg, "l1"),
        steps=b.bc_steps,
        batch_size=b.batch_size,
        warmup_steps=min(100, b.bc_steps),
        checkpoint_every=0,
        log_every=max(1, b.bc_steps // 10),
        device=cfg.device,
        progress=False,
    )
    start = time.perf_counter()
    result = train_bc(bc)
    wall = time.perf_counter() - start
    points = read_scalars(out / TB_DIR)["train/samples_per_s"]
    metrics = {
        "params": sum(p.numel() for p in result["policy"].parameters()),
        "samples_per_s": steady_rate(points, b.batch_size),
        "samples_per_s_from_start": points[-1][1],
        "wall_s": wall,
    }
    return metrics, Path(result["checkpoint"])
