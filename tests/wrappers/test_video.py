"""RecordEpisodes: readable mp4 files with the right frames, every Nth episode, clear errors."""

from __future__ import annotations

import imageio.v3 as iio
import numpy as np
import pytest
from fake_env import FakeEnv
from gymnasium.wrappers import TimeLimit

from vlagym.wrappers import RecordEpisodes


def _frames(path) -> np.ndarray:
    return iio.imread(path, plugin="FFMPEG")


def _run(env, episodes: int, steps: int) -> None:
    for ep in range(episodes):
        env.reset(seed=ep)
        for _ in range(steps):
            *_, terminated, truncated, _ = env.step(np.zeros(2, np.float32))
            if terminated or truncated:
                break


def test_records_reset_and_step_frames_of_each_episode(tmp_path):
    env = RecordEpisodes(TimeLimit(FakeEnv(image_size=16), max_episode_steps=5), tmp_path, camera="wrist")
    _run(env, episodes=2, steps=10)
    assert env.episode_paths == [tmp_path / "episode-0.mp4", tmp_path / "episode-1.mp4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episode-0.mp4", "episode-1.mp4"]  # no temp files
    frames = _frames(env.episode_paths[0])
    assert frames.shape == (6, 16, 16, 3)  # the reset frame and 5 steps
    # Frame t is filled with 10 * t (lossy codec: compare loosely).
    np.testing.assert_allclose(frames[:, 8, 8].mean(-1), 10 * np.arange(6), atol=4)
    assert iio.immeta(env.episode_paths[0], plugin="FFMPEG")["fps"] == 10
    env.close()


def test_every_nth_episode_and_name_prefix(tmp_path):
    env = RecordEpisodes(FakeEnv(terminate_at=3), tmp_path, every_n_episodes=3, name_prefix="eval", fps=4)
    _run(env, episodes=7, steps=10)
    env.close()
    assert [p.name for p in env.episode_paths] == ["eval-0.mp4", "eval-3.mp4", "eval-6.mp4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval-0.mp4", "eval-3.mp4", "eval-6.mp4"]
    assert _frames(env.episode_paths[1]).shape[0] == 4
    assert iio.immeta(env.episode_paths[1], plugin="FFMPEG")["fps"] == 4


def test_unfinished_episode_is_written_at_close_and_at_reset(tmp_path):
    env = RecordEpisodes(FakeEnv(), tmp_path)
    _run(env, episodes=2, steps=2)  # never ends: the next reset finishes episode 0
    assert [p.name for p in env.episode_paths] == ["episode-0.mp4"]
    env.close()
    assert [p.name for p in env.episode_paths] == ["episode-0.mp4", "episode-1.mp4"]
    assert _frames(env.episode_paths[1]).shape[0] == 3


def test_render_fallback_and_resize(tmp_path):
    env = RecordEpisodes(FakeEnv(obs_mode="state", render_mode="rgb_array"), tmp_path, size=(12, 20))
    _run(env, episodes=1, steps=3)
    env.close()
    assert _frames(env.episode_paths[0]).shape == (4, 12, 20, 3)


def test_no_frame_source_raises_clearly(tmp_path):
    with pytest.raises(ValueError, match="no frames to record"):
        RecordEpisodes(FakeEnv(obs_mode="state"), tmp_path)
    with pytest.raises(ValueError, match=r"camera 'side' is not in the observation's images \['front', 'wrist'\]"):
        RecordEpisodes(FakeEnv(), tmp_path, camera="side")
    with pytest.raises(ValueError, match="camera=None"):
        RecordEpisodes(FakeEnv(), tmp_path, camera=None)
    with pytest.raises(ValueError, match="every_n_episodes"):
        RecordEpisodes(FakeEnv(), tmp_path, every_n_episodes=0)
    with pytest.raises(ValueError, match="even"):
        RecordEpisodes(FakeEnv(), tmp_path, size=15)
