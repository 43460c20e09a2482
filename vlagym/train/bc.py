"""Behaviour cloning of the VLA policy on demo files: one readable script (CleanRL style).

AdamW with linear warmup then cosine decay, gradient clipping, optional EMA of the weights, bf16 autocast on
CUDA, TF32 off unless asked, TensorBoard logs under ``OUT/tb``, a progress bar, periodic success-rate evaluation
on the env the demos were collected on, and ``torchrun`` DDP (each rank reads its `ShardSampler` share).

Outputs of a run folder ``OUT``:

    OUT/bc_config.json                      the `BCConfig` of the run
    OUT/tb/                                 TensorBoard events (loss terms, lr, grad norm, eval success rate)
    OUT/checkpoints/step_<n>/               a policy checkpoint (`vlagym.policies.checkpoint`; the EMA weights
                                            when `ema` > 0) + training_state.pt (model, EMA, optimiser,
                                            scheduler, step, every rank's RNG states; loads with weights_only=True)
    OUT/checkpoints/last.json               {"step": n, "path": "step_<n>"}: the latest complete checkpoint
    OUT/eval/step_<n>/                      evaluation results (results.json, results.md)

A checkpoint folder is written under a temporary name and renamed into place, then ``last.json`` is replaced
atomically, so a run killed at any moment resumes (``resume=True``) from a complete checkpoint. The batch order
and the augmentation depend only on (seed, epoch, step), and the RNG states are restored, so a resumed run
reproduces the uninterrupted one bit for bit on the CPU.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from vlagym.io import atomic_write_json
from vlagym.policies.checkpoint import save_checkpoint
from vlagym.policies.config import ACTING_FIELDS
from vlagym.policies.subtasks import set_subtasks
from vlagym.policies.vla import VLAPolicy, load_policy
from vlagym.train.augment import ImageAugment
from vlagym.train.configs import BCConfig
from vlagym.train.dataset import DemoDataset
from vlagym.train.run import (
    ema_update,
    load_state,
    param_groups,
    preserved_rng,
    resolve_device,
    rng_state,
    seed_everything,
    set_rng_state,
)
from vlagym.train.run_files import (
    BC_CONFIG_NAME,
    STATE_NAME,
    TB_DIR,
    checkpoint_dir,
    commit_checkpoint,
    latest_checkpoint,
)
from vlagym.train.sampler import ShardSampler
from vlagym.train.state_aux import StateAuxiliary
from vlagym.train.stats import compute_stats, load_or_compute_stats

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- helpers
def _all_rng_states() -> list[dict[str, Any]]:
    """Every rank's `rng_state`, in rank order (collective: every rank must call it)."""
    local = rng_state()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [local]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, local)
    return gathered


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Multiplier of the peak lr at `step`: linear warmup, then cosine decay to 0 at `total_steps`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _init_distributed(device: torch.device) -> bool:
    """Join the torchrun process group when RANK/WORLD_SIZE are set; True when this call created it."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ or dist.is_initialized():
        return False
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return True


def demo_env(path: str | os.PathLike) -> tuple[str, dict[str, Any]]:
    """(env_id, env_kwargs) the demo file was collected with (its /data attributes)."""
    with h5py.File(path, "r") as f:
        attrs = f["data"].attrs
        return str(attrs["env_id"]), json.loads(attrs["env_kwargs"])


def _dataset_stats(paths: list[str]) -> dict[str, Any]:
    # One file: the cached statistics beside it; several: computed over all of them together.
    return load_or_compute_stats(paths[0]) if len(paths) == 1 else compute_stats(paths)


def _epoch_loader(dataset: DemoDataset, sampler: ShardSampler, epoch: int, skip: int, cfg: BCConfig) -> DataLoader:
    """This rank's batches of `epoch` from batch number `skip` on (drop_last: every batch is full)."""
    sampler.set_epoch(epoch)
    dataset.set_epoch(epoch)
    indices = list(sampler)
    n = len(indices) // cfg.batch_size
    batches = [indices[i * cfg.batch_size : (i + 1) * cfg.batch_size] for i in range(skip, n)]
    # An explicit generator: the DataLoader would otherwise draw its worker seed from the global RNG.
    generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + epoch)
    return DataLoader(
        dataset, batch_sampler=batches, num_workers=cfg.num_workers, generator=generator, pin_memory=False
    )


