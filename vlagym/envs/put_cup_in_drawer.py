"""VLA-PutCupInDrawer-v0: open the cabinet's drawer, then put the named cup in it."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from vlagym.envs.base import TASK_SCALARS_AT
from vlagym.envs.cabinet import FLOOR_Z, HANDLE, INNER_DEPTH, INNER_HALF_W, CabinetEnv, unit
from vlagym.envs.drawer import GRASP_OFFSET, LOST_HANDLE, OPEN_SUCCESS, OpenDrawerExpert
from vlagym.envs.expert import PickPlaceExpert, site_yaw
from vlagym.envs.objects import CUP_RADIUS, FreeObject
from vlagym.envs.robot import Robot

UPRIGHT_COS = np.cos(np.deg2rad(20))
MIN_GOAL_DEPTH = 0.11  # the goal is the middle of at least this much of the drawer's interior
# The expert lets go this close to the goal: half the room a centred cup has in the tighter direction.
RELEASE_TOLERANCE = 0.5 * (min(INNER_HALF_W, 0.5 * MIN_GOAL_DEPTH) - CUP_RADIUS)
# With `recover`: a drawer this close to the expert's pull_to counts as opened, one this far below it as shut.
OPEN_SLACK, REOPEN_SLACK = 0.02, 0.04
# `subtask_spans`: while the drawer is out less than this, the steps are OpenDrawer's (the expert lets go of the
# bar 2-5 steps after it), labelled under OpenDrawer's first wording.
SUBTASK_OPENING = 0.12
OPEN_SUBTASK = "open the drawer"


class PutCupInDrawerExpert(OpenDrawerExpert, PickPlaceExpert):
    """Open the drawer (as OpenDrawerExpert), let go and lift clear, then pick the cup and place it inside."""

    release = True
    pull_to = 0.15
    lift_height = carry_height = 0.22  # the carried cup clears the cabinet top and the drawer walls

    def resync(self) -> None:
        opening = self.env.opening
        if self.phase in ("h_approach", "h_descend", "h_close") and opening >= self.pull_to - OPEN_SLACK:
            # The acting policy opened the drawer before this expert's own plan got there: let go of the bar
            # if the hand is on it, else go straight on to the cup (not back to the handle).
            on_bar = np.linalg.norm(self.ee - self.env.drawer_point(HANDLE + GRASP_OFFSET)) < LOST_HANDLE
            if on_bar:
                self.go("h_release")
            else:
                self.go("transit")
                self.yaw = None
        elif self.phase.startswith("h_"):
            OpenDrawerExpert.resync(self)
        elif opening < self.pull_to - REOPEN_SLACK and not self.holding():
            self.go("h_approach")  # pushed (part) shut before the cup is in: open it again
            self.yaw = None
        else:
            PickPlaceExpert.resync(self)

    def act(self) -> np.ndarray:
        if self.phase.startswith("h_"):
            action = self.handle_action()
            if action is not None:
                return action
            self.go("transit")
            self.yaw = None
        if self.phase == "transit":
            # Over the cabinet at carry height first: a long diagonal move sags enough to catch its edge.
            target = self.env.expert_target()
            above = np.array([target["pos"][0], target["pos"][1], self.carry_height])
            if not self.near(above, 0.03, 0.04):
                return self.servo(above, site_yaw(self.env.robot.ee_mat), -1.0)
            self.go(PickPlaceExpert.first_phase)
        return PickPlaceExpert.act(self)


class PutCupInDrawerEnv(CabinetEnv):
    """Open the drawer and put the named cup in it.

    Task:
        A cabinet with a closed drawer and two cups of distinct colours
        stand on the table; the instruction names one cup. Pull the drawer
        open, then place that cup upright in it.

    Randomisations:
        Cabinet pose, start opening and drawer colour as VLA-OpenDrawer-v0
        (the drawer's colour is never blue); two cups (split `distractors`:
        the target plus 2-3 other objects, at least one another cup), their
        colours (distinct, never the drawer's; the target cup's held-out
        colour only under `unseen_combo`), positions beside the cabinet out of
        the drawer's path, yaws, which cup is the target, the instruction
        template, the arm's start posture, lighting and camera poses.

    Success:
        The named cup's bottom is inside the drawer's walls (drawer frame),
        resting on the drawer floor, the cup upright (within 20 deg) and not
        touching either finger pad. Another object in the drawer instead is
        not success (`wrong_object_in_drawer`).

    Instructions:
        "open the drawer and put the {color} cup in it" and paraphrases; the
        `heldout` split uses a disjoint set of wordings.
    """

    description = "Open the drawer, then put the named cup inside it."
    family = "long-horizon"
    distractor_counts = {"train": (1, 1), "distractors": (2, 3)}
    templates: ClassVar[dict[str, tuple[str, ...]]] = {
        "train": (
            "open the drawer and put the {color} cup in it",
            "pull the drawer open, then place the {color} cup inside",
            "open the drawer and put the {color} cup into it",
            "put the {color} cup in the drawer after opening it",
            "open the drawer, then store the {color} cup in it",
        ),
        "heldout": (
            "could you open the drawer and drop the {color} mug in?",
            "the {color} cup goes in the drawer; open it first",
            "get the drawer open and tuck the {color} cup inside",
        ),
    }
    default_reward_weights: ClassVar[dict[str, float]] = {
        "open": 0.2,
        "reach": 0.1,
        "grasp": 0.2,
        "place": 0.3,
        "placed": 0.2,
    }
    expert_cls = PutCupInDrawerExpert

    @classmethod
    def subtask_spans(cls, state: np.ndarray) -> list[tuple[int, int, str | None]]:
        """The drawer-opening stage (OpenDrawer's wording) until the drawer is first out `SUBTASK_OPENING`, the
        task's own instruction from there (a drawer bumped back a little while the cup goes in stays opened)."""
        opened = np.flatnonzero(np.asarray(state)[:, Robot.PROPRIO_DIM + TASK_SCALARS_AT] >= SUBTASK_OPENING)
        n = len(state)
        t = int(opened[0]) if len(opened) else n
        return [span for span in ((0, t, OPEN_SUBTASK), (t, n, None)) if span[1] > span[0]]

    def _choose_objects(self, rng: np.random.Generator) -> tuple[list[FreeObject], int]:
        cups = [o for o in self.objects if o.kind == "cup"]
        if self.split == "distractors":
            lo, hi = self.distractor_counts["distractors"]
            # Another cup always, so the colour word is needed; the rest of any kind.
            rest = self.objects[2:]
            extra = rng.choice(len(rest), size=int(rng.integers(lo, hi + 1)) - 1, replace=False)
            chosen = cups[:2] + [rest[i] for i in sorted(extra)]
            return chosen, int(rng.integers(2))
        # Always two cups, so the colour word is needed.
        return cups[:2], int(rng.integers(2))

    def instruction_fields(self) -> dict[str, str]:
        return {"color": self.target.color}

    def target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        return self.target.pos(self.data), self.target.quat(self.data)

    def goal_position(self) -> np.ndarray:
        """The middle of the drawer's exposed interior, on its floor."""
        depth = min(max(self.opening, MIN_GOAL_DEPTH), INNER_DEPTH)
        return self.drawer_point((0.5 * depth, 0.0, FLOOR_Z))

    def in_drawer(self, obj: FreeObject) -> bool:
        """Bottom inside the drawer's walls and resting on its floor."""
        p = self.in_drawer_frame(obj.pos(self.data))
        inside = 0.0 < p[0] < INNER_DEPTH and abs(p[1]) < INNER_HALF_W
        return bool(inside and abs(p[2] - FLOOR_Z) < 0.01)

    def evaluate(self) -> dict[str, Any]:
        cup = self.target
        pos = cup.pos(self.data)
        left, right = self.pad_contacts()
        touched = cup.body in (left | right)
        in_drawer = self.in_drawer(cup)
        upright = float(self.data.xmat[cup.body][8]) >= UPRIGHT_COS
        grasp_point = pos + (0.0, 0.0, 0.5 * cup.height)
        return {
            "success": in_drawer and upright and not touched,
            "opening": self.opening,
            "grasped": cup.body in (left & right),
            "in_drawer": in_drawer,
            "upright": upright,
            "wrong_object_in_drawer": any(self.in_drawer(o) for o in self.objects if o.present and o is not cup),
            "reach_distance": float(np.linalg.norm(self.data.site_xpos[self.robot.ee_site] - grasp_point)),
            "goal_distance": float(np.linalg.norm(pos - self.goal_position())),
        }

    def reward_terms(self, evaluation: dict[str, Any]) -> dict[str, float]:
        placed = float(evaluation["success"])
        return {
            "open": unit(evaluation["opening"] / OPEN_SUCCESS),
            "reach": max(1.0 - math.tanh(10.0 * evaluation["reach_distance"]), placed),
            "grasp": max(float(evaluation["grasped"]), float(evaluation["in_drawer"])),
            "place": 1.0 - math.tanh(10.0 * evaluation["goal_distance"]),
            "placed": placed,
        }

    def expert_target(self) -> dict[str, Any]:
        return {
            "pos": self.target.pos(self.data),
            "yaw": self.target.yaw(self.data),
            "yaw_period": np.pi,
            "height": self.target.height,
        }

    def expert_goal(self) -> dict[str, Any]:
        return {"pos": self.goal_position(), "tolerance": RELEASE_TOLERANCE}
