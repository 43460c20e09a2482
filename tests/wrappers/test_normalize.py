"""Fixed-statistics normalisation: exact inverse, rewritten spaces, loud failures."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fake_env import FakeEnv

from vlagym.wrappers import FeatureStats, NormalizeAction, NormalizeObservation, NormStats
from vlagym.wrappers.normalize import MODES


def _stats(mode: str = "mean_std", **shapes: int) -> NormStats:
    rng = np.random.default_rng(0)
    data = {key: rng.normal(3.0, 2.0, size=(500, dim)) * np.arange(1, dim + 1) for key, dim in shapes.items()}
    return NormStats.from_arrays(data, mode=mode)


@pytest.mark.parametrize("mode", MODES)
def test_normalize_unnormalize_round_trip(mode):
    stats = _stats(mode, proprio=3)
    x = np.random.default_rng(1).normal(0, 10, size=(50, 3))
    y = stats.normalize("proprio", x)
    assert not np.allclose(y, x)
    np.testing.assert_allclose(stats.unnormalize("proprio", y), x, rtol=0, atol=1e-6)
    np.testing.assert_allclose(stats.normalize("proprio", stats.unnormalize("proprio", x)), x, rtol=0, atol=1e-6)


def test_each_mode_maps_its_statistics_to_the_unit_scale():
    data = np.random.default_rng(2).uniform(-5, 9, size=(1000, 2))
    stats = NormStats.from_arrays({"x": data})
    z = stats.normalize("x", data)
    np.testing.assert_allclose(z.mean(0), 0, atol=1e-9)
    np.testing.assert_allclose(z.std(0), 1, atol=1e-9)
    f = stats["x"]
    np.testing.assert_allclose(stats.normalize("x", [f.min, f.max], mode="min_max"), [[-1, -1], [1, 1]], atol=1e-12)
    np.testing.assert_allclose(stats.normalize("x", [f.q01, f.q99], mode="quantile"), [[-1, -1], [1, 1]], atol=1e-12)
    # Quantile bounds are inside [min, max]: the extremes map beyond [-1, 1], unclipped.
    assert stats.normalize("x", f.max, mode="quantile").min() > 1


@pytest.mark.parametrize("mode", MODES)
def test_constant_feature_is_finite_and_invertible(mode):
    stats = NormStats.from_arrays({"x": np.full((10, 2), 4.0)}, mode=mode)
    y = stats.normalize("x", [[4.0, 4.0], [4.5, 3.0]])
    assert np.isfinite(y).all()
    np.testing.assert_allclose(stats.unnormalize("x", y), [[4.0, 4.0], [4.5, 3.0]], atol=1e-9)


def test_save_load_round_trip(tmp_path):
    stats = _stats("quantile", proprio=3, action=2)
    path = stats.save(tmp_path / "stats.json")
    assert [p.name for p in tmp_path.iterdir()] == ["stats.json"]  # no temp file left behind
    loaded = NormStats.load(path)
    assert loaded == stats and loaded.mode == "quantile"
    x = np.random.default_rng(3).normal(size=(4, 3))
    np.testing.assert_array_equal(loaded.normalize("proprio", x), stats.normalize("proprio", x))
    assert json.loads(path.read_text())["features"]["action"]["q99"] == stats["action"].q99


def test_bad_statistics_and_files_raise(tmp_path):
    with pytest.raises(ValueError, match="one shape"):
        FeatureStats(mean=[0, 0], std=[1], min=[0, 0], max=[1, 1], q01=[0, 0], q99=[1, 1])
    with pytest.raises(ValueError, match="non-finite"):
        FeatureStats(mean=[np.nan], std=[1], min=[0], max=[1], q01=[0], q99=[1])
    with pytest.raises(ValueError, match="valid choices"):
        NormStats.from_arrays({"x": np.zeros((3, 1))}, mode="zscore")
    (tmp_path / "other.json").write_text(json.dumps({"vocab": []}))
    with pytest.raises(ValueError, match="format"):
        NormStats.load(tmp_path / "other.json")


def test_missing_key_raises_listing_the_known_keys():
    stats = _stats(action=2, state=5)
    with pytest.raises(KeyError, match=r"'proprio'.*\['action', 'state'\]"):
        stats.normalize("proprio", np.zeros(3))
    with pytest.raises(KeyError, match=r"statistics exist for \['action', 'state'\]"):
        NormalizeObservation(FakeEnv(), stats)  # default key "proprio" has no statistics
    with pytest.raises(KeyError, match="observation has no key 'state'"):
        NormalizeObservation(FakeEnv(), stats, keys=("state",))
    with pytest.raises(KeyError, match=r"'action'.*\['state'\]"):
        NormalizeAction(FakeEnv(), _stats(state=5))


def test_shape_mismatch_raises_naming_key_and_shapes():
    with pytest.raises(ValueError, match=r"'proprio' have shape \(4,\), the space has shape \(3,\)"):
        NormalizeObservation(FakeEnv(), _stats(proprio=4))
    with pytest.raises(ValueError, match=r"'action' have shape \(3,\), the space has shape \(2,\)"):
        NormalizeAction(FakeEnv(), _stats(action=3))


def test_normalize_observation_dict():
    stats = _stats(proprio=3)
    env = NormalizeObservation(FakeEnv(), stats)
    raw_env = FakeEnv()
    obs, _ = env.reset(seed=5)
    raw, _ = raw_env.reset(seed=5)
    for _ in range(3):
        assert env.observation_space.contains(obs)
        assert obs["proprio"].dtype == np.float32
        np.testing.assert_allclose(obs["proprio"], stats.normalize("proprio", raw["proprio"]), rtol=1e-6)
        np.testing.assert_array_equal(obs["images"]["front"], raw["images"]["front"])
        assert obs["instruction"] == raw["instruction"]
        obs, *_ = env.step(np.ones(2, np.float32))
        raw, *_ = raw_env.step(np.ones(2, np.float32))
    assert env.observation_space["images"] == raw_env.observation_space["images"]


def test_normalize_observation_box():
    stats = _stats("min_max", state=5)
    env = NormalizeObservation(FakeEnv(obs_mode="state"), stats)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (5,) and env.observation_space.contains(obs)
    raw, _ = FakeEnv(obs_mode="state").reset(seed=0)
    np.testing.assert_allclose(obs, stats.normalize("state", raw), rtol=1e-6)
    with pytest.raises(ValueError, match="one statistics key"):
        NormalizeObservation(FakeEnv(obs_mode="state"), stats, keys=("state", "proprio"))


@pytest.mark.parametrize("mode", MODES)
def test_normalize_action_maps_back_to_env_units(mode):
    stats = _stats(mode, action=2)
    env = NormalizeAction(FakeEnv(), stats)
    # The action space is the image of the env's Box(-1, 1) under the map.
    np.testing.assert_allclose(env.action_space.low, stats.normalize("action", [-1.0, -1.0]), rtol=1e-6)
    np.testing.assert_allclose(env.action_space.high, stats.normalize("action", [1.0, 1.0]), rtol=1e-6)
    env.reset(seed=0)
    a = np.array([0.25, -0.5], np.float32)
    *_, info = env.step(a)
    np.testing.assert_allclose(info["action"], stats.unnormalize("action", a), rtol=1e-6)
    env_action = np.array([0.3, -0.9], np.float32)
    np.testing.assert_allclose(env.action(env.reverse_action(env_action)), env_action, atol=1e-6)
    assert env.action_space.contains(env.reverse_action(env_action))
    with pytest.raises(ValueError, match=r"shape \(2,\)"):
        env.step(np.zeros(3, np.float32))


def test_from_plain_features_with_a_custom_action_key():
    """A dataset's plain {key: {mean, std, ...}} statistics, its action key named "actions"."""
    plain = {"actions": _stats(action=2)["action"].to_dict()}
    stats = NormStats.from_features(plain, mode="quantile")
    env = NormalizeAction(FakeEnv(), stats, key="actions")
    env.reset(seed=0)
    *_, info = env.step(np.zeros(2, np.float32))
    np.testing.assert_allclose(info["action"], stats.unnormalize("actions", np.zeros(2)), rtol=1e-6)
    with pytest.raises(ValueError, match=r"'actions' lack \['q99'\]"):
        NormStats.from_features({"actions": {k: v for k, v in plain["actions"].items() if k != "q99"}})
