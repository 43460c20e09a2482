"""The filtered-bc section: collection env steps/s and updates/s of `train_filtered_bc` (from the bc section's
checkpoint), with its batches drawn inline or prefetched, and where the time goes."""

from __future__ import annotations

import functools
import math
from pathlib import Path

from vlagym.perf.config import BenchConfig
from vlagym.perf.table import Table
from vlagym.perf.timing import interleaved, passes_note, summarise, transpose
from vlagym.perf.training import read_scalars
from vlagym.perf.work import Work
from vlagym.train.run_files import TB_DIR


def fbc_rates(tb: Path) -> dict[str, float]:
    """Collection env steps/s, updates/s and where the time goes, from a `train_filtered_bc` TensorBoard log."""
    s = read_scalars(tb)

    def total(tag: str) -> float:
        return float(sum(v for _, v in s.get(tag, [])))

    env_steps = max(v for _, v in s["time/env_steps"])
    updates = max(k for k, _ in s["time/learn_s"])
    collect_s, learn_s = total("time/collect_s"), total("time/learn_s")
    return {
        "collect_steps_per_s": env_steps / collect_s,
        "updates_per_s": updates / learn_s if learn_s > 0 else math.nan,
        "env_share": total("time/collect_env_s") / (collect_s + learn_s),
        "policy_share": total("time/collect_policy_s") / (collect_s + learn_s),
        "learn_share": learn_s / (collect_s + learn_s),
    }


def bench_filtered_bc(cfg: BenchConfig, work: Work) -> Table:
    """The filtered-bc table: one row with inline batches, one with prefetched ones."""
    from vlagym.rl.fbc import FilteredBCConfig, train_filtered_bc

    b, task = cfg.budget, cfg.task_list[0]

    def one_run(prefetch: bool) -> dict[str, float]:
        fbc = FilteredBCConfig(
            policy=str(work.bc_checkpoint()),
            task=task,
            demos=[str(work.demo_file())],
            out=str(work.new_folder("fbc")),
            rounds=2,
            episodes_per_round=b.fbc_episodes,
            n_envs=b.ppo_envs,
            updates_per_round=b.fbc_updates,
            batch_size=b.batch_size,
            prefetch=prefetch,
            eval_every=0,
            device=cfg.device,
            progress=False,
        )
        train_filtered_bc(fbc)
        return fbc_rates(Path(fbc.out) / TB_DIR)

    runs = {"batches drawn inline": False, "batches prefetched (default)": True}
    samples = interleaved(
        {label: functools.partial(one_run, prefetch) for label, prefetch in runs.items()}, cfg.repeats, "filtered-bc"
    )
    rows = [{"run": label, **summarise(transpose(passes))} for label, passes in samples.items()]
    return Table(
        "filtered-bc",
        f"Filtered-BC post-training (train_filtered_bc on {task})",
        ["run"],
        {
            "run": "run",
            "collect_steps_per_s": "collection env steps/s",
            "updates_per_s": "updates/s",
            "env_share": "time: env steps",
            "policy_share": "time: policy in collection",
            "learn_share": "time: updates",
        },
        rows,
        [
            f"2 rounds of {b.fbc_episodes} noisy episodes on {b.ppo_envs} sync sub-env(s) and {b.fbc_updates} "
            f"updates of batch {b.batch_size} (half demos), {cfg.image_size} px, ImageAugment on, on {cfg.device}; "
            "the two runs draw identical batches, the second in a background thread while the update runs",
            "time shares are fractions of collection + updates: env steps (simulation, rendering, the "
            "recorder, writing the round's file), the policy while collecting (inference, noise), updates",
            passes_note(cfg.repeats) + ", each training anew",
        ],
    )
