"""The latency section: `select_action` p50/p99 at batch 1, as an env loop calls it: the chunk queue,
predicting every call, temporal ensembling; per head, or of one checkpoint. Beside them, one chunk per call by
torch and by onnxruntime running the exported graph (`vlagym.policies.onnx`; CPU, when onnxruntime and
onnxscript are installed)."""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from vlagym.perf.config import BenchConfig
from vlagym.perf.table import Table
from vlagym.perf.training import policy_config
from vlagym.perf.work import Work

logger = logging.getLogger(__name__)


def time_calls(call: Callable[[], Any], calls: int, warmup: int = 20, before: Callable[[], Any] = lambda: None):
    """Seconds per `call()` after `warmup` calls (`before()` runs ahead of the warm-up and of the timed calls)."""
    import torch

    before()
    for _ in range(warmup):
        call()
    before()
    times = np.empty(calls)
    for i in range(calls):
        start = time.perf_counter()
        out = call()
        if isinstance(out, torch.Tensor) and out.device.type == "cuda":
            torch.cuda.synchronize()
        times[i] = time.perf_counter() - start
    return times


def chunk_calls(
    base: Any, obs: dict[str, Any], cfg: BenchConfig, onnx: bool = True
) -> list[tuple[str, Callable[[], Any]]]:
    """(label, call) of one chunk per call from `batch_from_obs(obs)`: by torch and, with `onnx` on the CPU where
    onnxruntime is installed, by onnxruntime on the exported graph (exported here, into a temporary folder)."""
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("chunk per call, torch", lambda: base.predict_action_chunk(base.batch_from_obs(obs)))
    ]
    if cfg.device != "cpu" or not onnx:
        return calls
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        logger.info("latency: onnxruntime or onnxscript not installed, no onnxruntime row")
        return calls
    from vlagym.policies.onnx import OnnxPolicy, export_onnx

    with tempfile.TemporaryDirectory() as tmp:
        base.save_pretrained(Path(tmp) / "ckpt")
        export_onnx(Path(tmp) / "ckpt", Path(tmp) / "model.onnx", check=False)
        runtime = OnnxPolicy(Path(tmp) / "model.onnx", threads=cfg.threads)  # the session holds the model
    calls.append(("chunk per call, onnxruntime", lambda: runtime.predict_action_chunk(base.batch_from_obs(obs))))
    return calls


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
    for i, base in enumerate(bases):
        c = base.config
        env = gym.make(cfg.task_list[0], obs_mode="rgb", image_size=c.image_size, cameras=list(c.cameras))
        try:
            obs, _ = env.reset(seed=0)
        finally:
            env.close()
        timed = [
            (label, lambda p=policy, o=obs: p.select_action(p.batch_from_obs(o)), policy.reset)
            for label, policy in acting_variants(base)
        ] + [(label, call, lambda: None) for label, call in chunk_calls(base, obs, cfg, onnx=i == 0 or not cfg.quick)]
        for label, call, before in timed:
            logger.info("latency: %s, %s", c.head, label)
            ms = time_calls(call, cfg.budget.latency_calls, warmup=min(20, cfg.budget.latency_calls), before=before)
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
        "Policy latency at batch 1: select_action, and one chunk by torch and by onnxruntime",
        ["head", "acting"],
        {"head": "head", "acting": "acting", "p50_ms": "p50 ms", "p99_ms": "p99 ms", "mean_ms": "mean ms"},
        rows,
        [
            f"{cfg.budget.latency_calls} timed calls per row on {cfg.device}, {cfg.threads} torch thread(s), "
            f"a real rgb observation converted by batch_from_obs inside the timed region; the chunk rows call "
            f"predict_action_chunk (torch) and onnxruntime on the exported graph (`vlagym export`; its threads set "
            f"to the same count) for every call, without the chunk's execution; "
            + (f"checkpoint {cfg.policy}" if cfg.policy else "freshly initialised policies")
        ],
    )
