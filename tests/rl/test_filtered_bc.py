"""Filtered-BC post-training: the in-env recorder (its files replay), collection that acts as `vlagym eval`,
determinism across n_envs and across a resume, config errors."""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pytest
import torch
from rl_helpers import ENV_KWARGS, TASK, ExpertActor
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from vlagym.eval.diagnostics import OUTCOMES
from vlagym.eval.evaluate import EvalConfig, evaluate
from vlagym.eval.rollout import make_rollout_envs, run_episodes
from vlagym.policies.vla import IMAGE_KEY, PROPRIO_KEY, VLAPolicy
from vlagym.rl.filtered_bc import (
    FilteredBCConfig,
    NoisyVLA,
    _draw,
    _lr_factor,
    _Mixture,
    _Prefetch,
    collect_round,
    gripper_reopens,
    latest_checkpoint,
    make_collection_envs,
    out_of_time,
    read_weights,
    rollout_path,
    round_seeds,
    success_weights,
    train_filtered_bc,
    write_rollouts,
)
from vlagym.train.dataset import DemoDataset
from vlagym.train.validate import check_dataset

ENV = {"obs_mode": "rgb", **ENV_KWARGS}


def _reopen_after_first_close(episode):
    """Make an episode's gripper open again one step after it first closed (in place)."""
    closed = np.flatnonzero(episode.actions[:, -1] > 0)
    episode.actions[closed[0] + 1, -1] = -1.0


def _expert_round(tmp_path_factory, seeds):
    """`collect_round` on 2 collection sub-envs with the scripted experts acting: (records, successes, states,
    hindsight replays)."""
    cfg = FilteredBCConfig(policy=_tiny_checkpoint(tmp_path_factory), n_envs=2, demos=[])
    envs = make_collection_envs(cfg, ENV)
    try:
        return collect_round(envs, ExpertActor(envs), seeds)[:4]
    finally:
        envs.close()


@pytest.fixture(scope="module")
def expert_rollouts(tmp_path_factory):
    """Three successful expert episodes, recorded by the collection envs (2 sub-envs) and written as a file."""
    records, episodes, _, replays = _expert_round(tmp_path_factory, [0, 1, 2])
    assert replays == []  # no failure, and the recorders replay nothing without `hindsight`
    path = tmp_path_factory.mktemp("rollouts") / "round_0000.hdf5"
    write_rollouts(path, episodes, TASK, ENV)
    return records, episodes, path


def _tiny_checkpoint(tmp_path_factory):
    from rl_helpers import make_bc_checkpoint

    return make_bc_checkpoint(tmp_path_factory.mktemp("bc_fbc") / "ckpt")


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


def test_collection_time_limit_ends_episodes_early(tmp_path_factory):
    # the scripted expert needs ~30 steps to lift the cup: with a limit of 7 every episode is cut there, a
    # failure, and its states end there too; without the option the same episodes succeed (see above)
    cfg = FilteredBCConfig(policy=_tiny_checkpoint(tmp_path_factory), n_envs=2, demos=[], max_episode_steps=7)
    envs = make_collection_envs(cfg, ENV)
    try:
        records, successes, states, *_ = collect_round(envs, ExpertActor(envs), [0, 1, 2])
    finally:
        envs.close()
    assert [(r.seed, r.length, r.success) for r in records] == [(0, 7, False), (1, 7, False), (2, 7, False)]
    assert successes == []
    assert [(s.seed, len(s.state), s.success) for s in states] == [(0, 7, False), (1, 7, False), (2, 7, False)]


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

    def act(seeds):
        noisy.reset(np.ones(2, bool), np.array(seeds))
        return noisy(batch)

    first = act([5, 6])  # try 0 of seeds 5 and 6
    second = act([5, 5])  # tries 1 and 2 of seed 5
    assert not np.allclose(first[0], second[0]) and not np.allclose(second[0], second[1])
    noisy.new_round()
    np.testing.assert_array_equal(act([5, 6]), first)  # a new round starts again at try 0


def test_a_retry_actor_draws_the_noise_of_later_tries(bc_checkpoint):
    batch = _two_rows_of_one_observation()
    policy = VLAPolicy.from_pretrained(bc_checkpoint)

    def act(actor, seeds):
        actor.reset(np.ones(2, bool), np.array(seeds))
        return actor(batch)

    first = NoisyVLA(policy, 0.5)
    act(first, [5, 5])  # tries 0 and 1 of seed 5
    later = act(first, [5, 6])  # try 2 of seed 5, try 0 of seed 6
    retry = NoisyVLA(policy, 0.5, first_try=2)
    np.testing.assert_array_equal(act(retry, [5, 6])[0], later[0])  # its first try of seed 5 is try 2
    first.new_round()
    assert not np.allclose(act(retry, [6, 6])[0], act(first, [6, 6])[0])  # not the noise of the first pass
    with pytest.raises(ValueError, match="first_try"):
        NoisyVLA(policy, 0.5, first_try=-1)


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


def test_repeated_seeds_keep_every_successful_try(tmp_path_factory):
    records, episodes, states, _ = _expert_round(tmp_path_factory, [3, 3, 4])
    assert [r.seed for r in records] == [3, 3, 4] and all(r.success for r in records)
    assert [e.seed for e in episodes] == [3, 3, 4]
    # every episode's privileged states too, as the recorded successes hold them
    assert [(s.seed, s.success) for s in states] == [(3, True), (3, True), (4, True)]
    assert all(np.array_equal(s.state, e.state) for s, e in zip(states, episodes, strict=True))
    assert success_weights(episodes, "episode") == [1.0, 1.0, 1.0]
    assert success_weights(episodes, "state") == [0.5, 0.5, 1.0]
    # discounted: a success after T steps weighs gamma^T times as much
    lengths = [len(e.actions) for e in episodes]
    np.testing.assert_allclose(
        success_weights(episodes, "state", 0.9), np.array([0.5, 0.5, 1.0]) * 0.9 ** np.array(lengths)
    )
    np.testing.assert_allclose(success_weights(episodes, "advantage", 0.9), 0.9 ** np.array(lengths))


