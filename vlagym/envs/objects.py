"""Objects built from primitives, their colour palette, and layout sampling."""

from __future__ import annotations

import numpy as np

CUP_RADIUS = 0.028
CUP_HEIGHT = 0.09
CUP_MASS = 0.15
BLOCK_HALF = 0.022  # cubes 4.4 cm on a side
CAN_RADIUS = 0.024
CAN_HEIGHT = 0.1
PLATE_RADIUS = 0.075
BOWL_RADIUS = 0.075
BOWL_WALL = 0.04
PARK = np.array([1.5, 1.5, -0.75])  # unused free objects rest on the floor, out of view
# A geom whose alpha is 0 is left out of MuJoCo's scene: the renderer, whose cost on a software renderer grows
# with every geom it draws, never sees a parked object (out of view anyway: the images are the same).
HIDDEN_RGBA = (0.5, 0.5, 0.5, 0.0)

#: object kind -> (height of its origin's grasp point above its base, height)
KIND_HEIGHT = {"cup": CUP_HEIGHT, "block": 2 * BLOCK_HALF, "can": CAN_HEIGHT}

# Saturated, well separated hues: they stay distinguishable at 64 px under the
# scene's flat lighting. Names are the words instructions use.
COLORS: dict[str, tuple[float, float, float, float]] = {
    "red": (0.85, 0.12, 0.1, 1.0),
    "green": (0.15, 0.7, 0.2, 1.0),
    "blue": (0.12, 0.3, 0.9, 1.0),
    "yellow": (0.95, 0.85, 0.1, 1.0),
    "purple": (0.55, 0.2, 0.75, 1.0),
    "orange": (1.0, 0.5, 0.05, 1.0),
}


def cup_xml(name: str, pos) -> str:
    """A mug: a solid cylinder body with a dark opening and a handle along its local +x.

    The body origin is the centre of the cup's bottom face, so its z is the
    height above whatever it stands on.
    """
    x, y, z = (float(v) for v in pos)
    r, h = CUP_RADIUS, CUP_HEIGHT
    return f"""
    <body name="{name}" pos="{x} {y} {z}">
      <freejoint name="{name}"/>
      <geom name="{name}_body" type="cylinder" size="{r} {h / 2}" pos="0 0 {h / 2}" mass="{CUP_MASS}" class="object"/>
      <geom name="{name}_handle" type="capsule" fromto="{r + 0.012} 0 {0.25 * h} {r + 0.012} 0 {0.75 * h}" size="0.007"
            mass="0.01" class="object"/>
      <geom name="{name}_opening" type="cylinder" size="{r - 0.004} 0.0005" pos="0 0 {h}" rgba="0.08 0.06 0.05 1"
            class="visual"/>
    </body>"""


def block_xml(name: str, pos) -> str:
    """A cube; its body origin is the centre of its bottom face."""
    x, y, z = (float(v) for v in pos)
    h = BLOCK_HALF
    return f"""
    <body name="{name}" pos="{x} {y} {z}">
      <freejoint name="{name}"/>
      <geom name="{name}_body" type="box" size="{h} {h} {h}" pos="0 0 {h}" mass="0.08" class="object"/>
    </body>"""


def can_xml(name: str, pos) -> str:
    """A tall cylinder without a handle; its body origin is the centre of its bottom face."""
    x, y, z = (float(v) for v in pos)
    r, h = CAN_RADIUS, CAN_HEIGHT
    return f"""
    <body name="{name}" pos="{x} {y} {z}">
      <freejoint name="{name}"/>
      <geom name="{name}_body" type="cylinder" size="{r} {h / 2}" pos="0 0 {h / 2}" mass="0.12" class="object"/>
      <geom name="{name}_lid" type="cylinder" size="{r - 0.003} 0.001" pos="0 0 {h}" rgba="0.75 0.75 0.78 1"
            class="visual"/>
    </body>"""


OBJECT_XML = {"cup": cup_xml, "block": block_xml, "can": can_xml}


def plate_xml(name: str = "plate") -> str:
    """A flat dish standing on the table (a fixed body, moved per episode through `model.body_pos`)."""
    return f"""
    <body name="{name}" pos="0 0 0">
      <geom name="{name}_geom" type="cylinder" size="{PLATE_RADIUS} 0.004" pos="0 0 0.004" rgba="0.95 0.95 0.92 1"
            class="object"/>
      <geom name="{name}_rim" type="cylinder" size="{PLATE_RADIUS + 0.006} 0.003" pos="0 0 0.003"
            rgba="0.55 0.6 0.7 1" class="visual"/>
      <site name="{name}_center" pos="0 0 0.008" size="0.005" group="4"/>
    </body>"""


