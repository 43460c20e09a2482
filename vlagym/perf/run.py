"""`run_bench`: the configured sections in order, one JSON document (config, machine, every section's rows)."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vlagym.eval.machine import machine_fingerprint
from vlagym.io import atomic_write_json
from vlagym.perf.bc import bench_bc
from vlagym.perf.config import BenchConfig
from vlagym.perf.dataset import bench_dataset
from vlagym.perf.env import bench_env
from vlagym.perf.env_parts import bench_env_parts
from vlagym.perf.filtered_bc import bench_filtered_bc
from vlagym.perf.latency import bench_latency
from vlagym.perf.ppo import bench_ppo
from vlagym.perf.render import bench_render
from vlagym.perf.results import FORMAT, FORMAT_VERSION
from vlagym.perf.rollouts import bench_rollouts
from vlagym.perf.table import Table
from vlagym.perf.vector import bench_vector
from vlagym.perf.work import Work

SECTION_FUNCTIONS: dict[str, Callable[[BenchConfig, Work], Table]] = {
    "env": bench_env,
    "env-parts": bench_env_parts,
    "render": bench_render,
    "vector": bench_vector,
    "dataset": bench_dataset,
    "bc": bench_bc,
    "latency": bench_latency,
    "ppo": bench_ppo,
    "filtered-bc": bench_filtered_bc,
    "rollouts": bench_rollouts,
}


def run_bench(cfg: BenchConfig, on_section: Callable[[Table], None] | None = None) -> dict[str, Any]:
    """Run the configured sections in order; returns the JSON document (written to `cfg.out` when set).

    `on_section` is called with each section's table as soon as it is done (the CLI prints it).
    """
    from vlagym.train.run import torch_threads  # here: torch loads when a run starts, not with the CLI

    sections: dict[str, Any] = {}
    start = time.perf_counter()
    with torch_threads(cfg.threads):
        with tempfile.TemporaryDirectory(prefix="vlagym-bench-") as tmp:
            work = Work(cfg, Path(tmp))
            for name in cfg.sections:
                t = time.perf_counter()
                table = SECTION_FUNCTIONS[name](cfg, work)
                sections[name] = {**table.to_dict(), "seconds": time.perf_counter() - t}
                if on_section is not None:
                    on_section(table)
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "config": cfg.to_dict(),
        "fingerprint": machine_fingerprint(rendered=True),
        "wall_s": time.perf_counter() - start,
        "sections": sections,
    }
    if cfg.out is not None:
        atomic_write_json(cfg.out, doc)
    return doc
