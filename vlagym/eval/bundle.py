"""A results bundle beyond its per-episode results: fingerprint, suite average, Markdown, the files written.

What makes a bundle reproducible and comparable: the software, machine and checkpoint it ran with
(`fingerprint`: versions, renderer, sha256 of the checkpoint files and statistics, the policy-noise rule) and
the one-line command that reruns it (`reproduction_command`). The suite average is the mean over tasks of each
task's mean over splits, with a two-stage bootstrap interval. `write_outputs` writes bundle.json, bundle.md
(`format_bundle`: the task x split matrix with Wilson intervals, success at end, suite average, failure
taxonomy, language controls), heatmap.png and report.html, each atomically.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np

from vlagym.eval.adapters import NOISE_STREAM
from vlagym.eval.configs import EXPERT, SuiteRunConfig, policy_kind
from vlagym.eval.diagnostics import OUTCOMES, format_controls, write_heatmap
from vlagym.eval.layout import BUNDLE_JSON, BUNDLE_MD, CHECKPOINT_FILES, HEATMAP_PNG
from vlagym.eval.machine import machine_fingerprint
from vlagym.eval.report import write_report
from vlagym.eval.stats import bootstrap_suite_mean
from vlagym.eval.summary import format_outcomes, videos_by_outcome
from vlagym.io import atomic_write_json, atomic_write_text, file_sha256

BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0


# ---------------------------------------------------------------------------- fingerprint
def checkpoint_hashes(policy: str) -> dict[str, str]:
    """sha256 of the checkpoint's files and of its normalisation statistics (canonical JSON); "expert" for it, and
    "<kind>: not hashed" for a served or factory policy."""
    if policy == EXPERT:
        return {name: EXPERT for name in (*CHECKPOINT_FILES, "stats")}
    kind = policy_kind(policy)
    if kind != "checkpoint":  # a policy server or a user's factory: no files here to hash
        return {name: f"{kind}: not hashed" for name in (*CHECKPOINT_FILES, "stats")}
    folder = Path(policy)
    hashes = {name: file_sha256(folder / name) for name in CHECKPOINT_FILES}
    stats = json.loads((folder / "config.json").read_text()).get("stats")
    hashes["stats"] = hashlib.sha256(json.dumps(stats, sort_keys=True).encode()).hexdigest()
    return hashes


def fingerprint(cfg: SuiteRunConfig, rendered: bool) -> dict[str, Any]:
    """Software versions, machine, renderer, checkpoint hashes and the policy-noise rule of this run."""
    return {
        **machine_fingerprint(rendered),
        "checkpoint_sha256": checkpoint_hashes(cfg.policy),
        # a stochastic (flow) head draws each episode's noise from this stream mixed with the episode seed
        "policy_noise_stream": None if cfg.policy == EXPERT else f"{NOISE_STREAM:#x}",
    }


def reproduction_command(cfg: SuiteRunConfig) -> str:
    """The `vlagym eval --suite ...` line that reruns `cfg` (settings at their defaults are left out)."""
    argv = ["vlagym", "eval", "--suite", cfg.suite, "--policy", cfg.policy, "--out", cfg.out]
    if cfg.episodes is not None:
        argv += ["--episodes", str(cfg.episodes)]
    if cfg.num_envs != 1:
        argv += ["--num-envs", str(cfg.num_envs)]
    if cfg.vectorization != "sync":  # the same episodes either way; it reruns as fast
        argv += ["--vectorization", cfg.vectorization]
    if cfg.language_controls:
        argv.append("--language-controls")
    if cfg.videos:
        argv += ["--videos", str(cfg.videos)]
    if cfg.served_mapping:
        argv += ["--served-mapping", json.dumps(cfg.served_mapping, sort_keys=True)]
    if cfg.sequential_width is not None:  # both, always: a later default must not change what reruns
        argv += ["--sequential-width", repr(float(cfg.sequential_width))]
        argv += ["--sequential-min-episodes", str(cfg.sequential_min_episodes)]
    return shlex.join(argv)


# ---------------------------------------------------------------------------- suite average
def suite_average(results: dict[str, dict[str, Any]], metric: str) -> dict[str, Any]:
    """Mean over tasks of the task's mean over splits of `metric`, with the bootstrap 95% interval."""
    nested = [[[e[metric] for e in cell["episodes"]] for cell in by_split.values()] for by_split in results.values()]
    mean, lo, hi = bootstrap_suite_mean(nested, samples=BOOTSTRAP_SAMPLES, seed=BOOTSTRAP_SEED)
    return {
        "mean": mean,
        "ci95": [lo, hi],
        "method": f"percentile bootstrap, {BOOTSTRAP_SAMPLES} samples, seed {BOOTSTRAP_SEED}: tasks, then episodes "
        "within each task's splits",
    }


# ---------------------------------------------------------------------------- files
def write_outputs(bundle: dict[str, Any], out: Path) -> None:
    """bundle.json, bundle.md, heatmap.png and report.html of `bundle` into `out`, each atomically."""
    atomic_write_json(out / BUNDLE_JSON, bundle)
    write_heatmap(out / HEATMAP_PNG, bundle["results"], bundle["protocol"]["splits"], bundle_title(bundle))
    atomic_write_text(out / BUNDLE_MD, format_bundle(bundle) + "\n")
    write_report(bundle, out)


