"""VLA-PickCup-v0: pick up the cup the instruction names."""

from __future__ import annotations

import math
import numbers
from typing import Any, ClassVar

import numpy as np

from vlagym.envs.base import VLAEnv
from vlagym.envs.expert import PickExpert
from vlagym.envs.objects import OBJECT_XML, FreeObject, move_object, sample_colors, sample_layout

LIFT_HEIGHT = 0.05  # success: cup bottom this far above the table, while held
WORKSPACE = ((-0.12, 0.08), (-0.2, 0.2))  # x and y ranges of object centres
MIN_SPACING = 0.13  # between object centres, so open fingers never hit a neighbour
DISTRACTOR_SPACING = 0.12  # the crowded `distractors` split
SLOTS = (("cup0", "cup"), ("cup1", "cup"), ("cup2", "cup"), ("block0", "block"), ("can0", "can"))
DISTRACTORS = {"train": (0, 2), "distractors": (3, 4)}  # other objects besides the target


class PickCupEnv(VLAEnv):
    """Pick up the named cup.

    Task:
        One to three cups of distinct colours stand on the table; the
        instruction names one of them. Lift that cup off the table.

    Randomisations:
        Number of cups (1-3, or fixed by `num_cups`), their colours (distinct; never a cup's held-out
        colour outside `unseen_combo`), positions (x in [-0.12, 0.08], y in
        [-0.2, 0.2], at least 13 cm apart), yaw (uniform), which cup is the
        target, the instruction template, the arm's start posture (±0.03 rad
        per joint), lighting and camera poses (`vlagym.envs.splits`). Split
        `distractors`: three cups plus a block and/or a can (3-4 distractors,
        12 cm apart).

    Success:
        The target cup's bottom is at least 5 cm above the table and both
        finger pads touch it. Lifting any other object is not success.

    Instructions:
        "pick up the {color} cup" and paraphrases; the `heldout` split uses a
        disjoint set of wordings. `reset(options={"swap_target": True})` names
        another cup of the scene instead (language controls; needs two cups).

    Args:
        num_cups: cups on the table, 1-3; None (default) draws it per episode.
            `num_cups=3` measures instruction following: every scene then
            holds two wrong cups. The `distractors` split always has three.
        **kwargs: the `VLAEnv` options (obs_mode, split, ...).
    """

    description = "Pick up the cup of the named colour among up to three cups."
    family = "pick"
    distractor_counts = DISTRACTORS
    templates: ClassVar[dict[str, tuple[str, ...]]] = {
        "train": (
            "pick up the {color} cup",
            "lift the {color} cup",
            "grab the {color} cup and lift it",
            "pick the {color} cup up",
            "raise the {color} cup off the table",
            "take the {color} cup",
        ),
        "heldout": (
            "could you lift the {color} mug?",
            "get the {color} cup off the table",
            "hold the {color} cup up in the air",
            "I need the {color} cup, pick it up",
        ),
    }
    default_reward_weights: ClassVar[dict[str, float]] = {"reach": 0.2, "grasp": 0.3, "lift": 0.5}
    expert_cls = PickExpert

    def __init__(self, num_cups: int | None = None, **kwargs: Any):
        if num_cups is not None and (
            isinstance(num_cups, bool) or not isinstance(num_cups, numbers.Integral) or not 1 <= num_cups <= 3
        ):
            raise ValueError(f"num_cups must be 1, 2, 3 or None (drawn per episode), got {num_cups!r}")
        if num_cups not in (None, 3) and kwargs.get("split") == "distractors":
            raise ValueError(f"the distractors split always holds three cups; got num_cups={num_cups!r}")
        self.num_cups = None if num_cups is None else int(num_cups)
        super().__init__(**kwargs)

    # ------------------------------------------------------------------ scene
    def _objects_xml(self) -> str:
        return "\n".join(OBJECT_XML[kind](name, (0, 0, -1)) for name, kind in SLOTS)

    def _setup_task(self) -> None:
        self.objects = [FreeObject(self.model, name, kind, i) for i, (name, kind) in enumerate(SLOTS)]
        self.target = self.objects[0]

    # ------------------------------------------------------------------ reset
    def _initialize_episode(self, rng: np.random.Generator) -> None:
        if self.split == "distractors":
            n_other = int(rng.integers(DISTRACTORS["distractors"][0], DISTRACTORS["distractors"][1] + 1))
            chosen = self.objects[:3] + ([self.objects[3], self.objects[4]] if n_other == 4 else [self.objects[3]])
            spacing = DISTRACTOR_SPACING
        else:
            n_cups = int(rng.integers(1, 4))  # drawn even when fixed, so the rest of the stream does not shift
            if self.num_cups is not None:
                n_cups = self.num_cups
            chosen, spacing = self.objects[:n_cups], MIN_SPACING
        cups = [o for o in chosen if o.kind == "cup"]
        target_index = int(rng.integers(len(cups)))
        colors = sample_colors(rng, [o.kind for o in chosen], self.split == "unseen_combo", target_index)
        xy, yaw = sample_layout(rng, len(chosen), WORKSPACE, spacing)
        for obj in self.objects:
            obj.park(self.model, self.data)
        for i, obj in enumerate(chosen):
            obj.place(self.model, self.data, xy[i, 0], xy[i, 1], yaw[i], colors[i])
        self.target = cups[target_index]

    def instruction_fields(self) -> dict[str, str]:
        return {"color": self.target.color}

    def swap_candidates(self) -> list[FreeObject]:
        """The other cups on the table (instructions name a cup by colour): what `swap_target` may pick."""
        return [o for o in self.objects if o.present and o.kind == "cup" and o is not self.target]

    def _move_target(self, xy: tuple[float, float]) -> None:
        spacing = DISTRACTOR_SPACING if self.split == "distractors" else MIN_SPACING
        others = [o for o in self.objects if o.present and o is not self.target]
        move_object(self.model, self.data, self.target, others, xy, WORKSPACE, spacing)

    # ------------------------------------------------------------------ observations
    def target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        return self.target.pos(self.data), self.target.quat(self.data)

    # ------------------------------------------------------------------ success and reward
    def evaluate(self) -> dict[str, Any]:
        return lift_predicates(self, self.target, 0.5 * self.target.height)

    def reward_terms(self, evaluation: dict[str, Any]) -> dict[str, float]:
        return lift_terms(evaluation)

    # ------------------------------------------------------------------ expert support
    def expert_target(self) -> dict[str, Any]:
        """Privileged facts the scripted expert acts on."""
        # A cup is grasped with the fingers closing across it, the handle between them.
        return {
            "pos": self.target.pos(self.data),
            "yaw": self.target.yaw(self.data),
            "yaw_period": np.pi,
            "height": self.target.height,
        }


