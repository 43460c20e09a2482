"""The test curve of a training run: every checkpoint of a run folder evaluated on the same seeds.

`vlagym curve RUN` runs `vlagym eval`'s protocol (episode i uses seed ``seed + i``) on each checkpoint of a
`vlagym train-bc` or `vlagym train-rl` run folder (``RUN/checkpoints/step_N``), and on the checkpoint the run
started from (a post-training run's BC checkpoint, point 0), then reads where training stood at each one (round,
updates, env steps, training minutes, from the checkpoint's ``training_state.pt``). Every point is paired with
the start on the same seeds: the lift with a paired 95% interval and McNemar's exact p-value
(`vlagym.eval.stats.paired_test`). Outputs, all written atomically:

    OUT/start/, OUT/step_<N>/   one `vlagym eval` folder per point (results.json, results.md, eval_config.json)
    OUT/curve.json              the protocol and one record per point
    OUT/curve.md                the Markdown table of `format_curve`
    OUT/curve.png               success rate vs env steps and vs training minutes, with the 95% intervals

A point whose folder already holds the results of the same evaluation (the same `EvalConfig` but for the
progress bar) is read back instead of run again, so an interrupted curve continues where it stopped, and a curve
of a run that went on evaluates only its new checkpoints. The options are `CurveConfig` (`vlagym.eval.configs`).
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlagym.eval.configs import CurveConfig, CurveError, EvalConfig, EvalError, check_checkpoint_folder
from vlagym.eval.evaluate import evaluate
from vlagym.eval.layout import CHECKPOINT_FILES, CURVE_JSON, CURVE_MD, CURVE_PNG, EVAL_CONFIG_JSON, RESULTS_JSON
from vlagym.eval.stats import paired_test, wilson_interval
from vlagym.io import atomic_write_bytes, atomic_write_json, atomic_write_text

__all__ = [
    "START",
    "chosen_checkpoints",
    "curve_png",
    "format_curve",
    "outcomes",
    "run_checkpoints",
    "run_curve",
    "start_checkpoint",
    "training_point",
    "write_curve_png",
    # defined in configs and layout; the command line imports them from here
    "CURVE_JSON",
    "CURVE_MD",
    "CURVE_PNG",
    "CurveConfig",
    "CurveError",
]

logger = logging.getLogger(__name__)

START = "start"
_STEP_DIR = re.compile(r"step_(\d+)")


def run_checkpoints(run: str | Path) -> list[Path]:
    """The checkpoint folders of a run that `vlagym eval` loads (``checkpoints/step_N`` with the policy files),
    in step order. A run that is still writing one leaves it under a temporary name, which is skipped."""
    root = Path(run) / "checkpoints"
    if not root.is_dir():
        raise CurveError(f"{str(run)!r} holds no checkpoints/ folder: not a train-bc or train-rl run folder")
    found = []
    for folder in root.iterdir():
        match = _STEP_DIR.fullmatch(folder.name)
        if match and folder.is_dir() and all((folder / name).is_file() for name in CHECKPOINT_FILES):
            found.append((int(match.group(1)), folder))
    if not found:
        raise CurveError(
            f"no checkpoint of {str(run)!r} holds a VLA policy (checkpoints/step_N with {', '.join(CHECKPOINT_FILES)})"
            "; RL from scratch saves SB3 policies, which `vlagym eval` does not load"
        )
    return [folder for _, folder in sorted(found)]


def chosen_checkpoints(folders: Sequence[Path], every: int) -> list[Path]:
    """Every `every`-th of `folders` (the first is the every-th), and the last always."""
    picked = list(folders[every - 1 :: every])
    if folders and (not picked or picked[-1] != folders[-1]):
        picked.append(folders[-1])
    return picked


def training_point(folder: Path) -> dict[str, Any]:
    """Where training stood at checkpoint `folder`: step (the N of step_N), round, updates, env steps and training
    minutes, each None where the run kind does not count it (BC counts steps only)."""
    extra = check_checkpoint_folder(folder).get("extra") or {}
    point: dict[str, Any] = {
        "step": int(_STEP_DIR.fullmatch(folder.name).group(1)),
        "round": extra.get("round"),
        "updates": extra.get("num_updates"),
        "env_steps": None,
        "train_minutes": None,
    }
    from vlagym.train.run_files import STATE_NAME  # here: it loads torch, which reading the curve back does not need

    state_path = folder / STATE_NAME
    if state_path.is_file():
        import torch

        state = torch.load(state_path, map_location="cpu", weights_only=True)
        if "env_steps" in state:
            point["env_steps"] = int(state["env_steps"])
        if "train_s" in state:
            point["train_minutes"] = float(state["train_s"]) / 60.0
    return point


def start_checkpoint(cfg: CurveConfig, last: Path) -> Path | None:
    """The checkpoint of point 0: `cfg.start`, else the BC checkpoint the run's last checkpoint names; None when
    there is none (a BC run, or the start left out) or it is gone (logged)."""
    if not cfg.include_start:
        return None
    if cfg.start is not None:
        try:
            check_checkpoint_folder(cfg.start)
        except EvalError as e:
            raise CurveError(f"start: {e}") from e
        return Path(cfg.start)
    named = (check_checkpoint_folder(last).get("extra") or {}).get("bc_checkpoint")
    if not named:
        return None
    path = Path(named)
    if not path.is_absolute() and not path.is_dir():  # relative to where training ran: try beside the run too
        for base in Path(cfg.run).resolve().parents:
            if (base / path).is_dir():
                path = base / path
                break
    if not all((path / name).is_file() for name in CHECKPOINT_FILES):
        logger.warning("the run started from %s, which is gone: the curve has no start point (pass start)", named)
        return None
    return path


def _eval_config(cfg: CurveConfig, policy: Path, out: Path) -> EvalConfig:
    return EvalConfig(
        policy=str(policy),
        episodes=cfg.episodes,
        num_envs=cfg.num_envs,
        seed=cfg.seed,
        out=str(out),
        env_kwargs=dict(cfg.env_kwargs),
        vectorization=cfg.vectorization,
        n_action_steps=cfg.n_action_steps,
        temporal_ensemble=cfg.temporal_ensemble,
        progress=cfg.progress,
    )


def _same_evaluation(ecfg: EvalConfig) -> dict[str, Any] | None:
    """The results in `ecfg.out` when they are of this very evaluation (all options but the progress bar)."""
    out = Path(ecfg.out)
    try:
        saved = json.loads((out / EVAL_CONFIG_JSON).read_text())["config"]
        results = json.loads((out / RESULTS_JSON).read_text())
    except (OSError, KeyError, TypeError, json.JSONDecodeError):
        return None
    wanted = {k: v for k, v in json.loads(json.dumps(dataclasses.asdict(ecfg))).items() if k != "progress"}
    return results if {k: v for k, v in saved.items() if k != "progress"} == wanted else None


def outcomes(results: dict[str, Any]) -> dict[tuple[str, int], bool]:
    """Success of every episode of a `vlagym eval` results.json, keyed by (task, seed)."""
    return {
        (task, int(e["seed"])): bool(e["success"])
        for task, summary in results["tasks"].items()
        for e in summary["episodes"]
    }


def _evaluate_point(cfg: CurveConfig, policy: Path, out: Path) -> dict[str, Any]:
    ecfg = _eval_config(cfg, policy, out)
    results = _same_evaluation(ecfg)
    if results is not None:
        logger.info("%s: results of the same evaluation found in %s, not run again", policy, out)
        return results
    logger.info("%s: evaluating %d episodes from seed %d", policy, cfg.episodes, cfg.seed)
    return evaluate(ecfg)


def _point_record(name: str, checkpoint: Path, where: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    episodes = outcomes(results)
    n, successes = len(episodes), sum(episodes.values())
    return {
        "name": name,
        "checkpoint": str(checkpoint),
        **where,
        "n": n,
        "successes": successes,
        "success_rate": successes / n if n else math.nan,
        "ci95": list(wilson_interval(successes, n)),
    }


def _lift(point: dict[str, Any], results: dict[str, Any], start: dict[tuple[str, int], bool]) -> dict[str, Any]:
    mine = outcomes(results)
    if set(mine) != set(start):
        raise CurveError(f"{point['checkpoint']} and the start were evaluated on different episodes")
    keys = sorted(mine)
    test = paired_test([mine[k] for k in keys], [start[k] for k in keys])
    return {
        "difference": test.difference,
        "ci95": list(test.difference_ci95),
        "only_point": test.a_only,
        "only_start": test.b_only,
        "p_value": test.p_value,
    }


def run_curve(cfg: CurveConfig) -> dict[str, Any]:
    """Evaluate the run's checkpoints as `cfg` says; writes OUT/curve.{json,md,png} and returns curve.json's
    content: {"run", "protocol", "points": [{"name", "checkpoint", "step", "round", "updates", "env_steps",
    "train_minutes", "n", "successes", "success_rate", "ci95", "lift"}]} ("lift": None without a start)."""
    folders = chosen_checkpoints(run_checkpoints(cfg.run), cfg.every)
    start = start_checkpoint(cfg, folders[-1])
    out = cfg.out_dir
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CurveError(f"cannot create the output folder {str(out)!r}: {e.strerror or e}") from e
    points: list[dict[str, Any]] = []
    start_outcomes = None
    if start is not None:
        results = _evaluate_point(cfg, start, out / START)
        where = {"step": 0, "round": 0, "updates": 0, "env_steps": 0, "train_minutes": 0.0}
        points.append({**_point_record(START, start, where, results), "lift": None})
        start_outcomes = outcomes(results)
    for folder in folders:
        results = _evaluate_point(cfg, folder, out / folder.name)
        point = _point_record(folder.name, folder, training_point(folder), results)
        point["lift"] = _lift(point, results, start_outcomes) if start_outcomes is not None else None
        points.append(point)
    curve = {
        "run": str(cfg.run),
        "protocol": {
            "episodes": cfg.episodes,
            "seed": cfg.seed,
            "env_kwargs": cfg.env_kwargs,
            "n_action_steps": cfg.n_action_steps,
            "temporal_ensemble": cfg.temporal_ensemble,
        },
        "points": points,
    }
    atomic_write_json(out / CURVE_JSON, curve)
    atomic_write_text(out / CURVE_MD, format_curve(curve) + "\n")
    write_curve_png(out / CURVE_PNG, curve)
    return curve


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_curve(curve: dict[str, Any]) -> str:
    """The Markdown table of a curve: one row per point, with its lift over the start (paired, McNemar p)."""
    protocol = curve["protocol"]
    lines = [
        f"Test curve of {curve['run']}: {protocol['episodes']} episodes per point from seed {protocol['seed']}"
        + (f", env kwargs {json.dumps(protocol['env_kwargs'])}" if protocol["env_kwargs"] else ""),
        "",
        "| point | round | updates | env steps | train-min | success | 95% CI | lift | lift, 95% CI | McNemar p |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for p in curve["points"]:
        lift = p["lift"]
        lift_cells = (
            ["-", "-", "-"]
            if lift is None
            else [
                f"{100 * lift['difference']:+.1f} pts",
                f"[{100 * lift['ci95'][0]:+.1f}, {100 * lift['ci95'][1]:+.1f}]",
                f"{lift['p_value']:.2g}",
            ]
        )
        cells = [
            p["name"],
            _cell(p["round"], "d"),
            _cell(p["updates"], "d"),
            _cell(p["env_steps"], ",d"),
            _cell(p["train_minutes"], ".1f"),
            f"{p['success_rate']:.1%}",
            f"[{100 * p['ci95'][0]:.1f}, {100 * p['ci95'][1]:.1f}]",
            *lift_cells,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def curve_png(curve: dict[str, Any]) -> bytes | None:
    """Success rate vs env steps and vs training minutes (two panels, 95% intervals as bars); None when the run
    counts neither (a BC run: its table has the steps)."""
    points = [p for p in curve["points"] if p["env_steps"] is not None and p["train_minutes"] is not None]
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)  # never opens a window; leaves an already-chosen backend alone
    from matplotlib.figure import Figure  # a bare Figure: no pyplot global state
    from matplotlib.ticker import EngFormatter

    rate = [100 * p["success_rate"] for p in points]
    err = [
        [100 * (p["success_rate"] - p["ci95"][0]) for p in points],
        [100 * (p["ci95"][1] - p["success_rate"]) for p in points],
    ]
    fig = Figure(figsize=(9.0, 3.4), dpi=100)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, key, label in zip(axes, ("env_steps", "train_minutes"), ("env steps", "training minutes"), strict=True):
        ax.errorbar([p[key] for p in points], rate, yerr=err, marker="o", capsize=3)
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
    axes[0].xaxis.set_major_formatter(EngFormatter(sep=""))  # 100k, not 100000 (the labels would overlap)
    axes[0].set_ylabel(f"success, % ({curve['protocol']['episodes']} episodes)")
    axes[0].set_ylim(0, 100)
    fig.suptitle(f"{curve['run']}: seeds from {curve['protocol']['seed']}", fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def write_curve_png(path: Path, curve: dict[str, Any]) -> Path | None:
    """Write `curve_png` to `path` atomically; None (and nothing written) when there is nothing to plot."""
    data = curve_png(curve)
    return None if data is None else atomic_write_bytes(path, data)
