"""Interleaved passes run pass by pass; a cell is the median of its passes, every pass kept."""

from __future__ import annotations

from vlagym.perf.timing import interleaved, summarise


def test_interleaved_runs_pass_by_pass_in_order():
    calls: list[str] = []

    def measure(name: str):
        def run() -> str:
            calls.append(name)
            return f"{name}{calls.count(name)}"

        return run

    samples = interleaved({n: measure(n) for n in ("a", "b", "c")}, repeats=3)
    assert calls == ["a", "b", "c"] * 3  # pass 1 of every measurement, then pass 2, ...
    assert samples == {"a": ["a1", "a2", "a3"], "b": ["b1", "b2", "b3"], "c": ["c1", "c2", "c3"]}


def test_summarise_takes_medians_and_keeps_every_pass():
    row = summarise({"rate": [30.0, 10.0, 20.0, 1000.0], "x": [1.0, 3.0, 2.0]})
    assert row["rate"] == 25.0 and row["x"] == 2.0  # the median, not the mean (265 and 2)
    assert row["samples"] == {"rate": [30.0, 10.0, 20.0, 1000.0], "x": [1.0, 3.0, 2.0]}
