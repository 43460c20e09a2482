"""The drawer tasks: VLA-OpenDrawer-v0, VLA-CloseDrawer-v0, VLA-PutCupInDrawer-v0."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from expert_runs import names, run_expert

import vlagym
from vlagym.envs import cabinet, drawer, put_cup_in_drawer
from vlagym.envs.objects import COLORS, CUP_RADIUS
from vlagym.envs.splits import HELDOUT_COLOR

OPEN, CLOSE, PUT = "VLA-OpenDrawer-v0", "VLA-CloseDrawer-v0", "VLA-PutCupInDrawer-v0"
TASK_IDS = (OPEN, CLOSE, PUT)
CLASSES = {OPEN: drawer.OpenDrawerEnv, CLOSE: drawer.CloseDrawerEnv, PUT: put_cup_in_drawer.PutCupInDrawerEnv}
# Success thresholds, from the task docstrings.
OPEN_SUCCESS, CLOSED_SUCCESS = 0.10, 0.01


def present(base) -> list:
    return [o for o in base.objects if o.present]


# ---------------------------------------------------------------------------- rewards


@pytest.mark.parametrize("env_id", TASK_IDS)
def test_dense_reward_is_weighted_sum_of_terms(env_id, make_env):
    env = make_env(env_id, reward_mode="dense")
    weights = env.unwrapped.reward_weights
    assert sum(weights.values()) == pytest.approx(1.0)
    rewards = []
    for _, reward, _, _, info in run_expert(env, 0):
        terms = {k[len("reward_") :]: v for k, v in info.items() if k.startswith("reward_")}
        assert terms.keys() == weights.keys()
        for name, value in terms.items():
            assert 0.0 <= value <= 1.0, f"term {name}={value}"
        assert reward == pytest.approx(sum(weights[k] * terms[k] for k in weights), abs=1e-9)
        rewards.append(reward)
    assert info["success"]
    assert min(rewards) < 0.5 < max(rewards), "the expert's episode should span the reward range"
    assert rewards[-1] > 0.85


@pytest.mark.parametrize("env_id", TASK_IDS)
def test_sparse_reward_is_success(env_id, make_env):
    env = make_env(env_id, reward_mode="sparse")
    steps = run_expert(env, 1)
    for _, reward, terminated, _, info in steps:
        assert reward == float(info["success"])
        assert terminated == info["success"]
    assert steps[-1][1] == 1.0 and steps[0][1] == 0.0


# ---------------------------------------------------------------------------- instructions


@pytest.mark.parametrize("env_id", TASK_IDS)
def test_template_splits_disjoint_and_nonempty(env_id):
    templates = CLASSES[env_id].templates
    train, heldout = templates["train"], templates["heldout"]
    assert train and heldout
    assert len(set(train)) == len(train) and len(set(heldout)) == len(heldout)
    for color in COLORS:
        assert not {t.format(color=color) for t in train} & {t.format(color=color) for t in heldout}


def test_open_and_close_instructions_say_which():
    """The drawer is the only fixture in both tasks: the words alone tell them apart."""
    for split in ("train", "heldout"):
        for text in drawer.OpenDrawerEnv.templates[split]:
            assert names(text, "drawer") and (names(text, "open") or names(text, "out")), text
            assert not any(names(text, w) for w in ("close", "shut", "in", "into")), text
        for text in drawer.CloseDrawerEnv.templates[split]:
            assert names(text, "drawer") and any(names(text, w) for w in ("close", "closed", "shut", "in", "into"))
            assert not (names(text, "open") or names(text, "out")), text


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_put_cup_template_names_colour_cup_and_drawer(split, make_env):
    space = make_env(PUT, obs_mode="rgb", image_size=16).observation_space["instruction"]
    for template in put_cup_in_drawer.PutCupInDrawerEnv.templates[split]:
        for color in COLORS:
            text = template.format(color=color)
            assert names(text, color) and (names(text, "cup") or names(text, "mug")), text
            assert names(text, "drawer") and "{" not in text and space.contains(text), text


@pytest.mark.parametrize("env_id", TASK_IDS)
@pytest.mark.parametrize("instruction_split", ["train", "heldout"])
def test_instructions_come_from_their_split(env_id, instruction_split, make_env):
    env = make_env(env_id, instruction_split=instruction_split)
    base = env.unwrapped
    templates = CLASSES[env_id].templates[instruction_split]
    seen = set()
    for seed in range(40):
        _, info = env.reset(seed=seed)
        matches = [t for t in templates if t.format(**base.instruction_fields()) == info["instruction"]]
        assert matches, f"seed {seed}: {info['instruction']!r}"
        seen.update(matches)
    assert seen == set(templates)


def test_put_cup_instruction_is_necessary(make_env):
    env = make_env(PUT)
    base = env.unwrapped
    targets, two_cup_scenes = set(), 0
    for seed in range(60):
        env.reset(seed=seed)
        cups = [o for o in present(base) if o.kind == "cup"]
        assert base.target in cups and names(base.instruction, base.target.color)
        for other in cups:
            if other is not base.target:
                assert not names(base.instruction, other.color)
        if len(cups) == 2:
            two_cup_scenes += 1
            targets.add(base.target.name)
    assert two_cup_scenes >= 15 and targets == {"cup0", "cup1"}


# ---------------------------------------------------------------------------- scene and splits


@pytest.mark.parametrize("env_id", TASK_IDS)
@pytest.mark.parametrize("split", ["train", "distractors", "unseen_combo"])
def test_counts_and_colours_per_split(env_id, split, make_env):
    env = make_env(env_id, split=split)
    base = env.unwrapped
    lo, hi = base.distractor_counts["distractors" if split == "distractors" else "train"]
    counts = set()
    for seed in range(60):
        env.reset(seed=seed)
        objs = present(base)
        others = [o for o in objs if o is not base.target] if env_id == PUT else objs
        assert lo <= len(others) <= hi, f"seed {seed}: {len(others)} distractors"
        counts.add(len(others))
        colors = [o.color for o in objs] + [base.drawer_color]
        assert len(set(colors)) == len(colors), f"seed {seed}: repeated colours {colors}"
        rgba = base.model.geom("drawer_front").rgba
        np.testing.assert_allclose(rgba, COLORS[base.drawer_color])
        for obj in objs:
            np.testing.assert_allclose(base.model.geom(f"{obj.name}_body").rgba, COLORS[obj.color])
            unseen_target = split == "unseen_combo" and env_id == PUT and obj is base.target
            assert (obj.color == HELDOUT_COLOR[obj.kind]) == unseen_target, f"seed {seed}: {obj.describe()}"
        drawer_unseen = split == "unseen_combo" and env_id != PUT
        assert (base.drawer_color == cabinet.DRAWER_HELDOUT_COLOR) == drawer_unseen
        if split != "distractors":
            assert all(o.kind == "cup" for o in objs)
    assert counts == set(range(lo, hi + 1))


@pytest.mark.parametrize("env_id", TASK_IDS)
def test_start_state_is_clear_and_in_range(env_id, make_env):
    env = make_env(env_id, split="distractors")
    base = env.unwrapped
    m, d = base.model, base.data
    lo, hi = CLASSES[env_id].start_opening
    poses = []
    for seed in range(100):
        env.reset(seed=seed)
        assert lo <= base.opening <= hi
        x, y, _ = base.cab_pos
        assert 0.0 <= x <= 0.06 and -0.15 <= y <= 0.15 and abs(np.rad2deg(base.cab_yaw)) <= 15.0
        poses.append((x, y, base.cab_yaw))
        for c in d.contact[: d.ncon]:
            pair = {m.geom(c.geom[0]).name, m.geom(c.geom[1]).name}
            assert "table" in pair, f"seed {seed}: {pair} touch at reset"
        for obj in present(base):
            # Beside the cabinet and out of the path of the drawer pulled fully out.
            local = base.cab_rot.T @ (obj.pos(d) - base.cab_pos)
            in_path = -cabinet.MAX_OPENING - 0.1 < local[0] < cabinet.CAB_DEPTH
            assert not (in_path and abs(local[1]) < cabinet.CAB_HALF_W + 0.05), f"seed {seed}: {obj.name} at {local}"
    assert np.ptp(np.array(poses), axis=0).min() > 0.04, "the cabinet pose should vary"


def test_reset_succeeds_for_many_crowded_seeds(make_env):
    env = make_env(PUT, split="distractors")
    for seed in range(500):
        env.reset(seed=seed)


def test_drawer_slides_along_the_cabinets_minus_x(make_env):
    env = make_env(CLOSE)
    base = env.unwrapped
    m, d = base.model, base.data
    assert tuple(m.joint("drawer_slide").range) == (0.0, cabinet.MAX_OPENING)
    env.reset(seed=3)
    handle = m.body("drawer_handle").id
    d.qpos[base.slide_qpos] = 0.0
    mujoco.mj_forward(m, d)
    closed = d.xpos[handle].copy()
    np.testing.assert_allclose(closed, base.drawer_point(cabinet.HANDLE), atol=1e-9)
    d.qpos[base.slide_qpos] = 0.12
    mujoco.mj_forward(m, d)
    np.testing.assert_allclose(d.xpos[handle] - closed, 0.12 * base.pull_direction, atol=1e-9)
    robot_base = m.body("base").id
    assert np.linalg.norm(d.xpos[handle] - d.xpos[robot_base]) < np.linalg.norm(closed - d.xpos[robot_base])
    # The interior is deep enough for a cup and the cabinet is low.
    assert cabinet.WALL_TOP - cabinet.FLOOR_Z >= 0.06 and cabinet.CAB_TOP < 0.2
    state = base._task_state()
    assert state[16] == pytest.approx(0.12), "task scalar 0 is the opening"


# ---------------------------------------------------------------------------- success and the expert


@pytest.mark.parametrize("env_id", TASK_IDS)
@pytest.mark.parametrize("seed", [0, 7, 11])
def test_expert_succeeds(env_id, seed, make_env):
    env = make_env(env_id)
    steps = run_expert(env, seed)
    _, _, terminated, truncated, info = steps[-1]
    assert info["success"] and terminated and not truncated, f"{env_id} seed {seed}: failed in {len(steps)} steps"
    if env_id == OPEN:
        assert info["opening"] >= OPEN_SUCCESS
        assert any(i["handle_grasped"] for *_, i in steps), "the expert should grasp the handle"
    elif env_id == CLOSE:
        assert info["opening"] <= CLOSED_SUCCESS
    else:
        assert info["in_drawer"] and info["upright"] and not info["grasped"]
        assert info["opening"] >= OPEN_SUCCESS


@pytest.mark.parametrize("env_id", TASK_IDS)
def test_no_success_at_reset(env_id, make_env):
    env = make_env(env_id)
    for seed in range(20):
        _, info = env.reset(seed=seed)
        assert not info["success"]


def test_opening_short_of_threshold_is_not_success(make_env):
    env = make_env(OPEN, terminate_on_success=False)
    expert = vlagym.make_expert(env)
    expert.pull_to = 0.08
    env.reset(seed=2)
    expert.reset()
    for _ in range(50):
        *_, info = env.step(expert())
        assert not info["success"]
    assert 0.07 < info["opening"] < OPEN_SUCCESS and info["handle_grasped"]


def test_closing_short_of_threshold_is_not_success(make_env):
    env = make_env(CLOSE, terminate_on_success=False)
    expert = vlagym.make_expert(env)
    expert.push_to = 0.03
    env.reset(seed=2)
    expert.reset()
    for _ in range(50):
        *_, info = env.step(expert())
        assert not info["success"]
    assert CLOSED_SUCCESS < info["opening"] < 0.05


def test_put_cup_success_needs_the_cup_upright_on_the_drawer_floor(make_env):
    env = make_env(PUT)
    base = env.unwrapped
    m, d = base.model, base.data
    env.reset(seed=0)
    d.qpos[base.slide_qpos] = 0.15
    cup = base.target

    def put(local, tilt: float = 0.0) -> dict:
        a = cup.qpos_adr
        d.qpos[a : a + 3] = base.drawer_point(local, 0.15)
        d.qpos[a + 3 : a + 7] = (np.cos(tilt / 2), np.sin(tilt / 2), 0.0, 0.0)
        mujoco.mj_forward(m, d)
        return base.evaluate()

    z = cabinet.FLOOR_Z
    assert put((0.07, 0.0, z))["success"]
    assert put((0.12, 0.03, z))["success"], "the covered part of the interior counts too"
    assert not put((0.07, 0.0, z), tilt=np.pi / 2)["success"], "lying down"
    assert not put((0.07, 0.0, z + 0.05))["success"], "held above the floor"
    assert not put((-0.05, 0.0, 0.0))["success"], "on the table in front of the drawer"
    assert not put((0.07, 0.12, z))["success"], "outside the side wall"


def test_put_wrong_cup_in_drawer_is_not_success(make_env, monkeypatch):
    env = make_env(PUT, terminate_on_success=False)
    base = env.unwrapped
    seed = next(s for s in range(100) if env.reset(seed=s) and len(present(base)) == 2)
    env.reset(seed=seed)
    other = next(o for o in present(base) if o is not base.target)
    original = type(base).expert_target

    def expert_target_of_other_cup():
        saved, base.target = base.target, other
        try:
            return original(base)
        finally:
            base.target = saved

    monkeypatch.setattr(base, "expert_target", expert_target_of_other_cup)
    expert = vlagym.make_expert(env)
    env.reset(seed=seed)
    expert.reset()
    infos = [env.step(expert())[-1] for _ in range(160)]
    assert not any(i["success"] for i in infos)
    assert infos[-1]["wrong_object_in_drawer"] is True and infos[-1]["in_drawer"] is False


def test_put_expert_lets_go_where_a_cup_still_fits_between_the_walls(make_env):
    base = make_env(PUT).unwrapped
    base.reset(seed=0)
    tolerance = base.expert_goal()["tolerance"]
    # A cup let go this far off the goal, in any direction, stays clear of the side walls and inside the
    # smallest exposed interior the goal assumes.
    room = min(cabinet.INNER_HALF_W, 0.5 * put_cup_in_drawer.MIN_GOAL_DEPTH) - CUP_RADIUS
    assert 0.005 < tolerance < room


# ---------------------------------------------------------------------------- slow: held-out seeds