def bowl_xml(name: str = "bowl", walls: int = 10) -> str:
    """A bowl from a base disc and a ring of wall boxes (a fixed body, moved per episode)."""
    r, h = BOWL_RADIUS, BOWL_WALL
    half_width = r * np.tan(np.pi / walls) + 0.004
    parts = [
        f"""
    <body name="{name}" pos="0 0 0">
      <geom name="{name}_base" type="cylinder" size="{r} 0.004" pos="0 0 0.004" rgba="0.3 0.45 0.65 1" class="object"/>
      <site name="{name}_center" pos="0 0 0.008" size="0.005" group="4"/>"""
    ]
    for i in range(walls):
        a = 2 * np.pi * i / walls
        x, y = (r + 0.004) * np.cos(a), (r + 0.004) * np.sin(a)
        qw, qz = np.cos(a / 2), np.sin(a / 2)
        parts.append(
            f"""      <geom name="{name}_wall{i}" type="box" size="0.004 {half_width:.4f} {h / 2}"
            pos="{x:.4f} {y:.4f} {h / 2}" quat="{qw:.5f} 0 0 {qz:.5f}" rgba="0.3 0.45 0.65 1" class="object"/>"""
        )
    parts.append("    </body>")
    return "\n".join(parts)


def zone_xml(name: str = "zone", half: float = 0.06) -> str:
    """A flat marked square on the table, visual only (a fixed body, moved per episode)."""
    return f"""
    <body name="{name}" pos="0 0 0">
      <geom name="{name}_mark" type="box" size="{half} {half} 0.0008" pos="0 0 0.0008" rgba="0.2 0.75 0.35 1"
            class="visual"/>
      <geom name="{name}_inner" type="box" size="{half - 0.008} {half - 0.008} 0.0009" pos="0 0 0.0009"
            rgba="0.75 0.9 0.75 1" class="visual"/>
      <site name="{name}_center" pos="0 0 0.001" size="0.005" group="4"/>
    </body>"""


class FreeObject:
    """A free-jointed object of the scene, addressed by name once and then by ids.

    Positions are read from `qpos` (exact after every step; `xpos` lags one substep).
    The object's origin is the centre of its bottom face.
    """

    def __init__(self, model, name: str, kind: str, park_index: int = 0):
        self.name, self.kind = name, kind
        self.body = model.body(name).id
        joint = model.joint(name).id
        self.qpos_adr = int(model.jnt_qposadr[joint])
        self.dof_adr = int(model.jnt_dofadr[joint])
        self.color_geoms = [
            g for g in range(model.ngeom) if model.geom_bodyid[g] == self.body and model.geom_contype[g]
        ]
        self.park_pos = PARK + (0.2 * park_index, 0.0, 0.0)
        self._geoms = np.flatnonzero(model.geom_bodyid == self.body)
        self._contype = model.geom_contype[self._geoms].copy()
        self._conaffinity = model.geom_conaffinity[self._geoms].copy()
        self._rgba = model.geom_rgba[self._geoms].copy()
        self.height = KIND_HEIGHT[kind]
        self.present = False
        self.color = ""

    def place(self, model, data, x: float, y: float, yaw: float, color: str, z: float = 0.0) -> None:
        a = self.qpos_adr
        data.qpos[a : a + 3] = (x, y, z)
        data.qpos[a + 3 : a + 7] = (np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))
        data.qvel[self.dof_adr : self.dof_adr + 6] = 0.0
        model.geom_rgba[self._geoms] = self._rgba
        for g in self.color_geoms:
            model.geom_rgba[g] = COLORS[color]
        model.geom_contype[self._geoms] = self._contype
        model.geom_conaffinity[self._geoms] = self._conaffinity
        model.body_gravcomp[self.body] = 0.0
        self.present, self.color = True, color

    def park(self, model, data) -> None:
        a = self.qpos_adr
        data.qpos[a : a + 3] = self.park_pos
        data.qpos[a + 3 : a + 7] = (1.0, 0.0, 0.0, 0.0)
        data.qvel[self.dof_adr : self.dof_adr + 6] = 0.0
        # A parked object floats, weightless, without contacts and not drawn, out of view:
        # it costs the solver and the renderer nothing, whatever the task leaves unused.
        model.geom_rgba[self._geoms] = HIDDEN_RGBA
        model.geom_contype[self._geoms] = 0
        model.geom_conaffinity[self._geoms] = 0
        model.body_gravcomp[self.body] = 1.0
        self.present, self.color = False, ""

    def pos(self, data) -> np.ndarray:
        return data.qpos[self.qpos_adr : self.qpos_adr + 3].copy()

    def quat(self, data) -> np.ndarray:
        return data.qpos[self.qpos_adr + 3 : self.qpos_adr + 7].copy()

    def yaw(self, data) -> float:
        """Heading of the object's x axis in the table plane."""
        xmat = data.xmat[self.body]
        return float(np.arctan2(xmat[3], xmat[0]))

    def describe(self) -> str:
        return f"{self.color} {self.kind}"


