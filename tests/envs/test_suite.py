"""Checks every registered task passes, whatever it is: the suite's shared contract."""

from __future__ import annotations

import numpy as np
import pytest

import vlagym
from vlagym.envs.base import TASK_STATE_DIM
from vlagym.envs.catalog import task_class
from vlagym.envs.checks import INSTRUCTION_CHARSET
from vlagym.envs.multitask import MULTITASK_ID
from vlagym.envs.robot import Robot

SINGLE_TASKS = sorted(t for t in vlagym.TASKS if t != MULTITASK_ID)


@pytest.mark.parametrize("env_id", SINGLE_TASKS)
def test_class_declares_the_suite_attributes(env_id):
    cls = task_class(env_id)
    assert cls.description and cls.family and cls.expert_cls is not None
    for section in ("Task:", "Randomisations:", "Success:", "Instructions:"):
        assert section in (cls.__doc__ or ""), f"{env_id}: docstring lacks {section}"
    train, heldout = set(cls.templates["train"]), set(cls.templates["heldout"])
    assert train and heldout and not train & heldout
    assert abs(sum(cls.default_reward_weights.values()) - 1.0) < 1e-9


@pytest.mark.parametrize("env_id", SINGLE_TASKS)
def test_every_template_renders_with_the_episodes_fields(env_id, make_env):
    env = make_env(env_id)
    base = env.unwrapped
    for seed in range(5):
        env.reset(seed=seed)
        fields = base.instruction_fields()
        for split in ("train", "heldout"):
            for template in base.templates[split]:
                text = template.format(**fields)
                assert "{" not in text and set(text) <= set(INSTRUCTION_CHARSET), f"{env_id}: {text!r}"


@pytest.mark.parametrize("env_id", SINGLE_TASKS)
def test_reward_is_the_weighted_sum_of_terms_in_unit_range(env_id, make_env):
    env = make_env(env_id)
    weights = env.unwrapped.reward_weights
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    for _ in range(30):
        _, reward, terminated, truncated, info = env.step(rng.uniform(-1, 1, 7).astype(np.float32))
        terms = {k: info[f"reward_{k}"] for k in weights}
        assert all(0.0 <= v <= 1.0 for v in terms.values()), terms
        assert reward == pytest.approx(sum(weights[k] * v for k, v in terms.items()), abs=1e-9)
        assert 0.0 <= reward <= 1.0
        if terminated or truncated:
            break


@pytest.mark.parametrize("env_id", SINGLE_TASKS)
def test_state_has_the_shared_layout(env_id, make_env):
    env = make_env(env_id)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (Robot.PROPRIO_DIM + TASK_STATE_DIM,)
    assert np.isfinite(obs).all()


@pytest.mark.parametrize("env_id", SINGLE_TASKS)
def test_expert_solves_a_few_episodes(env_id, make_env):
    env = make_env(env_id)
    expert = vlagym.make_expert(env)
    for seed in (0, 1):
        obs, _ = env.reset(seed=seed)
        expert.reset()
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(expert(obs))
            done = terminated or truncated
        assert info["success"] and terminated, f"{env_id} seed {seed}: the expert failed"