def test_weights_round_trip_and_steer_the_draws(expert_rollouts, bc_checkpoint, tmp_path):
    _, episodes, _ = expert_rollouts
    path = tmp_path / "weighted.hdf5"
    write_rollouts(path, episodes, TASK, ENV, [2.0, 0.5, 1.0])
    np.testing.assert_array_equal(read_weights(path), [2.0, 0.5, 1.0])
    assert check_dataset(path) == []
    with pytest.raises(ValueError, match="2 weights for 3 episodes"):
        write_rollouts(tmp_path / "bad.hdf5", episodes, TASK, ENV, [1.0, 1.0])
    policy = VLAPolicy.from_pretrained(bc_checkpoint)
    successes = DemoDataset([path], chunk_size=policy.config.chunk_size, cameras=["front"], keys=("proprio",))
    lengths = np.asarray(successes.episode_lengths)
    weights = np.array([1.0, 1e-9, 3.0])
    mixture = _Mixture(None, successes, 0.5, 8, np.repeat(weights, lengths))
    cdf = mixture.parts[1][2]
    episode = np.searchsorted(np.cumsum(lengths), _draw(np.random.default_rng(0), len(successes), 20_000, cdf),
                              side="right")  # fmt: skip
    share = np.bincount(episode, minlength=3) / len(episode)
    expected = weights * lengths / (weights * lengths).sum()
    np.testing.assert_allclose(share, expected, atol=0.02)
    assert share[1] == 0.0
    assert mixture.batch(np.random.default_rng(0))["action"].shape[0] == 8
    with pytest.raises(ValueError, match="one positive finite weight per success sample"):
        _Mixture(None, successes, 0.5, 8, np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="one positive finite weight per success sample"):
        _Mixture(None, successes, 0.5, 8, np.full(len(successes), np.nan))


def test_without_noise_collection_acts_as_vlagym_eval(bc_checkpoint, tmp_path):
    seeds = [100000, 100001]
    collected = _noisy_records(bc_checkpoint, 2, 0.0, seeds)
    cfg = EvalConfig(policy=str(bc_checkpoint), episodes=2, num_envs=2, out=str(tmp_path / "ev"), progress=False)
    results = evaluate(cfg)
    episodes = results["tasks"][TASK]["episodes"]
    assert [(e["seed"], e["length"]) for e in episodes] == [(s, n) for s, n, _ in collected]
    assert [e["return"] for e in episodes] == [ret for _, _, ret in collected]  # same batch: bit for bit


def test_mixture_draws_its_share_from_each_source(expert_rollouts, demo_file, bc_checkpoint):
    policy = VLAPolicy.from_pretrained(bc_checkpoint)
    k = policy.config.chunk_size
    demos = DemoDataset([demo_file], chunk_size=k, cameras=["front", "wrist"], keys=("proprio",))
    successes = DemoDataset([expert_rollouts[2]], chunk_size=k, cameras=["front", "wrist"], keys=("proprio",))
    batch = _Mixture(demos, successes, 0.25, 8).batch(np.random.default_rng(0))
    assert batch["action"].shape == (8, k, 7) and batch[IMAGE_KEY + "front"].shape == (8, 3, 32, 32)
    assert batch[PROPRIO_KEY].shape == (8, 23) and len(batch["instruction"]) == 8
    assert [n for _, n, _ in _Mixture(demos, successes, 0.25, 8).parts] == [2, 6]
    assert [n for _, n, _ in _Mixture(None, successes, 0.25, 8).parts] == [0, 8]
    assert [n for _, n, _ in _Mixture(demos, None, 0.25, 8).parts] == [8, 0]
    with pytest.raises(ValueError, match="nothing to train on"):
        _Mixture(None, None, 0.5, 8)


def test_prefetched_batches_are_the_inline_draws_in_order():
    def draws(seed):
        rng = np.random.default_rng(seed)
        return lambda: rng.integers(0, 1000, 3)

    inline = draws(7)
    expected = [inline() for _ in range(20)]
    for depth in (2, 0):  # a background thread; inline
        with _Prefetch(draws(7), 20, depth=depth) as batches:
            got = list(batches)
        assert len(got) == 20 and all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
    with _Prefetch(None, 0) as batches:  # a round with nothing to train on
        assert list(batches) == []


def test_prefetch_raises_the_draws_error_and_stops_when_left_early():
    calls = []

    def draw():
        calls.append(1)
        if len(calls) == 3:
            raise OSError("unreadable rollout file")
        return len(calls)

    with pytest.raises(OSError, match="unreadable rollout file"), _Prefetch(draw, 10) as batches:
        assert [next(batches), next(batches)] == [1, 2]
        next(batches)
    prefetch = _Prefetch(lambda: calls.append(1), 10_000, depth=1)
    with pytest.raises(RuntimeError, match="boom"), prefetch as batches:
        next(batches)
        raise RuntimeError("boom")
    assert not prefetch._thread.is_alive() and len(calls) < 100  # stopped, not drawn to the end


def _config(checkpoint, demo_file, out, **overrides):
    kwargs = dict(
        policy=str(checkpoint),
        demos=[str(demo_file)],
        out=str(out),
        rounds=2,
        episodes_per_round=2,
        n_envs=2,
        updates_per_round=2,
        batch_size=4,
        eval_every=1,
        eval_episodes=1,
        device="cpu",
        progress=False,
    )
    return FilteredBCConfig(**{**kwargs, **overrides})


