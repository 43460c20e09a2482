"""Command-line options generated from a config dataclass: one flag per field, its docstring as the help.

    add_options(parser, BCConfig)                 # --steps N, --lr X, --no-augment, --dataset A B ...
    values = option_values(args, BCConfig)        # {field: value} of the flags the user gave
    cfg = BCConfig(**values)

Field types map to flags: ``bool`` → ``--x`` / ``--no-x``; ``int``, ``float``, ``str`` (and ``X | None``) →
``--x VALUE``; ``list[...]`` / ``tuple[..., ...]`` → ``--x V [V ...]`` (``--x [V ...]`` where the field's
metadata holds `vlagym.config.EMPTY_FLAG`); ``dict`` → ``--x JSON`` (a JSON object); a nested `Config` → its own
fields' flags (prefixed with the field name where a name would clash).
Only the flags a user gives reach the config, so its own defaults (shown in the help) stay the single
source of truth.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from typing import Any, Union

from vlagym.config import EMPTY_FLAG, Config, field_docs

UNSET = argparse.SUPPRESS  # an option the user did not give leaves no attribute on the namespace


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _strip_optional(tp: Any) -> Any:
    """The type inside ``X | None`` (other types as they are)."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e.msg}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object like '{{\"key\": 1}}', got {text!r}")
    return value


def _scalar(tp: Any) -> Any:
    """The argparse `type=` of a scalar annotation."""
    if tp in (int, float, str):
        return tp
    if typing.get_origin(tp) is typing.Literal:
        return type(typing.get_args(tp)[0])
    return str


def _default_text(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if isinstance(value, bool) or value is None:
        return "" if value in (False, None) else "on"
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value)) if value else ""
    if isinstance(value, dict):
        return json.dumps(value) if value else ""
    return str(value)


def _help(doc: str, field: dataclasses.Field) -> str:
    default = _default_text(field)
    text = doc.replace("%", "%%")
    return f"{text} (default: {default})" if default and default != "required" else text


def add_options(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    skip: typing.Collection[str] = (),
    positional: typing.Sequence[str] = (),
    aliases: dict[str, list[str]] | None = None,
    prefix: str = "",
    outer: typing.Collection[str] = (),
) -> None:
    """One option per field of the dataclass `cls` (fields in `positional` become positional arguments, those in
    `skip` get none; ``"bc.out"`` skips the field `out` of the nested config `bc`).

    A nested config's fields get flags of their own name, or ``--<field>-<name>`` where the enclosing config
    (`outer`) has a field of that name.
    """
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    aliases = aliases or {}
    fields = [f for f in dataclasses.fields(cls) if f.name not in skip and f.init]
    for f in fields:
        tp = _strip_optional(hints[f.name])
        if isinstance(tp, type) and issubclass(tp, Config):
            names = {g.name for g in dataclasses.fields(cls)}
            inner = {s.removeprefix(f"{f.name}.") for s in skip if s.startswith(f"{f.name}.")}
            add_options(parser, tp, skip=inner, prefix=f"{prefix}{f.name}.", outer=names)
            continue
        dest = f"{prefix}{f.name}"
        name = f"{prefix[:-1].replace('.', '_')}_{f.name}" if f.name in outer else f.name
        kwargs: dict[str, Any] = {"dest": dest, "help": _help(docs.get(f.name, ""), f), "default": UNSET}
        if f.name in positional:
            kwargs.pop("dest")
            parser.add_argument(dest, metavar=f.name.upper(), **_type_kwargs(tp), **kwargs)
            continue
        flags = [flag(name), *aliases.get(f.name, [])]
        if tp is bool:
            parser.add_argument(*flags, action=argparse.BooleanOptionalAction, **kwargs)
        else:
            type_kwargs = _type_kwargs(tp)
            if f.metadata.get(EMPTY_FLAG) and type_kwargs.get("nargs") == "+":
                type_kwargs["nargs"] = "*"  # the flag alone: an empty sequence
            parser.add_argument(*flags, metavar=_metavar(tp, f.name), **type_kwargs, **kwargs)


def _type_kwargs(tp: Any) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if origin in (list, tuple, typing.Sequence):
        inner = typing.get_args(tp)[0] if typing.get_args(tp) else str
        return {"type": _scalar(inner), "nargs": "+"}
    if origin is dict or tp is dict:
        return {"type": _json_object}
    if origin is typing.Literal:
        return {"type": _scalar(tp), "choices": list(typing.get_args(tp))}
    return {"type": _scalar(tp)}


def _metavar(tp: Any, name: str) -> str:
    origin = typing.get_origin(tp)
    if origin is dict or tp is dict:
        return "JSON"
    if origin in (list, tuple, typing.Sequence):
        tp = typing.get_args(tp)[0] if typing.get_args(tp) else str
    return {int: "N", float: "X"}.get(tp, name.rsplit("_", 1)[-1].upper())


def option_values(args: argparse.Namespace, cls: type, prefix: str = "") -> dict[str, Any]:
    """{field: value} of the options of `cls` the user gave (nested configs as dicts of theirs)."""
    hints = typing.get_type_hints(cls)
    given = vars(args)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tp = _strip_optional(hints[f.name])
        if isinstance(tp, type) and issubclass(tp, Config):
            nested = option_values(args, tp, prefix=f"{prefix}{f.name}.")
            if nested:
                values[f.name] = nested
        elif f"{prefix}{f.name}" in given:
            value = given[f"{prefix}{f.name}"]
            values[f.name] = tuple(value) if typing.get_origin(tp) is tuple else value
    return values
