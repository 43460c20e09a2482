"""The auxiliary state loss (`BCConfig.aux_state_weight`): its value, where its gradient goes, a run with it that
resumes exactly and saves a policy without the head, and its config checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vlagym.policies import VLAConfig, VLAPolicy, load_policy
from vlagym.train.bc import BCConfig, train_bc
from vlagym.train.demos import DemoConfig, collect_demos
from vlagym.train.run_files import STATE_NAME
from vlagym.train.state_aux import AUX_STATE, STATE_KEY, UNIT, StateAuxiliary

TINY = {"image_size": 32, "vision_channels": [8, 16], "hidden_dim": 32, "text_layers": 1, "text_heads": 4}


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("aux_demos") / "pick.hdf5"
    collect_demos(DemoConfig(task="VLA-PickCup-v0", episodes=2, out=str(path), image_size=32, progress=False))
    return path


def batch(b: int = 4, chunk: int = 10) -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "observation.images.front": torch.randint(0, 256, (b, 3, 32, 32), dtype=torch.uint8, generator=g),
        "observation.images.wrist": torch.randint(0, 256, (b, 3, 32, 32), dtype=torch.uint8, generator=g),
        "observation.proprio": torch.randn(b, 23, generator=g),
        STATE_KEY: torch.randn(b, 83, generator=g) * 0.2,
        "instruction": ["pick up the red cup"] * b,
        "action": torch.randn(b, chunk, 7, generator=g),
    }


def test_loss_is_the_l1_of_the_relative_positions_in_10_cm_units():
    policy = VLAPolicy(VLAConfig.from_dict(TINY))
    aux = StateAuxiliary(policy)
    torch.nn.init.zeros_(aux.head.weight)
    torch.nn.init.zeros_(aux.head.bias)
    b = batch()
    policy(b)
    expected = (b[STATE_KEY][:, AUX_STATE] / UNIT).abs().mean()
    assert AUX_STATE == slice(33, 39)  # target - grasp site, goal - target (the task state after the proprio)
    assert torch.allclose(aux.loss(b), expected)
    with pytest.raises(RuntimeError, match="forward pass"):
        aux.loss(b)  # the features were used up: no silent reuse of a stale pass
    policy.eval()
    with torch.no_grad():
        policy(b)  # an evaluation pass is not kept for the next training step
    with pytest.raises(RuntimeError, match="forward pass"):
        aux.loss(b)


def test_gradient_reaches_the_front_encoder_only():
    policy = VLAPolicy(VLAConfig.from_dict(TINY))
    aux = StateAuxiliary(policy)
    b = batch()
    policy(b)
    aux.loss(b).backward()
    front = [p.grad for p in policy.vision["front"].parameters() if p.requires_grad]
    assert any(g is not None and g.abs().sum() > 0 for g in front)
    assert all(p.grad is None for p in policy.vision["wrist"].parameters())
    assert all(p.grad is None for p in policy.trunk.parameters())
    assert all(p.grad is None for p in policy.head.parameters())
    aux.remove()
    policy(b)
    with pytest.raises(RuntimeError):
        aux.loss(b)


def test_needs_the_front_camera_and_a_non_negative_weight(demos, tmp_path):
    with pytest.raises(ValueError, match="'front' camera"):
        StateAuxiliary(VLAPolicy(VLAConfig.from_dict({**TINY, "cameras": ["wrist"]})))
    with pytest.raises(ValueError, match="aux_state_weight"):
        BCConfig(dataset=[str(demos)], out=str(tmp_path), aux_state_weight=-1.0)


def config(demos: Path, out: Path, **kwargs) -> BCConfig:
    base = dict(
        dataset=[str(demos)],
        out=str(out),
        policy=VLAConfig.from_dict({**TINY, "chunk_size": 4}),
        steps=20,
        batch_size=8,
        lr=3e-3,
        warmup_steps=3,
        checkpoint_every=10,
        log_every=5,
        progress=False,
        aux_state_weight=1.0,
    )
    return BCConfig(**{**base, **kwargs})


def test_a_run_resumes_exactly_and_saves_the_policy_without_the_head(demos, tmp_path):
    out = tmp_path / "run"
    train_bc(config(demos, out))
    state = torch.load(out / "checkpoints" / "step_20" / STATE_NAME, weights_only=True)
    assert set(state["aux"]) == {"head.weight", "head.bias"}
    policy = load_policy(out / "checkpoints" / "step_20")  # the policy's weights alone: no head among them
    plain = train_bc(config(demos, tmp_path / "plain", aux_state_weight=0.0))["policy"]
    assert policy.state_dict().keys() == plain.state_dict().keys()

    # As after a kill at step 10: the step-20 checkpoint gone, the run resumed, the same state at step 20.
    again = tmp_path / "again"
    train_bc(config(demos, again))
    (again / "checkpoints" / "step_20").rename(tmp_path / "discarded")
    (again / "checkpoints" / "last.json").write_text(json.dumps({"step": 10, "path": "step_10"}))
    train_bc(config(demos, again, resume=True))
    resumed = torch.load(again / "checkpoints" / "step_20" / STATE_NAME, weights_only=True)
    for part in ("model", "aux"):
        for k, v in state[part].items():
            assert torch.equal(v, resumed[part][k]), (part, k)


def test_the_head_learns_on_a_fixed_batch():
    policy = VLAPolicy(VLAConfig.from_dict(TINY))
    aux = StateAuxiliary(policy)
    opt = torch.optim.Adam([*policy.parameters(), *aux.parameters()], lr=3e-3)
    b = batch()
    losses = []
    for _ in range(30):
        policy(b)
        loss = aux.loss(b)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
