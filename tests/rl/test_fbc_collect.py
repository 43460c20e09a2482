"""Filtered-BC collection: the in-env recorder (its files replay), the noisy actor and its seeds, collection that
acts as `vlagym eval`."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from rl_helpers import ENV, TASK, ExpertActor

from vlagym.eval.configs import EvalConfig
from vlagym.eval.evaluate import evaluate
from vlagym.eval.rollout import make_rollout_envs, run_episodes
from vlagym.policies.vla import VLAPolicy
from vlagym.rl.collection.rollouts import collect_round
from vlagym.rl.fbc import FilteredBCConfig
from vlagym.rl.fbc.buffer import success_weights
from vlagym.rl.fbc.collect import NoisyVLA, make_collection_envs, round_seeds
from vlagym.train.validate import check_dataset


def test_recorder_keeps_successes_in_seed_order(expert_rollouts):
    records, episodes, _ = expert_rollouts
    assert [r.success for r in records] == [True, True, True]
    assert [e.seed for e in episodes] == [0, 1, 2]
    for r, e in zip(records, episodes, strict=True):
        assert len(e.actions) == r.length == len(e.proprio) == len(e.states) == len(e.images["front"])
        assert e.instruction == r.instruction and e.task == TASK
        assert np.isclose(e.rewards.sum(), r.episode_return)


def test_rollout_file_is_a_valid_demo_file_that_replays(expert_rollouts):
    _, episodes, path = expert_rollouts
    assert check_dataset(path) == []
    ep = episodes[1]
    env = gym.make(TASK, **ENV)
    try:
        obs, _ = env.reset(seed=ep.seed)
        for t, action in enumerate(ep.actions):
            # observation t is what the policy saw before action t
            np.testing.assert_allclose(obs["proprio"], ep.proprio[t], rtol=0, atol=1e-6)
            np.testing.assert_array_equal(obs["images"]["front"], ep.images["front"][t])
            obs, _, terminated, truncated, info = env.step(action)
        assert terminated and info["success"]
    finally:
        env.close()


def test_recorder_keeps_the_reach_distance_at_the_first_close(expert_rollouts):
    import h5py

    _, episodes, path = expert_rollouts
    env = gym.make(TASK, **ENV)
    try:
        for e in episodes:
            close = int(np.flatnonzero(e.actions[:, -1] >= 0)[0])
            _, info = env.reset(seed=e.seed)
            for action in e.actions[:close]:  # the info beside the observation the closing action was chosen on
                *_, info = env.step(action)
            assert e.close_distance == pytest.approx(info["reach_distance"], abs=1e-12)
            assert e.close_distance < 0.01  # the expert closes on the cup's axis at half its height
    finally:
        env.close()
    with h5py.File(path, "r") as f:
        written = [f[f"data/demo_{k}"].attrs["close_distance"] for k in range(len(episodes))]
    assert written == pytest.approx([e.close_distance for e in episodes], abs=1e-12)


def test_on_step_sees_every_vector_step():
    envs = make_rollout_envs(TASK, 2, **ENV)
    seen = []
    try:
        actor = ExpertActor(envs)
        records = run_episodes(envs, actor, [0, 1, 2], on_episode_start=actor.reset, progress=False,
                               on_step=lambda info: seen.append(info))  # fmt: skip
    finally:
        envs.close()
    assert len(seen) >= max(r.length for r in records)
    assert all("success" in info for info in seen)


def _noisy_records(checkpoint, n_envs, noise, seeds):
    policy = VLAPolicy.from_pretrained(checkpoint)
    cfg = FilteredBCConfig(policy=str(checkpoint), n_envs=n_envs, demos=[])
    envs = make_collection_envs(cfg, ENV)
    try:
        records = collect_round(envs, NoisyVLA(policy, noise), seeds).records
    finally:
        envs.close()
    return [(r.seed, r.length, r.episode_return) for r in records]


def _two_rows_of_one_observation():
    """A batched observation (as a 2-env vector env returns it) holding seed 0's first observation twice."""
    env = gym.make(TASK, **ENV)
    try:
        obs, _ = env.reset(seed=0)
    finally:
        env.close()
    return {"images": {c: np.stack([obs["images"][c]] * 2) for c in obs["images"]},
            "proprio": np.stack([obs["proprio"]] * 2), "instruction": [obs["instruction"]] * 2}  # fmt: skip


def test_collection_noise_depends_on_the_episode_seed_alone(bc_checkpoint):
    batch = _two_rows_of_one_observation()

    def noise(seeds):
        policy = VLAPolicy.from_pretrained(bc_checkpoint)
        noisy, clean = NoisyVLA(policy, 0.5), NoisyVLA(policy, 0.0)
        noisy.reset(np.ones(2, bool), np.array(seeds))
        first = noisy(batch)
        clean.reset(np.ones(2, bool), np.array(seeds))
        return first - clean(batch)

    a, b = noise([5, 6]), noise([6, 5])
    np.testing.assert_allclose(a, b[::-1], atol=1e-6)  # each row's noise follows its seed, not its slot
    assert np.abs(a[:, :-1]).min() > 0 and np.all(a[:, -1] == 0)  # arm dimensions only, never the gripper
    assert not np.allclose(a[0], a[1])


