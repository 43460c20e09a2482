"""The synthetic demo file the dataset, bc and post-training sections read is a valid demo file."""

from __future__ import annotations

from vlagym.perf.synthetic import write_synthetic_demos
from vlagym.train.validate import check_dataset

TASK = "VLA-PickCup-v0"


def test_synthetic_demo_file_is_a_valid_demo_file(tmp_path):
    path = write_synthetic_demos(tmp_path / "demos.hdf5", TASK, episodes=2, steps=3, image_size=16)
    assert check_dataset(path) == []
