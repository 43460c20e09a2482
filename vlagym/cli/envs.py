"""`vlagym list` and `vlagym video`: the tasks, and a task's scripted expert on video."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from vlagym.cli.common import EXIT_OK, UserError, add_options, check_task, config_from_args
from vlagym.config import Config
from vlagym.eval.expert_video import VideoConfig


@dataclass
class ListConfig(Config):
    """Options of `vlagym list`."""

    markdown: bool = False
    """print a Markdown table instead of aligned plain text"""


def text_table(rows: list[dict[str, str]], markdown: bool = False) -> str:
    """Rows of equal keys as an aligned text table (or a Markdown table)."""
    if not rows:
        return "(none)"
    keys = list(rows[0])
    if markdown:
        lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
        lines += ["| " + " | ".join(r[k] for k in keys) + " |" for r in rows]
        return "\n".join(lines)
    widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in keys}
    lines = ["  ".join(k.upper().ljust(widths[k]) for k in keys).rstrip()]
    lines += ["  ".join(r[k].ljust(widths[k]) for k in keys).rstrip() for r in rows]
    return "\n".join(lines)


def cmd_list(args: argparse.Namespace) -> int:
    from vlagym.envs.catalog import task_rows

    cfg = config_from_args(ListConfig, args)
    print(text_table(task_rows(), markdown=cfg.markdown))
    return EXIT_OK


def cmd_video(args: argparse.Namespace) -> int:
    from vlagym.eval.expert_video import record_expert_video

    check_task(args.task)
    cfg = config_from_args(VideoConfig, args, positional=("task",))
    try:
        record = record_expert_video(cfg)
    except OSError as e:
        raise UserError(f"cannot write {cfg.out!r}: {e.strerror or e}") from e
    for i, ep in enumerate(record["episodes"]):
        outcome = "success" if ep["success"] else "failure"
        print(f"episode {i} (seed {ep['seed']}): {outcome} in {ep['steps']} steps: {ep['instruction']!r}")
    print(
        f"wrote {cfg.out} ({record['frames']} frames, {record['successes']}/{len(record['episodes'])} successful); "
        f"config: {cfg.out}.json"
    )
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="list the registered tasks", description="List the registered vlagym tasks.")
    add_options(p, ListConfig)
    p.set_defaults(handler=cmd_list)
    p = sub.add_parser(
        "video",
        help="record the scripted expert solving a task (mp4)",
        description="Run the scripted expert for a few episodes and write them to one mp4 (its record as JSON "
        "beside it).",
    )
    add_options(p, VideoConfig, positional=("task",))
    p.set_defaults(handler=cmd_video)
