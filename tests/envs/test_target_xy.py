"""`reset(options={"target_xy": ...})`: the target moved on the table, the rest of the episode the seed's."""

from __future__ import annotations

import numpy as np
import pytest

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
