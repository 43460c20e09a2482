"""Relabelling by replay inside the collection envs: hindsight (the target moved to where the gripper closed)
and delayed close (the first close put off by k steps)."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import h5py
import numpy as np
from rl_helpers import ENV, TASK

from vlagym.rl.collection.files import write_rollouts
from vlagym.rl.collection.rollouts import collect_round
from vlagym.rl.fbc import FilteredBCConfig
from vlagym.rl.fbc.buffer import success_weights
from vlagym.rl.fbc.collect import make_collection_envs
from vlagym.train.validate import check_dataset


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


def _expert_actions(seed: int, target_xy, env_kwargs) -> np.ndarray:
    """The scripted expert's actions until success on seed `seed` with the target moved to `target_xy` (None:
    where the seed put it)."""
    env = gym.make(TASK, **env_kwargs)
    try:
        env.reset(seed=seed, options=None if target_xy is None else {"target_xy": target_xy})
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


def _one_episode(checkpoint, actions, seed=0, num_cups=1, **options):
    """`collect_round` of one episode playing `actions` (then holding still) on one sub-env, cut 4 steps after
    them, with the relabelling `options` of `FilteredBCConfig`."""
    cfg = FilteredBCConfig(policy=str(checkpoint), n_envs=1, demos=[], **options)
    envs = make_collection_envs(cfg, {**ENV, "num_cups": num_cups, "max_episode_steps": len(actions) + 4})
    try:
        return collect_round(envs, _OpenLoopActor(actions), [seed])
    finally:
        envs.close()


def _hindsight_round(checkpoint, actions, hindsight=True):
    return _one_episode(checkpoint, actions, hindsight=hindsight)


def test_hindsight_replays_a_miss_with_the_target_where_the_gripper_closed(bc_checkpoint, tmp_path):
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
    records, successes, replays, *_ = _hindsight_round(bc_checkpoint, actions)
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
    path = tmp_path / "round_0000.hdf5"
    write_rollouts(path, [real, episode], TASK, kwargs)
    assert check_dataset(path) == []
    with h5py.File(path, "r") as f:
        assert "hindsight_target_xy" not in f["data/demo_0"].attrs
        np.testing.assert_allclose(f["data/demo_1"].attrs["hindsight_target_xy"], episode.target_xy)
    # the replay closed where the expert aimed, on the moved cup's axis
    assert episode.close_distance < 0.01
    # without the option no replay runs
    assert _hindsight_round(bc_checkpoint, actions, hindsight=False).hindsight == []


def test_hindsight_skips_what_a_replay_cannot_fix(bc_checkpoint):
    # a gripper that never closes
    still = np.zeros((6, 7), np.float32)
    still[:, -1] = -1.0
    records, _, [replay], *_ = _hindsight_round(bc_checkpoint, still)
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
    _, _, [replay], *_ = _hindsight_round(bc_checkpoint, actions[: closed + 2])
    assert (replay.skipped, replay.episode) == ("at_target", None)


# ---------------------------------------------------------------------------- delayed-close replays
def _delay_round(checkpoint, actions, close_delays):
    return _one_episode(checkpoint, actions, close_delays=close_delays)


def _early_close(seed=0, early=6):
    """The scripted expert's actions on `seed` with the `early` descent steps before its first close cut out:
    the gripper closes `early` steps too soon, above the cup's grasp height (the expert descends at full speed)."""
    actions = _expert_actions(seed, None, {**ENV, "num_cups": 1})
    close = int(np.flatnonzero(actions[:, -1] >= 0)[0])
    assert (actions[close - early : close, -1] < 0).all()
    return np.concatenate([actions[: close - early], actions[close:]]), close - early


def test_close_delays_replay_a_grasp_closed_too_early_from_the_close(bc_checkpoint, tmp_path):
    actions, close = _early_close()
    # put off by 1 step the close is still too high; by 3 it grasps (what `_early_close` cut was 6 steps)
    collection = _delay_round(bc_checkpoint, actions, [1, 3, 6])
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
    path = tmp_path / "round_0000.hdf5"
    write_rollouts(path, [own, episode], TASK, {**ENV, "num_cups": 1})
    assert check_dataset(path) == []
    with h5py.File(path, "r") as f:
        assert "close_delay" not in f["data/demo_0"].attrs and f["data/demo_1"].attrs["close_delay"] == 3
    # no delay fixes it: no episode; each replay ran the episode's length from the close (the gripper never opens)
    [none] = _delay_round(bc_checkpoint, actions, [1, 8]).delayed
    assert (none.episode, none.skipped, none.close_delay, none.steps) == (None, "", 0, 2 * (length - close))
    # without the option nothing is replayed
    assert _delay_round(bc_checkpoint, actions, []).delayed == []


def test_close_delays_skip_what_they_cannot_replay(bc_checkpoint):
    still = np.zeros((6, 7), np.float32)
    still[:, -1] = -1.0  # never closes
    [replay] = _delay_round(bc_checkpoint, still, [2]).delayed
    assert (replay.skipped, replay.episode, replay.steps) == ("no_close", None, 0)
    shut = still.copy()
    shut[:, -1] = 1.0  # closes at the first step: no action before it to go on with
    [replay] = _delay_round(bc_checkpoint, shut, [2]).delayed
    assert (replay.skipped, replay.episode, replay.steps) == ("at_start", None, 0)


def test_a_delayed_close_replay_ends_when_the_gripper_opens_again(bc_checkpoint):
    # closes at step 2, opens at step 4: each replay runs the 2 inserted steps and the 2 closed ones, and stops
    actions = np.zeros((8, 7), np.float32)
    actions[:, -1] = [-1, -1, 1, 1, -1, -1, -1, -1]
    [replay] = _delay_round(bc_checkpoint, actions, [2, 3]).delayed
    assert (replay.skipped, replay.episode, replay.steps) == ("", None, 4 + 5)
