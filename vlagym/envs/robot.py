"""The arm, its gripper and its controllers.

The robot is an object the environment holds (not a base class): it resolves
its MuJoCo names to ids once, turns a 7-D policy action into actuator targets,
and reads proprioception. All per-step work is a handful of NumPy calls on
preallocated arrays, because this runs at every control step of every rollout.
"""

from __future__ import annotations

import mujoco
import numpy as np

ARM_JOINTS = tuple(f"joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("finger_left", "finger_right")
EE_SITE = "grasp_site"
PROPRIO_EE_POS = slice(14, 17)  # the grasp site's position within `Robot.proprio()`

# Joint configuration with the gripper 25 cm above the table, pointing down,
# fingers closing along world y. Solved once with `Robot.solve_ik`.
HOME_QPOS = np.array([0.0, 0.2588, 0.0, 2.0486, 0.0, 0.8342, 0.0])

FINGER_OPEN = 0.04  # metres of travel per finger; 8 cm between the pads
CONTROL_MODES = ("ee_delta_pose", "joint_delta_pos")


def _as_slice(indices: list[int], what: str) -> slice:
    """The consecutive ids as a slice: a slice of a MuJoCo array is a live view, made once and read at every
    step without indexing again. The robot's MJCF declares its joints and actuators in order."""
    first = int(indices[0])
    if list(indices) != list(range(first, first + len(indices))):
        raise ValueError(f"the robot's {what} must have consecutive ids, got {list(indices)}")
    return slice(first, first + len(indices))


def quat_to_mat(quat: np.ndarray) -> np.ndarray:
    mat = np.empty(9)
    mujoco.mju_quat2Mat(mat, quat)
    return mat.reshape(3, 3)


def mat_to_quat(mat: np.ndarray) -> np.ndarray:
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, np.ascontiguousarray(mat, dtype=np.float64).reshape(9))
    return quat


