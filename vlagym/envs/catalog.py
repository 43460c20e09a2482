"""What the suite holds, described from the code: `vlagym list` and the README's tables.

The README's task and split tables are generated here (`python docs/update_readme.py`)
and a test checks they are current, so the documentation cannot drift from the code.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import gymnasium as gym

from vlagym.envs import TASKS
from vlagym.envs.splits import split_table_markdown


def task_class(env_id: str) -> type:
    """The env class registered for `env_id`, resolved from its entry point without building an env."""
    entry_point = gym.spec(env_id).entry_point
    if isinstance(entry_point, str):
        return gym.envs.registration.load_env_creator(entry_point)
    return entry_point


def explicit_kwargs(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` without the entries that equal the env's own defaults (its registered kwargs, then the keyword
    defaults of its class's `__init__`s), compared as JSON: the same env whether a default was spelled out or
    not, e.g. ``{"split": "train"}`` and ``{}``."""
    defaults: dict[str, Any] = {}
    for cls in reversed(task_class(env_id).__mro__):
        if "__init__" in vars(cls):
            for name, p in inspect.signature(vars(cls)["__init__"]).parameters.items():
                if p.default is not inspect.Parameter.empty:
                    defaults[name] = p.default
    defaults.update(gym.spec(env_id).kwargs)
    as_json = json.loads(json.dumps(defaults, default=repr))
    return {k: v for k, v in kwargs.items() if k not in as_json or json.loads(json.dumps(v)) != as_json[k]}


def example_instruction(env_id: str, seed: int = 0) -> str:
    """The instruction of episode `seed` (a real reset, so every template field is filled)."""
    env = gym.make(env_id, disable_env_checker=True)
    try:
        env.reset(seed=seed)
        return env.unwrapped.instruction
    finally:
        env.close()


def _distractors(cls: type) -> str:
    counts = getattr(cls, "distractor_counts", None)
    if not counts:
        return "-"
    (a, b), (c, d) = counts["train"], counts["distractors"]
    return f"{a}-{b} / {c}-{d}"


def task_rows() -> list[dict[str, str]]:
    """One row per registered task: id, family, max steps, distractors (train / `distractors` split),
    description, example instruction."""
    rows = []
    for env_id in sorted(TASKS):
        cls = task_class(env_id)
        rows.append(
            {
                "id": env_id,
                "family": getattr(cls, "family", ""),
                "steps": str(gym.spec(env_id).max_episode_steps),
                "distractors": _distractors(cls),
                "description": getattr(cls, "description", "") or (cls.__doc__ or "").strip().split("\n", 1)[0],
                "example instruction": example_instruction(env_id),
            }
        )
    return rows


def markdown_table(rows: list[dict[str, str]]) -> str:
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "|".join("---" for _ in keys) + "|"]
    lines += ["| " + " | ".join(r[k] for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def readme_sections() -> dict[str, str]:
    """Generated README sections, keyed by marker name (`<!-- NAME:begin -->` ... `<!-- NAME:end -->`)."""
    return {"tasks": markdown_table(task_rows()), "splits": split_table_markdown()}


def render_readme(text: str) -> str:
    """`text` with every generated section replaced by its current content."""
    for name, body in readme_sections().items():
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        if begin not in text or end not in text:
            raise ValueError(f"README lacks the markers {begin} ... {end}")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{body}\n{end}{tail}"
    return text
