"""Generalization splits: disjoint ranges of the randomisation, the same axes on every task.

`split="train"` (the default) draws everything from the training ranges. Each
other split moves exactly one axis outside them and keeps the rest as in train:

* `heldout_paraphrase`: instructions from the held-out paraphrase templates;
* `unseen_combo`: the target object has a colour never shown on that kind of
  object in train (`HELDOUT_COLOR`);
* `distractors`: more distractor objects than train ever shows (per task);
* `lighting`: light intensity, direction and ambient level outside train's range;
* `camera`: front and side camera poses perturbed beyond train's range.

Visual perturbations are drawn last in `reset`, so the same seed gives the same
layout in `train`, `heldout_paraphrase`, `lighting` and `camera`: a policy's
scores on those splits are paired comparisons.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

SPLITS = ("train", "heldout_paraphrase", "unseen_combo", "distractors", "lighting", "camera")

#: per object kind, the colour that appears on that kind only in `unseen_combo`
HELDOUT_COLOR: dict[str, str] = {
    "cup": "purple",
    "block": "orange",
    "can": "green",
    "button": "yellow",
}


@dataclass(frozen=True)
class Ranges:
    """Union of closed intervals; sampled uniformly over their total length."""

    intervals: tuple[tuple[float, float], ...]

    def sample(self, rng: np.random.Generator) -> float:
        lengths = np.array([hi - lo for lo, hi in self.intervals])
        i = int(rng.choice(len(lengths), p=lengths / lengths.sum())) if len(lengths) > 1 else 0
        lo, hi = self.intervals[i]
        return float(rng.uniform(lo, hi))

    def contains(self, value: float) -> bool:
        return any(lo - 1e-9 <= value <= hi + 1e-9 for lo, hi in self.intervals)

    def __str__(self) -> str:
        return " or ".join(f"[{lo:g}, {hi:g}]" for lo, hi in self.intervals)


def _r(*intervals: tuple[float, float]) -> Ranges:
    return Ranges(tuple(intervals))


#: visual randomisation per axis: train ranges, and the ranges of the split that moves that axis
VISUAL_RANGES: dict[str, dict[str, Ranges]] = {
    "light_scale": {"train": _r((0.85, 1.15)), "lighting": _r((0.45, 0.7), (1.35, 1.6))},
    "light_tilt_deg": {"train": _r((0.0, 10.0)), "lighting": _r((20.0, 35.0))},
    "ambient": {"train": _r((0.4, 0.5)), "lighting": _r((0.2, 0.3), (0.6, 0.7))},
    "camera_shift_cm": {"train": _r((0.0, 1.0)), "camera": _r((3.0, 5.0))},
    "camera_turn_deg": {"train": _r((0.0, 1.5)), "camera": _r((4.0, 7.0))},
}
_AXIS_SPLIT = {"light_scale": "lighting", "light_tilt_deg": "lighting", "ambient": "lighting"}
_AXIS_SPLIT.update(camera_shift_cm="camera", camera_turn_deg="camera")

RANDOMISED_CAMERAS = ("front", "side")  # the wrist camera rides on the robot


def visual_ranges(split: str) -> dict[str, Ranges]:
    """The range of every visual axis under `split`."""
    return {axis: r[split] if _AXIS_SPLIT[axis] == split else r["train"] for axis, r in VISUAL_RANGES.items()}


def _random_unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.normal(size=3)
    return v / np.linalg.norm(v)


class VisualRandomizer:
    """Applies per-episode lighting and camera perturbations to a compiled model."""

    def __init__(self, model: mujoco.MjModel):
        self.model = model
        self.lights = np.arange(model.nlight)  # the scene's key light(s); the headlight is separate
        self.base_diffuse = model.light_diffuse.copy()
        self.base_dir = model.light_dir.copy()
        self.cams = np.array([model.camera(n).id for n in RANDOMISED_CAMERAS])
        self.base_cam_pos = model.cam_pos.copy()
        self.base_cam_quat = model.cam_quat.copy()
        self.last: dict[str, float] = {}

    def apply(self, rng: np.random.Generator, split: str) -> dict[str, float]:
        m = self.model
        ranges = visual_ranges(split)
        values = {axis: r.sample(rng) for axis, r in ranges.items()}
        m.light_diffuse[:] = self.base_diffuse
        m.light_dir[:] = self.base_dir
        for light in self.lights:
            m.light_diffuse[light] = self.base_diffuse[light] * values["light_scale"]
            axis = _random_unit(rng)
            quat = np.empty(4)
            mujoco.mju_axisAngle2Quat(quat, axis, np.deg2rad(values["light_tilt_deg"]))
            direction = np.empty(3)
            mujoco.mju_rotVecQuat(direction, self.base_dir[light], quat)
            m.light_dir[light] = direction
        m.vis.headlight.ambient[:] = values["ambient"]
        for cam in self.cams:
            m.cam_pos[cam] = self.base_cam_pos[cam] + _random_unit(rng) * values["camera_shift_cm"] / 100.0
            turn = np.empty(4)
            mujoco.mju_axisAngle2Quat(turn, _random_unit(rng), np.deg2rad(values["camera_turn_deg"]))
            quat = np.empty(4)
            mujoco.mju_mulQuat(quat, turn, self.base_cam_quat[cam])
            m.cam_quat[cam] = quat
        self.last = values
        return values


def split_table_markdown() -> str:
    """The README's table of randomisation axes and their ranges per split."""
    rows = [
        "| axis | train | held-out split | held-out range |",
        "|---|---|---|---|",
        "| instruction wording | `train` templates | `heldout_paraphrase` | `heldout` templates (disjoint) |",
        "| target colour x kind | all colours but the held-out one of each kind | `unseen_combo` | "
        + ", ".join(f"{c} {k}" for k, c in HELDOUT_COLOR.items())
        + " |",
        "| distractor count | per task (see `vlagym list`) | `distractors` | more than train, per task |",
    ]
    units = {"light_scale": "x", "light_tilt_deg": "deg", "ambient": "", "camera_shift_cm": "cm"}
    units["camera_turn_deg"] = "deg"
    for axis, r in VISUAL_RANGES.items():
        split = _AXIS_SPLIT[axis]
        unit = f" {units[axis]}" if units[axis] else ""
        rows.append(f"| {axis} | {r['train']}{unit} | `{split}` | {r[split]}{unit} |")
    return "\n".join(rows)
