"""Action chunking: order, early stop at termination and truncation, counts and summed reward."""

from __future__ import annotations

import numpy as np
import pytest
from fake_env import FakeEnv
from gymnasium.wrappers import TimeLimit

from vlagym.wrappers import ActionChunking


def _chunk(k: int) -> np.ndarray:
    return np.linspace(-1, 1, 2 * k, dtype=np.float32).reshape(k, 2)


def test_space_and_full_chunk():
    env = ActionChunking(FakeEnv(), 4)
    assert env.action_space.shape == (4, 2) and env.action_space.dtype == np.float32
    np.testing.assert_array_equal(env.action_space.low, -np.ones((4, 2)))
    assert env.metadata["render_fps"] == 10 / 4
    env.reset(seed=0)
    chunk = _chunk(4)
    obs, reward, terminated, truncated, info = env.step(chunk)
    assert info["actions_executed"] == 4 and not terminated and not truncated
    assert info["step_rewards"] == [1.0, 2.0, 3.0, 4.0] and reward == 10.0
    assert [i["t"] for i in info["step_infos"]] == [1, 2, 3, 4] and info["t"] == 4
    np.testing.assert_array_equal(np.stack([i["action"] for i in info["step_infos"]]), chunk)  # in order
    assert obs["proprio"][2] == pytest.approx(FakeEnv().reset(seed=0)[0]["proprio"][2] + 4, abs=1e-5)
    obs, reward, *_, info = env.step(chunk)
    assert reward == 5 + 6 + 7 + 8 and info["t"] == 8


def test_chunk_stops_at_termination():
    env = ActionChunking(FakeEnv(terminate_at=6), 4)
    env.reset(seed=0)
    env.step(_chunk(4))
    obs, reward, terminated, truncated, info = env.step(_chunk(4))
    assert terminated and not truncated
    assert info["actions_executed"] == 2 and info["step_rewards"] == [5.0, 6.0] and reward == 11.0
    assert info["t"] == 6 and len(info["step_infos"]) == 2
    assert obs["images"]["front"][0, 0, 0] == 60  # the observation of the last executed step


def test_chunk_stops_at_truncation_under_time_limit():
    env = ActionChunking(TimeLimit(FakeEnv(), max_episode_steps=5), 3)
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step(_chunk(3))
    assert not truncated and reward == 6.0
    _, reward, terminated, truncated, info = env.step(_chunk(3))
    assert truncated and not terminated
    assert info["actions_executed"] == 2 and reward == 4.0 + 5.0 and info["t"] == 5


def test_chunk_size_one_matches_the_plain_env():
    env, plain = ActionChunking(FakeEnv(), 1), FakeEnv()
    o1, _ = env.reset(seed=3)
    o2, _ = plain.reset(seed=3)
    a = np.array([0.5, -0.25], np.float32)
    o1, r1, *_ = env.step(a[None])
    o2, r2, *_ = plain.step(a)
    np.testing.assert_array_equal(o1["proprio"], o2["proprio"])
    assert r1 == r2


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
def test_bad_chunk_size_raises(bad):
    with pytest.raises(ValueError, match="chunk_size must be an integer >= 1"):
        ActionChunking(FakeEnv(), bad)


def test_wrong_chunk_shape_raises():
    env = ActionChunking(FakeEnv(), 4)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(4, 2\).*got \(3, 2\)"):
        env.step(_chunk(3))
    with pytest.raises(ValueError, match=r"got \(2,\)"):
        env.step(np.zeros(2))
