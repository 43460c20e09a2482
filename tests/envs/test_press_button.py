"""VLA-PressButton-v0: rewards, instructions, layouts per split, button physics, the latched wrong press."""

from __future__ import annotations

import numpy as np
import pytest
from expert_runs import names, run_expert

import vlagym
from vlagym.envs.objects import COLORS
from vlagym.envs.press_button import CAP_REST_TOP, HELDOUT_BUTTON_COLOR, PRESSED_DEPTH, TRAVEL, PressButtonEnv
from vlagym.envs.splits import SPLITS

ENV_ID = "VLA-PressButton-v0"
CUSTOM_WEIGHTS = {"reach": 1.0, "press": 0.0}


def aim_expert_at(base, monkeypatch, index: int) -> None:
    """Make the expert go for button `index` (the env still judges by the instruction's button)."""
    original = type(base).expert_target

    def expert_target():
        saved = base.target_index
        base.target_index = index
        try:
            return original(base)
        finally:
            base.target_index = saved

    monkeypatch.setattr(base, "expert_target", expert_target)


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
    train, heldout = PressButtonEnv.templates["train"], PressButtonEnv.templates["heldout"]
    assert train and heldout
    assert not set(train) & set(heldout)
    for color in COLORS:
        assert not {t.format(color=color) for t in train} & {t.format(color=color) for t in heldout}


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_template_renders_for_every_colour(split, make_env):
    env = make_env(ENV_ID, obs_mode="rgb", image_size=16)
    text_space = env.observation_space["instruction"]
    for template in PressButtonEnv.templates[split]:
        for color in COLORS:
            instruction = template.format(color=color)
            assert names(instruction, color), instruction
            assert names(instruction, "button") or names(instruction, "buttons"), instruction
            assert "{" not in instruction and text_space.contains(instruction), instruction


# ---------------------------------------------------------------------------- layouts per split


@pytest.mark.parametrize("split", SPLITS)
def test_layout_counts_and_colours_per_split(split, make_env):
    env = make_env(ENV_ID, split=split)
    base = env.unwrapped
    lo, hi = PressButtonEnv.distractor_counts["distractors" if split == "distractors" else "train"]
    counts, targets = set(), set()
    for seed in range(40):
        obs, info = env.reset(seed=seed)
        n = base.n_buttons
        counts.add(n - 1)
        targets.add(base.target_index)
        assert lo <= n - 1 <= hi
        assert len(set(base.colors)) == n, f"seed {seed}: repeated colours {base.colors}"
        target_color = base.colors[base.target_index]
        assert names(base.instruction, target_color)
        for i in range(4):
            rgba = base.model.geom(f"button{i}_cap").rgba
            housing = base.model.body_pos[base.button_bodies[i]]
            if i < n:
                np.testing.assert_allclose(rgba, COLORS[base.colors[i]])
                assert housing[2] == 0.0
                if i != base.target_index:
                    assert not names(base.instruction, base.colors[i])
                    assert base.colors[i] != HELDOUT_BUTTON_COLOR
            else:
                assert housing[2] < -0.5, "an unused button is on the table"
        assert (target_color == HELDOUT_BUTTON_COLOR) == (split == "unseen_combo")
        # The state names the target cap's top face, at rest, and no button is pressed.
        pos, _ = base.target_pose()
        np.testing.assert_allclose(pos[2], CAP_REST_TOP, atol=5e-4)
        np.testing.assert_allclose(obs[23:26], pos, atol=1e-6)
        assert not info["success"] and not info["wrong_button_pressed"] and info["target_depth"] < 1e-3
    assert counts == set(range(lo, hi + 1))
    assert len(targets) >= 2


# ---------------------------------------------------------------------------- button physics


def test_buttons_rest_up_and_spring_back(make_env):
    env = make_env(ENV_ID, terminate_on_success=False)
    base = env.unwrapped
    steps = run_expert(env, 0, max_steps=35)
    assert steps[-1][-1]["success"]
    depth = base.depths()[base.target_index]
    assert PRESSED_DEPTH < depth < TRAVEL + 0.002, f"pressed {depth * 1000:.1f} mm"
    others = np.delete(base.depths(), base.target_index)
    assert np.all(others < 5e-4), "the untouched buttons sagged"
    up = np.zeros(7, np.float32)
    up[2], up[6] = 1.0, 1.0  # straight up, gripper closed
    for _ in range(10):
        *_, info = env.step(up)
    assert base.depths()[base.target_index] < 1e-3, "the cap did not spring back up"
    assert not info["success"] and not info["target_pressed"]


# ---------------------------------------------------------------------------- success and the latch


def test_pressing_another_button_first_spoils_the_episode(make_env, monkeypatch):
    env = make_env(ENV_ID, terminate_on_success=False)
    base = env.unwrapped
    env.reset(seed=1)
    wrong = (base.target_index + 1) % base.n_buttons
    aim_expert_at(base, monkeypatch, wrong)
    steps = run_expert(env, 1, max_steps=35)
    info = steps[-1][-1]
    assert info["wrong_button_pressed"] and not info["target_pressed"] and not info["success"]
    assert steps[-1][1] == 0.0, "reward after a wrong press"
    # Now go for the right one: it gets pressed, the latch holds, no success.
    monkeypatch.undo()
    expert = vlagym.make_expert(env)
    expert.reset()
    infos = []
    for _ in range(45):
        *_, info = env.step(expert())
        infos.append(info)
    assert any(i["target_pressed"] for i in infos), "the right button was never pressed"
    assert all(i["wrong_button_pressed"] and not i["success"] for i in infos)
    # reset clears the latch
    _, info = env.reset(seed=1)
    assert not info["wrong_button_pressed"]


@pytest.mark.parametrize("seed", range(3))
def test_expert_presses_the_named_button(seed, make_env):
    env = make_env(ENV_ID)
    steps = run_expert(env, seed)
    _, _, terminated, truncated, info = steps[-1]
    assert info["success"] and terminated and not truncated, f"seed {seed}: failed in {len(steps)} steps"
    assert not any(i["wrong_button_pressed"] for *_, i in steps)
