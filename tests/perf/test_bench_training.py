"""Rates read from a training run's log leave its start-up out."""

from __future__ import annotations

import pytest

from vlagym.perf.training import steady_rate


def test_steady_rate_leaves_out_the_start():
    # 10 samples per step: steps 1..3 took 1 s, 1.5 s, 2 s since the start -> 20 samples/s after step 1
    points = [(1, 10 / 1.0), (2, 20 / 1.5), (3, 30 / 2.0)]
    assert steady_rate(points, per_step=10) == pytest.approx(20.0)