def write_checkpoint(
    out: str | os.PathLike, step: int, policy: VLAPolicy, state: dict[str, Any], extra: dict[str, Any]
) -> Path:
    """``checkpoints/step_<step>``: the policy and the training state, committed atomically (`commit_checkpoint`)."""

    def fill(folder: Path) -> None:
        save_checkpoint(policy, folder, extra)
        torch.save(state, folder / STATE_NAME)

    return commit_checkpoint(out, step, fill)


#: Scores a checkpoint folder: (checkpoint, output folder, episodes, num_envs) -> success rate. The evaluation
#: layer provides one (`vlagym.eval.evaluate.checkpoint_success_rate`); training cannot import it (layers).
Evaluator = Callable[[Path, Path, int, int], float]


def _evaluate(evaluator: Evaluator, folder: Path, out: Path, cfg: BCConfig) -> float:
    with preserved_rng():  # the flow head's noise and the envs must not shift the training's random streams
        return float(evaluator(folder, out, cfg.eval_episodes, cfg.eval_num_envs))


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


# ---------------------------------------------------------------------------- phases
@dataclass
class _Run:
    """What one rank trains, built once: the data, the policy and its EMA copy, the optimiser and its schedule."""

    cfg: BCConfig
    rank: int
    world: int
    dataset: DemoDataset
    sampler: ShardSampler
    batches_per_epoch: int
    policy: VLAPolicy
    ema: VLAPolicy | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    extra: dict[str, Any]
    """what every checkpoint's config carries: the env of the demos and this config"""
    aux: StateAuxiliary | None = None
    """the auxiliary state head (`BCConfig.aux_state_weight`)"""

    @property
    def out(self) -> Path:
        return Path(self.cfg.out)

    @property
    def saved_policy(self) -> VLAPolicy:
        """What gets evaluated and saved: the EMA weights when `ema` is on."""
        return self.ema if self.ema is not None else self.policy


@dataclass
class _Step:
    """One optimiser step: the loss, the model's loss terms and the gradient norm before clipping."""

    loss: float
    metrics: dict[str, Any]
    grad_norm: torch.Tensor


