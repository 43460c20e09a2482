"""Objects built from primitives, their colour palette, and layout sampling."""

from __future__ import annotations

import numpy as np

CUP_RADIUS = 0.028
CUP_HEIGHT = 0.09
CUP_MASS = 0.15

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
