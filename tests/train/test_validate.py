"""check_dataset and dataset_info: a good file passes, every kind of damage is named, foreign files get one sentence."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from vlagym.train import layout
from vlagym.train.demos import DemoConfig, collect_demos
from vlagym.train.validate import DatasetError, check_dataset, dataset_info, format_info


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """Three PickCup demos at 16 px."""
    path = tmp_path_factory.mktemp("good") / "good.hdf5"
    collect_demos(DemoConfig(task="VLA-PickCup-v0", episodes=3, image_size=16, seed=3, out=str(path), progress=False))
    return path


@pytest.fixture
def damaged(good, tmp_path):
    """`damaged(edit)` -> a copy of the good file after `edit(h5py.File)`."""

    def _make(edit) -> Path:
        path = tmp_path / "damaged.hdf5"
        shutil.copyfile(good, path)
        with h5py.File(path, "a") as f:
            edit(f)
        return path

    return _make


def test_a_collected_file_has_no_problems(good):
    assert check_dataset(good) == []


def test_info_counts_and_statistics(good):
    info = dataset_info(good)
    with h5py.File(good, "r") as f:
        demos = [f["data"][layout.demo_name(i)] for i in range(3)]
        actions = np.concatenate([g["actions"][()] for g in demos]).astype(np.float64)
        lengths = [int(g.attrs["num_samples"]) for g in demos]
        instructions = [g.attrs["instruction"] for g in demos]
    assert info["episodes"] == 3 and info["successes"] == 3 and info["incomplete"] == 0
    assert info["steps"] == sum(lengths) and info["length"]["max"] == max(lengths)
    assert info["tasks"] == {"VLA-PickCup-v0": 3}
    assert sum(info["instructions"].values()) == 3 and set(info["instructions"]) == set(instructions)
    assert info["seeds"] == {"min": 3, "max": 5}
    np.testing.assert_allclose(info["actions"]["mean"], actions.mean(axis=0))
    np.testing.assert_allclose(info["actions"]["std"], actions.std(axis=0))
    np.testing.assert_allclose(info["actions"]["min"], actions.min(axis=0))
    np.testing.assert_allclose(info["actions"]["max"], actions.max(axis=0))
    assert info["obs"]["front_rgb"] == {"shape": [16, 16, 3], "dtype": "uint8", "compression": "gzip"}
    assert info["obs"]["proprio"]["shape"] == [23] and info["obs"]["state"]["dtype"] == "float32"
    json.dumps(info)  # JSON-ready
    text = format_info(info)
    assert "3 complete (3 successful)" in text and "front_rgb" in text and instructions[0] in text


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda f: f.attrs.__setitem__("format_version", 2), "format_version is 2"),
        (lambda f: f.attrs.__delitem__("mujoco_version"), "'mujoco_version' is missing"),
        (lambda f: f["data"].attrs.__setitem__("env_kwargs", "{not json"), "not valid JSON"),
        (lambda f: f["data"].attrs.__setitem__("total", 3), "total is 3"),
        (lambda f: f["data/demo_1"].attrs.__delitem__("complete"), "demo_1 is incomplete"),
        (lambda f: f["data"].move("demo_2", "demo_7"), "missing: [2"),
        (lambda f: f["data"].create_group("extra"), "/data/extra is not a demo group"),
        (lambda f: f["data/demo_0"].__delitem__("rewards"), "demo_0: rewards is missing"),
        (lambda f: f["data/demo_0/obs"].__delitem__("wrist_rgb"), "demo_0: obs keys"),
        (lambda f: f["data/demo_0"].attrs.__setitem__("num_samples", 5), "demo_0: actions has shape"),
        (lambda f: f["data/demo_0"].attrs.__delitem__("seed"), "demo_0: attribute 'seed' is missing"),
        (lambda f: f["data/demo_0"].attrs.__setitem__("instruction", " "), "instruction is empty"),
        (lambda f: _replace(f, "data/demo_0/actions", lambda a: a.astype(np.float64)), "actions has dtype float64"),
        (lambda f: _replace(f, "data/demo_0/actions", lambda a: a[:, :5]), "actions have 5 dimensions"),
        (lambda f: _replace(f, "data/demo_0/actions", lambda a: a * np.nan), "NaN"),
        (lambda f: _replace(f, "data/demo_1/obs/proprio", lambda a: a[:-1]), "demo_1: obs/proprio has shape"),
        (lambda f: _replace(f, "data/demo_1/obs/state", lambda a: a[:, :80]), "obs/state has shape"),
        (lambda f: _replace(f, "data/demo_1/obs/front_rgb", lambda a: a.astype(np.float32)), "dtype float32"),
        (lambda f: _replace(f, "data/demo_1/obs/front_rgb", lambda a: a[:, :8]), "obs/front_rgb has shape"),
        (lambda f: _replace(f, "data/demo_1/obs/front_rgb", lambda a: a, chunks=None), "one frame per chunk"),
        (lambda f: _replace(f, "data/demo_2/dones", lambda a: a.astype(np.int64)), "dones has dtype int64"),
        (lambda f: _replace(f, "data/demo_2/dones", lambda a: np.ones_like(a)), "dones is 1 before the last step"),
        (lambda f: _replace(f, "data/demo_2/dones", lambda a: a * 2), "other than 0 and 1"),
        (lambda f: _replace(f, "data/demo_2/states", lambda a: a.astype(np.float32)), "states has dtype float32"),
        (lambda f: _replace(f, "data/demo_2/rewards", lambda a: a[:, None]), "rewards has shape"),
    ],
)
def test_check_names_each_problem(edit, expected, damaged):
    problems = check_dataset(damaged(edit))
    assert problems and any(expected in p for p in problems), problems


def _replace(f: h5py.File, name: str, change, **kwargs) -> None:
    old = f[name]
    data = change(old[()])
    del f[name]
    f.create_dataset(name, data=data, **kwargs)


def test_incomplete_demos_can_be_allowed(damaged):
    path = damaged(lambda f: f["data/demo_2"].attrs.__setitem__("complete", False))
    with h5py.File(path, "a") as f:
        f["data"].attrs["total"] = sum(int(f["data"][f"demo_{i}"].attrs["num_samples"]) for i in range(2))
    assert check_dataset(path, allow_incomplete=True) == []
    assert check_dataset(path) == ["demo_2 is incomplete (its complete attribute is not True: an unfinished write)"]
    assert dataset_info(path)["episodes"] == 2 and dataset_info(path)["incomplete"] == 1


# ---------------------------------------------------------------------------- files that are not demo files
def _one_sentence(path: Path, *needles: str) -> str:
    problems = check_dataset(path)
    assert len(problems) == 1 and "Traceback" not in problems[0] and "\n" not in problems[0], problems
    with pytest.raises(DatasetError) as err:
        dataset_info(path)
    assert str(err.value) == problems[0]
    for needle in needles:
        assert needle in problems[0], problems[0]
    return problems[0]


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.999])
def test_truncated_file(keep, good, tmp_path):
    path = tmp_path / "cut.hdf5"
    data = good.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    _one_sentence(path, "truncated", str(len(data)))


def test_not_an_hdf5_file(tmp_path):
    path = tmp_path / "notes.hdf5"
    path.write_text("hello\n")
    _one_sentence(path, "not an HDF5 file")
    empty = tmp_path / "empty.hdf5"
    empty.touch()
    _one_sentence(empty, "not an HDF5 file")


def test_robomimic_like_file(tmp_path):
    path = tmp_path / "robomimic.hdf5"
    with h5py.File(path, "w") as f:
        g = f.create_group("data/demo_0")
        g.attrs["num_samples"] = 2
        g.create_dataset("actions", data=np.zeros((2, 7)))
        g.create_dataset("obs/agentview_image", data=np.zeros((2, 8, 8, 3), np.uint8))
        f["data"].attrs["env_args"] = "{}"
    _one_sentence(path, "robomimic", "not a vlagym demo file")


def test_random_hdf5_file(tmp_path):
    path = tmp_path / "random.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("weights", data=np.arange(10))
    _one_sentence(path, "not a vlagym demo file", "weights")
    with h5py.File(path, "a") as f:
        f.attrs["format"] = "something-else"
    _one_sentence(path, "'something-else'")


def test_missing_file(tmp_path):
    _one_sentence(tmp_path / "nope.hdf5", "no such file")


def test_file_left_open_by_a_killed_writer(tmp_path):
    """Why the collector never writes FILE.hdf5 in place: HDF5's latest format flags a killed writer's file."""
    path = tmp_path / "open.hdf5"
    code = (
        "import h5py, os, signal, sys\n"
        "f = h5py.File(sys.argv[1], 'w', libver='latest')\n"
        "f.attrs['format'] = 'vlagym-demos'\n"
        "f.flush()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    _one_sentence(path, "not closed by its writer")
    assert os.path.getsize(path) > 0
