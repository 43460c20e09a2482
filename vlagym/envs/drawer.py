"""A cabinet with one drawer: VLA-OpenDrawer-v0, VLA-CloseDrawer-v0 and VLA-PutCupInDrawer-v0.

The three tasks share one scene (`_DrawerEnv`): a fixed cabinet built from boxes,
placed per episode through `model.body_pos`/`body_quat`, its opening facing the
robot, and a drawer on a slide joint with a bar handle on its front. Frames: the
cabinet frame has its origin on the table at the middle of the opening, +x into
the cabinet; the drawer frame is the cabinet frame moved by the opening along -x.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from vlagym.envs.base import VLAEnv
from vlagym.envs.expert import PickPlaceExpert, ScriptedExpert, site_yaw
from vlagym.envs.objects import COLORS, OBJECT_XML, FreeObject
from vlagym.envs.splits import HELDOUT_COLOR

# Cabinet (cabinet frame): outer box x in [0, CAB_DEPTH], |y| <= CAB_HALF_W, z in [0, CAB_TOP].
CAB_DEPTH, CAB_HALF_W, CAB_TOP = 0.18, 0.095, 0.11
CAB_TINT = 0.35  # the cabinet is a pale tint of the drawer colour: the front camera sees only its back
# Drawer (drawer frame): interior x in [0, INNER_DEPTH], |y| <= INNER_HALF_W, floor top at FLOOR_Z.
INNER_DEPTH, INNER_HALF_W, FLOOR_Z, WALL_TOP = 0.15, 0.072, 0.025, 0.088
HANDLE = np.array([-0.067, 0.0, 0.06])  # bar centre: 5.5 cm in front of the 1.2 cm front panel
HANDLE_RADIUS = 0.008
GRASP_OFFSET = np.array([-0.004, 0.0, 0.012])  # grasp site vs bar centre: the rear finger clears the panel
PUSH_OFFSET = np.array([-(HANDLE_RADIUS + 0.012), 0.0, 0.012])  # closed fingers touching the bar's front
MAX_OPENING = 0.16  # slide joint range [0, MAX_OPENING]
OPEN_SUCCESS, CLOSED_SUCCESS = 0.10, 0.01
OPEN_GOAL = 0.13  # where OpenDrawer's goal_position puts the handle
#: drawer colours: every colour but DRAWER_HELDOUT_COLOR in train, that one only under `unseen_combo`
DRAWER_HELDOUT_COLOR = "blue"
DRAWER_COLORS = tuple(c for c in COLORS if c != DRAWER_HELDOUT_COLOR)
# Cabinet pose: x of the opening, y, yaw (rad).
CAB_X, CAB_Y, CAB_YAW = (0.0, 0.06), (-0.15, 0.15), (-np.deg2rad(15), np.deg2rad(15))
REGION = ((-0.15, 0.12), (-0.24, 0.24))  # x and y ranges of object centres
# Objects keep this far from the cabinet's sides and from the open drawer's path (handle + hand in front).
KEEP_OUT_X = (-0.32, CAB_DEPTH)
OBJECT_MARGIN, TARGET_MARGIN = 0.06, 0.075  # the target needs room for the open hand around it
MIN_SPACING, DISTRACTOR_SPACING = 0.13, 0.12
SLOTS = (("cup0", "cup"), ("cup1", "cup"), ("cup2", "cup"), ("block0", "block"), ("can0", "can"))
UPRIGHT_COS = np.cos(np.deg2rad(20))


def cabinet_xml() -> str:
    """The cabinet (static geoms) and its drawer (slide joint) with the handle as a welded child body."""
    # Cabinet and drawer never collide with each other (the joint range is the stop); both collide
    # with the hand and the objects (contype 1 / conaffinity 1).
    cab = 'contype="1" conaffinity="4" condim="3" group="2"'
    drw = 'contype="1" conaffinity="2" condim="3" group="2"'
    d, w, t = CAB_DEPTH, CAB_HALF_W, CAB_TOP
    iw, idp = INNER_HALF_W, INNER_DEPTH
    wall_h = (WALL_TOP - FLOOR_Z) / 2
    hx, _, hz = HANDLE
    post = -0.012 - hx  # from the bar back to the front panel
    return f"""
    <body name="cabinet" pos="0 0 0">
      <geom name="cabinet_floor" type="box" size="{d / 2} {w} 0.0065" pos="{d / 2} 0 0.0065" {cab}/>
      <geom name="cabinet_top" type="box" size="{d / 2} {w} 0.0075" pos="{d / 2} 0 {t - 0.0075}" {cab}/>
      <geom name="cabinet_left" type="box" size="{d / 2} 0.005 {t / 2}" pos="{d / 2} {w - 0.005} {t / 2}" {cab}/>
      <geom name="cabinet_right" type="box" size="{d / 2} 0.005 {t / 2}" pos="{d / 2} {-w + 0.005} {t / 2}" {cab}/>
      <geom name="cabinet_back" type="box" size="0.005 {w} {t / 2}" pos="{d - 0.005} 0 {t / 2}" {cab}/>
      <body name="drawer" pos="0 0 0">
        <joint name="drawer_slide" type="slide" axis="-1 0 0" range="0 {MAX_OPENING}" damping="4"
               frictionloss="0.2" armature="0.05"/>
        <geom name="drawer_front" type="box" size="0.006 0.093 0.04" pos="-0.006 0 0.055" mass="0.12" {drw}/>
        <geom name="drawer_floor" type="box" size="{idp / 2 + 0.005} {iw + 0.01} 0.005"
              pos="{idp / 2 + 0.005} 0 {FLOOR_Z - 0.005}" mass="0.1" {drw}/>
        <geom name="drawer_left" type="box" size="{idp / 2 + 0.005} 0.005 {wall_h}"
              pos="{idp / 2 + 0.005} {iw + 0.005} {FLOOR_Z + wall_h}" mass="0.05" {drw}/>
        <geom name="drawer_right" type="box" size="{idp / 2 + 0.005} 0.005 {wall_h}"
              pos="{idp / 2 + 0.005} {-iw - 0.005} {FLOOR_Z + wall_h}" mass="0.05" {drw}/>
        <geom name="drawer_back" type="box" size="0.005 {iw + 0.01} {wall_h}"
              pos="{idp + 0.005} 0 {FLOOR_Z + wall_h}" mass="0.05" {drw}/>
        <body name="drawer_handle" pos="{hx} 0 {hz}">
          <geom name="handle_bar" type="capsule" fromto="0 -0.05 0 0 0.05 0" size="{HANDLE_RADIUS}" mass="0.03"
                rgba="0.25 0.25 0.28 1" {drw}/>
          <geom name="handle_post_left" type="capsule" fromto="0 0.05 0 {post} 0.05 0" size="0.006" mass="0.01"
                rgba="0.25 0.25 0.28 1" {drw}/>
          <geom name="handle_post_right" type="capsule" fromto="0 -0.05 0 {post} -0.05 0" size="0.006"
                mass="0.01" rgba="0.25 0.25 0.28 1" {drw}/>
        </body>
      </body>
    </body>"""


def scene_colors(
    rng: np.random.Generator, kinds: list[str], drawer_unseen: bool, target_unseen: bool, target: int = 0
) -> tuple[str, list[str]]:
    """The drawer's colour and the objects' colours, all distinct (as `objects.sample_colors`, plus the drawer)."""
    colors: list[str] = [""] * len(kinds)
    held_out = HELDOUT_COLOR[kinds[target]] if target_unseen else ""
    if target_unseen:
        colors[target] = held_out
    palette = [c for c in DRAWER_COLORS if c != held_out]
    drawer = DRAWER_HELDOUT_COLOR if drawer_unseen else str(palette[rng.integers(len(palette))])
    used = {drawer, held_out} - {""}
    for i, kind in enumerate(kinds):
        if not colors[i]:
            allowed = [c for c in COLORS if c not in used and c != HELDOUT_COLOR.get(kind)]
            colors[i] = str(allowed[rng.integers(len(allowed))])
            used.add(colors[i])
    return drawer, colors


def _unit(x: float) -> float:
    """`x` clipped to [0, 1] (scalar; cheaper than np.clip in the per-step reward)."""
    return min(max(float(x), 0.0), 1.0)


class _DrawerEnv(VLAEnv):
    """The shared cabinet scene: drawer kinematics, layout around the cabinet, expert facts.

    Subclasses set the start opening and choose the objects; they own success,
    reward and instructions.
    """

    family = "articulated"
    start_opening: ClassVar[tuple[float, float]] = (0.0, 0.01)

    # ------------------------------------------------------------------ scene
    def _objects_xml(self) -> str:
        return cabinet_xml() + "\n".join(OBJECT_XML[kind](name, (0, 0, -1)) for name, kind in SLOTS)

    def _setup_task(self) -> None:
        m = self.model
        self.objects = [FreeObject(m, name, kind, i) for i, (name, kind) in enumerate(SLOTS)]
        #: the named cup (PutCupInDrawer); None where the drawer itself is the target
        self.target: FreeObject | None = None
        self.cabinet = m.body("cabinet").id
        joint = m.joint("drawer_slide").id
        self.slide_qpos, self.slide_dof = int(m.jnt_qposadr[joint]), int(m.jnt_dofadr[joint])
        self.drawer_geoms = [m.geom(f"drawer_{p}").id for p in ("front", "floor", "left", "right", "back")]
        self.cabinet_geoms = [g for g in range(m.ngeom) if m.geom_bodyid[g] == self.cabinet]
        self.handle_body = m.body("drawer_handle").id
        self.drawer_color = ""
        self.cab_pos, self.cab_yaw, self.cab_rot = np.zeros(3), 0.0, np.eye(3)

    # ------------------------------------------------------------------ reset
    def _choose_objects(self, rng: np.random.Generator) -> tuple[list[FreeObject], int]:
        """The objects of this episode and the index of the target among them (-1: the drawer).

        Here for the drawer-only tasks: 0-1 cups in train, 2-3 objects of any kind under `distractors`.
        """
        lo, hi = self.distractor_counts["distractors" if self.split == "distractors" else "train"]
        pool = self.objects if self.split == "distractors" else [o for o in self.objects if o.kind == "cup"]
        picked = rng.choice(len(pool), size=int(rng.integers(lo, hi + 1)), replace=False)
        return [pool[i] for i in sorted(picked)], -1

    def _initialize_episode(self, rng: np.random.Generator) -> None:
        chosen, target = self._choose_objects(rng)
        unseen = self.split == "unseen_combo"
        self.drawer_color, colors = scene_colors(
            rng, [o.kind for o in chosen], unseen and target < 0, unseen and target >= 0, max(target, 0)
        )
        spacing = DISTRACTOR_SPACING if self.split == "distractors" else MIN_SPACING
        margins = [TARGET_MARGIN if i == target else OBJECT_MARGIN for i in range(len(chosen))]
        pose, xy = self._sample_layout(rng, margins, spacing)
        self._place_cabinet(*pose)
        self.data.qpos[self.slide_qpos] = rng.uniform(*self.start_opening)
        rgb = np.array(COLORS[self.drawer_color][:3])
        for g in self.drawer_geoms:
            shade = 0.75 if g != self.drawer_geoms[0] else 1.0  # inside a little darker: depth cue
            self.model.geom_rgba[g] = (*(shade * rgb), 1.0)
        self.model.geom_rgba[self.cabinet_geoms] = (*(CAB_TINT * rgb + (1.0 - CAB_TINT) * 0.92), 1.0)
        for obj in self.objects:
            obj.park(self.model, self.data)
        yaws = rng.uniform(-np.pi, np.pi, size=len(chosen))
        for i, obj in enumerate(chosen):
            obj.place(self.model, self.data, xy[i, 0], xy[i, 1], yaws[i], colors[i])
        if target >= 0:
            self.target = chosen[target]

    def _sample_layout(
        self, rng: np.random.Generator, margins: list[float], spacing: float
    ) -> tuple[tuple[float, float, float], np.ndarray]:
        """A cabinet pose and object positions outside its keep-out zone, `spacing` apart (rejection sampling)."""
        (x0, x1), (y0, y1) = REGION
        xy = np.zeros((len(margins), 2))
        for _ in range(200):
            pose = (rng.uniform(*CAB_X), rng.uniform(*CAB_Y), rng.uniform(*CAB_YAW))
            c, s = np.cos(pose[2]), np.sin(pose[2])
            placed = 0
            for _ in range(100 * len(margins)):
                if placed == len(margins):
                    return pose, xy
                p = rng.uniform((x0, y0), (x1, y1))
                lx, ly = c * (p[0] - pose[0]) + s * (p[1] - pose[1]), -s * (p[0] - pose[0]) + c * (p[1] - pose[1])
                m = margins[placed]
                blocked = KEEP_OUT_X[0] - m < lx < KEEP_OUT_X[1] + m and abs(ly) < CAB_HALF_W + m
                if not blocked and (placed == 0 or np.min(np.linalg.norm(xy[:placed] - p, axis=1)) >= spacing):
                    xy[placed] = p
                    placed += 1
            if placed == len(margins):
                return pose, xy
        raise RuntimeError(f"could not place {len(margins)} objects around the cabinet")

    def _place_cabinet(self, x: float, y: float, yaw: float) -> None:
        self.cab_pos = np.array([x, y, 0.0])
        self.cab_yaw = float(yaw)
        c, s = np.cos(yaw), np.sin(yaw)
        self.cab_rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        self.model.body_pos[self.cabinet] = self.cab_pos
        self.model.body_quat[self.cabinet] = (np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))

    # ------------------------------------------------------------------ drawer geometry
    @property
    def opening(self) -> float:
        """How far the drawer is pulled out, in metres (0 = closed)."""
        return float(self.data.qpos[self.slide_qpos])

    @property
    def pull_direction(self) -> np.ndarray:
        """World direction in which the drawer opens (the cabinet's -x)."""
        return -self.cab_rot[:, 0]

    def drawer_point(self, local, opening: float | None = None) -> np.ndarray:
        """World position of a point given in the drawer frame (at `opening`, default the current one)."""
        point = np.array(local, dtype=float)
        point[0] -= self.opening if opening is None else opening
        return self.cab_pos + self.cab_rot @ point

    def in_drawer_frame(self, world) -> np.ndarray:
        local = self.cab_rot.T @ (world - self.cab_pos)
        local[0] += self.opening
        return local

    def drawer_quat(self) -> np.ndarray:
        return np.array([np.cos(self.cab_yaw / 2), 0.0, 0.0, np.sin(self.cab_yaw / 2)])

    def instruction_fields(self) -> dict[str, str]:
        return {}  # "open"/"close" is in the template itself

    def target_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """The handle bar's centre and the drawer's orientation."""
        return self.drawer_point(HANDLE), self.drawer_quat()

    def task_scalars(self) -> np.ndarray:
        return np.array([self.opening, self.data.qvel[self.slide_dof], 0.0, 0.0])

    def handle_grasped(self) -> bool:
        left, right = self.pad_contacts()
        return self.handle_body in (left & right)

    def expert_handle(self) -> dict[str, Any]:
        """Privileged facts for the drawer experts: the handle, the pull direction, the opening."""
        return {
            "pos": self.drawer_point(HANDLE),
            "pull": self.pull_direction,
            "yaw": self.cab_yaw + np.pi / 2,  # fingers close along the slide axis
            "opening": self.opening,
        }


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


class PutCupInDrawerExpert(OpenDrawerExpert, PickPlaceExpert):
    """Open the drawer (as OpenDrawerExpert), let go and lift clear, then pick the cup and place it inside."""

    release = True
    pull_to = 0.15
    lift_height = carry_height = 0.22  # the carried cup clears the cabinet top and the drawer walls

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


# ----------------------------------------------------------------------------------------- tasks
class OpenDrawerEnv(_DrawerEnv):
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
            "open": _unit(evaluation["opening"] / OPEN_SUCCESS),
        }


class CloseDrawerEnv(_DrawerEnv):
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
            "close": _unit(closed),
        }


class PutCupInDrawerEnv(_DrawerEnv):
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
        depth = min(max(self.opening, 0.11), INNER_DEPTH)
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
            "open": _unit(evaluation["opening"] / OPEN_SUCCESS),
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
        return {"pos": self.goal_position()}
