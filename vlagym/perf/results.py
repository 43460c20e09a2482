"""A saved run as a JSON document: its format, reading it back, printing it, and comparing two runs row by row.

`compare_bench_runs` pairs the rows of two documents on their section and key columns and gives new / old per
metric, with a `speedup` oriented so that above 1 is faster, and each run's spread over its passes: a speedup
within the spread is noise.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from vlagym.perf.config import BenchError
from vlagym.perf.table import format_cell, format_table

FORMAT = "vlagym-bench"
FORMAT_VERSION = 1


def format_header(doc: dict[str, Any]) -> str:
    """One line: versions and machine of a run."""
    fp = doc["fingerprint"]
    v = fp["versions"]
    return (
        f"vlagym {v['vlagym']}, MuJoCo {v['mujoco']}, torch {v['torch']}, numpy {v['numpy']}, "
        f"Python {v['python']}; {fp['cpu']} ({fp['cpu_count']} CPUs), GPU: {fp['gpu']}, GL: {fp['gl_renderer']}"
    )


def format_run(doc: dict[str, Any]) -> str:
    """Every section of a run as Markdown."""
    parts = [format_header(doc)]
    parts += [format_table(section) for section in doc["sections"].values()]
    return "\n\n".join(parts)


def read_bench_run(path: str | os.PathLike) -> dict[str, Any]:
    """A `run_bench` JSON document; `BenchError` for a missing file or anything else."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise BenchError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BenchError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BenchError(f'{path}: not a vlagym bench result (no "format": "{FORMAT}")')
    if doc.get("format_version") != FORMAT_VERSION:
        raise BenchError(
            f"{path}: bench format version {doc.get('format_version')!r}; this vlagym reads {FORMAT_VERSION}"
        )
    return doc


def _direction(metric: str) -> int:
    """+1 when more is faster (rates), -1 when less is faster (times), 0 for other numbers (ratios, counts)."""
    if "per_s" in metric:
        return 1
    if metric.endswith(("_ms", "_us", "_s")) or metric.startswith("us_"):
        return -1
    return 0


def spread(row: dict[str, Any], metric: str) -> float | None:
    """(max - min) / median of a metric's passes; None for a single pass or a run saved before passes were
    recorded."""
    values = row.get("samples", {}).get(metric)
    if not values or len(values) < 2:
        return None
    median = float(np.median(values))
    return (max(values) - min(values)) / median if median else None


def compare_bench_runs(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows present in both runs, paired by section and key columns: every numeric metric's old, new,
    new / old, `speedup` (new / old for rates, old / new for times, None for other numbers), and each run's
    `spread` over its passes (None where it has one pass, or was saved without them)."""
    out = []
    for name, a in old["sections"].items():
        b = new["sections"].get(name)
        if b is None:
            continue
        key = a["key"]
        b_rows = {tuple(r.get(k) for k in key): r for r in b["rows"]}
        for row in a["rows"]:
            other = b_rows.get(tuple(row.get(k) for k in key))
            if other is None:
                continue
            for metric, value in row.items():
                v_new = other.get(metric)
                numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (value, v_new))
                if metric in key or not numbers:
                    continue
                ratio = v_new / value if value else math.nan
                direction = _direction(metric)
                speedup = None if direction == 0 else (ratio if direction > 0 else 1 / ratio if ratio else math.inf)
                out.append(
                    {
                        "section": name,
                        "row": ", ".join(str(row[k]) for k in key),
                        "metric": a["columns"].get(metric, metric),
                        "old": value,
                        "new": v_new,
                        "ratio": ratio,
                        "speedup": speedup,
                        "old_spread": spread(row, metric),
                        "new_spread": spread(other, metric),
                    }
                )
    return out


def unpaired(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Sections and rows that only one of two runs holds."""
    notes = []
    for label, a, b in (("old", old, new), ("new", new, old)):
        for name, sec in a["sections"].items():
            other = b["sections"].get(name)
            if other is None:
                notes.append(f"section {name} only in the {label} run")
                continue
            keys = {tuple(r.get(k) for k in other["key"]) for r in other["rows"]}
            missing = [r for r in sec["rows"] if tuple(r.get(k) for k in sec["key"]) not in keys]
            notes += [
                f"{name}: row {', '.join(str(r[k]) for k in sec['key'])} only in the {label} run" for r in missing
            ]
    return notes


def fingerprint_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Versions, machine and budget settings that differ between two runs (their numbers compare less well)."""
    fa, fb = old["fingerprint"], new["fingerprint"]
    diffs = [
        f"{k} {fa['versions'].get(k)} -> {fb['versions'].get(k)}"
        for k in fa["versions"]
        if fa["versions"].get(k) != fb["versions"].get(k)
    ]
    diffs += [f"{k} {fa.get(k)!r} -> {fb.get(k)!r}" for k in ("cpu", "cpu_count", "gpu") if fa.get(k) != fb.get(k)]
    ca, cb = {"repeats": 1, **old["config"]}, {"repeats": 1, **new["config"]}  # runs before --repeats: 1 pass
    diffs += [
        f"{k} {ca.get(k)!r} -> {cb.get(k)!r}"
        for k in ("quick", "repeats", "threads", "image_size", "device", "demos", "policy")
        if ca.get(k) != cb.get(k)
    ]
    return diffs


def format_comparison(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The Markdown comparison of two runs: one line per paired metric, then what differs between the runs."""
    lines = [
        "| section | row | metric | old | new | new / old | speedup | spread old / new |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.0%}"

    for r in compare_bench_runs(old, new):
        speedup = "" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        old_cell, new_cell = format_cell(float(r["old"])), format_cell(float(r["new"]))
        lines.append(
            f"| {r['section']} | {r['row']} | {r['metric']} | {old_cell} | {new_cell} "
            f"| {r['ratio']:.2f} | {speedup} | {pct(r['old_spread'])} / {pct(r['new_spread'])} |"
        )
    lines += [
        "",
        "speedup: new / old for rates, old / new for times (above 1: the new run is faster); spread: (max - min) "
        "/ median of a run's passes (-: one pass), a speedup within it is noise.",
    ]
    notes = unpaired(old, new)
    diffs = fingerprint_differences(old, new)
    if diffs:
        lines.append(f"note: the runs differ in {'; '.join(diffs)}")
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)
