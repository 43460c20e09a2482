"""VLA-PickCup-v0: rewards, instructions, success, the expert, grasp quality, control modes."""

from __future__ import annotations

import numpy as np
import pytest
from expert_runs import names, run_expert

import vlagym
from vlagym.envs.objects import COLORS
from vlagym.envs.pick_cup import MIN_SPACING, WORKSPACE, PickCupEnv

LIFT_HEIGHT = 0.05  # success threshold on the cup bottom's height (from the task docstring)


def seeds_with(env, predicate, count: int, start: int = 0) -> list[int]:
    found, seed = [], start
    while len(found) < count:
        env.reset(seed=seed)
        if predicate(env.unwrapped):
            found.append(seed)
        seed += 1
        assert seed < start + 500, "predicate too rare"
    return found


# ---------------------------------------------------------------------------- rewards


@pytest.mark.parametrize("reward_weights", [None, {"reach": 0.0, "grasp": 2.0, "lift": 1.0}], ids=["default", "custom"])
def test_dense_reward_is_weighted_sum_of_terms(reward_weights, make_env):
    env = make_env(reward_mode="dense", reward_weights=reward_weights)
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
            assert 0.0 <= reward <= 1.0
            rewards.append(reward)
    # The expert's episodes span the reward range: the check above was not vacuous.
    assert min(rewards) < 0.5 < max(rewards)


def test_dense_reward_is_high_at_success(make_env):
    env = make_env(reward_mode="dense")
    *_, (_, reward, _, _, info) = run_expert(env, 2)
    assert info["success"]
    assert reward > 0.9


def test_sparse_reward_is_success(make_env):
    env = make_env(reward_mode="sparse")
    rewards = []
    for seed in (0, 1):
        for _, reward, _, _, info in run_expert(env, seed):
            assert reward == float(info["success"])
            rewards.append(reward)
    assert 1.0 in rewards and 0.0 in rewards


# ---------------------------------------------------------------------------- instructions


def test_template_splits_disjoint_and_nonempty():
    train, heldout = PickCupEnv.templates["train"], PickCupEnv.templates["heldout"]
    assert train and heldout
    assert not set(train) & set(heldout)
    assert len(set(train)) == len(train) and len(set(heldout)) == len(heldout)
    # Disjoint as wordings, not just as strings: no colour makes them coincide.
    for color in COLORS:
        assert not {t.format(color=color) for t in train} & {t.format(color=color) for t in heldout}


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_every_template_renders_for_every_colour(split, make_env):
    env = make_env(obs_mode="rgb", image_size=16)
    text_space = env.observation_space["instruction"]
    for template in PickCupEnv.templates[split]:
        for color in COLORS:
            instruction = template.format(color=color)
            assert names(instruction, color), f"{instruction!r} does not name {color}"
            assert "{" not in instruction and "}" not in instruction
            assert text_space.contains(instruction), f"{instruction!r} is not in the Text space"


def test_episodes_name_the_target_and_vary(make_env):
    env = make_env()
    base = env.unwrapped
    cup_counts, targets = set(), set()
    for seed in range(60):
        _, info = env.reset(seed=seed)
        present = [o for o in base.objects if o.present]
        colors = [o.color for o in present]
        assert all(o.kind == "cup" for o in present), "train shows cups only"
        assert len(set(colors)) == len(colors), f"seed {seed}: repeated colours {colors}"
        assert set(colors) <= set(COLORS)
        assert base.target in present
        assert names(base.instruction, base.target.color), f"seed {seed}: {base.instruction!r} vs {base.target.color}"
        assert info["instruction"] == base.instruction
        # Other cups' colours are not named: the instruction is unambiguous.
        for obj in present:
            if obj is not base.target:
                assert not names(base.instruction, obj.color), f"seed {seed}: {base.instruction!r} names {obj.color}"
        # What the camera sees matches the words.
        for obj in present:
            rgba = base.model.geom(f"{obj.name}_body").rgba
            np.testing.assert_allclose(rgba, COLORS[obj.color], err_msg=f"seed {seed} {obj.name}")
        cup_counts.add(len(present))
        if len(present) > 1:
            targets.add(base.target.name)
    assert cup_counts == {1, 2, 3}
    assert len(targets) >= 2, "the target is always the same cup slot: the instruction would be unnecessary"


def test_cups_are_placed_apart_on_the_table(make_env):
    env = make_env()
    base = env.unwrapped
    for seed in range(60):
        env.reset(seed=seed)
        present = [o for o in base.objects if o.present]
        xy = np.array([base.data.xpos[o.body][:2] for o in present])
        z = [base.data.xpos[o.body][2] for o in present]
        np.testing.assert_allclose(z, 0.0, atol=1e-6)
        (x0, x1), (y0, y1) = WORKSPACE
        assert np.all((xy[:, 0] >= x0) & (xy[:, 0] <= x1) & (xy[:, 1] >= y0) & (xy[:, 1] <= y1)), f"seed {seed}"
        for i in range(len(xy)):
            for j in range(i):
                gap = np.linalg.norm(xy[i] - xy[j])
                assert gap >= MIN_SPACING - 1e-9, f"seed {seed}: cups {i},{j} {gap:.3f} m apart"


