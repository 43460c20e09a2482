"""VLA-PlaceCupOnPlate-v0 and VLA-PlaceCupInBowl-v0: put the named cup on the plate / in the bowl."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from vlagym.envs.base import VLAEnv
from vlagym.envs.expert import PickPlaceExpert
from vlagym.envs.objects import (
    BOWL_RADIUS,
    OBJECT_XML,
    PLATE_RADIUS,
    FreeObject,
    bowl_xml,
    plate_xml,
    sample_colors,
)

CUP_REGION = ((-0.12, 0.08), (-0.2, 0.2))  # x and y ranges of cup centres
FIXTURE_REGION = ((-0.12, 0.06), (-0.16, 0.16))  # x and y ranges of the plate/bowl centre
FIXTURE_CLEARANCE = 0.15  # between the fixture centre and every cup centre
MIN_SPACING = 0.13  # between cup centres, so open fingers never hit a neighbour
DISTRACTOR_SPACING = 0.12  # the crowded `distractors` split
FIXTURE_TOP = 0.008  # height of the plate's top / the bowl's base above the table
LIFT_HEIGHT = 0.05  # the `lift` reward saturates with the cup bottom this high
REST_TOLERANCE = (-0.005, 0.01)  # cup bottom height range above the fixture top that counts as resting on it
MAX_TILT = np.deg2rad(20.0)  # the cup's axis this close to vertical counts as upright
MAX_REST_SPEED = 0.1  # m/s: a cup still falling onto the fixture does not rest on it yet
SLOTS = (("cup0", "cup"), ("cup1", "cup"), ("cup2", "cup"), ("cup3", "cup"), ("block0", "block"))
DISTRACTORS = {"train": (1, 2), "distractors": (3, 4)}  # other objects besides the target


def sample_scene(
    rng: np.random.Generator, n: int, spacing: float, max_tries: int = 200
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fixture centre (2,), `n` object centres (n, 2) and yaws (n,): objects `spacing` apart and
    `FIXTURE_CLEARANCE` from the fixture. Rejection sampling from `rng` alone; restarts when crowded."""
    (fx0, fx1), (fy0, fy1) = FIXTURE_REGION
    (x0, x1), (y0, y1) = CUP_REGION
    for _ in range(max_tries):
        fixture = rng.uniform((fx0, fy0), (fx1, fy1))
        # Candidates in one draw, accepted greedily in order: the same distribution as drawing
        # them one by one and rejecting, without a Python loop over the rejected ones.
        cand = rng.uniform((x0, y0), (x1, y1), size=(50 * n, 2))
        cand = cand[np.linalg.norm(cand - fixture, axis=1) >= FIXTURE_CLEARANCE]
        free = np.ones(len(cand), bool)
        picks = []
        while len(picks) < n and free.any():
            i = int(np.argmax(free))
            picks.append(i)
            free &= np.linalg.norm(cand - cand[i], axis=1) >= spacing
        if len(picks) == n:
            return fixture, cand[picks], rng.uniform(-np.pi, np.pi, size=n)
    raise RuntimeError(f"could not place a fixture and {n} objects {spacing} m apart")