def test_each_try_of_a_seed_gets_noise_of_its_own(bc_checkpoint):
    batch = _two_rows_of_one_observation()
    policy = VLAPolicy.from_pretrained(bc_checkpoint)
    noisy = NoisyVLA(policy, 0.5)

    def act(seeds, repeats=None):
        noisy.reset(np.ones(2, bool), np.array(seeds), None if repeats is None else np.array(repeats))
        return noisy(batch)

    first = act([5, 6])  # try 0 of seeds 5 and 6
    second = act([5, 5], [1, 2])  # tries 1 and 2 of seed 5
    assert not np.allclose(first[0], second[0]) and not np.allclose(second[0], second[1])
    np.testing.assert_array_equal(act([5, 6], [0, 0]), first)  # a try's noise is (seed, try)


def test_held_noise_changes_every_hold_steps(bc_checkpoint):
    batch = _two_rows_of_one_observation()

    def noise(hold, steps, restart_row_at=None):
        noisy = NoisyVLA(VLAPolicy.from_pretrained(bc_checkpoint), 0.5, hold)
        clean = NoisyVLA(VLAPolicy.from_pretrained(bc_checkpoint), 0.0)
        for actor in (noisy, clean):
            actor.reset(np.ones(2, bool), np.array([5, 6]))
        out = []
        for t in range(steps):
            if t == restart_row_at:  # row 1 starts a new episode (seed 7); row 0 carries on
                for actor in (noisy, clean):
                    actor.reset(np.array([False, True]), np.array([5, 7]))
            out.append(noisy(batch) - clean(batch))
        return np.stack(out)  # (step, row, action dim)

    held = noise(hold=3, steps=7)
    for t in range(7):
        np.testing.assert_allclose(held[t], held[t - t % 3], atol=1e-6)  # one draw per block of 3 steps
    assert not np.allclose(held[0], held[3]) and not np.allclose(held[3], held[6])
    fresh = noise(hold=1, steps=3)
    np.testing.assert_allclose(held[0], fresh[0], atol=1e-6)  # the same stream: held draw k is fresh draw k
    np.testing.assert_allclose(held[3], fresh[1], atol=1e-6)
    restarted = noise(hold=3, steps=5, restart_row_at=2)
    np.testing.assert_allclose(restarted[:, 0], held[:5, 0], atol=1e-6)
    np.testing.assert_allclose(restarted[2, 1], restarted[4, 1], atol=1e-6)  # the new episode's block starts at 2
    assert not np.allclose(restarted[1, 1], restarted[2, 1])
    with pytest.raises(ValueError, match="hold"):
        NoisyVLA(VLAPolicy.from_pretrained(bc_checkpoint), 0.5, 0)


def test_round_seeds_repeat_each_state_group_size_times(bc_checkpoint):
    base = dict(policy=str(bc_checkpoint), demos=[], collect_seed=1000, episodes_per_round=6)
    assert round_seeds(FilteredBCConfig(**base), 2) == list(range(1012, 1018))  # the layout before groups
    assert round_seeds(FilteredBCConfig(**base, group_size=3), 1) == [1002, 1002, 1002, 1003, 1003, 1003]


def test_repeated_seeds_keep_every_successful_try(bc_checkpoint):
    envs = make_collection_envs(FilteredBCConfig(policy=str(bc_checkpoint), n_envs=2, demos=[]), ENV)
    try:
        records, episodes, *_ = collect_round(envs, ExpertActor(envs), [3, 3, 4])
    finally:
        envs.close()
    assert [r.seed for r in records] == [3, 3, 4] and all(r.success for r in records)
    assert [e.seed for e in episodes] == [3, 3, 4]
    assert success_weights(episodes, "episode") == [1.0, 1.0, 1.0]
    assert success_weights(episodes, "state") == [0.5, 0.5, 1.0]
    # discounted: a success after T steps weighs gamma^T times as much
    lengths = [len(e.actions) for e in episodes]
    np.testing.assert_allclose(
        success_weights(episodes, "state", 0.9), np.array([0.5, 0.5, 1.0]) * 0.9 ** np.array(lengths)
    )


def test_without_noise_collection_acts_as_vlagym_eval(bc_checkpoint, tmp_path):
    seeds = [100000, 100001]
    collected = _noisy_records(bc_checkpoint, 2, 0.0, seeds)
    cfg = EvalConfig(policy=str(bc_checkpoint), episodes=2, num_envs=2, out=str(tmp_path / "ev"), progress=False)
    results = evaluate(cfg)
    episodes = results["tasks"][TASK]["episodes"]
    assert [(e["seed"], e["length"]) for e in episodes] == [(s, n) for s, n, _ in collected]
    assert [e["return"] for e in episodes] == [ret for _, _, ret in collected]  # same batch: bit for bit
