"""What an evaluation reports per task, and its Markdown: the numbers of a list of episode records.

Per task: success rate with `n` and a Wilson 95% interval, success at the last step, mean episode length and
return, counts of the failure taxonomy (`vlagym.eval.diagnostics`); one JSON record per episode. Shared by
`vlagym eval` (results.json), suite runs (bundle.json) and post-training's periodic evaluation.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vlagym.eval.diagnostics import OUTCOMES, outcome_counts
from vlagym.eval.rollout import EpisodeRecord
from vlagym.eval.stats import wilson_interval


def summarize(records: list[EpisodeRecord]) -> dict[str, Any]:
    """Per-task numbers of a list of episodes (see the module docstring)."""
    n = len(records)
    successes = sum(r.success for r in records)
    lo, hi = wilson_interval(successes, n)
    return {
        "n": n,
        "successes": successes,
        "success_rate": successes / n if n else math.nan,
        "ci95": [lo, hi],
        "success_at_end_rate": sum(r.success_at_end for r in records) / n if n else math.nan,
        "mean_length": float(np.mean([r.length for r in records])) if n else math.nan,
        "mean_return": float(np.mean([r.episode_return for r in records])) if n else math.nan,
        "outcomes": outcome_counts(r.outcome for r in records),
    }


def episode_dict(r: EpisodeRecord) -> dict[str, Any]:
    """One episode as a JSON record."""
    return {
        "seed": r.seed,
        "task": r.task,
        "instruction": r.instruction,
        "success": r.success,
        "success_at_end": r.success_at_end,
        "length": r.length,
        "return": r.episode_return,
        "outcome": r.outcome,
        "ever_grasped": r.ever_grasped,
        "grasped_at_end": r.grasped_at_end,
        "wrong_object": r.wrong_object,
        "min_reach_distance": r.min_reach_distance,
        "sim_unstable": r.sim_unstable,
    }


def format_outcomes(rows: dict[str, dict[str, int]], videos: dict[str, dict[str, list[str]]] | None = None) -> str:
    """Markdown: one row per label with the count of every outcome, and links to videos of that outcome if any."""
    lines = ["| | " + " | ".join(OUTCOMES) + " |", "|---|" + "---:|" * len(OUTCOMES)]
    for label, counts in rows.items():
        cells = []
        for o in OUTCOMES:
            links = " ".join(f"[{k + 1}]({p})" for k, p in enumerate((videos or {}).get(label, {}).get(o, [])))
            cells.append(f"{counts.get(o, 0)}" + (f" {links}" if links else ""))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def videos_by_outcome(episodes: list[dict[str, Any]]) -> dict[str, list[str]]:
    """{outcome: [video paths]} of the episode records that have a video."""
    out: dict[str, list[str]] = {}
    for e in episodes:
        if e.get("video"):
            out.setdefault(e.get("outcome", ""), []).append(e["video"])
    return out


def _summary_row(name: str, s: dict[str, Any]) -> str:
    lo, hi = s["ci95"]
    return (
        f"| {name} | {s['n']} | {s['success_rate']:.1%} | [{lo:.1%}, {hi:.1%}] | "
        f"{s['success_at_end_rate']:.1%} | {s['mean_length']:.1f} | {s['mean_return']:.2f} |"
    )


def format_results(results: dict[str, Any]) -> str:
    """The Markdown table of `results["tasks"]`: task | n | success | 95% CI | success at end | length | return
    (for a multi-task env also one row per task it drew); then the outcome counts per task (with links to the
    recorded videos)."""
    lines = [
        "| task | n | success | 95% CI | success at end | mean length | mean return |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for task, s in results["tasks"].items():
        lines.append(_summary_row(task, s))
        # A multi-task env: a row per task it drew, under its own.
        lines += [_summary_row(f"↳ {drawn}", d) for drawn, d in sorted(s.get("by_task", {}).items())]
    with_outcomes = {task: s for task, s in results["tasks"].items() if "outcomes" in s}
    if with_outcomes:
        rows = {task: s["outcomes"] for task, s in with_outcomes.items()}
        videos = {task: videos_by_outcome(s.get("episodes", [])) for task, s in with_outcomes.items()}
        lines += ["", "Outcomes (failure taxonomy, see vlagym.eval.diagnostics):", "", format_outcomes(rows, videos)]
    return "\n".join(lines)
