"""`vlagym eval --backend ray --address` against a cluster of two Ray node processes on this machine (a head
and a second node, one CPU each, started with `ray start` as a user would), against the local backend.

Slow (about 30 s of nodes starting) and it ends with `ray stop --force`, which stops every Ray process of this
user: run it alone, `python -m pytest -q -m slow tests/eval/test_ray_cluster.py`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("ray")

TASK = "VLA-PickCup-v0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_eval_on_a_two_node_cluster_equals_the_local_backend(tmp_path):
    # Ray 2.5x's `ray start` turns token authentication on; every process of the cluster must then say so
    env = {**os.environ, "RAY_AUTH_MODE": "token"}
    address = f"127.0.0.1:{free_port()}"

    def run(*argv: str, timeout: float = 120) -> None:
        subprocess.run(list(argv), env=env, check=True, capture_output=True, timeout=timeout)

    ray = [sys.executable, "-m", "ray.scripts.scripts"]
    nodes = ["--num-cpus=1", "--disable-usage-stats"]
    try:
        run(*ray, "start", "--head", f"--port={address.split(':')[1]}", "--include-dashboard=false", *nodes)
        run(*ray, "start", f"--address={address}", *nodes)
        args = ["--policy", "expert", "--tasks", TASK, "--episodes", "6", "--no-progress"]
        ray_args = ["--backend", "ray", "--address", address, "--workers", "2"]
        run(sys.executable, "-m", "vlagym", "eval", *args, "--out", str(tmp_path / "cluster"), *ray_args, timeout=300)
        run(sys.executable, "-m", "vlagym", "eval", *args, "--out", str(tmp_path / "local"), timeout=300)
    finally:
        subprocess.run([*ray, "stop", "--force"], env=env, capture_output=True, timeout=120)
    cluster, local = (json.loads((tmp_path / n / "results.json").read_text()) for n in ("cluster", "local"))
    assert cluster["backend"] == {"name": "ray", "workers": 2, "num_envs": 1, "unit_size": 2}
    assert cluster["tasks"][TASK]["episodes"] == local["tasks"][TASK]["episodes"]
