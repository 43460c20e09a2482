"""Render docs/frame.png: the front, wrist and side cameras mid-grasp of the scripted expert.

    python docs/make_frame.py [--seed 0] [--out docs/frame.png]

The panels are the env's own "rgb" observation images (192x192 each), taken a
few control steps after the expert closes the gripper, so the cup is in the
hand and leaving the table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym
import imageio.v3 as iio
import numpy as np

import vlagym

CAMERAS = ("front", "wrist", "side")
GAP = 4  # white pixels between panels


def grasp_frame(seed: int, size: int = 192, steps_into_lift: int = 3) -> tuple[np.ndarray, str]:
    """The three camera images side by side at the chosen moment, and the episode's instruction."""
    env = gym.make("VLA-PickCup-v0", obs_mode="rgb", cameras=CAMERAS, image_size=size)
    try:
        obs, _ = env.reset(seed=seed)
        expert = vlagym.make_expert(env)
        expert.reset()
        lift_steps = 0
        for _ in range(env.spec.max_episode_steps):
            obs, _, terminated, truncated, _ = env.step(expert(obs))
            lift_steps += expert.phase == "lift"
            if lift_steps >= steps_into_lift or terminated or truncated:
                break
        images = [obs["images"][c] for c in CAMERAS]
        gap = np.full((size, GAP, 3), 255, np.uint8)
        panel = np.concatenate([images[0], gap, images[1], gap, images[2]], axis=1)
        return panel, obs["instruction"]
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).with_name("frame.png")))
    args = parser.parse_args()
    panel, instruction = grasp_frame(args.seed)
    iio.imwrite(args.out, panel, optimize=True)
    print(f"wrote {args.out} {panel.shape[1]}x{panel.shape[0]} (seed {args.seed}: {instruction!r})")


if __name__ == "__main__":
    main()
