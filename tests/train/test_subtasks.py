"""Subtasks: `vlagym dataset split-subtasks`, the dataset's task instructions, and the VLA's subtask head in
training, fine-tuning, acting and ONNX export."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from vlagym.envs.base import TASK_SCALARS_AT
from vlagym.envs.pick_cup import PickCupEnv
from vlagym.envs.put_cup_in_drawer import OPEN_SUBTASK, SUBTASK_OPENING, PutCupInDrawerEnv
from vlagym.envs.robot import Robot
from vlagym.policies import VLAConfig, load_policy
from vlagym.policies.subtasks import subtask_labels
from vlagym.train.bc import BCConfig, train_bc
from vlagym.train.dataset import DemoDataset
from vlagym.train.demos import DemoConfig, collect_demos
from vlagym.train.subtasks import split_subtasks
from vlagym.train.validate import check_dataset

OPENING = Robot.PROPRIO_DIM + TASK_SCALARS_AT
TINY = {"image_size": 32, "vision_channels": [8, 16], "hidden_dim": 32, "text_layers": 1, "chunk_size": 4}


@pytest.fixture(scope="module")
def drawer_demos(tmp_path_factory) -> Path:
    """Two scripted PutCupInDrawer episodes at 32 px."""
    path = tmp_path_factory.mktemp("subtasks") / "drawer.hdf5"
    collect_demos(DemoConfig(task="VLA-PutCupInDrawer-v0", episodes=2, out=str(path), image_size=32, progress=False))
    return path


@pytest.fixture(scope="module")
def split_demos(drawer_demos) -> Path:
    out = drawer_demos.with_name("split.hdf5")
    split_subtasks(drawer_demos, out)
    return out


def episodes(path: Path) -> list[dict]:
    with h5py.File(path) as f:
        data = f["data"]
        names = sorted(data, key=lambda n: int(n.split("_")[1]))
        return [
            {
                **{k: data[n].attrs[k] for k in ("instruction", "seed")},
                "told": data[n].attrs.get("task_instruction"),
                "state": data[n]["obs/state"][:],
                "actions": data[n]["actions"][:],
            }
            for n in names
        ]


def spans_state(openings) -> np.ndarray:
    state = np.zeros((len(openings), Robot.PROPRIO_DIM + 60), np.float32)
    state[:, OPENING] = openings
    return state


def test_drawer_stage_lasts_until_the_drawer_is_first_out():
    spans = PutCupInDrawerEnv.subtask_spans(spans_state([0.0, 0.05, 0.11, 0.12, 0.15, 0.10, 0.14]))
    assert spans == [(0, 3, OPEN_SUBTASK), (3, 7, None)]  # bumped back to 0.10 while the cup goes in: still opened
    assert PutCupInDrawerEnv.subtask_spans(spans_state([0.0, 0.01])) == [(0, 2, OPEN_SUBTASK)]
    assert PutCupInDrawerEnv.subtask_spans(spans_state([0.13, 0.14])) == [(0, 2, None)]
    assert PickCupEnv.subtask_spans(spans_state([0.0, 0.5, 0.0])) == [(0, 3, None)]


def test_split_cuts_each_episode_at_the_drawer_opening(drawer_demos, split_demos):
    before, after = episodes(drawer_demos), episodes(split_demos)
    assert len(after) == 2 * len(before)
    assert check_dataset(split_demos) == []
    for i, whole in enumerate(before):
        first, rest = after[2 * i], after[2 * i + 1]
        assert first["instruction"] == OPEN_SUBTASK and first["told"] == whole["instruction"]
        assert rest["instruction"] == rest["told"] == whole["instruction"]
        assert first["seed"] == rest["seed"] == whole["seed"]
        np.testing.assert_array_equal(np.concatenate([first["actions"], rest["actions"]]), whole["actions"])
        assert (first["state"][:, OPENING] < SUBTASK_OPENING).all()
        assert rest["state"][0, OPENING] >= SUBTASK_OPENING


def test_split_refuses_an_existing_output_a_file_without_state_and_itself(drawer_demos, split_demos, tmp_path):
    with pytest.raises(FileExistsError, match="exists"):
        split_subtasks(drawer_demos, split_demos)
    with pytest.raises(ValueError, match="elsewhere"):
        split_subtasks(split_demos, split_demos, overwrite=True)
    stateless = shutil.copy(drawer_demos, tmp_path / "stateless.hdf5")
    with h5py.File(stateless, "a") as f:
        del f["data/demo_0/obs/state"]
    with pytest.raises(ValueError, match="demo_0 has no obs/state"):
        split_subtasks(stateless, tmp_path / "out.hdf5")
    unknown = shutil.copy(drawer_demos, tmp_path / "unknown.hdf5")
    with h5py.File(unknown, "a") as f:
        f["data/demo_1"].attrs["task"] = "VLA-Nope-v0"
    with pytest.raises(ValueError, match="demo_1: task 'VLA-Nope-v0'"):
        split_subtasks(unknown, tmp_path / "out.hdf5")
    assert not (tmp_path / "out.hdf5").exists() and list(tmp_path.glob(".*tmp*")) == []


def test_dataset_items_carry_the_task_instruction_only_where_some_step_has_a_subtask(drawer_demos, split_demos):
    assert DemoDataset([drawer_demos]).subtasks == ()
    assert "task_instruction" not in DemoDataset([drawer_demos])[0]
    data = DemoDataset([split_demos, drawer_demos])
    assert data.subtasks == (OPEN_SUBTASK,)
    item, told = data[0], episodes(drawer_demos)[0]["instruction"]
    assert (item["instruction"], item["task_instruction"]) == (OPEN_SUBTASK, told)
    data.preload()
    assert data.__getitems__([0])[0]["task_instruction"] == told


def test_subtask_labels_name_the_class_of_each_row():
    labels = subtask_labels(("a", "b"), ["t1", "b", "a"], ["t1", "t2", "t3"])
    assert labels.tolist() == [0, 2, 1]
    with pytest.raises(ValueError, match="'c' is neither"):
        subtask_labels(("a",), ["c"], ["t"])


@pytest.mark.parametrize("value", ["open the drawer", ["a", "a"], [""]])
def test_config_refuses_bad_subtasks(value):
    with pytest.raises(ValueError, match="subtasks must be"):
        VLAConfig(subtasks=value)


def train(demos: list[Path], out: Path, **kwargs) -> Path:
    cfg = BCConfig(
        dataset=[str(d) for d in demos],
        out=str(out),
        policy=VLAConfig.from_dict(TINY),
        steps=3,
        batch_size=8,
        warmup_steps=1,
        checkpoint_every=0,
        progress=False,
        **kwargs,
    )
    return Path(train_bc(cfg)["checkpoint"])


def observation_batch(policy, instruction: str, rows: int = 3) -> dict:
    g = torch.Generator().manual_seed(0)
    batch = {
        f"observation.images.{cam}": torch.randint(0, 256, (rows, 3, 32, 32), dtype=torch.uint8, generator=g)
        for cam in policy.config.cameras
    }
    return batch | {"observation.proprio": torch.randn(rows, 23, generator=g), "instruction": [instruction] * rows}


def force(policy, k: int) -> None:
    with torch.no_grad():
        policy.subtask_head.bias.fill_(0.0)
        policy.subtask_head.bias[k] = 1e6


def test_bc_learns_a_subtask_head_and_acts_on_the_instruction_it_picks(drawer_demos, split_demos, tmp_path):
    plain = load_policy(train([drawer_demos], tmp_path / "plain"))
    assert plain.subtask_head is None and plain.config.subtasks == ()
    policy = load_policy(train([split_demos], tmp_path / "split"))
    assert policy.config.subtasks == (OPEN_SUBTASK,) and policy.subtask_head.out_features == 2
    told = episodes(drawer_demos)[0]["instruction"]
    batch = observation_batch(policy, told)
    force(policy, 1)  # the head picks "open the drawer": the chunk is the one predicted under it
    picked = policy.predict_action_chunk(batch)
    direct = policy.predict_action_chunk(observation_batch(policy, OPEN_SUBTASK))
    torch.testing.assert_close(picked, direct)
    force(policy, 0)  # the head keeps the task's instruction
    kept = policy.predict_action_chunk(batch)
    assert not torch.allclose(kept, picked)
    torch.testing.assert_close(kept, policy.chunk_from_features(policy.features(batch)))


def test_fine_tuning_on_split_demos_adds_a_head_and_keeps_the_rest(drawer_demos, split_demos, tmp_path):
    start = train([drawer_demos], tmp_path / "a")
    tuned = load_policy(train([split_demos], tmp_path / "b", init=str(start), lr=1e-12))
    base = load_policy(start)
    assert tuned.config.subtasks == (OPEN_SUBTASK,) and base.config.subtasks == ()
    theirs = base.state_dict()
    for key, value in tuned.state_dict().items():
        if not key.startswith("subtask_head."):
            torch.testing.assert_close(value, theirs[key], atol=1e-6, rtol=0)


def test_onnx_graph_acts_on_the_picked_subtask(split_demos, tmp_path):
    pytest.importorskip("onnx")
    from vlagym.policies.onnx import ActingGraph

    policy = load_policy(train([split_demos], tmp_path / "split"))
    batch = observation_batch(policy, "open the drawer and put the red cup in it")
    inputs = [batch[f"observation.images.{cam}"] for cam in policy.config.cameras]
    inputs += [policy.tokenize(batch["instruction"]), batch["observation.proprio"]]
    for k in (0, 1):
        force(policy, k)
        torch.testing.assert_close(ActingGraph(policy)(*inputs), policy.predict_action_chunk(batch))


def test_a_batch_without_task_instructions_trains_as_the_policy_acts(split_demos, tmp_path):
    policy = load_policy(train([split_demos], tmp_path / "split")).train()
    action = {"action": torch.rand(3, policy.config.chunk_size, policy.config.action_dim)}
    force(policy, 1)  # e.g. filtered BC's rollouts, which carry no task_instruction: no head loss, the head's pick
    loss, metrics = policy(observation_batch(policy, "open the drawer and put the red cup in it") | action)
    assert "subtask_ce" not in metrics
    force(policy, 0)
    direct, _ = policy(observation_batch(policy, OPEN_SUBTASK) | action)
    torch.testing.assert_close(loss, direct)
