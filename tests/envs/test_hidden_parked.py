"""Objects a task leaves unused are parked out of view and left out of the rendered scene (a software renderer
pays for every geom it draws): the images must be exactly those with them drawn."""

from __future__ import annotations

import numpy as np
import pytest

import vlagym

TASKS = sorted(t for t in vlagym.TASKS if t != "VLA-MultiTask-v0")
PARKED_BELOW = -0.4  # metres: parked objects and buttons rest on the floor, under the table top


def _images(env) -> list[np.ndarray]:
    u = env.unwrapped
    return [u._render_camera(cam).copy() for cam in u.cameras] + [env.render().copy()]


@pytest.mark.parametrize("task", TASKS)
def test_parked_objects_are_not_drawn_and_the_images_are_those_with_them_drawn(task, make_env):
    env = make_env(task, obs_mode="rgb", image_size=48, render_mode="rgb_array", render_size=(64, 64))
    u = env.unwrapped
    m = u.model
    drawable = m.geom_rgba[:, 3] > 0  # as the MJCF has them
    hidden_somewhere = False
    for seed, split in ((0, "train"), (1, "distractors"), (2, "train")):
        u.split = split
        env.reset(seed=seed)
        env.step(np.zeros(7, np.float32))
        body = m.geom_bodyid
        parked = (body != 0) & (u.data.xpos[body, 2] < PARKED_BELOW)  # the floor is the world's, not parked
        hidden = drawable & (m.geom_rgba[:, 3] == 0)
        assert not (hidden & ~parked).any(), "only parked geoms are hidden"
        assert not (drawable & parked & ~hidden).any(), "every parked geom is hidden"
        hidden_somewhere |= bool(hidden.any())
        without = _images(env)
        saved = m.geom_rgba[hidden].copy()
        m.geom_rgba[hidden, 3] = 1.0
        with_them = _images(env)
        m.geom_rgba[hidden] = saved
        for a, b in zip(without, with_them, strict=True):
            assert np.array_equal(a, b)
    assert hidden_somewhere, f"{task} parks nothing in these episodes: the test would prove nothing"
