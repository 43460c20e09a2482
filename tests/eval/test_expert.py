"""Expert evaluation helpers: the Wilson interval and the outcome runner."""

from __future__ import annotations

from vlagym.eval.expert import expert_outcomes, wilson_interval


def test_wilson_interval_known_values():
    lo, hi = wilson_interval(200, 200)
    assert hi == 1.0 and abs(lo - 200 / (200 + 1.96**2)) < 1e-9
    lo, hi = wilson_interval(50, 100)
    assert abs(lo - 0.4038) < 1e-3 and abs(hi - 0.5962) < 1e-3
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_expert_outcomes_are_deterministic_per_seed():
    a = expert_outcomes("VLA-PickCup-v0", [0, 1, 2])
    assert a == expert_outcomes("VLA-PickCup-v0", [0, 1, 2]) and a == [True, True, True]
    # Five steps are too few to reach, grasp and lift: the runner reports failures too.
    assert expert_outcomes("VLA-PickCup-v0", [0], max_episode_steps=5) == [False]
