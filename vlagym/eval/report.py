"""One self-contained HTML page of a results bundle: `vlagym report BUNDLE_DIR` (also written by every suite run).

The page holds the success matrix (heatmap PNG and table, with Wilson 95%
intervals; with sequential stopping, each cell's episode count n), success at
end, the suite average, the failure taxonomy with links to the episodes'
videos, the language controls, the fingerprint and the command that
reproduces the bundle. Images and videos are embedded as base64 `data:`
URIs and the style sheet is inline, so the single file can be mailed or
attached to an issue and opened in any browser. Videos are embedded up to
`MAX_VIDEO_BYTES` each and `MAX_TOTAL_VIDEO_BYTES` in all; the rest are listed
by path.
"""

from __future__ import annotations

import base64
import html
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vlagym.eval.diagnostics import CONTROLS, OUTCOMES, heatmap_png, success_matrix
from vlagym.eval.layout import BUNDLE_FORMAT
from vlagym.io import atomic_write_text

logger = logging.getLogger(__name__)

REPORT_HTML = "report.html"
MAX_VIDEO_BYTES = 4 * 2**20
MAX_TOTAL_VIDEO_BYTES = 40 * 2**20

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
figure { display: inline-block; margin: 0.5em; vertical-align: top; }
figcaption { font-size: 0.85em; max-width: 256px; }
.note { color: #555; }
"""


class ReportError(ValueError):
    """A folder or file that is not a results bundle."""


def load_bundle(path: str | os.PathLike) -> tuple[dict[str, Any], Path]:
    """The bundle in folder `path` (or the bundle.json `path`) and its folder; `ReportError` otherwise."""
    p = Path(path)
    if p.is_dir():
        p = p / "bundle.json"
    if not p.is_file():
        raise ReportError(f"{str(path)!r} is not a results bundle: {str(p)!r} does not exist")
    try:
        doc = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ReportError(f"cannot read {str(p)!r}: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != BUNDLE_FORMAT:
        raise ReportError(f"{str(p)!r} is not a results bundle (written by `vlagym eval --suite NAME`)")
    return doc, p.parent


def write_report(bundle: Mapping[str, Any], folder: str | os.PathLike) -> Path:
    """Write FOLDER/report.html for `bundle` (video paths in it are relative to `folder`), atomically."""
    folder = Path(folder)
    return atomic_write_text(folder / REPORT_HTML, render_report(bundle, folder))


# ---------------------------------------------------------------------------- HTML pieces
def _e(x: Any) -> str:
    return html.escape(str(x))


def _table(header: Sequence[str], rows: Iterable[Sequence[str]], raw: bool = False) -> str:
    """An HTML table; cells are escaped unless `raw` (then the caller escaped them)."""
    cell = (lambda c: c) if raw else _e
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _pct(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * x:.1f}%"


def _ci(rate: float, ci: Sequence[float]) -> str:
    return f"{_pct(rate)} [{_pct(ci[0])}, {_pct(ci[1])}]"


def _flatten(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for k, v in d.items():
        if isinstance(v, Mapping):
            out += _flatten(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", str(v)))
    return out


class _Videos:
    """Embeds episode videos (capped), numbering them for in-page links."""

    def __init__(self, folder: Path):
        self.folder, self.total, self.items = folder, 0, []
        self.anchor: dict[str, str] = {}

    def add(self, rel: str, caption: str) -> str | None:
        """The in-page anchor of the video at `rel`, embedding it once; None when the file is missing."""
        if rel in self.anchor:
            return self.anchor[rel]
        path = self.folder / rel
        if not path.is_file():
            logger.warning("report: video %s is missing; left out", path)
            return None
        size = path.stat().st_size
        anchor = f"video-{len(self.items) + 1}"
        if size <= MAX_VIDEO_BYTES and self.total + size <= MAX_TOTAL_VIDEO_BYTES:
            self.total += size
            data = base64.b64encode(path.read_bytes()).decode()
            body = f'<video controls muted loop width="256" src="data:video/mp4;base64,{data}"></video>'
        else:
            body = f'<p class="note">{_e(rel)} ({size / 2**20:.1f} MiB): over the embedding cap, not embedded</p>'
        self.items.append(f'<figure id="{anchor}">{body}<figcaption>{_e(caption)}</figcaption></figure>')
        self.anchor[rel] = anchor
        return anchor


def _sequential_note(bundle: Mapping[str, Any]) -> str:
    """The header paragraph of a sequentially stopped bundle (`bundle["sequential"]`); "" for a full run."""
    sequential = bundle.get("sequential")
    if not sequential:
        return ""
    cells = [c for by_split in bundle["results"].values() for c in by_split.values()]
    stopped = sum(bool((c.get("sequential") or {}).get("stopped_early")) for c in cells)
    discarded = sum((c.get("sequential") or {}).get("episodes_discarded", 0) for c in cells)
    return (
        f"<p>Sequential stopping at width {_pct(sequential['target_width'])}: each task and split stopped at the "
        f"first n &ge; {sequential['min_episodes']} episodes whose Wilson 95% interval was at most that wide; "
        f"{stopped} of {len(cells)} cells stopped early, {sum(c['n'] for c in cells)} episodes counted, "
        f"{discarded} run past a stop and discarded. The success table gives n per cell.</p>"
    )


def _matrix_section(bundle: Mapping[str, Any]) -> str:
    splits = list(bundle["protocol"]["splits"])
    results = bundle["results"]
    sequential = bool(bundle.get("sequential"))
    png = heatmap_png(success_matrix(results, splits), list(results), splits)
    img = f'<img alt="success per task and split" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
    parts = ["<h2>Generalization matrix</h2>", img]
    tables = (("success_rate", "Success (any step), 95% Wilson CI"), ("success_at_end_rate", "Success at end"))
    for rate_key, title in tables:
        rows = []
        for task, by_split in results.items():
            if rate_key == "success_rate":
                cells = [_ci(by_split[s][rate_key], by_split[s]["ci95"]) for s in splits]
                if sequential:  # cells hold different numbers of episodes
                    cells = [f"{c} n={by_split[s]['n']}" for c, s in zip(cells, splits, strict=True)]
            else:
                cells = [_pct(by_split[s][rate_key]) for s in splits]
            rows.append([task, *cells, _pct(float(np.mean([by_split[s][rate_key] for s in splits])))])
        parts += [f"<h3>{_e(title)}</h3>", _table(["task", *splits, "mean"], rows)]
    averages = bundle["suite_average"].items()
    rows = [[m, _pct(a["mean"]), f"[{_pct(a['ci95'][0])}, {_pct(a['ci95'][1])}]"] for m, a in averages]
    parts += ["<h3>Suite average</h3>", _table(["metric", "mean", "95% bootstrap CI"], rows)]
    return "\n".join(parts)


def _outcome_section(bundle: Mapping[str, Any], videos: _Videos) -> str:
    splits = list(bundle["protocol"]["splits"])
    rows = []
    for task, by_split in bundle["results"].items():
        for split in splits:
            cell = by_split[split]
            if "outcomes" not in cell:
                continue
            links: dict[str, list[str]] = {}
            for e in cell["episodes"]:
                if e.get("video"):
                    caption = f"{task} / {split}, seed {e['seed']}: {e.get('outcome', '')} - {e.get('instruction', '')}"
                    anchor = videos.add(e["video"], caption)
                    if anchor:
                        links.setdefault(e.get("outcome", ""), []).append(anchor)
            cells = []
            for o in OUTCOMES:
                refs = " ".join(f'<a href="#{a}">[{k + 1}]</a>' for k, a in enumerate(links.get(o, [])))
                cells.append(f"{cell['outcomes'].get(o, 0)} {refs}".strip())
            rows.append([_e(task), _e(split), *cells])
    if not rows:
        return ""
    return "\n".join(
        [
            "<h2>Outcomes (failure taxonomy)</h2>",
            f'<p class="note">{_e(bundle.get("outcome_definitions", ""))}. Bracketed numbers jump to the videos.</p>',
            _table(["task", "split", *OUTCOMES], rows, raw=True),
        ]
    )


def _controls_section(bundle: Mapping[str, Any]) -> str:
    controls = bundle.get("language_controls")
    if not controls:
        return ""
    rows, notes = [], []
    for task, c in controls.items():
        if "rates" not in c:
            rows.append([task, "-", c.get("note", "not applicable"), "", ""])
            continue
        r = c["rates"]
        rows.append([task, str(r["correct"]["n"]), *(_ci(r[k]["success_rate"], r[k]["ci95"]) for k in CONTROLS)])
        notes.append(f"<li>{_e(task)}: {_e(c['interpretation'])}</li>")
    return "\n".join(
        [
            "<h2>Language controls</h2>",
            '<p class="note">Same seeds (train split) with the correct instruction, an empty one, and one naming '
            "another object of the scene (success counted for the object named); 95% Wilson intervals.</p>",
            _table(["task", "n", *CONTROLS], rows),
            f"<ul>{''.join(notes)}</ul>" if notes else "",
        ]
    )


def render_report(bundle: Mapping[str, Any], folder: Path) -> str:
    """The report page of `bundle` as one HTML string (see the module docstring)."""
    protocol = bundle["protocol"]
    title = f"{protocol['name']} v{protocol['version']}: {bundle['policy']}"
    partial = f" (partial: {bundle['episodes']} of {protocol['episodes']})" if bundle.get("partial") else ""
    videos = _Videos(Path(folder))
    outcomes = _outcome_section(bundle, videos)  # registers the videos before their section is written
    seeds = bundle["seeds"]
    up_to = "Up to " if bundle.get("sequential") else ""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f"<p>{up_to}{bundle['episodes']} episodes per task and split{_e(partial)}, seeds "
        f"{seeds['first']}..{seeds['last']}; started {_e(bundle.get('started_utc', ''))}, wall clock "
        f"{bundle['wall_clock_s']:.1f} s.</p>",
        _sequential_note(bundle),
        "<h2>Reproduce</h2>",
        f"<pre><code>{_e(bundle['reproduce'])}</code></pre>",
        _matrix_section(bundle),
        outcomes,
        _controls_section(bundle),
    ]
    if videos.items:
        parts += ["<h2>Episode videos</h2>", *videos.items]
    parts += [
        "<h2>Fingerprint</h2>",
        _table(["field", "value"], _flatten(bundle.get("fingerprint", {}))),
        "<h3>Chunk settings</h3>",
        _table(["field", "value"], _flatten(bundle.get("chunk_settings", {}))),
        "<h2>Protocol</h2>",
        f"<pre>{_e(json.dumps(protocol, indent=2))}</pre>",
        "</body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"
