"""The files evaluation reads and writes, named once for writers, readers and the command line.

    CHECKPOINT/model.safetensors, CHECKPOINT/config.json   a policy `vlagym eval` loads (`CHECKPOINT_FILES`)

    vlagym eval                 OUT/eval_config.json, OUT/results.json, OUT/results.md, OUT/videos/*.mp4
    vlagym eval --suite NAME    OUT/bundle.json, OUT/bundle.md, OUT/heatmap.png, OUT/report.html, OUT/videos/*.mp4
    vlagym curve                OUT/curve.json, OUT/curve.md, OUT/curve.png, one eval folder per point

A bundle.json says what it is: ``"format": BUNDLE_FORMAT, "format_version": BUNDLE_FORMAT_VERSION``.
Nothing here imports more than the standard library, so the command line reaches these names cheaply.
"""

from __future__ import annotations

CHECKPOINT_FILES = ("model.safetensors", "config.json")

EVAL_CONFIG_JSON = "eval_config.json"
RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
VIDEOS_DIR = "videos"

BUNDLE_FORMAT = "vlagym-results-bundle"
BUNDLE_FORMAT_VERSION = 1
BUNDLE_JSON = "bundle.json"
BUNDLE_MD = "bundle.md"
HEATMAP_PNG = "heatmap.png"

CURVE_JSON = "curve.json"
CURVE_MD = "curve.md"
CURVE_PNG = "curve.png"
