"""VLA-PushCube-v0: rewards, instructions, layouts per split, success, the pushing expert."""

from __future__ import annotations

import numpy as np
import pytest
from expert_runs import names, run_expert

from vlagym.envs.expert import PickPlaceExpert
from vlagym.envs.objects import COLORS
from vlagym.envs.push_cube import ZONE_DISTANCE, ZONE_HALF, PushCubeEnv
from vlagym.envs.splits import HELDOUT_COLOR, SPLITS

ENV_ID = "VLA-PushCube-v0"


def present(base) -> list:
    return [o for o in base.objects if o.present]


def set_cube(base, obj, xy, z: float = 0.0) -> None:
    """Teleport a cube (upright, at rest) and recompute the derived state."""
    import mujoco

    obj.place(base.model, base.data, xy[0], xy[1], 0.0, obj.color, z=z)
    mujoco.mj_forward(base.model, base.data)


# ---------------------------------------------------------------------------- rewards


CUSTOM_WEIGHTS = {"reach": 1.0, "push": 0.0, "in_zone": 3.0}


@pytest.mark.parametrize("reward_weights", [None, CUSTOM_WEIGHTS], ids=["default", "custom"])
def test_dense_reward_is_weighted_sum_of_terms(reward_weights, make_env):
    env = make_env(ENV_ID, reward_weights=reward_weights)
    weights = env.unwrapped.reward_weights
    assert sum(weights.values()) == pytest.approx(1.0)
    rewards = []
    for seed in (0, 1):
        for _, reward, _, _, info in run_expert(env, seed):
            terms = {k[len("reward_") :]: v for k, v in info.items() if k.startswith("reward_")}
            assert terms.keys() == weights.keys()
            for name, value in terms.items():
                assert 0.0 <= value <= 1.0, f"term {name}={value}"
            assert reward == pytest.approx(sum(weights[k] * terms[k] for k in weights), abs=1e-9)
            rewards.append(reward)
    assert min(rewards) < 0.5 < max(rewards), "the expert's episodes should span the reward range"


def test_sparse_reward_is_success(make_env):
    env = make_env(ENV_ID, reward_mode="sparse")
    rewards = []
    for seed in (0, 1):
        for _, reward, terminated, _, info in run_expert(env, seed):
            assert reward == float(info["success"]) == float(terminated)
            rewards.append(reward)
    assert 1.0 in rewards and 0.0 in rewards


# ---------------------------------------------------------------------------- instructions


def test_template_splits_disjoint_and_nonempty():
    train, heldout = PushCubeEnv.templates["train"], PushCubeEnv.templates["heldout"]
    assert train and heldout
    assert not set(train) & set(heldout)
    for color in COLORS:
        assert not {t.format(color=color) for t in train} & {t.format(color=color) for t in heldout}


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_template_renders_for_every_colour(split, make_env):
    env = make_env(ENV_ID, obs_mode="rgb", image_size=16)
    text_space = env.observation_space["instruction"]
    for template in PushCubeEnv.templates[split]:
        for color in COLORS:
            instruction = template.format(**{"color": color})
            assert names(instruction, color), instruction
            assert names(instruction, "cube") or names(instruction, "block"), f"{instruction!r} names no kind"
            assert "{" not in instruction and text_space.contains(instruction), instruction
            others = [c for c in COLORS if c != color]
            assert not any(names(instruction, c) for c in others), f"{instruction!r} names a colour (the zone's?)"


# ---------------------------------------------------------------------------- layouts per split


@pytest.mark.parametrize("split", SPLITS)
def test_layout_counts_colours_and_zone_per_split(split, make_env):
    env = make_env(ENV_ID, split=split)
    base = env.unwrapped
    lo, hi = PushCubeEnv.distractor_counts["distractors" if split == "distractors" else "train"]
    held_out = HELDOUT_COLOR["block"]
    counts = set()
    for seed in range(40):
        _, info = env.reset(seed=seed)
        cubes = present(base)
        colors = [o.color for o in cubes]
        counts.add(len(cubes) - 1)
        assert lo <= len(cubes) - 1 <= hi, f"seed {seed}: {len(cubes) - 1} distractors"
        assert len(set(colors)) == len(colors), f"seed {seed}: repeated colours {colors}"
        assert base.target in cubes and names(base.instruction, base.target.color)
        for obj in cubes:
            np.testing.assert_allclose(base.model.geom(f"{obj.name}_body").rgba, COLORS[obj.color])
            if obj is not base.target:
                assert not names(base.instruction, obj.color), f"seed {seed}: {base.instruction!r} names {obj.color}"
                assert obj.color != held_out
        if split == "unseen_combo":
            assert base.target.color == held_out
        else:
            assert base.target.color != held_out
        # The zone: at the sampled distance, clear of every other cube, on the table, nothing in it yet.
        zone = base.goal_position()
        assert zone[2] == 0.0
        gap = np.linalg.norm(base.target.pos(base.data)[:2] - zone[:2])
        assert ZONE_DISTANCE[0] - 1e-9 <= gap <= ZONE_DISTANCE[1] + 1e-9
        for obj in cubes:
            assert np.max(np.abs(obj.pos(base.data)[:2] - zone[:2])) > ZONE_HALF, f"seed {seed}: a cube in the zone"
        assert not info["success"] and not info["other_cube_in_zone"]
    assert counts == set(range(lo, hi + 1))


