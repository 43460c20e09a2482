"""The cabinet with one drawer that the drawer tasks share (`vlagym.envs.drawer`, `vlagym.envs.put_cup_in_drawer`).

A fixed cabinet built from boxes, placed per episode through `model.body_pos`/`body_quat`, its opening facing
the robot, and a drawer on a slide joint with a bar handle on its front. Frames: the cabinet frame has its
origin on the table at the middle of the opening, +x into the cabinet; the drawer frame is the cabinet frame
moved by the opening along -x.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from vlagym.envs.base import VLAEnv
from vlagym.envs.objects import COLORS, OBJECT_XML, FreeObject
from vlagym.envs.splits import HELDOUT_COLOR

# Cabinet (cabinet frame): outer box x in [0, CAB_DEPTH], |y| <= CAB_HALF_W, z in [0, CAB_TOP].
CAB_DEPTH, CAB_HALF_W, CAB_TOP = 0.18, 0.095, 0.11
CAB_TINT = 0.35  # the cabinet is a pale tint of the drawer colour: the front camera sees only its back
# Drawer (drawer frame): interior x in [0, INNER_DEPTH], |y| <= INNER_HALF_W, floor top at FLOOR_Z.
INNER_DEPTH, INNER_HALF_W, FLOOR_Z, WALL_TOP = 0.15, 0.072, 0.025, 0.088
HANDLE = np.array([-0.067, 0.0, 0.06])  # bar centre: 5.5 cm in front of the 1.2 cm front panel
HANDLE_RADIUS = 0.008
MAX_OPENING = 0.16  # slide joint range [0, MAX_OPENING]
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


def unit(x: float) -> float:
    """`x` clipped to [0, 1] (scalar; cheaper than np.clip in the per-step reward)."""
    return min(max(float(x), 0.0), 1.0)


class CabinetEnv(VLAEnv):
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
