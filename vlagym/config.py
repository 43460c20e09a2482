"""What every config dataclass shares: a JSON round trip and the field docstrings the CLI shows.

Configs are plain dataclasses whose fields carry a docstring on the line below them (the convention of
Python's own docs and of tyro/simple-parsing). Reading those docstrings needs the class's source, not an
import of anything heavy, so `vlagym X --help` stays fast.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
import typing
from typing import Any, TypeVar

C = TypeVar("C", bound="Config")

#: field metadata: a sequence field whose command-line flag may be given without values (an empty sequence), e.g.
#: to turn off a non-empty default: ``field(default=("wrist",), metadata={EMPTY_FLAG: True})``
EMPTY_FLAG = "flag_may_be_empty"


class Config:
    """Mixin of a config dataclass: `to_dict` / `from_dict` (nested dataclass fields rebuilt, unknown keys raise)."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (nested configs as dicts, tuples as lists after JSON)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], d: dict[str, Any]) -> C:
        """Inverse of `to_dict`; an unknown field raises, listing the known ones."""
        if not isinstance(d, dict):
            raise ValueError(f"{cls.__name__} must be given as a JSON object, got {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {unknown}; known fields: {sorted(known)}")
        hints = typing.get_type_hints(cls)
        values = dict(d)
        for name, value in d.items():
            nested = hints.get(name)
            if isinstance(value, dict) and isinstance(nested, type) and issubclass(nested, Config):
                values[name] = nested.from_dict(value)
        return cls(**values)


def nested_config(name: str, value: Any, cls: type[C]) -> C:
    """A nested config field's value as a `cls`: given as one, or as its dict; a `ValueError` naming `name`
    otherwise."""
    if isinstance(value, dict):
        value = cls.from_dict(value)
    if not isinstance(value, cls):
        raise ValueError(f"{name} must be a {cls.__name__} or its dict, got {value!r}")
    return value


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """{field name: its docstring} of a dataclass and its bases, read from the source (empty where none)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # built in a REPL or from a zip: no source to read
            continue
        body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
        for node, after in zip(body, body[1:], strict=False):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                    if isinstance(after.value.value, str):
                        docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs
