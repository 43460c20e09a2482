"""Statistics of success rates: intervals, paired tests, suite averages, sequential stopping.

* `wilson_interval`: the 95% interval of one success rate (correct near 0% and 100%, where
  the normal approximation collapses to a zero-width interval).
* `mcnemar_exact` / `paired_test`: two policies run on the *same* initial states
  (episode i uses seed base + i), so their outcomes are paired. Only the discordant
  episodes (one policy succeeded, the other failed) carry information about which is
  better; under "no difference" each discordant episode goes either way with
  probability 1/2, and McNemar's exact test is the two-sided binomial test on them.
* `paired_difference_interval`: the 95% interval of the difference of two paired success
  rates (Bonett and Price's adjusted Wald interval): how large the difference may be,
  beside the test's whether there is one.
* `compare_outcomes`: the paired test per task and over all episodes of two runs,
  matched on (task, split, seed).
* `bootstrap_suite_mean`: the suite average (the mean over tasks of each task's
  success rate) with a two-stage bootstrap interval: resample tasks, then episodes
  within each drawn task's splits. It answers "how different would the average be
  with other tasks of this kind and other seeds", which an interval over episodes
  alone understates.
* `replicate_mean`: the mean of a quantity measured once per replicate run (e.g. each
  post-training seed's lift over one baseline) with Student's t interval across the runs,
  which holds the run-to-run spread as well as each run's episode noise.
* `can_stop`: sequential evaluation, a task may stop once its Wilson interval is
  narrower than a requested width (after a minimum number of episodes).

Pure functions on counts and outcome lists: no files, no environments.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
A_BETTER = "A better"
B_BETTER = "B better"
NO_DIFFERENCE = "no detectable difference"
VERDICTS = (A_BETTER, NO_DIFFERENCE, B_BETTER)

#: (task, split, seed): what identifies one episode of a protocol
EpisodeKey = tuple[str, str, int]


# ---------------------------------------------------------------------------- one rate
def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default); (0, 1) when n is 0."""
    if n == 0:
        return 0.0, 1.0
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be between 0 and n={n}, got {successes}")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def can_stop(successes: int, n: int, target_width: float, min_episodes: int = 20) -> bool:
    """Sequential evaluation: True once `n >= min_episodes` and the Wilson 95% interval is at most `target_width` wide.

    Stopping on the interval width (never on the rate itself) keeps the rate unbiased enough
    for a benchmark: the rule does not look at which way the outcomes point.
    """
    if not 0 < target_width <= 1:
        raise ValueError(f"target_width must be in (0, 1], got {target_width}")
    if min_episodes < 1:
        raise ValueError(f"min_episodes must be at least 1, got {min_episodes}")
    if n < min_episodes:
        return False
    lo, hi = wilson_interval(successes, n)
    return hi - lo <= target_width


# ---------------------------------------------------------------------------- paired tests
def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided p-value of McNemar's exact test from the discordant counts.

    `a_only`: episodes only A solved; `b_only`: episodes only B solved. Under the null each
    discordant episode is a fair coin, so p = min(1, 2 P(X <= min(a_only, b_only))) with
    X ~ Binomial(a_only + b_only, 1/2). Computed in exact integer arithmetic.
    """
    if a_only < 0 or b_only < 0:
        raise ValueError(f"discordant counts must be non-negative, got {a_only} and {b_only}")
    n = a_only + b_only
    if n == 0:
        return 1.0
    k = min(a_only, b_only)
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, 2 * tail / 2**n)


def paired_difference_interval(a_only: int, b_only: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Interval (95% by default) for rate(A) - rate(B) from n paired episodes, `a_only` of them solved by A alone
    and `b_only` by B alone.

    The Bonett-Price adjusted Wald interval for paired proportions (Statistics in Medicine 31, 2012): each
    discordant share gets one pseudo-episode, (count + 1) / (n + 2), before the Wald formula of the paired
    difference is applied. Its coverage stays close to nominal down to small n, and, unlike the Wald interval
    or Newcombe's square-and-add interval, it does not shrink to a point when no episode is discordant (the
    same result on n episodes does not prove two policies equal). Clipped to [-1, 1]; (-1, 1) when n is 0.
    """
    if a_only < 0 or b_only < 0 or a_only + b_only > n:
        raise ValueError(f"discordant counts must be non-negative and at most n={n} together, got {a_only}, {b_only}")
    if n == 0:
        return -1.0, 1.0
    pa, pb = (a_only + 1) / (n + 2), (b_only + 1) / (n + 2)
    diff = pa - pb
    half = z * math.sqrt((pa + pb - diff * diff) / (n + 2))
    return max(-1.0, diff - half), min(1.0, diff + half)