def _set_up(cfg: BCConfig, device: torch.device, rank: int, world: int) -> _Run:
    """The run folder and config (rank 0), then data, policy, EMA, optimiser and schedule, seeded as documented."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
        torch.backends.cudnn.allow_tf32 = cfg.tf32
    if rank == 0:
        Path(cfg.out).mkdir(parents=True, exist_ok=True)
        atomic_write_json(Path(cfg.out) / BC_CONFIG_NAME, cfg.to_dict())
    seed_everything(cfg.seed)  # the same initial weights on every rank (the EMA copy too)
    env_id, env_kwargs = demo_env(cfg.dataset[0])
    dataset, sampler, batches_per_epoch = _data(cfg, rank, world)
    if cfg.init is not None:  # fine-tuning: the checkpoint's weights and statistics (its action scale)
        policy = load_policy(cfg.init)
        # ... acting as `cfg.policy` says (the architecture is the checkpoint's: `BCConfig._check_init`)
        policy.config = dataclasses.replace(policy.config, **{k: getattr(cfg.policy, k) for k in ACTING_FIELDS})
        if policy.config.subtasks and not dataset.subtasks:
            logger.warning("the init checkpoint's subtask head is dropped: these demos name no sub-instructions")
        set_subtasks(policy, dataset.subtasks)  # a new subtask head where the demos' sub-instructions differ
    else:
        policy = VLAPolicy(dataclasses.replace(cfg.policy, subtasks=dataset.subtasks))
        policy.set_stats(_dataset_stats(cfg.dataset))
    if dataset.subtasks:
        logger.info("subtasks (sub-instructions the policy may act on): %s", list(dataset.subtasks))
    policy.to(device).train()
    policy.mark_words(dataset.instructions + dataset.task_instructions)  # the subtask head reads the latter
    ema = copy.deepcopy(policy).eval().requires_grad_(False) if cfg.ema > 0 else None
    seed_everything(cfg.seed + rank)  # from here on, the ranks draw different flow noise
    groups = param_groups(policy, cfg.weight_decay)
    aux = None
    if cfg.aux_state_weight > 0:  # after the EMA copy: its hook stays on the trained policy
        aux = StateAuxiliary(policy).to(device)
        groups.append({"params": list(aux.parameters()), "weight_decay": 0.0})
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr)
    # A plain function, not a callable object: LambdaLR would save an object's fields and a resume with more
    # steps would then keep the old schedule's end (lr 0 for every added step).
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg.warmup_steps, cfg.steps))
    extra = {"env_id": env_id, "env_kwargs": env_kwargs, "bc_config": cfg.to_dict()}
    return _Run(cfg, rank, world, dataset, sampler, batches_per_epoch, policy, ema, optimizer, scheduler, extra, aux)


def _data(cfg: BCConfig, rank: int, world: int) -> tuple[DemoDataset, ShardSampler, int]:
    """The dataset, this rank's sampler and its number of full batches per epoch."""
    dataset = DemoDataset(
        cfg.dataset,
        chunk_size=cfg.policy.chunk_size,
        cameras=list(cfg.policy.cameras),
        keys=("proprio", "state") if cfg.aux_state_weight > 0 else ("proprio",),
        augment=ImageAugment(cfg.augmentation) if cfg.augment else None,
        seed=cfg.seed,
    )
    if cfg.preload_gb > 0 and dataset.nbytes <= cfg.preload_gb * 1e9:
        dataset.preload()
        logger.info("demos preloaded: %.2f GB in memory", dataset.nbytes / 1e9)
    elif cfg.preload_gb > 0:  # 1.47x slower on a 2-core machine (docs/multitask.md, session 43): say so
        logger.warning(
            "demos take %.2f GB decoded, over preload_gb=%g: every sample is read from the files, which is slower; "
            "a larger preload_gb (--preload-gb) reads them into memory if it holds them",
            dataset.nbytes / 1e9,
            cfg.preload_gb,
        )
    groups = shares = None
    tasks = dataset.task_samples() if cfg.task_balance > 0 else {}
    if len(tasks) > 1:
        groups = list(tasks.values())
        shares = [len(g) ** (1.0 - cfg.task_balance) for g in groups]
        for (task, group), share in zip(tasks.items(), shares, strict=True):
            logger.info(
                "%s: %.1f%% of the samples, %.1f%% of the batches",
                task,
                100 * len(group) / len(dataset),
                100 * share / sum(shares),
            )
    sampler = ShardSampler(
        dataset, num_replicas=world, rank=rank, shuffle=True, seed=cfg.seed, groups=groups, shares=shares
    )
    batches_per_epoch = len(sampler) // cfg.batch_size
    if batches_per_epoch == 0:
        raise ValueError(
            f"batch_size={cfg.batch_size!r} is larger than this rank's {len(sampler)} samples "
            f"({len(dataset)} in the dataset over {world} rank(s))"
        )
    return dataset, sampler, batches_per_epoch


