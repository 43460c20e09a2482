"""`vlagym bench`: speed benchmarks side by side, and two saved runs compared."""

from __future__ import annotations

import argparse

from vlagym.cli.common import EXIT_OK, UserError, add_options, build
from vlagym.cli.options import option_values
from vlagym.perf.config import BenchConfig, BenchError


def cmd_bench(args: argparse.Namespace) -> int:
    from vlagym.perf import results, table
    from vlagym.perf.run import run_bench

    if args.compare:
        if option_values(args, BenchConfig):
            raise UserError("--compare OLD NEW reads two saved runs; it takes no other option")
        return compare(*args.compare)
    try:
        cfg = build(BenchConfig, option_values(args, BenchConfig))
    except BenchError as e:
        raise UserError(str(e)) from e

    def show(section: table.Table) -> None:
        print(table.format_table(section), end="\n\n", flush=True)

    doc = run_bench(cfg, on_section=show)
    print(f"measured on: {results.format_header(doc)}; {doc['wall_s']:.0f} s in all")
    if cfg.out:
        print(f"results: {cfg.out} (compare two runs: vlagym bench --compare OLD.json NEW.json)")
    return EXIT_OK


def compare(old_path: str, new_path: str) -> int:
    from vlagym.perf import results

    try:
        old, new = results.read_bench_run(old_path), results.read_bench_run(new_path)
    except BenchError as e:
        raise UserError(str(e)) from e
    print(f"old: {old_path} ({old['created']}); new: {new_path} ({new['created']})\n")
    print(results.format_comparison(old, new))
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="speed benchmarks: env vs raw physics, vector envs, dataset, BC, latency, PPO, filtered BC",
        description="Speed benchmarks measured side by side in one run (Markdown tables + JSON); --compare puts "
        "two saved runs side by side.",
    )
    add_options(p, BenchConfig)
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two saved `vlagym bench` JSON files")
    p.set_defaults(handler=cmd_bench)
