"""VLA-PickCup-v0: pick up the cup the instruction names."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from vlagym.envs.base import VLAEnv
from vlagym.envs.expert import PickExpert
from vlagym.envs.objects import COLORS, CUP_HEIGHT, CUP_RADIUS, cup_xml, sample_layout

MAX_CUPS = 3
LIFT_HEIGHT = 0.05  # success: cup bottom this far above the table, while held
WORKSPACE = ((-0.12, 0.08), (-0.2, 0.2))  # x and y ranges of cup centres
MIN_SPACING = 0.13  # between cup centres, so open fingers never hit a neighbour
PARK = np.array([1.5, 1.5, -0.75])  # unused cups rest on the floor, out of view


class PickCupEnv(VLAEnv):
    """Pick up the named cup.

    Task:
        One to three cups of distinct colours stand on the table; the
        instruction names one of them. Lift that cup off the table.

    Randomisations:
        Number of cups (1-3), their colours (distinct, from the palette),
        positions (x in [-0.12, 0.08], y in [-0.2, 0.2], at least 13 cm
        apart), yaw (uniform), which cup is the target, the instruction
        template, and the arm's start posture (±0.03 rad per joint).

    Success:
        The target cup's bottom is at least 5 cm above the table and both
        finger pads touch it. Lifting any other cup is not success.

    Instructions:
        "pick up the {color} cup" and paraphrases; the `heldout` split uses a
        disjoint set of wordings.
    """

    description = "Pick up the cup of the named colour among up to three cups."
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

    # ------------------------------------------------------------------ scene
    def _objects_xml(self) -> str:
        return "\n".join(cup_xml(f"cup{i}", PARK + [0.2 * i, 0, 0]) for i in range(MAX_CUPS))

    def _setup_task(self) -> None:
        m = self.model
        self.cup_bodies = np.array([m.body(f"cup{i}").id for i in range(MAX_CUPS)])
        self.cup_qpos_adr = np.array([m.jnt_qposadr[m.joint(f"cup{i}").id] for i in range(MAX_CUPS)])
        self.cup_dof_adr = np.array([m.jnt_dofadr[m.joint(f"cup{i}").id] for i in range(MAX_CUPS)])
        self.cup_color_geoms = [
            [g for g in range(m.ngeom) if m.geom_bodyid[g] == b and m.geom(g).name.endswith(("body", "handle"))]
            for b in self.cup_bodies
        ]
        self.num_cups = 1
        self.target = 0
        self.colors: list[str] = []

    # ------------------------------------------------------------------ reset
    def _initialize_episode(self, rng: np.random.Generator) -> None:
        self.num_cups = int(rng.integers(1, MAX_CUPS + 1))
        self.colors = [str(c) for c in rng.choice(list(COLORS), size=self.num_cups, replace=False)]
        xy, yaw = sample_layout(rng, self.num_cups, WORKSPACE, MIN_SPACING)
        self.target = int(rng.integers(self.num_cups))
        qpos = self.data.qpos
        for i in range(MAX_CUPS):
            adr = self.cup_qpos_adr[i]
            if i < self.num_cups:
                qpos[adr : adr + 3] = (xy[i, 0], xy[i, 1], 0.0)
                qpos[adr + 3 : adr + 7] = (np.cos(yaw[i] / 2), 0.0, 0.0, np.sin(yaw[i] / 2))
                rgba = COLORS[self.colors[i]]
            else:
                qpos[adr : adr + 3] = PARK + [0.2 * i, 0, 0]
                qpos[adr + 3 : adr + 7] = (1.0, 0.0, 0.0, 0.0)
                rgba = (0.5, 0.5, 0.5, 1.0)
            for g in self.cup_color_geoms[i]:
                self.model.geom_rgba[g] = rgba

    def instruction_fields(self) -> dict[str, str]:
        return {"color": self.colors[self.target]}

    # ------------------------------------------------------------------ observations
    def _task_state_dim(self) -> int:
        return 6 + 9 * MAX_CUPS

    def _task_state(self) -> np.ndarray:
        """Target cup position and its offset from the grasp site, then per cup
        slot: position, quaternion, present flag, target flag."""
        qpos = self.data.qpos
        target_pos = qpos[self.cup_qpos_adr[self.target] : self.cup_qpos_adr[self.target] + 3]
        parts = [target_pos, target_pos - self.data.site_xpos[self.robot.ee_site]]
        for i in range(MAX_CUPS):
            present = i < self.num_cups
            adr = self.cup_qpos_adr[i]
            pose = qpos[adr : adr + 7] if present else np.zeros(7)
            parts.append(pose)
            parts.append((float(present), float(i == self.target)))
        return np.concatenate(parts)

    # ------------------------------------------------------------------ success and reward
    def target_pos(self) -> np.ndarray:
        adr = self.cup_qpos_adr[self.target]
        return self.data.qpos[adr : adr + 3].copy()

    def evaluate(self) -> dict[str, Any]:
        pos = self.target_pos()
        grasp_point = pos + (0.0, 0.0, 0.5 * CUP_HEIGHT)
        height = pos[2]
        left, right = self.pad_contacts()
        held = left & right
        grasped = int(self.cup_bodies[self.target]) in held
        wrong = any(int(self.cup_bodies[i]) in held for i in range(self.num_cups) if i != self.target)
        return {
            "success": grasped and height >= LIFT_HEIGHT,
            "grasped": grasped,
            "wrong_object_grasped": wrong,
            "lifted": height >= LIFT_HEIGHT,
            "target_height": float(height),
            "reach_distance": float(np.linalg.norm(self.data.site_xpos[self.robot.ee_site] - grasp_point)),
        }

    def reward_terms(self, evaluation: dict[str, Any]) -> dict[str, float]:
        grasped = float(evaluation["grasped"])
        return {
            "reach": float(1.0 - np.tanh(10.0 * evaluation["reach_distance"])),
            "grasp": grasped,
            "lift": grasped * float(np.clip(evaluation["target_height"] / LIFT_HEIGHT, 0.0, 1.0)),
        }

    # ------------------------------------------------------------------ expert support
    def expert_target(self) -> dict[str, Any]:
        """Privileged facts the scripted expert acts on."""
        xmat = self.data.xmat[self.cup_bodies[self.target]]  # the handle points along the body's x axis
        return {
            "pos": self.target_pos(),
            "handle_yaw": float(np.arctan2(xmat[3], xmat[0])),
            "radius": CUP_RADIUS,
            "height": CUP_HEIGHT,
        }
