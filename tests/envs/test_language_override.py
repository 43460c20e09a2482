"""Language-control reset options: `swap_target` names another object of the scene, `instruction` sets the text."""

from __future__ import annotations

import numpy as np
import pytest

PICK = "VLA-PickCup-v0"


def object_poses(env) -> np.ndarray:
    u = env.unwrapped
    return np.array([np.r_[o.pos(u.data), o.present] for o in u.objects])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_swap_target_names_another_present_cup_in_the_same_scene(make_env, seed):
    env = make_env(PICK, num_cups=3)
    _, info = env.reset(seed=seed)
    original, poses, colors = env.unwrapped.target, object_poses(env), [o.color for o in env.unwrapped.objects]
    _, swapped_info = env.reset(seed=seed, options={"swap_target": True})
    u = env.unwrapped
    assert u.target is not original and u.target.present and u.target.kind == "cup"
    assert u.target.color != original.color and u.target.color in swapped_info["instruction"]
    assert original.color not in swapped_info["instruction"]
    np.testing.assert_array_equal(object_poses(env), poses)  # same layout: the options draw nothing
    assert [o.color for o in u.objects] == colors
    # the instruction differs only in the colour word (same template)
    assert swapped_info["instruction"].replace(u.target.color, original.color) == info["instruction"]
    # the task state describes the new target
    np.testing.assert_allclose(u._task_state()[0:3], u.target.pos(u.data))


def test_swap_target_in_pick_object(make_env):
    env = make_env("VLA-PickObject-v0")
    _, info = env.reset(seed=3)
    original = env.unwrapped.target
    _, swapped = env.reset(seed=3, options={"swap_target": True})
    target = env.unwrapped.target
    assert target is not original and target.present
    assert f"{target.color} {target.kind}" in swapped["instruction"]
    assert swapped["instruction"] != info["instruction"]


def test_empty_and_custom_instruction(make_env):
    env = make_env(PICK, obs_mode="rgb", image_size=16, cameras=["front"])
    _, info = env.reset(seed=4)
    target = env.unwrapped.target
    obs, info = env.reset(seed=4, options={"instruction": ""})
    assert info["instruction"] == "" and obs["instruction"] == "" and env.unwrapped.target is target
    assert env.observation_space.contains(obs)
    obs, *_, info = env.step(np.zeros(7, np.float32))
    assert obs["instruction"] == "" and info["instruction"] == ""
    _, info = env.reset(seed=4, options={"instruction": "lift the mauve teapot"})
    assert info["instruction"] == "lift the mauve teapot" and env.unwrapped.target is target
    _, info = env.reset(seed=4)  # options apply to one reset only
    assert info["instruction"] != "" and "teapot" not in info["instruction"]


def test_bad_options_raise_clearly(make_env):
    with pytest.raises(ValueError, match="does not support"):
        make_env("VLA-PushCube-v0").reset(seed=0, options={"swap_target": True})
    with pytest.raises(ValueError, match="no other object"):
        make_env(PICK, num_cups=1).reset(seed=0, options={"swap_target": True})
    env = make_env(PICK)
    with pytest.raises(ValueError, match="must be a string"):
        env.reset(seed=0, options={"instruction": 3})
    with pytest.raises(ValueError, match="invalid"):
        env.reset(seed=0, options={"instruction": "pick up the cup\n"})
