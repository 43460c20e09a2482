"""Behaviour cloning: outputs, learning, exact resume after a SIGKILL, DDP on 2 gloo ranks, config checks."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import h5py
import pytest
import torch
from safetensors.torch import load_file

from vlagym.eval.evaluate import checkpoint_success_rate
from vlagym.policies import VLAConfig, load_policy
from vlagym.train.bc import BCConfig, _log_step, label_padded_actions, lr_factor, train_bc
from vlagym.train.demos import DemoConfig, collect_demos
from vlagym.train.run_files import STATE_NAME, latest_checkpoint
from vlagym.wrappers.language import split_words

TINY_POLICY = {
    "image_size": 32,
    "vision_channels": [8, 16],
    "hidden_dim": 32,
    "text_layers": 1,
    "text_heads": 4,
    "chunk_size": 4,
}


@pytest.fixture(scope="session")
def pick_demos(tmp_path_factory) -> Path:
    """Three scripted PickCup episodes at 32 px (about 80 steps)."""
    path = tmp_path_factory.mktemp("bc_demos") / "pick.hdf5"
    collect_demos(DemoConfig(task="VLA-PickCup-v0", episodes=3, out=str(path), image_size=32, progress=False))
    return path


def tiny_config(demos: Path, out: Path, **kwargs) -> BCConfig:
    base = dict(
        dataset=[str(demos)],
        out=str(out),
        policy=VLAConfig.from_dict(TINY_POLICY),
        steps=20,
        batch_size=8,
        lr=1e-3,
        warmup_steps=3,
        checkpoint_every=10,
        log_every=5,
        progress=False,
    )
    base.update(kwargs)
    return BCConfig(**base)


def weights(folder: Path) -> dict[str, torch.Tensor]:
    state = torch.load(folder / STATE_NAME, map_location="cpu", weights_only=True)
    tensors = {f"model.{k}": v for k, v in state["model"].items()}
    tensors.update({f"policy.{k}": v for k, v in load_file(str(folder / "model.safetensors")).items()})
    for i, group in state["optimizer"]["state"].items():
        tensors.update({f"adam.{i}.{k}": v for k, v in group.items() if isinstance(v, torch.Tensor)})
    return tensors


def assert_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"tensors differ: {different[:5]}"


@pytest.mark.smoke
def test_training_writes_checkpoints_config_and_logs(pick_demos, tmp_path):
    out = tmp_path / "run"
    result = train_bc(
        tiny_config(pick_demos, out, eval_every=20, eval_episodes=1, ema=0.9), evaluator=checkpoint_success_rate
    )
    assert result["step"] == 20
    assert latest_checkpoint(out) == out / "checkpoints" / "step_20"
    assert (out / "checkpoints" / "step_10" / STATE_NAME).is_file()
    assert json.loads((out / "checkpoints" / "last.json").read_text()) == {"step": 20, "path": "step_20"}
    saved = json.loads((out / "bc_config.json").read_text())
    assert saved["steps"] == 20 and saved["policy"]["hidden_dim"] == 32
    assert BCConfig.from_dict(saved).policy == VLAConfig.from_dict(TINY_POLICY)
    assert list((out / "tb").glob("events.out.tfevents.*"))
    assert (out / "eval" / "step_20" / "results.json").is_file()
    assert result["success_rate"] is not None and 0.0 <= result["success_rate"] <= 1.0
    # The checkpoint rebuilds the policy with the EMA weights, and names the demos' env.
    policy = load_policy(out / "checkpoints" / "step_20")
    for k, v in result["policy"].state_dict().items():
        assert torch.equal(v, policy.state_dict()[k]), k
    meta = json.loads((out / "checkpoints" / "step_20" / "config.json").read_text())
    assert meta["extra"]["env_id"] == "VLA-PickCup-v0"
    assert meta["extra"]["env_kwargs"]["image_size"] == 32
    assert meta["extra"]["bc_config"]["ema"] == 0.9
    # EMA weights differ from the raw ones they average.
    state = torch.load(out / "checkpoints" / "step_20" / STATE_NAME, weights_only=True)
    assert not torch.equal(state["model"]["head.weight"], policy.state_dict()["head.weight"])


def test_loss_decreases(pick_demos, tmp_path):
    result = train_bc(tiny_config(pick_demos, tmp_path / "run", steps=40, lr=3e-3, augment=False))
    losses = result["losses"]
    assert len(losses) == 40
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.8 * first, (first, last)


KILL_SCRIPT = """
import os, signal, sys
import torch
import vlagym.train.bc as bc

