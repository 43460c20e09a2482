"""The base environment: MJCF loading, substeps, rendering, seeding and the order of a step.

A task subclasses `VLAEnv` once and fills in its hooks (see "Task hooks" below);
everything else — spaces, observation modes, action checking, instability
handling, rewards from named terms, `info` — lives here so that every task
behaves the same way.
"""

from __future__ import annotations

import logging
import math
import sys
from importlib import resources
from typing import Any, ClassVar

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from vlagym.envs.checks import (
    INSTRUCTION_CHARSET,
    INSTRUCTION_MAX_LENGTH,
    as_hw,
    check_cameras,
    check_instruction,
    check_xy,
    choice_error,
    unknown_kwarg_error,
)
from vlagym.envs.constants import CAMERAS, INSTRUCTION_SPLITS, OBS_MODES, RENDER_MODES, REWARD_MODES
from vlagym.envs.objects import FreeObject
from vlagym.envs.rendering import make_renderer
from vlagym.envs.robot import FINGER_OPEN, HOME_QPOS, Robot
from vlagym.envs.spaces import InstructionSpace
from vlagym.envs.splits import SPLITS, VisualRandomizer
from vlagym.headless import has_display

logger = logging.getLogger(__name__)
mujoco_logger = logging.getLogger("vlagym.mujoco")

# MuJoCo prints its warnings (e.g. "Nan, Inf or huge value in QACC") to stdout by
# default; route them to logging unless the application installed its own handler.
if mujoco.get_mju_user_warning() is None:
    mujoco.set_mju_user_warning(lambda msg: mujoco_logger.warning("MuJoCo: %s", msg.strip()))

MAX_OBJECTS = 5
N_TASK_SCALARS = 4
TASK_STATE_DIM = 3 + 4 + 3 + 3 + 3 + N_TASK_SCALARS + 8 * MAX_OBJECTS
RELATIVE_AT = 10  # where target minus grasp site (3), then goal minus target (3), start in the task state
TASK_SCALARS_AT = 16  # where `task_scalars` start in the task state
# where object slot i (position 3, quaternion 4, present flag 1) starts in `VLAEnv._task_state`
TASK_STATE_SLOTS = TASK_SCALARS_AT + N_TASK_SCALARS + 8 * np.arange(MAX_OBJECTS)
PHYSICS_TIMESTEP = 0.002
TABLE_HEIGHT = 0.0  # the table top is the plane z = 0

# The divergence warnings, consecutive in mjtWarning: a slice of the counters is a live view.
_BAD_WARNINGS = slice(mujoco.mjtWarning.mjWARN_BADQPOS, mujoco.mjtWarning.mjWARN_BADQACC + 1)


def load_scene(objects_xml: str) -> mujoco.MjModel:
    """Compile the shared tabletop scene with a task's objects inserted into the worldbody."""
    assets = resources.files("vlagym") / "assets"
    scene = (assets / "scene.xml").read_text()
    marker = "<!-- task objects -->"
    if marker not in scene:  # pragma: no cover - guards against an edited asset
        raise RuntimeError(f"scene.xml lost its {marker!r} marker")
    xml = scene.replace(marker, objects_xml)
    return mujoco.MjModel.from_xml_string(xml, assets={"robot.xml": (assets / "robot.xml").read_bytes()})


