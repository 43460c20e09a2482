"""Suite diagnostics end to end (expert): outcomes, language controls, videos, heatmap, the HTML report, the CLI."""

from __future__ import annotations

import json
import re

import pytest

from vlagym.cli import main
from vlagym.eval import report
from vlagym.eval.diagnostics import OUTCOMES
from vlagym.eval.suite_run import SuiteRunConfig, run_suite

PICK = "VLA-PickCup-v0"


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory):
    """vlagym-pick for the expert, 2 episodes per split, language controls, one video per cell."""
    out = tmp_path_factory.mktemp("diag") / "expert"
    cfg = SuiteRunConfig(
        suite="vlagym-pick", policy="expert", out=str(out), episodes=2, progress=False, language_controls=True, videos=1
    )
    run_suite(cfg)
    return out


def load(bundle_dir) -> dict:
    return json.loads((bundle_dir / "bundle.json").read_text())


def test_bundle_has_outcomes_and_video_links(bundle_dir):
    bundle = load(bundle_dir)
    assert "--language-controls" in bundle["reproduce"] and "--videos 1" in bundle["reproduce"]
    for split, cell in bundle["results"][PICK].items():
        assert list(cell["outcomes"]) == list(OUTCOMES) and cell["outcomes"]["success"] == 2
        assert [e["outcome"] for e in cell["episodes"]] == ["success", "success"]
        videos = [e["video"] for e in cell["episodes"] if "video" in e]
        assert videos == [f"videos/{PICK}_{split}_seed5000000.mp4"]
        assert (bundle_dir / videos[0]).stat().st_size > 0
    md = (bundle_dir / "bundle.md").read_text()
    assert "## Outcomes (failure taxonomy)" in md and f"(videos/{PICK}_train_seed5000000.mp4)" in md
    assert "![success per task and split](heatmap.png)" in md


def test_language_controls_of_the_expert(bundle_dir):
    controls = load(bundle_dir)["language_controls"][PICK]
    rates = controls["rates"]
    assert [rates[c]["n"] for c in ("correct", "empty", "swapped")] == [2, 2, 2]
    # the expert reads the target from privileged state: it follows the swap and needs no words
    assert all(rates[c]["success_rate"] == 1.0 for c in ("correct", "empty", "swapped"))
    episodes = controls["episodes"]
    assert all(e["instruction"] == "" for e in episodes["empty"])
    assert all(
        a["instruction"] != b["instruction"] and a["seed"] == b["seed"]
        for a, b in zip(episodes["correct"], episodes["swapped"], strict=True)
    )
    assert controls["env_kwargs"] == {"num_cups": 3} and controls["interpretation"]
    md = (bundle_dir / "bundle.md").read_text()
    assert "## Language controls" in md and "| correct | empty | swapped |" in md


@pytest.mark.smoke  # the suite -> bundle -> report.html pipeline end to end
def test_heatmap_and_self_contained_report(bundle_dir):
    assert (bundle_dir / "heatmap.png").read_bytes().startswith(b"\x89PNG")
    page = (bundle_dir / "report.html").read_text()
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", page)
    assert refs and all(r.startswith(("data:", "#")) for r in refs), [r[:40] for r in refs]
    assert "<link" not in page and "<script" not in page
    for text in ("Generalization matrix", "Outcomes (failure taxonomy)", "Language controls", "Fingerprint"):
        assert text in page
    assert page.count("<table") >= 5 and "data:image/png;base64," in page
    assert page.count('src="data:video/mp4;base64,') == 4  # one per split
    assert load(bundle_dir)["reproduce"].replace('"', "&quot;") in page


def test_report_caps_embedded_videos(bundle_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(report, "MAX_VIDEO_BYTES", 10)
    page = report.render_report(load(bundle_dir), bundle_dir)
    assert "data:video/mp4" not in page and "over the embedding cap" in page


def test_report_header_of_a_sequentially_stopped_bundle(bundle_dir):
    def success_table(page: str) -> str:
        return page.split("<h3>Success (any step)")[1].split("</table>")[0]

    full = report.render_report(load(bundle_dir), bundle_dir)
    assert "<p>2 episodes per task and split" in full and "Sequential stopping at" not in full
    assert " n=" not in success_table(full)
    bundle = load(bundle_dir)  # as if `--sequential-width 0.5 --sequential-min-episodes 1` had stopped one cell at 1
    bundle["sequential"] = {"target_width": 0.5, "min_episodes": 1, "max_episodes": 2, "rule": "..."}
    cells = [cell for by_split in bundle["results"].values() for cell in by_split.values()]
    for k, cell in enumerate(cells):
        cell["sequential"] = {"stopped_early": k == 0, "episodes_simulated": 2, "episodes_discarded": int(k == 0)}
    cells[0]["n"] = cells[0]["successes"] = 1
    page = report.render_report(bundle, bundle_dir)
    assert "<p>Up to 2 episodes per task and split" in page
    assert "Sequential stopping at width 50.0%" in page and f"1 of {len(cells)} cells stopped early" in page
    assert f"{2 * len(cells) - 1} episodes counted, 1 run past a stop and discarded" in page
    table = success_table(page)
    assert table.count(" n=1</td>") == 1 and table.count(" n=2</td>") == len(cells) - 1


def test_cli_report_rewrites_the_page(bundle_dir, capsys):
    (bundle_dir / "report.html").unlink()
    assert main(["report", str(bundle_dir)]) == 0
    assert str(bundle_dir / "report.html") in capsys.readouterr().out
    assert (bundle_dir / "report.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "{tmp}/missing"], "is not a results bundle"),
        (["report", "{tmp}/not_bundle"], "is not a results bundle"),
        (["report", "{tmp}/broken"], "cannot read"),
        (["eval", "--policy", "expert", "--tasks", PICK, "--language-controls"], "add --suite NAME"),
        (["eval", "--suite", "vlagym-pick", "--policy", "expert", "--videos", "-1"], "videos must be non-negative"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    (tmp_path / "not_bundle").mkdir()
    (tmp_path / "not_bundle" / "bundle.json").write_text('{"tasks": {}}')
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "bundle.json").write_text("{")
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"vlagym {argv[0]}: error:") and message in err and "\n" not in err