torch.set_num_threads({threads})  # the parent's: the thread count changes floating-point reduction order

original = bc.write_checkpoint

def write_then_die(out, step, *args, **kwargs):
    folder = original(out, step, *args, **kwargs)
    if step == {kill_at}:
        os.kill(os.getpid(), signal.SIGKILL)  # a hard kill: no cleanup, no atexit
    return folder

bc.write_checkpoint = write_then_die
bc.train_bc(bc.BCConfig.from_dict({config}))
"""


def test_resume_after_sigkill_is_bit_identical(pick_demos, tmp_path):
    # The flow head draws noise from the global RNG and augmentation is on: both must replay after the resume.
    policy = VLAConfig.from_dict({**TINY_POLICY, "head": "flow"})
    # Uninterrupted reference.
    ref = tmp_path / "ref"
    train_bc(tiny_config(pick_demos, ref, checkpoint_every=5, policy=policy, ema=0.5))
    # Same run in a subprocess, killed right after its step-10 checkpoint, then resumed here.
    cut = tmp_path / "cut"
    cfg = tiny_config(pick_demos, cut, checkpoint_every=5, policy=policy, ema=0.5)
    script = KILL_SCRIPT.format(kill_at=10, config=repr(cfg.to_dict()), threads=torch.get_num_threads())
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert latest_checkpoint(cut) == cut / "checkpoints" / "step_10"
    assert not (cut / "checkpoints" / "step_15").exists()
    resumed = train_bc(tiny_config(pick_demos, cut, checkpoint_every=5, policy=policy, ema=0.5, resume=True))
    assert resumed["step"] == 20
    assert len(resumed["losses"]) == 10  # only the steps after the checkpoint were run
    assert_identical(weights(ref / "checkpoints" / "step_20"), weights(cut / "checkpoints" / "step_20"))
    # The sanity check that the comparison can fail: a different seed gives different weights.
    other = tmp_path / "other"
    train_bc(tiny_config(pick_demos, other, checkpoint_every=5, policy=policy, ema=0.5, seed=1, steps=10))
    a, b = weights(ref / "checkpoints" / "step_10"), weights(other / "checkpoints" / "step_10")
    assert any(not torch.equal(a[k], b[k]) for k in a)


DDP_SCRIPT = """
import os, sys
import torch
from safetensors.torch import save_file
from vlagym.train.bc import BCConfig, train_bc