def verdict(a_only: int, b_only: int, p_value: float, alpha: float = ALPHA) -> str:
    """Verdict: "A better" or "B better" when the paired test rejects at `alpha`, else "no detectable difference"."""
    if p_value >= alpha or a_only == b_only:
        return NO_DIFFERENCE
    return A_BETTER if a_only > b_only else B_BETTER


@dataclass(frozen=True)
class PairedTest:
    """Two policies' outcomes on the same episodes, and McNemar's exact test on them."""

    n: int
    """paired episodes"""
    a_successes: int
    b_successes: int
    a_only: int
    """episodes A solved and B did not"""
    b_only: int
    """episodes B solved and A did not"""
    difference: float
    """success rate of A minus that of B"""
    p_value: float
    verdict: str
    difference_ci95: tuple[float, float] = (-1.0, 1.0)
    """95% interval of `difference` (`paired_difference_interval`)"""

    @property
    def a_rate(self) -> float:
        return self.a_successes / self.n if self.n else math.nan

    @property
    def b_rate(self) -> float:
        return self.b_successes / self.n if self.n else math.nan


def paired_test(a: Sequence[bool], b: Sequence[bool], alpha: float = ALPHA) -> PairedTest:
    """McNemar's exact test on outcomes `a[i]`, `b[i]` of the same episode i."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes need equal lengths, got {len(a)} and {len(b)}")
    a_arr, b_arr = np.asarray(a, bool), np.asarray(b, bool)
    n = len(a_arr)
    a_only = int(np.sum(a_arr & ~b_arr))
    b_only = int(np.sum(b_arr & ~a_arr))
    p = mcnemar_exact(a_only, b_only)
    return PairedTest(
        n=n,
        a_successes=int(a_arr.sum()),
        b_successes=int(b_arr.sum()),
        a_only=a_only,
        b_only=b_only,
        difference=(a_only - b_only) / n if n else 0.0,
        p_value=p,
        verdict=verdict(a_only, b_only, p, alpha),
        difference_ci95=paired_difference_interval(a_only, b_only, n),
    )


class PairingError(ValueError):
    """Two runs that cannot be compared episode by episode (different episodes)."""


GROUPINGS = ("task", "split")
"""what `compare_outcomes` tests each group of: a task (over its splits) or a split (over its tasks)"""


def compare_outcomes(
    a: Mapping[EpisodeKey, bool], b: Mapping[EpisodeKey, bool], alpha: float = ALPHA, by: str = "task"
) -> dict[str, PairedTest]:
    """Paired tests of two runs' outcomes keyed by (task, split, seed): one per task (over its splits), or per
    split (over its tasks) with `by="split"`, and "all".

    Both runs must hold exactly the same episodes: comparing on a subset would let a
    change of protocol pass for a change of policy. `PairingError` names the difference.
    Per-task verdicts are each at level `alpha` (no correction for testing many tasks);
    the "all" row is the single test to read first.
    """
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    if only_a or only_b:
        parts = []
        if only_a:
            parts.append(f"{len(only_a)} episode(s) only in A (first: task, split, seed = {only_a[0]})")
        if only_b:
            parts.append(f"{len(only_b)} episode(s) only in B (first: task, split, seed = {only_b[0]})")
        raise PairingError("the runs hold different episodes: " + "; ".join(parts))
    if not a:
        raise PairingError("the runs hold no episodes")
    keys, at = sorted(a), GROUPINGS.index(by)
    tests = {}
    for group in sorted({k[at] for k in keys}):
        group_keys = [k for k in keys if k[at] == group]
        tests[group] = paired_test([a[k] for k in group_keys], [b[k] for k in group_keys], alpha)
    tests["all"] = paired_test([a[k] for k in keys], [b[k] for k in keys], alpha)
    return tests


# ---------------------------------------------------------------------------- replicate runs
def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), x in [0, 1]."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p for Student's t with `df` degrees of freedom (bisection on `t_cdf`)."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class ReplicateMean:
    """The mean of one number per replicate run, with Student's t interval across the runs."""

    n: int
    """runs"""
    mean: float
    sd: float
    """sample standard deviation across the runs (n - 1 in the denominator); NaN for one run"""
    ci95: tuple[float, float]
    """mean +- t(1 - alpha / 2, n - 1) sd / sqrt(n); (NaN, NaN) for one run"""
    p_value: float
    """two-sided one-sample t-test of mean = 0; NaN for one run or no spread"""


