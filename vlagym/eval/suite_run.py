"""Run a benchmark protocol (`vlagym.eval.suites`) and write one results bundle; read bundles back to compare.

`run_suite` evaluates a policy on every task x split of a protocol, episode i
with seed `base_seed + i`, and writes (atomically):

    OUT/bundle.json   protocol (name, version, every setting), per task x split
                      results (rates, Wilson 95% CI, one record per episode),
                      suite average with its bootstrap interval, fingerprint of
                      the software, machine and checkpoint, and the one-line
                      command that reproduces the bundle
    OUT/bundle.md     the same as Markdown tables (task x split matrix, suite average,
                      failure taxonomy, language controls)
    OUT/heatmap.png   the task x split success matrix (`vlagym.eval.diagnostics`)
    OUT/report.html   one self-contained page of all of it (`vlagym.eval.report`)
    OUT/videos/*.mp4  with `videos`: per task x split, episodes of each outcome in turn

With `language_controls`, each task whose env can swap its target also runs the
protocol's seeds (train split) with the correct, an empty and a swapped
instruction; the rates, paired tests and a one-line reading go in the bundle.

Sequential stopping (`sequential_width`): each task x split keeps only the
first n episodes in seed order, n the first count >= `sequential_min_episodes`
at which `vlagym.eval.stats.can_stop` holds on those n outcomes (the Wilson 95%
interval is at most `sequential_width` wide), or all of them if it never holds.
The rule is checked after every episode of the ordered prefix, never per batch:
the episodes run in blocks of seeds (at least `num_envs`, and never short of
the first count at which the rule could hold), and episodes a block ran past n
are discarded, not counted. So n depends only on the outcomes in seed order, and
for a policy whose episodes depend only on their seed (the expert; a checkpoint
run with `num_envs=1`) the cell is exactly the first n episodes of a full run.
Language controls always run every seed.

Re-running the recorded command on the same machine reproduces every episode's
outcome: the seeds fix the initial states, the expert is deterministic, and a
checkpoint's outcomes depend only on its weights, its per-episode noise rule
(`policy_noise_stream` in the fingerprint: a flow head's noise comes from a
generator seeded from that stream and the episode seed) and `num_envs`
(recorded: batched inference rounds differently at other batch sizes, which can
flip an episode that sits on a knife's edge, though rarely).

`read_run` loads a bundle (or a plain `vlagym eval` results.json) as outcomes keyed
by (task, split, seed), which `vlagym.eval.stats.compare_outcomes` pairs
(`paired_outcomes` first trims cells that sequential stopping left unequal).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm.auto import tqdm

from vlagym.eval.diagnostics import (
    CONTROL_ENV_KWARGS,
    CONTROL_OPTIONS,
    CONTROLS,
    OUTCOMES,
    format_controls,
    summarize_controls,
    supports_language_controls,
    write_heatmap,
)
from vlagym.eval.evaluate import (
    CHECKPOINT_FILES,
    EXPERT,
    NOISE_STREAM,
    CheckpointPolicy,
    EvalError,
    ExpertPolicy,
    episode_dict,
    format_outcomes,
    read_checkpoint_config,
    record_videos,
    summarize,
    videos_by_outcome,
)
from vlagym.eval.machine import machine_fingerprint
from vlagym.eval.report import write_report
from vlagym.eval.rollout import EpisodeRecord, make_rollout_envs, run_episodes
from vlagym.eval.stats import EpisodeKey, PairingError, bootstrap_suite_mean, can_stop
from vlagym.eval.suites import SuiteProtocol, get_suite
from vlagym.io import atomic_write_json, atomic_write_text, file_sha256

logger = logging.getLogger(__name__)

BUNDLE_FORMAT = "vlagym-results-bundle"
BUNDLE_FORMAT_VERSION = 1
BUNDLE_JSON = "bundle.json"
BUNDLE_MD = "bundle.md"
HEATMAP_PNG = "heatmap.png"
CONTROL_SPLIT = "train"
RESULTS_JSON = "results.json"
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0
METRICS = ("success", "success_at_end")
SEQUENTIAL_MIN_EPISODES = 20


@dataclass
class SuiteRunConfig:
    """Options of `vlagym eval --suite NAME`."""

    suite: str
    """benchmark suite name (`vlagym bench-suite list`)"""
    policy: str
    """"expert" or a checkpoint folder (model.safetensors + config.json)"""
    out: str = "eval"
    """output folder (bundle.json, bundle.md)"""
    episodes: int | None = None
    """episodes per task and split; None means the protocol's (a smaller number is a quick, partial run)"""
    num_envs: int = 1
    """parallel sub-envs; a checkpoint's outcomes can depend on it, so it is part of the reproduction command"""
    progress: bool = True
    """show a progress bar"""
    language_controls: bool = False
    """also run the language controls (correct / empty / swapped instruction) where a task supports them"""
    videos: int = 0
    """per task and split, record this many episodes as mp4, taking each outcome in turn (failures first)"""
    sequential_width: float | None = None
    """sequential stopping: a task x split stops once its Wilson 95% interval is at most this wide (a fraction,
    0.2 = 20 points); None runs every episode"""
    sequential_min_episodes: int = SEQUENTIAL_MIN_EPISODES
    """sequential stopping: never stop before this many episodes"""

    def __post_init__(self) -> None:
        protocol = get_suite(self.suite)  # SuiteError (a ValueError) naming the known suites
        if self.episodes is not None and self.episodes < 1:
            raise EvalError(f"episodes must be at least 1, got {self.episodes}")
        self._check_sequential(protocol.episodes if self.episodes is None else self.episodes)
        if self.videos < 0:
            raise EvalError(f"videos must be non-negative, got {self.videos}")
        if self.num_envs < 1:
            raise EvalError(f"num_envs must be at least 1, got {self.num_envs}")
        if self.policy != EXPERT:
            read_checkpoint_config(self.policy)  # EvalError naming what is missing

    def _check_sequential(self, episodes: int) -> None:
        width, least = self.sequential_width, self.sequential_min_episodes
        if width is None:
            if least != SEQUENTIAL_MIN_EPISODES:
                raise EvalError(
                    f"sequential_min_episodes (--sequential-min-episodes) is {least} but sequential stopping is off: "
                    "set sequential_width (--sequential-width) too"
                )
            return
        if not 0 < width <= 1:  # False for NaN too
            raise EvalError(
                f"sequential_width (--sequential-width) must be in (0, 1] (a fraction: 0.2 is 20 points), got {width}"
            )
        if least < 1:
            raise EvalError(f"sequential_min_episodes (--sequential-min-episodes) must be at least 1, got {least}")
        if least > episodes:
            raise EvalError(
                f"sequential_min_episodes (--sequential-min-episodes) is {least}, more than the {episodes} episodes "
                "per task and split: sequential stopping could never apply"
            )


