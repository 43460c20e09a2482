"""The `vlagym` command line: one sub-command per job, its options generated from the job's config dataclass.

    vlagym list | video TASK                      the tasks; an mp4 of a task's scripted expert
    vlagym demos | dataset info|check FILE        scripted demonstrations (HDF5) and their checks
    vlagym train-bc | train-fbc | train-rl        behaviour cloning, filtered-BC and PPO post-training
    vlagym quickstart                             the main job: demos -> BC -> DAgger round -> evaluation
    vlagym eval | curve | report | compare | replicates | bench-suite
                                                  success rates, test curves, results bundles, statistics
    vlagym bench                                  speed benchmarks
    vlagym export                                 a checkpoint's acting path as ONNX

Each command module (`envs`, `data`, `train`, `evaluation`, `perf`) adds its sub-commands and runs them; the
work is done by the library. Building the parser imports only config modules, never torch or mujoco, so
``--help`` is quick. Bad input prints one line on stderr and exits with code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from vlagym.cli import data, deploy, envs, evaluation, perf, train
from vlagym.cli.common import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, UserError

MODULES = (train, envs, data, evaluation, perf, deploy)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``vlagym eval: error: ... (see vlagym eval --help)``."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every sub-command (each sets ``args.handler``)."""
    import vlagym

    parser = Parser(
        prog="vlagym", description="Language-conditioned MuJoCo manipulation tasks and the VLA loop around them."
    )
    parser.add_argument("--version", action="version", version=f"vlagym {vlagym.__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for module in MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `vlagym` console script; returns the process exit code."""
    parser = build_parser()
    argv = train.forward_deprecated(sys.argv[1:] if argv is None else argv)
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
        code = args.handler(args)
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


def parse_config(argv: Sequence[str]) -> object:
    """The config a command line would run with, without running it (`UserError` on bad input)."""
    args = build_parser().parse_args(train.forward_deprecated(argv))
    return args.config(args)


__all__ = ["EXIT_OK", "EXIT_PROBLEMS", "EXIT_USAGE", "UserError", "build_parser", "main", "parse_config"]
