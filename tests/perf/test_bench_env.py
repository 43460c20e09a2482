"""The env section alternates state and rgb passes and reports medians, every pass kept."""

from __future__ import annotations

import pytest

from vlagym.perf import env as env_section

TASK = "VLA-PickCup-v0"


def test_env_task_alternates_state_and_rgb_passes(monkeypatch):
    calls: list[str] = []
    state_rates, rgb_rates = iter([300.0, 100.0, 200.0]), iter([30.0, 10.0, 20.0])

    def fake_state(env, steps, rounds):
        calls.append("state")
        rate = next(state_rates)
        return {
            "state_steps_per_s": rate,
            "raw_physics_steps_per_s": rate * 1.5,
            "env_over_physics": 1.5,
            "reset_state_ms": 1000 / rate,
            "replay_identical": len(calls) != 3,  # one pass's replay differs: the row must say so
        }

    def fake_rgb(env, steps):
        calls.append("rgb")
        return {"rgb_steps_per_s": next(rgb_rates), "reset_rgb_ms": 2.0}

    monkeypatch.setattr(env_section, "state_pass", fake_state)
    monkeypatch.setattr(env_section, "rgb_pass", fake_rgb)
    row = env_section.bench_task(TASK, steps=40, rounds=2, image_size=16, repeats=3)
    assert calls == ["state", "rgb"] * 3
    assert row["state_steps_per_s"] == 200.0 and row["raw_physics_steps_per_s"] == 300.0
    assert row["rgb_steps_per_s"] == 20.0 and row["reset_state_ms"] == pytest.approx(5.0)
    assert row["samples"]["state_steps_per_s"] == [300.0, 100.0, 200.0]
    assert row["replay_identical"] is False
