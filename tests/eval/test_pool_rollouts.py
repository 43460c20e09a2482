"""A checkpoint or the expert evaluated through the pool vector env (plain and suite runs): the same episodes as
sync, with torch acting on one thread in every mode (restored afterwards)."""

from __future__ import annotations

import pytest
import torch

from vlagym.eval import suites
from vlagym.eval.adapters import CheckpointPolicy, ExpertPolicy
from vlagym.eval.bundle import reproduction_command
from vlagym.eval.configs import EvalConfig, EvalError, SuiteRunConfig
from vlagym.eval.evaluate import evaluate
from vlagym.eval.rollout import make_rollout_envs, run_episodes
from vlagym.eval.suite_run import run_suite
from vlagym.eval.suites import SuiteProtocol
from vlagym.policies import VLAConfig, VLAPolicy, save_checkpoint

TASK = "VLA-PressButton-v0"
STEPS = 8


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("pool") / "ckpt"
    config = VLAConfig(
        cameras=("front",), image_size=16, vision_channels=(8,), hidden_dim=16, text_layers=1, text_heads=2,
        chunk_size=4, trunk_layers=1,
    )  # fmt: skip
    save_checkpoint(VLAPolicy(config), folder, extra={"env_id": TASK, "env_kwargs": {"max_episode_steps": STEPS}})
    return folder


@pytest.fixture
def two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


class ThreadSpy:
    """A `CheckpointPolicy` that notes torch's thread count at every call."""

    def __init__(self, folder):
        self.policy, self.threads = CheckpointPolicy(folder), set()

    def reset(self, mask, seeds=None):
        self.policy.reset(mask, seeds=seeds)

    def __call__(self, obs):
        self.threads.add(torch.get_num_threads())
        return self.policy(obs)


@pytest.mark.parametrize("mode", ["sync", "pool", "async"])
def test_torch_acts_on_one_thread_in_every_mode_and_is_restored(checkpoint, two_threads, mode):
    envs = make_rollout_envs(TASK, 2, mode, obs_mode="rgb", image_size=16, cameras=["front"], max_episode_steps=4)
    spy = ThreadSpy(checkpoint)
    try:
        run_episodes(envs, spy, [1, 2, 3], on_episode_start=spy.reset, progress=False)
    finally:
        envs.close()
    assert spy.threads == {1}
    assert torch.get_num_threads() == 2


def test_a_plain_evaluation_through_the_pool_has_the_sync_episodes(checkpoint, two_threads, tmp_path):
    runs = {}
    for mode in ("sync", "pool"):
        cfg = EvalConfig(
            policy=str(checkpoint), episodes=5, num_envs=3, vectorization=mode, out=str(tmp_path / mode),
            progress=False,
        )  # fmt: skip
        runs[mode] = evaluate(cfg)["tasks"][TASK]["episodes"]
    assert runs["pool"] == runs["sync"] and len(runs["sync"]) == 5


def suite_results(monkeypatch, tmp_path, policy: str, splits: tuple[str, ...]) -> dict[str, dict]:
    """One tiny suite of TASK run with `sync` and with `pool`: each run's results, wall times left out (they
    differ), and its reproduction command."""
    protocol = SuiteProtocol(
        name="tiny-pool", version="0", description="one quick task, two splits", tasks=(TASK,), splits=splits,
        episodes=3, base_seed=7_000_000, horizons=((TASK, 80),),
    )  # fmt: skip
    monkeypatch.setitem(suites.SUITES, "tiny-pool", protocol)
    runs = {}
    for mode in ("sync", "pool"):
        cfg = SuiteRunConfig(
            suite="tiny-pool", policy=policy, num_envs=2, vectorization=mode, out=str(tmp_path / mode), progress=False
        )
        results = run_suite(cfg)["results"]
        for cell in results[TASK].values():
            assert cell.pop("seconds") > 0
        runs[mode] = {"results": results, "command": reproduction_command(cfg)}
    return runs


def test_a_suite_through_the_pool_has_the_sync_bundle_and_reruns_with_it(checkpoint, monkeypatch, tmp_path):
    runs = suite_results(monkeypatch, tmp_path, str(checkpoint), ("train", "lighting"))
    assert runs["pool"]["results"] == runs["sync"]["results"]
    assert "--vectorization pool" in runs["pool"]["command"]
    assert "--vectorization" not in runs["sync"]["command"]


def test_the_expert_acts_inside_the_workers_with_the_sync_episodes(tmp_path):
    runs = {}
    for mode in ("sync", "pool", "async"):
        cfg = EvalConfig(
            policy="expert", tasks=[TASK], episodes=5, num_envs=3, vectorization=mode, out=str(tmp_path / mode),
            progress=False,
        )  # fmt: skip
        runs[mode] = evaluate(cfg)["tasks"][TASK]["episodes"]
    assert runs["pool"] == runs["sync"] == runs["async"]
    assert all(e["success"] for e in runs["sync"])  # the expert solves them: its actions did run


def test_an_expert_suite_through_the_pool_has_the_sync_bundle(monkeypatch, tmp_path):
    runs = suite_results(monkeypatch, tmp_path, "expert", ("train", "distractors"))
    assert runs["pool"]["results"] == runs["sync"]["results"]


def test_the_expert_needs_its_envs_made_for_it():
    envs = make_rollout_envs(TASK, 2, "pool")  # no expert=True: the experts are out of reach
    try:
        with pytest.raises(EvalError, match="expert=True"):
            ExpertPolicy(envs)
    finally:
        envs.close()
    with pytest.raises(EvalError, match="vectorization must be one of"):
        SuiteRunConfig(suite="vlagym-pick", policy="expert", vectorization="threads")
