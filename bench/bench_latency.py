"""Acting latency of the VLA: p50/p99 of `select_action` at batch 1, with chunking amortised, in one run.

    python bench/bench_latency.py [--policy CHECKPOINT] [--calls 1000] [--threads 1] [--device cpu]

Without --policy it times freshly initialised policies of the default architecture (latency does not
depend on the weights) for both heads, and for each: `select_action` as an env loop calls it (one chunk
predicted every `n_action_steps` calls, the other calls pop the queue), every call predicting
(`n_action_steps=1`), and temporal ensembling (a prediction per call plus the running average). The
observation is a real rgb observation of VLA-PickCup-v0 at the policy's image size, converted by
`batch_from_obs` inside the timed region, as in evaluation. Times are wall-clock per call after 20 warm-up
calls. Numbers compare rows of one run on one machine; they are never asserted in tests.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import time

import gymnasium as gym
import numpy as np
import torch

import vlagym  # noqa: F401  (registers the tasks, sets up headless rendering)
from vlagym.policies import VLAConfig, VLAPolicy

WARMUP = 20


def time_calls(policy: VLAPolicy, obs: dict, calls: int) -> np.ndarray:
    """Seconds per `select_action(batch_from_obs(obs))` call, `calls` of them after the warm-up."""
    policy.reset()
    for _ in range(WARMUP):
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


def variants(base: VLAPolicy) -> list[tuple[str, VLAPolicy]]:
    """(label, policy) rows: the checkpoint's own acting settings, every step, and temporal ensembling."""
    rows = [(f"queue (n_action_steps={base.config.n_action_steps})", base)]
    for label, changes in (
        ("predict every call", {"n_action_steps": 1, "temporal_ensemble": False}),
        ("temporal ensemble", {"n_action_steps": 1, "temporal_ensemble": True}),
    ):
        policy = VLAPolicy(dataclasses.replace(base.config, **changes), base.tokenizer)
        policy.load_state_dict(base.state_dict())
        rows.append((label, policy.to(base.device).eval()))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", help="checkpoint folder (default: untrained default policies, both heads)")
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per row")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.policy:
        bases = [VLAPolicy.from_pretrained(args.policy, device=args.device)]
    else:
        bases = [VLAPolicy(VLAConfig(head=head)).to(args.device).eval() for head in ("l1", "flow")]
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s)")
    print("| head | acting | image | p50 ms | p99 ms | mean ms | max ms |")
    print("|---|---|---|---:|---:|---:|---:|")
    rows = []
    for base in bases:
        cfg = base.config
        env = gym.make("VLA-PickCup-v0", obs_mode="rgb", image_size=cfg.image_size, cameras=list(cfg.cameras))
        obs, _ = env.reset(seed=0)
        env.close()
        for label, policy in variants(base):
            ms = time_calls(policy, obs, args.calls) * 1e3
            row = {
                "head": cfg.head,
                "acting": label,
                "image_size": cfg.image_size,
                "p50_ms": float(np.percentile(ms, 50)),
                "p99_ms": float(np.percentile(ms, 99)),
                "mean_ms": float(ms.mean()),
                "max_ms": float(ms.max()),
            }
            rows.append(row)
            print(
                f"| {row['head']} | {label} | {cfg.image_size} | {row['p50_ms']:.3f} | {row['p99_ms']:.3f} | "
                f"{row['mean_ms']:.3f} | {row['max_ms']:.3f} |"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "device": args.device, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