class PlaceCupEnv(VLAEnv):
    """Shared hooks of the place-a-cup tasks; subclasses name the fixture and its tolerance.

    Not registered itself: `fixture_xml`, `fixture_name`, `goal_radius` and the
    templates come from the concrete task below.
    """

    family = "pick-and-place"
    distractor_counts = DISTRACTORS
    default_reward_weights: ClassVar[dict[str, float]] = {
        "reach": 0.1,
        "grasp": 0.15,
        "lift": 0.15,
        "carry": 0.3,
        "place": 0.3,
    }
    expert_cls = PickPlaceExpert
    fixture_name: ClassVar[str] = ""
    #: success: the cup bottom's centre this close to the fixture centre horizontally
    goal_radius: ClassVar[float] = 0.0

    @staticmethod
    def fixture_xml() -> str:
        raise NotImplementedError

    # ------------------------------------------------------------------ scene
    def _objects_xml(self) -> str:
        return self.fixture_xml() + "\n".join(OBJECT_XML[kind](name, (0, 0, -1)) for name, kind in SLOTS)

    def _setup_task(self) -> None:
        self.objects = [FreeObject(self.model, name, kind, i) for i, (name, kind) in enumerate(SLOTS)]
        self.target = self.objects[0]
        self.fixture = self.model.body(self.fixture_name).id
        self.goal = np.array([0.0, 0.0, FIXTURE_TOP])

    # ------------------------------------------------------------------ reset
    def _initialize_episode(self, rng: np.random.Generator) -> None:
        if self.split == "distractors":
            n_other = int(rng.integers(DISTRACTORS["distractors"][0], DISTRACTORS["distractors"][1] + 1))
            chosen, spacing = self.objects[: n_other + 1], DISTRACTOR_SPACING  # four cups, then the block
        else:
            n_cups = int(rng.integers(2, 4))  # always another cup: the colour word is needed
            chosen, spacing = self.objects[:n_cups], MIN_SPACING
        cups = [o for o in chosen if o.kind == "cup"]
        target_index = int(rng.integers(len(cups)))
        colors = sample_colors(rng, [o.kind for o in chosen], self.split == "unseen_combo", target_index)
        fixture_xy, xy, yaw = sample_scene(rng, len(chosen), spacing)
        for obj in self.objects:
            obj.park(self.model, self.data)
        for i, obj in enumerate(chosen):
            obj.place(self.model, self.data, xy[i, 0], xy[i, 1], yaw[i], colors[i])
        self.model.body_pos[self.fixture] = (fixture_xy[0], fixture_xy[1], 0.0)
        self.goal = np.array([fixture_xy[0], fixture_xy[1], FIXTURE_TOP])
        self.target = cups[target_index]

    def instruction_fields(self) -> dict[str, str]:
        return {"color": self.target.color}

    # ------------------------------------------------------------------ observations
    def target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        return self.target.pos(self.data), self.target.quat(self.data)

    def goal_position(self) -> np.ndarray:
        return self.goal.copy()

    # ------------------------------------------------------------------ success and reward
    def _rests_on_goal(self, obj: FreeObject) -> bool:
        """`obj` stands upright on the fixture, within `goal_radius` of its centre, and no longer falls."""
        pos = obj.pos(self.data)
        qw, qx, qy, qz = obj.quat(self.data)
        up = 1.0 - 2.0 * (qx * qx + qy * qy)  # z component of the object's z axis
        lo, hi = REST_TOLERANCE
        speed = np.linalg.norm(self.data.qvel[obj.dof_adr : obj.dof_adr + 3])
        return bool(
            np.linalg.norm(pos[:2] - self.goal[:2]) < self.goal_radius
            and lo <= pos[2] - self.goal[2] <= hi
            and up >= np.cos(MAX_TILT)
            and speed < MAX_REST_SPEED
        )

    def evaluate(self) -> dict[str, Any]:
        pos = self.target.pos(self.data)
        left, right = self.pad_contacts()
        grasped = self.target.body in (left & right)
        released = self.target.body not in (left | right)
        on_goal = self._rests_on_goal(self.target)
        other = any(self._rests_on_goal(o) for o in self.objects if o.present and o is not self.target)
        ee = self.data.site_xpos[self.robot.ee_site]
        return {
            "success": on_goal and released,
            "grasped": grasped,
            "released": released,
            "on_goal": on_goal,
            "other_on_goal": other,
            "target_height": float(pos[2]),
            "goal_distance": float(np.linalg.norm(pos - self.goal)),
            "goal_horizontal_distance": float(np.linalg.norm(pos[:2] - self.goal[:2])),
            "reach_distance": float(np.linalg.norm(ee - pos - (0.0, 0.0, 0.5 * self.target.height))),
        }

    def reward_terms(self, evaluation: dict[str, Any]) -> dict[str, float]:
        # Later stages keep earlier terms at 1, so releasing the cup on the goal loses nothing.
        on_goal, grasped = evaluation["on_goal"], evaluation["grasped"]
        holding = float(grasped or on_goal)
        over_goal = evaluation["goal_horizontal_distance"] < self.goal_radius
        lift = float(np.clip(evaluation["target_height"] / LIFT_HEIGHT, 0.0, 1.0))
        return {
            "reach": 1.0 if holding else float(1.0 - np.tanh(10.0 * evaluation["reach_distance"])),
            "grasp": holding,
            "lift": 1.0 if on_goal else float(grasped) * max(lift, float(over_goal)),
            "carry": holding * float(1.0 - np.tanh(5.0 * evaluation["goal_distance"])),
            "place": float(on_goal and evaluation["released"]),
        }

    # ------------------------------------------------------------------ expert support
    def expert_target(self) -> dict[str, Any]:
        """Privileged facts the scripted expert acts on (a cup: fingers across it, period pi)."""
        return {
            "pos": self.target.pos(self.data),
            "yaw": self.target.yaw(self.data),
            "yaw_period": np.pi,
            "height": self.target.height,
        }

    def expert_goal(self) -> dict[str, Any]:
        # Let go within half the success radius: a cup released there still settles inside it.
        return {"pos": self.goal.copy(), "tolerance": self.goal_radius / 2}