def replicate_mean(values: Sequence[float], alpha: float = ALPHA) -> ReplicateMean:
    """Mean of `values` (one per independent run) with a t interval at level 1 - `alpha`.

    Each value already carries its run's episode noise, so the spread across runs holds both the training
    randomness and the evaluation's; the interval answers "what would another run of this recipe give on
    average", which no single run's episode interval does. With few runs it is wide, as it should be.
    """
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or len(x) == 0:
        raise ValueError("replicate_mean needs a non-empty list of numbers")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"replicate values must be finite, got {list(values)}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    n, mean = len(x), float(x.mean())
    if n == 1:
        return ReplicateMean(n=1, mean=mean, sd=math.nan, ci95=(math.nan, math.nan), p_value=math.nan)
    sd = float(x.std(ddof=1))
    half = t_quantile(1 - alpha / 2, n - 1) * sd / math.sqrt(n)
    p = 2.0 * t_cdf(-abs(mean) / (sd / math.sqrt(n)), n - 1) if sd > 0 else math.nan
    return ReplicateMean(n=n, mean=mean, sd=sd, ci95=(mean - half, mean + half), p_value=p)


# ---------------------------------------------------------------------------- suite average
def suite_mean(tasks: Sequence[Sequence[Sequence[bool]]]) -> float:
    """Mean over tasks of each task's mean over its splits of the split's success rate.

    `tasks[t][s]` is the list of outcomes of task t on split s. Every task counts equally,
    whatever its number of splits or episodes.
    """
    _check_nested(tasks)
    return float(np.mean([np.mean([np.mean(cell) for cell in task]) for task in tasks]))


def bootstrap_suite_mean(
    tasks: Sequence[Sequence[Sequence[bool]]], samples: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float, float]:
    """`suite_mean(tasks)` and its percentile bootstrap interval: (mean, low, high).

    Each bootstrap replicate draws len(tasks) tasks with replacement, then for every drawn
    task resamples the episodes of each of its splits with replacement (a fresh draw each
    time a task is drawn). Resampling n outcomes with k successes has k* ~ Binomial(n, k/n),
    which is what is drawn. A seeded `numpy.random.Generator`: the same inputs give the same
    interval.
    """
    _check_nested(tasks)
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    n_tasks = len(tasks)
    counts = [np.array([len(cell) for cell in task]) for task in tasks]
    rates = [np.array([np.mean(cell) for cell in task]) for task in tasks]
    drawn = rng.integers(0, n_tasks, size=(samples, n_tasks))
    task_rates = np.empty((samples, n_tasks))
    for t in range(n_tasks):
        where = drawn == t
        k = int(where.sum())
        if k:  # k draws of task t: resample each of its splits' episodes, average over its splits
            successes = rng.binomial(counts[t], rates[t], size=(k, len(counts[t])))
            task_rates[where] = (successes / counts[t]).mean(axis=1)
    means = task_rates.mean(axis=1)
    tail = (1 - level) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return suite_mean(tasks), float(lo), float(hi)


def _check_nested(tasks: Sequence[Sequence[Sequence[bool]]]) -> None:
    if len(tasks) == 0:
        raise ValueError("no tasks to average")
    for t, task in enumerate(tasks):
        if len(task) == 0 or any(len(cell) == 0 for cell in task):
            raise ValueError(f"task {t} has a split without episodes")