# ---------------------------------------------------------------------------- success


def test_success_needs_the_named_cube_inside_and_on_the_table(make_env):
    env = make_env(ENV_ID)
    base = env.unwrapped
    env.reset(seed=3)
    zone = base.goal_position()[:2]
    inside = ZONE_HALF - 0.015
    set_cube(base, base.target, zone + (inside, -inside))
    assert base.evaluate()["success"]
    set_cube(base, base.target, zone + (ZONE_HALF - 0.005, 0.0))  # centre too close to the edge
    assert not base.evaluate()["success"]
    set_cube(base, base.target, zone, z=0.03)  # above the zone, not on the table
    evaluation = base.evaluate()
    assert evaluation["in_zone"] and not evaluation["on_table"] and not evaluation["success"]


class _HoldOnTheTableThenRelease(PickPlaceExpert):
    """Carries the cube into the zone, sets it on the table, holds it a few steps, then lets go."""

    release_clearance = 0.0
    hold_steps = 5

    def reset(self) -> None:
        super().reset()
        self.held = 0

    def act(self) -> np.ndarray:
        if self.phase == "release" and self.held < self.hold_steps:
            self.held += 1
            return self.servo(self.ee, self.yaw, 1.0)
        return super().act()


def test_a_cube_held_in_the_zone_is_not_success_until_released(make_env):
    env = make_env(ENV_ID, terminate_on_success=False)
    expert = _HoldOnTheTableThenRelease(env)
    env.reset(seed=0)
    expert.reset()
    infos = []
    for _ in range(80):
        *_, info = env.step(expert())
        infos.append(info)
    held_down = [i for i in infos if i["grasped"] and i["in_zone"] and abs(i["target_height"]) < 0.005]
    assert held_down, "the cube was never held on the table inside the zone"
    assert not any(i["success"] for i in held_down)
    assert infos[-1]["success"] and not infos[-1]["grasped"]


def test_another_cube_in_the_zone_is_not_success(make_env):
    env = make_env(ENV_ID)
    base = env.unwrapped
    env.reset(seed=4)
    other = next(o for o in present(base) if o is not base.target)
    set_cube(base, other, base.goal_position()[:2])
    evaluation = base.evaluate()
    assert evaluation["other_cube_in_zone"] and not evaluation["success"]


def test_pushing_the_wrong_cube_is_not_success(make_env, monkeypatch):
    """The expert aimed at another cube pushes it into the zone; the episode does not succeed."""
    env = make_env(ENV_ID, terminate_on_success=False)
    base = env.unwrapped
    pushed_in = 0
    for seed in range(4):
        env.reset(seed=seed)
        other_name = next(o.name for o in present(base) if o is not base.target)
        other = next(o for o in base.objects if o.name == other_name)
        monkeypatch.setattr(base, "expert_target", lambda o=other: {"pos": o.pos(base.data), "yaw": 0.0})
        steps = run_expert(env, seed, max_steps=100)
        assert not any(info["success"] for *_, info in steps), f"seed {seed}"
        pushed_in += steps[-1][-1]["other_cube_in_zone"]
        monkeypatch.undo()
    assert pushed_in >= 2, "the wrong-cube expert rarely got its cube into the zone: the check proved little"


# ---------------------------------------------------------------------------- the expert


@pytest.mark.parametrize("seed", range(3))
def test_expert_pushes_without_lifting(seed, make_env):
    env = make_env(ENV_ID)
    steps = run_expert(env, seed)
    _, _, terminated, truncated, info = steps[-1]
    assert info["success"] and terminated and not truncated, f"seed {seed}: failed in {len(steps)} steps"
    for *_, info in steps:
        assert not info["grasped"]
        assert info["on_table"], "the cube left the table: that is not pushing"


def test_expert_recovers_when_the_cube_is_knocked_off_the_push_line(make_env):
    """Mid-push, shift the cube 4 cm sideways: the closed-loop expert re-aligns and still succeeds."""
    env = make_env(ENV_ID)
    knocked = []

    def knock(base, expert, t):
        if expert.phase == "push" and not knocked and base.evaluate()["zone_distance"] < 0.1:
            cube = base.target.pos(base.data)
            to_zone = base.goal_position()[:2] - cube[:2]
            side = np.array([-to_zone[1], to_zone[0]]) / np.linalg.norm(to_zone)
            set_cube(base, base.target, cube[:2] + 0.04 * side)
            knocked.append(t)

    for seed in (0, 1):
        knocked.clear()
        steps = run_expert(env, seed, perturb=knock)
        assert knocked, f"seed {seed}: the perturbation never fired"
        assert steps[-1][-1]["success"], f"seed {seed}: no recovery after the knock at step {knocked[0]}"
