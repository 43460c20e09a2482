"""The scripted experts are reliable demonstration sources (run with `pytest -m slow`)."""

from __future__ import annotations

import pytest

import vlagym
from vlagym.envs.catalog import task_class
from vlagym.envs.splits import SPLITS
from vlagym.eval.expert import expert_outcomes

# Never used while tuning the experts or the tasks: an honest held-out estimate.
SEEDS = range(100_000, 100_200)
SINGLE_TASKS = sorted(t for t in vlagym.TASKS if t != "VLA-MultiTask-v0")


@pytest.mark.slow
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("env_id", SINGLE_TASKS)
def test_expert_success_rate(env_id, split):
    threshold = 0.90 if task_class(env_id).family == "long-horizon" else 0.95
    outcomes = expert_outcomes(env_id, SEEDS, split=split)
    rate = sum(outcomes) / len(outcomes)
    failures = [s for s, ok in zip(SEEDS, outcomes, strict=True) if not ok]
    assert rate >= threshold, f"{env_id} [{split}]: expert success {rate:.1%} < {threshold:.0%}; failing: {failures}"
