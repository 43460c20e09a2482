"""The `vlagym` command line: one subcommand per job, each driven by one config dataclass.

    vlagym list                          registered tasks
    vlagym video VLA-PickCup-v0          mp4 of the scripted expert solving a task
    vlagym demos --task VLA-PickCup-v0 --episodes 200 --num-envs 2 --out pick.hdf5
                                         scripted-expert demonstrations (HDF5)
    vlagym dataset info pick.hdf5        summary of a demo file
    vlagym dataset check pick.hdf5       layout check (exit code 1 when problems are found)
    vlagym eval --policy CKPT|expert --tasks VLA-PickCup-v0 --episodes 50 --num-envs 4 --seed 100000 --out eval/
                                         success rates with Wilson 95% intervals (results.json, results.md)
    vlagym eval --suite vlagym-pick --policy CKPT|expert --out bench/pick
                                         a whole benchmark protocol: one results bundle (bundle.json, bundle.md)
    vlagym eval --suite vlagym-pick --policy CKPT --language-controls --videos 3
                                         ... plus correct / empty / swapped instruction runs and failure videos
    vlagym eval --suite vlagym-10 --policy CKPT --sequential-width 0.2
                                         ... each task x split stops once its 95% interval is at most 20 points wide
    vlagym curve runs/rl --episodes 200 --seed 200000
                                         test curve of a run: every checkpoint (and its start) on the same seeds,
                                         success vs env steps and minutes, paired lifts (curve.json, .md, .png)
    vlagym report bench/pick             the bundle's self-contained HTML page (report.html)
    vlagym bench-suite list|show NAME    the benchmark protocols
    vlagym compare A B                   paired comparison of two bundles (A - B with a 95% CI, McNemar's test)
    vlagym replicates BASE RUN1 RUN2 ... replicate runs against one baseline: per run, and the mean difference
                                         with a t interval across the runs
    vlagym bench [--quick] [--sections env vector ...] [--out bench.json]
                                         speed benchmarks side by side: env vs raw physics, vector envs, dataset,
                                         BC training, policy latency, PPO (Markdown tables + JSON)
    vlagym bench --compare OLD.json NEW.json
                                         new / old per benchmark number of two saved runs
    vlagym train-bc --dataset pick.hdf5 --out runs/bc --steps 3000
                                         behaviour cloning of the VLA (checkpoints, TensorBoard logs, evals);
                                         under torchrun every rank runs it (DDP)
    vlagym train-rl --policy runs/bc/checkpoints/step_3000 --timesteps 20000 --out runs/rl
                                         PPO post-training of a BC checkpoint (stable-baselines3; chunk-level actions)
    vlagym train-rl --from-scratch --algo ppo|sac --task VLA-PickCup-v0 --out runs/sac
                                         RL baselines from scratch on state observations

User errors (unknown task, bad option value, unwritable output) print one line
on stderr and return exit code 2; they never show a traceback. A demo file that
`vlagym dataset` finds broken returns exit code 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

import vlagym
from vlagym.envs.base import CAMERAS, INSTRUCTION_SPLITS, OBS_MODES
from vlagym.envs.catalog import task_rows
from vlagym.envs.splits import SPLITS
from vlagym.eval.curve import CURVE_JSON, CURVE_MD, CURVE_PNG, CurveConfig, CurveError, format_curve, run_curve
from vlagym.eval.evaluate import EvalConfig, EvalError, evaluate, format_results
from vlagym.eval.quickstart import QuickstartConfig
from vlagym.eval.report import REPORT_HTML, ReportError, load_bundle, write_report
from vlagym.eval.stats import ALPHA, PairingError, compare_outcomes, replicate_mean
from vlagym.eval.suite_run import (
    BUNDLE_JSON,
    BUNDLE_MD,
    HEATMAP_PNG,
    METRICS,
    SEQUENTIAL_MIN_EPISODES,
    SuiteRunConfig,
    check_comparable,
    format_bundle,
    paired_outcomes,
    read_run,
    run_suite,
    version_differences,
)
from vlagym.eval.suites import SuiteError, format_protocol, get_suite, list_suites
from vlagym.io import atomic_write_text, temp_path
from vlagym.perf import results as bench_results
from vlagym.perf import table as bench_table
from vlagym.perf.config import SECTIONS as BENCH_SECTIONS
from vlagym.perf.config import BenchConfig, BenchError
from vlagym.train.demos import (
    COMPRESSIONS,
    CONFIG_SUFFIX,
    VECTORIZATION_MODES,
    DemoConfig,
    DemoError,
    collect_demos,
)
from vlagym.train.validate import DatasetError, check_dataset, dataset_info, format_info

if TYPE_CHECKING:  # torch and the policy load only when train-bc runs: `vlagym list` stays quick
    from vlagym.rl.filtered_bc import FilteredBCConfig
    from vlagym.rl.ppo import RLConfig
    from vlagym.train.bc import BCConfig

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # as a shell reports a process killed by SIGPIPE (128 + 13)


class UserError(Exception):
    """Bad input from the user: reported as one line on stderr, exit code 2."""


# ---------------------------------------------------------------------------- helpers
def check_task(task: str) -> str:
    """The registered vlagym id for `task` (a leading "vlagym:" is accepted), else a `UserError`."""
    env_id = task.removeprefix("vlagym:")
    if env_id not in vlagym.TASKS:
        hint = difflib.get_close_matches(env_id, list(vlagym.TASKS), n=1)
        did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise UserError(f"unknown task {task!r}{did_you_mean}; known tasks: {', '.join(sorted(vlagym.TASKS))}")
    return env_id


def _choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if value not in choices:
        raise UserError(f"{name} must be one of {list(choices)}, got {value!r}")


# ---------------------------------------------------------------------------- vlagym list
@dataclass
class ListConfig:
    """Options of `vlagym list`."""

    markdown: bool = False
    """print a Markdown table instead of aligned plain text"""


def format_table(rows: list[dict[str, str]], markdown: bool = False) -> str:
    """Rows of equal keys as an aligned text table (or a Markdown table)."""
    if not rows:
        return "(no tasks registered)"
    keys = list(rows[0])
    widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in keys}
    if markdown:
        lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
        lines += ["| " + " | ".join(r[k] for k in keys) + " |" for r in rows]
    else:
        lines = ["  ".join(k.upper().ljust(widths[k]) for k in keys).rstrip()]
        lines += ["  ".join(r[k].ljust(widths[k]) for k in keys).rstrip() for r in rows]
    return "\n".join(lines)


def run_list(cfg: ListConfig) -> int:
    print(format_table(task_rows(), markdown=cfg.markdown))
    return EXIT_OK


# ---------------------------------------------------------------------------- vlagym video
@dataclass
class VideoConfig:
    """Options of `vlagym video`: the scripted expert on a task, recorded as one mp4."""

    task: str
    """registered vlagym env id, e.g. VLA-PickCup-v0"""
    episodes: int = 3
    """number of episodes, recorded back to back"""
    seed: int = 0
    """episode i is reset with seed + i"""
    out: str = ""
    """output mp4 path; empty means videos/<task>.mp4"""
    camera: str = "front"
    """camera to record (the env's image observation of that camera)"""
    size: int = 256
    """frame height and width in pixels (even: H.264 needs it)"""
    fps: int = 20
    """frames per second of the video; 20 = real time at the default control rate"""
    split: str = "train"
    """generalization split the episodes come from (see the README's split table)"""
    instruction_split: str | None = None
    """instruction paraphrase set; by default the one the split implies"""
    hold: int = 10
    """frames the last image of each episode is repeated, so its outcome is visible"""

    def __post_init__(self) -> None:
        self.task = check_task(self.task)
        if not self.out:
            self.out = str(Path("videos") / f"{self.task}.mp4")
        if Path(self.out).suffix.lower() != ".mp4":
            raise UserError(f"--out must end in .mp4, got {self.out!r}")
        if self.episodes < 1:
            raise UserError(f"--episodes must be at least 1, got {self.episodes}")
        if self.seed < 0:
            raise UserError(f"--seed must be non-negative, got {self.seed}")
        if not (16 <= self.size <= 2048 and self.size % 2 == 0):
            raise UserError(f"--size must be an even number between 16 and 2048, got {self.size}")
        if not (1 <= self.fps <= 240):
            raise UserError(f"--fps must be between 1 and 240, got {self.fps}")
        if self.hold < 0:
            raise UserError(f"--hold must be non-negative, got {self.hold}")
        _choice("--camera", self.camera, CAMERAS)
        _choice("--split", self.split, SPLITS)
        if self.instruction_split is not None:
            _choice("--instruction-split", self.instruction_split, INSTRUCTION_SPLITS)
            if self.split == "heldout_paraphrase" and self.instruction_split != "heldout":
                raise UserError("--split heldout_paraphrase uses the heldout templates; drop --instruction-split")


def _record_episode(env: gym.Env, expert, seed: int, camera: str, writer, hold: int) -> dict[str, Any]:
    """Run the expert for one episode, appending every frame to `writer`; returns the episode summary."""
    obs, info = env.reset(seed=seed)
    expert.reset()
    writer.append_data(obs["images"][camera])
    steps, done = 0, False
    while not done:
        obs, _, terminated, truncated, info = env.step(expert(obs))
        writer.append_data(obs["images"][camera])
        steps += 1
        done = terminated or truncated
    for _ in range(hold):
        writer.append_data(obs["images"][camera])
    return {
        "seed": seed,
        "instruction": info["instruction"],
        "success": bool(info["success"]),
        "steps": steps,
        "sim_unstable": bool(info.get("sim_unstable", False)),
    }


def run_video(cfg: VideoConfig) -> int:
    import imageio.v2 as imageio  # imported here: `vlagym list` should not pay for ffmpeg
    from tqdm import tqdm

    out = Path(cfg.out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the output folder {str(out.parent)!r}: {e.strerror or e}") from e
    if out.is_dir():
        raise UserError(f"--out {cfg.out!r} is a folder; give a file path ending in .mp4")
    if not os.access(out.parent, os.W_OK):
        raise UserError(f"cannot write to the output folder {str(out.parent)!r}")
    tmp = temp_path(out)

    # The camera is read from the image observation, so any camera the env knows can be recorded.
    env = gym.make(
        cfg.task,
        obs_mode="rgb",
        cameras=(cfg.camera,),
        image_size=cfg.size,
        split=cfg.split,
        instruction_split=cfg.instruction_split,
    )
    episodes: list[dict[str, Any]] = []
    frames = 0
    try:
        expert = vlagym.make_expert(env)
        # macro_block_size=2: keep the exact size (libx264/yuv420p needs even sides, enforced by the config).
        writer = imageio.get_writer(
            tmp, format="FFMPEG", mode="I", fps=cfg.fps, codec="libx264", macro_block_size=2, ffmpeg_log_level="error"
        )
        with writer:
            for i in tqdm(range(cfg.episodes), desc=f"{cfg.task} episodes", unit="ep"):
                ep = _record_episode(env, expert, cfg.seed + i, cfg.camera, writer, cfg.hold)
                frames += ep["steps"] + 1 + cfg.hold
                episodes.append(ep)
                tqdm.write(
                    f"episode {i} (seed {ep['seed']}): {'success' if ep['success'] else 'failure'} "
                    f"in {ep['steps']} steps: {ep['instruction']!r}"
                )
        os.replace(tmp, out)
    finally:
        env.close()
        tmp.unlink(missing_ok=True)

    record = {
        "config": dataclasses.asdict(cfg),
        "vlagym_version": vlagym.__version__,
        "frames": frames,
        "successes": sum(ep["success"] for ep in episodes),
        "episodes": episodes,
    }
    meta = out.with_name(out.name + ".json")
    atomic_write_text(meta, json.dumps(record, indent=2) + "\n")
    print(f"wrote {out} ({frames} frames, {record['successes']}/{len(episodes)} successful); config: {meta}")
    return EXIT_OK


# ---------------------------------------------------------------------------- vlagym demos
def demo_config(args: argparse.Namespace) -> DemoConfig:
    """The `DemoConfig` of `vlagym demos` arguments (`--split` and `--instruction-split` become env kwargs)."""
    task = check_task(args.task)
    _choice("--split", args.split, SPLITS)
    env_kwargs: dict[str, Any] = {"split": args.split}
    if args.instruction_split is not None:
        _choice("--instruction-split", args.instruction_split, INSTRUCTION_SPLITS)
        env_kwargs["instruction_split"] = args.instruction_split
    try:
        return DemoConfig(
            task=task,
            episodes=args.episodes,
            num_envs=args.num_envs,
            out=args.out,
            seed=args.seed,
            obs_mode=args.obs_mode,
            image_size=args.image_size,
            cameras=tuple(args.cameras),
            env_kwargs=env_kwargs,
            keep_failures=args.keep_failures,
            action_noise=args.action_noise,
            resume=args.resume,
            overwrite=args.overwrite,
            compression=args.compression,
            vectorization=args.vectorization,
            progress=not args.no_progress,
        )
    except DemoError as e:
        raise UserError(str(e)) from e


def run_demos(cfg: DemoConfig) -> int:
    try:
        summary = collect_demos(cfg)
    except DemoError as e:
        raise UserError(str(e)) from e
    dropped = "kept" if cfg.keep_failures else "dropped"
    print(
        f"wrote {summary.path}: {summary.demos} demos, {summary.steps} steps, {summary.file_bytes / 1e6:.1f} MB; "
        f"this run: {summary.episodes} episodes from episode {summary.first_episode}, {summary.successes} successful, "
        f"{summary.failures} failed ({dropped}), {summary.seconds:.1f} s; config: {summary.path}{CONFIG_SUFFIX}"
    )
    return EXIT_OK


# ---------------------------------------------------------------------------- vlagym dataset
@dataclass
class DatasetConfig:
    """Options of `vlagym dataset info|check FILE`."""

    action: str
    """"info" (a readable summary) or "check" (every departure from the demo layout)"""
    file: str
    """the demo file (HDF5)"""
    json: bool = False
    """info: print the summary as JSON"""

    def __post_init__(self) -> None:
        _choice("action", self.action, ("info", "check"))
        path = Path(self.file)
        if not path.exists():
            raise UserError(f"{self.file}: no such file")
        if path.is_dir():
            raise UserError(f"{self.file} is a folder, not a demo file")


def run_dataset(cfg: DatasetConfig) -> int:
    if cfg.action == "check":
        problems = check_dataset(cfg.file)
        if problems:
            print(f"{cfg.file}: {len(problems)} problem(s)")
            for problem in problems:
                print(f"  - {problem}")
            return EXIT_PROBLEMS
        print(f"{cfg.file}: ok")
        return EXIT_OK
    try:
        info = dataset_info(cfg.file)
    except DatasetError as e:
        print(f"vlagym dataset info: error: {e}", file=sys.stderr)
        return EXIT_PROBLEMS
    print(json.dumps(info, indent=2) if cfg.json else format_info(info))
    return EXIT_OK


# ---------------------------------------------------------------------------- vlagym eval
def suite_run_config(args: argparse.Namespace) -> SuiteRunConfig:
    """The `SuiteRunConfig` of `vlagym eval --suite NAME`: the protocol fixes tasks, seeds and env settings."""
    fixed = {
        "--tasks": args.tasks is not None,
        "--seed": args.seed is not None,
        "--env-kwargs": args.env_kwargs != "{}",
        "--vectorization": args.vectorization != "sync",
        "--image-size": args.image_size is not None,
        "--cameras": args.cameras is not None,
        "--n-action-steps": args.n_action_steps is not None,
        "--temporal-ensemble": args.temporal_ensemble,
    }
    given = [name for name, used in fixed.items() if used]
    if given:
        raise UserError(f"--suite fixes the tasks, seeds, env settings and chunk execution; drop {', '.join(given)}")
    if args.sequential_min_episodes is not None and args.sequential_width is None:
        raise UserError("--sequential-min-episodes needs --sequential-width W (sequential stopping is off without it)")
    try:
        return SuiteRunConfig(
            suite=args.suite,
            policy=args.policy,
            out=args.out,
            episodes=args.episodes,
            num_envs=args.num_envs,
            progress=not args.no_progress,
            language_controls=args.language_controls,
            videos=args.videos,
            sequential_width=args.sequential_width,
            sequential_min_episodes=(
                SEQUENTIAL_MIN_EPISODES if args.sequential_min_episodes is None else args.sequential_min_episodes
            ),
        )
    except (SuiteError, EvalError) as e:
        raise UserError(str(e)) from e


def eval_config(args: argparse.Namespace) -> EvalConfig | SuiteRunConfig:
    """The `EvalConfig` of `vlagym eval` arguments (`--env-kwargs` is a JSON object); with `--suite`, a suite run."""
    if args.suite is not None:
        return suite_run_config(args)
    if args.language_controls:
        raise UserError("--language-controls runs with a benchmark protocol: add --suite NAME")
    if args.sequential_width is not None or args.sequential_min_episodes is not None:
        flag = "--sequential-width" if args.sequential_width is not None else "--sequential-min-episodes"
        raise UserError(f"{flag} runs with a benchmark protocol: add --suite NAME")
    d = EvalConfig.__dataclass_fields__
    tasks = [check_task(t) for t in args.tasks or []]
    env_kwargs = _env_kwargs_arg(args.env_kwargs)
    try:
        return EvalConfig(
            policy=args.policy,
            tasks=tasks,
            episodes=d["episodes"].default if args.episodes is None else args.episodes,
            num_envs=args.num_envs,
            seed=d["seed"].default if args.seed is None else args.seed,
            out=args.out,
            env_kwargs=env_kwargs,
            videos=args.videos,
            vectorization=args.vectorization,
            image_size=args.image_size,
            cameras=args.cameras,
            n_action_steps=args.n_action_steps,
            temporal_ensemble=args.temporal_ensemble,
            progress=not args.no_progress,
        )
    except EvalError as e:
        raise UserError(str(e)) from e


def run_eval(cfg: EvalConfig) -> int:
    try:
        results = evaluate(cfg)
    except EvalError as e:
        raise UserError(str(e)) from e
    except (TypeError, ValueError) as e:  # env kwargs the task rejects (unknown name, bad value)
        if not cfg.env_kwargs:
            raise
        raise UserError(f"the env rejected --env-kwargs {json.dumps(cfg.env_kwargs)}: {e}") from e
    print(format_results(results))
    print(f"results: {Path(cfg.out) / 'results.json'}, {Path(cfg.out) / 'results.md'} (folder {cfg.out})")
    return EXIT_OK


# ---------------------------------------------------------------------------- vlagym curve
def curve_config(args: argparse.Namespace) -> CurveConfig:
    """The `CurveConfig` of `vlagym curve` arguments."""
    if args.start is not None and args.no_start:
        raise UserError("give --start or --no-start, not both")
    if args.n_action_steps is not None and args.temporal_ensemble:
        raise UserError("give --n-action-steps or --temporal-ensemble, not both")
    try:
        return CurveConfig(
            run=args.run,
            out=args.out,
            episodes=args.episodes,
            num_envs=args.num_envs,
            seed=args.seed,
            env_kwargs=_env_kwargs_arg(args.env_kwargs),
            every=args.every,
            start=args.start,
            include_start=not args.no_start,
            vectorization=args.vectorization,
            n_action_steps=args.n_action_steps,
            temporal_ensemble=args.temporal_ensemble,
            progress=not args.no_progress,
        )
    except CurveError as e:
        raise UserError(str(e)) from e


def run_curve_command(cfg: CurveConfig) -> int:
    try:
        curve = run_curve(cfg)
    except (CurveError, EvalError) as e:
        raise UserError(str(e)) from e
    except (TypeError, ValueError) as e:  # env kwargs the task rejects (unknown name, bad value)
        if not cfg.env_kwargs:
            raise
        raise UserError(f"the env rejected --env-kwargs {json.dumps(cfg.env_kwargs)}: {e}") from e
    print(format_curve(curve))
    out = cfg.out_dir
    print(f"curve: {out / CURVE_JSON}, {out / CURVE_MD}, {out / CURVE_PNG} (one eval folder per point in {out})")
    return EXIT_OK


def run_suite_eval(cfg: SuiteRunConfig) -> int:
    try:
        bundle = run_suite(cfg)
    except (EvalError, SuiteError) as e:
        raise UserError(str(e)) from e
    print(format_bundle(bundle))
    out = Path(cfg.out)
    print(f"bundle: {out / BUNDLE_JSON}, {out / BUNDLE_MD}, {out / HEATMAP_PNG}, report {out / REPORT_HTML}")
    return EXIT_OK


# ---------------------------------------------------------------------------- vlagym report
@dataclass
class ReportConfig:
    """Options of `vlagym report BUNDLE_DIR`: (re)write the bundle's self-contained HTML page."""

    bundle: str
    """a bundle folder (bundle.json inside) or a bundle.json"""


def run_report(cfg: ReportConfig) -> int:
    try:
        bundle, folder = load_bundle(cfg.bundle)
        path = write_report(bundle, folder)
    except ReportError as e:
        raise UserError(str(e)) from e
    except OSError as e:
        raise UserError(f"cannot write the report into {str(cfg.bundle)!r}: {e.strerror or e}") from e
    except (KeyError, TypeError) as e:
        raise UserError(f"{str(cfg.bundle)!r} is an incomplete results bundle (missing {e})") from e
    print(f"report: {path}")
    return EXIT_OK


# ---------------------------------------------------------------------------- vlagym bench-suite
@dataclass
class BenchSuiteConfig:
    """Options of `vlagym bench-suite list|show NAME`."""

    action: str
    """"list" (every suite) or "show" (one protocol in full)"""
    name: str = ""
    """show: the suite"""
    json: bool = False
    """show: print the protocol as JSON"""

    def __post_init__(self) -> None:
        _choice("action", self.action, ("list", "show"))
        if self.action == "show":
            try:
                get_suite(self.name)
            except SuiteError as e:
                raise UserError(str(e)) from e


def run_bench_suite(cfg: BenchSuiteConfig) -> int:
    if cfg.action == "show":
        protocol = get_suite(cfg.name)
        print(json.dumps(protocol.to_dict(), indent=2) if cfg.json else format_protocol(protocol))
        return EXIT_OK
    rows = []
    for name in list_suites():
        p = get_suite(name)
        rows.append(
            {
                "suite": p.name,
                "version": p.version,
                "tasks": str(len(p.tasks)),
                "splits": str(len(p.splits)),
                "episodes": f"{p.episodes} x {len(p.tasks) * len(p.splits)}",
                "description": p.description,
            }
        )
    print(format_table(rows))
    return EXIT_OK


# ---------------------------------------------------------------------------- vlagym compare
@dataclass
class CompareConfig:
    """Options of `vlagym compare A B`: paired comparison of two runs of the same protocol."""

    a: str
    """run A: a bundle folder or bundle.json (or an eval folder / results.json)"""
    b: str
    """run B, same protocol and seeds as A"""
    metric: str = "success"
    """the outcome compared: success (at any step) or success_at_end"""
    alpha: float = ALPHA
    """significance level of McNemar's exact test"""
    json: bool = False
    """print the comparison as JSON"""

    def __post_init__(self) -> None:
        _choice("--metric", self.metric, METRICS)
        if not 0 < self.alpha < 1:
            raise UserError(f"--alpha must be between 0 and 1, got {self.alpha}")


def format_comparison(tests: dict[str, Any], alpha: float) -> str:
    """The Markdown table of `compare_outcomes`: one row per task, then "all"."""
    lines = [
        "| task | n | A | B | A - B | A - B, 95% CI | only A | only B | McNemar p | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for task, t in tests.items():
        name = f"**{task}**" if task == "all" else task
        lines.append(
            f"| {name} | {t.n} | {t.a_rate:.1%} | {t.b_rate:.1%} | {100 * t.difference:+.1f} pts | "
            f"[{100 * t.difference_ci95[0]:+.1f}, {100 * t.difference_ci95[1]:+.1f}] | {t.a_only} | "
            f"{t.b_only} | {t.p_value:.3g} | {t.verdict} |"
        )
    overall = tests["all"]
    lines += ["", f"verdict over all {overall.n} paired episodes (alpha {alpha:g}): {overall.verdict}"]
    return "\n".join(lines)


def run_compare(cfg: CompareConfig) -> int:
    try:
        a, b = read_run(cfg.a, cfg.metric), read_run(cfg.b, cfg.metric)
        check_comparable(a, b)
        outcomes_a, outcomes_b, paired_note = paired_outcomes(a, b)
        tests = compare_outcomes(outcomes_a, outcomes_b, cfg.alpha)
    except PairingError as e:
        raise UserError(str(e)) from e
    notes = version_differences(a, b)
    if cfg.json:
        doc = {
            "a": {"path": a.path, "policy": a.policy},
            "b": {"path": b.path, "policy": b.policy},
            "protocol": a.protocol,
            "metric": cfg.metric,
            "alpha": cfg.alpha,
            "tests": {task: dataclasses.asdict(t) for task, t in tests.items()},
            "version_differences": notes,
            "pairing_note": paired_note,
        }
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    print(f"A: {a.path} (policy {a.policy})")
    print(f"B: {b.path} (policy {b.policy})")
    print(
        f"protocol: {a.protocol}; metric: {cfg.metric}; McNemar's exact test on paired episodes; "
        "A - B interval: Bonett-Price, paired"
    )
    if paired_note:
        print(f"note: {paired_note}")
    print()
    print(format_comparison(tests, cfg.alpha))
    if notes:
        print(f"note: the runs used different software versions: {'; '.join(notes)}")
    return EXIT_OK


# ---------------------------------------------------------------------------- vlagym replicates
@dataclass
class ReplicatesConfig:
    """Options of `vlagym replicates BASELINE RUN [RUN ...]`: replicate runs of one recipe against one baseline."""

    baseline: str
    """the baseline run (e.g. the BC checkpoint's evaluation): bundle or eval folder"""
    runs: list[str]
    """the replicate runs (e.g. one post-training seed each), same protocol and seeds as the baseline"""
    metric: str = "success"
    """the outcome compared: success (at any step) or success_at_end"""
    alpha: float = ALPHA
    """significance level of the per-run tests and of the interval across runs"""
    json: bool = False
    """print the result as JSON"""

    def __post_init__(self) -> None:
        _choice("--metric", self.metric, METRICS)
        if not 0 < self.alpha < 1:
            raise UserError(f"--alpha must be between 0 and 1, got {self.alpha}")
        if not self.runs:
            raise UserError("give at least one run beside the baseline")
        if len(set(self.runs)) != len(self.runs):
            raise UserError(f"a run is given twice: {self.runs}")


def replicate_rows(cfg: ReplicatesConfig) -> tuple[Any, list[tuple[Any, Any]]]:
    """The baseline and, per run, (run, its paired test over all episodes against the baseline)."""
    base = read_run(cfg.baseline, cfg.metric)
    rows = []
    for path in cfg.runs:
        try:
            run = read_run(path, cfg.metric)
            check_comparable(run, base)
            outcomes_run, outcomes_base, note = paired_outcomes(run, base)
            if note:
                raise PairingError(f"{note}; replicates need every run on the baseline's episodes")
            rows.append((run, compare_outcomes(outcomes_run, outcomes_base, cfg.alpha)["all"]))
        except PairingError as e:  # A is the run, B the baseline
            raise PairingError(f"{path} against the baseline {cfg.baseline}: {e}") from e
    return base, rows


def format_replicates(base: Any, rows: list[tuple[Any, Any]], alpha: float) -> str:
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


def run_replicates(cfg: ReplicatesConfig) -> int:
    try:
        base, rows = replicate_rows(cfg)
    except PairingError as e:
        raise UserError(str(e)) from e
    if cfg.json:
        diffs = [t.difference for _, t in rows]
        doc = {
            "baseline": {"path": base.path, "policy": base.policy},
            "protocol": base.protocol,
            "metric": cfg.metric,
            "alpha": cfg.alpha,
            "runs": [{"path": run.path, "policy": run.policy, "test": dataclasses.asdict(t)} for run, t in rows],
            "mean_difference": _no_nan(dataclasses.asdict(replicate_mean(diffs, cfg.alpha))),
            "mean_success": _no_nan(dataclasses.asdict(replicate_mean([t.a_rate for _, t in rows], cfg.alpha))),
        }
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    print(f"baseline: {base.path} (policy {base.policy}); protocol: {base.protocol}; metric: {cfg.metric}")
    print("per run: paired on the same episodes (Bonett-Price interval, McNemar's exact test)")
    print()
    print(format_replicates(base, rows, cfg.alpha))
    return EXIT_OK


def _no_nan(d: dict[str, Any]) -> dict[str, Any]:
    """`d` with NaN numbers (and pairs of them) as null: JSON has no NaN (one run has no spread)."""

    def clean(v: Any) -> Any:
        if isinstance(v, (tuple, list)):
            return [clean(x) for x in v]
        return None if isinstance(v, float) and v != v else v

    return {k: clean(v) for k, v in d.items()}


# ---------------------------------------------------------------------------- vlagym bench
@dataclass
class BenchCompareConfig:
    """Options of `vlagym bench --compare OLD NEW`: the numbers of two saved runs side by side."""

    old: str
    """a `vlagym bench` JSON file"""
    new: str
    """another one, usually of a newer version on the same machine"""


def bench_config(args: argparse.Namespace) -> BenchConfig | BenchCompareConfig:
    if args.compare:
        return BenchCompareConfig(*args.compare)
    try:
        return BenchConfig(
            sections=args.sections or list(BENCH_SECTIONS),
            tasks=args.tasks,
            quick=args.quick,
            out=args.out or None,
            threads=args.threads,
            image_size=args.image_size,
            device=args.device,
            demos=args.demos,
            policy=args.policy,
            pin=not args.no_pin,
            repeats=args.repeats,
        )
    except BenchError as e:
        raise UserError(str(e)) from e


def run_bench(cfg: BenchConfig) -> int:
    from vlagym.perf.run import run_bench as run

    def show(table: bench_table.Table) -> None:
        print(bench_table.format_table(table), end="\n\n", flush=True)

    doc = run(cfg, on_section=show)
    print(f"measured on: {bench_results.format_header(doc)}; {doc['wall_s']:.0f} s in all")
    if cfg.out:
        print(f"results: {cfg.out} (compare two runs: vlagym bench --compare OLD.json NEW.json)")
    return EXIT_OK


def run_bench_compare(cfg: BenchCompareConfig) -> int:
    try:
        old, new = bench_results.read_run(cfg.old), bench_results.read_run(cfg.new)
    except BenchError as e:
        raise UserError(str(e)) from e
    print(f"old: {cfg.old} ({old['created']}); new: {cfg.new} ({new['created']})")
    print()
    print(bench_results.format_comparison(old, new))
    return EXIT_OK


# ---------------------------------------------------------------------------- vlagym train-bc
def train_bc_config(args: argparse.Namespace) -> BCConfig:
    """The `BCConfig` of `vlagym train-bc` arguments; the policy reads the demos' image size and cameras."""
    from vlagym.policies.config import VLAConfig
    from vlagym.train.bc import BCConfig, demo_env

    missing = [p for p in args.dataset if not Path(p).is_file()]
    if missing:
        raise UserError(f"--dataset file {missing[0]!r} does not exist")
    try:
        _, env_kwargs = demo_env(args.dataset[0])
    except (OSError, KeyError, ValueError) as e:
        raise UserError(f"--dataset {args.dataset[0]!r} is not a vlagym demo file: {e}") from e
    policy: dict[str, Any] = {"head": args.head}
    image_size = args.image_size if args.image_size is not None else env_kwargs.get("image_size")
    if image_size is not None:
        policy["image_size"] = image_size
    if "cameras" in env_kwargs:
        policy["cameras"] = list(env_kwargs["cameras"])
    if args.chunk_size is not None:
        policy["chunk_size"] = args.chunk_size
    try:
        return BCConfig(
            dataset=list(args.dataset),
            out=args.out,
            policy=VLAConfig.from_dict(policy),
            steps=args.steps,
            batch_size=args.batch_size,
            lr=args.lr,
            eval_every=args.eval_every,
            eval_episodes=args.eval_episodes,
            checkpoint_every=args.checkpoint_every,
            seed=args.seed,
            num_workers=args.num_workers,
            augment=not args.no_augment,
            device=args.device,
            resume=args.resume,
            progress=not args.no_progress,
        )
    except ValueError as e:
        raise UserError(str(e)) from e


def run_train_bc(cfg: BCConfig) -> int:
    from vlagym.train.bc import train_bc

    try:
        from vlagym.eval.evaluate import checkpoint_success_rate

        result = train_bc(cfg, evaluator=checkpoint_success_rate)
    except ValueError as e:  # data the trainer rejects (bad demo file, batch larger than the data, no CUDA)
        raise UserError(str(e)) from e
    rate = result["success_rate"]
    print(f"trained {result['step']} steps, final loss {result['loss']:.4f}")
    if rate is not None:
        print(f"success rate at the last evaluation: {100 * rate:.1f}%")
    print(f"checkpoint: {result['checkpoint']}")
    print(f"logs: {Path(cfg.out) / 'tb'} (tensorboard --logdir {Path(cfg.out) / 'tb'})")
    return EXIT_OK


# ---------------------------------------------------------------------------- vlagym train-rl
# argparse dest -> RLConfig field, for the options whose names differ
_RL_RENAMES = {"timesteps": "total_timesteps"}
_RL_OPTIONS = (
    "policy", "algo", "task", "out", "timesteps", "n_envs", "vectorization", "reward", "max_episode_steps",
    "chunk_size", "n_steps", "batch_size", "n_epochs", "lr", "critic_lr", "gamma", "gae_lambda", "clip_range",
    "ent_coef", "target_kl", "log_std_init", "bc_coef", "critic_warmup_steps", "buffer_size", "learning_starts",
    "seed", "eval_every", "eval_episodes", "eval_num_envs", "checkpoint_every", "device", "torch_threads",
    "max_minutes", "reward_scale", "actor_layers", "log_std_lr", "eval_seed",
)  # fmt: skip


# the options of --algo filtered-bc (FilteredBCConfig fields); the other options of train-rl are PPO's and SAC's
_FBC_OPTIONS = (
    "policy", "algo", "task", "out", "max_minutes", "n_envs", "vectorization", "batch_size", "lr", "seed",
    "eval_every", "eval_episodes", "eval_num_envs", "device", "torch_threads", "rounds", "episodes_per_round",
    "updates_per_round", "noise_std", "demos", "demo_fraction", "buffer_rounds", "ema", "lr_schedule",
    "group_size", "weighting", "noise_hold", "freeze_encoders", "advantage_beta", "advantage_max_weight",
    "critic_rounds", "critic_updates", "gamma", "max_gripper_reopens", "max_close_distance",
    "eval_seed", "collect_seed",
    "retry_noise_std", "retry_noise_hold", "max_episode_steps", "augment", "collect_env_kwargs",
    "n_action_steps", "hindsight", "hindsight_make_room", "close_delays",
    "preference_weight", "preference_beta", "preference_pairs", "preference_chunks", "preference_rounds",
)  # fmt: skip
_FBC_ONLY = (
    "rounds",
    "episodes_per_round",
    "updates_per_round",
    "noise_std",
    "noise_hold",
    "freeze_encoders",
    "demos",
    "demo_fraction",
    "buffer_rounds",
    "lr_schedule",
    "group_size",
    "weighting",
    "advantage_beta",
    "advantage_max_weight",
    "critic_rounds",
    "critic_updates",
    "max_gripper_reopens",
    "max_close_distance",
    "collect_seed",
    "retry_noise_std",
    "retry_noise_hold",
    "augment",
    "collect_env_kwargs",
    "n_action_steps",
    "hindsight",
    "hindsight_make_room",
    "close_delays",
    "preference_weight",
    "preference_beta",
    "preference_pairs",
    "preference_chunks",
    "preference_rounds",
)


def _option(name: str) -> str:
    """The command-line flag of an option's config name."""
    return {"augment": "--no-augment"}.get(name, "--" + name.replace("_", "-"))


def _env_kwargs_arg(text: str, flag: str = "--env-kwargs") -> dict[str, Any]:
    try:
        env_kwargs = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{flag} is not valid JSON ({e.msg} at char {e.pos}): {text!r}") from e
    if not isinstance(env_kwargs, dict):
        raise UserError(f"{flag} must be a JSON object, got {text!r}")
    return env_kwargs


def filtered_bc_config(args: argparse.Namespace) -> FilteredBCConfig:
    """The `FilteredBCConfig` of `vlagym train-rl --algo filtered-bc` arguments."""
    from vlagym.rl.filtered_bc import FilteredBCConfig

    if args.from_scratch or args.policy is None:
        raise UserError("--algo filtered-bc post-trains a BC checkpoint: give --policy DIR (not --from-scratch)")
    foreign = [name for name in _RL_OPTIONS if name not in _FBC_OPTIONS and getattr(args, name) is not None]
    foreign += ["no_critic_state"] if args.no_critic_state else []
    if foreign:
        raise UserError(f"{', '.join(map(_option, foreign))} do(es) not apply to --algo filtered-bc")
    kwargs: dict[str, Any] = {name: getattr(args, name) for name in _FBC_OPTIONS if getattr(args, name) is not None}
    if "task" in kwargs:
        kwargs["task"] = check_task(kwargs["task"])
    if "collect_env_kwargs" in kwargs:
        kwargs["collect_env_kwargs"] = _env_kwargs_arg(kwargs["collect_env_kwargs"], "--collect-env-kwargs")
    try:
        return FilteredBCConfig(
            **kwargs, env_kwargs=_env_kwargs_arg(args.env_kwargs), resume=args.resume, progress=not args.no_progress
        )
    except ValueError as e:
        raise UserError(str(e)) from e


def train_rl_config(args: argparse.Namespace) -> RLConfig | FilteredBCConfig:
    """The config of `vlagym train-rl` arguments (`FilteredBCConfig` for --algo filtered-bc, else `RLConfig`);
    options left out keep the config's defaults."""
    from vlagym.rl.ppo import RLConfig

    if args.algo == "filtered-bc":
        return filtered_bc_config(args)
    if args.policy is None and not args.from_scratch:
        raise UserError("give a BC checkpoint (--policy DIR) or --from-scratch --task TASK")
    foreign = [name for name in _FBC_ONLY if getattr(args, name) is not None]
    if foreign:
        raise UserError(f"{', '.join(map(_option, foreign))} apply only to --algo filtered-bc")
    kwargs: dict[str, Any] = {
        _RL_RENAMES.get(name, name): getattr(args, name) for name in _RL_OPTIONS if getattr(args, name) is not None
    }
    if "task" in kwargs:
        kwargs["task"] = check_task(kwargs["task"])
    env_kwargs = _env_kwargs_arg(args.env_kwargs)
    try:
        return RLConfig(
            **kwargs,
            from_scratch=args.from_scratch,
            env_kwargs=env_kwargs,
            critic_state=not args.no_critic_state,
            resume=args.resume,
            progress=not args.no_progress,
        )
    except ValueError as e:
        raise UserError(str(e)) from e


def run_train_rl(cfg: RLConfig | FilteredBCConfig) -> int:
    from vlagym.rl.filtered_bc import FilteredBCConfig, train_filtered_bc
    from vlagym.rl.ppo import CONFIG_NAME, CURVE_NAME, train_rl

    filtered = isinstance(cfg, FilteredBCConfig)
    try:
        result = train_filtered_bc(cfg) if filtered else train_rl(cfg)
    except (TypeError, ValueError) as e:  # env kwargs the task rejects, a resume from other BC weights, no CUDA
        if isinstance(e, TypeError) and not (cfg.env_kwargs or getattr(cfg, "collect_env_kwargs", None)):
            raise
        raise UserError(str(e)) from e
    out = Path(cfg.out)
    if filtered:
        print(f"trained {result['rounds']} rounds: {result['updates']} updates, {result['env_steps']} env steps")
    else:
        print(f"trained {result['timesteps']} timesteps ({result['env_steps']} env steps this run and before)")
    if result["success_rate"] is not None:
        print(f"success rate at the last evaluation: {100 * result['success_rate']:.1f}%")
        print(f"learning curve: {out / 'eval' / CURVE_NAME}")
    print(f"checkpoint: {result['checkpoint']}")
    print(f"config: {out / CONFIG_NAME}; logs: {out / 'tb'} (tensorboard --logdir {out / 'tb'})")
    return EXIT_OK


# ---------------------------------------------------------------------------- vlagym quickstart
def run_quickstart(cfg: QuickstartConfig) -> int:
    from vlagym.eval.evaluate import format_results
    from vlagym.eval.quickstart import run_quickstart as run

    summary = run(cfg)
    t = summary["timings_s"]
    evals = list(summary["results"])
    for name in evals:
        print()
        print(f"{summary['labels'][name]}:")
        print(format_results(summary["results"][name]))
    print()
    print(
        f"time: demos {t['demos']:.0f} s, training {t['train']:.0f} s, evaluation "
        f"{sum(t[name] for name in evals):.0f} s, total {summary['total_s'] / 60:.1f} min"
    )
    print(f"demos: {summary['demos']['path']}")
    print(f"checkpoint: {summary['checkpoint']}")
    print(f"logs: {summary['tensorboard']} (tensorboard --logdir {summary['tensorboard']})")
    print(f"results and videos: {', '.join(str(Path(summary['out']) / name) for name in evals)}")
    return EXIT_OK


def quickstart_config(args: argparse.Namespace) -> QuickstartConfig:
    try:
        return QuickstartConfig(
            out=args.out,
            steps=args.steps,
            demos=args.demos,
            eval_episodes=args.eval_episodes,
            progress=not args.no_progress,
        )
    except ValueError as e:
        raise UserError(str(e)) from e


# ---------------------------------------------------------------------------- parser and main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vlagym", description="Language-conditioned MuJoCo manipulation tasks and the VLA loop around them."
    )
    parser.add_argument("--version", action="version", version=f"vlagym {vlagym.__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    d = {f.name: f.default for f in dataclasses.fields(QuickstartConfig)}
    p = sub.add_parser(
        "quickstart",
        help="the main job: demos -> train the VLA -> evaluate (built-in defaults)",
        description="Collect scripted demos for VLA-PickCup-v0, train the VLA by behaviour cloning, and evaluate it "
        "on fresh seeds with the train and the held-out instruction wordings. No arguments needed.",
    )
    p.add_argument("--out", default=d["out"], help="run folder (default: %(default)s)")
    p.add_argument("--steps", type=int, default=d["steps"], help="training steps (default: %(default)s)")
    p.add_argument("--demos", type=int, default=d["demos"], help="demo episodes (default: %(default)s)")
    p.add_argument(
        "--eval-episodes", type=int, default=d["eval_episodes"], help="episodes per evaluation (default: %(default)s)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")

    p = sub.add_parser("list", help="list the registered tasks", description="List the registered vlagym tasks.")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")

    d = VideoConfig.__dataclass_fields__
    p = sub.add_parser(
        "video",
        help="record the scripted expert solving a task (mp4)",
        description="Run the scripted expert for a few episodes and write them to one mp4 (config JSON beside it).",
    )
    p.add_argument("task", help="task id, e.g. VLA-PickCup-v0 (see `vlagym list`)")
    p.add_argument(
        "--episodes", type=int, default=d["episodes"].default, help="number of episodes (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=d["seed"].default, help="episode i uses seed+i (default: %(default)s)")
    p.add_argument("--out", default="", help="output .mp4 path (default: videos/TASK.mp4)")
    p.add_argument("--camera", default=d["camera"].default, help=f"one of {list(CAMERAS)} (default: %(default)s)")
    p.add_argument("--size", type=int, default=d["size"].default, help="frame side in pixels (default: %(default)s)")
    p.add_argument("--fps", type=int, default=d["fps"].default, help="video frame rate (default: %(default)s)")
    p.add_argument("--split", default=d["split"].default, help=f"one of {list(SPLITS)} (default: %(default)s)")
    p.add_argument(
        "--instruction-split",
        default=d["instruction_split"].default,
        help=f"one of {list(INSTRUCTION_SPLITS)} (default: the split's own)",
    )
    p.add_argument(
        "--hold", type=int, default=d["hold"].default, help="frames to hold each episode's end (default: %(default)s)"
    )
    _add_demos_parser(sub)
    _add_dataset_parser(sub)
    _add_eval_parser(sub)
    _add_curve_parser(sub)
    _add_bench_suite_parser(sub)
    _add_compare_parser(sub)
    _add_replicates_parser(sub)
    _add_bench_parser(sub)
    p = sub.add_parser(
        "report",
        help="one self-contained HTML page of a results bundle",
        description="Write BUNDLE/report.html: tables, heatmap, failure taxonomy, language controls, fingerprint "
        "and embedded episode videos in one file (suite runs write it already; this rewrites it).",
    )
    p.add_argument("bundle", help="bundle folder (or its bundle.json)")
    _add_train_bc_parser(sub)
    _add_train_rl_parser(sub)
    return parser


def _add_bench_suite_parser(sub) -> None:
    p = sub.add_parser(
        "bench-suite",
        help="benchmark protocols (list, show NAME)",
        description="The named, versioned benchmark protocols that `vlagym eval --suite NAME` runs.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="every suite: version, tasks, splits, episodes")
    a = actions.add_parser("show", help="one protocol in full: tasks, horizons, splits, seeds, success, chunks")
    a.add_argument("name", help="suite name (see `vlagym bench-suite list`)")
    a.add_argument("--json", action="store_true", help="print the protocol as JSON")


def _add_bench_parser(sub) -> None:
    d = {f.name: f.default for f in dataclasses.fields(BenchConfig)}
    p = sub.add_parser(
        "bench",
        help="speed benchmarks: envs vs raw physics, vector envs, dataset, BC, latency, PPO",
        description="Measure, side by side in one run: env steps/s per task (state and rgb) beside the raw physics "
        "limit, vector-env scaling, dataset samples/s, BC training samples/s, policy latency p50/p99 and PPO env "
        "steps/s. Prints Markdown tables and saves JSON; --compare prints new / old of two saved runs. Run it on "
        "a quiet machine: the numbers compare rows of one run, or two runs of the same machine.",
    )
    p.add_argument(
        "--sections",
        nargs="+",
        metavar="SECTION",
        help=f"sections to run, of {', '.join(BENCH_SECTIONS)} (default: all)",
    )
    p.add_argument("--tasks", nargs="+", metavar="TASK", help="env section: task ids (default: every single task)")
    p.add_argument("--quick", action="store_true", help="tiny budgets and a tiny VLA: a smoke run, not numbers")
    p.add_argument("--out", default=d["out"], help="JSON results file, '' for none (default: %(default)s)")
    p.add_argument("--threads", type=int, default=d["threads"], help="torch threads (default: %(default)s)")
    p.add_argument("--image-size", type=int, default=d["image_size"], help="camera images, px (default: %(default)s)")
    p.add_argument("--device", default=d["device"], help="torch device, cpu or cuda (default: %(default)s)")
    p.add_argument("--demos", help="dataset/bc/ppo: a demo file instead of the synthetic one")
    p.add_argument("--policy", help="latency: a checkpoint folder instead of untrained policies of both heads")
    p.add_argument("--no-pin", action="store_true", help="env/render: do not pin the process to one core")
    p.add_argument(
        "--repeats",
        type=int,
        metavar="N",
        help="interleaved passes per measurement, tables show the median (default: 3, 1 with --quick; "
        "latency always times its many calls once)",
    )
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two saved runs instead of running")


def _add_compare_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="paired comparison of two results bundles (McNemar's exact test)",
        description="Compare two runs of the same protocol episode by episode (same task, split and seed): per-task "
        "difference with a 95% interval (Bonett-Price, paired), discordant episodes, McNemar's exact p-value and a "
        "verdict. Exit code 2 when the runs do not hold the same episodes.",
    )
    p.add_argument("a", help="run A: bundle folder or bundle.json (or a vlagym eval folder / results.json)")
    p.add_argument("b", help="run B")
    p.add_argument("--metric", default="success", help=f"one of {list(METRICS)} (default: %(default)s)")
    p.add_argument("--alpha", type=float, default=ALPHA, help="significance level (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")


def _add_replicates_parser(sub) -> None:
    p = sub.add_parser(
        "replicates",
        help="replicate runs of one recipe against one baseline: per run and on average (t interval across runs)",
        description="Pair each RUN with BASELINE episode by episode (same protocol and seeds): its difference with "
        "a 95%% interval and McNemar's exact p; then the mean difference over the runs with Student's t interval "
        "across them, which holds the run-to-run spread that one run's interval leaves out.",
    )
    p.add_argument("baseline", help="baseline: bundle folder or bundle.json (or a vlagym eval folder / results.json)")
    p.add_argument("runs", nargs="+", metavar="RUN", help="replicate runs, e.g. one per training seed")
    p.add_argument("--metric", default="success", help=f"one of {list(METRICS)} (default: %(default)s)")
    p.add_argument("--alpha", type=float, default=ALPHA, help="significance level (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _add_train_bc_parser(sub) -> None:
    p = sub.add_parser(
        "train-bc",
        help="behaviour cloning of the VLA policy on demo files",
        description="Train the VLA on demos (AdamW, warmup + cosine, EMA optional). Writes OUT/bc_config.json, "
        "OUT/checkpoints/step_N (policy + training state; last.json points at the latest), OUT/tb (TensorBoard) "
        "and OUT/eval. --resume continues exactly from the latest checkpoint. Launch under torchrun for DDP.",
    )
    p.add_argument("--dataset", nargs="+", required=True, metavar="FILE", help="demo files (vlagym demos)")
    # Defaults of BCConfig, repeated so that building the parser does not import torch.
    p.add_argument("--out", default="runs/bc", help="run folder (default: %(default)s)")
    p.add_argument("--steps", type=int, default=3000, help="optimiser steps (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=64, help="per rank (default: %(default)s)")
    p.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (default: %(default)s)")
    p.add_argument("--chunk-size", type=int, default=None, help="actions per chunk K (default: the policy's, 10)")
    p.add_argument("--image-size", type=int, default=None, help="policy image side (default: the demos')")
    p.add_argument("--head", default="l1", help="action head: l1 or flow (default: %(default)s)")
    p.add_argument("--eval-every", type=int, default=0, help="evaluate every N steps (default: 0, never)")
    p.add_argument("--eval-episodes", type=int, default=10, help="episodes per evaluation (default: %(default)s)")
    p.add_argument("--checkpoint-every", type=int, default=1000, help="steps (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader workers (default: %(default)s)")
    p.add_argument("--no-augment", action="store_true", help="no random crop and colour jitter of the images")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default: %(default)s)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.json")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_train_rl_parser(sub) -> None:
    p = sub.add_parser(
        "train-rl",
        help="RL: PPO post-training of a BC checkpoint, or PPO/SAC from scratch on state",
        description="PPO post-training of a BC-trained VLA with stable-baselines3 (one RL step = one action chunk; "
        "the critic reads the privileged state unless --no-critic-state), or an RL baseline from scratch "
        "(--from-scratch --algo ppo|sac, obs_mode=state). Writes OUT/rl_config.json, OUT/checkpoints/step_N "
        "(a VLA checkpoint `vlagym eval` loads + sb3.zip + training state; last.json points at the latest), OUT/tb "
        "(TensorBoard) and OUT/eval (results per evaluation, curve.json). --resume continues from the latest "
        "checkpoint. Options left out take the defaults of vlagym.rl.ppo.RLConfig.",
    )
    # No defaults here (None = RLConfig's), so that building the parser does not import torch.
    p.add_argument("--policy", default=None, metavar="DIR", help="BC checkpoint folder to post-train")
    p.add_argument("--from-scratch", action="store_true", help="an RL baseline from scratch on state observations")
    p.add_argument(
        "--algo",
        default=None,
        help="ppo, sac (from scratch only) or filtered-bc (post-training by success-filtered BC rounds; default: ppo)",
    )
    p.add_argument("--task", default=None, help="task id (default: the checkpoint's; required from scratch)")
    p.add_argument("--env-kwargs", default="{}", help="JSON object of extra env kwargs, e.g. '{\"num_cups\": 1}'")
    p.add_argument("--out", default=None, help="run folder (default: runs/rl)")
    p.add_argument("--timesteps", type=int, default=None, help="RL steps over all sub-envs (default: 20000)")
    p.add_argument(
        "--max-minutes", type=float, default=None, help="also stop after this many minutes of training (default: none)"
    )
    p.add_argument("--n-envs", type=int, default=None, help="parallel sub-envs (default: 4)")
    p.add_argument("--vectorization", default=None, help="sync or async (default: sync)")
    p.add_argument("--reward", default=None, help="dense or sparse (default: dense)")
    p.add_argument(
        "--log-std-lr", type=float, default=None, help="post-training: log-std learning rate (default: the actor's)"
    )
    p.add_argument(
        "--actor-layers",
        default=None,
        help="post-training: all (the whole VLA learns) or head (trunk frozen; default: all)",
    )
    p.add_argument(
        "--reward-scale",
        type=float,
        default=None,
        help="multiplies each RL step's reward (default: 1/chunk for dense, the mean per-step reward; else 1)",
    )
    p.add_argument(
        "--max-episode-steps",
        type=int,
        default=None,
        help="training time limit in control steps; filtered-bc: of the collection episodes (default: the task's; "
        "evaluation always uses the task's)",
    )
    p.add_argument("--chunk-size", type=int, default=None, help="from scratch: actions per RL step (default: 1)")
    p.add_argument(
        "--n-steps",
        type=int,
        default=None,
        help="PPO: RL steps per sub-env per rollout (default: 64 post-training, 32 from scratch)",
    )
    p.add_argument(
        "--batch-size", type=int, default=None, help="minibatch (default: 128 post-training, 64 PPO, 256 SAC)"
    )
    p.add_argument("--n-epochs", type=int, default=None, help="PPO: epochs per rollout (default: 4)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: 5e-6 post-training, else 3e-4)")
    p.add_argument("--critic-lr", type=float, default=None, help="post-training: value head lr (default: 3e-4)")
    p.add_argument(
        "--gamma",
        type=float,
        default=None,
        help="discount per RL step (default: 0.99); "
        "filtered-bc: a success after T env steps weighs gamma^T (default: 1)",
    )
    p.add_argument("--gae-lambda", type=float, default=None, help="PPO: GAE lambda (default: 0.95)")
    p.add_argument("--clip-range", type=float, default=None, help="PPO: ratio clipping (default: 0.2)")
    p.add_argument("--ent-coef", type=float, default=None, help="PPO: entropy bonus (default: 0)")
    p.add_argument(
        "--target-kl",
        type=float,
        default=None,
        help="PPO: early-stopping KL (default: 0.03 post-training, none from scratch)",
    )
    p.add_argument("--log-std-init", type=float, default=None, help="post-training: initial log-std (default: -2)")
    p.add_argument("--no-critic-state", action="store_true", help="post-training: critic on VLA features, not state")
    p.add_argument("--bc-coef", type=float, default=None, help="post-training: pull toward the BC mean (default: 0.1)")
    p.add_argument(
        "--critic-warmup-steps",
        type=int,
        default=None,
        help="post-training: timesteps of critic-only learning (default: 4096)",
    )
    p.add_argument("--buffer-size", type=int, default=None, help="SAC: replay buffer size (default: 300000)")
    p.add_argument("--learning-starts", type=int, default=None, help="SAC: random timesteps first (default: 1000)")
    p.add_argument("--seed", type=int, default=None, help="(default: 0)")
    p.add_argument(
        "--eval-every", type=int, default=None, help="evaluate every N timesteps (filtered-bc: rounds), and at the end"
    )
    p.add_argument("--eval-episodes", type=int, default=None, help="episodes per evaluation (default: 20)")
    p.add_argument("--eval-num-envs", type=int, default=None, help="parallel sub-envs of evaluations (default: 1)")
    p.add_argument(
        "--eval-seed", type=int, default=None, help="evaluation episode i uses seed EVAL_SEED+i (default: 100000)"
    )
    p.add_argument("--checkpoint-every", type=int, default=None, help="timesteps (default: 0, only at the end)")
    p.add_argument("--device", default=None, help="auto, cpu or cuda (default: auto)")
    p.add_argument("--torch-threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    g = p.add_argument_group("--algo filtered-bc (defaults: vlagym.rl.filtered_bc.FilteredBCConfig)")
    g.add_argument("--rounds", type=int, default=None, help="collect-then-train rounds (default: 40)")
    g.add_argument("--episodes-per-round", type=int, default=None, help="collection episodes (default: 200)")
    g.add_argument("--updates-per-round", type=int, default=None, help="optimiser steps per round (default: 300)")
    g.add_argument(
        "--noise-std", type=float, default=None, help="exploration noise, normalised action units (default: 0.1)"
    )
    g.add_argument(
        "--noise-hold", type=int, default=None, help="steps each noise draw is held, e.g. the chunk (default: 1)"
    )
    g.add_argument(
        "--retry-noise-std",
        type=float,
        default=None,
        help="states with no kept success get GROUP_SIZE more tries with this noise std (default: 0, no retries)",
    )
    g.add_argument(
        "--retry-noise-hold", type=int, default=None, help="steps each retry noise draw is held (default: 10)"
    )
    g.add_argument(
        "--demos", nargs="+", default=None, metavar="FILE", help="demo files to mix in (default: the BC checkpoint's)"
    )
    g.add_argument("--demo-fraction", type=float, default=None, help="share of each batch from demos (default: 0.5)")
    g.add_argument(
        "--buffer-rounds", type=int, default=None, help="train on the last N rounds' successes (default: all)"
    )
    g.add_argument("--ema", type=float, default=None, help="EMA decay of the weights that act (default: 0, off)")
    g.add_argument(
        "--no-augment",
        dest="augment",
        action="store_const",
        const=False,
        default=None,
        help="no random crop and colour jitter of the training images (default: as train-bc, on)",
    )
    g.add_argument(
        "--freeze-encoders",
        action="store_true",
        default=None,
        help="train trunk and head only; vision and instruction encoders keep their BC weights",
    )
    g.add_argument(
        "--hindsight",
        action="store_true",
        default=None,
        help="replay each failed episode with the target moved to where the gripper closed; keep the replays "
        "that succeed (PickCup, PickObject)",
    )
    g.add_argument(
        "--hindsight-make-room",
        action="store_true",
        default=None,
        help="with --hindsight: move objects standing too near that spot aside instead of skipping the replay",
    )
    g.add_argument(
        "--close-delays",
        nargs="+",
        type=int,
        default=None,
        metavar="K",
        help="replay each failed episode from its first gripper close, put off by K steps (each K in turn, e.g. "
        "2 4 6 8); keep the first replay that succeeds (default: none)",
    )
    g.add_argument(
        "--lr-schedule",
        choices=("constant", "cosine", "cosine-time"),
        default=None,
        help="cosine: decay lr to 0 over rounds x updates-per-round; cosine-time: over --max-minutes (default: "
        "constant)",
    )
    g.add_argument(
        "--group-size", type=int, default=None, help="tries of each initial state per round, own noise (default: 1)"
    )
    g.add_argument(
        "--weighting",
        choices=("episode", "state", "advantage"),
        default=None,
        help="state: the successes of one initial state share one unit of weight; advantage: each step by "
        "exp(A / beta), A from a success critic on the privileged state (default: episode)",
    )
    g.add_argument(
        "--advantage-beta", type=float, default=None, help="--weighting advantage: temperature (default: 0.2)"
    )
    g.add_argument(
        "--advantage-max-weight", type=float, default=None, help="--weighting advantage: weight cap (default: 20)"
    )
    g.add_argument(
        "--critic-rounds", type=int, default=None, help="--weighting advantage: critic data, rounds (default: 4)"
    )
    g.add_argument(
        "--critic-updates", type=int, default=None, help="--weighting advantage: critic steps/round (default: 300)"
    )
    g.add_argument(
        "--max-gripper-reopens",
        type=int,
        default=None,
        help="drop successes whose gripper opens again after closing more than this often "
        "(0 for picks, 1 for places; default: keep all)",
    )
    g.add_argument(
        "--max-close-distance",
        type=float,
        default=None,
        metavar="METRES",
        help="drop successes whose gripper first closed farther than this from the task's reach point "
        "(its reach_distance; e.g. 0.04 drops grasps closed at a cup's rim; default: keep all)",
    )
    g.add_argument(
        "--collect-seed",
        type=int,
        default=None,
        help="first collection seed; another value gives an independent replicate (default: 10000000)",
    )
    g.add_argument(
        "--preference-weight",
        type=float,
        default=None,
        metavar="W",
        help="weight of a DPO term on the tries of one state (each success against each failed try of its state; "
        "needs --group-size >= 2; default: 0, successes only)",
    )
    g.add_argument("--preference-beta", type=float, default=None, help="--preference-weight: DPO's beta (default: 1)")
    g.add_argument(
        "--preference-pairs", type=int, default=None, help="--preference-weight: pairs per step (default: 8)"
    )
    g.add_argument(
        "--preference-chunks",
        type=int,
        default=None,
        help="--preference-weight: chunk starts per side of a pair per step (default: 2)",
    )
    g.add_argument(
        "--preference-rounds",
        type=int,
        default=None,
        help="--preference-weight: draw the pairs of the last N rounds (default: 3)",
    )
    g.add_argument(
        "--n-action-steps",
        type=int,
        default=None,
        help="actions executed of each predicted chunk, in collection, validation and the checkpoints "
        "(default: the checkpoint's)",
    )
    g.add_argument(
        "--collect-env-kwargs",
        default=None,
        help="JSON object of env kwargs for the collection episodes only, e.g. '{\"num_cups\": 3}' (validation "
        "and the checkpoint keep the evaluation env; default: none)",
    )
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints/last.json")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_eval_parser(sub) -> None:
    d = EvalConfig.__dataclass_fields__
    p = sub.add_parser(
        "eval",
        help="success rate of a checkpoint or the scripted expert",
        description="Evaluate a policy in vector envs: episode i of each task uses seed SEED+i (identical initial "
        "states for any two policies). Writes OUT/results.json, OUT/results.md and OUT/eval_config.json. With "
        "--suite NAME, runs a whole benchmark protocol instead and writes OUT/bundle.json and OUT/bundle.md.",
    )
    p.add_argument("--policy", required=True, help="checkpoint folder, or 'expert' for the scripted expert")
    p.add_argument(
        "--suite", default=None, help="run a benchmark protocol (see `vlagym bench-suite list`); fixes tasks and seeds"
    )
    p.add_argument("--tasks", nargs="+", default=None, help="task ids (default: the checkpoint's task)")
    p.add_argument(
        "--episodes",
        type=int,
        default=None,
        help=f"per task (default: {d['episodes'].default}; with --suite the protocol's, fewer for a quick run)",
    )
    p.add_argument(
        "--num-envs", type=int, default=d["num_envs"].default, help="parallel sub-envs (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=None, help=f"episode i uses seed+i (default: {d['seed'].default})")
    p.add_argument("--out", default=d["out"].default, help="output folder (default: %(default)s)")
    p.add_argument(
        "--env-kwargs",
        default="{}",
        help='JSON object overriding the checkpoint\'s env kwargs, e.g. \'{"split": "lighting"}\'',
    )
    p.add_argument(
        "--videos",
        type=int,
        default=0,
        help="mp4s of the first N episodes per task; with --suite N per task and split, each outcome in turn "
        "(default: 0)",
    )
    p.add_argument(
        "--language-controls",
        action="store_true",
        help="with --suite: also run the seeds with an empty and with a swapped instruction (tasks that support it)",
    )
    p.add_argument(
        "--sequential-width",
        type=float,
        default=None,
        metavar="W",
        help="with --suite: stop each task x split at the first n (in seed order) whose Wilson 95%% interval is at "
        "most W wide, e.g. 0.2 (default: every episode)",
    )
    p.add_argument(
        "--sequential-min-episodes",
        type=int,
        default=None,
        metavar="M",
        help=f"with --sequential-width: never stop before M episodes (default: {SEQUENTIAL_MIN_EPISODES})",
    )
    p.add_argument(
        "--vectorization",
        default=d["vectorization"].default,
        help="sync or async (the expert needs sync; default: %(default)s)",
    )
    p.add_argument("--image-size", type=int, default=None, help="camera image side (default: the checkpoint's)")
    p.add_argument("--cameras", nargs="+", default=None, help="cameras (default: the checkpoint's)")
    p.add_argument(
        "--n-action-steps",
        type=int,
        default=None,
        help="actions executed of each predicted chunk, no ensembling (default: the checkpoint's)",
    )
    p.add_argument(
        "--temporal-ensemble",
        action="store_true",
        help="predict every step and execute the average of the overlapping chunks (default: the checkpoint's)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_curve_parser(sub) -> None:
    d = {f.name: f.default for f in dataclasses.fields(CurveConfig)}
    p = sub.add_parser(
        "curve",
        help="test curve of a training run: every checkpoint evaluated on the same seeds",
        description="Evaluate each checkpoint of a train-bc or train-rl run folder, and the checkpoint it started "
        "from, with `vlagym eval`'s protocol (episode i uses seed SEED+i), beside the round, env steps and "
        "training minutes of each; every point's lift over the start is paired (95%% interval, McNemar's exact "
        "p). Writes OUT/curve.json, OUT/curve.md, OUT/curve.png and one eval folder per point; points already "
        "evaluated the same way are read back, not run again.",
    )
    p.add_argument("run", help="run folder (checkpoints/step_N inside)")
    p.add_argument("--out", default=None, help="output folder (default: RUN/test_curve)")
    p.add_argument("--episodes", type=int, default=d["episodes"], help="per point (default: %(default)s)")
    p.add_argument("--num-envs", type=int, default=d["num_envs"], help="parallel sub-envs (default: %(default)s)")
    p.add_argument(
        "--seed", type=int, default=d["seed"], help="episode i uses seed+i at every point (default: %(default)s)"
    )
    p.add_argument("--env-kwargs", default="{}", help="JSON object overriding the checkpoints' env kwargs")
    p.add_argument(
        "--every", type=int, default=d["every"], help="every N-th checkpoint, and the last (default: %(default)s)"
    )
    p.add_argument(
        "--start", default=None, help="checkpoint of point 0 (default: the BC checkpoint the run started from)"
    )
    p.add_argument("--no-start", action="store_true", help="no start point: the run's checkpoints alone")
    p.add_argument(
        "--vectorization", default=d["vectorization"], help="sync or async vector env (default: %(default)s)"
    )
    p.add_argument(
        "--n-action-steps",
        type=int,
        default=None,
        help="actions executed of each predicted chunk, no ensembling (default: each checkpoint's)",
    )
    p.add_argument(
        "--temporal-ensemble", action="store_true", help="execute the temporal ensemble of the overlapping chunks"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_demos_parser(sub) -> None:
    d = DemoConfig.__dataclass_fields__
    p = sub.add_parser(
        "demos",
        help="collect scripted-expert demonstrations (HDF5)",
        description="Run the task's scripted expert in a vector env and write the episodes to one HDF5 file "
        "(robomimic/LIBERO layout, see vlagym/train/layout.py); the config JSON goes beside it. Episode i uses "
        "seed SEED+i whatever --num-envs is. An interrupted run leaves a valid file; --resume continues it.",
    )
    p.add_argument("--task", required=True, help="task id, e.g. VLA-PickCup-v0 (see `vlagym list`)")
    p.add_argument("--episodes", type=int, default=d["episodes"].default, help="episodes to run (default: %(default)s)")
    p.add_argument(
        "--num-envs", type=int, default=d["num_envs"].default, help="parallel sub-envs (default: %(default)s)"
    )
    p.add_argument("--out", default="", help="output .hdf5 path (default: demos/TASK.hdf5)")
    p.add_argument("--seed", type=int, default=d["seed"].default, help="episode i uses seed+i (default: %(default)s)")
    p.add_argument("--obs-mode", default=d["obs_mode"].default, help=f"one of {list(OBS_MODES)} (default: %(default)s)")
    p.add_argument("--image-size", type=int, default=d["image_size"].default, help="image side (default: %(default)s)")
    p.add_argument(
        "--cameras",
        nargs="+",
        default=list(d["cameras"].default),
        help=f"any of {list(CAMERAS)} (default: {' '.join(d['cameras'].default)})",
    )
    p.add_argument("--split", default="train", help=f"one of {list(SPLITS)} (default: %(default)s)")
    p.add_argument(
        "--instruction-split", default=None, help=f"one of {list(INSTRUCTION_SPLITS)} (default: the split's)"
    )
    p.add_argument("--keep-failures", action="store_true", help="also keep episodes the expert failed")
    p.add_argument(
        "--action-noise",
        type=float,
        default=0.0,
        help="std of noise on the executed arm actions; the expert's own actions become the labels (default: 0)",
    )
    p.add_argument("--resume", action="store_true", help="continue an interrupted file (same settings)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing file")
    p.add_argument(
        "--compression", default=d["compression"].default, help=f"one of {list(COMPRESSIONS)} (default: %(default)s)"
    )
    p.add_argument(
        "--vectorization",
        default=d["vectorization"].default,
        help=f"one of {list(VECTORIZATION_MODES)} (default: %(default)s)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _add_dataset_parser(sub) -> None:
    p = sub.add_parser(
        "dataset", help="inspect a demo file (info, check)", description="Summarise or check a vlagym demo file."
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = actions.add_parser("info", help="readable summary: episodes, steps, tasks, instructions, actions, obs")
    a.add_argument("file", help="demo file (.hdf5)")
    a.add_argument("--json", action="store_true", help="print the summary as JSON")
    a = actions.add_parser("check", help="check the file against the demo layout (exit code 1 on problems)")
    a.add_argument("file", help="demo file (.hdf5)")


def _config_from_args(
    args: argparse.Namespace,
) -> (
    ListConfig
    | VideoConfig
    | DemoConfig
    | DatasetConfig
    | EvalConfig
    | CurveConfig
    | SuiteRunConfig
    | BenchSuiteConfig
    | CompareConfig
    | ReplicatesConfig
    | BenchConfig
    | BenchCompareConfig
    | ReportConfig
    | BCConfig
    | RLConfig
    | FilteredBCConfig
    | QuickstartConfig
):
    if args.command == "eval":
        return eval_config(args)
    if args.command == "curve":
        return curve_config(args)
    if args.command == "bench-suite":
        return BenchSuiteConfig(action=args.action, name=getattr(args, "name", ""), json=getattr(args, "json", False))
    if args.command == "report":
        return ReportConfig(bundle=args.bundle)
    if args.command == "bench":
        return bench_config(args)
    if args.command == "compare":
        return CompareConfig(a=args.a, b=args.b, metric=args.metric, alpha=args.alpha, json=args.json)
    if args.command == "replicates":
        return ReplicatesConfig(
            baseline=args.baseline, runs=list(args.runs), metric=args.metric, alpha=args.alpha, json=args.json
        )
    if args.command == "quickstart":
        return quickstart_config(args)
    if args.command == "train-bc":
        return train_bc_config(args)
    if args.command == "train-rl":
        return train_rl_config(args)
    if args.command == "list":
        return ListConfig(markdown=args.markdown)
    if args.command == "demos":
        return demo_config(args)
    if args.command == "dataset":
        return DatasetConfig(action=args.action, file=args.file, json=getattr(args, "json", False))
    return VideoConfig(
        task=args.task,
        episodes=args.episodes,
        seed=args.seed,
        out=args.out,
        camera=args.camera,
        size=args.size,
        fps=args.fps,
        split=args.split,
        instruction_split=args.instruction_split,
        hold=args.hold,
    )


#: the runner of each config type (train-bc and train-rl import torch lazily, so they dispatch by command in `main`)
_RUNNERS: dict[type, Any] = {
    ListConfig: run_list,
    DemoConfig: run_demos,
    DatasetConfig: run_dataset,
    EvalConfig: run_eval,
    CurveConfig: run_curve_command,
    SuiteRunConfig: run_suite_eval,
    BenchSuiteConfig: run_bench_suite,
    CompareConfig: run_compare,
    ReplicatesConfig: run_replicates,
    BenchConfig: run_bench,
    BenchCompareConfig: run_bench_compare,
    ReportConfig: run_report,
    QuickstartConfig: run_quickstart,
}


def _run_command(args: argparse.Namespace) -> int:
    cfg = _config_from_args(args)
    runner = _RUNNERS.get(type(cfg))
    if runner is not None:
        return runner(cfg)
    if args.command == "train-bc":
        return run_train_bc(cfg)
    if args.command == "train-rl":
        return run_train_rl(cfg)
    return run_video(cfg)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `vlagym` console script; returns the process exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits on --help, --version and usage errors
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code = _run_command(args)
        sys.stdout.flush()  # here, so a reader that went away (`| head`) is a BrokenPipeError we catch
        return code
    except BrokenPipeError:
        # Python's advice: point stdout at devnull so the flush at interpreter exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except UserError as e:
        print(f"vlagym {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
