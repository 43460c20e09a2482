"""Video recording of episodes to mp4 (imageio + libx264), for evaluation."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

logger = logging.getLogger(__name__)


def _frame_size(size: int | tuple[int, int] | None) -> tuple[int, int] | None:
    if size is None:
        return None
    hw = (size, size) if isinstance(size, (int, np.integer)) else tuple(size)
    if len(hw) != 2 or not all(isinstance(v, (int, np.integer)) and v >= 2 and v % 2 == 0 for v in hw):
        # libx264 with yuv420p needs even sides.
        raise ValueError(f"size must be None, an even int or (height, width) of even ints >= 2, got {size!r}")
    return int(hw[0]), int(hw[1])


class RecordEpisodes(gym.Wrapper):
    """Writes every `every_n_episodes`-th episode to ``folder/<name_prefix>-<episode index>.mp4``.

    Frames come from the observation's ``images[camera]`` when the observation
    has images (vlagym ``obs_mode="rgb"``), else from ``env.render()`` (the env
    must have ``render_mode="rgb_array"``; ``camera=None`` asks for that
    explicitly). The reset frame is recorded, then one frame per step. A file
    is written when its episode ends (terminated or truncated), at the next
    reset, or at `close()`; each is written to a temp file and renamed into
    place, so a file at its final path is always complete. Episodes are
    counted from 0 at the first reset; `episode_paths` lists the files written.

    Args:
        fps: frames per second; by default the env's ``metadata["render_fps"]``.
        size: resize frames to (height, width) (even sides), or None to keep them.
    """

    def __init__(
        self,
        env: gym.Env,
        folder: str | os.PathLike,
        camera: str | None = "front",
        fps: float | None = None,
        every_n_episodes: int = 1,
        size: int | tuple[int, int] | None = None,
        name_prefix: str = "episode",
    ):
        super().__init__(env)
        if isinstance(every_n_episodes, bool) or not isinstance(every_n_episodes, (int, np.integer)):
            raise ValueError(f"every_n_episodes must be an integer >= 1, got {every_n_episodes!r}")
        if every_n_episodes < 1:
            raise ValueError(f"every_n_episodes must be an integer >= 1, got {every_n_episodes!r}")
        if fps is None:
            fps = env.metadata.get("render_fps")
            if not fps:
                raise ValueError("the env's metadata has no render_fps; pass fps")
        if not (isinstance(fps, (int, float, np.number)) and np.isfinite(fps) and fps > 0):
            raise ValueError(f"fps must be a positive number, got {fps!r}")
        if not name_prefix or os.sep in name_prefix:
            raise ValueError(f"name_prefix must be a non-empty file name prefix, got {name_prefix!r}")
        self.source = self._frame_source(env, camera)
        self.camera = camera
        self.fps = float(fps)
        self.every_n_episodes = int(every_n_episodes)
        self.size = _frame_size(size)
        self.name_prefix = name_prefix
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.episode_paths: list[Path] = []
        self.episode_index = -1  # no episode yet
        self._writer = None
        self._tmp: Path | None = None
        self._frames = 0

    @staticmethod
    def _frame_source(env: gym.Env, camera: str | None) -> str:
        """ "obs" (read images[camera]) or "render"; raises when neither can give frames."""
        space = env.observation_space
        images = space["images"] if isinstance(space, spaces.Dict) and "images" in space.spaces else None
        render_ok = env.render_mode == "rgb_array"
        if camera is not None and images is not None:
            if isinstance(images, spaces.Dict) and camera in images.spaces:
                return "obs"
            cams = list(images.spaces) if isinstance(images, spaces.Dict) else []
            raise ValueError(
                f"camera {camera!r} is not in the observation's images {cams}; "
                "pick one of them, or camera=None to record env.render()"
            )
        if render_ok:
            return "render"
        wanted = "env.render() frames (camera=None)" if camera is None else f"camera {camera!r}"
        raise ValueError(
            f"no frames to record for {wanted}: the observation has no images and render_mode is "
            f"{env.render_mode!r}; make the env with obs_mode='rgb' (vlagym) or render_mode='rgb_array'"
        )

    # ------------------------------------------------------------------ episode bookkeeping
    @property
    def recording(self) -> bool:
        return self._writer is not None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._finish()  # an episode cut short by reset is still written
        obs, info = self.env.reset(seed=seed, options=options)
        self.episode_index += 1
        if self.episode_index % self.every_n_episodes == 0:
            self._start()
            self._add_frame(obs)
        return obs, info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self.recording:
            self._add_frame(obs)
            if terminated or truncated:
                self._finish()
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        try:
            self._finish()
        finally:
            super().close()

    # ------------------------------------------------------------------ writing
    def path_of(self, episode_index: int) -> Path:
        return self.folder / f"{self.name_prefix}-{episode_index}.mp4"

    def _start(self) -> None:
        import imageio.v2 as imageio  # imported here: ffmpeg is only needed when recording

        path = self.path_of(self.episode_index)
        self._tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
        # macro_block_size=2 keeps the exact frame size (yuv420p needs even sides).
        self._writer = imageio.get_writer(
            self._tmp,
            format="FFMPEG",
            mode="I",
            fps=self.fps,
            codec="libx264",
            macro_block_size=2,
            ffmpeg_log_level="error",
        )
        self._frames = 0

    def _add_frame(self, obs: Any) -> None:
        if self.source == "obs":
            frame = obs["images"][self.camera]
        else:
            frame = self.env.render()
        frame = np.asarray(frame)
        if frame.ndim != 3 or frame.shape[-1] != 3:
            raise ValueError(f"a video frame must be (H, W, 3), got shape {frame.shape}")
        if frame.dtype != np.uint8:
            frame = np.clip(frame, 0, 255).astype(np.uint8)
        if self.size is not None and frame.shape[:2] != self.size:
            frame = _resize(frame, self.size)
        self._writer.append_data(frame)
        self._frames += 1

    def _finish(self) -> None:
        if self._writer is None:
            return
        writer, tmp, self._writer, self._tmp = self._writer, self._tmp, None, None
        path = self.path_of(self.episode_index)
        try:
            writer.close()
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self.episode_paths.append(path)
        logger.info("wrote %s (%d frames at %g fps)", path, self._frames, self.fps)


def _resize(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    from PIL import Image  # a dependency of imageio

    h, w = size
    return np.asarray(Image.fromarray(frame).resize((w, h), Image.BILINEAR))