def bundle_title(bundle: dict[str, Any]) -> str:
    """ "NAME vVERSION: POLICY" of a bundle."""
    return f"{bundle['protocol']['name']} v{bundle['protocol']['version']}: {bundle['policy']}"


# ---------------------------------------------------------------------------- Markdown
def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def format_bundle(bundle: dict[str, Any]) -> str:
    """Markdown: header lines, the success matrix (task x split, with Wilson 95% CIs), success at end, suite average."""
    protocol = bundle["protocol"]
    splits = list(protocol["splits"])
    label = f"{protocol['name']} v{protocol['version']}"
    partial = f" (partial: {bundle['episodes']} of {protocol['episodes']})" if bundle["partial"] else ""
    sequential = bundle.get("sequential")
    lines = [
        f"# {label}: {bundle['policy']}",
        "",
        f"{'Up to ' if sequential else ''}{bundle['episodes']} episodes per task and split{partial}, seeds "
        f"{bundle['seeds']['first']}..{bundle['seeds']['last']}; wall clock {bundle['wall_clock_s']:.1f} s.",
        f"Reproduce: `{bundle['reproduce']}`",
    ]
    if sequential:
        lines.append(_sequential_line(bundle, sequential))
    for metric, title in (("success", "Success (any step), 95% Wilson CI"), ("success_at_end", "Success at end")):
        lines += ["", f"## {title}", "", *_matrix(bundle, splits, metric, with_n=bool(sequential))]
    lines += ["", "## Suite average", "", "| metric | mean | 95% bootstrap CI |", "|---|---:|---|"]
    for metric, avg in bundle["suite_average"].items():
        lines.append(f"| {metric} | {_pct(avg['mean'])} | [{_pct(avg['ci95'][0])}, {_pct(avg['ci95'][1])}] |")
    lines += ["", f"![success per task and split]({HEATMAP_PNG})"]
    rows = outcome_rows(bundle)
    if rows:
        lines += ["", "## Outcomes (failure taxonomy)", "", f"Definitions: {bundle.get('outcome_definitions', '')}."]
        lines += ["Counts over all splits; numbers in brackets link to episode videos.", ""]
        lines.append(format_outcomes(*rows))
    if bundle.get("language_controls"):
        lines += ["", "## Language controls", ""]
        lines.append(
            "Same seeds (train split) with the correct instruction, an empty one, and one naming another object "
            "of the scene (success counted for the object named); 95% Wilson intervals."
        )
        lines += ["", format_controls(bundle["language_controls"])]
    return "\n".join(lines)


def _matrix(bundle: dict[str, Any], splits: list[str], metric: str, with_n: bool) -> list[str]:
    """The task x split table of one rate, a mean column last; success cells with their interval (and n)."""
    rate_key = "success_rate" if metric == "success" else "success_at_end_rate"
    lines = ["| task | " + " | ".join(splits) + " | mean |", "|---|" + "---:|" * (len(splits) + 1)]
    for task, by_split in bundle["results"].items():
        cells = []
        for split in splits:
            c = by_split[split]
            cell = _pct(c[rate_key])
            if metric == "success":
                cell += f" [{_pct(c['ci95'][0])}, {_pct(c['ci95'][1])}]"
                if with_n:
                    cell += f" n={c['n']}"
            cells.append(cell)
        mean = float(np.mean([by_split[s][rate_key] for s in splits]))
        lines.append(f"| {task} | " + " | ".join(cells) + f" | {_pct(mean)} |")
    return lines


def _sequential_line(bundle: dict[str, Any], sequential: dict[str, Any]) -> str:
    cells = [c for by_split in bundle["results"].values() for c in by_split.values()]
    stopped = sum(bool(c.get("sequential", {}).get("stopped_early")) for c in cells)
    counted = sum(c["n"] for c in cells)
    discarded = sum(c.get("sequential", {}).get("episodes_discarded", 0) for c in cells)
    return (
        f"Sequential stopping: each task x split stopped at the first n >= {sequential['min_episodes']} episodes "
        f"whose Wilson 95% interval was at most {_pct(sequential['target_width'])} wide (up to "
        f"{sequential['max_episodes']}); {stopped} of {len(cells)} cells stopped early, {counted} episodes counted, "
        f"{discarded} run past a stop and discarded; n per cell in the success table."
    )


def outcome_rows(bundle: dict[str, Any]) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, list[str]]]] | None:
    """Per task: outcome counts summed over splits, and {outcome: video paths}; None for bundles without outcomes."""
    counts: dict[str, dict[str, int]] = {}
    videos: dict[str, dict[str, list[str]]] = {}
    for task, by_split in bundle["results"].items():
        if not all("outcomes" in cell for cell in by_split.values()):
            return None
        counts[task] = {o: sum(cell["outcomes"].get(o, 0) for cell in by_split.values()) for o in OUTCOMES}
        for cell in by_split.values():
            for o, paths in videos_by_outcome(cell["episodes"]).items():
                videos.setdefault(task, {}).setdefault(o, []).extend(paths)
    return counts, videos