def _resume(run: _Run) -> int:
    """The step to start at: 0, or with `resume` the latest checkpoint's, whose whole state is loaded into `run`."""
    cfg = run.cfg
    last = latest_checkpoint(run.out) if cfg.resume else None
    if last is None:
        if cfg.resume:
            logger.info("no checkpoint in %s: starting afresh", checkpoint_dir(run.out))
        return 0
    state = load_state(last)
    run.policy.load_state_dict(state["model"], strict=True)
    if run.ema is not None:
        if state.get("ema") is None:
            raise ValueError(f"{last} has no EMA weights but ema={cfg.ema!r}; resume with the run's settings")
        run.ema.load_state_dict(state["ema"], strict=True)
    if run.aux is not None:
        if state.get("aux") is None:
            raise ValueError(
                f"{last} has no auxiliary state head but aux_state_weight > 0: resume with the run's settings"
            )
        run.aux.load_state_dict(state["aux"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    step = int(state["step"])
    if len(state["rng"]) == run.world:
        set_rng_state(state["rng"][run.rank])
    else:  # another world size: the saved streams do not map onto the ranks; derive new ones
        logger.warning(
            "checkpoint from %d rank(s), resuming on %d: random streams reseeded", len(state["rng"]), run.world
        )
        seed_everything(cfg.seed + run.rank + 7919 * step)
    logger.info("resumed from %s at step %d", last, step)
    return step


def _model(run: _Run, device: torch.device) -> torch.nn.Module:
    """The module the steps call: the policy, wrapped in DDP over several ranks."""
    if run.world > 1:
        return torch.nn.parallel.DistributedDataParallel(
            run.policy, device_ids=[device.index] if device.type == "cuda" else None
        )
    return run.policy


def label_padded_actions(batch: dict[str, Any], mode: str) -> dict[str, Any]:
    """The batch with the padded chunk steps past a demo's end turned into labels (`BCConfig.padded_actions`).

    The dataset repeats the demo's last action there. "gripper": its gripper command (the last entry) becomes a
    label, the motion stays out of the loss (`action_is_pad` per entry); "mask": the batch as it is."""
    if mode == "mask":
        return batch
    pad = batch["action_is_pad"]
    entries = pad[..., None].expand(*pad.shape, batch["action"].shape[-1]).clone()
    entries[..., -1] = False
    return {**batch, "action_is_pad": entries}


def _train_step(run: _Run, model: torch.nn.Module, batch: dict[str, Any], autocast: torch.autocast) -> _Step:
    """Forward, backward, clip, step the optimiser and the schedule, update the EMA."""
    batch = label_padded_actions(batch, run.cfg.padded_actions)
    with autocast:
        loss, metrics = model(batch)
        if run.aux is not None:
            aux_loss = run.aux.loss(batch)
            loss = loss + run.cfg.aux_state_weight * aux_loss
            metrics = {**metrics, "aux_state_l1": aux_loss.item()}
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if run.aux is not None:
        run.aux.average_gradients(run.world)
    grad_norm = torch.nn.utils.clip_grad_norm_(run.policy.parameters(), run.cfg.grad_clip or math.inf)
    run.optimizer.step()
    run.scheduler.step()
    if run.ema is not None:
        ema_update(run.ema, run.policy, run.cfg.ema)
    return _Step(float(loss.detach()), metrics, grad_norm)


def _training_state(run: _Run, step: int, rngs: list[dict[str, Any]]) -> dict[str, Any]:
    """What an exact resume needs (tensors and plain values: loads with ``weights_only=True``)."""
    return {
        "step": step,
        "model": {k: v.detach().cpu().clone() for k, v in run.policy.state_dict().items()},
        "ema": None if run.ema is None else {k: v.detach().cpu().clone() for k, v in run.ema.state_dict().items()},
        "optimizer": run.optimizer.state_dict(),
        "scheduler": run.scheduler.state_dict(),
        "rng": rngs,
        "aux": None if run.aux is None else {k: v.detach().cpu().clone() for k, v in run.aux.state_dict().items()},
    }


def _save_and_evaluate(
    run: _Run, step: int, evaluate: bool, evaluator: Evaluator | None, writer: Any
) -> tuple[Path | None, float | None]:
    """Checkpoint `step` and, when `evaluate`, score it (rank 0; every rank must call this): (folder, success rate)."""
    rngs = _all_rng_states()  # every rank's streams, so that every rank resumes exactly
    folder, success_rate = None, None
    if run.rank == 0:
        folder = write_checkpoint(run.out, step, run.saved_policy, _training_state(run, step, rngs), run.extra)
        if evaluate:
            success_rate = _evaluate(evaluator, folder, run.out / "eval" / f"step_{step}", run.cfg)
            writer.add_scalar("eval/success_rate", success_rate, step)
            logger.info("step %d: success rate %.3f", step, success_rate)
    _barrier()
    return folder, success_rate


def _log_step(writer: Any, run: _Run, step: int, result: _Step, t0: float, start: int) -> None:
    """TensorBoard scalars of a step: the loss terms, lr, gradient norm and the throughput since `start`, the step
    this process began with, at time `t0` (a resumed run's steps before it took no time here)."""
    for name, value in result.metrics.items():
        writer.add_scalar(f"train/{name}", value, step)
    writer.add_scalar("train/lr", run.scheduler.get_last_lr()[0], step)
    writer.add_scalar("train/grad_norm", float(result.grad_norm), step)
    samples = (step - start) * run.cfg.batch_size * run.world
    writer.add_scalar("train/samples_per_s", samples / (time.perf_counter() - t0), step)


def _tensorboard(run: _Run, step: int) -> Any:
    """Rank 0's TensorBoard writer (None elsewhere); a resumed run drops the events logged after its checkpoint."""
    if run.rank != 0:
        return None
    from torch.utils.tensorboard import SummaryWriter

    return SummaryWriter(str(run.out / TB_DIR), purge_step=step if step else None)


# ---------------------------------------------------------------------------- main
def train_bc(cfg: BCConfig, evaluator: Evaluator | None = None) -> dict[str, Any]:
    """Train a `VLAPolicy` by behaviour cloning; returns {"step", "checkpoint", "loss", "success_rate", "policy"}.

    Under torchrun (RANK/WORLD_SIZE set) every rank calls this; only rank 0 writes, logs and evaluates.
    `evaluator` scores the checkpoints when ``cfg.eval_every > 0``.
    """
    if cfg.eval_every > 0 and evaluator is None:
        raise ValueError(
            "eval_every > 0 needs an evaluator: train_bc(cfg, evaluator=vlagym.eval.evaluate.checkpoint_success_rate)"
        )
    device = resolve_device(cfg.device)
    created_group = _init_distributed(device)
    rank, world = _world()
    try:
        return _train(cfg, device, rank, world, evaluator)
    finally:
        if created_group:
            dist.destroy_process_group()


def _train(cfg: BCConfig, device: torch.device, rank: int, world: int, evaluator: Evaluator | None) -> dict[str, Any]:
    """Set up, resume, then step: log every `log_every`, checkpoint (and evaluate) when due and at the end."""
    from tqdm.auto import tqdm

    run = _set_up(cfg, device, rank, world)
    step = _resume(run)
    model = _model(run, device)
    writer = _tensorboard(run, step)
    bar = tqdm(
        total=cfg.steps, initial=step, desc="train-bc", disable=not (rank == 0 and cfg.progress), dynamic_ncols=True
    )
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=cfg.bf16 and device.type == "cuda")
    success_rate, ckpt, history = None, latest_checkpoint(run.out), []
    t0, start = time.perf_counter(), step
    while step < cfg.steps:
        epoch, skip = divmod(step, run.batches_per_epoch)
        for batch in _epoch_loader(run.dataset, run.sampler, epoch, skip, cfg):
            result = _train_step(run, model, batch, autocast)
            step += 1
            history.append(result.loss)
            bar.update(1)
            done = step == cfg.steps
            if writer is not None and (step % cfg.log_every == 0 or done):
                _log_step(writer, run, step, result, t0, start)
                bar.set_postfix(loss=f"{result.loss:.4f}")
            evaluate = cfg.eval_every > 0 and (step % cfg.eval_every == 0 or done)
            if done or evaluate or (cfg.checkpoint_every and step % cfg.checkpoint_every == 0):
                folder, rate = _save_and_evaluate(run, step, evaluate, evaluator, writer)
                ckpt = folder or ckpt
                success_rate = success_rate if rate is None else rate
            if done:
                break
    bar.close()
    if writer is not None:
        writer.close()
    return {
        "step": step,
        "checkpoint": str(ckpt) if ckpt is not None else None,
        "loss": history[-1] if history else math.nan,
        "losses": history,
        "success_rate": success_rate,
        "policy": run.saved_policy,
    }
