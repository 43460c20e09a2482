"""The instruction space: a `gymnasium.spaces.Text` that survives shared memory.

Gymnasium's `AsyncVectorEnv` (with its default `shared_memory=True`) reads the
shared observation buffer once, at construction, and relies on NumPy views to
see later steps. Strings are decoded at that read, so every later batch repeats
the strings of the empty buffer — the instruction silently turns into padding
(Gymnasium 1.x; their issue #1164 describes the same cause for Dict spaces).

`InstructionSpace` registers its own shared-memory reader (Gymnasium's
single-dispatch extension point for custom spaces) that returns a live,
read-on-access batch. The async env deep-copies observations before returning
them, which turns the live batch into a plain tuple of strings, exactly what
`SyncVectorEnv` returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gymnasium import spaces
from gymnasium.vector.utils.shared_memory import read_from_shared_memory


class InstructionSpace(spaces.Text):
    """A `Text` space for natural-language instructions (see the module docstring)."""


class _LiveTextBatch(Sequence):
    """The strings currently in a shared-memory text buffer, decoded on access."""

    def __init__(self, space: spaces.Text, shared_memory: Any, n: int):
        self._space, self._memory, self._n = space, shared_memory, n

    def _read(self) -> tuple[str, ...]:
        return _read_text(self._space, self._memory, self._n)

    def __getitem__(self, index):
        return self._read()[index]

    def __len__(self) -> int:
        return self._n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self._read()) == tuple(other)

    __hash__ = None  # type: ignore[assignment]  # mutable view

    def __repr__(self) -> str:
        return repr(self._read())

    def __copy__(self) -> tuple[str, ...]:
        return self._read()

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return self._read()


_read_text = read_from_shared_memory.dispatch(spaces.Text)


@read_from_shared_memory.register(InstructionSpace)
def _read_instruction_shared_memory(space: InstructionSpace, shared_memory: Any, n: int = 1) -> _LiveTextBatch:
    return _LiveTextBatch(space, shared_memory, n)
