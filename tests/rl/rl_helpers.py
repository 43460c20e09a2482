"""Tiny BC checkpoints for the RL tests: a small VLA with synthetic statistics, saved like `vlagym train-bc` does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from vlagym.eval.rollout import VectorExpert
from vlagym.policies import VLAConfig, VLAPolicy
from vlagym.wrappers.language import Tokenizer
from vlagym.wrappers.normalize import NormStats

TASK = "VLA-PickCup-v0"
TINY = dict(image_size=32, vision_channels=(8, 16), hidden_dim=32, text_layers=1, chunk_size=4)
ENV_KWARGS = {"image_size": 32, "cameras": ["front", "wrist"]}
ENV = {"obs_mode": "rgb", **ENV_KWARGS}  # what the tiny checkpoints observe


def make_bc_checkpoint(folder: Path, seed: int = 0, **overrides) -> Path:
    """A tiny VLA with statistics of plausible actions (gripper near ±1) saved to `folder`."""
    torch.manual_seed(seed)
    policy = VLAPolicy(VLAConfig(**{**TINY, **overrides}), Tokenizer.from_tasks())
    rng = np.random.default_rng(seed)
    actions = np.concatenate([rng.normal(0.05, 0.3, (500, 6)), rng.choice([-1.0, 1.0], (500, 1))], axis=1)
    policy.set_stats(NormStats.from_arrays({"action": actions, "proprio": rng.normal(0.0, 0.5, (500, 23))}))
    if policy.config.head == "l1":
        with torch.no_grad():  # a visibly non-zero head, so the initial actions are not all the statistics' mean
            policy.head.bias.normal_(0.0, 0.5)
    policy.save_pretrained(folder, extra={"env_id": TASK, "env_kwargs": dict(ENV_KWARGS)})
    return folder


class ExpertActor:
    """The scripted experts with the (mask, seeds) reset collection calls."""

    def __init__(self, envs):
        self.expert = VectorExpert(envs)

    def reset(self, mask, seeds=None):
        self.expert.reset(mask)

    def new_round(self):
        pass  # deterministic: no tries to count

    def __call__(self, obs):
        return self.expert(obs)