# ---------------------------------------------------------------------------- fingerprint
def checkpoint_hashes(policy: str) -> dict[str, str]:
    """sha256 of the checkpoint's files and of its normalisation statistics (canonical JSON); "expert" for it."""
    if policy == EXPERT:
        return {name: EXPERT for name in (*CHECKPOINT_FILES, "stats")}
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
    if cfg.language_controls:
        argv.append("--language-controls")
    if cfg.videos:
        argv += ["--videos", str(cfg.videos)]
    if cfg.sequential_width is not None:  # both, always: a later default must not change what reruns
        argv += ["--sequential-width", repr(float(cfg.sequential_width))]
        argv += ["--sequential-min-episodes", str(cfg.sequential_min_episodes)]
    return shlex.join(argv)


# ---------------------------------------------------------------------------- running
def _load_checkpoint(cfg: SuiteRunConfig, protocol: SuiteProtocol) -> CheckpointPolicy:
    try:
        checkpoint = CheckpointPolicy(cfg.policy)
    except ValueError as e:  # a checkpoint this vlagym cannot rebuild (format, weights that do not fit)
        raise EvalError(f"cannot load the checkpoint {cfg.policy!r}: {e}") from e
    if protocol.n_action_steps is not None:  # the protocol fixes chunk execution: override the checkpoint's
        try:
            checkpoint.policy.config = dataclasses.replace(
                checkpoint.policy.config, n_action_steps=protocol.n_action_steps
            )
        except ValueError as e:
            raise EvalError(f"{protocol.label} executes {protocol.n_action_steps} actions per chunk: {e}") from e
    return checkpoint


