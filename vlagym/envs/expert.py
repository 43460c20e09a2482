"""Scripted experts: privileged state in, actions in the env's own action space out.

Every expert is a small closed-loop state machine over pose targets for the
grasp site; `ScriptedExpert.servo` turns a target into a normalised
`ee_delta_pose` action with a proportional law, so experts need no model of
the controller beyond its per-step maxima. Tasks expose what an expert needs
through `env.expert_target()` (and `env.expert_goal()` for placing):

    expert_target() -> {"pos": bottom-centre of the object (3,), "yaw": heading,
                        "yaw_period": symmetry of the grasp (pi, pi/2, or None
                        for round objects), "height": object height}
    expert_goal()   -> {"pos": where the object's bottom should end up (3,),
                        optional "tolerance": how far (m) off "pos" horizontally the
                        object may be let go (default `PickPlaceExpert.release_tolerance`)}
"""

from __future__ import annotations

import numpy as np

from vlagym.envs.robot import orientation_error

DOWN = np.diag([-1.0, 1.0, -1.0])  # grasp-site orientation with the gripper pointing down
LYING_COS = float(np.cos(np.deg2rad(45)))  # an object whose axis tilts further than this from vertical lies down


def rot_z(yaw: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def wrap_angle(angle: float, period: float = 2 * np.pi) -> float:
    """`angle` modulo `period`, in [-period / 2, period / 2)."""
    return float((angle + period / 2) % period - period / 2)


def site_yaw(mat: np.ndarray) -> float:
    """Yaw of a downward grasp-site orientation (the inverse of `rot_z(yaw) @ DOWN`)."""
    return float(np.arctan2(-mat[1, 0], -mat[0, 0]))


class ScriptedExpert:
    """Base class: phase bookkeeping and the servo law. Subclasses implement `act()`.

    With `recover` set, `resync()` runs before every action and corrects the phase where the scene contradicts
    it. That is for labelling states another policy visits (DAgger, `vlagym demos --policy`): the expert's own
    actions never lose a grasp, a learner's do. Left off, the expert acts exactly as it always has.
    """

    first_phase = "start"
    recover = False
    labels_others = False  # `resync` is written and measured for labelling another policy's states (DAgger)

    def __init__(self, env):
        self.env = env.unwrapped
        if self.env.robot.control_mode != "ee_delta_pose":
            raise ValueError(
                f"the scripted expert acts in 'ee_delta_pose' mode; this env uses {self.env.robot.control_mode!r}"
            )
        self.reset()

    def reset(self) -> None:
        self.phase = self.first_phase
        self.timer = 0
        self.yaw: float | None = None

    def __call__(self, obs=None) -> np.ndarray:
        if self.recover:
            self.resync()
        return self.act().astype(np.float32)

    def resync(self) -> None:
        """Move to the phase the scene calls for when it contradicts the current one (only with `recover`).
        Experts without a hook keep their phases: their actions are closed-loop servos already."""

    def hopeless(self) -> bool:
        """Whether this expert can no longer finish the task from the current scene (asked only with `recover`):
        a DAgger episode ends there, since labels past that point would teach an action that leads nowhere."""
        return False

    def act(self) -> np.ndarray:
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers
    def go(self, phase: str) -> None:
        self.phase, self.timer = phase, 0

    @property
    def ee(self) -> np.ndarray:
        return self.env.robot.ee_pos

    def near(self, goal: np.ndarray, tol: float, tol_z: float | None = None) -> bool:
        """Grasp site within `tol` of `goal` horizontally and `tol_z` (default `tol`) vertically."""
        d = self.ee - goal
        return bool(np.hypot(d[0], d[1]) < tol and abs(d[2]) < (tol if tol_z is None else tol_z))

    def grasp_yaw(self, yaw: float, period: float | None) -> float:
        """The gripper yaw closest to the current one that is `yaw` modulo `period`."""
        current = site_yaw(self.env.robot.ee_mat)
        if period is None:
            return current
        return float(yaw + period * np.round((current - yaw) / period))

    def servo(self, goal: np.ndarray, yaw: float, gripper: float, speed: float = 1.0) -> np.ndarray:
        """Action that moves the grasp site toward `goal` at gripper yaw `yaw` (world frame)."""
        robot = self.env.robot
        dpos = (goal - robot.ee_pos) / robot.max_translation
        norm = np.max(np.abs(dpos))
        if norm > speed:
            dpos *= speed / norm  # keep the direction when saturating
        drot = orientation_error(rot_z(yaw) @ DOWN, robot.ee_mat) / robot.max_rotation
        return np.concatenate([dpos, np.clip(drot, -1, 1), [gripper]])


class PickExpert(ScriptedExpert):
    """Approach from above, descend, close, lift.

    The gripper turns so its fingers close across the object along a face (or,
    for a cup, away from its handle), and only once the hand is within
    `turn_distance` of the object: from there the wrist camera shows which way
    the object faces, so a policy can see why the turn goes the way it does.
    """

    first_phase = "approach"
    approach_height = 0.12  # above the grasp point
    lift_height = 0.15
    close_steps = 6
    grasp_fraction = 0.5  # grasp this far up the object
    min_grasp_height = 0.037  # grasp site above the object's base: the pads reach 3.5 cm below it
    holding_phases = ("lift", "lifted", "carry", "lower")  # phases that need the object between the pads
    labels_others = True
    # A turn decided farther off was decided on what no camera shows (a cup's handle from 18 cm: a CNN trained to
    # read it from the wrist image does no better than chance there, 11-17 degrees off at 3.5-7 cm); a policy
    # guessed its direction and went on turning whichever way it had started (docs/multitask.md).
    turn_distance = 0.05  # the gripper turns once the hand is this close to the grasp point horizontally (m)
    turn_tolerance = 0.2  # and descends once its yaw is this close to the grasp yaw (rad)

    def reset(self) -> None:
        super().reset()
        self.hold_yaw: float | None = None  # the yaw held while `yaw`, the grasp yaw, is not chosen yet

    def holding(self) -> bool:
        """The target object touches both finger pads."""
        left, right = self.env.pad_contacts()
        return self.env.target.body in (left & right)

    def hopeless(self) -> bool:
        # A cup or can on its side is out of reach of this top-down grasp (a block lies on a face whichever way
        # it falls): past that point the labels said "descend" onto it for the rest of the episode, a quarter
        # to a third of the DAgger samples (cutting them changed no success rate: docs/multitask.md).
        target = self.env.target
        if target.kind == "block" or float(self.env.data.xmat[target.body][8]) >= LYING_COS:
            return False
        return not self.holding()

    def resync(self) -> None:
        # A lost grasp (dropped, released early, never closed on the object) starts the pick over; a grasp
        # the acting policy made on its own, before the expert's descent ended, is lifted.
        if self.phase in self.holding_phases and not self.holding():
            self.restart_pick()
        elif self.phase in ("approach", "descend") and self.holding():
            self.go("lift")

    def restart_pick(self) -> None:
        self.go("approach")
        self.yaw = self.hold_yaw = None

    def at_grasp_yaw(self) -> bool:
        """The gripper has its grasp yaw (within `turn_tolerance`)."""
        if self.yaw is None:
            return False
        return abs(wrap_angle(self.yaw - site_yaw(self.env.robot.ee_mat))) < self.turn_tolerance

    def pick(self) -> np.ndarray | None:
        """Action for the picking phases, or None once the object is lifted."""
        target = self.env.expert_target()
        # Half-way up, but high enough that the 7 cm pads clear the table (short
        # blocks) and low enough to stay below a cup's rim.
        grasp_z = float(np.clip(self.grasp_fraction * target["height"], self.min_grasp_height, 0.045))
        grasp = target["pos"] + (0.0, 0.0, grasp_z)
        above = grasp + (0.0, 0.0, self.approach_height)
        if self.hold_yaw is None:
            self.hold_yaw = site_yaw(self.env.robot.ee_mat)
        near = np.hypot(*(self.ee[:2] - grasp[:2])) < self.turn_distance
        if self.yaw is None and (near or self.phase != "approach"):  # (a relabelled hold skips the approach)
            self.yaw, self.hold_yaw = self.grasp_yaw(target["yaw"], target["yaw_period"]), None
        if self.phase == "approach":
            if self.near(above, 0.01, 0.03) and self.at_grasp_yaw():
                self.go("descend")
            else:
                return self.servo(above, self.hold_yaw if self.yaw is None else self.yaw, -1.0)
        if self.phase == "descend":
            if self.near(grasp, 0.008):
                self.go("close")
            else:
                return self.servo(grasp, self.yaw, -1.0)
        if self.phase == "close":
            self.timer += 1
            if self.timer >= self.close_steps:
                self.go("lift")
            return self.servo(grasp, self.yaw, 1.0)
        if self.phase == "lift":
            goal = np.array([grasp[0], grasp[1], self.lift_height])
            if self.near(goal, 0.02, 0.02):
                self.go("lifted")
            else:
                return self.servo(goal, self.yaw, 1.0)
        return None

    def act(self) -> np.ndarray:
        action = self.pick()
        if action is None:  # hold the object up
            target = self.env.expert_target()
            goal = np.array([target["pos"][0], target["pos"][1], self.lift_height])
            action = self.servo(goal, self.yaw, 1.0)
        return action


class PickPlaceExpert(PickExpert):
    """Pick, carry above `expert_goal()["pos"]`, lower, release, retreat upward."""

    carry_height = 0.16
    release_clearance = 0.015  # object bottom this far above the goal when released
    release_tolerance = 0.01  # released this close to the goal horizontally, unless the goal names its own
    open_steps = 5

    def resync(self) -> None:
        super().resync()
        if self.phase != "retreat":
            return
        self.timer += 1
        if self.holding():
            self.go("carry")  # the acting policy kept hold of it: carry it again
        elif self.timer > self.open_steps and not self.env.evaluate()["success"]:
            self.restart_pick()  # let go, settled, and not where it belongs

    def act(self) -> np.ndarray:
        action = self.pick()
        if action is not None:
            return action
        target, placing = self.env.expert_target(), self.env.expert_goal()
        goal = placing["pos"]
        # Offset from the object's bottom to the grasp site, measured now that it is held.
        offset = self.ee - target["pos"]
        if self.phase == "lifted":
            self.go("carry")
        if self.phase == "carry":
            above = goal + offset + (0.0, 0.0, self.carry_height - goal[2])
            above[2] = max(above[2], self.carry_height)
            if self.near(above, 0.012, 0.03):
                self.go("lower")
            else:
                return self.servo(above, self.yaw, 1.0)
        if self.phase == "lower":
            release = goal + offset + (0.0, 0.0, self.release_clearance)
            # Aim at the goal, let go within the goal's tolerance: a policy learns when to open from what it
            # can see (the height, roughly above the goal), not from a centimetre no camera pixel resolves.
            if self.near(release, placing.get("tolerance", self.release_tolerance), 0.008):
                self.go("release")
            else:
                return self.servo(release, self.yaw, 1.0, speed=0.6)
        if self.phase == "release":
            self.timer += 1
            if self.timer >= self.open_steps:
                self.go("retreat")
            return self.servo(self.ee, self.yaw, -1.0)
        up = self.ee.copy()
        up[2] = self.carry_height
        return self.servo(up, self.yaw, -1.0)


def labels_others(task: str) -> bool:
    """Whether `task`'s scripted expert can label the states another policy visits (`ScriptedExpert.recover`
    written for it and measured): what `vlagym demos --policy` needs."""
    import importlib

    from vlagym.envs import TASKS

    module, _, name = TASKS[task][0].partition(":")
    expert_cls = getattr(getattr(importlib.import_module(module), name), "expert_cls", None)
    return bool(getattr(expert_cls, "labels_others", False))
