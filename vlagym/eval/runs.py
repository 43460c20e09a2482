"""Evaluation runs read back for a paired comparison: outcomes keyed by (task, split, seed).

`read_eval_run` loads a results bundle (`vlagym eval --suite`) or a plain `vlagym eval` results.json as an
`EvalRun`. Two runs of one protocol met identical initial states episode by episode, so their outcomes pair
(`vlagym.eval.stats.compare_outcomes`); `check_comparable` refuses runs of different protocols, and
`paired_outcomes` first trims cells that sequential stopping left unequal. Every bad input raises
`PairingError` naming the file and what is wrong with it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlagym.eval.configs import METRICS
from vlagym.eval.layout import BUNDLE_FORMAT, BUNDLE_JSON, RESULTS_JSON
from vlagym.eval.stats import EpisodeKey, PairingError


@dataclass(frozen=True)
class EvalRun:
    """A results bundle or a `vlagym eval` results.json, as outcomes keyed by (task, split, seed)."""

    path: str
    protocol: str
    """"NAME vVERSION" of a bundle; "vlagym eval results" for a results.json"""
    policy: str
    outcomes: dict[tuple[str, str, int], bool]
    versions: dict[str, Any]
    episodes: int
    """episodes per task (and split); with sequential stopping the most a cell could have"""
    sequential: bool = False
    """cells may hold fewer episodes: the run stopped them early (`SuiteRunConfig.sequential_width`)"""


def _split_of(env_kwargs: dict[str, Any]) -> str:
    """The split label of a plain evaluation: its split, plus an instruction set other than the split's own."""
    split = env_kwargs.get("split", "train")
    instructions = env_kwargs.get("instruction_split")
    implied = "heldout" if split == "heldout_paraphrase" else "train"
    return split if instructions in (None, implied) else f"{split}+{instructions}_instructions"


def read_eval_run(path: str | os.PathLike, metric: str = "success") -> EvalRun:
    """Load a bundle folder, a bundle.json, an eval folder or a results.json; `PairingError` if it is none of them."""
    if metric not in METRICS:
        raise PairingError(f"metric must be one of {list(METRICS)}, got {metric!r}")
    p = Path(path)
    if p.is_dir():
        found = [p / name for name in (BUNDLE_JSON, RESULTS_JSON) if (p / name).is_file()]
        if not found:
            raise PairingError(f"{str(path)!r} holds neither {BUNDLE_JSON} nor {RESULTS_JSON}")
        p = found[0]
    elif not p.is_file():
        raise PairingError(f"{str(path)!r} does not exist")
    try:
        doc = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise PairingError(f"cannot read {str(p)!r}: {e}") from e
    if not isinstance(doc, dict):
        raise PairingError(f"{str(p)!r} is not a results bundle or results.json")
    if doc.get("format") == BUNDLE_FORMAT:
        outcomes = {
            (task, split, int(e["seed"])): bool(e[metric])
            for task, by_split in doc["results"].items()
            for split, cell in by_split.items()
            for e in cell["episodes"]
        }
        label = f"{doc['protocol']['name']} v{doc['protocol']['version']}"
        versions = doc.get("fingerprint", {}).get("versions", {})
        sequential = bool(doc.get("sequential"))
        return EvalRun(str(p), label, str(doc["policy"]), outcomes, versions, int(doc["episodes"]), sequential)
    if isinstance(doc.get("tasks"), dict) and "env_kwargs" in doc:
        split = _split_of(doc["env_kwargs"])
        outcomes = {
            (task, split, int(e["seed"])): bool(e[metric])
            for task, summary in doc["tasks"].items()
            for e in summary["episodes"]
        }
        versions = {"vlagym": doc.get("vlagym_version")}
        return EvalRun(str(p), "vlagym eval results", str(doc.get("policy")), outcomes, versions, int(doc["episodes"]))
    raise PairingError(f"{str(p)!r} is neither a results bundle ({BUNDLE_JSON}) nor a vlagym eval {RESULTS_JSON}")


def check_comparable(a: EvalRun, b: EvalRun) -> None:
    """`PairingError` unless both runs follow the same protocol with the same --episodes (the episodes themselves
    are checked when pairing); with sequential stopping in either run, the episode counts may differ."""
    if a.protocol != b.protocol:
        raise PairingError(
            f"the runs follow different protocols: A is {a.protocol} ({a.path}), B is {b.protocol} ({b.path})"
        )
    if a.episodes != b.episodes and not (a.sequential or b.sequential):
        raise PairingError(
            f"A ran {a.episodes} episodes per task and split, B {b.episodes}: compare runs with the same --episodes"
        )


def paired_outcomes(a: EvalRun, b: EvalRun) -> tuple[dict[EpisodeKey, bool], dict[EpisodeKey, bool], str | None]:
    """The outcomes of A and B to pair (`compare_outcomes`), and a note when some episodes were left out.

    Without sequential stopping both runs' outcomes are returned whole: `compare_outcomes` then refuses any
    episode one run lacks. When either run stopped cells early, each task x split is paired on the seeds both
    ran, which for two runs of one protocol are the first seeds of the shorter cell; the longer cell's later
    episodes are left out, and the note says how many. The pairing stays exact (same seeds, same initial
    states), but the cell's n was chosen by one run's outcomes, so read a verdict on few episodes with care.
    A cell only one run holds is kept whole (`compare_outcomes` names it); common seeds that are not the first
    ones of both cells raise `PairingError`: such runs did not follow one seed order.
    """
    if not (a.sequential or b.sequential):
        return dict(a.outcomes), dict(b.outcomes), None
    cells_a, cells_b = _seeds_by_cell(a), _seeds_by_cell(b)
    keep_a, keep_b = dict(a.outcomes), dict(b.outcomes)
    for cell in cells_a.keys() & cells_b.keys():
        seeds_a, seeds_b = cells_a[cell], cells_b[cell]
        m = min(len(seeds_a), len(seeds_b))
        if seeds_a[:m] != seeds_b[:m]:
            raise PairingError(
                f"{cell[0]} / {cell[1]}: the runs' seeds differ within their first {m} episodes, so they cannot be "
                "paired on a common prefix (different protocols or seeds?)"
            )
        for seed in seeds_a[m:]:
            del keep_a[(*cell, seed)]
        for seed in seeds_b[m:]:
            del keep_b[(*cell, seed)]
    left_a, left_b = len(a.outcomes) - len(keep_a), len(b.outcomes) - len(keep_b)
    note = (
        f"sequential stopping: paired on the {len(set(keep_a) & set(keep_b))} episodes both runs hold "
        f"(per task x split, the first seeds of the shorter cell); left out {left_a} of A's {len(a.outcomes)} "
        f"and {left_b} of B's {len(b.outcomes)} episodes"
    )
    return keep_a, keep_b, note


def _seeds_by_cell(run: EvalRun) -> dict[tuple[str, str], list[int]]:
    cells: dict[tuple[str, str], list[int]] = {}
    for task, split, seed in run.outcomes:
        cells.setdefault((task, split), []).append(seed)
    return {cell: sorted(seeds) for cell, seeds in cells.items()}


def version_differences(a: EvalRun, b: EvalRun) -> list[str]:
    """One "name: A vs B" line per software version that differs between the two runs."""
    return [
        f"{name}: {a.versions.get(name)} vs {b.versions.get(name)}"
        for name in sorted(set(a.versions) | set(b.versions))
        if a.versions.get(name) != b.versions.get(name)
    ]
