"""A flow-matching checkpoint evaluates reproducibly: each episode's noise comes from its own seed, not from torch's
global generator or from which episodes share the batch."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch

from vlagym.eval.adapters import CheckpointPolicy, episode_noise_generator
from vlagym.eval.configs import EvalConfig
from vlagym.eval.evaluate import evaluate
from vlagym.eval.rollout import make_rollout_envs, run_episodes
from vlagym.policies import VLAConfig, VLAPolicy, save_checkpoint

TASK = "VLA-PressButton-v0"
STEPS = 6  # per episode: two chunks of 4, the second cut short
SEEDS = [300, 301, 302]
# Batched matrix products may round a row differently at another batch size (about 1e-7 here): num_envs may
# change that, never the noise.
ROUNDING = 1e-5


def tiny_config(**overrides) -> VLAConfig:
    kwargs = dict(
        head="flow", cameras=("front",), image_size=16, vision_channels=(8,), hidden_dim=16, text_layers=1,
        text_heads=2, chunk_size=4, trunk_layers=1, flow_steps=2,
    )  # fmt: skip
    return VLAConfig(**{**kwargs, **overrides})


@pytest.fixture(scope="module")
def flow_checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("flow") / "ckpt"
    extra = {"env_id": TASK, "env_kwargs": {"max_episode_steps": STEPS}}
    save_checkpoint(VLAPolicy(tiny_config()), folder, extra=extra)
    return folder


class Recorder:
    """Wraps a `CheckpointPolicy`; collects the actions of every episode by its seed."""

    def __init__(self, policy: CheckpointPolicy):
        self.policy, self.row_seeds = policy, np.zeros(0, np.int64)
        self.actions: dict[int, list[np.ndarray]] = defaultdict(list)

    def reset(self, mask, seeds=None):
        assert seeds is not None, "run_episodes passed no episode seeds to on_episode_start"
        self.policy.reset(mask, seeds=seeds)
        self.row_seeds = np.array(seeds)

    def __call__(self, obs):
        action = self.policy(obs)
        for row, seed in enumerate(self.row_seeds):
            self.actions[int(seed)].append(action[row].copy())
        return action


def episode_actions(folder, num_envs: int, seeds=SEEDS, positions=None) -> dict[int, np.ndarray]:
    policy = CheckpointPolicy(folder)
    recorder = Recorder(policy)
    envs = make_rollout_envs(TASK, num_envs, "sync", **policy.env_kwargs)
    try:
        records = run_episodes(
            envs, recorder, seeds, on_episode_start=recorder.reset, progress=False, positions=positions
        )
    finally:
        envs.close()
    assert [r.length for r in records] == [STEPS] * len(seeds)
    assert all(len(recorder.actions[s]) == STEPS for s in seeds)  # every row's actions went to its episode's seed
    return {s: np.stack(recorder.actions[s]) for s in seeds}


# ---------------------------------------------------------------------------- the policy's per-row generators
def same_obs(b: int) -> dict:
    """`b` copies of one rgb observation."""
    image = np.random.default_rng(0).integers(0, 255, (1, 16, 16, 3), dtype=np.uint8)
    return {
        "images": {"front": np.repeat(image, b, axis=0)},
        "proprio": np.zeros((b, 23), np.float32),
        "instruction": ["press the button"] * b,
    }


def test_per_row_generators_draw_each_rows_own_noise():
    torch.manual_seed(0)
    policy = VLAPolicy(tiny_config(binary_gripper=False)).eval()
    one, three = policy.batch_from_obs(same_obs(1)), policy.batch_from_obs(same_obs(3))
    gens = [episode_noise_generator(s) for s in (7, 8, 7)]
    chunks = policy.predict_action_chunk(three, gens)
    assert torch.equal(chunks[0], chunks[2]) and not torch.allclose(chunks[0], chunks[1])
    alone = policy.predict_action_chunk(one, [episode_noise_generator(8)])
    torch.testing.assert_close(alone[0], chunks[1], atol=ROUNDING, rtol=0)
    with pytest.raises(ValueError, match="2 generators for a batch of 3 rows"):
        policy.predict_action_chunk(three, gens[:2])
    # one generator for the whole batch still works, as before
    a = policy.predict_action_chunk(three, torch.Generator().manual_seed(1))
    assert torch.equal(a, policy.predict_action_chunk(three, torch.Generator().manual_seed(1)))


def test_a_rows_generator_advances_only_when_that_row_takes_a_chunk():
    torch.manual_seed(0)
    policy = VLAPolicy(tiny_config(binary_gripper=False)).eval()
    rng = np.random.default_rng(1)
    obs = {
        "images": {"front": rng.integers(0, 255, (2, 16, 16, 3), dtype=np.uint8)},
        "proprio": rng.normal(size=(2, 23)).astype(np.float32),
        "instruction": ["press the button", "press the button"],
    }
    batch = policy.batch_from_obs(obs)

    def run(restart_row0_at: int | None) -> list[torch.Tensor]:
        gens = [episode_noise_generator(1), episode_noise_generator(2)]
        policy.reset()
        actions = []
        for step in range(8):
            if step == restart_row0_at:  # row 0 begins a new episode mid-chunk; row 1 goes on
                policy.reset(mask=np.array([True, False]))
                gens[0] = episode_noise_generator(3)
            actions.append(policy.select_action(batch, gens))
        return actions

    plain, restarted = run(None), run(2)
    assert all(torch.equal(a[1], b[1]) for a, b in zip(plain, restarted, strict=True))  # row 1 untouched
    assert not torch.equal(plain[2][0], restarted[2][0])  # row 0 took a new chunk with new noise


def test_episode_generators_depend_on_the_seed_only():
    def draw(s):
        return torch.randn(5, generator=episode_noise_generator(s))

    assert torch.equal(draw(5), draw(5)) and not torch.equal(draw(5), draw(6))
    assert not torch.equal(draw(0), torch.randn(5, generator=torch.Generator().manual_seed(0)))  # its own stream


# ---------------------------------------------------------------------------- evaluation
def test_same_flow_evaluation_twice_gives_identical_episodes_and_actions(flow_checkpoint, tmp_path):
    runs = []
    for name in ("a", "b"):
        cfg = EvalConfig(
            policy=str(flow_checkpoint), episodes=len(SEEDS), seed=SEEDS[0], num_envs=2, out=str(tmp_path / name),
            progress=False,
        )  # fmt: skip
        runs.append(evaluate(cfg)["tasks"][TASK]["episodes"])
        torch.randn(100)  # whatever else touches torch's global generator must not matter
    assert runs[0] == runs[1] and [e["seed"] for e in runs[0]] == SEEDS
    first, second = episode_actions(flow_checkpoint, 2), episode_actions(flow_checkpoint, 2)
    assert all(np.array_equal(first[s], second[s]) for s in SEEDS)


def test_episode_actions_do_not_depend_on_num_envs(flow_checkpoint):
    one, two = episode_actions(flow_checkpoint, 1), episode_actions(flow_checkpoint, 2)
    for s in SEEDS:
        np.testing.assert_allclose(one[s], two[s], atol=ROUNDING, rtol=0, err_msg=f"seed {s}")
    # a seed's episode is its own whatever episode shares the batch: seed 302 alongside 301 instead of a spare
    shifted = episode_actions(flow_checkpoint, 2, seeds=[301, 302])
    np.testing.assert_allclose(shifted[302], two[302], atol=ROUNDING, rtol=0)


def test_a_part_of_a_run_given_its_positions_acts_bit_for_bit_as_in_the_whole(flow_checkpoint):
    seeds = [300, 301, 302, 303, 304]
    whole = episode_actions(flow_checkpoint, 2, seeds)
    for part in ([2, 3], [1, 4], [4]):  # a Ray unit, the rest a resumed run has left, a last episode
        got = episode_actions(flow_checkpoint, 2, [seeds[k] for k in part], positions=part)
        for k in part:
            assert np.array_equal(got[seeds[k]], whole[seeds[k]]), f"seed {seeds[k]} at position {k}"
    with pytest.raises(ValueError, match="distinct"):
        episode_actions(flow_checkpoint, 2, [300, 301], positions=[1, 1])


def test_a_rows_chunk_does_not_depend_on_the_other_rows():
    """What exact distributed rollouts rest on: only a row's own content, its row and the batch size matter."""
    torch.manual_seed(0)
    policy = VLAPolicy(tiny_config(head="l1", hidden_dim=24)).eval()
    rng = np.random.default_rng(0)
    obs = {
        "images": {"front": rng.integers(0, 255, (4, 16, 16, 3), dtype=np.uint8)},
        "proprio": rng.standard_normal((4, 23)).astype(np.float32),
        "instruction": ["press the button", "pick up the red cup", "open the drawer", "push the cube left"],
    }
    other = {
        "images": {"front": np.concatenate([obs["images"]["front"][:1], obs["images"]["front"][:0:-1]])},
        "proprio": np.concatenate([obs["proprio"][:1], 10 * obs["proprio"][1:]]),
        "instruction": obs["instruction"][:1] + ["stack the blue block on the green block and then stop"] * 3,
    }
    with torch.inference_mode():
        chunks = [policy.predict_action_chunk(policy.batch_from_obs(o)) for o in (obs, other)]
    assert torch.equal(chunks[0][0], chunks[1][0])


def test_different_seeds_draw_different_noise(flow_checkpoint):
    policy = CheckpointPolicy(flow_checkpoint)
    policy.policy.config.binary_gripper = False  # compare the raw gripper entries too
    policy.reset(np.ones(3, bool), seeds=[10, 11, 10])
    actions = policy(same_obs(3))  # identical observations: only the noise tells the rows apart
    assert np.array_equal(actions[0], actions[2]) and np.abs(actions[0] - actions[1]).max() > 1e-3
    policy.reset(np.array([False, True, False]), seeds=[0, 10, 0])  # row 1 restarts with seed 10's noise
    np.testing.assert_allclose(policy(same_obs(3))[1], actions[0], atol=ROUNDING, rtol=0)