def move_object(
    model,
    data,
    obj: FreeObject,
    others: list[FreeObject],
    xy: tuple[float, float],
    region: tuple[tuple[float, float], tuple[float, float]],
    min_spacing: float,
) -> None:
    """Put `obj` at `xy` on the table, keeping its heading and colour, where `sample_layout` could have put it:
    inside `region` and at least `min_spacing` from each of `others` (ValueError otherwise, naming the rule);
    draws nothing."""
    (x0, x1), (y0, y1) = region
    x, y = xy
    if not (x0 <= x <= x1 and y0 <= y <= y1):
        raise ValueError(f"target_xy ({x:.3f}, {y:.3f}) is outside the workspace x in [{x0}, {x1}], y in [{y0}, {y1}]")

    def gap(other: FreeObject) -> float:
        return float(np.hypot(*(other.pos(data)[:2] - (x, y))))

    near = sorted((o for o in others if gap(o) < min_spacing), key=gap)
    if near:
        raise ValueError(
            f"target_xy ({x:.3f}, {y:.3f}) is {gap(near[0]):.3f} m from the {near[0].describe()}; objects stand at "
            f"least {min_spacing} m apart"
        )
    obj.place(model, data, x, y, _heading(obj, data), obj.color)


def _heading(obj: FreeObject, data) -> float:
    """The yaw an upright object was placed with, read from its qpos (valid before `mj_forward`, unlike `yaw`)."""
    qw, _, _, qz = obj.quat(data)
    return 2.0 * float(np.arctan2(qz, qw))


def sample_colors(rng: np.random.Generator, kinds: list[str], unseen_target: bool, target: int = 0) -> list[str]:
    """Colours for objects of `kinds`, distinct per (colour, kind) pair, all colours distinct.

    Object `target` gets its kind's held-out colour when `unseen_target`; no
    other object, and no object in train, ever gets its kind's held-out colour.
    """
    from vlagym.envs.splits import HELDOUT_COLOR

    colors: list[str] = [""] * len(kinds)
    used: set[str] = set()
    if unseen_target:
        colors[target] = HELDOUT_COLOR[kinds[target]]
        used.add(colors[target])
    for i, kind in enumerate(kinds):
        if colors[i]:
            continue
        allowed = [c for c in COLORS if c not in used and c != HELDOUT_COLOR.get(kind)]
        colors[i] = str(allowed[rng.integers(len(allowed))])
        used.add(colors[i])
    return colors


def sample_layout(
    rng: np.random.Generator,
    n: int,
    region: tuple[tuple[float, float], tuple[float, float]],
    min_spacing: float,
    max_tries: int = 100,
) -> tuple[np.ndarray, np.ndarray]:
    """`n` xy positions in `region` at least `min_spacing` apart, and `n` yaws.

    Rejection sampling from `rng` alone, so the layout is a pure function of the seed.
    """
    (x0, x1), (y0, y1) = region
    xy = np.zeros((n, 2))
    for _ in range(max_tries):
        # Place points one by one; if an early choice leaves no room, start over.
        placed = 0
        for _ in range(50 * n):
            p = rng.uniform((x0, y0), (x1, y1))
            if placed == 0 or np.min(np.linalg.norm(xy[:placed] - p, axis=1)) >= min_spacing:
                xy[placed] = p
                placed += 1
                if placed == n:
                    yaw = rng.uniform(-np.pi, np.pi, size=n)
                    return xy, yaw
    raise RuntimeError(f"could not place {n} objects {min_spacing} m apart in {region}")
