"""Filtered-BC training data: rollout files with weights, the demo/success mixture, prefetched batches, and the
gripper facts the filters read."""

from __future__ import annotations

import numpy as np
import pytest
from rl_helpers import ENV, TASK

from vlagym.policies.vla import IMAGE_KEY, PROPRIO_KEY, VLAPolicy
from vlagym.rl.collection.episodes import gripper_reopens
from vlagym.rl.collection.files import write_rollouts
from vlagym.rl.fbc.buffer import Mixture, Prefetch, draw, read_sample_weights
from vlagym.train.dataset import DemoDataset
from vlagym.train.validate import check_dataset


def test_weights_round_trip_and_steer_the_draws(expert_rollouts, bc_checkpoint, tmp_path):
    _, episodes, _ = expert_rollouts
    path = tmp_path / "weighted.hdf5"
    write_rollouts(path, episodes, TASK, ENV, [2.0, 0.5, 1.0])
    np.testing.assert_array_equal(read_sample_weights(path), [2.0, 0.5, 1.0])
    assert check_dataset(path) == []
    with pytest.raises(ValueError, match="2 weights for 3 episodes"):
        write_rollouts(tmp_path / "bad.hdf5", episodes, TASK, ENV, [1.0, 1.0])
    policy = VLAPolicy.from_pretrained(bc_checkpoint)
    successes = DemoDataset([path], chunk_size=policy.config.chunk_size, cameras=["front"], keys=("proprio",))
    lengths = np.asarray(successes.episode_lengths)
    weights = np.array([1.0, 1e-9, 3.0])
    mixture = Mixture(None, successes, 0.5, 8, np.repeat(weights, lengths))
    cdf = mixture.parts[1][2]
    episode = np.searchsorted(np.cumsum(lengths), draw(np.random.default_rng(0), len(successes), 20_000, cdf),
                              side="right")  # fmt: skip
    share = np.bincount(episode, minlength=3) / len(episode)
    expected = weights * lengths / (weights * lengths).sum()
    np.testing.assert_allclose(share, expected, atol=0.02)
    assert share[1] == 0.0
    assert mixture.batch(np.random.default_rng(0))["action"].shape[0] == 8
    with pytest.raises(ValueError, match="one positive finite weight per success sample"):
        Mixture(None, successes, 0.5, 8, np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="one positive finite weight per success sample"):
        Mixture(None, successes, 0.5, 8, np.full(len(successes), np.nan))


def test_mixture_draws_its_share_from_each_source(expert_rollouts, demo_file, bc_checkpoint):
    policy = VLAPolicy.from_pretrained(bc_checkpoint)
    k = policy.config.chunk_size
    demos = DemoDataset([demo_file], chunk_size=k, cameras=["front", "wrist"], keys=("proprio",))
    successes = DemoDataset([expert_rollouts[2]], chunk_size=k, cameras=["front", "wrist"], keys=("proprio",))
    batch = Mixture(demos, successes, 0.25, 8).batch(np.random.default_rng(0))
    assert batch["action"].shape == (8, k, 7) and batch[IMAGE_KEY + "front"].shape == (8, 3, 32, 32)
    assert batch[PROPRIO_KEY].shape == (8, 23) and len(batch["instruction"]) == 8
    assert [n for _, n, _ in Mixture(demos, successes, 0.25, 8).parts] == [2, 6]
    assert [n for _, n, _ in Mixture(None, successes, 0.25, 8).parts] == [0, 8]
    assert [n for _, n, _ in Mixture(demos, None, 0.25, 8).parts] == [8, 0]
    with pytest.raises(ValueError, match="nothing to train on"):
        Mixture(None, None, 0.5, 8)


def test_prefetched_batches_are_the_inline_draws_in_order():
    def draws(seed):
        rng = np.random.default_rng(seed)
        return lambda: rng.integers(0, 1000, 3)

    inline = draws(7)
    expected = [inline() for _ in range(20)]
    for depth in (2, 0):  # a background thread; inline
        with Prefetch(draws(7), 20, depth=depth) as batches:
            got = list(batches)
        assert len(got) == 20 and all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
    with Prefetch(None, 0) as batches:  # a round with nothing to train on
        assert list(batches) == []


def test_prefetch_raises_the_draws_error_and_stops_when_left_early():
    calls = []

    def failing_draw():
        calls.append(1)
        if len(calls) == 3:
            raise OSError("unreadable rollout file")
        return len(calls)

    with pytest.raises(OSError, match="unreadable rollout file"), Prefetch(failing_draw, 10) as batches:
        assert [next(batches), next(batches)] == [1, 2]
        next(batches)
    prefetch = Prefetch(lambda: calls.append(1), 10_000, depth=1)
    with pytest.raises(RuntimeError, match="boom"), prefetch as batches:
        next(batches)
        raise RuntimeError("boom")
    assert not prefetch._thread.is_alive() and len(calls) < 100  # stopped, not drawn to the end


def test_gripper_reopens_counts_closed_to_open_switches():
    def gripper(*commands):
        return np.concatenate([np.zeros((len(commands), 6)), np.array(commands)[:, None]], axis=1)

    assert gripper_reopens(gripper(-1, -1, -0.5)) == 0  # never closed
    assert gripper_reopens(gripper(-1, 0.2, 1, 0.3)) == 0  # closed once and held (a partial release still holds)
    assert gripper_reopens(gripper(-1, 1, -0.1, 0.0, 1)) == 1  # 0 is closed, as the VLA's binary gripper has it
    assert gripper_reopens(gripper(1, -1, 1, -0.2, 1, 1)) == 2
    assert gripper_reopens(gripper(-1, 1, -1)) == 1  # a place's final release counts
    assert gripper_reopens(np.zeros((0, 7))) == 0
