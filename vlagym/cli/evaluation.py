"""`vlagym eval`, `curve`, `report`, `compare`, `replicates` and `bench-suite`: measuring policies."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from vlagym.cli.common import EXIT_OK, UserError, add_options, build, check_task
from vlagym.cli.options import flag, option_values
from vlagym.eval.configs import CompareConfig, CurveConfig, EvalConfig, ReplicatesConfig, SuiteRunConfig


# ---------------------------------------------------------------------------- eval (plain or a suite)
def eval_config(args: argparse.Namespace) -> EvalConfig | SuiteRunConfig:
    """`EvalConfig` of the options, or with ``--suite`` a `SuiteRunConfig` (the protocol fixes the rest)."""
    suite_fields = _fields(SuiteRunConfig)
    if getattr(args, "suite", None) is None:
        extra = [name for name in option_values(args, SuiteRunConfig) if name in _suite_only()]
        if extra:
            raise UserError(f"{flag(extra[0])} runs with a benchmark protocol: add --suite NAME")
        values = option_values(args, EvalConfig)
        values["tasks"] = [check_task(t) for t in values.get("tasks") or []]
        return build(EvalConfig, values)
    fixed = [flag(name) for name in option_values(args, EvalConfig) if name not in suite_fields]
    if fixed:
        raise UserError(f"--suite fixes the tasks, seeds, env settings and chunk execution; drop {', '.join(fixed)}")
    return build(SuiteRunConfig, option_values(args, SuiteRunConfig))


def _fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _suite_only() -> list[str]:
    """The fields of a suite run that a plain evaluation has not (the protocol's name, language controls, ...)."""
    return [name for name in _fields(SuiteRunConfig) if name not in _fields(EvalConfig)]


def _env_rejected(e: Exception, env_kwargs: dict) -> UserError:
    return UserError(f"the env rejected --env-kwargs {json.dumps(env_kwargs)}: {e}")


def cmd_eval(args: argparse.Namespace) -> int:
    from vlagym.eval.evaluate import EvalError, evaluate, format_results
    from vlagym.eval.suites import SuiteError

    cfg = eval_config(args)
    if isinstance(cfg, SuiteRunConfig):
        return run_suite_eval(cfg)
    try:
        results = evaluate(cfg)
    except (EvalError, SuiteError) as e:
        raise UserError(str(e)) from e
    except (TypeError, ValueError) as e:  # env kwargs the task rejects (unknown name, bad value)
        if not cfg.env_kwargs:
            raise
        raise _env_rejected(e, cfg.env_kwargs) from e
    print(format_results(results))
    print(f"results: {Path(cfg.out) / 'results.json'}, {Path(cfg.out) / 'results.md'} (folder {cfg.out})")
    return EXIT_OK


def run_suite_eval(cfg: SuiteRunConfig) -> int:
    from vlagym.eval.evaluate import EvalError
    from vlagym.eval.layout import BUNDLE_JSON, BUNDLE_MD, HEATMAP_PNG
    from vlagym.eval.report import REPORT_HTML
    from vlagym.eval.suite_run import format_bundle, run_suite
    from vlagym.eval.suites import SuiteError

    try:
        bundle = run_suite(cfg)
    except (EvalError, SuiteError) as e:
        raise UserError(str(e)) from e
    print(format_bundle(bundle))
    out = Path(cfg.out)
    print(f"bundle: {out / BUNDLE_JSON}, {out / BUNDLE_MD}, {out / HEATMAP_PNG}, report {out / REPORT_HTML}")
    return EXIT_OK


# ---------------------------------------------------------------------------- curve and report
def curve_config(args: argparse.Namespace) -> CurveConfig:
    """The `CurveConfig` of `vlagym curve` options."""
    values = option_values(args, CurveConfig)
    if values.get("start") is not None and values.get("include_start") is False:
        raise UserError("give --start or --no-start, not both")
    return build(CurveConfig, values, positional=("run",))


def cmd_curve(args: argparse.Namespace) -> int:
    from vlagym.eval.configs import CurveError, EvalError
    from vlagym.eval.curve import format_curve, run_curve
    from vlagym.eval.layout import CURVE_JSON, CURVE_MD, CURVE_PNG

    cfg = curve_config(args)
    try:
        curve = run_curve(cfg)
    except (CurveError, EvalError) as e:
        raise UserError(str(e)) from e
    except (TypeError, ValueError) as e:
        if not cfg.env_kwargs:
            raise
        raise _env_rejected(e, cfg.env_kwargs) from e
    print(format_curve(curve))
    out = cfg.out_dir
    print(f"curve: {out / CURVE_JSON}, {out / CURVE_MD}, {out / CURVE_PNG} (one eval folder per point in {out})")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from vlagym.eval.report import ReportError, load_bundle, write_report

    try:
        bundle, folder = load_bundle(args.bundle)
        path = write_report(bundle, folder)
    except ReportError as e:
        raise UserError(str(e)) from e
    except OSError as e:
        raise UserError(f"cannot write the report into {args.bundle!r}: {e.strerror or e}") from e
    except (KeyError, TypeError) as e:
        raise UserError(f"{args.bundle!r} is an incomplete results bundle (missing {e})") from e
    print(f"report: {path}")
    return EXIT_OK


# ---------------------------------------------------------------------------- compare and replicates
def cmd_compare(args: argparse.Namespace) -> int:
    from vlagym.eval.compare import compare_runs, format_comparison_report
    from vlagym.eval.stats import PairingError

    try:
        cfg = build(CompareConfig, option_values(args, CompareConfig), positional=("a", "b"))
        comparison = compare_runs(cfg)
    except PairingError as e:
        raise UserError(str(e)) from e
    print(json.dumps(comparison.to_json(), indent=2) if cfg.json else format_comparison_report(comparison))
    return EXIT_OK


def cmd_replicates(args: argparse.Namespace) -> int:
    from vlagym.eval.compare import format_replicates_report, replicate_runs
    from vlagym.eval.stats import PairingError

    try:
        cfg = build(ReplicatesConfig, option_values(args, ReplicatesConfig), positional=("baseline", "runs"))
        replicates = replicate_runs(cfg)
    except PairingError as e:
        raise UserError(str(e)) from e
    print(json.dumps(replicates.to_json(), indent=2) if cfg.json else format_replicates_report(replicates))
    return EXIT_OK


# ---------------------------------------------------------------------------- bench-suite
def cmd_bench_suite_list(args: argparse.Namespace) -> int:
    from vlagym.cli.envs import text_table
    from vlagym.eval.suites import get_suite, list_suites

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
    print(text_table(rows))
    return EXIT_OK


def cmd_bench_suite_show(args: argparse.Namespace) -> int:
    from vlagym.eval.suites import SuiteError, format_protocol, get_suite

    try:
        protocol = get_suite(args.name)
    except SuiteError as e:
        raise UserError(str(e)) from e
    print(json.dumps(protocol.to_dict(), indent=2) if args.json else format_protocol(protocol))
    return EXIT_OK


# ---------------------------------------------------------------------------- the parsers
def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="success rates of a policy (Wilson 95%% intervals), or a whole benchmark protocol (--suite)",
        description="Evaluate a checkpoint (or the scripted expert) on fixed seeds: episode i of every task runs "
        "from seed BASE + i. With --suite NAME the protocol fixes tasks, splits, seeds and env settings and the "
        "run writes one results bundle.",
    )
    add_options(p, EvalConfig)
    add_options(p, SuiteRunConfig, skip=_fields(EvalConfig))
    p.set_defaults(handler=cmd_eval, config=eval_config)
    p = sub.add_parser(
        "curve",
        help="test curve of a training run: every checkpoint on the same seeds",
        description="Evaluate every checkpoint of a run (and the checkpoint it started from) on the same seeds: "
        "success vs env steps and minutes, paired lifts (curve.json, .md, .png).",
    )
    add_options(p, CurveConfig, positional=("run",))
    p.add_argument(
        "--no-start",
        dest="include_start",
        action="store_false",
        default=argparse.SUPPRESS,
        help="same as --no-include-start",
    )
    p.set_defaults(handler=cmd_curve, config=curve_config)
    p = sub.add_parser(
        "report",
        help="one self-contained HTML page of a results bundle",
        description="Write BUNDLE/report.html: tables, heatmap, failure taxonomy, language controls, fingerprint "
        "and embedded episode videos in one file (suite runs write it already; this rewrites it).",
    )
    p.add_argument("bundle", help="bundle folder (or its bundle.json)")
    p.set_defaults(handler=cmd_report)
    p = sub.add_parser(
        "compare",
        help="paired comparison of two runs (A - B with a 95%% CI, McNemar's test)",
        description="Paired comparison of two runs of the same protocol on identical episodes.",
    )
    add_options(p, CompareConfig, positional=("a", "b"))
    p.set_defaults(handler=cmd_compare)
    p = sub.add_parser(
        "replicates",
        help="replicate runs against one baseline: per run, and the mean with a t interval across runs",
        description="Replicate runs of one recipe against one baseline: each run paired with the baseline, then "
        "the mean difference with Student's t interval across the runs.",
    )
    add_options(p, ReplicatesConfig, positional=("baseline", "runs"))
    p.set_defaults(handler=cmd_replicates)
    p = sub.add_parser("bench-suite", help="the benchmark protocols", description="The benchmark protocols.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(p))
    a = actions.add_parser("list", help="every suite: version, tasks, splits, episodes")
    a.set_defaults(handler=cmd_bench_suite_list)
    a = actions.add_parser("show", help="one protocol in full: tasks, horizons, splits, seeds, success, chunks")
    a.add_argument("name", help="suite name (see `vlagym bench-suite list`)")
    a.add_argument("--json", action="store_true", help="print the protocol as JSON")
    a.set_defaults(handler=cmd_bench_suite_show)