class VLAEnv(gym.Env):
    """A tabletop manipulation task for a 7-DoF arm with a language instruction.

    Keyword arguments (every task accepts these):
        obs_mode: "state" (flat privileged vector), "rgb" (images, proprio,
            instruction) or "rgb+state" (rgb plus the privileged vector).
        control_mode: "ee_delta_pose" (default) or "joint_delta_pos".
        render_mode: None, "rgb_array" or "human".
        image_size: int or (height, width) of every camera image.
        cameras: camera names for the "images" observation.
        reward_mode: "dense" (weighted named terms in [0, 1]) or "sparse".
        reward_weights: override the task's default term weights (non-negative).
        split: generalization split (see `vlagym.envs.splits`): "train" (default),
            "heldout_paraphrase", "unseen_combo", "distractors", "lighting" or "camera".
        instruction_split: "train" or "heldout" paraphrase templates; by default
            "heldout" under split="heldout_paraphrase" and "train" otherwise.
        control_freq: control steps per simulated second (physics runs at 500 Hz).
        terminate_on_success: end the episode (`terminated`) on success.
        render_size: (height, width) of `render()` frames.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": list(RENDER_MODES), "render_fps": 20}

    # ------------------------------------------------------------------ task hooks
    #: one-line description for `vlagym list`
    description: ClassVar[str] = ""
    #: instruction templates per split; formatted with `self.instruction_fields()`
    templates: ClassVar[dict[str, tuple[str, ...]]] = {"train": (), "heldout": ()}
    #: default weights of the dense reward terms (must sum to 1)
    default_reward_weights: ClassVar[dict[str, float]] = {}
    #: the class of the scripted expert for this task
    expert_cls: ClassVar[type | None] = None

    def _objects_xml(self) -> str:
        """MJCF bodies this task adds to the worldbody."""
        raise NotImplementedError

    def _setup_task(self) -> None:
        """Resolve the task's MuJoCo names to ids (called once, after the model is built)."""

    def _initialize_episode(self, rng: np.random.Generator) -> None:
        """Randomise the scene for a new episode (data is reset, the arm placed)."""
        raise NotImplementedError

    @classmethod
    def subtask_spans(cls, state: np.ndarray) -> list[tuple[int, int, str | None]]:
        """An episode's stages from its privileged `state` rows (T, proprio + task state): (start, stop,
        sub-instruction its steps are labelled under, or None for the episode's own). One stage, unless the task
        names sub-instructions (`vlagym dataset split-subtasks`)."""
        return [(0, len(state), None)]

    def instruction_fields(self) -> dict[str, str]:
        """Values that fill this episode's instruction template (e.g. {"color": "red"})."""
        raise NotImplementedError

    def target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """Position and quaternion of what the instruction is about (an object, a handle, a button)."""
        raise NotImplementedError

    def goal_position(self) -> np.ndarray:
        """Where the target should end up (a plate, a zone, ...); the target's own position if none."""
        return self.target_pose()[0]

    def swap_candidates(self) -> list[FreeObject] | None:
        """Objects of this episode's scene the instruction could name instead of the target (language controls);
        None where the task does not support swapping the target."""
        return None

    def _move_target(self, xy: tuple[float, float]) -> None:
        """Move the target to `xy` on the table (`reset(options={"target_xy": ...})`); ValueError where the task
        cannot or the layout is not one the task could draw."""
        raise ValueError(f"{type(self).__name__} does not support options={{'target_xy': ...}}")

    def num_distractors(self) -> int:
        """Movable objects in the scene besides the target (what the `distractors` split raises)."""
        target = getattr(self, "target", None)
        return sum(o.present and o is not target for o in self.objects)

    def task_scalars(self) -> np.ndarray:
        """Up to `N_TASK_SCALARS` task-specific numbers for the state (drawer opening, ...)."""
        return np.zeros(N_TASK_SCALARS)

    def evaluate(self) -> dict[str, Any]:
        """Named predicates of the current state; must contain "success" (bool)."""
        raise NotImplementedError

    def reward_terms(self, evaluation: dict[str, Any]) -> dict[str, float]:
        """Named dense reward terms, each in [0, 1]."""
        raise NotImplementedError

    # ------------------------------------------------------------------ construction
    def __init__(
        self,
        obs_mode: str = "state",
        control_mode: str = "ee_delta_pose",
        render_mode: str | None = None,
        image_size: int | tuple[int, int] = 128,
        cameras: tuple[str, ...] | list[str] = ("front", "wrist"),
        reward_mode: str = "dense",
        reward_weights: dict[str, float] | None = None,
        split: str = "train",
        instruction_split: str | None = None,
        control_freq: int = 20,
        terminate_on_success: bool = True,
        render_size: tuple[int, int] | list[int] = (256, 256),
        **unknown: Any,
    ):
        if unknown:
            raise unknown_kwarg_error(type(self), next(iter(unknown)))
        if obs_mode not in OBS_MODES:
            raise choice_error("obs_mode", obs_mode, OBS_MODES)
        if reward_mode not in REWARD_MODES:
            raise choice_error("reward_mode", reward_mode, REWARD_MODES)
        if split not in SPLITS:
            raise choice_error("split", split, SPLITS)
        implied = "heldout" if split == "heldout_paraphrase" else "train"
        if instruction_split is None:
            instruction_split = implied
        elif instruction_split not in INSTRUCTION_SPLITS:
            raise choice_error("instruction_split", instruction_split, INSTRUCTION_SPLITS)
        elif split == "heldout_paraphrase" and instruction_split != "heldout":
            raise ValueError("split='heldout_paraphrase' uses the heldout templates; drop instruction_split='train'")
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise choice_error("render_mode", render_mode, RENDER_MODES)
        if render_mode == "human" and sys.platform.startswith("linux") and not has_display():
            # MuJoCo's viewer aborts the whole process when GLFW finds no display.
            raise RuntimeError(
                "render_mode='human' needs a display (DISPLAY or WAYLAND_DISPLAY is unset); "
                "use render_mode='rgb_array' on headless machines"
            )
        cameras = check_cameras(cameras)
        self.image_size = as_hw(image_size, "image_size")
        self.render_size = as_hw(render_size, "render_size")
        physics_hz = round(1 / PHYSICS_TIMESTEP)
        if not isinstance(control_freq, int) or control_freq <= 0 or physics_hz % control_freq:
            raise ValueError(f"control_freq must be a positive integer dividing {physics_hz} Hz, got {control_freq!r}")
        self.obs_mode = obs_mode
        self.render_mode = render_mode
        self.cameras = cameras
        self.reward_mode = reward_mode
        self.split = split
        self.instruction_split = instruction_split
        self.control_freq = control_freq
        self.terminate_on_success = bool(terminate_on_success)
        self.reward_weights = self._check_reward_weights(reward_weights)
        self.metadata = {**self.metadata, "render_fps": control_freq}

        self.model = load_scene(self._objects_xml())
        self.model.opt.timestep = PHYSICS_TIMESTEP
        self.data = mujoco.MjData(self.model)
        self.n_substeps = round(1 / (PHYSICS_TIMESTEP * control_freq))
        self.robot = Robot(self.model, self.data, control_mode=control_mode)
        self.table_geom = self.model.geom("table").id
        self.visuals = VisualRandomizer(self.model)
        #: free objects of the scene, in slot order (tasks fill this in `_setup_task`)
        self.objects: list[FreeObject] = []
        self._setup_task()
        if len(self.objects) > MAX_OBJECTS:
            raise RuntimeError(f"{type(self).__name__} has {len(self.objects)} objects; the state holds {MAX_OBJECTS}")

        self.action_space = spaces.Box(-1.0, 1.0, (self.robot.action_dim,), np.float32)
        self.observation_space = self._make_observation_space()
        self._obs_renderer: mujoco.Renderer | None = None
        self._render_renderer: mujoco.Renderer | None = None
        self._viewer = None
        self.instruction = ""
        self._sim_unstable = False
        # A live view of the divergence warnings' counters, read after every step (cleared by mj_resetData).
        self._bad_warning_counts = self.data.warning.number[_BAD_WARNINGS]
        self._pads = tuple(self.robot.pad_geoms.tolist())
        self._geom_body = self.model.geom_bodyid.tolist()
        self._slots: tuple[tuple[bool, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None

    @classmethod
    def _check_reward_weights(cls, weights: dict[str, float] | None) -> dict[str, float]:
        merged = dict(cls.default_reward_weights)
        for key, value in (weights or {}).items():
            if key not in merged:
                raise choice_error("reward term", key, tuple(merged))
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"reward weight {key!r} must be a finite non-negative number, got {value!r}")
            merged[key] = float(value)
        total = sum(merged.values())
        if total <= 0:
            raise ValueError(f"reward weights must not all be zero: {merged}")
        # Normalised so the dense reward stays in [0, 1] whatever the user passes.
        return {k: v / total for k, v in merged.items()}

    def _make_observation_space(self) -> spaces.Space:
        state_dim = Robot.PROPRIO_DIM + TASK_STATE_DIM
        state = spaces.Box(-np.inf, np.inf, (state_dim,), np.float32)
        if self.obs_mode == "state":
            return state
        h, w = self.image_size
        obs = {
            "images": spaces.Dict({c: spaces.Box(0, 255, (h, w, 3), np.uint8) for c in self.cameras}),
            "proprio": spaces.Box(-np.inf, np.inf, (Robot.PROPRIO_DIM,), np.float32),
            "instruction": InstructionSpace(
                # min_length 0: the empty-instruction control (`reset(options={"instruction": ""})`)
                INSTRUCTION_MAX_LENGTH,
                min_length=0,
                charset=INSTRUCTION_CHARSET,
            ),
        }
        if self.obs_mode == "rgb+state":
            obs["state"] = state
        return spaces.Dict(obs)

    # ------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode; `seed` fixes it entirely.

        `options` (none draws from the generator, so the rest of the episode stays the seed's):
            "swap_target": True makes the first of `swap_candidates()` the target, so the instruction names
                it and success counts for it; `ValueError` where the task or the scene has no such object.
            "instruction": a string shown instead of the drawn instruction ("" for an empty one); the target
                and success are unchanged.
            "target_xy": (x, y) in metres moves the target there on the table, keeping its heading and colour
                (hindsight relabelling: the scene in which a trajectory would have reached the target);
                `ValueError` where the task cannot move its target, or where the task could not have drawn
                that layout (outside the workspace, or too close to another object).
        """
        super().reset(seed=seed)
        options = options or {}
        mujoco.mj_resetData(self.model, self.data)
        rng = self.np_random
        home = HOME_QPOS + rng.uniform(-0.03, 0.03, size=7)
        self.robot.reset(home)
        self._initialize_episode(rng)
        if options.get("swap_target"):
            self._swap_target()
        if "target_xy" in options:
            self._move_target(check_xy(options["target_xy"]))
        templates = self.templates[self.instruction_split]
        template = templates[rng.integers(len(templates))]
        self.instruction = template.format(**self.instruction_fields())
        if "instruction" in options:
            self.instruction = check_instruction(options["instruction"])
        self.visuals.apply(rng, self.split)  # last, so layouts match across visual splits
        mujoco.mj_forward(self.model, self.data)
        self._sim_unstable = False
        evaluation = self.evaluate()
        info = self._info(evaluation, self.reward_terms(evaluation))
        return self._get_obs(), info

    def step(self, action):
        action = self._check_action(action)
        self.robot.apply_action(action)
        mujoco.mj_step(self.model, self.data, nstep=self.n_substeps)
        unstable = self._check_unstable()
        evaluation = self.evaluate()
        terms = self.reward_terms(evaluation)
        success = bool(evaluation["success"]) and not unstable
        if self.reward_mode == "sparse":
            reward = float(success)
        else:
            reward = float(sum(self.reward_weights[k] * v for k, v in terms.items()))
        terminated = success and self.terminate_on_success
        info = self._info(evaluation, terms)
        # After a divergence MuJoCo has reset the state (a drawer is closed again,
        # say): nothing evaluated on it may count as success.
        info["success"] = info["is_success"] = success
        info["sim_unstable"] = unstable
        if self.render_mode == "human":
            self.render()
        return self._get_obs(), reward, terminated, unstable, info

    def _swap_target(self) -> None:
        candidates = self.swap_candidates()
        if candidates is None:
            raise ValueError(f"{type(self).__name__} does not support options={{'swap_target': True}}")
        if not candidates:
            raise ValueError(
                f"{type(self).__name__}: this scene holds no other object the instruction could name "
                "(e.g. VLA-PickCup-v0 with num_cups=3 always does)"
            )
        self.target = candidates[0]

    def _check_action(self, action) -> np.ndarray:
        a = np.asarray(action, dtype=np.float64)
        if a.shape != self.action_space.shape:
            raise ValueError(
                f"action must have shape {self.action_space.shape} in control_mode "
                f"{self.robot.control_mode!r}, got {a.shape}"
            )
        # One cheap test per step: the sum of squares is finite unless an entry is not (or it overflows).
        if not math.isfinite(a.dot(a)) and not np.isfinite(a).all():
            bad = ~np.isfinite(a)
            idx = np.flatnonzero(bad).tolist()
            raise ValueError(f"action has non-finite entries at indices {idx}: {a[bad].tolist()}")
        return np.minimum(np.maximum(a, -1.0), 1.0)

    def _check_unstable(self) -> bool:
        """True when MuJoCo flagged a divergence during the last substeps.

        MuJoCo resets `data` itself when it detects bad accelerations; we end
        the episode (`truncated`, `info["sim_unstable"]`) rather than continue
        from that silent reset. The warning counters are cleared by the next reset.
        """
        if any(self._bad_warning_counts.tolist()):
            if not self._sim_unstable:
                logger.warning("simulation became unstable in %s; ending the episode", type(self).__name__)
            self._sim_unstable = True
        return self._sim_unstable

    def _info(self, evaluation: dict[str, Any], terms: dict[str, float]) -> dict[str, Any]:
        info = {k: (bool(v) if isinstance(v, (bool, np.bool_)) else v) for k, v in evaluation.items()}
        info["success"] = info["is_success"] = bool(evaluation["success"])
        info["instruction"] = self.instruction
        info["sim_unstable"] = self._sim_unstable
        for k, v in terms.items():
            info[f"reward_{k}"] = float(v)
        return info

    # ------------------------------------------------------------------ observations
    def state_vector(self) -> np.ndarray:
        out = np.empty(Robot.PROPRIO_DIM + TASK_STATE_DIM, np.float32)
        self.robot.proprio(out[: Robot.PROPRIO_DIM])
        self._task_state(out[Robot.PROPRIO_DIM :])
        return out

    def sim_state(self) -> np.ndarray:
        """The simulator's full integration state (`mujoco.mj_getState`, ``mjSTATE_INTEGRATION``), which
        `mujoco.mj_setState` restores exactly: the demos' ``states``."""
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        out = np.empty(mujoco.mj_stateSize(self.model, spec))
        mujoco.mj_getState(self.model, self.data, out, spec)
        return out

    def _task_state(self, out: np.ndarray | None = None) -> np.ndarray:
        """The same layout on every task, so one policy (or critic) reads them all:
        target position (3) and quaternion (4), goal position (3), target minus
        grasp site (3), goal minus target (3), task scalars (4), then per object
        slot: position (3), quaternion (4), present flag (1). Written into `out` if given."""
        if out is None:
            out = np.empty(TASK_STATE_DIM)
        pos, quat = self.target_pose()
        goal = self.goal_position()
        out[0:3], out[3:7], out[7:10] = pos, quat, goal
        np.subtract(pos, self.data.site_xpos[self.robot.ee_site], out=out[RELATIVE_AT : RELATIVE_AT + 3])
        np.subtract(goal, pos, out=out[RELATIVE_AT + 3 : TASK_SCALARS_AT])
        scalars = self.task_scalars()
        tail, sources, targets = self._object_slots()
        out[TASK_SCALARS_AT:] = tail
        out[TASK_SCALARS_AT : TASK_SCALARS_AT + len(scalars)] = scalars
        out[targets] = self.data.qpos[sources]
        return out

    def _object_slots(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For the objects present now: the state's tail after the fixed fields (zeros, 1 at each present flag),
        and the qpos indices of their poses with the task-state indices they go to. Made once per scene."""
        present = tuple(obj.present for obj in self.objects)
        if self._slots is None or self._slots[0] != present:
            tail = np.zeros(TASK_STATE_DIM - 16)
            sources, targets = [], []
            for i, obj in enumerate(self.objects):
                if obj.present:
                    start = int(TASK_STATE_SLOTS[i])
                    tail[start + 7 - 16] = 1.0
                    sources += range(obj.qpos_adr, obj.qpos_adr + 7)
                    targets += range(start, start + 7)
            self._slots = (present, (tail, np.array(sources, int), np.array(targets, int)))
        return self._slots[1]

    def _get_obs(self):
        if self.obs_mode == "state":
            return self.state_vector()
        obs = {
            "images": {cam: self._render_camera(cam) for cam in self.cameras},
            "proprio": self.robot.proprio().astype(np.float32),
            "instruction": self.instruction,
        }
        if self.obs_mode == "rgb+state":
            obs["state"] = self.state_vector()
        return obs

    def _render_camera(self, camera: str) -> np.ndarray:
        if self._obs_renderer is None:
            self._obs_renderer = make_renderer(self, *self.image_size)
        self._obs_renderer.update_scene(self.data, camera=camera)
        return self._obs_renderer.render()

    # ------------------------------------------------------------------ rendering
    def render(self):
        if self.render_mode == "rgb_array":
            if self._render_renderer is None:
                self._render_renderer = make_renderer(self, *self.render_size)
            self._render_renderer.update_scene(self.data, camera="front")
            return self._render_renderer.render()
        if self.render_mode == "human":
            if self._viewer is None:
                from mujoco import viewer  # needs a display; imported only when asked for

                self._viewer = viewer.launch_passive(self.model, self.data)
            self._viewer.sync()
            return None
        return None

    def close(self):
        for attr in ("_obs_renderer", "_render_renderer", "_viewer"):
            obj = getattr(self, attr, None)
            if obj is not None:
                obj.close()
                setattr(self, attr, None)

    # ------------------------------------------------------------------ helpers for tasks
    def pad_contacts(self) -> tuple[set[int], set[int]]:
        """Ids of the bodies touching the left and the right finger pad.

        One pass over the active contacts' geom pairs as Python ints (a few dozen at most: cheaper than NumPy
        masks); tasks call it once per `evaluate()` and test membership.
        """
        left, right = set(), set()
        ncon = self.data.ncon
        if ncon == 0:
            return left, right
        pad_left, pad_right = self._pads
        body = self._geom_body
        for g0, g1 in self.data.contact.geom[:ncon].tolist():
            if g0 == pad_left or g0 == pad_right:
                (left if g0 == pad_left else right).add(body[g1])
            if g1 == pad_left or g1 == pad_right:
                (left if g1 == pad_left else right).add(body[g0])
        return left, right


__all__ = ["VLAEnv", "OBS_MODES", "CAMERAS", "FINGER_OPEN", "TABLE_HEIGHT", "load_scene"]
