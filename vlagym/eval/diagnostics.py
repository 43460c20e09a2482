"""Why episodes fail, whether a policy reads its instruction, and the task x split matrix as a picture.

Failure taxonomy
----------------
Every evaluated episode gets one `outcome`, decided from the task predicates
that the env reports in `info` at every step (its `evaluate()`), accumulated by
`vlagym.eval.rollout.run_episodes` into the episode's record. The first rule
that holds wins:

    success         `info["success"]` at some step.
    sim_unstable    the simulation diverged and the env ended the episode (`info["sim_unstable"]`):
                    the physics, not the policy, failed.
    wrong_object    the task's wrong-object predicate held at some step: another object grasped
                    (pick tasks: `wrong_object_grasped`), on the goal (place: `other_on_goal`), in the zone
                    (push: `other_cube_in_zone`), in the drawer (`wrong_object_in_drawer`), or another
                    button pressed (`wrong_button_pressed`).
    never_reached   the grasp site never came within `REACH_TOLERANCE` (3 cm) of the task's reach point
                    (`reach_distance`: the target's grasp point, the pusher's place behind the cube, the
                    button cap, the drawer handle).
    failed_grasp    reached, but the target (OpenDrawer: the handle) was never held between both finger pads.
    dropped         held at some step, but no longer held at the end.
    timeout         none of the above: the horizon ran out with the task unfinished (e.g. still holding
                    the cup below the lift height, the drawer half open).

Not every category applies to every task (`TASK_PREDICATES`): pushing, pressing
a button and closing a drawer need no grasp, so they have no failed_grasp or
dropped; StackBlocks and the drawer tasks without a second object have no
wrong_object. A rule that does not apply is skipped, so those episodes fall
through to the next one and, without finer information, to "timeout". A task
missing from the table (a new one) gets success / sim_unstable / timeout only.

Language controls
-----------------
On tasks whose env can swap its target (`VLAEnv.swap_candidates`: VLA-PickCup-v0
and VLA-PickObject-v0), the same seeds run three times: with the correct
instruction, with an empty one (`reset(options={"instruction": ""})`), and with
the instruction naming another object of the scene (`{"swap_target": True}`),
success then counted for the object named. A policy that reads the instruction
follows the swap; one that memorised layouts does as well with an empty
instruction as with the correct one and rarely picks the swapped object.
"""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np

from vlagym.eval.stats import paired_test, wilson_interval

logger = logging.getLogger(__name__)

REACH_TOLERANCE = 0.03
"""metres: closer than this to the reach point counts as reached"""
OUTCOMES = ("success", "sim_unstable", "wrong_object", "never_reached", "failed_grasp", "dropped", "timeout")
FAILURES = OUTCOMES[1:]


@dataclass(frozen=True)
class TaskPredicates:
    """Which of a task's `info` predicates the taxonomy reads."""

    grasp: str | None
    """held between both pads; None where the task needs no grasp"""
    wrong: str | None
    """the wrong-object predicate; None where the task has none"""
    reach: bool = True
    """the task reports `reach_distance`"""


_PICK = TaskPredicates("grasped", "wrong_object_grasped")
_PLACE = TaskPredicates("grasped", "other_on_goal")
TASK_PREDICATES: dict[str, TaskPredicates] = {
    "VLA-PickCup-v0": _PICK,
    "VLA-PickObject-v0": _PICK,
    "VLA-PlaceCupOnPlate-v0": _PLACE,
    "VLA-PlaceCupInBowl-v0": _PLACE,
    "VLA-PushCube-v0": TaskPredicates(None, "other_cube_in_zone"),
    "VLA-StackBlocks-v0": TaskPredicates("grasped", None),
    "VLA-PressButton-v0": TaskPredicates(None, "wrong_button_pressed"),
    "VLA-OpenDrawer-v0": TaskPredicates("handle_grasped", None),
    "VLA-CloseDrawer-v0": TaskPredicates(None, None),
    "VLA-PutCupInDrawer-v0": TaskPredicates("grasped", "wrong_object_in_drawer"),
}
_UNKNOWN = TaskPredicates(None, None, reach=False)

#: the `info` keys `run_episodes` accumulates (a task reports at most one of each group)
GRASP_KEYS = tuple(sorted({p.grasp for p in TASK_PREDICATES.values() if p.grasp}))
WRONG_KEYS = tuple(sorted({p.wrong for p in TASK_PREDICATES.values() if p.wrong}))
REACH_KEY = "reach_distance"