class PlaceCupOnPlateEnv(PlaceCupEnv):
    """Put the named cup on the plate.

    Task:
        Two or three cups of distinct colours and a plate stand on the table;
        the instruction names one cup. Put that cup upright on the plate.

    Randomisations:
        Number of cups (2-3), their colours (distinct; never a cup's held-out
        colour outside `unseen_combo`), positions (x in [-0.12, 0.08], y in
        [-0.2, 0.2], at least 13 cm apart), yaw (uniform), which cup is the
        target; the plate's position (x in [-0.12, 0.06], y in [-0.16, 0.16],
        at least 15 cm from every cup); the instruction template, the arm's
        start posture (±0.03 rad per joint), lighting and camera poses
        (`vlagym.envs.splits`). Split `distractors`: four cups plus, half the
        time, a block (3-4 distractors, 12 cm apart).

    Success:
        The target cup's bottom centre is within 5.5 cm of the plate centre
        horizontally and at most 1 cm above the plate's top, the cup is within
        20 deg of upright and at rest (< 0.1 m/s), and no finger pad touches it.
        Another cup on the plate is not success.

    Instructions:
        "put the {color} cup on the plate" and paraphrases; the `heldout` split
        uses a disjoint set of wordings.
    """

    description = "Put the cup of the named colour on the plate."
    fixture_name = "plate"
    goal_radius = PLATE_RADIUS - 0.02
    templates: ClassVar[dict[str, tuple[str, ...]]] = {
        "train": (
            "put the {color} cup on the plate",
            "place the {color} cup on the plate",
            "move the {color} cup onto the plate",
            "set the {color} cup down on the plate",
            "pick up the {color} cup and put it on the plate",
        ),
        "heldout": (
            "could you get the {color} mug onto the plate?",
            "the {color} cup goes on the plate",
            "I want the {color} cup sitting on the plate",
            "transfer the {color} cup to the plate",
        ),
    }

    @staticmethod
    def fixture_xml() -> str:
        return plate_xml("plate")


class PlaceCupInBowlEnv(PlaceCupEnv):
    """Put the named cup in the bowl.

    Task:
        Two or three cups of distinct colours and a bowl (4 cm walls) stand on
        the table; the instruction names one cup. Put that cup upright in the bowl.

    Randomisations:
        As `PlaceCupOnPlateEnv`, with the bowl in place of the plate.

    Success:
        The target cup's bottom centre is within 4.5 cm of the bowl centre
        horizontally and rests on the bowl's base (at most 1 cm above it), the
        cup is within 20 deg of upright and at rest (< 0.1 m/s), and no finger
        pad touches it. Another cup in the bowl is not success.

    Instructions:
        "put the {color} cup in the bowl" and paraphrases; the `heldout` split
        uses a disjoint set of wordings.
    """

    description = "Put the cup of the named colour in the bowl."
    fixture_name = "bowl"
    goal_radius = BOWL_RADIUS - 0.03
    templates: ClassVar[dict[str, tuple[str, ...]]] = {
        "train": (
            "put the {color} cup in the bowl",
            "place the {color} cup into the bowl",
            "lower the {color} cup into the bowl",
            "move the {color} cup into the bowl",
            "pick up the {color} cup and put it in the bowl",
        ),
        "heldout": (
            "could you get the {color} mug into the bowl?",
            "the {color} cup goes in the bowl",
            "I want the {color} cup inside the bowl",
            "stow the {color} cup in the bowl",
        ),
    }

    @staticmethod
    def fixture_xml() -> str:
        return bowl_xml("bowl")