def chunk_settings(checkpoint: CheckpointPolicy | None, protocol: SuiteProtocol) -> dict[str, Any]:
    """How actions were executed: the policy's chunk size, actions run per chunk, temporal ensembling."""
    if checkpoint is None:
        return {"policy": "scripted expert: one action per step", "protocol_n_action_steps": protocol.n_action_steps}
    return {**(checkpoint.chunk_execution() or {}), "protocol_n_action_steps": protocol.n_action_steps}


def cell_env_kwargs(checkpoint: CheckpointPolicy | None, split: str) -> dict[str, Any]:
    """Env kwargs of one task x split: what the policy observes, and the split (its instruction set implied)."""
    kwargs: dict[str, Any] = {"obs_mode": "state"} if checkpoint is None else dict(checkpoint.env_kwargs)
    kwargs.pop("instruction_split", None)  # the split decides the wording (heldout_paraphrase: held-out)
    kwargs["split"] = split
    return kwargs


def _run_cell(
    task: str,
    split: str,
    seeds: list[int],
    cfg: SuiteRunConfig,
    checkpoint: CheckpointPolicy | None,
    extra_kwargs: dict[str, Any] | None = None,
    reset_options: dict[str, Any] | None = None,
    sequential: bool = False,
) -> tuple[list[EpisodeRecord], dict[str, Any], int]:
    """The records of one cell (every seed, or with `sequential` the stopped prefix), its env kwargs, and the
    number of episodes simulated (more than the records when a block ran past the stopping point)."""
    kwargs = {**cell_env_kwargs(checkpoint, split), **(extra_kwargs or {})}
    envs = make_rollout_envs(task, cfg.num_envs, "sync", **kwargs)
    try:
        policy = ExpertPolicy(envs) if checkpoint is None else checkpoint
        if sequential:
            records, simulated = _run_sequential(envs, policy, seeds, cfg, reset_options)
        else:
            records = run_episodes(
                envs, policy, seeds, on_episode_start=policy.reset, progress=cfg.progress, reset_options=reset_options
            )
            simulated = len(records)
    finally:
        envs.close()
    return records, kwargs, simulated


# ---------------------------------------------------------------------------- sequential stopping
def stopping_index(outcomes: Sequence[bool], target_width: float, min_episodes: int) -> int | None:
    """The first n at which `can_stop` holds on `outcomes[:n]`, checked after every episode in order; else None."""
    successes = 0
    for n, success in enumerate(outcomes, start=1):
        successes += bool(success)
        if can_stop(successes, n, target_width, min_episodes):
            return n
    return None


def earliest_stop(done: int, successes: int, total: int, target_width: float, min_episodes: int) -> int:
    """The least n > `done` at which the rule could hold, whatever the outcomes after the first `done`; `total` if none.

    For a fixed n the Wilson interval narrows as the rate moves away from 1/2, so the most favourable
    continuations are all failures or all successes: checking those two is enough.
    """
    n = max(done + 1, min_episodes)
    while n < total and not (
        can_stop(successes, n, target_width, min_episodes)
        or can_stop(successes + n - done, n, target_width, min_episodes)
    ):
        n += 1
    return min(n, total)