class _Record(Protocol):
    task: str
    success: bool
    ever_grasped: bool | None
    grasped_at_end: bool | None
    wrong_object: bool | None
    min_reach_distance: float | None
    sim_unstable: bool


def applicable_outcomes(task: str) -> tuple[str, ...]:
    """The outcomes `classify` can give an episode of `task` (see the module docstring)."""
    p = TASK_PREDICATES.get(task, _UNKNOWN)
    skip = set()
    if p.wrong is None:
        skip.add("wrong_object")
    if not p.reach:
        skip.add("never_reached")
    if p.grasp is None:
        skip |= {"failed_grasp", "dropped"}
    return tuple(o for o in OUTCOMES if o not in skip)


def classify(record: _Record) -> str:
    """The outcome of one episode record (the first rule of the module docstring that holds)."""
    if record.success:
        return "success"
    if record.sim_unstable:
        return "sim_unstable"
    p = TASK_PREDICATES.get(record.task, _UNKNOWN)
    if p.wrong is not None and record.wrong_object:
        return "wrong_object"
    if p.reach and record.min_reach_distance is not None and record.min_reach_distance > REACH_TOLERANCE:
        if not (p.grasp is not None and record.ever_grasped):  # a grasp from afar still reached
            return "never_reached"
    if p.grasp is not None and record.ever_grasped is not None:
        if not record.ever_grasped:
            return "failed_grasp"
        if not record.grasped_at_end:
            return "dropped"
    return "timeout"


def outcome_counts(outcomes: Iterable[str]) -> dict[str, int]:
    """Counts in `OUTCOMES` order (every category present, zeros included); unknown labels at the end."""
    counts = dict.fromkeys(OUTCOMES, 0)
    for o in outcomes:
        counts[o] = counts.get(o, 0) + 1
    return counts


# ---------------------------------------------------------------------------- language controls
CONTROLS = ("correct", "empty", "swapped")
CONTROL_OPTIONS: dict[str, dict[str, Any]] = {
    "correct": {},
    "empty": {"instruction": ""},
    "swapped": {"swap_target": True},
}
#: env kwargs of the control runs, so every scene holds another object to name (and all three share scenes)
CONTROL_ENV_KWARGS: dict[str, dict[str, Any]] = {"VLA-PickCup-v0": {"num_cups": 3}}


def supports_language_controls(task: str) -> bool:
    """True when `task`'s env implements `swap_candidates` (read from its class: no env is built)."""
    from vlagym.envs.base import VLAEnv

    try:
        creator = gym.envs.registration.load_env_creator(gym.spec(task).entry_point)
    except Exception:  # noqa: BLE001 - an unknown or unloadable id simply has no controls
        return False
    own = getattr(creator, "swap_candidates", VLAEnv.swap_candidates)  # MultiTask is no VLAEnv: has none
    return isinstance(creator, type) and own is not VLAEnv.swap_candidates


def _rate(outcomes: Sequence[bool]) -> dict[str, Any]:
    n, k = len(outcomes), int(sum(outcomes))
    lo, hi = wilson_interval(k, n)
    return {"n": n, "successes": k, "success_rate": k / n if n else math.nan, "ci95": [lo, hi]}


def summarize_controls(outcomes: Mapping[str, Sequence[bool]]) -> dict[str, Any]:
    """Rates with Wilson intervals per control, paired tests between them, and one sentence of interpretation.

    `outcomes[control][i]` is the success of episode i (same seed in every control).
    """
    rates = {c: _rate(outcomes[c]) for c in CONTROLS}
    swapped_vs_empty = paired_test(outcomes["swapped"], outcomes["empty"])
    correct_vs_swapped = paired_test(outcomes["correct"], outcomes["swapped"])
    correct_vs_empty = paired_test(outcomes["correct"], outcomes["empty"])
    return {
        "rates": rates,
        "tests": {
            "swapped_vs_empty": {"p_value": swapped_vs_empty.p_value, "verdict": swapped_vs_empty.verdict},
            "correct_vs_swapped": {"p_value": correct_vs_swapped.p_value, "verdict": correct_vs_swapped.verdict},
            "correct_vs_empty": {"p_value": correct_vs_empty.p_value, "verdict": correct_vs_empty.verdict},
        },
        "interpretation": interpret_controls(
            rates,
            {
                "swapped_vs_empty": swapped_vs_empty.verdict,
                "correct_vs_swapped": correct_vs_swapped.verdict,
                "correct_vs_empty": correct_vs_empty.verdict,
            },
        ),
    }


