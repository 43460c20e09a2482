"""The preference (DPO) term of filtered BC: pairs of tries of one state, the bank, the loss, a run with it."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch
from rl_helpers import ENV_KWARGS, TASK
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_filtered_bc import _config

from vlagym.policies.vla import VLAPolicy
from vlagym.rl.filtered_bc import (
    FilteredBCConfig,
    NoisyVLA,
    RolloutEpisode,
    collect_round,
    make_collection_envs,
    rollout_path,
    round_seeds,
    train_filtered_bc,
)
from vlagym.rl.preference import (
    build_bank,
    draw_pairs,
    pair_batch,
    pair_tries,
    pairs_path,
    preference_loss,
    read_bank,
    write_bank,
)

ENV = {"obs_mode": "rgb", **ENV_KWARGS}


def _episode(seed, length, rng, action=None):
    """A synthetic episode of `length` steps: random images and proprio, constant `action` (or random ones)."""
    actions = rng.normal(0, 0.3, (length, 7)) if action is None else np.tile(action, (length, 1))
    return RolloutEpisode(
        seed=seed,
        instruction="pick up the red cup",
        task=TASK,
        images={cam: rng.integers(0, 255, (length, 32, 32, 3), dtype=np.uint8) for cam in ("front", "wrist")},
        proprio=rng.normal(0, 0.5, (length, 23)).astype(np.float32),
        state=np.zeros((length, 4), np.float32),
        states=np.zeros((length, 4)),
        actions=actions.astype(np.float32),
        rewards=np.zeros(length, np.float32),
    )


def test_pairs_are_the_successes_and_failures_of_one_state():
    rng = np.random.default_rng(0)
    w1, w2, w3 = _episode(1, 5, rng), _episode(1, 6, rng), _episode(2, 5, rng)
    f1, f2, f3 = _episode(1, 9, rng), _episode(3, 9, rng), _episode(1, 8, rng)
    pairs = pair_tries([w1, w2, w3], [f1, f2, f3])
    assert [(id(w), id(f)) for w, f in pairs] == [(id(a), id(b)) for a, b in [(w1, f1), (w1, f3), (w2, f1), (w2, f3)]]
    assert pair_tries([w3], [f1, f2]) == []


def test_bank_compares_each_pair_over_its_shorter_length(bc_checkpoint):
    policy = VLAPolicy.from_pretrained(bc_checkpoint)  # chunks of 4, all executed
    rng = np.random.default_rng(1)
    won, lost = _episode(7, 6, rng), _episode(7, 11, rng)
    bank = build_bank(pair_tries([won], [lost]), policy)
    assert len(bank) == 1
    # chunk starts 0 and 4 of each side (compared length 6): 4 samples, the second chunk 2 steps long
    assert bank.won.tolist() == [[0, 1]] and bank.lost.tolist() == [[2, 3]]
    assert bank.valid.tolist() == [[True] * 4, [True, True, False, False]] * 2
    offset, scale = policy.action_offset.numpy(), policy.action_scale.numpy()
    np.testing.assert_allclose(bank.actions[3, :2], (lost.actions[4:6] - offset) / scale, rtol=1e-5)
    np.testing.assert_array_equal(bank.images["wrist"][1], won.images["wrist"][4])
    obs = {"images": {c: lost.images[c][4] for c in ("front", "wrist")}, "proprio": lost.proprio[4],
           "instruction": lost.instruction}  # fmt: skip
    chunk = policy.predict_action_chunk(policy.batch_from_obs(obs))[0].numpy()
    np.testing.assert_allclose(bank.reference[3], (chunk - offset) / scale, rtol=1e-4, atol=1e-5)
    assert build_bank([], policy) is None


def test_bank_round_trips_through_its_file(bc_checkpoint, tmp_path):
    policy = VLAPolicy.from_pretrained(bc_checkpoint)
    rng = np.random.default_rng(2)
    bank = build_bank(pair_tries([_episode(1, 9, rng)], [_episode(1, 12, rng), _episode(1, 3, rng)]), policy)
    path = pairs_path(rollout_path(tmp_path, 4))
    assert path.name == "round_0004.pairs.npz"
    write_bank(path, bank)
    back = read_bank(path)
    for f in dataclasses.fields(bank):
        a, b = getattr(bank, f.name), getattr(back, f.name)
        if isinstance(a, dict):
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
        else:
            np.testing.assert_array_equal(a, b)
    assert not list(path.parent.glob(".*tmp*"))


def _first_action(policy, episode, t=0):
    """The first action of the chunk `policy` predicts at step `t` of `episode` (env units)."""
    obs = {"images": {c: episode.images[c][t] for c in episode.images}, "proprio": episode.proprio[t]}
    return policy.predict_action_chunk(policy.batch_from_obs({**obs, "instruction": episode.instruction}))[0, 0].numpy()


def test_the_loss_starts_at_log_2_and_moves_the_chunk_toward_the_success(bc_checkpoint):
    torch.manual_seed(0)
    policy = VLAPolicy.from_pretrained(bc_checkpoint)
    first = _episode(5, 4, np.random.default_rng(3))  # the observations both tries went through
    mean = _first_action(policy, first)
    scale = policy.action_scale.numpy()
    push = np.zeros(7, np.float32)
    push[0] = 0.1 * scale[0]  # one noise std along x, in env units
    won, lost = copy.deepcopy(first), copy.deepcopy(first)
    won.actions[:] = mean + push  # the success went +x, the failure -x, from the same observations
    lost.actions[:] = mean - push
    banks = [build_bank([(won, lost)], policy)]
    drawn = draw_pairs(np.random.default_rng(0), banks, pairs=4, chunks=1)
    loss, metrics = preference_loss(policy, pair_batch(policy, banks, drawn), sigma=0.1, beta=0.1)
    assert float(loss.detach()) == pytest.approx(np.log(2), abs=1e-4)
    assert metrics["margin"] == pytest.approx(0, abs=1e-4)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.05)
    for _ in range(20):
        loss, metrics = preference_loss(policy, pair_batch(policy, banks, drawn), sigma=0.1, beta=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert float(loss.detach()) < np.log(2) - 0.05 and metrics["accuracy"] == 1.0
    assert _first_action(policy, first)[0] > mean[0]  # toward the success's +x


def test_draws_are_seeded_and_stay_within_each_side(bc_checkpoint):
    policy = VLAPolicy.from_pretrained(bc_checkpoint)
    rng = np.random.default_rng(4)
    banks = [
        build_bank(pair_tries([_episode(1, 9, rng)], [_episode(1, 12, rng)]), policy),
        build_bank(pair_tries([_episode(2, 3, rng), _episode(2, 5, rng)], [_episode(2, 12, rng)]), policy),
    ]
    a = draw_pairs(np.random.default_rng(9), banks, pairs=50, chunks=3)
    b = draw_pairs(np.random.default_rng(9), banks, pairs=50, chunks=3)
    assert all(x[0] == y[0] and np.array_equal(x[1], y[1]) for x, y in zip(a, b, strict=True))
    assert {x[0] for x in a} == {0, 1}
    for bank_index, rows in a:
        bank = banks[bank_index]
        sides = [set(bank.won.ravel()) - {-1}, set(bank.lost.ravel()) - {-1}]
        assert rows.shape == (2, 3) and set(rows[0]) <= sides[0] and set(rows[1]) <= sides[1]


def test_recorder_hands_over_the_failures_when_asked(bc_checkpoint):
    cfg = FilteredBCConfig(policy=str(bc_checkpoint), n_envs=2, demos=[], group_size=2, max_episode_steps=6,
                           preference_weight=1.0)  # fmt: skip
    envs = make_collection_envs(cfg, ENV)
    try:
        collection = collect_round(envs, NoisyVLA(VLAPolicy.from_pretrained(bc_checkpoint), 0.1), [3, 3, 4, 4])
    finally:
        envs.close()
    assert not any(r.success for r in collection.records)  # the untrained policy fails every try
    assert [e.seed for e in collection.failures] == [3, 3, 4, 4]
    assert all(len(e.actions) == 6 and e.images["front"].shape == (6, 32, 32, 3) for e in collection.failures)
    assert not np.array_equal(collection.failures[0].actions, collection.failures[1].actions)  # own noise each


def test_config_needs_tries_with_noise(bc_checkpoint):
    with pytest.raises(ValueError, match="group_size >= 2 and noise_std > 0"):
        FilteredBCConfig(policy=str(bc_checkpoint), demos=[], preference_weight=1.0)
    with pytest.raises(ValueError, match="group_size >= 2 and noise_std > 0"):
        FilteredBCConfig(policy=str(bc_checkpoint), demos=[], preference_weight=1.0, group_size=2, noise_std=0.0)
    with pytest.raises(ValueError, match="preference_beta"):
        FilteredBCConfig(policy=str(bc_checkpoint), demos=[], preference_beta=0.0)


def test_a_flow_policy_cannot_use_the_term(flow_checkpoint, tmp_path):
    cfg = FilteredBCConfig(policy=str(flow_checkpoint), demos=[], out=str(tmp_path / "run"), group_size=2,
                           episodes_per_round=2, preference_weight=1.0, progress=False)  # fmt: skip
    with pytest.raises(ValueError, match="head 'flow'"):
        train_filtered_bc(cfg)


@pytest.mark.smoke
def test_run_with_the_preference_term_trains_on_pairs_and_resumes(bc_checkpoint, demo_file, tmp_path, expert_collects):
    def second_try_fails(collection, envs, actor, seeds):  # of each state's two expert successes, one "fails"
        failed = []
        for e in collection.successes[1::2]:
            e = copy.deepcopy(e)
            e.actions[:, :-1] += 0.05
            failed.append(e)
        return collection._replace(successes=collection.successes[0::2], failures=failed)

    expert_collects(second_try_fails)
    cfg = _config(bc_checkpoint, demo_file, tmp_path / "run", group_size=2, eval_every=0, preference_weight=1.0,
                  preference_pairs=2, preference_chunks=1, preference_rounds=1)  # fmt: skip
    assert round_seeds(cfg, 0) == [cfg.collect_seed] * 2
    result = train_filtered_bc(cfg)
    assert result["updates"] == 4
    assert [len(read_bank(pairs_path(rollout_path(tmp_path / "run", r)))) for r in range(2)] == [1, 1]
    scalars = EventAccumulator(str(tmp_path / "run" / "tb")).Reload()
    assert [e.value for e in scalars.Scalars("preference/pairs")] == [1, 1]  # one round's pairs drawn
    assert all(np.isfinite(e.value) for e in scalars.Scalars("preference/loss"))
    # stopped after the first round and resumed: the same weights as the uninterrupted run
    first = dataclasses.replace(cfg, out=str(tmp_path / "resumed"), rounds=1)
    train_filtered_bc(first)
    train_filtered_bc(dataclasses.replace(first, rounds=2, resume=True))
    from safetensors.torch import load_file

    a = load_file(str(tmp_path / "run" / "checkpoints" / "step_4" / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "checkpoints" / "step_4" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
