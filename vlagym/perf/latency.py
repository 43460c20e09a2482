"""The latency section: `select_action` p50/p99 at batch 1, as an env loop calls it: the chunk queue,
predicting every call, temporal ensembling; per head, or of one checkpoint."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

import gymnasium as gym
import numpy as np

from vlagym.perf.config import BenchConfig
from vlagym.perf.table import Table
from vlagym.perf.training import policy_config
from vlagym.perf.work import Work

logger = logging.getLogger(__name__)


def time_select_action(policy: Any, obs: dict[str, Any], calls: int, warmup: int = 20) -> np.ndarray:
    """Seconds per `select_action(batch_from_obs(obs))` call, as an env loop calls it, after `warmup` calls."""
    import torch

    policy.reset()
    for _ in range(warmup):
        policy.select_action(policy.batch_from_obs(obs))
    policy.reset()
    times = np.empty(calls)
    for i in range(calls):
        start = time.perf_counter()
        action = policy.select_action(policy.batch_from_obs(obs))
        if action.device.type == "cuda":
            torch.cuda.synchronize()
        times[i] = time.perf_counter() - start
    return times


def acting_variants(base: Any) -> list[tuple[str, Any]]:
    """(label, policy): the policy's own acting settings, predicting every call, temporal ensembling."""
    from vlagym.policies import VLAPolicy

    rows = [(f"queue (n_action_steps={base.config.n_action_steps})", base)]
    for label, changes in (
        ("predict every call", {"n_action_steps": 1, "temporal_ensemble": False}),
        ("temporal ensemble", {"n_action_steps": 1, "temporal_ensemble": True}),
    ):
        policy = VLAPolicy(dataclasses.replace(base.config, **changes), base.tokenizer)
        policy.load_state_dict(base.state_dict())
        rows.append((label, policy.to(base.device).eval()))
    return rows


def bench_latency(cfg: BenchConfig, work: Work) -> Table:
    """The latency table: per head (or of `cfg.policy`), one row per way of acting."""
    from vlagym.policies import VLAPolicy

    if cfg.policy:
        bases = [VLAPolicy.from_pretrained(cfg.policy, device=cfg.device)]
    else:  # latency does not depend on the weights
        bases = [VLAPolicy(policy_config(cfg, head)).to(cfg.device).eval() for head in ("l1", "flow")]
    rows = []
    for base in bases:
        c = base.config
        env = gym.make(cfg.task_list[0], obs_mode="rgb", image_size=c.image_size, cameras=list(c.cameras))
        try:
            obs, _ = env.reset(seed=0)
        finally:
            env.close()
        for label, policy in acting_variants(base):
            logger.info("latency: %s, %s", c.head, label)
            ms = time_select_action(policy, obs, cfg.budget.latency_calls, warmup=min(20, cfg.budget.latency_calls))
            ms *= 1e3
            rows.append(
                {
                    "head": c.head,
                    "acting": label,
                    "p50_ms": float(np.percentile(ms, 50)),
                    "p99_ms": float(np.percentile(ms, 99)),
                    "mean_ms": float(ms.mean()),
                    "max_ms": float(ms.max()),
                }
            )
    return Table(
        "latency",
        "Policy latency: select_action at batch 1",
        ["head", "acting"],
        {"head": "head", "acting": "acting", "p50_ms": "p50 ms", "p99_ms": "p99 ms", "mean_ms": "mean ms"},
        rows,
        [
            f"{cfg.budget.latency_calls} timed calls per row on {cfg.device}, {cfg.threads} torch thread(s), "
            f"a real rgb observation converted by batch_from_obs inside the timed region; "
            + (f"checkpoint {cfg.policy}" if cfg.policy else "freshly initialised policies")
        ],
    )
