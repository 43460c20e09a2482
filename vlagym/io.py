"""Small file helpers shared by every part that writes: nothing is ever half-written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def temp_path(path: Path) -> Path:
    """A hidden sibling of `path` (same folder, so `os.replace` is atomic) that keeps its suffix.

    Not `mkstemp`: that creates the file mode 0600, and outputs should get the user's usual permissions.
    """
    return path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write `text` (UTF-8) to `path` via a temp file and `os.replace`: readers see the old or the new file, never a
    part."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """`data` written to `path` via a temp file and `os.replace`: readers see the old or the new file, never a
    part."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_npz(path: str | os.PathLike, arrays: dict[str, Any], compressed: bool = False) -> Path:
    """`arrays` as one ``.npz`` (`numpy.savez`, or `numpy.savez_compressed`), written atomically; the parent folder
    is made when missing."""
    import numpy as np

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:  # a file object: savez would append ".npz" to a name without it
            (np.savez_compressed if compressed else np.savez)(f, **arrays)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int = 2) -> Path:
    """`obj` as JSON (plus a final newline), written atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=indent) + "\n")


def file_sha256(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
