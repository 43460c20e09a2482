"""VLA-PushCube-v0: push the named cube into the marked square, without lifting it."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from vlagym.envs.base import VLAEnv
from vlagym.envs.expert import ScriptedExpert
from vlagym.envs.objects import BLOCK_HALF, OBJECT_XML, FreeObject, sample_colors, sample_layout, zone_xml

ZONE_HALF = 0.06  # half side of the marked square
IN_ZONE_MARGIN = 0.01  # success: cube centre this far inside the square's edge
ON_TABLE = 0.005  # success: cube bottom within this of the table top (pushed, not lifted)
CUBE_REGION = ((-0.12, 0.08), (-0.2, 0.2))  # x and y ranges of cube centres
ZONE_REGION = ((-0.14, 0.06), (-0.15, 0.15))  # x and y ranges of the zone centre
REACH = ((-0.19, 0.14), (-0.24, 0.24))  # where the pusher can stand at table height
ZONE_DISTANCE = (0.12, 0.2)  # from the target cube's centre to the zone centre
PUSH_HEIGHT = 0.04  # grasp-site height while pushing: the closed fingertips ride 1 cm above the table
STANDOFF = 0.065  # pre-push point: this far behind the cube centre, on the line zone -> cube
PATH_CLEARANCE = 0.075  # other cubes' centres stay this far from the push path
SPACING = {"train": 0.1, "distractors": 0.09}  # between cube centres
SLOTS = tuple((f"cube{i}", "block") for i in range(5))
DISTRACTORS = {"train": (1, 2), "distractors": (3, 4)}  # other cubes besides the target
ZONE_RGBA = ((0.25, 0.25, 0.28, 1.0), (0.92, 0.92, 0.9, 1.0))  # border, inside: no cube colour


def _segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance of each point in `p` (n, 2) to the segment a-b."""
    ab = b - a
    t = np.clip((p - a) @ ab / (ab @ ab), 0.0, 1.0)
    return np.linalg.norm(p - (a + t[:, None] * ab), axis=1)


def _inside(p: np.ndarray, region) -> bool:
    (x0, x1), (y0, y1) = region
    return bool(x0 <= p[0] <= x1 and y0 <= p[1] <= y1)


