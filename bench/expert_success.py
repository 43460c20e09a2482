"""Scripted-expert success per task and split on fresh seeds, as a Markdown table.

python bench/expert_success.py [--tasks ID ...] [--seeds 200] [--first-seed 100000]
"""

from __future__ import annotations

import argparse
import json

import vlagym
from vlagym.envs.splits import SPLITS
from vlagym.eval.expert import expert_outcomes, wilson_interval


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="*", default=None)
    parser.add_argument("--splits", nargs="*", default=list(SPLITS))
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=100000)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    tasks = args.tasks or sorted(t for t in vlagym.TASKS if t != "VLA-MultiTask-v0")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    results = {}
    span = f"{seeds.start}..{seeds.stop - 1}"
    print(f"expert success over seeds {span} (n={args.seeds} per cell; in brackets the 95% Wilson lower bound)")
    print()
    print("| task | " + " | ".join(args.splits) + " |")
    print("|---|" + "---|" * len(args.splits))
    for task in tasks:
        cells = []
        for split in args.splits:
            outcomes = expert_outcomes(task, seeds, split=split)
            k = sum(outcomes)
            lo, _ = wilson_interval(k, len(outcomes))
            results[f"{task}/{split}"] = {"successes": k, "n": len(outcomes), "wilson_low": lo}
            cells.append(f"{k / len(outcomes):.1%} (>{lo:.1%})")
        print(f"| {task} | " + " | ".join(cells) + " |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