def interpret_controls(rates: Mapping[str, Mapping[str, Any]], tests: Mapping[str, str]) -> str:
    """One sentence from the three rates and the McNemar verdicts of `tests` ("swapped_vs_empty",
    "correct_vs_swapped", "correct_vs_empty"; "A better" means the first one named is better)."""
    c, e, s = (rates[k]["success_rate"] for k in CONTROLS)
    n = rates["correct"]["n"]
    same = "no detectable difference"
    if tests["swapped_vs_empty"] == "A better":
        return (
            f"The policy reads the instruction: named another object, it picks that one ({s:.0%}) far more often "
            f"than it succeeds without an instruction ({e:.0%})."
        )
    if tests["correct_vs_empty"] == same and tests["correct_vs_swapped"] == "A better":
        return (
            f"The policy does not appear to read the instruction: without one it does about as well ({e:.0%}) as "
            f"with the correct one ({c:.0%}), and it rarely picks a swapped object ({s:.0%}): it acts on the layout."
        )
    if tests["correct_vs_empty"] == same and tests["correct_vs_swapped"] == same and rates["empty"]["ci95"][0] > 0.5:
        return (
            f"The policy finds whichever object is named even without an instruction (correct {c:.0%}, empty "
            f"{e:.0%}, swapped {s:.0%}): it learns the target from something other than the words, as the scripted "
            "expert does from privileged state."
        )
    return (
        f"No clear evidence either way at n={n}: correct {c:.0%}, empty {e:.0%}, swapped {s:.0%} "
        "(run more episodes for a sharper test)."
    )


def format_controls(controls: Mapping[str, Any]) -> str:
    """Markdown: one row per task with the three rates and intervals side by side, then one sentence per task."""
    if not controls:
        return ""
    lines = [
        "| task | n | correct | empty | swapped |",
        "|---|---:|---|---|---|",
    ]
    notes = []
    for task, c in controls.items():
        if "rates" not in c:
            lines.append(f"| {task} | - | {c.get('note', 'not applicable')} | | |")
            continue
        cells = [_rate_cell(c["rates"][k]) for k in CONTROLS]
        lines.append(f"| {task} | {c['rates']['correct']['n']} | " + " | ".join(cells) + " |")
        notes.append(f"- {task}: {c['interpretation']}")
    return "\n".join(lines + ([""] + notes if notes else []))


def _rate_cell(r: Mapping[str, Any]) -> str:
    lo, hi = r["ci95"]
    return f"{r['success_rate']:.1%} [{lo:.1%}, {hi:.1%}]"


# ---------------------------------------------------------------------------- generalization matrix
def success_matrix(results: Mapping[str, Mapping[str, Mapping[str, Any]]], splits: Sequence[str]) -> np.ndarray:
    """(tasks, splits) success rates of a bundle's `results`; NaN where a cell is missing."""
    rows = [[float(cell[s]["success_rate"]) if s in cell else math.nan for s in splits] for cell in results.values()]
    return np.array(rows, dtype=float).reshape(len(rows), len(splits))


def heatmap_png(matrix: np.ndarray, tasks: Sequence[str], splits: Sequence[str], title: str = "") -> bytes:
    """The task x split success matrix as a PNG (matplotlib, Agg: no display needed), each cell labelled."""
    import matplotlib

    matplotlib.use("Agg", force=False)  # never opens a window; leaves an already-chosen backend alone
    from matplotlib.figure import Figure  # a bare Figure: no pyplot global state

    short = [t.removeprefix("VLA-").removesuffix("-v0") for t in tasks]
    fig = Figure(figsize=(1.3 * len(splits) + 2.8, 0.45 * len(tasks) + 1.6), dpi=100)
    ax = fig.add_subplot()
    im = ax.imshow(np.ma.masked_invalid(matrix), vmin=0.0, vmax=1.0, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(splits)), labels=list(splits), rotation=30, ha="right")
    ax.set_yticks(range(len(tasks)), labels=short)
    for (i, j), v in np.ndenumerate(matrix):
        ax.text(j, i, "-" if np.isnan(v) else f"{100 * v:.0f}", ha="center", va="center", fontsize=9)
    fig.colorbar(im, ax=ax, label="success rate")
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def write_heatmap(path: str | Path, results: Mapping[str, Any], splits: Sequence[str], title: str = "") -> Path:
    """Write the heatmap of a bundle's `results` to `path` atomically."""
    from vlagym.io import atomic_write_bytes

    return atomic_write_bytes(path, heatmap_png(success_matrix(results, splits), list(results), splits, title))
