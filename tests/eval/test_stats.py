"""Success-rate statistics: Wilson intervals, McNemar's exact test, verdicts, suite bootstrap, sequential stopping."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vlagym.eval import stats
from vlagym.eval.stats import (
    A_BETTER,
    B_BETTER,
    NO_DIFFERENCE,
    PairingError,
    bootstrap_suite_mean,
    can_stop,
    compare_outcomes,
    mcnemar_exact,
    paired_difference_interval,
    paired_test,
    suite_mean,
    verdict,
    wilson_interval,
)

Z2 = 1.96**2


# ---------------------------------------------------------------------------- Wilson
def test_wilson_matches_published_values_and_closed_forms():
    lo, hi = wilson_interval(8, 10)  # the textbook example: 8/10 -> [0.490, 0.943]
    assert lo == pytest.approx(0.49016, abs=1e-5) and hi == pytest.approx(0.94332, abs=1e-5)
    assert wilson_interval(10, 10) == (pytest.approx(10 / (10 + Z2)), 1.0)  # p = 1: [n / (n + z^2), 1]
    assert wilson_interval(0, 10) == (0.0, pytest.approx(Z2 / (10 + Z2)))
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(1 - hi)  # symmetric around 1/2
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(11, 10)


def test_wilson_is_still_importable_from_the_expert_module():
    from vlagym.eval.expert import wilson_interval as old

    assert old is stats.wilson_interval


# ---------------------------------------------------------------------------- McNemar
@pytest.mark.parametrize(
    "a_only, b_only, p",
    [
        (0, 6, 0.03125),  # 2 * (1/2)^6
        (0, 5, 0.0625),  # 2 * (1/2)^5: five one-sided wins are not enough at 0.05
        (2, 8, 0.109375),  # 2 * (1 + 10 + 45) / 2^10
        (1, 9, 0.021484375),  # 2 * (1 + 10) / 2^10
        (0, 0, 1.0),
        (3, 3, 1.0),  # the two tails overlap: capped at 1
        (4, 5, 1.0),
    ],
)
def test_mcnemar_exact_matches_hand_computed_values(a_only, b_only, p):
    assert mcnemar_exact(a_only, b_only) == pytest.approx(p, rel=1e-12)
    assert mcnemar_exact(b_only, a_only) == mcnemar_exact(a_only, b_only)  # symmetric


def test_mcnemar_handles_large_counts_and_rejects_negative_ones():
    assert 0 <= mcnemar_exact(0, 3000) < 1e-300
    assert mcnemar_exact(1500, 1500) == 1.0
    assert mcnemar_exact(480, 520) == pytest.approx(0.2178, abs=1e-3)  # normal approximation: 2 Phi(-1.23)
    with pytest.raises(ValueError, match="non-negative"):
        mcnemar_exact(-1, 3)


def test_verdicts():
    assert verdict(6, 0, 0.03125) == A_BETTER
    assert verdict(0, 6, 0.03125) == B_BETTER
    assert verdict(5, 0, 0.0625) == NO_DIFFERENCE
    assert verdict(6, 0, 0.03125, alpha=0.01) == NO_DIFFERENCE
    assert verdict(6, 0, 0.05) == NO_DIFFERENCE  # p must be below alpha


def test_paired_test_counts_discordant_episodes():
    a = [True] * 10 + [False] * 4 + [True] * 6
    b = [False] * 10 + [False] * 4 + [True] * 6
    t = paired_test(a, b)
    assert (t.n, t.a_successes, t.b_successes, t.a_only, t.b_only) == (20, 16, 6, 10, 0)
    assert t.difference == pytest.approx(0.5) and t.a_rate == 0.8 and t.b_rate == 0.3
    assert t.p_value == pytest.approx(2 / 2**10) and t.verdict == A_BETTER
    assert paired_test(b, a).verdict == B_BETTER and paired_test(b, a).difference == pytest.approx(-0.5)
    assert paired_test(a, a).verdict == NO_DIFFERENCE and paired_test(a, a).p_value == 1.0
    with pytest.raises(ValueError, match="equal lengths"):
        paired_test([True], [True, False])
    lo, hi = t.difference_ci95
    assert (lo, hi) == paired_difference_interval(10, 0, 20) and 0 < lo < 0.5 < hi
    assert paired_test(b, a).difference_ci95 == pytest.approx((-hi, -lo))


def test_paired_difference_interval_shape():
    lo, hi = paired_difference_interval(67, 14, 200)  # 52.5% vs 26.0% on 200 paired episodes
    assert 0 < lo < 0.265 < hi < 1 and hi - lo < 0.2
    assert paired_difference_interval(14, 67, 200) == pytest.approx((-hi, -lo))  # A and B swapped
    assert paired_difference_interval(0, 0, 0) == (-1.0, 1.0)
    assert paired_difference_interval(10, 0, 10)[1] == 1.0  # stays inside [-1, 1]
    lo, hi = paired_difference_interval(0, 0, 10)  # no discordant episode: an interval around 0, not a point
    assert lo == pytest.approx(-hi) and hi > 0.2
    # more episodes, the same discordant shares: a narrower interval
    assert np.ptp(paired_difference_interval(40, 10, 400)) < np.ptp(paired_difference_interval(10, 2, 100))
    for bad in [(-1, 0, 5), (3, 3, 5)]:
        with pytest.raises(ValueError, match="discordant counts"):
            paired_difference_interval(*bad)


@pytest.mark.parametrize(
    "cells, n",
    [
        ((0.3, 0.2, 0.05, 0.45), 200),
        ((0.5, 0.1, 0.1, 0.3), 50),
        ((0.02, 0.05, 0.01, 0.92), 100),
        ((0.1, 0.3, 0.1, 0.5), 30),
    ],
)
def test_paired_difference_interval_coverage(cells, n):
    """Simulated paired tables (both, A only, B only, neither; seeded): the interval holds the true difference
    in about 95% of them (the plain Wald interval's coverage falls to 92-93% on the small-n cases)."""
    rng = np.random.default_rng(0)
    truth = cells[1] - cells[2]
    tables = rng.multinomial(n, cells, size=2000)
    hits = [lo <= truth <= hi for lo, hi in (paired_difference_interval(int(t[1]), int(t[2]), n) for t in tables)]
    assert 0.93 <= np.mean(hits) <= 0.985


def test_compare_outcomes_per_task_and_over_all():
    a = {("T1", "train", s): True for s in range(8)} | {("T2", "train", s): s < 2 for s in range(8)}
    b = {("T1", "train", s): False for s in range(8)} | {("T2", "train", s): s < 3 for s in range(8)}
    tests = compare_outcomes(a, b)
    assert list(tests) == ["T1", "T2", "all"]
    assert (tests["T1"].a_only, tests["T1"].b_only, tests["T1"].verdict) == (8, 0, A_BETTER)
    assert (tests["T2"].a_only, tests["T2"].b_only, tests["T2"].verdict) == (0, 1, NO_DIFFERENCE)
    assert (tests["all"].n, tests["all"].a_only, tests["all"].b_only) == (16, 8, 1)
    assert tests["all"].p_value == pytest.approx(2 * (1 + 9) / 2**9)


def test_compare_outcomes_refuses_different_episodes():
    a = {("T1", "train", s): True for s in range(4)}
    b = {("T1", "train", s): True for s in range(1, 5)}
    with pytest.raises(PairingError, match=r"1 episode\(s\) only in A .*'T1', 'train', 0.*only in B"):
        compare_outcomes(a, b)
    with pytest.raises(PairingError, match="no episodes"):
        compare_outcomes({}, {})


# ---------------------------------------------------------------------------- suite average
TASKS = [
    [[1, 0, 1, 1, 0, 1, 1, 1], [1, 1, 0, 0, 1, 0, 1, 1]],
    [[0, 0, 0, 1, 0, 0, 1, 0], [0, 1, 0, 0, 0, 0, 0, 0]],
    [[1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 1, 1, 1, 1]],
]


def test_suite_mean_weights_every_task_equally():
    assert suite_mean([[[1, 1]], [[0, 0, 0, 0], [1, 1, 1, 1]]]) == pytest.approx((1 + 0.5) / 2)
    assert suite_mean(TASKS) == pytest.approx(np.mean([np.mean([np.mean(c) for c in t]) for t in TASKS]))


def test_bootstrap_is_deterministic_and_contains_the_mean():
    mean, lo, hi = bootstrap_suite_mean(TASKS, samples=500, seed=3)
    assert (mean, lo, hi) == bootstrap_suite_mean(TASKS, samples=500, seed=3)
    assert mean == suite_mean(TASKS)
    assert 0 <= lo < mean < hi <= 1
    assert bootstrap_suite_mean(TASKS, samples=500, seed=4) != (mean, lo, hi)


def test_bootstrap_interval_reflects_task_spread():
    one_task = bootstrap_suite_mean([sum(TASKS, [])], samples=500, seed=0)
    spread = bootstrap_suite_mean(TASKS, samples=500, seed=0)
    # same episodes, but drawing tasks too adds the between-task variance
    assert spread[2] - spread[1] > one_task[2] - one_task[1]


def test_bootstrap_degenerate_cases():
    assert bootstrap_suite_mean([[[1, 1, 1]], [[1, 1]]], samples=50) == (1.0, 1.0, 1.0)
    assert bootstrap_suite_mean([[[0, 0]]], samples=50) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="no tasks"):
        bootstrap_suite_mean([])
    with pytest.raises(ValueError, match="split without episodes"):
        bootstrap_suite_mean([[[1], []]])
    with pytest.raises(ValueError, match="samples"):
        bootstrap_suite_mean(TASKS, samples=0)