class PushCubeEnv(VLAEnv):
    """Push the named cube into the marked square.

    Task:
        Two or three cubes of distinct colours and a marked square (12 cm
        across, unnamed, the same look every episode) lie on the table; the
        instruction names one cube. Push that cube into the square, sliding it
        on the table.

    Randomisations:
        Number of cubes (2-3), their colours (distinct; never the block's
        held-out colour outside `unseen_combo`), positions (x in [-0.12, 0.08],
        y in [-0.2, 0.2], at least 10 cm apart), yaw (uniform), which cube is
        the target, the square's position (12-20 cm from the target cube, in
        any direction that keeps it and the pusher's start reachable, its area
        and the push path clear of other cubes), the instruction template, the
        arm's start posture, lighting and camera poses (`vlagym.envs.splits`).
        Split `distractors`: four or five cubes, 9 cm apart.

    Success:
        The target cube's centre lies inside the square, at least 1 cm from
        its edges, and the cube rests on the table (its bottom within 5 mm of
        the table top, not held between the finger pads). Pushing another cube into the square is not
        success.

    Instructions:
        "push the {color} cube into the target zone" and paraphrases; the
        `heldout` split uses a disjoint set of wordings.
    """

    description = "Push the cube of the named colour into the marked square on the table."
    family = "push"
    distractor_counts = DISTRACTORS
    templates: ClassVar[dict[str, tuple[str, ...]]] = {
        "train": (
            "push the {color} cube into the target zone",
            "slide the {color} cube into the marked square",
            "push the {color} cube onto the marked square",
            "move the {color} cube into the target zone by pushing it",
            "shove the {color} cube into the square",
        ),
        "heldout": (
            "nudge the {color} block over into the marked area",
            "without lifting it, get the {color} cube inside the square",
            "could you slide the {color} block into the target area?",
        ),
    }
    default_reward_weights: ClassVar[dict[str, float]] = {"reach": 0.2, "push": 0.5, "in_zone": 0.3}

    # ------------------------------------------------------------------ scene
    def _objects_xml(self) -> str:
        cubes = "\n".join(OBJECT_XML[kind](name, (0, 0, -1)) for name, kind in SLOTS)
        return cubes + zone_xml("zone", ZONE_HALF)

    def _setup_task(self) -> None:
        self.objects = [FreeObject(self.model, name, kind, i) for i, (name, kind) in enumerate(SLOTS)]
        self.target = self.objects[0]
        self.zone_body = self.model.body("zone").id
        for geom, rgba in zip(("zone_mark", "zone_inner"), ZONE_RGBA, strict=True):
            self.model.geom(geom).rgba = rgba

    # ------------------------------------------------------------------ reset
    def _initialize_episode(self, rng: np.random.Generator) -> None:
        split = "distractors" if self.split == "distractors" else "train"
        lo, hi = DISTRACTORS[split]
        chosen = self.objects[: 1 + int(rng.integers(lo, hi + 1))]
        target_index = int(rng.integers(len(chosen)))
        colors = sample_colors(rng, [o.kind for o in chosen], self.split == "unseen_combo", target_index)
        xy, yaw, zone = self._sample_scene(rng, len(chosen), target_index, SPACING[split])
        for obj in self.objects:
            obj.park(self.model, self.data)
        for i, obj in enumerate(chosen):
            obj.place(self.model, self.data, xy[i, 0], xy[i, 1], yaw[i], colors[i])
        self.target = chosen[target_index]
        self.model.body_pos[self.zone_body] = (zone[0], zone[1], 0.0)

    @staticmethod
    def _sample_scene(rng: np.random.Generator, n: int, target: int, spacing: float):
        """Cube layout and a zone centre whose square and push path are clear of the other cubes."""
        for _ in range(200):
            xy, yaw = sample_layout(rng, n, CUBE_REGION, spacing)
            others = np.delete(xy, target, axis=0)
            for _ in range(30):
                angle = rng.uniform(-np.pi, np.pi)
                direction = np.array([np.cos(angle), np.sin(angle)])
                zone = xy[target] + rng.uniform(*ZONE_DISTANCE) * direction
                start = xy[target] - STANDOFF * direction
                if not (_inside(zone, ZONE_REGION) and _inside(start, REACH)):
                    continue
                in_square = np.all(np.abs(others - zone) < ZONE_HALF + 2 * BLOCK_HALF, axis=1)
                if not in_square.any() and np.all(_segment_distance(others, start, zone) > PATH_CLEARANCE):
                    return xy, yaw, zone
        raise RuntimeError(f"could not lay out {n} cubes with a clear push path")

    def instruction_fields(self) -> dict[str, str]:
        return {"color": self.target.color}

    # ------------------------------------------------------------------ observations
    def target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        return self.target.pos(self.data), self.target.quat(self.data)

    def goal_position(self) -> np.ndarray:
        return self.model.body_pos[self.zone_body].copy()

    # ------------------------------------------------------------------ success and reward
    def _in_zone(self, pos: np.ndarray) -> bool:
        d = np.abs(pos[:2] - self.model.body_pos[self.zone_body][:2])
        return bool(np.all(d <= ZONE_HALF - IN_ZONE_MARGIN))

    def evaluate(self) -> dict[str, Any]:
        pos = self.target.pos(self.data)
        zone = self.model.body_pos[self.zone_body]
        left, right = self.pad_contacts()
        # Held between the pads, not merely touched by both closed fingertips from one side while pushing.
        grasped = self.target.body in (left & right) and self.robot.gripper_width > BLOCK_HALF
        on_table = abs(pos[2]) < ON_TABLE and not grasped
        in_zone = self._in_zone(pos)
        other_in_zone = any(
            o.present and o is not self.target and self._in_zone(o.pos(self.data)) for o in self.objects
        )
        # The pusher's place: just behind the cube on the line from the zone through it.
        away = pos[:2] - zone[:2]
        away /= max(np.linalg.norm(away), 1e-9)
        push_point = np.array([*(pos[:2] + away * (BLOCK_HALF + 0.011)), PUSH_HEIGHT])
        return {
            "success": in_zone and on_table,
            "in_zone": in_zone,
            "on_table": on_table,
            "grasped": grasped,
            "other_cube_in_zone": other_in_zone,
            "target_height": float(pos[2]),
            "zone_distance": float(np.linalg.norm(pos[:2] - zone[:2])),
            "reach_distance": float(np.linalg.norm(self.data.site_xpos[self.robot.ee_site] - push_point)),
        }

    def reward_terms(self, evaluation: dict[str, Any]) -> dict[str, float]:
        return {
            "reach": float(1.0 - np.tanh(10.0 * evaluation["reach_distance"])),
            "push": float(1.0 - np.tanh(8.0 * evaluation["zone_distance"])),
            "in_zone": float(evaluation["success"]),
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
        return {"pos": self.goal_position()}


class PushExpert(ScriptedExpert):
    """Closed gripper: go behind the cube on the line zone -> cube, lower, push toward the zone centre.

    The push line is recomputed every step from the cube's current position, so
    the pusher follows a cube that turns or drifts; if the cube slips off the
    pusher (too far sideways), the expert backs off and re-approaches.
    """

    first_phase = "approach"
    hover_height = 0.1  # grasp-site height while moving over the cubes
    push_height = PUSH_HEIGHT
    contact = BLOCK_HALF + 0.011  # cube centre to grasp site when the closed pads touch the cube
    advance = 0.03  # how far ahead of contact the pusher aims while pushing
    max_lateral = 0.012  # sideways offset from the push line that triggers a re-approach
    done_distance = 0.008  # cube centre this close to the zone centre: stop

    def act(self) -> np.ndarray:
        # Each phase either acts or hands over to the next one within the same step.
        for _ in range(4):
            action = getattr(self, f"_{self.phase}")()
            if action is not None:
                return action
        raise RuntimeError(f"push expert is cycling through phases (at {self.phase!r})")

    def _line(self) -> tuple[np.ndarray, np.ndarray, float]:
        """Cube centre (xy), unit push direction toward the zone centre, distance to it."""
        cube = self.env.expert_target()["pos"][:2]
        to_zone = self.env.expert_goal()["pos"][:2] - cube
        distance = float(np.linalg.norm(to_zone))
        u = to_zone / max(distance, 1e-9)
        if self.yaw is None:  # pads square to the push direction
            self.yaw = self.grasp_yaw(float(np.arctan2(u[1], u[0])), np.pi / 2)
        return cube, u, distance

    def _standoff(self) -> np.ndarray:
        cube, u, _ = self._line()
        return np.array([*(cube - STANDOFF * u), self.push_height])

    def _approach(self) -> np.ndarray | None:
        above = self._standoff() + (0.0, 0.0, self.hover_height - self.push_height)
        if self.near(above, 0.01, 0.03):
            self.go("descend")
            return None
        return self.servo(above, self.yaw, 1.0)

    def _descend(self) -> np.ndarray | None:
        standoff = self._standoff()
        if self.near(standoff, 0.008, 0.008):
            self.go("push")
            return None
        return self.servo(standoff, self.yaw, 1.0)

    def _push(self) -> np.ndarray | None:
        cube, u, distance = self._line()
        rel = self.ee[:2] - cube
        along, lateral = float(rel @ u), float(rel @ (-u[1], u[0]))
        if distance < self.done_distance:
            self.go("done")
            return None
        if abs(lateral) > self.max_lateral or along > -BLOCK_HALF:
            # Off the line: back straight off if still behind the cube, else go over it.
            self.go("realign" if along < -(self.contact - 0.004) else "rise")
            return None
        step = min(self.advance, distance)
        goal = np.array([*(cube + (step - self.contact) * u), self.push_height])
        return self.servo(goal, self.yaw, 1.0, speed=0.5)

    def _realign(self) -> np.ndarray | None:
        standoff = self._standoff()
        if self.near(standoff, 0.006, 0.01):
            self.go("push")
            return None
        return self.servo(standoff, self.yaw, 1.0, speed=0.6)

    def _rise(self) -> np.ndarray | None:
        up = np.array([*self.ee[:2], self.hover_height])
        if self.near(up, 0.03, 0.015):
            self.go("approach")
            return None
        return self.servo(up, self.yaw, 1.0)

    def _done(self) -> np.ndarray | None:
        # Lift clear; push again if the cube is not where it should be.
        if self._line()[2] > 3 * self.done_distance + 0.01:
            self.go("rise")
            return None
        return self.servo(np.array([*self.ee[:2], self.hover_height]), self.yaw, 1.0)


PushCubeEnv.expert_cls = PushExpert