result = train_bc(BCConfig.from_dict({config}))
rank = int(os.environ["RANK"])
state = {{k: v.detach().contiguous().clone() for k, v in result["policy"].state_dict().items()}}
save_file(state, os.path.join(sys.argv[1], f"rank{{rank}}.safetensors"))
"""


def run_ddp(cfg: BCConfig, folder: Path) -> dict[str, torch.Tensor]:
    """Train `cfg` on 2 gloo ranks under torchrun; check the ranks end identical and return rank 0's weights."""
    folder.mkdir(exist_ok=True)
    script = folder / "ddp_train.py"
    script.write_text(textwrap.dedent(DDP_SCRIPT.format(config=repr(cfg.to_dict()))))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
    proc = subprocess.run([*cmd, str(folder)], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rank0, rank1 = load_file(str(folder / "rank0.safetensors")), load_file(str(folder / "rank1.safetensors"))
    assert_identical(rank0, rank1)
    return rank0


def test_ddp_two_gloo_ranks_stay_in_sync_and_resume_exactly(pick_demos, tmp_path):
    policy = VLAConfig.from_dict({**TINY_POLICY, "head": "flow"})  # per-rank flow noise from each rank's RNG
    out = tmp_path / "ddp"
    cfg = tiny_config(pick_demos, out, steps=6, checkpoint_every=3, batch_size=4, policy=policy, ema=0.5)
    rank0 = run_ddp(cfg, tmp_path / "a")
    # Rank 0 wrote the checkpoints, holding the ranks' common (EMA) weights, and every rank's RNG streams.
    assert latest_checkpoint(out) == out / "checkpoints" / "step_6"
    assert_identical(load_file(str(out / "checkpoints" / "step_6" / "model.safetensors")), rank0)
    assert not list((out / "checkpoints").glob(".tmp*"))
    state = torch.load(out / "checkpoints" / "step_3" / STATE_NAME, weights_only=True)
    assert len(state["rng"]) == 2 and not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])
    # What a run killed after step 3 leaves behind, resumed on 2 ranks: the same step-6 weights.
    cut = tmp_path / "cut"
    shutil.copytree(out, cut)
    shutil.rmtree(cut / "checkpoints" / "step_6")
    (cut / "checkpoints" / "last.json").write_text(json.dumps({"step": 3, "path": "step_3"}))
    resumed = run_ddp(dataclasses.replace(cfg, out=str(cut), resume=True), tmp_path / "b")
    assert_identical(weights(out / "checkpoints" / "step_6"), weights(cut / "checkpoints" / "step_6"))
    assert_identical(resumed, rank0)


def test_lr_schedule_warms_up_then_decays_to_zero():
    assert lr_factor(0, 10, 100) == pytest.approx(0.1)
    assert lr_factor(9, 10, 100) == pytest.approx(1.0)
    assert lr_factor(10, 10, 100) == pytest.approx(1.0)
    assert lr_factor(55, 10, 100) == pytest.approx(0.5)
    assert lr_factor(100, 10, 100) == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("field", "value", "quoted"),
    [
        ("steps", 0, "0"),
        ("lr", -1.0, "-1.0"),
        ("ema", 1.0, "1.0"),
        ("device", "tpu", "'tpu'"),
        ("batch_size", 2.5, "2.5"),
        ("bf16", "yes", "'yes'"),
        ("preload_gb", -1.0, "-1.0"),
        ("task_balance", 1.5, "1.5"),
        ("padded_actions", "hold", "'hold'"),
        ("dataset", ["missing.hdf5"], "'missing.hdf5'"),
        ("augmentation", "wide", "'wide'"),
        ("policy", 3, "3"),
    ],
)
def test_bad_config_raises_quoting_the_value(pick_demos, tmp_path, field, value, quoted):
    kwargs = {"dataset": [str(pick_demos)], "out": str(tmp_path), field: value}
    with pytest.raises(ValueError, match=field if field != "dataset" else "dataset") as err:
        BCConfig(**kwargs)
    assert quoted in str(err.value)


def test_padded_steps_become_gripper_labels():
    last = torch.tensor([0.3, -0.2, 0.1, 0.05, 0.0, -0.1, -1.0])  # the release: gripper open
    action = torch.stack([torch.full((7,), 0.5), last, last, last]).unsqueeze(0)  # a chunk of 4, 2 steps padded
    pad = torch.tensor([[False, False, True, True]])
    batch = {"action": action, "action_is_pad": pad, "instruction": ["x"]}
    assert label_padded_actions(batch, "mask") is batch
    gripper = label_padded_actions(batch, "gripper")
    assert torch.equal(gripper["action"], action) and gripper["instruction"] == ["x"]
    assert gripper["action_is_pad"].shape == (1, 4, 7)
    assert not gripper["action_is_pad"][0, :2].any() and not gripper["action_is_pad"][0, 2:, -1].any()
    assert gripper["action_is_pad"][0, 2:, :-1].all()  # the motion past the end stays out of the loss
    assert batch["action_is_pad"] is pad and pad.shape == (1, 4)  # the input batch is left as it was


