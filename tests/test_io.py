"""Atomic writers: the new content or the old one, never a part, and no temp file left behind."""

from __future__ import annotations

import numpy as np
import pytest

from vlagym.io import atomic_write_bytes, atomic_write_json, atomic_write_npz, atomic_write_text


class _Unsaveable:
    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("cannot be an array")


def test_writers_replace_the_file_and_leave_no_temp(tmp_path):
    atomic_write_bytes(tmp_path / "a.png", b"\x89PNG one")
    atomic_write_bytes(tmp_path / "a.png", b"two")
    assert (tmp_path / "a.png").read_bytes() == b"two"
    atomic_write_text(tmp_path / "b.md", "x")
    assert atomic_write_json(tmp_path / "c.json", {"k": [1]}).read_text() == '{\n  "k": [\n    1\n  ]\n}\n'
    path = atomic_write_npz(tmp_path / "sub" / "d.npz", {"x": np.arange(3), "y/z": np.ones((2, 2))}, compressed=True)
    with np.load(path) as z:
        assert sorted(z.files) == ["x", "y/z"] and z["x"].tolist() == [0, 1, 2]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.png", "b.md", "c.json", "d.npz", "sub"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = atomic_write_npz(tmp_path / "d.npz", {"x": np.arange(3)})
    with pytest.raises(RuntimeError, match="cannot be an array"):
        atomic_write_npz(path, {"x": np.zeros(2), "bad": _Unsaveable()})
    with np.load(path) as z:
        assert z["x"].tolist() == [0, 1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["d.npz"]