@pytest.mark.smoke
def test_run_writes_checkpoints_curve_and_evaluates(bc_checkpoint, demo_file, tmp_path):
    result = train_filtered_bc(_config(bc_checkpoint, demo_file, tmp_path / "run"))
    assert result["rounds"] == 2 and result["updates"] == 4 and result["env_steps"] > 0
    assert [(c["round"], c["updates"]) for c in result["curve"]] == [(1, 2), (2, 4)]
    assert json.loads((tmp_path / "run" / "eval" / "curve.json").read_text()) == result["curve"]
    ckpt = tmp_path / "run" / "checkpoints" / "step_4"
    assert result["checkpoint"] == str(ckpt)
    meta = json.loads((ckpt / "config.json").read_text())
    assert meta["extra"]["env_id"] == TASK and meta["extra"]["rl_config"]["algo"] == "filtered-bc"
    scalars = EventAccumulator(str(tmp_path / "run" / "tb")).Reload()
    shares = {o: [e.value for e in scalars.Scalars(f"rollout/outcome_{o}")] for o in OUTCOMES}
    assert np.allclose(np.sum(list(shares.values()), axis=0), 1.0)  # every collection episode has one outcome
    success = [e.value for e in scalars.Scalars("rollout/success_rate")]
    np.testing.assert_allclose(shares["success"], success)
    results = evaluate(EvalConfig(policy=str(ckpt), episodes=1, out=str(tmp_path / "ev"), progress=False))
    assert results["tasks"][TASK]["n"] == 1
    # the weights moved away from the BC checkpoint's
    before = load_file(str(bc_checkpoint / "model.safetensors"))
    after = load_file(str(ckpt / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize(
    "ema, schedule, groups",
    [(0.0, "constant", {}), (0.5, "constant", {}), (0.0, "cosine", {"group_size": 2, "weighting": "state"})],
)
def test_resume_equals_an_uninterrupted_run(bc_checkpoint, demo_file, tmp_path, ema, schedule, groups):
    common = dict(eval_every=0, ema=ema, lr_schedule=schedule, **groups)
    straight = train_filtered_bc(_config(bc_checkpoint, demo_file, tmp_path / "a", **common))
    # the first half alone, stopped by the time limit, so that its schedule is the whole run's
    train_filtered_bc(_config(bc_checkpoint, demo_file, tmp_path / "b", max_minutes=1e-9, **common))
    assert latest_checkpoint(tmp_path / "b").name == "step_2"
    resumed = train_filtered_bc(_config(bc_checkpoint, demo_file, tmp_path / "b", resume=True, **common))
    assert (resumed["rounds"], resumed["updates"], resumed["env_steps"]) == (
        straight["rounds"],
        straight["updates"],
        straight["env_steps"],
    )
    a = load_file(str(tmp_path / "a" / "checkpoints" / "step_4" / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / "checkpoints" / "step_4" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    if ema:  # the saved policy is the average, not the raw weights the optimiser moves
        raw = torch.load(tmp_path / "a" / "checkpoints" / "step_4" / "training_state.pt", weights_only=True)["model"]
        assert any(not torch.equal(a[k], raw[k]) for k in a)


def test_frozen_encoders_keep_their_bc_weights(bc_checkpoint, demo_file, tmp_path):
    cfg = _config(bc_checkpoint, demo_file, tmp_path / "run", rounds=1, eval_every=0, freeze_encoders=True)
    assert train_filtered_bc(cfg)["updates"] == 2
    before = load_file(str(bc_checkpoint / "model.safetensors"))
    after = load_file(str(tmp_path / "run" / "checkpoints" / "step_2" / "model.safetensors"))
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved and all(k.startswith(("trunk.", "head.", "proprio.")) for k in moved), sorted(moved)
    assert any(k.startswith("head.") for k in moved)


def test_time_limit_stops_before_a_round_that_would_not_fit(bc_checkpoint):
    cfg = FilteredBCConfig(policy=str(bc_checkpoint), demos=[], max_minutes=10)
    assert not out_of_time(cfg, 0.0, 0.0)  # the first round always runs
    assert not out_of_time(cfg, 480.0, 120.0)  # it ends at 600 s: within the limit
    assert out_of_time(cfg, 481.0, 120.0)  # it would end past 600 s
    assert out_of_time(cfg, 600.0, 0.0)  # spent (a resumed run knows no round length)
    assert not out_of_time(dataclasses.replace(cfg, max_minutes=None), 1e9, 1e9)


def test_cosine_schedule_decays_to_zero_over_the_runs_updates(bc_checkpoint):
    cfg = FilteredBCConfig(policy=str(bc_checkpoint), demos=[], rounds=4, updates_per_round=25, lr_schedule="cosine")
    assert [round(_lr_factor(cfg, u), 6) for u in (0, 50, 100, 120)] == [1.0, 0.5, 0.0, 0.0]
    constant = dataclasses.replace(cfg, lr_schedule="constant")
    assert {_lr_factor(constant, u) for u in (0, 50, 100)} == {1.0}


def test_time_schedule_decays_to_zero_over_the_time_budget(bc_checkpoint, demo_file, tmp_path):
    cfg = FilteredBCConfig(policy=str(bc_checkpoint), demos=[], max_minutes=2, lr_schedule="cosine-time")
    factors = [
        _lr_factor(cfg, update, seconds) for update, seconds in ((0, 0), (0, 60), (10**6, 60), (5, 120), (5, 900))
    ]
    assert [round(f, 6) for f in factors] == [1.0, 0.5, 0.5, 0.0, 0.0]  # the clock decides, not the step
    with pytest.raises(ValueError, match="give max_minutes"):
        FilteredBCConfig(policy=str(bc_checkpoint), demos=[], lr_schedule="cosine-time")
    # a run: the rate falls round by round as the clock runs, from below the peak (the first round took time)
    run = _config(bc_checkpoint, demo_file, tmp_path / "run", eval_every=0, max_minutes=1, lr_schedule="cosine-time")
    assert train_filtered_bc(run)["rounds"] == 2
    lrs = [e.value for e in EventAccumulator(str(tmp_path / "run" / "tb")).Reload().Scalars("train/lr")]
    assert len(lrs) == 2 and 0 < lrs[1] < lrs[0] < run.lr


@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_state_weighting_trains_on_weighted_successes(bc_checkpoint, demo_file, tmp_path, expert_collects, gamma):
    import vlagym.rl.filtered_bc as fbc

    expert_collects()  # every try succeeds, so the weighted buffer is trained on
    cfg = _config(bc_checkpoint, demo_file, tmp_path / "run", group_size=2, weighting="state", eval_every=0,
                  gamma=gamma)  # fmt: skip
    result = train_filtered_bc(cfg)
    assert result["updates"] == 4
    all_lengths = []
    for r in range(2):  # one state per round, tried twice: both successes share its unit of weight
        path = rollout_path(tmp_path / "run", r)
        lengths = np.array([len(s) for s in fbc.read_success_states(path)])
        np.testing.assert_allclose(read_weights(path), 0.5 * gamma**lengths)
        all_lengths += list(lengths)
    scalars = EventAccumulator(str(tmp_path / "run" / "tb")).Reload()
    mean_length = [e.value for e in scalars.Scalars("buffer/mean_episode_length")]
    np.testing.assert_allclose(mean_length, [np.mean(all_lengths[:2]), np.mean(all_lengths)], rtol=1e-6)


def test_gripper_reopens_counts_closed_to_open_switches():
    def gripper(*commands):
        return np.concatenate([np.zeros((len(commands), 6)), np.array(commands)[:, None]], axis=1)

    assert gripper_reopens(gripper(-1, -1, -0.5)) == 0  # never closed
    assert gripper_reopens(gripper(-1, 0.2, 1, 0.3)) == 0  # closed once and held (a partial release still holds)
    assert gripper_reopens(gripper(-1, 1, -0.1, 0.0, 1)) == 1  # 0 is closed, as the VLA's binary gripper has it
    assert gripper_reopens(gripper(1, -1, 1, -0.2, 1, 1)) == 2
    assert gripper_reopens(gripper(-1, 1, -1)) == 1  # a place's final release counts
    assert gripper_reopens(np.zeros((0, 7))) == 0


def test_max_gripper_reopens_keeps_reopening_successes_out_of_the_buffer(
    bc_checkpoint, demo_file, tmp_path, expert_collects
):
    def reopen_first(collection, envs, actor, seeds):  # the first success of a round re-opens its gripper
        _reopen_after_first_close(collection.successes[0])
        return collection

    expert_collects(reopen_first)
    kept = {}
    for limit in (None, 0):
        out = tmp_path / f"run_{limit}"
        train_filtered_bc(_config(bc_checkpoint, demo_file, out, eval_every=0, max_gripper_reopens=limit))
        kept[limit] = []
        for r in range(2):
            with h5py.File(rollout_path(out, r), "r") as f:
                kept[limit].append([gripper_reopens(demo["actions"][()]) for demo in f["data"].values()])
        scalars = EventAccumulator(str(out / "tb")).Reload()
        assert [e.value for e in scalars.Scalars("rollout/success_reopen_share")] == [0.5, 0.5]
        filtered = [e.value for e in scalars.Scalars("rollout/successes_filtered")]
        assert filtered == ([0, 0] if limit is None else [1, 1])
    assert kept[None] == [[1, 0], [1, 0]]
    assert kept[0] == [[0], [0]]


def test_recorder_keeps_the_reach_distance_at_the_first_close(expert_rollouts):
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


def test_max_close_distance_keeps_successes_closed_far_away_out_of_the_buffer(
    bc_checkpoint, demo_file, tmp_path, expert_collects
):
    def close_far(collection, envs, actor, seeds):  # the first success of a round "closed" 9 cm off
        successes = collection.successes
        successes[0] = dataclasses.replace(successes[0], close_distance=0.09)
        successes[1] = dataclasses.replace(successes[1], close_distance=None)  # a task without a reach distance
        return collection

    expert_collects(close_far)
    kept = {}
    for limit in (None, 0.04):
        out = tmp_path / f"run_{limit}"
        train_filtered_bc(_config(bc_checkpoint, demo_file, out, eval_every=0, max_close_distance=limit))
        kept[limit] = []
        for r in range(2):
            with h5py.File(rollout_path(out, r), "r") as f:
                kept[limit].append([demo.attrs.get("close_distance") for demo in f["data"].values()])
        scalars = EventAccumulator(str(out / "tb")).Reload()
        assert [e.value for e in scalars.Scalars("rollout/success_close_distance_p50")] == pytest.approx([0.09] * 2)
        tags = scalars.Tags()["scalars"]
        if limit is None:
            assert not any(tag.startswith("far_close/") for tag in tags)
        else:
            assert [e.value for e in scalars.Scalars("far_close/rollout")] == [1, 1]
            assert [e.value for e in scalars.Scalars("far_close/hindsight")] == [0, 0]
    assert kept[None] == [[0.09, None], [0.09, None]]
    assert kept[0.04] == [[None], [None]]


def test_collect_env_kwargs_change_the_collection_scenes_alone(bc_checkpoint, demo_file, tmp_path, expert_collects):
    from vlagym.train.bc import demo_env

    cups = []

    def count_cups(collection, envs, actor, seeds):  # the expert succeeds, so the rounds write rollout files
        cups.extend(sum(o.present and o.kind == "cup" for o in e.unwrapped.objects) for e in envs.envs)
        return collection

    expert_collects(count_cups)
    out = tmp_path / "run"
    result = train_filtered_bc(_config(bc_checkpoint, demo_file, out, rounds=1, collect_env_kwargs={"num_cups": 3}))
    assert cups and set(cups) == {3}  # every collection scene holds three cups
    assert demo_env(rollout_path(out, 0))[1]["num_cups"] == 3  # the rollouts say which scenes they show
    meta = json.loads((Path(result["checkpoint"]) / "config.json").read_text())
    assert "num_cups" not in meta["extra"]["env_kwargs"]  # `vlagym eval` of the checkpoint: the task's own scenes
    evaluated = json.loads((out / "eval" / f"step_{result['updates']}" / "eval_config.json").read_text())
    assert "num_cups" not in evaluated["env_kwargs"]


def test_n_action_steps_sets_how_the_policy_acts_and_is_saved(bc_checkpoint, demo_file, tmp_path, monkeypatch):
    predicted = []
    real = VLAPolicy.predict_action_chunk
    monkeypatch.setattr(VLAPolicy, "predict_action_chunk", lambda *a, **k: predicted.append(1) or real(*a, **k))
    cfg = _config(bc_checkpoint, demo_file, tmp_path / "run", rounds=1, episodes_per_round=1, n_envs=1,
                  eval_every=0, max_episode_steps=6, n_action_steps=1)  # fmt: skip
    result = train_filtered_bc(cfg)
    assert len(predicted) == 6  # one chunk per step of the 6-step episode (the checkpoint's 4 would predict twice)
    saved = json.loads((Path(result["checkpoint"]) / "config.json").read_text())["config"]
    assert saved["n_action_steps"] == 1 and saved["temporal_ensemble"] is False
    assert json.loads((bc_checkpoint / "config.json").read_text())["config"]["n_action_steps"] == 4


def test_retry_pass_tries_the_states_left_without_a_kept_success(bc_checkpoint, demo_file, tmp_path, expert_collects):
    calls, lengths = [], []

    def reopen_second_state(collection, envs, actor, seeds):  # in the first pass, the second state's successes
        # re-open the gripper, so max_gripper_reopens=0 drops them and leaves that state unsolved
        calls.append((actor.first_try, actor.noise_std, actor.hold, list(seeds)))
        lengths.extend(r.length for r in collection.records)
        if actor.first_try == 0:
            for e in collection.successes:
                if e.seed == seeds[-1]:
                    _reopen_after_first_close(e)
        return collection

    expert_collects(reopen_second_state)
    out = tmp_path / "run"
    cfg = _config(bc_checkpoint, demo_file, out, eval_every=0, episodes_per_round=4, group_size=2,
                  weighting="state", max_gripper_reopens=0, retry_noise_std=0.3, retry_noise_hold=5)  # fmt: skip
    result = train_filtered_bc(cfg)
    for r in range(2):
        first, second = round_seeds(cfg, r)[0], round_seeds(cfg, r)[-1]
        assert calls[2 * r] == (0, cfg.noise_std, cfg.noise_hold, [first, first, second, second])
        assert calls[2 * r + 1] == (2, 0.3, 5, [second, second])  # the unsolved state, group_size more tries
        with h5py.File(rollout_path(out, r), "r") as f:  # the retries' successes join the round's
            assert [int(demo.attrs["seed"]) for demo in f["data"].values()] == [first, first, second, second]
        np.testing.assert_allclose(read_weights(rollout_path(out, r)), [0.5] * 4)  # each state: one unit
    assert result["env_steps"] == sum(lengths)  # both passes count
    scalars = EventAccumulator(str(out / "tb")).Reload()
    values = {name: [e.value for e in scalars.Scalars(name)] for name in scalars.Tags()["scalars"]}
    assert values["retry/states"] == [1, 1] and values["retry/states_solved"] == [1, 1]
    assert values["retry/successes_kept"] == [2, 2] and values["retry/success_rate"] == [1, 1]
    assert values["rollout/successes_filtered"] == [2, 2] and values["rollout/success_rate"] == [1, 1]
    # without retries, the same run collects once per round
    calls.clear()
    train_filtered_bc(dataclasses.replace(cfg, out=str(tmp_path / "plain"), retry_noise_std=0.0))
    assert [c[0] for c in calls] == [0, 0]


def test_advantage_weighting_trains_a_critic_and_resumes_exactly(bc_checkpoint, demo_file, tmp_path, expert_collects):
    import vlagym.rl.filtered_bc as fbc
    from vlagym.rl.advantage import read_states, states_path

    expert_collects()
    common = dict(group_size=2, weighting="advantage", critic_updates=5, eval_every=0, lr_schedule="cosine")
    straight = train_filtered_bc(_config(bc_checkpoint, demo_file, tmp_path / "a", **common))
    assert straight["updates"] == 4
    for r in range(2):  # every collection episode's states, one row per step
        data = read_states([states_path(tmp_path / "a", r)])
        lengths = [len(s) for s in fbc.read_success_states(rollout_path(tmp_path / "a", r))]
        assert len(data["step"]) == sum(lengths) and data["success"].all()
    state = torch.load(tmp_path / "a" / "checkpoints" / "step_4" / "training_state.pt", weights_only=True)
    assert state["critic"]["state_dim"] == data["state"].shape[1]
    scalars = EventAccumulator(str(tmp_path / "a" / "tb")).Reload()
    for name in ("loss", "brier", "v_initial", "weight_effective_share", "weight_capped_share"):
        assert len(scalars.Scalars(f"critic/{name}")) == 2, name
    assert len(scalars.Scalars("critic/brier_new")) == 1  # from the second round on: a critic of earlier rounds
    # the first round alone, then resumed: the critic comes back with the policy
    train_filtered_bc(_config(bc_checkpoint, demo_file, tmp_path / "b", max_minutes=1e-9, **common))
    train_filtered_bc(_config(bc_checkpoint, demo_file, tmp_path / "b", resume=True, **common))
    a = load_file(str(tmp_path / "a" / "checkpoints" / "step_4" / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / "checkpoints" / "step_4" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    resumed = torch.load(tmp_path / "b" / "checkpoints" / "step_4" / "training_state.pt", weights_only=True)
    assert all(torch.equal(v, resumed["critic"]["model"][k]) for k, v in state["critic"]["model"].items())


def test_advantage_sample_weights_follow_the_buffers_order(expert_rollouts, tmp_path):
    import vlagym.rl.filtered_bc as fbc

    _, episodes, path = expert_rollouts

    class Critic:  # V rises with the step index: V(t) = t / 100
        def value(self, state, step):
            return np.asarray(step, np.float64) / 100

    out = tmp_path / "run"
    for k in (0, 2):
        rollout_path(out, k).parent.mkdir(parents=True, exist_ok=True)
        rollout_path(out, k).write_bytes(path.read_bytes())
    cfg = types.SimpleNamespace(advantage_beta=0.5, advantage_max_weight=20.0)
    policy = types.SimpleNamespace(config=types.SimpleNamespace(n_action_steps=3))
    weights = fbc._advantage_sample_weights(cfg, out, [0, 2], {}, Critic(), policy)
    expected = []
    for e in [*episodes, *episodes]:
        t = np.arange(len(e.actions))
        after = np.where(t + 3 < len(t), (t + 3) / 100, 1.0)
        expected.append(np.exp((after - t / 100) / 0.5))
    np.testing.assert_allclose(weights, np.concatenate(expected))


def test_no_demos_and_no_successes_skips_training(bc_checkpoint, tmp_path, caplog):
    cfg = FilteredBCConfig(policy=str(bc_checkpoint), demos=[], out=str(tmp_path / "r"), rounds=1,
                           episodes_per_round=1, n_envs=1, eval_every=0, device="cpu", progress=False)  # fmt: skip
    result = train_filtered_bc(cfg)
    assert result["updates"] == 0 and "nothing to train on" in caplog.text
    assert not rollout_path(tmp_path / "r", 0).exists()  # the tiny policy succeeded nowhere: no file


def test_default_demos_are_the_checkpoints_training_data(bc_checkpoint, demo_file, tmp_path):
    meta = json.loads((bc_checkpoint / "config.json").read_text())
    meta["extra"]["bc_config"] = {"dataset": [str(demo_file)]}
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(meta))
    (folder / "model.safetensors").write_bytes((bc_checkpoint / "model.safetensors").read_bytes())
    assert FilteredBCConfig(policy=str(folder)).demos == [str(demo_file)]
    meta["extra"]["bc_config"] = {"dataset": [str(tmp_path / "gone.hdf5")]}
    (folder / "config.json").write_text(json.dumps(meta))
    assert FilteredBCConfig(policy=str(folder)).demos == []


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"collect_seed": 100_010}, "overlap the evaluation seeds"),
        ({"demos": ["/nonexistent.hdf5"]}, "does not exist"),
        ({"env_kwargs": {"obs_mode": "state"}}, "may not set"),
        ({"noise_std": -0.1}, "noise_std"),
        ({"noise_hold": 0}, "noise_hold"),
        ({"demo_fraction": 1.5}, "demo_fraction"),
        ({"rounds": 0}, "rounds"),
        ({"task": "VLA-Nope-v0"}, "unknown task"),
        ({"algo": "ppo"}, "filtered-bc"),
        ({"ema": 1.0}, "ema must be < 1"),
        ({"lr_schedule": "linear"}, "lr_schedule must be one of"),
        ({"episodes_per_round": 10, "group_size": 4}, "must be a multiple of group_size"),
        ({"weighting": "return"}, "weighting must be one of"),
        ({"advantage_beta": 0.0}, "advantage_beta"),
        ({"gamma": 1.5}, "gamma must be"),
        ({"advantage_max_weight": 0.5}, "advantage_max_weight"),
        ({"critic_rounds": 0}, "critic_rounds"),
        ({"critic_updates": 0}, "critic_updates"),
        ({"max_gripper_reopens": -1}, "max_gripper_reopens"),
        ({"retry_noise_std": -0.1}, "retry_noise_std"),
        ({"retry_noise_hold": 0}, "retry_noise_hold"),
        ({"max_episode_steps": 0}, "max_episode_steps"),
        ({"env_kwargs": {"max_episode_steps": 50}}, "may not set"),
        ({"collect_env_kwargs": {"image_size": 32}}, "collect_env_kwargs: env_kwargs may not set"),
        ({"n_action_steps": 0}, "n_action_steps"),
        ({"n_action_steps": 5}, "n_action_steps=5 must be <= the checkpoint's chunk_size=4"),
        ({"collect_env_kwargs": [3]}, "collect_env_kwargs: env_kwargs must be a dict"),
        ({"hindsight_make_room": True}, "hindsight_make_room moves objects aside .* it needs hindsight"),
        ({"hindsight": True, "hindsight_make_room": 1}, "hindsight_make_room must be a bool"),
        ({"close_delays": "2,4"}, "close_delays must be a list of steps"),
        ({"close_delays": [2, 0]}, "each of close_delays must be an integer >= 1"),
        ({"close_delays": [2.0]}, "each of close_delays must be an integer >= 1"),
        ({"close_delays": [4, 2, 4]}, "close_delays repeats a delay"),
        ({"max_close_distance": 0.0}, "max_close_distance must be a finite number > 0.0"),
        ({"max_close_distance": -0.04}, "max_close_distance must be a finite number > 0.0"),
        ({"max_close_distance": "4cm"}, "max_close_distance must be a finite number > 0.0"),
    ],
)
def test_config_errors(bc_checkpoint, overrides, match):
    with pytest.raises(ValueError, match=match):
        FilteredBCConfig(**{"policy": str(bc_checkpoint), "demos": [], **overrides})


def test_task_defaults_to_the_checkpoints_and_takes_the_vlagym_prefix(bc_checkpoint):
    assert FilteredBCConfig(policy=str(bc_checkpoint), demos=[]).task == TASK
    assert FilteredBCConfig(policy=str(bc_checkpoint), demos=[], task=f"vlagym:{TASK}").task == TASK


# ---------------------------------------------------------------------------- hindsight replays
class _OpenLoopActor:
    """Plays one fixed action sequence from every episode start (one sub-env), then holds still, the gripper as
    the last action left it."""

    def __init__(self, actions: np.ndarray):
        self.actions, self.t = np.asarray(actions, np.float32), 0

    def new_round(self):
        pass

    def reset(self, mask, seeds=None):
        self.t = 0

    def __call__(self, obs):
        action = self.actions[self.t] if self.t < len(self.actions) else np.r_[np.zeros(6), self.actions[-1, -1]]
        self.t += 1
        return np.asarray(action, np.float32)[None]


def _expert_actions(seed: int, target_xy, env_kwargs, make_room: bool = False) -> np.ndarray:
    """The scripted expert's actions until success on seed `seed` with the target moved to `target_xy` (None:
    where the seed put it)."""
    env = gym.make(TASK, **env_kwargs)
    try:
        env.reset(seed=seed, options=None if target_xy is None else {"target_xy": target_xy, "make_room": make_room})
        expert = env.unwrapped.expert_cls(env.unwrapped)
        expert.reset()
        actions = []
        for _ in range(200):
            actions.append(expert.act())
            *_, terminated, truncated, info = env.step(actions[-1])
            if terminated or truncated:
                break
        assert info["success"]
        return np.array(actions, np.float32)
    finally:
        env.close()


def _hindsight_round(tmp_path_factory, actions, hindsight=True, seed=0, num_cups=1, make_room=False):
    kwargs = {**ENV, "num_cups": num_cups}
    cfg = FilteredBCConfig(
        policy=_tiny_checkpoint(tmp_path_factory), n_envs=1, demos=[], hindsight=hindsight,
        hindsight_make_room=make_room, max_episode_steps=len(actions) + 4,
    )  # fmt: skip
    envs = make_collection_envs(cfg, kwargs)
    try:
        return collect_round(envs, _OpenLoopActor(actions), [seed])[:4]
    finally:
        envs.close()


def test_hindsight_replays_a_miss_with_the_target_where_the_gripper_closed(tmp_path_factory):
    # The miss: the expert's actions for the scene with the cup at `aim`, played where the cup stands elsewhere.
    kwargs = {**ENV, "num_cups": 1}
    env = gym.make(TASK, **kwargs)
    try:
        env.reset(seed=0)
        cup = env.unwrapped.target.pos(env.unwrapped.data)[:2]
    finally:
        env.close()
    aim = (-0.06, -0.12 if cup[1] > 0 else 0.12)
    assert np.hypot(*(cup - aim)) > 0.15  # the arm never comes near the real cup
    actions = _expert_actions(0, aim, kwargs)
    records, successes, _, replays = _hindsight_round(tmp_path_factory, actions)
    assert [r.success for r in records] == [False] and successes == []
    [replay] = replays
    assert replay.seed == 0 and replay.skipped == "" and replay.episode is not None
    episode = replay.episode
    np.testing.assert_allclose(episode.target_xy, aim, atol=0.01)  # where the gripper closed: at the aimed cup
    assert replay.steps == len(episode.actions) <= len(actions)
    np.testing.assert_array_equal(episode.actions, actions[: len(episode.actions)])
    # the recorded replay is a demo of its scene: seed + target_xy remake it, its actions succeed there again
    env = gym.make(TASK, **kwargs)
    try:
        obs, _ = env.reset(seed=0, options={"target_xy": episode.target_xy})
        np.testing.assert_array_equal(obs["images"]["front"], episode.images["front"][0])
        for action in episode.actions:
            *_, info = env.step(action)
        assert info["success"]
    finally:
        env.close()
    # its weight: a unit of its own beside the seed's own successes ("state" weighting)
    real = dataclasses.replace(episode, target_xy=None)
    assert success_weights([real, real, episode], "state") == [0.5, 0.5, 1.0]
    # the rollout file keeps where the target stood
    path = tmp_path_factory.mktemp("hindsight") / "round_0000.hdf5"
    write_rollouts(path, [real, episode], TASK, kwargs)
    assert check_dataset(path) == []
    with h5py.File(path, "r") as f:
        assert "hindsight_target_xy" not in f["data/demo_0"].attrs
        np.testing.assert_allclose(f["data/demo_1"].attrs["hindsight_target_xy"], episode.target_xy)
        assert f["data/demo_1"].attrs["hindsight_moved_aside"] == 0 and episode.moved_aside == 0
    # the replay closed where the expert aimed, on the moved cup's axis
    assert episode.close_distance < 0.01
    # without the option no replay runs
    assert _hindsight_round(tmp_path_factory, actions, hindsight=False)[3] == []


def test_hindsight_make_room_replays_a_miss_that_closed_near_another_cup(tmp_path_factory):
    # The miss: the gripper closes 6 cm from the other cup of a two-cup scene, 15+ cm from the target; moving
    # the target there breaks the task's spacing rule, so plain hindsight skips it; make_room moves the other
    # cup aside and replays.
    kwargs = {**ENV, "num_cups": 2}
    env = gym.make(TASK, **kwargs)
    try:
        env.reset(seed=0)
        u = env.unwrapped
        cup = u.target.pos(u.data)[:2]
        other = next(o for o in u.objects if o.present and o is not u.target).pos(u.data)[:2]
    finally:
        env.close()
    offsets = 0.06 * np.array([[np.cos(a), np.sin(a)] for a in np.linspace(0, 2 * np.pi, 12, endpoint=False)])
    # a spot 6 cm from the other cup, 15+ cm from the target, inside the workspace (seed 0's layout has one)
    aim = next(p for p in other + offsets if np.hypot(*(cup - p)) > 0.15 and -0.1 <= p[0] <= 0.06 and abs(p[1]) <= 0.18)
    actions = _expert_actions(0, tuple(aim), kwargs, make_room=True)
    *_, [skipped] = _hindsight_round(tmp_path_factory, actions, num_cups=2)
    assert (skipped.skipped, skipped.episode) == ("layout", None)
    records, successes, _, [replay] = _hindsight_round(tmp_path_factory, actions, num_cups=2, make_room=True)
    assert [r.success for r in records] == [False] and successes == []
    assert replay.skipped == "" and replay.moved_aside == 1 and replay.episode is not None
    episode = replay.episode
    assert episode.moved_aside == 1
    np.testing.assert_allclose(episode.target_xy, aim, atol=0.01)
    # seed + target_xy + make_room remake the replay's scene
    env = gym.make(TASK, **kwargs)
    try:
        obs, _ = env.reset(seed=0, options={"target_xy": episode.target_xy, "make_room": True})
        np.testing.assert_array_equal(obs["images"]["front"], episode.images["front"][0])
    finally:
        env.close()
    path = tmp_path_factory.mktemp("room") / "round_0000.hdf5"
    write_rollouts(path, [episode], TASK, kwargs)
    assert check_dataset(path) == []
    with h5py.File(path, "r") as f:
        assert f["data/demo_0"].attrs["hindsight_moved_aside"] == 1


def test_hindsight_skips_what_a_replay_cannot_fix(tmp_path_factory):
    # a gripper that never closes
    still = np.zeros((6, 7), np.float32)
    still[:, -1] = -1.0
    records, _, _, [replay] = _hindsight_round(tmp_path_factory, still)
    assert not records[0].success and (replay.skipped, replay.episode, replay.steps) == ("no_close", None, 0)
    # a gripper that closed at the target (the episode ended before the lift): the same scene, nothing to move
    env = gym.make(TASK, **ENV, num_cups=1)
    try:
        env.reset(seed=0)
        cup = tuple(env.unwrapped.target.pos(env.unwrapped.data)[:2])
    finally:
        env.close()
    actions = _expert_actions(0, cup, {**ENV, "num_cups": 1})
    closed = int(np.flatnonzero(actions[:, -1] >= 0)[0])
    _, _, _, [replay] = _hindsight_round(tmp_path_factory, actions[: closed + 2])
    assert (replay.skipped, replay.episode) == ("at_target", None)


# ---------------------------------------------------------------------------- delayed-close replays
def _delay_round(tmp_path_factory, actions, close_delays, seed=0):
    """`collect_round` of one episode playing `actions` (then holding still) on one sub-env, with `close_delays`."""
    cfg = FilteredBCConfig(
        policy=_tiny_checkpoint(tmp_path_factory), n_envs=1, demos=[], close_delays=close_delays,
        max_episode_steps=len(actions) + 4,
    )  # fmt: skip
    envs = make_collection_envs(cfg, {**ENV, "num_cups": 1})
    try:
        return collect_round(envs, _OpenLoopActor(actions), [seed])
    finally:
        envs.close()


def _early_close(seed=0, early=6):
    """The scripted expert's actions on `seed` with the `early` descent steps before its first close cut out:
    the gripper closes `early` steps too soon, above the cup's grasp height (the expert descends at full speed)."""
    actions = _expert_actions(seed, None, {**ENV, "num_cups": 1})
    close = int(np.flatnonzero(actions[:, -1] >= 0)[0])
    assert (actions[close - early : close, -1] < 0).all()
    return np.concatenate([actions[: close - early], actions[close:]]), close - early


def test_close_delays_replay_a_grasp_closed_too_early_from_the_close(tmp_path_factory):
    actions, close = _early_close()
    # put off by 1 step the close is still too high; by 3 it grasps (what `_early_close` cut was 6 steps)
    collection = _delay_round(tmp_path_factory, actions, [1, 3, 6])
    assert [r.success for r in collection.records] == [False] and collection.successes == []
    assert collection.hindsight == []  # hindsight is off
    [replay] = collection.delayed
    assert replay.seed == 0 and replay.skipped == "" and replay.close_delay == 3
    episode = replay.episode
    assert episode is not None and episode.close_delay == 3 and episode.target_xy is None
    # the actions: the episode's up to the close, 3 copies of the one before it, then the episode's own
    n = len(episode.actions)
    edited = np.concatenate([actions[:close], np.repeat(actions[close - 1 : close], 3, axis=0), actions[close:]])
    np.testing.assert_array_equal(episode.actions, edited[:n])
    # simulated: the k = 1 replay (to the end of the episode's length, no success) and the k = 3 one; nothing
    # before the close runs again
    length = collection.records[0].length
    assert replay.steps == (length - close) + (n - close)
    # a true episode of the seed: its actions from a plain reset give the recorded frames and states again
    # (restoring the simulator's data at the close continues the episode exactly), and succeed at the last step
    env = gym.make(TASK, **ENV, num_cups=1)
    try:
        obs, _ = env.reset(seed=0)
        for t, action in enumerate(episode.actions):
            np.testing.assert_array_equal(obs["images"]["front"], episode.images["front"][t])
            np.testing.assert_array_equal(env.unwrapped.sim_state(), episode.states[t])
            obs, _, _, _, info = env.step(action)
            assert info["success"] == (t == n - 1)
    finally:
        env.close()
    # it closed nearer to the cup than the failed episode did (3 of the 6 steps it closed too early)
    record_env = gym.make(TASK, **ENV, num_cups=1)
    try:
        _, info = record_env.reset(seed=0)
        for action in actions[:close]:
            *_, info = record_env.step(action)
    finally:
        record_env.close()
    assert episode.close_distance < info["reach_distance"] - 0.01
    # "state" weighting: it shares the seed's unit with the seed's own successes (the same scene)
    own = dataclasses.replace(episode, close_delay=0)
    assert success_weights([own, episode], "state") == [0.5, 0.5]
    path = tmp_path_factory.mktemp("delay") / "round_0000.hdf5"
    write_rollouts(path, [own, episode], TASK, {**ENV, "num_cups": 1})
    assert check_dataset(path) == []
    with h5py.File(path, "r") as f:
        assert "close_delay" not in f["data/demo_0"].attrs and f["data/demo_1"].attrs["close_delay"] == 3
    # no delay fixes it: no episode; each replay ran the episode's length from the close (the gripper never opens)
    [none] = _delay_round(tmp_path_factory, actions, [1, 8]).delayed
    assert (none.episode, none.skipped, none.close_delay, none.steps) == (None, "", 0, 2 * (length - close))
    # without the option nothing is replayed
    assert _delay_round(tmp_path_factory, actions, []).delayed == []


def test_close_delays_skip_what_they_cannot_replay(tmp_path_factory):
    still = np.zeros((6, 7), np.float32)
    still[:, -1] = -1.0  # never closes
    [replay] = _delay_round(tmp_path_factory, still, [2]).delayed
    assert (replay.skipped, replay.episode, replay.steps) == ("no_close", None, 0)
    shut = still.copy()
    shut[:, -1] = 1.0  # closes at the first step: no action before it to go on with
    [replay] = _delay_round(tmp_path_factory, shut, [2]).delayed
    assert (replay.skipped, replay.episode, replay.steps) == ("at_start", None, 0)


def test_a_delayed_close_replay_ends_when_the_gripper_opens_again(tmp_path_factory):
    # closes at step 2, opens at step 4: each replay runs the 2 inserted steps and the 2 closed ones, and stops
    actions = np.zeros((8, 7), np.float32)
    actions[:, -1] = [-1, -1, 1, 1, -1, -1, -1, -1]
    [replay] = _delay_round(tmp_path_factory, actions, [2, 3]).delayed
    assert (replay.skipped, replay.episode, replay.steps) == ("", None, 4 + 5)