def test_padded_gripper_commands_enter_the_loss(pick_demos, tmp_path):
    # 32 of the ~80 samples per step: the batches hold padded chunks (the last 3 frames of each episode).
    kwargs = dict(steps=2, batch_size=32, checkpoint_every=0)
    masked = train_bc(tiny_config(pick_demos, tmp_path / "mask", **kwargs))
    labelled = train_bc(tiny_config(pick_demos, tmp_path / "gripper", padded_actions="gripper", **kwargs))
    assert masked["losses"][0] != labelled["losses"][0]  # the same first batch, more labels in the loss
    assert json.loads((tmp_path / "gripper" / "bc_config.json").read_text())["padded_actions"] == "gripper"


def test_batch_larger_than_dataset_raises(pick_demos, tmp_path):
    with pytest.raises(ValueError, match="batch_size=100000"):
        train_bc(tiny_config(pick_demos, tmp_path / "run", batch_size=100_000))


def test_resume_with_more_steps_keeps_learning(pick_demos, tmp_path):
    # The schedule comes from the new config: the added steps must not run at the old schedule's final lr of 0.
    out = tmp_path / "run"
    train_bc(tiny_config(pick_demos, out, steps=6, checkpoint_every=0))
    result = train_bc(tiny_config(pick_demos, out, steps=10, checkpoint_every=0, resume=True))
    assert result["step"] == 10 and len(result["losses"]) == 4
    before, after = weights(out / "checkpoints" / "step_6"), weights(out / "checkpoints" / "step_10")
    assert not torch.equal(before["model.head.weight"], after["model.head.weight"])


def test_dataloader_workers_and_preloading_do_not_change_the_result(pick_demos, tmp_path, caplog):
    # Batches and augmentation depend only on (seed, epoch, index), never on which process loads them or
    # whether the demos were read into memory first (the default for demos this small).
    results = {}
    for name, options in {
        "default": {},
        "workers": {"num_workers": 2},
        "from-files": {"preload_gb": 0.0},
        "from-files-workers": {"preload_gb": 0.0, "num_workers": 2},
    }.items():
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="vlagym.train.bc"):
            config = tiny_config(pick_demos, tmp_path / name, steps=12, checkpoint_every=0, **options)
            results[name] = train_bc(config)["policy"].state_dict()
        assert ("demos preloaded" in caplog.text) == ("preload_gb" not in options), name
    for name in ("workers", "from-files", "from-files-workers"):
        assert_identical(results["default"], results[name])


def test_demos_over_the_preload_budget_are_read_from_the_files_with_a_warning(pick_demos, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="vlagym.train.bc"):
        train_bc(tiny_config(pick_demos, tmp_path / "run", steps=2, checkpoint_every=0, preload_gb=1e-6))
    assert "demos preloaded" not in caplog.text
    assert "over preload_gb=1e-06" in caplog.text and "--preload-gb" in caplog.text


def test_throughput_counts_only_the_steps_this_process_ran():
    # A run resumed at step 10 and logging at step 20, 2 s after it started: 10 steps of 8 samples in 2 s, not 20.
    logged = {}
    writer = SimpleNamespace(add_scalar=lambda name, value, step: logged.__setitem__(name, value))
    run = SimpleNamespace(
        cfg=SimpleNamespace(batch_size=8), world=1, scheduler=SimpleNamespace(get_last_lr=lambda: [1e-3])
    )
    result = SimpleNamespace(metrics={"loss": 1.0}, grad_norm=torch.tensor(1.0))
    _log_step(writer, run, 20, result, time.perf_counter() - 2.0, start=10)
    assert 39.0 < logged["train/samples_per_s"] <= 40.0


