"""`vlagym demos` and `vlagym dataset info|check|export|split-subtasks`: scripted demonstrations, their checks,
export and stages."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vlagym.cli.common import EXIT_OK, EXIT_PROBLEMS, UserError, add_options, build, check_task, config_from_args
from vlagym.cli.options import option_values
from vlagym.train.configs import CONFIG_SUFFIX, DemoConfig
from vlagym.train.lerobot.format import DatasetExportConfig


def demo_config(args: argparse.Namespace) -> DemoConfig:
    """The `DemoConfig` of `vlagym demos` options; ``--split`` and ``--instruction-split`` are shorthands that
    merge into its env kwargs."""
    from vlagym.envs.constants import INSTRUCTION_SPLITS
    from vlagym.envs.splits import SPLITS

    for name, value, choices in (
        ("--split", args.split, SPLITS),
        ("--instruction-split", args.instruction_split, INSTRUCTION_SPLITS),
    ):
        if value is not None and value not in choices:
            raise UserError(f"{name} must be one of {list(choices)}, got {value!r}")
    values = option_values(args, DemoConfig)
    values["task"] = check_task(values.get("task", ""))
    env_kwargs = dict(values.get("env_kwargs", {}))
    env_kwargs.setdefault("split", args.split)
    if args.instruction_split is not None:
        env_kwargs.setdefault("instruction_split", args.instruction_split)
    values["env_kwargs"] = env_kwargs
    return build(DemoConfig, values)


def cmd_demos(args: argparse.Namespace) -> int:
    from vlagym.train.demos import DemoError, collect_demos

    cfg = demo_config(args)
    try:
        if cfg.policy is None:
            summary = collect_demos(cfg)
        else:
            from vlagym.eval.dagger import collect_dagger_demos

            summary = collect_dagger_demos(cfg)
    except DemoError as e:
        raise UserError(str(e)) from e
    dropped = "kept" if cfg.keep_failures else "dropped"
    actor = "" if cfg.policy is None else " (the policy acting)"
    cut = f", {summary.cut_short} of them cut where the expert could not go on" if summary.cut_short else ""
    print(
        f"wrote {summary.path}: {summary.demos} demos, {summary.steps} steps, {summary.file_bytes / 1e6:.1f} MB; "
        f"this run: {summary.episodes} episodes from episode {summary.first_episode}, "
        f"{summary.successes} successful{actor}, "
        f"{summary.failures} failed ({dropped}){cut}, {summary.seconds:.1f} s; config: {summary.path}{CONFIG_SUFFIX}"
    )
    return EXIT_OK


def _demo_file(file: str) -> Path:
    path = Path(file)
    if not path.exists():
        raise UserError(f"{file}: no such file")
    if path.is_dir():
        raise UserError(f"{file} is a folder, not a demo file")
    return path


def cmd_dataset_info(args: argparse.Namespace) -> int:
    from vlagym.train.validate import DatasetError, dataset_info, format_info

    _demo_file(args.file)
    try:
        info = dataset_info(args.file)
    except DatasetError as e:  # a broken file is a finding, as for `check`: exit code 1
        print(f"vlagym dataset info: error: {e}", file=sys.stderr)
        return EXIT_PROBLEMS
    print(json.dumps(info, indent=2) if args.json else format_info(info))
    return EXIT_OK


def cmd_dataset_check(args: argparse.Namespace) -> int:
    from vlagym.train.validate import check_dataset

    _demo_file(args.file)
    problems = check_dataset(args.file)
    if problems:
        print(f"{args.file}: {len(problems)} problem(s)")
        for problem in problems:
            print(f"  - {problem}")
        return EXIT_PROBLEMS
    print(f"{args.file}: ok")
    return EXIT_OK


def export_config(args: argparse.Namespace) -> DatasetExportConfig:
    return config_from_args(DatasetExportConfig, args, positional=("file",))


def cmd_dataset_export(args: argparse.Namespace) -> int:
    from vlagym.train.lerobot.export import export_lerobot

    cfg = export_config(args)
    _demo_file(cfg.file)
    try:
        s = export_lerobot(cfg)
    except ValueError as e:  # LeRobotError, or a file that is not a vlagym demo file
        raise UserError(str(e)) from e
    print(
        f"wrote {s.out}: LeRobot v3.0, {s.episodes} episodes, {s.frames} frames, {s.tasks} tasks, "
        f"video {s.codec}, {s.bytes / 1e6:.2f} MB in {s.seconds:.1f} s"
    )
    return EXIT_OK


def cmd_dataset_split_subtasks(args: argparse.Namespace) -> int:
    from vlagym.train.subtasks import split_subtasks

    _demo_file(args.file)
    try:
        s = split_subtasks(args.file, args.out, overwrite=args.overwrite)
    except (OSError, ValueError) as e:  # FileExistsError, a file that is not a demo file, a task without state
        raise UserError(str(e)) from e
    print(
        f"wrote {s.path}: {s.episodes} episodes -> {s.written}; {s.subtask_steps} of {s.steps} steps labelled under "
        f"sub-instructions"
    )
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demos",
        help="collect scripted-expert demonstrations (HDF5)",
        description="Run the task's scripted expert in vectorised envs and write the episodes to one HDF5 file in "
        "the robomimic/LIBERO layout (its config JSON beside it); resumable.",
    )
    add_options(p, DemoConfig)
    p.add_argument("--split", default="train", help='shorthand for env kwargs {"split": ...} (default: train)')
    p.add_argument("--instruction-split", default=None, help='shorthand for env kwargs {"instruction_split": ...}')
    p.set_defaults(handler=cmd_demos, config=demo_config)

    p = sub.add_parser(
        "dataset", help="inspect, check or export a demo file", description="Inspect, check or export a demo file."
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(p))
    a = actions.add_parser("info", help="readable summary: episodes, steps, tasks, instructions, actions, obs")
    a.add_argument("file", help="demo file (.hdf5)")
    a.add_argument("--json", action="store_true", help="print the summary as JSON")
    a.set_defaults(handler=cmd_dataset_info)
    a = actions.add_parser("check", help="check the file against the demo layout (exit code 1 on problems)")
    a.add_argument("file", help="demo file (.hdf5)")
    a.set_defaults(handler=cmd_dataset_check)
    a = actions.add_parser(
        "export",
        help="write a demo file as a LeRobot dataset v3.0 folder (parquet + mp4; docs/lerobot.md)",
        description="Write a demo file as a LeRobot dataset v3.0 folder: parquet tables of the low-dim data, one mp4 "
        "stream per camera (PyAV). Written beside OUT and renamed into place.",
    )
    add_options(a, DatasetExportConfig, positional=("file",))
    a.set_defaults(handler=cmd_dataset_export, config=export_config)
    a = actions.add_parser(
        "split-subtasks",
        help="cut each episode into its task's stages, each told its sub-instruction (VLAConfig.subtasks)",
        description="Write the demo file with each episode cut at its task's stages (PutCupInDrawer: opening the "
        "drawer, told OpenDrawer's 'open the drawer'; then the rest, told the episode's own instruction), the "
        "original instruction kept as task_instruction. train-bc on such files gives the VLA a head that picks "
        "the sub-instruction to act on (docs/multitask.md). Written beside OUT and renamed into place.",
    )
    a.add_argument("file", help="demo file (.hdf5) with the privileged state (obs/state)")
    a.add_argument("--out", required=True, help="the split demo file to write")
    a.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    a.set_defaults(handler=cmd_dataset_split_subtasks)
