"""The success critic and the advantage weights of filtered BC (`vlagym.rl.advantage`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlagym.rl.advantage import (
    EpisodeStates,
    SuccessCritic,
    advantage_weights,
    effective_share,
    episode_advantages,
    make_critic,
    read_states,
    train_critic,
    write_states,
)


class _Critic:
    """A stand-in with a known V: the given values, by step index."""

    def __init__(self, values):
        self.values = np.asarray(values, np.float64)

    def value(self, state, step):
        return self.values[np.asarray(step)]


def test_advantage_is_the_rise_of_v_over_the_chunk_with_v_one_after_success():
    v = [0.2, 0.3, 0.5, 0.9]
    got = episode_advantages(_Critic(v), np.zeros((4, 2)), horizon=2)
    np.testing.assert_allclose(got, [0.5 - 0.2, 0.9 - 0.3, 1 - 0.5, 1 - 0.9])
    # a horizon past the episode's end: every step is credited with reaching success
    np.testing.assert_allclose(episode_advantages(_Critic(v), np.zeros((4, 2)), horizon=10), 1 - np.array(v))
    with pytest.raises(ValueError, match="horizon"):
        episode_advantages(_Critic(v), np.zeros((4, 2)), horizon=0)


def test_weights_are_exponentiated_and_capped():
    np.testing.assert_allclose(advantage_weights(np.array([0.0, 0.1, -0.2]), 0.1, 20.0), [1.0, np.e, np.exp(-2)])
    assert advantage_weights(np.array([1.0]), 0.01, 20.0)[0] == 20.0  # exp(100) capped, no overflow
    with pytest.raises(ValueError, match="beta"):
        advantage_weights(np.zeros(2), 0.0, 20.0)
    assert effective_share(np.ones(8)) == pytest.approx(1.0)
    assert effective_share(np.array([1.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)


def _separable(n, rng):
    """States whose first coordinate decides success (above 0), the rest noise; steps 0..99."""
    state = rng.standard_normal((n, 5)).astype(np.float32)
    return {"state": state, "step": rng.integers(0, 100, n).astype(np.int32), "success": state[:, 0] > 0}


def test_critic_learns_which_states_succeed():
    rng = np.random.default_rng(0)
    critic, optimizer = make_critic(5, seed=0)
    metrics = train_critic(critic, optimizer, _separable(4000, rng), 300, 256, np.random.default_rng(1))
    assert metrics["brier"] < 0.25 * metrics["brier_constant"]  # explains most of the outcome's variance
    test = _separable(1000, rng)
    predicted = critic.value(test["state"], test["step"]) > 0.5
    assert np.mean(predicted == test["success"]) > 0.95


def test_critic_standardisation_is_fitted_once_and_shapes_are_checked():
    critic = SuccessCritic(3)
    critic.fit_inputs(np.full((4, 3), 5.0, np.float32) + np.arange(4)[:, None], np.arange(4))
    mean = critic.mean.clone()
    np.testing.assert_allclose(mean.numpy(), [6.5, 6.5, 6.5, 1.5])
    critic.fit_inputs(np.zeros((4, 3), np.float32), np.zeros(4))  # kept: the inputs keep their meaning
    assert torch.equal(critic.mean, mean) and bool(critic.fitted)
    with pytest.raises(ValueError, match=r"state must be \(N, 3\)"):
        critic(torch.zeros(2, 4), torch.zeros(2))
    with pytest.raises(ValueError, match="state_dim"):
        SuccessCritic(0)


def test_make_critic_depends_on_the_seed_alone_and_leaves_torchs_stream():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, _ = make_critic(4, seed=7)
    after = torch.rand(3)
    b, _ = make_critic(4, seed=7)
    c, _ = make_critic(4, seed=8)
    assert torch.equal(after, expected)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not torch.equal(a.net[0].weight, c.net[0].weight)


def test_states_round_trip(tmp_path):
    episodes = [
        EpisodeStates(seed=5, state=np.arange(6, dtype=np.float32).reshape(3, 2), success=True),
        EpisodeStates(seed=6, state=np.ones((2, 2), np.float32), success=False),
    ]
    path = tmp_path / "r" / "round_0000.states.npz"
    write_states(path, episodes)
    data = read_states([path, path])
    np.testing.assert_array_equal(data["state"][:5], np.concatenate([e.state for e in episodes]))
    np.testing.assert_array_equal(data["step"][:5], [0, 1, 2, 0, 1])
    np.testing.assert_array_equal(data["success"][:5], [True, True, True, False, False])
    assert len(data["step"]) == 10 and not list(path.parent.glob(".*tmp"))
    with pytest.raises(ValueError, match="no episodes"):
        write_states(path, [])
    with pytest.raises(ValueError, match="no state files"):
        read_states([])
