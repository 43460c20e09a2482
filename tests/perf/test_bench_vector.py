"""The vector section interleaves its configurations and takes ratios within a pass."""

from __future__ import annotations

import pytest

from vlagym.perf import vector as vector_section
from vlagym.perf.config import BenchConfig
from vlagym.perf.work import Work

TASK = "VLA-PickCup-v0"


def test_vector_section_interleaves_and_takes_ratios_within_a_pass(monkeypatch, tmp_path):
    # a fake machine whose speed drifts from pass to pass; interleaved, each pass sees one speed for every
    # configuration, so the per-pass ratios are exact and the median rate is the middle speed's
    configs = vector_section.vector_configs((2, 8, 16))
    true = {config: 100.0 + 10 * i for i, config in enumerate(configs)}
    per_pass = len(true) * 2  # state and rgb
    speed = [1.0, 0.5, 3.0]
    calls: list[tuple[str, str, int]] = []

    def fake_rate(task, mode, num_envs, steps, **kwargs):
        calls.append((kwargs["obs_mode"], mode, num_envs))
        return true[mode, num_envs] * speed[(len(calls) - 1) // per_pass]

    monkeypatch.setattr(vector_section, "vector_steps_per_s", fake_rate)
    cfg = BenchConfig(sections=["vector"], tasks=[TASK], out=None, repeats=3)
    table = vector_section.bench_vector(cfg, Work(cfg, tmp_path))

    one_pass = [(obs, mode, n) for obs in ("state", "rgb") for mode, n in configs]
    assert calls == one_pass * 3
    assert [(r["obs"], r["mode"], r["num_envs"]) for r in table.rows] == one_pass
    for row in table.rows:
        mode, n = row["mode"], row["num_envs"]
        assert row["steps_per_s"] == pytest.approx(true[mode, n])
        assert row["samples"]["steps_per_s"] == pytest.approx([true[mode, n] * s for s in speed])
        assert row["x_sync_1"] == pytest.approx(true[mode, n] / true["sync", 1])
        assert row["samples"]["x_sync_1"] == pytest.approx([true[mode, n] / true["sync", 1]] * 3)
    assert "median of 3 interleaved passes" in " ".join(table.notes)
