"""VLA-StackBlocks-v0: rewards, instructions, layouts per split, success geometry, the stacking expert."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from expert_runs import names, run_expert

import vlagym
from vlagym.envs.objects import BLOCK_HALF, COLORS
from vlagym.envs.splits import HELDOUT_COLOR, SPLITS
from vlagym.envs.stack_blocks import StackBlocksEnv, StackExpert

ENV_ID = "VLA-StackBlocks-v0"
CUSTOM_WEIGHTS = {"reach": 1.0, "grasp": 0.0, "place": 2.0, "stacked": 1.0}


def present(base) -> list:
    return [o for o in base.objects if o.present]


def put(base, obj, pos, yaw: float = 0.0) -> None:
    """Teleport a block (at rest) and recompute the derived state."""
    obj.place(base.model, base.data, pos[0], pos[1], yaw, obj.color, z=pos[2])
    mujoco.mj_forward(base.model, base.data)


# ---------------------------------------------------------------------------- rewards


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
    assert rewards[-1] > 0.9


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
    train, heldout = StackBlocksEnv.templates["train"], StackBlocksEnv.templates["heldout"]
    assert train and heldout
    assert not set(train) & set(heldout)
    fields = {"color": "red", "base_color": "blue"}
    assert not {t.format(**fields) for t in train} & {t.format(**fields) for t in heldout}


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_template_renders_and_says_which_goes_on_which(split, make_env):
    env = make_env(ENV_ID, obs_mode="rgb", image_size=16)
    text_space = env.observation_space["instruction"]
    for template in StackBlocksEnv.templates[split]:
        for color in COLORS:
            for base_color in COLORS:
                if base_color == color:
                    continue
                instruction = template.format(color=color, base_color=base_color)
                assert names(instruction, color) and names(instruction, base_color), instruction
                assert names(instruction, "block") or names(instruction, "cube"), instruction
                # The block to move is always named first: the order carries the meaning.
                assert instruction.index(f"{color} ") < instruction.index(f"{base_color} "), instruction
                assert "{" not in instruction and text_space.contains(instruction), instruction


# ---------------------------------------------------------------------------- layouts per split


@pytest.mark.parametrize("split", SPLITS)
def test_layout_counts_and_colours_per_split(split, make_env):
    env = make_env(ENV_ID, split=split)
    base = env.unwrapped
    lo, hi = StackBlocksEnv.distractor_counts["distractors" if split == "distractors" else "train"]
    held_out = HELDOUT_COLOR["block"]
    counts = set()
    for seed in range(40):
        _, info = env.reset(seed=seed)
        blocks = present(base)
        colors = [o.color for o in blocks]
        counts.add(len(blocks) - 1)
        assert lo <= len(blocks) - 1 <= hi
        assert len(set(colors)) == len(colors), f"seed {seed}: repeated colours {colors}"
        assert base.target in blocks and base.base_block in blocks and base.target is not base.base_block
        assert names(base.instruction, base.target.color) and names(base.instruction, base.base_block.color)
        for obj in blocks:
            np.testing.assert_allclose(base.model.geom(f"{obj.name}_body").rgba, COLORS[obj.color])
            assert obj.pos(base.data)[2] == 0.0
            if obj not in (base.target, base.base_block):
                assert not names(base.instruction, obj.color), f"seed {seed}: {base.instruction!r}"
            if obj is not base.target:
                assert obj.color != held_out
        assert (base.target.color == held_out) == (split == "unseen_combo")
        np.testing.assert_allclose(base.goal_position(), base.base_block.pos(base.data) + (0, 0, 2 * BLOCK_HALF))
        assert not info["success"]
    assert counts == set(range(lo, hi + 1))


# ---------------------------------------------------------------------------- success geometry


def test_success_needs_the_named_block_centred_on_the_named_base(make_env):
    env = make_env(ENV_ID)
    base = env.unwrapped
    seed = next(s for s in range(50) if env.reset(seed=s) and len(present(base)) == 3)
    env.reset(seed=seed)
    top, bottom = base.target, base.base_block
    third = next(o for o in present(base) if o not in (top, bottom))
    start = top.pos(base.data)
    on_bottom = bottom.pos(base.data) + (0, 0, 2 * BLOCK_HALF)
    put(base, top, on_bottom, yaw=bottom.yaw(base.data))
    assert base.evaluate()["success"]
    put(base, top, on_bottom + (0.8 * BLOCK_HALF, 0, 0))  # overhangs too far
    assert not base.evaluate()["success"]
    put(base, top, on_bottom + (0, 0, 0.02))  # floating above it
    assert not base.evaluate()["success"]
    put(base, top, third.pos(base.data) + (0, 0, 2 * BLOCK_HALF))  # on the wrong block
    assert not base.evaluate()["success"]
    # Reversed: the named base block on the named top block.
    put(base, top, start)
    put(base, bottom, start + (0, 0, 2 * BLOCK_HALF))
    evaluation = base.evaluate()
    assert not evaluation["success"] and not evaluation["base_on_table"]


def test_reversed_stack_by_the_expert_is_not_success(make_env, monkeypatch):
    """The expert with the roles swapped builds blue-on-red for "red on blue": never success."""
    env = make_env(ENV_ID, terminate_on_success=False)
    base = env.unwrapped
    built = 0
    for seed in range(3):
        env.reset(seed=seed)
        top, bottom = base.target, base.base_block
        monkeypatch.setattr(base, "target", bottom)
        monkeypatch.setattr(base, "base_block", top)
        expert = vlagym.make_expert(env)
        expert.reset()
        infos = []
        for _ in range(90):
            monkeypatch.setattr(base, "target", bottom)
            monkeypatch.setattr(base, "base_block", top)
            action = expert()
            monkeypatch.setattr(base, "target", top)  # the env judges with the instruction's roles
            monkeypatch.setattr(base, "base_block", bottom)
            *_, info = env.step(action)
            infos.append(info)
        assert not any(i["success"] for i in infos), f"seed {seed}"
        gap = bottom.pos(base.data) - top.pos(base.data)
        built += bool(np.linalg.norm(gap[:2]) < BLOCK_HALF and abs(gap[2] - 2 * BLOCK_HALF) < 0.01)
        monkeypatch.undo()
    assert built >= 2, "the swapped expert rarely built the reversed stack: the check proved little"


# ---------------------------------------------------------------------------- the expert


@pytest.mark.parametrize("seed", range(3))
def test_expert_stacks_and_lets_go(seed, make_env):
    env = make_env(ENV_ID)
    steps = run_expert(env, seed)
    _, _, terminated, truncated, info = steps[-1]
    assert info["success"] and terminated and not truncated, f"seed {seed}: failed in {len(steps)} steps"
    assert info["released"] and info["base_on_table"] and info["horizontal_offset"] < 0.6 * BLOCK_HALF


class _SetDownAndHold(StackExpert):
    """Sets the block down on the base and keeps holding it a few steps before letting go."""

    release_clearance = 0.002
    hold_steps = 5

    def reset(self) -> None:
        super().reset()
        self.held = 0

    def act(self) -> np.ndarray:
        if self.phase == "release" and self.held < self.hold_steps:
            self.held += 1
            return self.servo(self.ee, self.yaw, 1.0)
        return super().act()


def test_a_block_in_place_but_still_held_is_not_success(make_env):
    env = make_env(ENV_ID, terminate_on_success=False)
    expert = _SetDownAndHold(env)
    env.reset(seed=0)
    expert.reset()
    infos = []
    for _ in range(90):
        *_, info = env.step(expert())
        infos.append(info)
    held_in_place = [i for i in infos if i["on_top"] and i["grasped"]]
    assert held_in_place, "the block was never held in place on the base"
    assert not any(i["success"] for i in held_in_place)
    assert infos[-1]["success"] and infos[-1]["released"]
