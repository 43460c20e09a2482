"""`Table`, one section's results, and its Markdown."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Table:
    """One section's results: rows of equal keys, the `key` columns name a row (compare pairs rows on them)."""

    section: str
    title: str
    key: list[str]
    columns: dict[str, str]
    """column -> header, in display order"""
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def format_cell(value: Any) -> str:
    """A cell as the tables print it: yes/NO, n/a for non-finite numbers, 3 significant digits or so."""
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "n/a"
        if abs(value) >= 100:
            return f"{value:.0f}"
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3f}"
    return str(value)


def format_table(table: Table | dict[str, Any]) -> str:
    """One section as a Markdown table under a heading, its notes below."""
    t = table.to_dict() if isinstance(table, Table) else table
    cols = list(t["columns"])
    lines = [f"### {t['title']}", "", "| " + " | ".join(t["columns"][c] for c in cols) + " |"]
    lines.append("|" + "|".join("---" if c in t["key"] else "---:" for c in cols) + "|")
    lines += ["| " + " | ".join(format_cell(row.get(c, "")) for c in cols) + " |" for row in t["rows"]]
    if t.get("notes"):
        lines += [""] + [f"{note}." for note in t["notes"]]
    return "\n".join(lines)
