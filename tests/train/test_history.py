"""Proprio history (`VLAConfig.proprio_lags`): the dataset's past proprio, the policy's input, its acting memory
per row, fine-tuning a checkpoint without it, and the paths that refuse it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vlagym.policies import VLAConfig, VLAPolicy, load_policy
from vlagym.policies.history import LAGGED_KEY, ProprioHistory
from vlagym.train.bc import BCConfig, train_bc
from vlagym.train.dataset import DemoDataset

TINY = {"cameras": ["front"], "image_size": 8, "vision_channels": [4], "hidden_dim": 16, "chunk_size": 3}
LAGS = (1, 3)


@pytest.mark.parametrize("preload", [False, True])
def test_items_carry_the_proprio_lags_steps_back_repeating_the_first_step(demo_file, preload):
    data = DemoDataset(demo_file, cameras=[], proprio_lags=LAGS, preload=preload)
    proprio = {(item["episode_index"], item["frame_index"]): item["observation.proprio"] for item in data}
    for item in data:
        e, t = item["episode_index"], item["frame_index"]
        want = torch.stack([proprio[(e, max(0, t - lag))] for lag in LAGS])
        torch.testing.assert_close(item[LAGGED_KEY], want)
    # The fixture's first proprio entry is the step index: the lags read back 1 and 3 steps, never before 0.
    assert data[7][LAGGED_KEY][:, 0].tolist() == [1.0, 0.0]  # episode 1 (3 steps), step 2
    assert LAGGED_KEY not in DemoDataset(demo_file, cameras=[])[0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"proprio_lags": (0,)}, "positive"), ({"proprio_lags": (2,), "keys": ("state",)}, "needs 'proprio'")],
)
def test_dataset_refuses_bad_lags(demo_file, kwargs, match):
    with pytest.raises(ValueError, match=match):
        DemoDataset(demo_file, cameras=[], **kwargs)


@pytest.mark.parametrize("lags", [(0,), (3, 1), (2, 2), 4, "1", (1.5,), (300,)])
def test_config_refuses_bad_lags(lags):
    with pytest.raises(ValueError, match="proprio_lags"):
        VLAConfig(proprio_lags=lags)


def test_acting_memory_reads_each_rows_past_and_restarts_reset_rows():
    history = ProprioHistory((1, 2))
    steps = [torch.full((2, 1), float(t)) for t in range(4)]
    assert history.push(steps[0])[:, :, 0].tolist() == [[0, 0], [0, 0]]
    assert history.push(steps[1])[:, :, 0].tolist() == [[0, 0], [0, 0]]
    assert history.push(steps[2])[:, :, 0].tolist() == [[1, 0], [1, 0]]
    history.reset(torch.tensor([False, True]))  # row 1 starts an episode: its past is its first step
    assert history.push(steps[3])[:, :, 0].tolist() == [[2, 1], [3, 3]]


def batch(rows: int, proprio: torch.Tensor) -> dict:
    g = torch.Generator().manual_seed(0)
    images = {f"observation.images.{c}": torch.randint(0, 256, (rows, 3, 8, 8), generator=g) for c in ("front",)}
    return images | {"observation.proprio": proprio, "instruction": ["pick up the red cup"] * rows}


def test_policy_reads_the_change_since_each_lag_and_acts_on_its_own_memory():
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig.from_dict(TINY | {"proprio_lags": list(LAGS), "n_action_steps": 1}))
    policy.config.binary_gripper = False
    now = torch.randn(2, 23)
    still = batch(2, now) | {LAGGED_KEY: now[:, None].repeat(1, 2, 1)}
    moved = batch(2, now) | {LAGGED_KEY: (now - 1.0)[:, None].repeat(1, 2, 1)}
    assert not torch.allclose(policy.features(still), policy.features(moved))
    with pytest.raises(KeyError, match="proprio_lagged"):
        policy.features(batch(2, now))
    # Acting: the first step of an episode reads no motion, as the dataset's first frame does.
    policy.reset()
    first = policy.select_action(batch(2, now))
    torch.testing.assert_close(first, policy.predict_action_chunk(still)[:, 0])
    later = torch.randn(2, 23)  # the next step reads this one's proprio 1 step back, 3 steps back the first
    second = policy.select_action(batch(2, later))
    want = batch(2, later) | {LAGGED_KEY: torch.stack([now, now], dim=1)}
    torch.testing.assert_close(second, policy.predict_action_chunk(want)[:, 0])
    policy.reset(np.array([True, False]))  # row 0 starts over: no motion; row 1 goes on
    third = policy.select_action(batch(2, now))
    want = batch(2, now) | {LAGGED_KEY: torch.stack([torch.stack([now[0], now[0]]), torch.stack([later[1], now[1]])])}
    torch.testing.assert_close(third, policy.predict_action_chunk(want)[:, 0])


def train(demo_file: Path, out: Path, policy: dict, **kwargs) -> Path:
    cfg = BCConfig(
        dataset=[str(demo_file)],
        out=str(out),
        policy=VLAConfig.from_dict(TINY | policy),
        steps=2,
        batch_size=4,
        warmup_steps=1,
        checkpoint_every=0,
        progress=False,
        **kwargs,
    )
    return Path(train_bc(cfg)["checkpoint"])


def test_fine_tuning_adds_lags_with_zero_weights_and_acts_as_before(demo_file, tmp_path):
    start = train(demo_file, tmp_path / "a", {})
    tuned = load_policy(train(demo_file, tmp_path / "b", {"proprio_lags": list(LAGS)}, init=str(start), lr=1e-12))
    base = load_policy(start)
    assert tuned.config.proprio_lags == LAGS and tuned.proprio[0].in_features == 23 * 3
    now = torch.randn(2, 23)
    moved = batch(2, now) | {LAGGED_KEY: torch.randn(2, 2, 23)}
    torch.testing.assert_close(tuned.features(moved), base.features(batch(2, now)), atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match="proprio_lags"):  # lags a checkpoint has are its architecture
        train(demo_file, tmp_path / "c", {"proprio_lags": [2]}, init=str(tmp_path / "b" / "checkpoints" / "step_2"))


def test_onnx_export_and_serving_refuse_a_policy_with_lags(demo_file, tmp_path):
    from vlagym.eval.configs import EvalError
    from vlagym.eval.server import PolicyServer
    from vlagym.policies.onnx import ExportError, export_onnx

    checkpoint = train(demo_file, tmp_path / "a", {"proprio_lags": list(LAGS)})
    with pytest.raises(ExportError, match="proprio_lags"):
        export_onnx(checkpoint, tmp_path / "policy.onnx")
    with pytest.raises(EvalError, match="proprio_lags"):
        PolicyServer(str(checkpoint), port=0)
    assert np.isfinite(load_policy(checkpoint).proprio[0].weight.detach().numpy()).all()
