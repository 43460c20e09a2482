"""What every command module shares: exit codes, the user-error type, building a config from the options."""

from __future__ import annotations

import argparse
import difflib
from typing import Any, TypeVar

from vlagym.cli.options import add_options, flag, option_values

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # as a shell reports a process killed by SIGPIPE (128 + 13)

T = TypeVar("T")


class UserError(Exception):
    """Bad input from the user: reported as one line on stderr, exit code 2."""


def check_task(task: str) -> str:
    """The registered vlagym id for `task` (a leading "vlagym:" is accepted), else a `UserError`."""
    import vlagym

    env_id = task.removeprefix("vlagym:")
    if env_id not in vlagym.TASKS:
        hint = difflib.get_close_matches(env_id, list(vlagym.TASKS), n=1)
        did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise UserError(f"unknown task {task!r}{did_you_mean}; known tasks: {', '.join(sorted(vlagym.TASKS))}")
    return env_id


def build(cls: type[T], values: dict[str, Any], positional: tuple[str, ...] = ()) -> T:
    """``cls(**values)``; a value the config rejects (its `__post_init__` raises) becomes a `UserError` that names
    the flag (or, for the fields in `positional`, the argument) at fault."""
    try:
        return cls.from_dict(values) if hasattr(cls, "from_dict") else cls(**values)  # type: ignore[attr-defined]
    except (ValueError, TypeError) as e:
        raise UserError(_flag_names(str(e), {k: v for k, v in values.items() if k not in positional})) from e


def config_from_args(cls: type[T], args: argparse.Namespace, positional: tuple[str, ...] = ()) -> T:
    """The config of the options the user gave (the config's defaults for the rest)."""
    return build(cls, option_values(args, cls), positional)


def _flag_names(message: str, values: dict[str, Any]) -> str:
    # Config errors name fields ("steps must be ..."); on the command line the user knows them as flags.
    head, sep, rest = message.partition(" ")
    if not sep or head not in values or flag(head) in message:  # not a field's error, or it names the flag already
        return message
    return f"{flag(head)} {rest}"


__all__ = [
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PROBLEMS",
    "EXIT_USAGE",
    "UserError",
    "add_options",
    "build",
    "check_task",
    "config_from_args",
]
