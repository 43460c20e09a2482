"""Scripted experts: privileged state in, actions in the env's own action space out."""

from __future__ import annotations

import numpy as np

from vlagym.envs.robot import orientation_error

DOWN = np.diag([-1.0, 1.0, -1.0])  # grasp-site orientation with the gripper pointing down


def rot_z(yaw: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


class PickExpert:
    """Approach from above, descend, close, lift: a closed-loop state machine.

    The gripper turns so its fingers close across the cup, away from the
    handle. Works in `ee_delta_pose` mode; the pose targets are turned into
    normalised actions with a proportional law, so it needs no model of the
    controller beyond the per-step maxima.
    """

    approach_height = 0.12  # above the grasp point
    lift_height = 0.15
    close_steps = 6

    def __init__(self, env):
        self.env = env.unwrapped
        if self.env.robot.control_mode != "ee_delta_pose":
            raise ValueError(
                f"the scripted expert acts in 'ee_delta_pose' mode; this env uses {self.env.robot.control_mode!r}"
            )
        self.reset()

    def reset(self) -> None:
        self.phase = "approach"
        self.timer = 0
        self.yaw = None

    def _grasp_yaw(self, handle_yaw: float, current: np.ndarray) -> float:
        # Fingers close along the site's y axis; with DOWN at yaw psi the site x
        # axis is (-cos psi, -sin psi): aligning it with the handle keeps the
        # pads off the handle. The gripper is symmetric, so psi mod pi.
        cur_yaw = np.arctan2(-current[1, 0], -current[0, 0])
        psi = handle_yaw + np.pi * np.round((cur_yaw - handle_yaw) / np.pi)
        return float(psi)

    def __call__(self, obs=None) -> np.ndarray:
        env = self.env
        robot = env.robot
        target = env.expert_target()
        ee, ee_mat = robot.ee_pos, robot.ee_mat
        if self.yaw is None:
            self.yaw = self._grasp_yaw(target["handle_yaw"], ee_mat)
        grasp = target["pos"] + (0.0, 0.0, 0.5 * target["height"])
        above = grasp + (0.0, 0.0, self.approach_height)
        gripper = -1.0

        if self.phase == "approach":
            goal = above
            if np.linalg.norm((ee - above)[:2]) < 0.01 and abs(ee[2] - above[2]) < 0.03:
                self.phase = "descend"
        if self.phase == "descend":
            goal = grasp
            if np.linalg.norm(ee - grasp) < 0.008:
                self.phase = "close"
        if self.phase == "close":
            goal = grasp
            gripper = 1.0
            self.timer += 1
            if self.timer >= self.close_steps:
                self.phase = "lift"
        if self.phase == "lift":
            goal = np.array([grasp[0], grasp[1], self.lift_height])
            gripper = 1.0

        dpos = (goal - ee) / robot.max_translation
        drot = orientation_error(rot_z(self.yaw) @ DOWN, ee_mat) / robot.max_rotation
        action = np.concatenate([np.clip(dpos, -1, 1), np.clip(drot, -1, 1), [gripper]])
        return action.astype(np.float32)
