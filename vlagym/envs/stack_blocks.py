"""VLA-StackBlocks-v0: put the named block on top of the other named block."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from vlagym.envs.base import VLAEnv
from vlagym.envs.expert import PickPlaceExpert, wrap_angle
from vlagym.envs.objects import BLOCK_HALF, OBJECT_XML, FreeObject, sample_colors, sample_layout

MAX_OFFSET = 0.6 * BLOCK_HALF  # success: top block centred on the bottom one within this (horizontal)
MAX_GAP = 0.01  # success: top block's bottom within this of the bottom block's top face
ON_TABLE = 0.005  # success: the bottom block's bottom within this of the table top
WORKSPACE = ((-0.12, 0.08), (-0.2, 0.2))  # x and y ranges of block centres
SPACING = {"train": 0.11, "distractors": 0.1}  # between block centres, so open fingers miss a neighbour
SLOTS = tuple((f"block{i}", "block") for i in range(5))
DISTRACTORS = {"train": (1, 2), "distractors": (3, 4)}  # other blocks besides the one to move (incl. the base)


class StackBlocksEnv(VLAEnv):
    """Put the named block on the other named block.

    Task:
        Two or three blocks of distinct colours stand on the table; the
        instruction names the block to move and the block to put it on.
        Stack the first on the second and let go.

    Randomisations:
        Number of blocks (2-3), their colours (distinct; never the block's
        held-out colour outside `unseen_combo`, where the block to move gets
        it), positions (x in [-0.12, 0.08], y in [-0.2, 0.2], at least 11 cm
        apart), yaw (uniform), which blocks are moved and built on, the
        instruction template, the arm's start posture, lighting and camera poses
        (`vlagym.envs.splits`). Split `distractors`: four or five blocks, 10 cm
        apart.

    Success:
        The named top block rests on the named bottom block: centres within
        0.6 x the block's half size horizontally, the top block's bottom within
        1 cm of the bottom block's top face, neither finger pad touching the
        top block, and the bottom block still on the table. Stacking them the
        other way round, or on a third block, is not success.

    Instructions:
        "put the {color} block on the {base_color} block" and paraphrases; the
        `heldout` split uses a disjoint set of wordings.
    """

    description = "Stack the block of one named colour on the block of another named colour."
    family = "stack"
    distractor_counts = DISTRACTORS
    templates: ClassVar[dict[str, tuple[str, ...]]] = {
        "train": (
            "put the {color} block on the {base_color} block",
            "stack the {color} block on the {base_color} block",
            "place the {color} block on top of the {base_color} block",
            "pick up the {color} block and put it on the {base_color} block",
            "set the {color} block onto the {base_color} block",
        ),
        "heldout": (
            "could you stack the {color} cube on top of the {base_color} cube?",
            "the {color} block goes on the {base_color} one",
            "build a tower with the {color} block resting on the {base_color} block",
        ),
    }
    default_reward_weights: ClassVar[dict[str, float]] = {"reach": 0.15, "grasp": 0.15, "place": 0.4, "stacked": 0.3}

    # ------------------------------------------------------------------ scene
    def _objects_xml(self) -> str:
        return "\n".join(OBJECT_XML[kind](name, (0, 0, -1)) for name, kind in SLOTS)

    def _setup_task(self) -> None:
        self.objects = [FreeObject(self.model, name, kind, i) for i, (name, kind) in enumerate(SLOTS)]
        self.target, self.base_block = self.objects[0], self.objects[1]

    # ------------------------------------------------------------------ reset
    def _initialize_episode(self, rng: np.random.Generator) -> None:
        split = "distractors" if self.split == "distractors" else "train"
        lo, hi = DISTRACTORS[split]
        chosen = self.objects[: 1 + int(rng.integers(lo, hi + 1))]
        top, bottom = (int(i) for i in rng.choice(len(chosen), size=2, replace=False))
        colors = sample_colors(rng, [o.kind for o in chosen], self.split == "unseen_combo", top)
        xy, yaw = sample_layout(rng, len(chosen), WORKSPACE, SPACING[split])
        for obj in self.objects:
            obj.park(self.model, self.data)
        for i, obj in enumerate(chosen):
            obj.place(self.model, self.data, xy[i, 0], xy[i, 1], yaw[i], colors[i])
        self.target, self.base_block = chosen[top], chosen[bottom]

    def instruction_fields(self) -> dict[str, str]:
        return {"color": self.target.color, "base_color": self.base_block.color}

    # ------------------------------------------------------------------ observations
    def target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        return self.target.pos(self.data), self.target.quat(self.data)

    def goal_position(self) -> np.ndarray:
        """Centre of the bottom block's top face: where the top block's bottom belongs."""
        return self.base_block.pos(self.data) + (0.0, 0.0, 2 * BLOCK_HALF)

    # ------------------------------------------------------------------ success and reward
    def evaluate(self) -> dict[str, Any]:
        pos, goal = self.target.pos(self.data), self.goal_position()
        offset = float(np.linalg.norm(pos[:2] - goal[:2]))
        gap = float(pos[2] - goal[2])
        left, right = self.pad_contacts()
        grasped = self.target.body in (left & right)
        released = self.target.body not in (left | right)
        base_on_table = abs(goal[2] - 2 * BLOCK_HALF) < ON_TABLE
        on_top = offset < MAX_OFFSET and abs(gap) < MAX_GAP
        grasp_point = pos + (0.0, 0.0, BLOCK_HALF)
        return {
            "success": on_top and released and base_on_table,
            "on_top": on_top,
            "released": released,
            "base_on_table": base_on_table,
            "grasped": grasped,
            "horizontal_offset": offset,
            "vertical_gap": gap,
            "place_distance": float(np.linalg.norm(pos - goal)),
            "reach_distance": float(np.linalg.norm(self.data.site_xpos[self.robot.ee_site] - grasp_point)),
        }

    def reward_terms(self, evaluation: dict[str, Any]) -> dict[str, float]:
        grasped, stacked = float(evaluation["grasped"]), float(evaluation["success"])
        return {
            "reach": max(float(1.0 - np.tanh(10.0 * evaluation["reach_distance"])), grasped, stacked),
            "grasp": max(grasped, stacked),
            "place": max(grasped, stacked) * float(1.0 - np.tanh(10.0 * evaluation["place_distance"])),
            "stacked": stacked,
        }

    # ------------------------------------------------------------------ expert support
    def expert_target(self) -> dict[str, Any]:
        """Privileged facts the scripted expert acts on."""
        return {
            "pos": self.target.pos(self.data),
            "yaw": self.target.yaw(self.data),
            "yaw_period": np.pi / 2,
            "height": self.target.height,
        }

    def expert_goal(self) -> dict[str, Any]:
        return {"pos": self.goal_position(), "yaw": self.base_block.yaw(self.data)}


class StackExpert(PickPlaceExpert):
    """Pick the top block, turn it to the bottom block's heading, set it down on its top face.

    The turn is the smallest one modulo a quarter turn (cubes look the same
    every 90 degrees), so the stack ends face-aligned.
    """

    def reset(self) -> None:
        super().reset()
        self.turned = False

    def restart_pick(self) -> None:
        super().restart_pick()
        self.turned = False

    def act(self) -> np.ndarray:
        if self.phase == "carry" and not self.turned:  # once, as the carry starts
            target, goal = self.env.expert_target(), self.env.expert_goal()
            self.yaw += wrap_angle(goal["yaw"] - target["yaw"], np.pi / 2)
            self.turned = True
        return super().act()


StackBlocksEnv.expert_cls = StackExpert
