"""Paired comparison of evaluation runs: two runs against each other, or replicate runs against one baseline.

`compare_runs` pairs two runs of one protocol episode by episode (same task, split and seed: the same initial
state) and tests each task and all episodes together with McNemar's exact test, beside the Bonett-Price
interval of the difference. `replicate_runs` pairs each replicate run of a recipe (e.g. one post-training seed
each) with one baseline and averages the differences across runs with Student's t, which holds the run-to-run
spread as well as each run's episode noise. Both return a small result that renders as the Markdown the
command line prints (`format_comparison_report`, `format_replicates_report`) and as the JSON it prints with
``--json`` (`.to_json()`). Bad input raises `PairingError` naming the run and what is wrong.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vlagym.eval.configs import CompareConfig, ReplicatesConfig
from vlagym.eval.runs import EvalRun, check_comparable, paired_outcomes, read_eval_run, version_differences
from vlagym.eval.stats import PairedTest, PairingError, compare_outcomes, replicate_mean


# ---------------------------------------------------------------------------- two runs
@dataclass
class Comparison:
    """Runs A and B, paired: the test per task and over "all" episodes, and what the reader should know."""

    config: CompareConfig
    a: EvalRun
    b: EvalRun
    tests: dict[str, PairedTest]
    """one paired test per task (or split: `config.by`), then "all" (every paired episode)"""
    pairing_note: str | None
    """how many episodes sequential stopping left unpaired; None when every episode paired"""
    version_notes: list[str]
    """"name: A vs B" per software version that differs between the runs"""

    def to_json(self) -> dict[str, Any]:
        """The JSON document of `vlagym compare --json`."""
        return {
            "a": {"path": self.a.path, "policy": self.a.policy},
            "b": {"path": self.b.path, "policy": self.b.policy},
            "protocol": self.a.protocol,
            "metric": self.config.metric,
            "alpha": self.config.alpha,
            "by": self.config.by,
            "tests": {task: dataclasses.asdict(t) for task, t in self.tests.items()},
            "version_differences": self.version_notes,
            "pairing_note": self.pairing_note,
        }


def compare_runs(cfg: CompareConfig) -> Comparison:
    """Read runs `cfg.a` and `cfg.b` and test them on their paired episodes; `PairingError` if they do not pair."""
    a, b = read_eval_run(cfg.a, cfg.metric), read_eval_run(cfg.b, cfg.metric)
    check_comparable(a, b)
    outcomes_a, outcomes_b, note = paired_outcomes(a, b)
    tests = compare_outcomes(outcomes_a, outcomes_b, cfg.alpha, cfg.by)
    return Comparison(cfg, a, b, tests, note, version_differences(a, b))


def format_paired_tests(tests: dict[str, PairedTest], alpha: float, by: str = "task") -> str:
    """The Markdown table of `compare_outcomes`: one row per task (or split), then "all", then the overall verdict."""
    lines = [
        f"| {by} | n | A | B | A - B | A - B, 95% CI | only A | only B | McNemar p | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for group, t in tests.items():
        name = f"**{group}**" if group == "all" else group
        lines.append(
            f"| {name} | {t.n} | {t.a_rate:.1%} | {t.b_rate:.1%} | {100 * t.difference:+.1f} pts | "
            f"[{100 * t.difference_ci95[0]:+.1f}, {100 * t.difference_ci95[1]:+.1f}] | {t.a_only} | "
            f"{t.b_only} | {t.p_value:.3g} | {t.verdict} |"
        )
    overall = tests["all"]
    lines += ["", f"verdict over all {overall.n} paired episodes (alpha {alpha:g}): {overall.verdict}"]
    return "\n".join(lines)


def format_comparison_report(c: Comparison) -> str:
    """What `vlagym compare` prints: the two runs, the method, notes, the table and the version differences."""
    lines = [
        f"A: {c.a.path} (policy {c.a.policy})",
        f"B: {c.b.path} (policy {c.b.policy})",
        f"protocol: {c.a.protocol}; metric: {c.config.metric}; McNemar's exact test on paired episodes; "
        "A - B interval: Bonett-Price, paired",
    ]
    if c.pairing_note:
        lines.append(f"note: {c.pairing_note}")
    lines += ["", format_paired_tests(c.tests, c.config.alpha, c.config.by)]
    if c.version_notes:
        lines.append(f"note: the runs used different software versions: {'; '.join(c.version_notes)}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- replicates against a baseline
@dataclass
class Replicates:
    """Replicate runs, each paired with one baseline over all its episodes (A = the run, B = the baseline)."""

    config: ReplicatesConfig
    baseline: EvalRun
    rows: list[tuple[EvalRun, PairedTest]]
    """per run in the order given: the run and its paired test against the baseline"""

    def to_json(self) -> dict[str, Any]:
        """The JSON document of `vlagym replicates --json` (a NaN, e.g. the spread of one run, as null)."""
        alpha = self.config.alpha
        diffs = [t.difference for _, t in self.rows]
        return {
            "baseline": {"path": self.baseline.path, "policy": self.baseline.policy},
            "protocol": self.baseline.protocol,
            "metric": self.config.metric,
            "alpha": alpha,
            "runs": [{"path": run.path, "policy": run.policy, "test": dataclasses.asdict(t)} for run, t in self.rows],
            "mean_difference": _no_nan(dataclasses.asdict(replicate_mean(diffs, alpha))),
            "mean_success": _no_nan(dataclasses.asdict(replicate_mean([t.a_rate for _, t in self.rows], alpha))),
        }


def replicate_runs(cfg: ReplicatesConfig) -> Replicates:
    """Pair every run of `cfg.runs` with `cfg.baseline` on all its episodes; `PairingError` naming the run that
    does not pair (another protocol, other seeds, or cells that sequential stopping cut short)."""
    base = read_eval_run(cfg.baseline, cfg.metric)
    rows = []
    for path in cfg.runs:
        try:
            run = read_eval_run(path, cfg.metric)
            check_comparable(run, base)
            outcomes_run, outcomes_base, note = paired_outcomes(run, base)
            if note:
                raise PairingError(f"{note}; replicates need every run on the baseline's episodes")
            rows.append((run, compare_outcomes(outcomes_run, outcomes_base, cfg.alpha)["all"]))
        except PairingError as e:  # A is the run, B the baseline
            raise PairingError(f"{path} against the baseline {cfg.baseline}: {e}") from e
    return Replicates(cfg, base, rows)


def format_replicate_table(rows: list[tuple[EvalRun, PairedTest]], alpha: float) -> str:
    """Markdown: one row per run (its paired difference to the baseline), then the mean over the runs."""
    level = f"{100 * (1 - alpha):g}%"
    lines = [
        f"| run | n | run | baseline | difference | {level} CI | only run | only baseline | McNemar p |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run, t in rows:
        lines.append(
            f"| {run.path} | {t.n} | {t.a_rate:.1%} | {t.b_rate:.1%} | {100 * t.difference:+.1f} pts | "
            f"[{100 * t.difference_ci95[0]:+.1f}, {100 * t.difference_ci95[1]:+.1f}] | {t.a_only} | {t.b_only} | "
            f"{t.p_value:.3g} |"
        )
    differences = [100 * t.difference for _, t in rows]
    diff = replicate_mean(differences, alpha)
    rate = replicate_mean([100 * t.a_rate for _, t in rows], alpha)
    lines.append("")
    if diff.n == 1:
        lines.append("one run: give more replicates for an interval across runs")
        return "\n".join(lines)
    lines += [
        f"mean difference over {diff.n} runs: {diff.mean:+.1f} pts (sd {diff.sd:.1f}), {level} CI "
        f"[{diff.ci95[0]:+.1f}, {diff.ci95[1]:+.1f}] (Student's t across runs, {diff.n - 1} df), "
        f"t-test p {diff.p_value:.3g}",
        f"mean success of the runs: {rate.mean:.1f}% (sd {rate.sd:.1f}), {level} CI [{rate.ci95[0]:.1f}, "
        f"{rate.ci95[1]:.1f}]; baseline {100 * rows[0][1].b_rate:.1f}%",
        f"runs at or above the mean: {sum(100 * t.difference >= diff.mean for _, t in rows)} of {diff.n}; "
        f"smallest {min(differences):+.1f}, largest {max(differences):+.1f}",
    ]
    return "\n".join(lines)


def format_replicates_report(r: Replicates) -> str:
    """What `vlagym replicates` prints: the baseline, the method and the table."""
    return "\n".join(
        [
            f"baseline: {r.baseline.path} (policy {r.baseline.policy}); protocol: {r.baseline.protocol}; "
            f"metric: {r.config.metric}",
            "per run: paired on the same episodes (Bonett-Price interval, McNemar's exact test)",
            "",
            format_replicate_table(r.rows, r.config.alpha),
        ]
    )


def _no_nan(d: dict[str, Any]) -> dict[str, Any]:
    """`d` with NaN numbers (and pairs of them) as null: JSON has no NaN (one run has no spread)."""

    def clean(v: Any) -> Any:
        if isinstance(v, (tuple, list)):
            return [clean(x) for x in v]
        return None if isinstance(v, float) and v != v else v

    return {k: clean(v) for k, v in d.items()}
