"""VLA-PickObject-v0: rewards, instructions, scene composition per split, success, the expert."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from expert_runs import names, run_expert

import vlagym
from vlagym.envs.objects import COLORS
from vlagym.envs.pick_object import DISTRACTOR_SPACING, MIN_SPACING, WORKSPACE, PickObjectEnv
from vlagym.envs.splits import HELDOUT_COLOR, SPLITS

ENV_ID = "VLA-PickObject-v0"
LIFT_HEIGHT = 0.05  # success threshold on the target bottom's height (from the task docstring)
KINDS = ("cup", "block", "can")


def first_seed(env, predicate, start: int = 0) -> int:
    for seed in range(start, start + 300):
        env.reset(seed=seed)
        if predicate(env.unwrapped):
            return seed
    raise AssertionError("predicate too rare")


# ---------------------------------------------------------------------------- rewards


def test_dense_reward_is_weighted_sum_of_terms(make_env):
    env = make_env(ENV_ID, reward_mode="dense")
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
    assert min(rewards) < 0.5 < max(rewards)
    assert rewards[-1] > 0.9  # the last step of the second episode is a success


def test_sparse_reward_is_success(make_env):
    env = make_env(ENV_ID, reward_mode="sparse")
    rewards = []
    for _, reward, _, _, info in run_expert(env, 0):
        assert reward == float(info["success"])
        rewards.append(reward)
    assert rewards[-1] == 1.0 and 0.0 in rewards


# ---------------------------------------------------------------------------- instructions


def test_template_splits_disjoint_and_nonempty():
    train, heldout = PickObjectEnv.templates["train"], PickObjectEnv.templates["heldout"]
    assert train and heldout
    assert len(set(train)) == len(train) and len(set(heldout)) == len(heldout)
    for color in COLORS:
        for kind in KINDS:
            rendered = [{t.format(color=color, kind=kind) for t in ts} for ts in (train, heldout)]
            assert not rendered[0] & rendered[1]


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_template_renders_for_every_colour_and_kind(split, make_env):
    env = make_env(ENV_ID, obs_mode="rgb", image_size=16)
    text_space = env.observation_space["instruction"]
    for template in PickObjectEnv.templates[split]:
        for color in COLORS:
            for kind in KINDS:
                instruction = template.format(color=color, kind=kind)
                assert names(instruction, color) and names(instruction, kind), instruction
                assert text_space.contains(instruction), f"{instruction!r} is not in the Text space"


# ---------------------------------------------------------------------------- scene per split


@pytest.mark.parametrize("split", SPLITS)
def test_scene_composition_per_split(split, make_env):
    env = make_env(ENV_ID, split=split)
    base = env.unwrapped
    counts_key = "distractors" if split == "distractors" else "train"
    lo, hi = PickObjectEnv.distractor_counts[counts_key]
    spacing = DISTRACTOR_SPACING if split == "distractors" else MIN_SPACING
    seen_counts, seen_kinds = set(), set()
    for seed in range(40):
        _, info = env.reset(seed=seed)
        present = [o for o in base.objects if o.present]
        others = [o for o in present if o is not base.target]
        colors = [o.color for o in present]
        assert base.target in present
        assert lo <= len(others) <= hi, f"seed {seed}: {len(others)} distractors"
        assert any(o.kind != base.target.kind for o in others), f"seed {seed}: no distractor of another kind"
        assert len(set(colors)) == len(colors), f"seed {seed}: repeated colours {colors}"
        for obj in present:
            np.testing.assert_allclose(base.model.geom(f"{obj.name}_body").rgba, COLORS[obj.color])
        # Colour rules: only the unseen_combo target ever wears its kind's held-out colour.
        if split == "unseen_combo":
            assert base.target.color == HELDOUT_COLOR[base.target.kind], f"seed {seed}"
        for obj in present:
            if not (split == "unseen_combo" and obj is base.target):
                assert obj.color != HELDOUT_COLOR[obj.kind], f"seed {seed}: {obj.describe()} in {split}"
        # The instruction names the target's colour and kind, and no other object's colour.
        instruction = info["instruction"]
        assert names(instruction, base.target.color) and names(instruction, base.target.kind), instruction
        assert not any(names(instruction, o.color) for o in others), instruction
        xy = np.array([o.pos(base.data)[:2] for o in present])
        (x0, x1), (y0, y1) = WORKSPACE
        assert np.all((xy[:, 0] >= x0) & (xy[:, 0] <= x1) & (xy[:, 1] >= y0) & (xy[:, 1] <= y1))
        gaps = np.linalg.norm(xy[:, None] - xy[None], axis=-1)[np.triu_indices(len(xy), 1)]
        assert np.all(gaps >= spacing - 1e-9), f"seed {seed}: objects {gaps.min():.3f} m apart"
        seen_counts.add(len(others))
        seen_kinds.add(base.target.kind)
    assert seen_counts == set(range(lo, hi + 1))
    assert seen_kinds == set(KINDS)


def test_reset_succeeds_for_every_seed(make_env):
    for split in ("train", "distractors"):
        env = make_env(ENV_ID, split=split)
        for seed in range(300):
            env.reset(seed=seed)


# ---------------------------------------------------------------------------- success and the expert


@pytest.mark.parametrize("kind", KINDS)
def test_expert_succeeds_for_every_kind(kind, make_env):
    env = make_env(ENV_ID)
    seed = first_seed(env, lambda e: e.target.kind == kind)
    steps = run_expert(env, seed)
    _, _, terminated, truncated, info = steps[-1]
    assert info["success"] and terminated and not truncated, f"{kind}, seed {seed}: failed in {len(steps)} steps"
    assert info["grasped"] and info["target_height"] >= LIFT_HEIGHT
    assert any(info["grasped"] and not info["success"] for *_, info in steps), "a grasp alone was success"


def test_no_success_at_reset(make_env):
    env = make_env(ENV_ID)
    for seed in range(10):
        _, info = env.reset(seed=seed)
        assert not info["success"] and not info["grasped"]


def test_object_in_the_air_without_a_grasp_is_not_success(make_env):
    env = make_env(ENV_ID)
    base = env.unwrapped
    env.reset(seed=0)
    pos = base.target.pos(base.data)
    base.target.place(base.model, base.data, pos[0], pos[1], 0.0, base.target.color, z=2 * LIFT_HEIGHT)
    mujoco.mj_forward(base.model, base.data)
    evaluation = base.evaluate()
    assert evaluation["lifted"] and not evaluation["grasped"] and not evaluation["success"]


def test_lifting_another_object_is_not_success(make_env, monkeypatch):
    env = make_env(ENV_ID, terminate_on_success=False)
    base = env.unwrapped
    seed = first_seed(env, lambda e: True)
    env.reset(seed=seed)
    other_name = next(o.name for o in base.objects if o.present and o.kind != base.target.kind)
    original = type(base).expert_target

    def expert_target_of_other():
        saved = base.target
        base.target = next(o for o in base.objects if o.name == other_name)
        try:
            return original(base)
        finally:
            base.target = saved

    monkeypatch.setattr(base, "expert_target", expert_target_of_other)
    expert = vlagym.make_expert(env)
    obs, _ = env.reset(seed=seed)
    expert.reset()
    infos = []
    for _ in range(60):
        obs, _, terminated, _, info = env.step(expert(obs))
        infos.append(info)
    assert base.data.xpos[base.model.body(other_name).id][2] > LIFT_HEIGHT, "the other object was not lifted"
    assert not any(info["success"] for info in infos)
    assert info["wrong_object_grasped"] and not info["grasped"]
