"""VLA-PickObject-v0: pick up the object the instruction names, among objects of other shapes."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from vlagym.envs.base import VLAEnv
from vlagym.envs.expert import PickExpert
from vlagym.envs.objects import OBJECT_XML, FreeObject, move_object, sample_colors, sample_layout
from vlagym.envs.pick_cup import lift_predicates, lift_terms

GRASP_HEIGHT = 0.045  # objects are grasped half-way up, but no higher than this above their bottom ...
MIN_GRASP_HEIGHT = 0.036  # ... and no lower than this: the pads reach 3 cm below the grasp site
WORKSPACE = ((-0.12, 0.08), (-0.2, 0.2))  # x and y ranges of object centres
MIN_SPACING = 0.13  # between object centres, so open fingers never hit a neighbour
DISTRACTOR_SPACING = 0.12  # the crowded `distractors` split
SLOTS = (("cup0", "cup"), ("cup1", "cup"), ("block0", "block"), ("block1", "block"), ("can0", "can"))
KINDS = ("cup", "block", "can")
DISTRACTORS = {"train": (1, 2), "distractors": (3, 4)}  # other objects besides the target
#: symmetry of the grasp per kind: across a cup (handle along its x axis), across a cube's faces, any for a can
YAW_PERIOD: dict[str, float | None] = {"cup": np.pi, "block": np.pi / 2, "can": None}


def grasp_height(height: float) -> float:
    """Height above an object's bottom at which the grasp site closes on it."""
    return float(np.clip(0.5 * height, MIN_GRASP_HEIGHT, GRASP_HEIGHT))


class PickObjectExpert(PickExpert):
    """`PickExpert`, grasping low objects (blocks) near their top.

    `PickExpert` grasps half-way up; for a 4.4 cm cube that puts the grasp site
    2.2 cm above the table, where the finger pads already stand on the table.
    """

    def pick(self) -> np.ndarray | None:
        height = self.env.expert_target()["height"]
        self.grasp_fraction = grasp_height(height) / height
        return super().pick()


class PickObjectEnv(VLAEnv):
    """Pick up the named object among objects of other shapes.

    Task:
        Two or three objects (cups, blocks, cans) of distinct colours stand on
        the table; the instruction names one by colour and kind. Lift it.

    Randomisations:
        The target's kind (uniform over cup, block, can) and slot; 1-2
        distractors, at least one of another kind than the target; colours
        (all distinct; never a kind's held-out colour outside `unseen_combo`);
        positions (x in [-0.12, 0.08], y in [-0.2, 0.2], at least 13 cm apart);
        yaw (uniform); the instruction template; the arm's start posture
        (±0.03 rad per joint); lighting and camera poses (`vlagym.envs.splits`).
        Split `distractors`: 3-4 distractors, 12 cm apart.

    Success:
        The target's bottom is at least 5 cm above the table and both finger
        pads touch it. Lifting any other object is not success.

    Instructions:
        "pick up the {color} {kind}" and paraphrases; the `heldout` split uses a
        disjoint set of wordings. `reset(options={"swap_target": True})` names
        another object of the scene instead (language controls).
    """

    description = "Pick up the object of the named colour and kind among objects of other shapes."
    family = "pick"
    distractor_counts = DISTRACTORS
    templates: ClassVar[dict[str, tuple[str, ...]]] = {
        "train": (
            "pick up the {color} {kind}",
            "lift the {color} {kind}",
            "grab the {color} {kind} and lift it",
            "pick the {color} {kind} up",
            "raise the {color} {kind} off the table",
            "take the {color} {kind}",
        ),
        "heldout": (
            "could you lift the {color} {kind}?",
            "get the {color} {kind} off the table",
            "hold the {color} {kind} up in the air",
            "I need the {color} {kind}, pick it up",
        ),
    }
    default_reward_weights: ClassVar[dict[str, float]] = {"reach": 0.2, "grasp": 0.3, "lift": 0.5}
    expert_cls = PickObjectExpert

    # ------------------------------------------------------------------ scene
    def _objects_xml(self) -> str:
        return "\n".join(OBJECT_XML[kind](name, (0, 0, -1)) for name, kind in SLOTS)

    def _setup_task(self) -> None:
        self.objects = [FreeObject(self.model, name, kind, i) for i, (name, kind) in enumerate(SLOTS)]
        self.target = self.objects[0]

    # ------------------------------------------------------------------ reset
    def _initialize_episode(self, rng: np.random.Generator) -> None:
        lo, hi = DISTRACTORS["distractors" if self.split == "distractors" else "train"]
        n_other = int(rng.integers(lo, hi + 1))
        spacing = DISTRACTOR_SPACING if self.split == "distractors" else MIN_SPACING
        kind = KINDS[rng.integers(len(KINDS))]
        of_kind = [o for o in self.objects if o.kind == kind]
        target = of_kind[rng.integers(len(of_kind))]
        # One distractor of another kind, so the kind word is needed; the rest from any remaining slot.
        others = [o for o in self.objects if o.kind != kind]
        first = others[rng.integers(len(others))]
        rest = [o for o in self.objects if o is not target and o is not first]
        picks = rng.choice(len(rest), size=n_other - 1, replace=False)
        chosen = [target, first] + [rest[i] for i in sorted(picks)]
        colors = sample_colors(rng, [o.kind for o in chosen], self.split == "unseen_combo", 0)
        xy, yaw = sample_layout(rng, len(chosen), WORKSPACE, spacing)
        for obj in self.objects:
            obj.park(self.model, self.data)
        for i, obj in enumerate(chosen):
            obj.place(self.model, self.data, xy[i, 0], xy[i, 1], yaw[i], colors[i])
        self.target = target

    def instruction_fields(self) -> dict[str, str]:
        return {"color": self.target.color, "kind": self.target.kind}

    def swap_candidates(self) -> list[FreeObject]:
        """Every other object on the table (colours are distinct): what `swap_target` may pick."""
        return [o for o in self.objects if o.present and o is not self.target]

    def _move_target(self, xy: tuple[float, float]) -> None:
        spacing = DISTRACTOR_SPACING if self.split == "distractors" else MIN_SPACING
        others = [o for o in self.objects if o.present and o is not self.target]
        move_object(self.model, self.data, self.target, others, xy, WORKSPACE, spacing)

    # ------------------------------------------------------------------ observations
    def target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        return self.target.pos(self.data), self.target.quat(self.data)

    # ------------------------------------------------------------------ success and reward
    def evaluate(self) -> dict[str, Any]:
        return lift_predicates(self, self.target, grasp_height(self.target.height))

    def reward_terms(self, evaluation: dict[str, Any]) -> dict[str, float]:
        return lift_terms(evaluation)

    # ------------------------------------------------------------------ expert support
    def expert_target(self) -> dict[str, Any]:
        """Privileged facts the scripted expert acts on."""
        return {
            "pos": self.target.pos(self.data),
            "yaw": self.target.yaw(self.data),
            "yaw_period": YAW_PERIOD[self.target.kind],
            "height": self.target.height,
        }
