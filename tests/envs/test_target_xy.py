"""`reset(options={"target_xy": ...})`: the target moved on the table, the rest of the episode the seed's."""

from __future__ import annotations

import numpy as np
import pytest

from vlagym.envs.pick_cup import WORKSPACE

PICK = "VLA-PickCup-v0"


@pytest.mark.parametrize("env_id", [PICK, "VLA-PickObject-v0"])
def test_target_xy_moves_the_target_alone(make_env, env_id):
    env = make_env(env_id, obs_mode="rgb+state", image_size=32, cameras=["front"])
    obs, info = env.reset(seed=7)
    u = env.unwrapped
    target = u.target
    others = {o.name: o.pos(u.data) for o in u.objects if o.present and o is not target}
    yaw, color = target.yaw(u.data), target.color
    xy = (-0.1, -0.19) if target.pos(u.data)[1] > 0 else (-0.1, 0.19)
    assert all(np.hypot(*(p[:2] - xy)) >= 0.13 for p in others.values())  # seed 7 leaves room there
    moved, moved_info = env.reset(seed=7, options={"target_xy": xy})
    assert u.target is target and target.color == color
    np.testing.assert_allclose(target.pos(u.data), [xy[0], xy[1], 0.0], atol=1e-9)
    assert abs(target.yaw(u.data) - yaw) < 1e-6  # heading kept
    for name, pos in others.items():  # everything else where the seed put it
        np.testing.assert_array_equal(next(o for o in u.objects if o.name == name).pos(u.data), pos)
    assert moved_info["instruction"] == info["instruction"]
    np.testing.assert_array_equal(moved["proprio"], obs["proprio"])  # same arm start
    assert not np.array_equal(moved["images"]["front"], obs["images"]["front"])  # the camera sees the move
    np.testing.assert_allclose(u._task_state()[0:2], xy)  # the privileged state describes the moved target
    env.reset(seed=7)  # options apply to one reset only
    assert not np.allclose(target.pos(u.data)[:2], xy)


def test_target_xy_refuses_layouts_the_task_could_not_draw(make_env):
    env = make_env(PICK, num_cups=2)
    env.reset(seed=0)
    u = env.unwrapped
    other = next(o for o in u.objects if o.present and o is not u.target)
    near = other.pos(u.data)[:2] + (0.05 if other.pos(u.data)[0] < 0 else -0.05, 0.0)  # inside the workspace
    with pytest.raises(ValueError, match="from the .* cup; objects stand at least 0.13 m apart"):
        env.reset(seed=0, options={"target_xy": tuple(near)})
    with pytest.raises(ValueError, match="outside the workspace"):
        env.reset(seed=0, options={"target_xy": (0.3, 0.0)})
    for bad in [(0.0,), "ab", (np.nan, 0.0), None]:
        with pytest.raises(ValueError, match=r"options\['target_xy'\] must be two finite numbers"):
            env.reset(seed=0, options={"target_xy": bad})
    with pytest.raises(ValueError, match="does not support options=\\{'target_xy'"):
        make_env("VLA-PushCube-v0").reset(seed=0, options={"target_xy": (0.0, 0.0)})


@pytest.mark.parametrize("env_id", [PICK, "VLA-PickObject-v0"])
def test_make_room_moves_the_objects_too_near_aside(make_env, env_id):
    from vlagym.envs.objects import ROOM_GRID

    kwargs = {"num_cups": 3} if env_id == PICK else {}
    env = make_env(env_id, image_size=32, cameras=["front"], **kwargs)
    env.reset(seed=0)
    u = env.unwrapped
    (x0, x1), (y0, y1) = WORKSPACE
    target = u.target
    others = [o for o in u.objects if o.present and o is not target]
    assert len(others) >= 2
    start = {o.name: (o.pos(u.data), o.yaw(u.data), o.color) for o in others}
    near = others[0]
    xy = next(  # 5 cm from one object, inside the workspace
        tuple(p)
        for p in near.pos(u.data)[:2] + 0.05 * np.array([[1, 0], [-1, 0], [0, 1], [0, -1]])
        if x0 <= p[0] <= x1 and y0 <= p[1] <= y1
    )
    with pytest.raises(ValueError, match="objects stand at least"):
        env.reset(seed=0, options={"target_xy": xy})
    env.reset(seed=0, options={"target_xy": xy, "make_room": True})
    np.testing.assert_allclose(target.pos(u.data)[:2], xy, atol=1e-9)
    spacing = 0.13
    placed = [o for o in u.objects if o.present]
    for i, a in enumerate(placed):  # a layout the task could draw: in the workspace, every pair apart
        x, y = a.pos(u.data)[:2]
        assert x0 - 1e-9 <= x <= x1 + 1e-9 and y0 - 1e-9 <= y <= y1 + 1e-9
        for b in placed[i + 1 :]:
            assert np.hypot(*(a.pos(u.data)[:2] - b.pos(u.data)[:2])) >= spacing - 1e-9
    for o in others:  # heading and colour kept; only the objects too near moved
        pos, yaw, color = start[o.name]
        assert o.color == color and abs(o.yaw(u.data) - yaw) < 1e-6
        if np.hypot(*(pos[:2] - xy)) >= spacing:
            np.testing.assert_array_equal(o.pos(u.data), pos)
    # the near object moved as little as the rule allows (to the grid's resolution)
    moved = np.hypot(*(near.pos(u.data)[:2] - start[near.name][0][:2]))
    gx, gy = np.meshgrid(np.linspace(x0, x1, 201), np.linspace(y0, y1, 401))
    fine = np.stack([gx.ravel(), gy.ravel()], axis=1)
    free = np.all([np.hypot(*(fine - o.pos(u.data)[:2]).T) >= spacing for o in placed if o is not near], axis=0)
    assert moved <= np.hypot(*(fine[free] - start[near.name][0][:2]).T).min() + ROOM_GRID
    state = u.sim_state()
    env.reset(seed=0, options={"target_xy": xy, "make_room": True})  # the same layout again: it draws nothing
    np.testing.assert_array_equal(u.sim_state(), state)


def test_make_room_changes_nothing_where_there_is_room_and_refuses_bad_options(make_env):
    env = make_env(PICK, num_cups=3)
    env.reset(seed=3)
    u = env.unwrapped
    state = u.sim_state()
    here = tuple(u.target.pos(u.data)[:2])  # where the seed put the target: the other cups stand apart from it
    env.reset(seed=3, options={"target_xy": here, "make_room": True})
    np.testing.assert_array_equal(u.sim_state(), state)  # nothing was in the way, so nothing moved
    with pytest.raises(ValueError, match=r"options\['make_room'\] must be True or False"):
        env.reset(seed=3, options={"target_xy": (0.0, 0.0), "make_room": "yes"})
    with pytest.raises(ValueError, match=r"moves objects aside for options\['target_xy'\], which is missing"):
        env.reset(seed=3, options={"make_room": True})


def test_make_room_refuses_when_no_spot_is_left(make_env):
    from vlagym.envs.objects import move_object

    env = make_env(PICK, num_cups=3)
    env.reset(seed=0)
    u = env.unwrapped
    others = [o for o in u.objects if o.present and o is not u.target]
    with pytest.raises(ValueError, match="the workspace has no spot 0.3 m from every object"):
        move_object(u.model, u.data, u.target, others, (0.0, 0.0), WORKSPACE, 0.3, make_room=True)