@pytest.mark.parametrize("num_cups", [1, 2, 3])
def test_num_cups_fixes_the_cup_count(num_cups, make_env):
    env = make_env(num_cups=num_cups)
    free = make_env()
    for seed in range(20):
        env.reset(seed=seed)
        cups = [o for o in env.unwrapped.objects if o.present]
        assert len(cups) == num_cups and all(o.kind == "cup" for o in cups)
        assert env.unwrapped.target in cups
        free.reset(seed=seed)
        if sum(o.present for o in free.unwrapped.objects) == num_cups:  # same draw: the same scene
            assert env.unwrapped.instruction == free.unwrapped.instruction


@pytest.mark.parametrize("bad", [0, 4, True, 2.0, "3"])
def test_num_cups_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="num_cups"):
        PickCupEnv(num_cups=bad)


def test_num_cups_conflicting_with_the_distractors_split_is_an_error():
    with pytest.raises(ValueError, match="three cups"):
        PickCupEnv(num_cups=1, split="distractors")


def test_reset_succeeds_for_every_seed(make_env):
    env = make_env()
    failures = []
    for seed in range(1000):
        try:
            env.reset(seed=seed)
        except Exception as err:  # report all failing seeds at once
            failures.append((seed, f"{type(err).__name__}: {err}"))
    assert not failures, f"{len(failures)} of 1000 seeds fail to reset, e.g. {failures[:3]}"


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_instruction_split_uses_only_its_templates(split, make_env):
    env = make_env(instruction_split=split)
    base = env.unwrapped
    templates = PickCupEnv.templates[split]
    seen = set()
    for seed in range(80):
        env.reset(seed=seed)
        target_color = base.target.color
        matches = [t for t in templates if t.format(color=target_color) == base.instruction]
        assert matches, f"seed {seed}: {base.instruction!r} is not a {split} template"
        seen.update(matches)
    assert seen == set(templates), f"templates never sampled: {set(templates) - seen}"


# ---------------------------------------------------------------------------- success and the expert


@pytest.mark.parametrize("seed", range(5))
def test_expert_succeeds_and_success_terminates(seed, make_env):
    env = make_env()
    steps = run_expert(env, seed)
    _, _, terminated, truncated, info = steps[-1]
    assert info["success"] and terminated and not truncated, f"seed {seed}: expert failed in {len(steps)} steps"
    for _, _, terminated, _, info in steps:
        assert terminated == info["success"]
        if info["success"]:
            assert info["grasped"] and info["target_height"] >= LIFT_HEIGHT
    # A grasp alone (before the lift) is not success.
    assert any(info["grasped"] and not info["success"] for *_, info in steps)


@pytest.mark.parametrize("seed", range(4))
def test_expert_turns_only_near_the_cup_and_descends_turned(seed, make_env):
    from vlagym.envs.expert import site_yaw, wrap_angle

    env = make_env()
    env.reset(seed=seed)
    expert, base = vlagym.make_expert(env), env.unwrapped
    start, far, turned_at_descent = site_yaw(base.robot.ee_mat), [], None
    for _ in range(60):
        gap = np.hypot(*(base.robot.ee_pos[:2] - base.expert_target()["pos"][:2]))  # as the expert measures it
        env.step(expert())
        if gap > expert.turn_distance:  # this step's action was chosen beyond the turning distance
            far.append(abs(wrap_angle(site_yaw(base.robot.ee_mat) - start)))
        if expert.phase == "descend" and turned_at_descent is None:
            turned_at_descent = expert.at_grasp_yaw()
    assert far and max(far) < np.deg2rad(4), f"turned {np.rad2deg(max(far)):.1f} degrees while still far off"
    assert turned_at_descent, "descended before reaching the grasp yaw"


def test_success_does_not_terminate_when_disabled(make_env):
    env = make_env(terminate_on_success=False)
    steps = run_expert(env, 0, max_steps=40)
    assert any(info["success"] for *_, info in steps)
    assert not any(terminated for _, _, terminated, _, _ in steps)


def test_no_success_at_reset(make_env):
    env = make_env()
    for seed in range(10):
        _, info = env.reset(seed=seed)
        assert not info["success"] and not info["grasped"]