def _run_sequential(
    envs: gym.vector.VectorEnv,
    policy: ExpertPolicy | CheckpointPolicy,
    seeds: list[int],
    cfg: SuiteRunConfig,
    reset_options: dict[str, Any] | None = None,
) -> tuple[list[EpisodeRecord], int]:
    """Episodes in blocks of seeds (in order) until `stopping_index` finds n; the records of the first n, and how
    many episodes ran.

    A block spans at least `num_envs` seeds (every sub-env busy) and reaches at least `earliest_stop`, so no block
    ends where the rule cannot hold yet. Which block the rule holds in never changes n: the rule is checked on
    every prefix, and the episodes after n are dropped.
    """
    width, least = cfg.sequential_width, cfg.sequential_min_episodes
    if width is None:
        raise EvalError("sequential stopping needs sequential_width")
    records: list[EpisodeRecord] = []
    bar = tqdm(total=len(seeds), desc="episodes (sequential)", unit="ep", disable=not cfg.progress)
    try:
        while len(records) < len(seeds):
            done = len(records)
            successes = sum(r.success for r in records)
            end = max(earliest_stop(done, successes, len(seeds), width, least), done + envs.num_envs)
            block = run_episodes(
                envs,
                policy,
                seeds[done:end],
                on_episode_start=policy.reset,
                progress=False,
                reset_options=reset_options,
            )
            records += block
            bar.update(len(block))
            n = stopping_index([r.success for r in records], width, least)
            if n is not None:
                logger.info("sequential stopping: %d of %d episodes (%d run)", n, len(seeds), len(records))
                return records[:n], len(records)
    finally:
        bar.close()
    return records, len(records)


def sequential_settings(cfg: SuiteRunConfig, episodes: int) -> dict[str, Any] | None:
    """The bundle's record of the stopping rule; None when every episode runs."""
    if cfg.sequential_width is None:
        return None
    return {
        "target_width": cfg.sequential_width,
        "min_episodes": cfg.sequential_min_episodes,
        "max_episodes": episodes,
        "rule": "per task x split, keep the first n episodes in seed order, n the first count >= min_episodes whose "
        "Wilson 95% interval is at most target_width wide (vlagym.eval.stats.can_stop), else all max_episodes; "
        "episodes run past n are discarded",
    }


def video_seeds(records: list[EpisodeRecord], count: int) -> list[int]:
    """Up to `count` seeds, one outcome after another (failures before success), in episode order within each."""
    by_outcome = {o: [r.seed for r in records if r.outcome == o] for o in (*OUTCOMES[1:], OUTCOMES[0])}
    chosen: list[int] = []
    while len(chosen) < count and any(by_outcome.values()):
        for seeds in by_outcome.values():
            if seeds and len(chosen) < count:
                chosen.append(seeds.pop(0))
    return chosen


def _cell_videos(
    task: str,
    split: str,
    records: list[EpisodeRecord],
    episodes: list[dict[str, Any]],
    kwargs: dict[str, Any],
    cfg: SuiteRunConfig,
    checkpoint: CheckpointPolicy | None,
) -> None:
    """Record the chosen episodes of one cell; each episode record gets its video's path relative to OUT."""
    out = Path(cfg.out)
    seeds = video_seeds(records, cfg.videos)
    paths = record_videos(task, kwargs, checkpoint, seeds, out / "videos", name=f"{task}_{split}")
    by_seed = {seed: os.path.relpath(p, out) for seed, p in zip(seeds, paths, strict=True)}
    for e in episodes:
        if e["seed"] in by_seed:
            e["video"] = by_seed[e["seed"]]


