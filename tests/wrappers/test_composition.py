"""The wrappers stack with each other and with Gymnasium's own, on the fake env and on a real task."""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import imageio.v3 as iio
import numpy as np
import pytest
from fake_env import FakeEnv
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import FlattenObservation, RecordEpisodeStatistics, TimeLimit

import vlagym
from vlagym.wrappers import (
    ActionChunking,
    LanguageTokens,
    NormalizeAction,
    NormalizeObservation,
    NormStats,
    RecordEpisodes,
    Tokenizer,
)
from vlagym.wrappers.language import split_words


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_tasks()


def _fake_stats() -> NormStats:
    rng = np.random.default_rng(0)
    return NormStats.from_arrays({"proprio": rng.normal(2, 3, (200, 3)), "action": rng.uniform(-0.5, 0.8, (200, 2))})


@pytest.mark.parametrize(
    "wrap",
    [
        lambda e, tok: LanguageTokens(e, tok),
        lambda e, tok: NormalizeObservation(e, _fake_stats()),
        lambda e, tok: NormalizeAction(e, _fake_stats()),
        lambda e, tok: ActionChunking(e, 3),
    ],
    ids=["LanguageTokens", "NormalizeObservation", "NormalizeAction", "ActionChunking"],
)
def test_each_wrapper_passes_gymnasium_check_env(tok, wrap):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unbounded / asymmetric Box advice, "wrapped env" notice
        check_env(wrap(FakeEnv(), tok), skip_render_check=True)


def test_full_stack_on_the_fake_env(tok, tmp_path):
    stats = _fake_stats()
    env = TimeLimit(FakeEnv(), max_episode_steps=10)
    env = LanguageTokens(env, tok)
    env = NormalizeObservation(env, stats)
    env = NormalizeAction(env, stats)
    env = ActionChunking(env, 4)
    env = RecordEpisodes(env, tmp_path)
    env = RecordEpisodeStatistics(env)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    chunk = np.full((4, 2), 0.1, np.float32)
    done, chunks = False, 0
    while not done:
        obs, reward, terminated, truncated, info = env.step(chunk)
        assert env.observation_space.contains(obs)
        done, chunks = terminated or truncated, chunks + 1
    assert chunks == 3 and truncated and info["actions_executed"] == 2
    assert info["episode"]["r"] == sum(range(1, 11)) and info["episode"]["l"] == 3  # chunk-level length
    np.testing.assert_allclose(info["action"], stats.unnormalize("action", chunk[0]), rtol=1e-6)
    path = env.get_wrapper_attr("episode_paths")[0]  # Gymnasium 1.x wrappers forward no attributes
    assert iio.imread(path, plugin="FFMPEG").shape[0] == 1 + chunks
    assert iio.immeta(path, plugin="FFMPEG")["fps"] == pytest.approx(10 / 4)
    env.close()


def test_tokens_make_the_observation_flattenable(tok):
    env = FlattenObservation(LanguageTokens(FakeEnv(image_size=4), tok))
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs) and obs.shape == (2 * 4 * 4 * 3 + 3 + 16,)


def test_action_normalisation_commutes_with_chunking():
    """Per-action statistics normalise a whole chunk too: both orders send the env the same actions."""
    stats = _fake_stats()
    inner = ActionChunking(NormalizeAction(FakeEnv(), stats), 3)
    outer = NormalizeAction(ActionChunking(FakeEnv(), 3), stats)
    assert inner.action_space == outer.action_space
    chunk = inner.action_space.sample()
    for env in (inner, outer):
        env.reset(seed=0)
    a = [np.stack([i["action"] for i in env.step(chunk)[-1]["step_infos"]]) for env in (inner, outer)]
    np.testing.assert_allclose(a[0], a[1], rtol=1e-6)
    np.testing.assert_allclose(a[0], stats.unnormalize("action", chunk), rtol=1e-6)


def _expert_episode(seed: int, **kwargs) -> tuple[np.ndarray, np.ndarray, str]:
    """The scripted expert's actions and proprio observations (before each action) on one PickCup episode."""
    env = gym.make("VLA-PickCup-v0", obs_mode="rgb", image_size=32, **kwargs)
    try:
        expert = vlagym.make_expert(env)
        obs, _ = env.reset(seed=seed)
        expert.reset()
        actions, proprio = [], [obs["proprio"]]
        terminated = truncated = False
        while not (terminated or truncated):
            actions.append(expert(obs))
            obs, _, terminated, truncated, info = env.step(actions[-1])
            proprio.append(obs["proprio"])
        assert info["success"], "the expert should solve seed 0 of PickCup"
        return np.array(actions), np.array(proprio), obs["instruction"]
    finally:
        env.close()


def test_full_stack_on_a_real_task_replays_the_expert(tok, tmp_path):
    """Normalised expert actions, chunked by 4, reproduce the expert's episode through the whole stack."""
    actions, proprio, instruction = _expert_episode(seed=0)
    stats = NormStats.from_arrays({"proprio": proprio, "action": actions}, mode="quantile")
    k = 4
    env = gym.make("VLA-PickCup-v0", obs_mode="rgb", image_size=32)
    env = LanguageTokens(env, tok)
    env = NormalizeObservation(env, stats)
    env = NormalizeAction(env, stats)
    env = ActionChunking(env, k)
    env = RecordEpisodes(env, tmp_path, camera="front")
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert tok.decode(obs["instruction"]) == " ".join(split_words(instruction))
    n_chunks = math.ceil(len(actions) / k)
    padded = np.zeros((n_chunks * k, actions.shape[1]), np.float32)
    padded[: len(actions)] = actions
    chunks = stats.normalize("action", padded).astype(np.float32).reshape(n_chunks, k, -1)
    executed = chunks_run = 0
    for chunk in chunks:
        obs, reward, terminated, truncated, info = env.step(chunk)
        chunks_run += 1
        assert env.observation_space.contains(obs)
        executed += info["actions_executed"]
        # The proprio seen after this chunk is the expert episode's, normalised.
        np.testing.assert_allclose(stats.unnormalize("proprio", obs["proprio"]), proprio[executed], atol=1e-3)
        if terminated or truncated:
            break
    assert terminated and info["success"] and chunks_run == n_chunks and executed == len(actions)
    assert len(info["step_infos"]) == info["actions_executed"] == len(actions) - k * (n_chunks - 1)
    env.close()
    frames = iio.imread(env.episode_paths[0], plugin="FFMPEG")
    assert frames.shape == (1 + n_chunks, 32, 32, 3)


def test_make_vec_carries_token_batches(tok):
    envs = gym.make_vec(
        "VLA-PickCup-v0",
        num_envs=2,
        vectorization_mode="sync",
        obs_mode="rgb",
        image_size=32,
        wrappers=[lambda e: LanguageTokens(e, tok)],
    )
    try:
        obs, info = envs.reset(seed=[3, 4])
        assert obs["instruction"].dtype == np.int64 and obs["instruction"].shape == (2, 16)
        assert envs.observation_space.contains(obs)
        for i in range(2):
            assert tok.decode(obs["instruction"][i]) == " ".join(split_words(info["instruction"][i]))
        obs, *_ = envs.step(np.zeros((2, 7), np.float32))
        assert obs["instruction"].dtype == np.int64 and obs["instruction"].shape == (2, 16)
    finally:
        envs.close()