def lift_predicates(env: VLAEnv, target: FreeObject, grasp_z: float) -> dict[str, Any]:
    """Success and predicates of the pick tasks: `target` held by both pads, its bottom
    `LIFT_HEIGHT` above the table; `grasp_z` is where on the object the reach term aims."""
    pos = target.pos(env.data)
    height = float(pos[2])
    left, right = env.pad_contacts()
    held = left & right
    grasped = target.body in held
    pos[2] += grasp_z
    return {
        "success": grasped and height >= LIFT_HEIGHT,
        "grasped": grasped,
        "wrong_object_grasped": any(o.body in held for o in env.objects if o.present and o is not target),
        "lifted": height >= LIFT_HEIGHT,
        "target_height": height,
        "reach_distance": math.dist(env.data.site_xpos[env.robot.ee_site], pos),
    }


def lift_terms(evaluation: dict[str, Any]) -> dict[str, float]:
    """Staged dense reward of the pick tasks: reach, grasp, lift (lift counts only while grasped)."""
    grasped = float(evaluation["grasped"])
    return {
        "reach": 1.0 - math.tanh(10.0 * evaluation["reach_distance"]),
        "grasp": grasped,
        "lift": grasped * min(max(evaluation["target_height"] / LIFT_HEIGHT, 0.0), 1.0),
    }