def run_language_controls(
    protocol: SuiteProtocol, seeds: list[int], cfg: SuiteRunConfig, checkpoint: CheckpointPolicy | None
) -> dict[str, Any]:
    """Per task of the protocol: the three controls on the train split (or why they do not apply)."""
    controls: dict[str, Any] = {}
    for task in protocol.tasks:
        if not supports_language_controls(task):
            controls[task] = {"note": "not applicable (the task has no target swap: VLAEnv.swap_candidates)"}
            continue
        extra = CONTROL_ENV_KWARGS.get(task, {})
        outcomes, episodes = {}, {}
        for control in CONTROLS:
            logger.info("language control %s: %s on %s, %d episodes", control, cfg.policy, task, len(seeds))
            records, _, _ = _run_cell(task, CONTROL_SPLIT, seeds, cfg, checkpoint, extra, CONTROL_OPTIONS[control])
            outcomes[control] = [r.success for r in records]
            episodes[control] = [
                {"seed": r.seed, "instruction": r.instruction, "success": r.success, "outcome": r.outcome}
                for r in records
            ]
        controls[task] = {
            "split": CONTROL_SPLIT,
            "env_kwargs": extra,
            "reset_options": CONTROL_OPTIONS,
            **summarize_controls(outcomes),
            "episodes": episodes,
        }
    return controls


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


