"""VLA-OpenDrawer-v0 and VLA-CloseDrawer-v0: pull the cabinet's drawer open, or push it shut.

Both tasks use the cabinet scene of `vlagym.envs.cabinet`; VLA-PutCupInDrawer-v0 (`vlagym.envs.put_cup_in_drawer`)
opens the drawer as OpenDrawer's expert does, then fills it.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from vlagym.envs.cabinet import HANDLE, HANDLE_RADIUS, CabinetEnv, unit
from vlagym.envs.expert import ScriptedExpert

GRASP_OFFSET = np.array([-0.004, 0.0, 0.012])  # grasp site vs bar centre: the rear finger clears the panel
PUSH_OFFSET = np.array([-(HANDLE_RADIUS + 0.012), 0.0, 0.012])  # closed fingers touching the bar's front
OPEN_SUCCESS, CLOSED_SUCCESS = 0.10, 0.01
OPEN_GOAL = 0.13  # where OpenDrawer's goal_position puts the handle
LOST_HANDLE = 0.025  # the hand is off the bar when its grasp site is this far from the grasp point


# ----------------------------------------------------------------------------------------- experts
class OpenDrawerExpert(ScriptedExpert):
    """Approach the handle from above, fingers closing along the slide axis; close; pull; (release, retreat)."""

    first_phase = "h_approach"
    pull_to = 0.13
    approach_height = 0.08
    close_steps = 6
    open_steps = 4
    retreat_height = 0.2
    release = False  # let go of the handle and lift the hand clear once the drawer is open
    labels_others = True

    def handle_action(self) -> np.ndarray | None:
        """Action for opening the drawer, or None once it is open (and, if `release`, the hand is clear)."""
        env, h = self.env, self.env.expert_handle()
        if self.yaw is None:
            self.yaw = self.grasp_yaw(h["yaw"], np.pi)
        grasp = env.drawer_point(HANDLE + GRASP_OFFSET)
        if self.phase == "h_approach":
            if self.near(grasp + (0, 0, self.approach_height), 0.01, 0.03):
                self.go("h_descend")
            else:
                return self.servo(grasp + (0, 0, self.approach_height), self.yaw, -1.0)
        if self.phase == "h_descend":
            if self.near(grasp, 0.006):
                self.go("h_close")
            else:
                return self.servo(grasp, self.yaw, -1.0, speed=0.7)
        if self.phase == "h_close":
            self.timer += 1
            if self.timer >= self.close_steps:
                self.go("h_pull")
            return self.servo(grasp, self.yaw, 1.0)
        if self.phase == "h_pull":
            if h["opening"] < self.pull_to - 0.005 or not self.release:
                # Relative to the hand, not the bar: the bar sits a few mm off the grasp point when held.
                step = np.clip(self.pull_to - h["opening"], -0.01, 0.03)
                return self.servo(self.ee + step * h["pull"], self.yaw, 1.0, speed=0.7)
            self.go("h_release")
        if self.phase == "h_release":
            self.timer += 1
            if self.timer >= self.open_steps:
                self.go("h_retreat")
            return self.servo(grasp, self.yaw, -1.0)
        if self.phase == "h_retreat":
            up = grasp + (0.0, 0.0, self.retreat_height - grasp[2])
            if not self.near(up, 0.03, 0.03):
                return self.servo(up, self.yaw, -1.0)
            self.go("h_done")
        return None

    def act(self) -> np.ndarray:
        return self.handle_action()  # never None: without `release` it keeps holding the drawer out

    def resync(self) -> None:
        # Pulling needs the hand on the bar: a hand the acting policy took off it goes back to the handle.
        if self.phase == "h_pull":
            grasp = self.env.drawer_point(HANDLE + GRASP_OFFSET)
            if np.linalg.norm(self.ee - grasp) > LOST_HANDLE:
                self.go("h_approach")


class CloseDrawerExpert(ScriptedExpert):
    """Lower the closed hand in front of the handle, then push along the slide axis until closed."""

    first_phase = "approach"
    approach_height = 0.08
    clearance = 0.015  # start this far in front of the bar
    push_to = -0.01  # push the bar to where it is 1 cm past closed: the joint limit stops the drawer

    def act(self) -> np.ndarray:
        env, h = self.env, self.env.expert_handle()
        if self.yaw is None:
            self.yaw = self.grasp_yaw(h["yaw"], np.pi)
        start = env.drawer_point(HANDLE + PUSH_OFFSET) + self.clearance * h["pull"]
        if self.phase == "approach":
            if self.near(start + (0, 0, self.approach_height), 0.01, 0.03):
                self.go("descend")
            else:
                return self.servo(start + (0, 0, self.approach_height), self.yaw, 1.0)
        if self.phase == "descend":
            if self.near(start, 0.006):
                self.go("push")
            else:
                return self.servo(start, self.yaw, 1.0, speed=0.7)
        return self.servo(env.drawer_point(HANDLE + PUSH_OFFSET, self.push_to), self.yaw, 1.0, speed=0.7)


# ----------------------------------------------------------------------------------------- tasks
class OpenDrawerEnv(CabinetEnv):
    """Open the drawer.

    Task:
        A cabinet with one closed drawer stands on the table, its opening
        toward the robot. Pull the drawer out by its handle. The instruction
        (open vs close) is what tells this task from VLA-CloseDrawer-v0 when
        both are mixed (VLA-MultiTask-v0); the drawer is the only fixture.

    Randomisations:
        Cabinet pose (opening at x in [0, 0.06], y in [-0.15, 0.15], yaw
        ±15 deg), start opening in [0, 0.01] m, drawer colour (the cabinet
        a pale tint of it; never blue outside `unseen_combo`, always blue
        under it: the drawer is the target), 0-1 distractor cups
        beside the cabinet, out of the drawer's path (split `distractors`:
        2-3 objects, cups, a block or a can), their colours (distinct, never
        the drawer's), the instruction template, the arm's start posture,
        lighting and camera poses (`vlagym.envs.splits`).

    Success:
        The drawer is open at least 0.10 m (of 0.16 m).

    Instructions:
        "open the drawer" and paraphrases; the `heldout` split uses a disjoint
        set of wordings.
    """

    description = "Pull the cabinet's drawer open by its handle."
    distractor_counts = {"train": (0, 1), "distractors": (2, 3)}
    templates: ClassVar[dict[str, tuple[str, ...]]] = {
        "train": (
            "open the drawer",
            "pull the drawer open",
            "pull out the drawer",
            "open the cabinet drawer",
            "slide the drawer out",
        ),
        "heldout": (
            "could you open the drawer?",
            "get that drawer open",
            "draw the drawer out of the cabinet",
        ),
    }
    default_reward_weights: ClassVar[dict[str, float]] = {"reach": 0.2, "grasp": 0.2, "open": 0.6}
    expert_cls = OpenDrawerExpert

    def goal_position(self) -> np.ndarray:
        return self.drawer_point(HANDLE, OPEN_GOAL)

    def evaluate(self) -> dict[str, Any]:
        reach = np.linalg.norm(self.data.site_xpos[self.robot.ee_site] - self.drawer_point(HANDLE + GRASP_OFFSET))
        return {
            "success": self.opening >= OPEN_SUCCESS,
            "opening": self.opening,
            "handle_grasped": self.handle_grasped(),
            "reach_distance": float(reach),
        }

    def reward_terms(self, evaluation: dict[str, Any]) -> dict[str, float]:
        return {
            "reach": 1.0 - math.tanh(10.0 * evaluation["reach_distance"]),
            "grasp": float(evaluation["handle_grasped"]),
            "open": unit(evaluation["opening"] / OPEN_SUCCESS),
        }


class CloseDrawerEnv(CabinetEnv):
    """Close the drawer.

    Task:
        A cabinet stands on the table with its drawer pulled out 0.10-0.15 m
        toward the robot. Push it shut. The instruction (close vs open) is
        what tells this task from VLA-OpenDrawer-v0 when both are mixed
        (VLA-MultiTask-v0); the drawer is the only fixture.

    Randomisations:
        As VLA-OpenDrawer-v0, but the drawer starts open 0.10-0.15 m.

    Success:
        The drawer is open at most 0.01 m.

    Instructions:
        "close the drawer" and paraphrases; the `heldout` split uses a
        disjoint set of wordings.
    """

    description = "Push the cabinet's open drawer shut."
    start_opening = (0.10, 0.15)
    distractor_counts = {"train": (0, 1), "distractors": (2, 3)}
    templates: ClassVar[dict[str, tuple[str, ...]]] = {
        "train": (
            "close the drawer",
            "push the drawer closed",
            "shut the drawer",
            "push the drawer back in",
            "slide the drawer shut",
        ),
        "heldout": (
            "could you close the drawer?",
            "please shut that drawer",
            "return the drawer into the cabinet",
        ),
    }
    default_reward_weights: ClassVar[dict[str, float]] = {"reach": 0.3, "close": 0.7}
    expert_cls = CloseDrawerExpert

    def goal_position(self) -> np.ndarray:
        return self.drawer_point(HANDLE, 0.0)

    def evaluate(self) -> dict[str, Any]:
        push_point = self.drawer_point(HANDLE + PUSH_OFFSET)
        return {
            "success": self.opening <= CLOSED_SUCCESS,
            "opening": self.opening,
            "reach_distance": float(np.linalg.norm(self.data.site_xpos[self.robot.ee_site] - push_point)),
        }

    def reward_terms(self, evaluation: dict[str, Any]) -> dict[str, float]:
        closed = (self.start_opening[1] - evaluation["opening"]) / (self.start_opening[1] - CLOSED_SUCCESS)
        return {
            "reach": 1.0 - math.tanh(10.0 * evaluation["reach_distance"]),
            "close": unit(closed),
        }
