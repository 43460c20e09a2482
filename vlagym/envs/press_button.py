"""VLA-PressButton-v0: press the button of the named colour, and no other."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from vlagym.envs.base import VLAEnv
from vlagym.envs.expert import ScriptedExpert
from vlagym.envs.objects import COLORS, HIDDEN_RGBA, sample_colors, sample_layout
from vlagym.envs.splits import HELDOUT_COLOR

HELDOUT_BUTTON_COLOR = HELDOUT_COLOR["button"]  # shown on a button only in `unseen_combo`
N_BUTTONS = 4
BASE_RADIUS, BASE_HEIGHT = 0.035, 0.03  # the fixed housing each button sits on
CAP_RADIUS, CAP_HALF = 0.022, 0.01  # the coloured cap that moves
CAP_REST_TOP = BASE_HEIGHT + 0.018  # height of the cap's top face when released
TRAVEL = 0.012  # how far the cap can be pushed down
PRESSED_DEPTH = 0.6 * TRAVEL  # a button counts as pressed beyond this depth
STIFFNESS, SPRING_PRELOAD = 150.0, 0.01  # N/m; spring rest this far above the top stop, so caps sit up firmly
WORKSPACE = ((-0.12, 0.08), (-0.18, 0.18))  # x and y ranges of button centres
SPACING = 0.1  # between button centres
BUTTONS = {"train": (2, 3), "distractors": (4, 4)}  # buttons per episode
PARK = np.array([1.5, 1.5, -0.7])  # unused buttons stand on the floor, out of view
BASE_RGBA = (0.3, 0.3, 0.33, 1.0)
UPRIGHT = np.array([1.0, 0.0, 0.0, 0.0])  # caps never turn


def button_xml(i: int) -> str:
    """A housing (fixed body, moved per episode) with a spring-loaded cap on a vertical slide.

    The cap sinks into the housing as it is pressed; their collision bits make
    them ignore each other (MuJoCo's parent-child filter does not apply to a
    body welded to the world) while both still collide with the fingers and
    with free objects.
    """
    name = f"button{i}"
    cap_z = CAP_REST_TOP - BASE_HEIGHT - CAP_HALF  # cap centre above the cap body's origin
    return f"""
    <body name="{name}" pos="{PARK[0]} {PARK[1] + 0.2 * i} {PARK[2]}">
      <geom name="{name}_base" type="cylinder" size="{BASE_RADIUS} {BASE_HEIGHT / 2}" pos="0 0 {BASE_HEIGHT / 2}"
            rgba="{" ".join(map(str, BASE_RGBA))}" class="object" contype="1" conaffinity="2"/>
      <geom name="{name}_ring" type="cylinder" size="{CAP_RADIUS + 0.005} 0.0006" pos="0 0 {BASE_HEIGHT + 0.0006}"
            rgba="0.92 0.92 0.9 1" class="visual"/>
      <body name="{name}_cap" pos="0 0 {BASE_HEIGHT}">
        <joint name="{name}" type="slide" axis="0 0 1" range="{-TRAVEL} 0" stiffness="{STIFFNESS}"
               springref="{SPRING_PRELOAD}" damping="0.5" armature="0.001" solreflimit="0.004 1"/>
        <geom name="{name}_cap" type="cylinder" size="{CAP_RADIUS} {CAP_HALF}" pos="0 0 {cap_z}"
              mass="0.02" class="object" contype="1" conaffinity="0"/>
      </body>
    </body>"""


class PressButtonEnv(VLAEnv):
    """Press the button of the named colour.

    Task:
        Two or three buttons with caps of distinct colours stand on the table;
        the instruction names one. Press it down, without pressing any other
        button on the way.

    Randomisations:
        Number of buttons (2-3), their colours (distinct; never
        `HELDOUT_BUTTON_COLOR` outside `unseen_combo`, where the target gets
        it), positions (x in [-0.12, 0.08], y in [-0.18, 0.18], at least 10 cm
        apart), which button is the target, the instruction template, the arm's
        start posture, lighting and camera poses (`vlagym.envs.splits`). Split
        `distractors`: four buttons.

    Success:
        The named button's cap is pushed down beyond 60% of its 1.2 cm travel,
        and no other button has been pushed that far at any time in the
        episode (`wrong_button_pressed` latches).

    Instructions:
        "press the {color} button" and paraphrases; the `heldout` split uses a
        disjoint set of wordings.
    """

    description = "Press the button of the named colour among two or three, without pressing another."
    family = "articulated"
    distractor_counts: ClassVar[dict[str, tuple[int, int]]] = {
        split: (lo - 1, hi - 1) for split, (lo, hi) in BUTTONS.items()
    }
    templates: ClassVar[dict[str, tuple[str, ...]]] = {
        "train": (
            "press the {color} button",
            "push the {color} button down",
            "press down on the {color} button",
            "hit the {color} button",
            "push down the {color} button",
        ),
        "heldout": (
            "could you press the {color} one of the buttons?",
            "give the {color} button a firm push",
            "I want the {color} button pressed",
        ),
    }
    default_reward_weights: ClassVar[dict[str, float]] = {"reach": 0.3, "press": 0.7}

    # ------------------------------------------------------------------ scene
    def _objects_xml(self) -> str:
        return "\n".join(button_xml(i) for i in range(N_BUTTONS))

    def _setup_task(self) -> None:
        m = self.model
        self.button_bodies = np.array([m.body(f"button{i}").id for i in range(N_BUTTONS)])
        self.cap_geoms = np.array([m.geom(f"button{i}_cap").id for i in range(N_BUTTONS)])
        # Every geom of each button (housing, ring, cap), with its colours from the MJCF: unused buttons are hidden.
        caps = [m.body(f"button{i}_cap").id for i in range(N_BUTTONS)]
        self.button_geoms = [
            np.flatnonzero(np.isin(m.geom_bodyid, (self.button_bodies[i], caps[i]))) for i in range(N_BUTTONS)
        ]
        self.button_rgba = [m.geom_rgba[g].copy() for g in self.button_geoms]
        self.button_qpos = np.array([m.jnt_qposadr[m.joint(f"button{i}").id] for i in range(N_BUTTONS)])
        self.n_buttons, self.target_index = 0, 0
        self.present_qpos = self.button_qpos[:0]
        self.rest_tops = np.zeros((N_BUTTONS, 3))
        self.pressed_goal = np.zeros(3)
        self.colors: list[str] = []
        self.wrong_pressed = False

    # ------------------------------------------------------------------ reset
    def _initialize_episode(self, rng: np.random.Generator) -> None:
        lo, hi = BUTTONS["distractors" if self.split == "distractors" else "train"]
        n = int(rng.integers(lo, hi + 1))
        target = int(rng.integers(n))
        self.colors = sample_colors(rng, ["button"] * n, self.split == "unseen_combo", target)
        xy, _ = sample_layout(rng, n, WORKSPACE, SPACING)
        for i, body in enumerate(self.button_bodies):
            if i < n:
                self.model.body_pos[body] = (xy[i, 0], xy[i, 1], 0.0)
                self.model.geom_rgba[self.button_geoms[i]] = self.button_rgba[i]
                self.model.geom_rgba[self.cap_geoms[i]] = COLORS[self.colors[i]]
            else:
                self.model.body_pos[body] = PARK + (0.0, 0.2 * i, 0.0)
                self.model.geom_rgba[self.button_geoms[i]] = HIDDEN_RGBA  # out of view, and not drawn
        self.n_buttons, self.target_index = n, target
        self.present_qpos = self.button_qpos[:n].copy()
        self.wrong_pressed = False
        # Cap tops at rest, and the target's pressed height: fixed for the episode.
        self.rest_tops = self.model.body_pos[self.button_bodies] + (0.0, 0.0, CAP_REST_TOP)
        self.pressed_goal = self.rest_tops[target] - (0.0, 0.0, PRESSED_DEPTH)

    def instruction_fields(self) -> dict[str, str]:
        return {"color": self.colors[self.target_index]}

    # ------------------------------------------------------------------ observations
    def depths(self) -> np.ndarray:
        """How far each present button's cap is pushed down (metres, >= 0)."""
        return np.maximum(-self.data.qpos[self.present_qpos], 0.0)

    def cap_top(self, i: int) -> np.ndarray:
        """Centre of button `i`'s cap top face, from its housing position and slide joint."""
        top = self.rest_tops[i].copy()
        top[2] += self.data.qpos[self.button_qpos[i]]
        return top

    def num_distractors(self) -> int:
        return len(self.colors) - 1  # the other buttons

    def target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        return self.cap_top(self.target_index), UPRIGHT

    def goal_position(self) -> np.ndarray:
        """Where the target cap's top face counts as pressed."""
        return self.pressed_goal

    def task_scalars(self) -> np.ndarray:
        depths = self.depths()
        target = float(depths[self.target_index])
        depths[self.target_index] = 0.0  # the deepest of the others
        return np.array((target / TRAVEL, float(depths.max(initial=0.0)) / TRAVEL, float(self.wrong_pressed), 0.0))

    # ------------------------------------------------------------------ success and reward
    def evaluate(self) -> dict[str, Any]:
        depths = self.depths()
        pressed = depths > PRESSED_DEPTH
        target_pressed = bool(pressed[self.target_index])
        self.wrong_pressed |= bool(pressed.sum() > target_pressed)  # any button but the target
        # Fingertips (3 cm below the grasp site) on the cap's top face.
        touch = self.cap_top(self.target_index)
        touch[2] += PressExpert.fingertip
        return {
            "success": target_pressed and not self.wrong_pressed,
            "target_pressed": target_pressed,
            "wrong_button_pressed": self.wrong_pressed,
            "target_depth": float(depths[self.target_index]),
            "reach_distance": math.dist(self.data.site_xpos[self.robot.ee_site], touch),
        }

    def reward_terms(self, evaluation: dict[str, Any]) -> dict[str, float]:
        fair = 0.0 if evaluation["wrong_button_pressed"] else 1.0
        return {
            "reach": fair * (1.0 - math.tanh(10.0 * evaluation["reach_distance"])),
            "press": fair * min(max(evaluation["target_depth"] / PRESSED_DEPTH, 0.0), 1.0),
        }

    # ------------------------------------------------------------------ expert support
    def expert_target(self) -> dict[str, Any]:
        """Privileged facts the scripted expert acts on: the target cap's top face and its rest height."""
        return {"pos": self.cap_top(self.target_index), "rest": self.goal_position()[2] + PRESSED_DEPTH}


class PressExpert(ScriptedExpert):
    """Close the gripper, line up above the named button, push straight down and hold it there."""

    first_phase = "approach"
    fingertip = 0.03  # the closed fingertips are this far below the grasp site
    hover = 0.07  # fingertips this far above the cap while lining up
    overpress = 0.004  # aim this far beyond the end of travel, so the stop, not the aim, sets the depth

    def act(self) -> np.ndarray:
        target = self.env.expert_target()
        if self.yaw is None:
            self.yaw = self.grasp_yaw(0.0, None)
        top, rest = target["pos"], target["rest"]
        above = np.array([top[0], top[1], rest + self.fingertip + self.hover])
        if self.phase == "approach":
            if not self.near(above, 0.006, 0.02):
                return self.servo(above, self.yaw, 1.0)
            self.go("press")
        down = above - (0.0, 0.0, self.hover + TRAVEL + self.overpress)
        return self.servo(down, self.yaw, 1.0, speed=0.4)


PressButtonEnv.expert_cls = PressExpert