def test_grasping_the_wrong_cup_is_not_success(make_env, monkeypatch):
    env = make_env(terminate_on_success=False)
    base = env.unwrapped
    (seed,) = seeds_with(env, lambda e: sum(o.present for o in e.objects) >= 2, 1)
    env.reset(seed=seed)
    other_name = next(o.name for o in base.objects if o.present and o is not base.target)
    original = type(base).expert_target

    def expert_target_of_other_cup():
        saved = base.target
        base.target = next(o for o in base.objects if o.name == other_name)
        try:
            return original(base)
        finally:
            base.target = saved

    monkeypatch.setattr(base, "expert_target", expert_target_of_other_cup)
    expert = vlagym.make_expert(env)
    obs, _ = env.reset(seed=seed)
    expert.reset()
    infos = []
    for _ in range(60):
        obs, _, terminated, _, info = env.step(expert(obs))
        infos.append(info)
        assert not terminated
    other_body = base.model.body(other_name).id
    assert base.data.xpos[other_body][2] > LIFT_HEIGHT, "the expert did not lift the other cup"
    assert not any(info["success"] for info in infos)
    assert info["wrong_object_grasped"] is True
    assert info["grasped"] is False


@pytest.mark.parametrize("seed", [0, 5])
def test_grasp_holds_under_full_speed_motion(seed, make_env):
    env = make_env(terminate_on_success=False)
    base = env.unwrapped
    steps = run_expert(env, seed, max_steps=50, until_success=True)
    assert steps[-1][-1]["success"]
    assert len(steps) + 42 < env.spec.max_episode_steps
    cup = base.target.body

    def cup_in_grasp_frame():
        # In the grasp site's frame, so that rotating the hand (which swings the
        # cup's origin around the fingers) does not count as slip.
        return base.robot.ee_mat.T @ (base.data.xpos[cup] - base.robot.ee_pos)

    start = cup_in_grasp_frame()
    rng = np.random.default_rng(seed)
    for i in range(42):
        action = np.zeros(7, np.float32)
        axis, sign = divmod((i // 3) % 6, 2)  # +x, -x, +y, -y, +z, -z, three steps each
        action[axis] = 1.0 if sign == 0 else -1.0
        action[3:6] = rng.uniform(-1, 1, 3)
        action[6] = 1.0
        _, _, _, truncated, info = env.step(action)
        assert not truncated
        assert info["grasped"], f"step {i}: the cup slipped out of the grasp"
        slip = np.linalg.norm(cup_in_grasp_frame() - start)
        assert slip < 0.015, f"step {i}: cup moved {slip * 100:.1f} cm relative to the grasp site"
        ncon = base.data.ncon
        if ncon:
            depth = base.data.contact.dist[:ncon].min()
            assert depth > -0.002, f"step {i}: contact penetrates {-depth * 1000:.1f} mm"


# ---------------------------------------------------------------------------- control modes


def test_joint_mode_moves_joints_in_commanded_direction(make_env):
    env = make_env(control_mode="joint_delta_pos")
    robot = env.unwrapped.robot
    rng = np.random.default_rng(0)
    for seed in range(3):
        env.reset(seed=seed)
        signs = rng.choice([-1.0, 1.0], size=7)
        action = np.zeros(env.action_space.shape, np.float32)
        action[:7] = signs
        q0 = robot.qpos.copy()
        for _ in range(3):
            env.step(action)
        dq = robot.qpos - q0
        np.testing.assert_array_equal(np.sign(dq), signs, err_msg=f"seed {seed}: dq={dq}")
        assert np.all(np.abs(dq) > 0.02), f"seed {seed}: joints barely moved: {dq}"


def test_joint_mode_gripper_is_its_own_action_entry(make_env):
    """7 joint deltas plus a gripper command: moving joint 7 must not close the gripper."""
    env = make_env(control_mode="joint_delta_pos")
    robot = env.unwrapped.robot
    assert env.action_space.shape == (8,), (
        f"joint_delta_pos needs 7 joint deltas + 1 gripper command, action space is {env.action_space.shape}"
    )
    env.reset(seed=0)
    open_width = robot.gripper_width
    action = np.zeros(8, np.float32)
    action[6] = 1.0  # turn the last joint
    action[7] = -1.0  # keep the gripper open
    for _ in range(5):
        env.step(action)
    assert robot.gripper_width == pytest.approx(open_width, abs=0.005)


def test_ee_mode_translates_the_grasp_site(make_env):
    env = make_env()
    robot = env.unwrapped.robot
    for axis in range(3):
        for sign in (1.0, -1.0):
            env.reset(seed=1)
            p0 = robot.ee_pos
            action = np.zeros(7, np.float32)
            action[axis] = sign
            for _ in range(4):
                env.step(action)
            delta = robot.ee_pos - p0
            assert sign * delta[axis] > 0.03, f"axis {axis} sign {sign}: moved {delta}"
            others = np.delete(delta, axis)
            assert np.all(np.abs(others) < 0.5 * abs(delta[axis])), f"axis {axis}: off-axis drift {delta}"


def test_expert_refuses_joint_mode(make_env):
    env = make_env(control_mode="joint_delta_pos")
    with pytest.raises(ValueError, match="ee_delta_pose"):
        vlagym.make_expert(env)
