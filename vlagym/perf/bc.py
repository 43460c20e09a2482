"""The bc section: behaviour-cloning samples/s of `train_bc`, read from its TensorBoard log (start-up left out)."""

from __future__ import annotations

from vlagym.perf.config import BenchConfig
from vlagym.perf.table import Table
from vlagym.perf.timing import interleaved, passes_note, summarise, transpose
from vlagym.perf.training import policy_config
from vlagym.perf.work import Work


def bench_bc(cfg: BenchConfig, work: Work) -> Table:
    """The bc table: one row, `repeats` interleaved `train_bc` runs, each training anew."""
    b = cfg.budget
    head = policy_config(cfg, "l1").head
    metrics = transpose(interleaved({head: work.bc_run}, cfg.repeats, "bc")[head])
    row = {"device": cfg.device, "head": head, "params": metrics.pop("params")[0], **summarise(metrics)}
    return Table(
        "bc",
        "BC training samples/s (train_bc)",
        ["device", "head"],
        {
            "device": "device",
            "head": "head",
            "params": "parameters",
            "samples_per_s": "samples/s",
            "samples_per_s_from_start": "samples/s incl. first steps",
            "wall_s": "wall s (set-up, checkpoint)",
        },
        [row],
        [
            f"{b.bc_steps} steps of batch {b.batch_size}, {cfg.image_size} px, ImageAugment on, 0 DataLoader "
            f"workers, {cfg.threads} torch thread(s); samples/s between the first and the last logged step",
            passes_note(cfg.repeats) + ", each training anew",
        ],
    )