def run_suite(cfg: SuiteRunConfig) -> dict[str, Any]:
    """Run the protocol `cfg.suite` for `cfg.policy`; writes OUT/bundle.json and OUT/bundle.md, returns the bundle."""
    protocol = get_suite(cfg.suite)
    protocol.check_registered()
    checkpoint = None if cfg.policy == EXPERT else _load_checkpoint(cfg, protocol)
    out = Path(cfg.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EvalError(f"cannot create the output folder {cfg.out!r}: {e.strerror or e}") from e
    seeds = protocol.seeds(cfg.episodes)
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    for task in protocol.tasks:
        results[task] = {}
        for split in protocol.splits:
            logger.info("%s: %s on %s / %s, %d episodes", protocol.label, cfg.policy, task, split, len(seeds))
            t_cell = time.perf_counter()
            records, kwargs, simulated = _run_cell(
                task, split, seeds, cfg, checkpoint, sequential=cfg.sequential_width is not None
            )
            cell = summarize(records)
            if cfg.sequential_width is not None:
                cell["sequential"] = {
                    "stopped_early": len(records) < len(seeds),
                    "width_reached": can_stop(
                        cell["successes"], cell["n"], cfg.sequential_width, cfg.sequential_min_episodes
                    ),
                    "episodes_simulated": simulated,
                    "episodes_discarded": simulated - len(records),
                }
            cell["env_kwargs"] = kwargs
            cell["seconds"] = round(time.perf_counter() - t_cell, 3)
            cell["episodes"] = [episode_dict(r) for r in records]
            if cfg.videos:
                _cell_videos(task, split, records, cell["episodes"], kwargs, cfg, checkpoint)
            results[task][split] = cell
    controls = run_language_controls(protocol, seeds, cfg, checkpoint) if cfg.language_controls else None
    wall = time.perf_counter() - t0
    rendered = checkpoint is not None and "rgb" in str(checkpoint.env_kwargs.get("obs_mode", "rgb"))
    bundle = {
        "format": BUNDLE_FORMAT,
        "format_version": BUNDLE_FORMAT_VERSION,
        "protocol": protocol.to_dict(),
        "episodes": len(seeds),
        "partial": len(seeds) != protocol.episodes,
        "policy": cfg.policy,
        "config": dataclasses.asdict(cfg),
        "seeds": {"base_seed": protocol.base_seed, "count": len(seeds), "first": seeds[0], "last": seeds[-1]},
        "chunk_settings": chunk_settings(checkpoint, protocol),
        "sequential": sequential_settings(cfg, len(seeds)),
        "results": results,
        "suite_average": {metric: suite_average(results, metric) for metric in METRICS},
        "outcome_definitions": "vlagym.eval.diagnostics (module docstring): " + ", ".join(OUTCOMES),
        "fingerprint": fingerprint(cfg, rendered),
        "started_utc": started.isoformat(timespec="seconds"),
        "wall_clock_s": round(wall, 3),
        "reproduce": reproduction_command(cfg),
    }
    if controls is not None:
        bundle["language_controls"] = controls
    write_outputs(bundle, out)
    return bundle


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
        rate_key = "success_rate" if metric == "success" else "success_at_end_rate"
        lines += ["", f"## {title}", "", "| task | " + " | ".join(splits) + " | mean |"]
        lines.append("|---|" + "---:|" * (len(splits) + 1))
        for task, by_split in bundle["results"].items():
            cells = []
            for split in splits:
                c = by_split[split]
                cell = _pct(c[rate_key])
                if metric == "success":
                    cell += f" [{_pct(c['ci95'][0])}, {_pct(c['ci95'][1])}]"
                    if sequential:
                        cell += f" n={c['n']}"
                cells.append(cell)
            mean = float(np.mean([by_split[s][rate_key] for s in splits]))
            lines.append(f"| {task} | " + " | ".join(cells) + f" | {_pct(mean)} |")
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


# ---------------------------------------------------------------------------- reading runs back
@dataclass(frozen=True)
class Run:
    """A results bundle or a `vlagym eval` results.json, as outcomes keyed by (task, split, seed)."""

    path: str
    protocol: str
    """"NAME vVERSION" of a bundle; "vlagym eval results" for a results.json"""
    policy: str
    outcomes: dict[tuple[str, str, int], bool]
    versions: dict[str, Any]
    episodes: int
    """episodes per task (and split); with sequential stopping the most a cell could have"""
    sequential: bool = False
    """cells may hold fewer episodes: the run stopped them early (`SuiteRunConfig.sequential_width`)"""


def _split_of(env_kwargs: dict[str, Any]) -> str:
    """The split label of a plain evaluation: its split, plus an instruction set other than the split's own."""
    split = env_kwargs.get("split", "train")
    instructions = env_kwargs.get("instruction_split")
    implied = "heldout" if split == "heldout_paraphrase" else "train"
    return split if instructions in (None, implied) else f"{split}+{instructions}_instructions"


def read_run(path: str | os.PathLike, metric: str = "success") -> Run:
    """Load a bundle folder, a bundle.json, an eval folder or a results.json; `PairingError` if it is none of them."""
    if metric not in METRICS:
        raise PairingError(f"metric must be one of {list(METRICS)}, got {metric!r}")
    p = Path(path)
    if p.is_dir():
        found = [p / name for name in (BUNDLE_JSON, RESULTS_JSON) if (p / name).is_file()]
        if not found:
            raise PairingError(f"{str(path)!r} holds neither {BUNDLE_JSON} nor {RESULTS_JSON}")
        p = found[0]
    elif not p.is_file():
        raise PairingError(f"{str(path)!r} does not exist")
    try:
        doc = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise PairingError(f"cannot read {str(p)!r}: {e}") from e
    if not isinstance(doc, dict):
        raise PairingError(f"{str(p)!r} is not a results bundle or results.json")
    if doc.get("format") == BUNDLE_FORMAT:
        outcomes = {
            (task, split, int(e["seed"])): bool(e[metric])
            for task, by_split in doc["results"].items()
            for split, cell in by_split.items()
            for e in cell["episodes"]
        }
        label = f"{doc['protocol']['name']} v{doc['protocol']['version']}"
        versions = doc.get("fingerprint", {}).get("versions", {})
        sequential = bool(doc.get("sequential"))
        return Run(str(p), label, str(doc["policy"]), outcomes, versions, int(doc["episodes"]), sequential)
    if isinstance(doc.get("tasks"), dict) and "env_kwargs" in doc:
        split = _split_of(doc["env_kwargs"])
        outcomes = {
            (task, split, int(e["seed"])): bool(e[metric])
            for task, summary in doc["tasks"].items()
            for e in summary["episodes"]
        }
        versions = {"vlagym": doc.get("vlagym_version")}
        return Run(str(p), "vlagym eval results", str(doc.get("policy")), outcomes, versions, int(doc["episodes"]))
    raise PairingError(f"{str(p)!r} is neither a results bundle ({BUNDLE_JSON}) nor a vlagym eval {RESULTS_JSON}")


def check_comparable(a: Run, b: Run) -> None:
    """`PairingError` unless both runs follow the same protocol with the same --episodes (the episodes themselves
    are checked when pairing); with sequential stopping in either run, the episode counts may differ."""
    if a.protocol != b.protocol:
        raise PairingError(
            f"the runs follow different protocols: A is {a.protocol} ({a.path}), B is {b.protocol} ({b.path})"
        )
    if a.episodes != b.episodes and not (a.sequential or b.sequential):
        raise PairingError(
            f"A ran {a.episodes} episodes per task and split, B {b.episodes}: compare runs with the same --episodes"
        )


def paired_outcomes(a: Run, b: Run) -> tuple[dict[EpisodeKey, bool], dict[EpisodeKey, bool], str | None]:
    """The outcomes of A and B to pair (`compare_outcomes`), and a note when some episodes were left out.

    Without sequential stopping both runs' outcomes are returned whole: `compare_outcomes` then refuses any
    episode one run lacks. When either run stopped cells early, each task x split is paired on the seeds both
    ran, which for two runs of one protocol are the first seeds of the shorter cell; the longer cell's later
    episodes are left out, and the note says how many. The pairing stays exact (same seeds, same initial
    states), but the cell's n was chosen by one run's outcomes, so read a verdict on few episodes with care.
    A cell only one run holds is kept whole (`compare_outcomes` names it); common seeds that are not the first
    ones of both cells raise `PairingError`: such runs did not follow one seed order.
    """
    if not (a.sequential or b.sequential):
        return dict(a.outcomes), dict(b.outcomes), None
    cells_a, cells_b = _seeds_by_cell(a), _seeds_by_cell(b)
    keep_a, keep_b = dict(a.outcomes), dict(b.outcomes)
    for cell in cells_a.keys() & cells_b.keys():
        seeds_a, seeds_b = cells_a[cell], cells_b[cell]
        m = min(len(seeds_a), len(seeds_b))
        if seeds_a[:m] != seeds_b[:m]:
            raise PairingError(
                f"{cell[0]} / {cell[1]}: the runs' seeds differ within their first {m} episodes, so they cannot be "
                "paired on a common prefix (different protocols or seeds?)"
            )
        for seed in seeds_a[m:]:
            del keep_a[(*cell, seed)]
        for seed in seeds_b[m:]:
            del keep_b[(*cell, seed)]
    left_a, left_b = len(a.outcomes) - len(keep_a), len(b.outcomes) - len(keep_b)
    note = (
        f"sequential stopping: paired on the {len(set(keep_a) & set(keep_b))} episodes both runs hold "
        f"(per task x split, the first seeds of the shorter cell); left out {left_a} of A's {len(a.outcomes)} "
        f"and {left_b} of B's {len(b.outcomes)} episodes"
    )
    return keep_a, keep_b, note


def _seeds_by_cell(run: Run) -> dict[tuple[str, str], list[int]]:
    cells: dict[tuple[str, str], list[int]] = {}
    for task, split, seed in run.outcomes:
        cells.setdefault((task, split), []).append(seed)
    return {cell: sorted(seeds) for cell, seeds in cells.items()}


def version_differences(a: Run, b: Run) -> list[str]:
    """One "name: A vs B" line per software version that differs between the two runs."""
    return [
        f"{name}: {a.versions.get(name)} vs {b.versions.get(name)}"
        for name in sorted(set(a.versions) | set(b.versions))
        if a.versions.get(name) != b.versions.get(name)
    ]
