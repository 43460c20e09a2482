"""The env options' allowed values, importable without mujoco (configs and the command line validate with them)."""

from __future__ import annotations

OBS_MODES = ("state", "rgb", "rgb+state")
REWARD_MODES = ("dense", "sparse")
INSTRUCTION_SPLITS = ("train", "heldout")
CAMERAS = ("front", "wrist", "side")
RENDER_MODES = ("rgb_array", "human")
VECTORIZATION_MODES = ("sync", "async", "pool")  # gymnasium.make_vec's, and vlagym's PoolVectorEnv
