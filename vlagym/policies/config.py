"""The VLA policy's configuration: one flat dataclass, validated on construction, saved as JSON with the weights."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from vlagym.config import Config
from vlagym.envs.constants import CAMERAS
from vlagym.wrappers.normalize import MODES as NORMALIZATIONS

HEADS = ("l1", "flow")
FLOW_TIME_SAMPLINGS = ("uniform", "beta")


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


@dataclass
class VLAConfig(Config):
    """Architecture and acting settings of `VLAPolicy`. Small by default: trains on a laptop CPU in minutes."""

    cameras: tuple[str, ...] = ("front", "wrist")
    """Cameras the policy reads, each with its own CNN (names of `vlagym.envs.base.CAMERAS`)."""
    image_size: int = 64
    """Square side the images are resized to inside the model (when they differ)."""
    proprio_dim: int = 23
    """Length of the proprioception vector."""
    action_dim: int = 7
    """Length of one action (ee_delta_pose: 3 translation + 3 rotation + gripper)."""
    chunk_size: int = 10
    """K: actions predicted per forward pass."""
    n_action_steps: int | None = None
    """Actions of a chunk that `select_action` executes before predicting again (None: chunk_size; 1 with
    temporal ensembling)."""
    temporal_ensemble: bool = False
    """ACT-style temporal ensembling: predict every step and average the overlapping chunks' actions."""
    ensemble_coeff: float = 0.01
    """Weight exp(-coeff * i) of the i-th oldest prediction of a step in the temporal ensemble (ACT's m)."""
    binary_gripper: bool = True
    """Snap the last action entry (the gripper command: the scripted demos only ever hold -1 or +1) to its sign
    in `select_action`. A regressed or ensembled gripper value between the two is a half-closed, weak grip."""
    head: str = "l1"
    """"l1": regress the normalised chunk with an L1 loss; "flow": flow matching (generative)."""
    vision_channels: tuple[int, ...] = (16, 32, 64)
    """Output channels of the stride-2 conv blocks of each camera's CNN. (16, 32, 64) trains ~2x faster than
    (32, 64, 128) on a CPU and scored the same on the quickstart (docs/speed.md, "Training twice as fast")."""
    hidden_dim: int = 128
    """Width of the token embeddings, encoders' outputs and the trunk."""
    text_layers: int = 2
    """Transformer encoder layers over the instruction tokens."""
    text_heads: int = 4
    """Attention heads of the instruction encoder (must divide hidden_dim)."""
    max_tokens: int = 16
    """Instruction length in tokens (longer instructions are truncated)."""
    film: bool = True
    """FiLM-condition every conv block on the instruction embedding, so the instruction changes what is seen."""
    trunk_layers: int = 2
    """Hidden layers of the trunk MLP over the concatenated camera, instruction and proprio features."""
    flow_steps: int = 10
    """Euler steps of the flow head at inference."""
    flow_time_sampling: str = "uniform"
    """Training distribution of the flow time t: "uniform" U(0, 1) or "beta" (Beta(1.5, 1): more weight near the
    data end, where the velocity field is hardest)."""
    normalization: str = "mean_std"
    """How proprio and actions are normalised with the dataset statistics (see `vlagym.wrappers.normalize`)."""

    def __post_init__(self) -> None:
        self._check_cameras()
        self._check_sizes()
        self._check_choices()

    def _check_cameras(self) -> None:
        if isinstance(self.cameras, str):
            raise ValueError(f"cameras must be a sequence of camera names, got the string {self.cameras!r}")
        self.cameras = tuple(self.cameras)
        if not self.cameras:
            raise ValueError(f"cameras must name at least one camera; valid choices: {list(CAMERAS)}")
        for cam in self.cameras:
            _choice("camera", cam, CAMERAS)
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"cameras has duplicates: {list(self.cameras)}")

    def _check_sizes(self) -> None:
        self.vision_channels = tuple(self.vision_channels)
        if not self.vision_channels:
            raise ValueError(f"vision_channels must have at least one entry, got {self.vision_channels!r}")
        for c in self.vision_channels:
            _positive_int("each vision_channels entry", c)
        for name in ("image_size", "proprio_dim", "action_dim", "chunk_size", "hidden_dim", "text_heads"):
            _positive_int(name, getattr(self, name))
        for name in ("max_tokens", "flow_steps", "trunk_layers"):
            _positive_int(name, getattr(self, name))
        if isinstance(self.text_layers, bool) or not isinstance(self.text_layers, int) or self.text_layers < 0:
            raise ValueError(f"text_layers must be an integer >= 0, got {self.text_layers!r}")
        if self.hidden_dim % self.text_heads:
            raise ValueError(f"text_heads={self.text_heads!r} must divide hidden_dim={self.hidden_dim!r}")
        if 2 ** len(self.vision_channels) > self.image_size:
            raise ValueError(
                f"image_size={self.image_size!r} is too small for {len(self.vision_channels)} stride-2 conv blocks"
            )

    def _check_choices(self) -> None:
        _choice("head", self.head, HEADS)
        _choice("flow_time_sampling", self.flow_time_sampling, FLOW_TIME_SAMPLINGS)
        _choice("normalization", self.normalization, NORMALIZATIONS)
        for name in ("temporal_ensemble", "film", "binary_gripper"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if not (isinstance(self.ensemble_coeff, (int, float)) and math.isfinite(self.ensemble_coeff)):
            raise ValueError(f"ensemble_coeff must be a finite number, got {self.ensemble_coeff!r}")
        if self.n_action_steps is None:
            self.n_action_steps = 1 if self.temporal_ensemble else self.chunk_size
        _positive_int("n_action_steps", self.n_action_steps)
        if self.n_action_steps > self.chunk_size:
            raise ValueError(
                f"n_action_steps={self.n_action_steps!r} must be <= chunk_size={self.chunk_size!r}: "
                "a chunk holds only chunk_size actions"
            )
        if self.temporal_ensemble and self.n_action_steps != 1:
            raise ValueError(
                f"temporal_ensemble predicts every step, so n_action_steps must be 1, got {self.n_action_steps!r}"
            )


EXPORT_FORMATS = ("onnx",)


@dataclass
class ExportConfig(Config):
    """Options of `vlagym export CHECKPOINT`: the policy's acting path in a format other runtimes load."""

    checkpoint: str
    """a vlagym policy checkpoint folder (e.g. runs/quickstart/bc/checkpoints/step_5000)"""
    format: str = "onnx"
    """"onnx": images, instruction tokens and proprio to the action chunk, normalisation included"""
    out: str | None = None
    """the file to write (None: CHECKPOINT/model.onnx)"""
    opset: int = 18
    """ONNX opset of the graph"""
    check: bool = True
    """run the written file in onnxruntime against torch on random inputs and report the largest difference"""

    def __post_init__(self) -> None:
        _choice("format", self.format, EXPORT_FORMATS)
        _positive_int("opset", self.opset)
        if self.out == "":
            raise ValueError("out must name the file to write, e.g. policy.onnx")