def orientation_error(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Axis-angle vector (world frame) that rotates `current` into `target` (3x3 mats)."""
    err = np.empty(3)
    quat = mat_to_quat(target @ current.T)
    mujoco.mju_quat2Vel(err, quat, 1.0)
    return err


class Robot:
    """A 7-DoF arm with a parallel-jaw gripper and its action interface.

    Action (`ee_delta_pose`): 3 translation + 3 axis-angle rotation deltas in the
    world frame, scaled by `max_translation` / `max_rotation` per control step,
    then the gripper command (-1 open ... +1 closed). Damped least squares on the
    grasp-site Jacobian turns the pose delta into joint targets; a null-space
    term keeps the redundant arm near its home posture.

    Action (`joint_delta_pos`, 8-D): 7 joint deltas scaled by `max_joint_delta`,
    then the gripper command.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        data: mujoco.MjData,
        control_mode: str = "ee_delta_pose",
        max_translation: float = 0.025,
        max_rotation: float = 0.15,
        max_joint_delta: float = 0.08,
        damping: float = 0.05,
        nullspace_gain: float = 0.1,
    ):
        if control_mode not in CONTROL_MODES:
            raise ValueError(f"unknown control_mode {control_mode!r}; choose from {list(CONTROL_MODES)}")
        self.model, self.data = model, data
        self.control_mode = control_mode
        self.max_translation = max_translation
        self.max_rotation = max_rotation
        self.max_joint_delta = max_joint_delta
        self.action_dim = 7 if control_mode == "ee_delta_pose" else 8
        self.damping = damping
        self.nullspace_gain = nullspace_gain

        jid = [model.joint(n).id for n in ARM_JOINTS]
        self.arm_qpos_adr = _as_slice([model.jnt_qposadr[j] for j in jid], "arm joints' qpos")
        self.arm_dof_adr = _as_slice([model.jnt_dofadr[j] for j in jid], "arm joints' dofs")
        self.arm_range = model.jnt_range[jid].copy()
        fid = [model.joint(n).id for n in FINGER_JOINTS]
        self.finger_qpos_adr = _as_slice([model.jnt_qposadr[j] for j in fid], "finger joints' qpos")
        self.finger_dof_adr = _as_slice([model.jnt_dofadr[j] for j in fid], "finger joints' dofs")
        self.arm_act = _as_slice([model.actuator(n).id for n in ARM_JOINTS], "arm actuators")
        self.finger_act = _as_slice([model.actuator(n).id for n in FINGER_JOINTS], "finger actuators")
        model.actuator_ctrlrange[self.arm_act] = self.arm_range
        model.actuator_ctrllimited[self.arm_act] = 1
        self.ee_site = model.site(EE_SITE).id
        self.pad_geoms = np.array([model.geom(n).id for n in ("finger_left_pad", "finger_right_pad")])
        self.hand_body = model.body("hand").id

        # Live views into `data`, made once: the per-step reads below index nothing.
        self._arm_q, self._arm_qd = data.qpos[self.arm_qpos_adr], data.qvel[self.arm_dof_adr]
        self._finger_q = data.qpos[self.finger_qpos_adr]
        self._ee_xpos, self._ee_xmat = data.site_xpos[self.ee_site], data.site_xmat[self.ee_site]
        self._arm_ctrl, self._finger_ctrl = data.ctrl[self.arm_act], data.ctrl[self.finger_act]

        self._jac = np.zeros((6, model.nv))  # rows 0-2 translation, 3-5 rotation
        self._jacp, self._jacr = self._jac[:3], self._jac[3:]
        self._jac_arm = np.zeros((6, 7))
        self._jjt = np.zeros((6, 6))
        self._damping_eye = damping**2 * np.eye(6)
        self._v, self._task, self._null = np.zeros(7), np.zeros(6), np.zeros(6)
        self._pose_scale = np.array([max_translation] * 3 + [max_rotation] * 3)
        self._quat = np.zeros(4)

    # ------------------------------------------------------------------ state
    @property
    def qpos(self) -> np.ndarray:
        return self.data.qpos[self.arm_qpos_adr]

    @property
    def qvel(self) -> np.ndarray:
        return self.data.qvel[self.arm_dof_adr]

    @property
    def ee_pos(self) -> np.ndarray:
        return self.data.site_xpos[self.ee_site].copy()

    @property
    def ee_mat(self) -> np.ndarray:
        return self.data.site_xmat[self.ee_site].reshape(3, 3).copy()

    @property
    def gripper_width(self) -> float:
        """Distance between the finger pads in metres."""
        return float(self.data.qpos[self.finger_qpos_adr].sum())

    def proprio(self, out: np.ndarray | None = None) -> np.ndarray:
        """Joint positions (7), joint velocities (7), grasp-site position (3) and
        quaternion (4), finger positions (2): 23 floats, written into `out` if given."""
        if out is None:
            out = np.empty(self.PROPRIO_DIM)
        out[0:7] = self._arm_q
        out[7:14] = self._arm_qd
        out[PROPRIO_EE_POS] = self._ee_xpos
        mujoco.mju_mat2Quat(self._quat, self._ee_xmat)
        out[17:21] = self._quat
        out[21:23] = self._finger_q
        return out

    PROPRIO_DIM = 23

    # ---------------------------------------------------------------- control
    def reset(self, arm_qpos: np.ndarray) -> None:
        """Place the arm at `arm_qpos` with the gripper open and matching servo targets."""
        d = self.data
        d.qpos[self.arm_qpos_adr] = arm_qpos
        d.qvel[self.arm_dof_adr] = 0.0
        d.qpos[self.finger_qpos_adr] = FINGER_OPEN
        d.ctrl[self.arm_act] = arm_qpos
        d.ctrl[self.finger_act] = FINGER_OPEN

    def apply_action(self, action: np.ndarray) -> None:
        """Set actuator targets from a clipped action (see class docstring)."""
        if self.control_mode == "ee_delta_pose":
            dq = self._ik_delta(action)
        else:
            dq = action[:7] * self.max_joint_delta
        # MuJoCo clamps the targets to the joint ranges (ctrlrange, set in __init__).
        np.add(self._arm_q, dq, out=self._arm_ctrl)
        self._finger_ctrl[:] = FINGER_OPEN * 0.5 * (1.0 - float(action[-1]))

    def _ik_delta(self, action: np.ndarray) -> np.ndarray:
        """Joint deltas for the pose delta in `action[:6]` (normalised; scaled here)."""
        # Damped least squares for the task, plus null-space motion toward home
        # (v - J^T (J J^T + l^2 I)^-1 J v) so the redundant elbow does not drift;
        # both solved with one Cholesky factorisation. Every buffer is
        # preallocated: this runs at every control step.
        jac, jjt, v, task, null = self._jac_arm, self._jjt, self._v, self._task, self._null
        mujoco.mj_jacSite(self.model, self.data, self._jacp, self._jacr, self.ee_site)
        jac[:] = self._jac[:, self.arm_dof_adr]
        np.dot(jac, jac.T, out=jjt)
        jjt += self._damping_eye
        np.subtract(HOME_QPOS, self._arm_q, out=v)
        v *= self.nullspace_gain
        np.multiply(action[:6], self._pose_scale, out=task)
        np.dot(jac, v, out=null)
        mujoco.mju_cholFactor(jjt, 0.0)
        mujoco.mju_cholSolve(task, jjt, task)
        mujoco.mju_cholSolve(null, jjt, null)
        task -= null
        return jac.T @ task + v

    def solve_ik(self, pos: np.ndarray, mat: np.ndarray, iters: int = 200) -> np.ndarray:
        """Arm configuration that puts the grasp site at `pos` with orientation `mat`.

        Kinematic only (uses a scratch MjData); for setting initial states and tests.
        """
        scratch = mujoco.MjData(self.model)
        scratch.qpos[:] = self.data.qpos
        jacp, jacr = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        for _ in range(iters):
            mujoco.mj_kinematics(self.model, scratch)
            mujoco.mj_comPos(self.model, scratch)
            cur_pos = scratch.site_xpos[self.ee_site]
            cur_mat = scratch.site_xmat[self.ee_site].reshape(3, 3)
            err = np.concatenate([pos - cur_pos, orientation_error(mat, cur_mat)])
            if np.linalg.norm(err) < 1e-7:
                break
            mujoco.mj_jacSite(self.model, scratch, jacp, jacr, self.ee_site)
            jac = np.vstack([jacp[:, self.arm_dof_adr], jacr[:, self.arm_dof_adr]])
            dq = jac.T @ np.linalg.solve(jac @ jac.T + 1e-4 * np.eye(6), err)
            q = scratch.qpos[self.arm_qpos_adr] + dq
            scratch.qpos[self.arm_qpos_adr] = np.clip(q, self.arm_range[:, 0], self.arm_range[:, 1])
        return scratch.qpos[self.arm_qpos_adr].copy()
