"""Vector-env throughput: async with 2 workers against 1, and against sync, in one run.

python bench/bench_vector.py [--task VLA-PickCup-v0] [--steps 600]
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is imported: it picks its GL backend then

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import vlagym  # noqa: E402, F401  (registers the tasks)

CONFIGS = [("sync", 1), ("async", 1), ("sync", 2), ("async", 2)]


def env_steps_per_s(task: str, mode: str, num_envs: int, steps: int, **kwargs) -> float:
    envs = gym.make_vec(task, num_envs=num_envs, vectorization_mode=mode, **kwargs)
    try:
        rng = np.random.default_rng(0)
        actions = rng.uniform(-1, 1, (steps, num_envs, 7)).astype(np.float32)
        envs.reset(seed=0)
        for a in actions[:10]:  # warm-up: renderers, first contacts
            envs.step(a)
        t = time.perf_counter()
        for a in actions[10:]:
            envs.step(a)
        return (steps - 10) * num_envs / (time.perf_counter() - t)
    finally:
        envs.close()


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="VLA-PickCup-v0")
    parser.add_argument("--steps", type=int, default=600, help="vector steps per configuration")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    modes = {"state": {"obs_mode": "state"}, "rgb": {"obs_mode": "rgb", "image_size": 128}}
    results = {
        name: {f"{m}-{n}": env_steps_per_s(args.task, m, n, args.steps, **kw) for m, n in CONFIGS}
        for name, kw in modes.items()
    }
    print(f"{args.task}: env steps/s (all sub-envs together), {os.cpu_count()} CPUs")
    print()
    print("| obs | sync x1 | async x1 | sync x2 | async x2 | async x2 / async x1 | async x2 / sync x1 |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['sync-1']:.0f} | {r['async-1']:.0f} | {r['sync-2']:.0f} | {r['async-2']:.0f} | "
            f"{r['async-2'] / r['async-1']:.2f} | {r['async-2'] / r['sync-1']:.2f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