def test_task_balance_gives_every_task_its_share_of_the_batches(pick_demos, tmp_path, caplog):
    demos = tmp_path / "two_tasks.hdf5"
    shutil.copy(pick_demos, demos)
    with h5py.File(demos, "a") as f:
        names = sorted(f["data"])
        f["data"][names[0]].attrs["task"] = "VLA-PushCube-v0"
        lengths = [int(f["data"][n].attrs["num_samples"]) for n in names]
    pushed = 100 * lengths[0] / sum(lengths)
    with caplog.at_level(logging.INFO, logger="vlagym.train.bc"):
        train_bc(tiny_config(demos, tmp_path / "run", steps=4, checkpoint_every=0, task_balance=1.0))
    assert f"VLA-PushCube-v0: {pushed:.1f}% of the samples, 50.0% of the batches" in caplog.text
    assert "VLA-PickCup-v0" in caplog.text


def test_film_words_checkpoint_marks_every_word_of_the_demos(pick_demos, tmp_path):
    # One step of 2 samples: the batch holds one or two instructions, the demos more words. The trainer marks
    # them all up front (under DDP every rank then holds them, whatever rank 0's batches were).
    policy_config = VLAConfig.from_dict({**TINY_POLICY, "film_words": True})
    config = tiny_config(pick_demos, tmp_path / "run", policy=policy_config, steps=1, batch_size=2, checkpoint_every=0)
    policy = load_policy(train_bc(config)["checkpoint"])
    with h5py.File(pick_demos, "r") as f:
        words = {w for name in f["data"] for w in split_words(str(f["data"][name].attrs["instruction"]))}
    marked = {policy.tokenizer.vocab[i] for i in policy.film_seen.nonzero().flatten().tolist()} - {"<pad>"}
    assert marked == words


def test_init_fine_tunes_a_checkpoint_from_its_weights_and_statistics(pick_demos, tmp_path):
    first = Path(train_bc(tiny_config(pick_demos, tmp_path / "a", steps=4, checkpoint_every=0))["checkpoint"])
    start = load_file(str(first / "model.safetensors"))
    # A learning rate too small to move a weight: the fine-tuned policy is the checkpoint it started from.
    tuned = train_bc(tiny_config(pick_demos, tmp_path / "b", steps=1, lr=1e-12, init=str(first), seed=7))
    after = load_file(str(Path(tuned["checkpoint"]) / "model.safetensors"))
    assert after.keys() == start.keys()
    assert all(torch.allclose(after[k], start[k], atol=1e-6) for k in start)
    fresh = train_bc(tiny_config(pick_demos, tmp_path / "c", steps=1, lr=1e-12, seed=7))
    fresh_weights = load_file(str(Path(fresh["checkpoint"]) / "model.safetensors"))
    assert not torch.allclose(fresh_weights["head.weight"], start["head.weight"])


def test_init_fine_tunes_into_a_checkpoint_that_acts_as_the_config_says(pick_demos, tmp_path):
    first = Path(train_bc(tiny_config(pick_demos, tmp_path / "a", steps=1, checkpoint_every=0))["checkpoint"])
    assert not load_policy(first).config.temporal_ensemble
    ensemble = VLAConfig.from_dict({**TINY_POLICY, "temporal_ensemble": True, "n_action_steps": 1})
    tuned = train_bc(tiny_config(pick_demos, tmp_path / "b", steps=1, init=str(first), policy=ensemble))
    config = load_policy(tuned["checkpoint"]).config
    assert config.temporal_ensemble and config.n_action_steps == 1
    assert config.to_dict() == ensemble.to_dict()


def test_init_refuses_another_architecture_or_a_missing_checkpoint(pick_demos, tmp_path):
    first = Path(train_bc(tiny_config(pick_demos, tmp_path / "a", steps=1, checkpoint_every=0))["checkpoint"])
    wider = VLAConfig.from_dict({**TINY_POLICY, "hidden_dim": 64})
    with pytest.raises(ValueError, match=r"init checkpoint's architecture in \['hidden_dim'\]"):
        tiny_config(pick_demos, tmp_path / "b", policy=wider, init=str(first))
    with pytest.raises(ValueError, match="init: .*no such folder"):
        tiny_config(pick_demos, tmp_path / "b", init=str(tmp_path / "missing"))