# ---------------------------------------------------------------------------- sequential stopping
def test_can_stop_needs_min_episodes_and_a_narrow_interval():
    assert not can_stop(10, 10, target_width=0.5, min_episodes=20)  # too few episodes, however narrow
    assert can_stop(20, 20, target_width=0.2, min_episodes=20)  # 20/20: width 1 - 20 / (20 + z^2) = 0.161
    assert not can_stop(10, 20, target_width=0.2, min_episodes=20)  # 10/20: width ~0.40
    n = next(n for n in range(20, 1000) if can_stop(n // 2, n, target_width=0.2))
    lo, hi = wilson_interval(n // 2, n)
    assert hi - lo <= 0.2 and 90 <= n <= 100  # about (2 * 1.96 * 0.5 / 0.2)^2 = 96 at p = 1/2
    assert math.isclose(1 - 20 / (20 + Z2), wilson_interval(20, 20)[1] - wilson_interval(20, 20)[0])
    with pytest.raises(ValueError, match="target_width"):
        can_stop(1, 2, target_width=0)
    with pytest.raises(ValueError, match="min_episodes"):
        can_stop(1, 2, target_width=0.1, min_episodes=0)


# ---------------------------------------------------------------------------- replicate runs
@pytest.mark.parametrize(
    "df, q975, q995",  # printed tables of Student's t (two-sided 95% and 99%)
    [(1, 12.706, 63.657), (2, 4.303, 9.925), (3, 3.182, 5.841), (4, 2.776, 4.604), (9, 2.262, 3.250),
     (29, 2.045, 2.756), (120, 1.980, 2.617)],
)  # fmt: skip
def test_t_quantiles_match_the_tables(df, q975, q995):
    assert stats.t_quantile(0.975, df) == pytest.approx(q975, abs=6e-4)
    assert stats.t_quantile(0.995, df) == pytest.approx(q995, abs=6e-4)
    assert stats.t_quantile(0.025, df) == pytest.approx(-q975, abs=6e-4)
    assert stats.t_cdf(q975, df) == pytest.approx(0.975, abs=1e-4)


def test_t_cdf_is_a_distribution_function():
    assert stats.t_cdf(0.0, 3) == 0.5
    grid = np.linspace(-20, 20, 81)
    values = [stats.t_cdf(t, 2.5) for t in grid]
    assert np.all(np.diff(values) > 0) and values[0] < 0.01 and values[-1] > 0.99
    np.testing.assert_allclose([stats.t_cdf(-t, 2.5) for t in grid], 1 - np.array(values), atol=1e-12)
    # one degree of freedom is the Cauchy distribution: F(t) = 1/2 + atan(t) / pi
    np.testing.assert_allclose([stats.t_cdf(t, 1) for t in grid], 0.5 + np.arctan(grid) / np.pi, atol=1e-10)
    with pytest.raises(ValueError, match="degrees of freedom"):
        stats.t_cdf(1.0, 0)
    with pytest.raises(ValueError, match="p must be"):
        stats.t_quantile(1.0, 3)


def test_replicate_mean_is_the_t_interval_across_runs():
    r = stats.replicate_mean([26.5, 30.5, 24.0, 25.0])
    sd = math.sqrt(((0.0**2) + 4.0**2 + 2.5**2 + 1.5**2) / 3)
    assert (r.n, r.mean) == (4, 26.5) and r.sd == pytest.approx(sd)
    half = 3.182446 * sd / 2
    assert r.ci95 == pytest.approx((26.5 - half, 26.5 + half), abs=1e-5)
    # the two-sided p of t = mean / (sd / sqrt(n)) on 3 df
    assert r.p_value == pytest.approx(2 * (1 - stats.t_cdf(26.5 / (sd / 2), 3)))
    wider = stats.replicate_mean([26.5, 30.5, 24.0, 25.0], alpha=0.01)
    assert wider.ci95[0] < r.ci95[0] and wider.ci95[1] > r.ci95[1]
    one = stats.replicate_mean([12.0])
    assert one.mean == 12.0 and math.isnan(one.sd) and all(math.isnan(x) for x in one.ci95)
    same = stats.replicate_mean([5.0, 5.0, 5.0])
    assert same.ci95 == (5.0, 5.0) and math.isnan(same.p_value)
    for bad in ([], [1.0, math.nan]):
        with pytest.raises(ValueError):
            stats.replicate_mean(bad)
