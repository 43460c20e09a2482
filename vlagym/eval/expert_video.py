"""An mp4 of a task's scripted expert (`vlagym video`): what the task looks like, solved.

The config is light (no mujoco at import): the command line builds its options from it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlagym.config import Config
from vlagym.envs.constants import CAMERAS, INSTRUCTION_SPLITS
from vlagym.io import atomic_write_json, temp_path

logger = logging.getLogger(__name__)


@dataclass
class VideoConfig(Config):
    """Options of `vlagym video`: the scripted expert on a task, recorded as one mp4."""

    task: str
    """registered vlagym env id, e.g. VLA-PickCup-v0 (see `vlagym list`)"""
    episodes: int = 3
    """number of episodes, recorded back to back"""
    seed: int = 0
    """episode i is reset with seed + i"""
    out: str = ""
    """output mp4 path (empty: videos/<task>.mp4)"""
    camera: str = "front"
    """camera to record: front, wrist or side"""
    size: int = 256
    """frame height and width in pixels (even: H.264 needs it)"""
    fps: int = 20
    """frames per second of the video; 20 = real time at the default control rate"""
    split: str = "train"
    """generalization split the episodes come from (see the README's split table)"""
    instruction_split: str | None = None
    """instruction paraphrase set (train or heldout); by default the one the split implies"""
    hold: int = 10
    """frames the last image of each episode is repeated, so its outcome is visible"""

    def __post_init__(self) -> None:
        import vlagym
        from vlagym.envs.splits import SPLITS  # mujoco: here, not at import

        if self.task.removeprefix("vlagym:") not in vlagym.TASKS:
            raise ValueError(f"unknown task {self.task!r}; known tasks: {', '.join(sorted(vlagym.TASKS))}")
        self.task = self.task.removeprefix("vlagym:")
        if not self.out:
            self.out = str(Path("videos") / f"{self.task}.mp4")
        if Path(self.out).suffix.lower() != ".mp4":
            raise ValueError(f"out must end in .mp4, got {self.out!r}")
        checks = [
            (self.episodes >= 1, f"episodes must be at least 1, got {self.episodes}"),
            (self.seed >= 0, f"seed must be non-negative, got {self.seed}"),
            (16 <= self.size <= 2048 and self.size % 2 == 0, f"size must be even, 16..2048, got {self.size}"),
            (1 <= self.fps <= 240, f"fps must be between 1 and 240, got {self.fps}"),
            (self.hold >= 0, f"hold must be non-negative, got {self.hold}"),
            (self.camera in CAMERAS, f"camera must be one of {list(CAMERAS)}, got {self.camera!r}"),
            (self.split in SPLITS, f"split must be one of {list(SPLITS)}, got {self.split!r}"),
        ]
        if self.instruction_split is not None:
            checks.append(
                (
                    self.instruction_split in INSTRUCTION_SPLITS,
                    f"instruction_split must be one of {list(INSTRUCTION_SPLITS)}, got {self.instruction_split!r}",
                )
            )
            checks.append(
                (
                    self.split != "heldout_paraphrase" or self.instruction_split == "heldout",
                    "split heldout_paraphrase uses the heldout templates; drop instruction_split",
                )
            )
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def _record_episode(env: Any, expert: Any, seed: int, camera: str, writer: Any, hold: int) -> dict[str, Any]:
    """Run the expert for one episode, appending every frame to `writer`; returns the episode summary."""
    obs, info = env.reset(seed=seed)
    expert.reset()
    writer.append_data(obs["images"][camera])
    steps, done = 0, False
    while not done:
        obs, _, terminated, truncated, info = env.step(expert(obs))
        writer.append_data(obs["images"][camera])
        steps += 1
        done = terminated or truncated
    for _ in range(hold):
        writer.append_data(obs["images"][camera])
    return {
        "seed": seed,
        "instruction": info["instruction"],
        "success": bool(info["success"]),
        "steps": steps,
        "sim_unstable": bool(info.get("sim_unstable", False)),
    }


def record_expert_video(cfg: VideoConfig, progress: bool = True) -> dict[str, Any]:
    """Write the mp4 atomically and its record (config, frames, per-episode outcomes) as JSON beside it
    (``<out>.json``); returns the record. An unwritable `out` raises `OSError`."""
    import gymnasium as gym
    import imageio.v2 as imageio  # here: `vlagym list` should not pay for ffmpeg
    from tqdm.auto import tqdm

    import vlagym

    out = Path(cfg.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.is_dir():
        raise IsADirectoryError(f"out {cfg.out!r} is a folder; give a file path ending in .mp4")
    if not os.access(out.parent, os.W_OK):
        raise PermissionError(f"cannot write to the output folder {str(out.parent)!r}")
    tmp = temp_path(out)
    # The camera is read from the image observation, so any camera the env knows can be recorded.
    env = gym.make(
        cfg.task,
        obs_mode="rgb",
        cameras=(cfg.camera,),
        image_size=cfg.size,
        split=cfg.split,
        instruction_split=cfg.instruction_split,
    )
    episodes: list[dict[str, Any]] = []
    try:
        expert = vlagym.make_expert(env)
        # macro_block_size=2: keep the exact size (libx264/yuv420p needs even sides, enforced by the config).
        writer = imageio.get_writer(
            tmp, format="FFMPEG", mode="I", fps=cfg.fps, codec="libx264", macro_block_size=2, ffmpeg_log_level="error"
        )
        with writer:
            for i in tqdm(range(cfg.episodes), desc=f"{cfg.task} episodes", unit="ep", disable=not progress):
                ep = _record_episode(env, expert, cfg.seed + i, cfg.camera, writer, cfg.hold)
                episodes.append(ep)
                logger.info("episode %d (seed %d): success=%s in %d steps", i, ep["seed"], ep["success"], ep["steps"])
        os.replace(tmp, out)
    finally:
        env.close()
        tmp.unlink(missing_ok=True)
    record = {
        "config": cfg.to_dict(),
        "vlagym_version": vlagym.__version__,
        "frames": sum(ep["steps"] + 1 + cfg.hold for ep in episodes),
        "successes": sum(ep["success"] for ep in episodes),
        "episodes": episodes,
    }
    atomic_write_json(out.with_name(out.name + ".json"), record)
    return record
