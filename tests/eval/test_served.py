"""Policies served over the openpi websocket protocol, and a user's factory policy, as `vlagym eval` policies.

A vlagym checkpoint served on loopback by `PolicyServer` must act exactly as the checkpoint does in process
(`CheckpointPolicy`): the same action at every step, so the same episodes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("websockets")
pytest.importorskip("msgpack")

from vlagym.cli import main  # noqa: E402
from vlagym.eval.adapters import CheckpointPolicy  # noqa: E402
from vlagym.eval.configs import EvalConfig, EvalError, policy_kind  # noqa: E402
from vlagym.eval.evaluate import evaluate  # noqa: E402
from vlagym.eval.loading import load_eval_policy  # noqa: E402
from vlagym.eval.rollout import make_rollout_envs  # noqa: E402
from vlagym.eval.served import ServedMapping, ServedPolicy  # noqa: E402
from vlagym.eval.server import PolicyServer  # noqa: E402
from vlagym.eval.wire import WireError, pack, unpack  # noqa: E402
from vlagym.policies import VLAConfig, VLAPolicy, save_checkpoint  # noqa: E402
from vlagym.wrappers.normalize import NormStats  # noqa: E402

TASK = "VLA-PickCup-v0"
STEPS = 7  # per episode: chunks of 4 executed 3 at a time, the third cut short


def make_checkpoint(folder, kind: str):
    """A tiny checkpoint: "l1" and "flow" heads executing 3 actions per chunk, "ensemble" an L1 head that acts
    with a temporal ensemble."""
    torch.manual_seed(0)
    acting = {"temporal_ensemble": True} if kind == "ensemble" else {"n_action_steps": 3}
    config = VLAConfig(
        head="flow" if kind == "flow" else "l1", cameras=("front", "wrist"), image_size=16, vision_channels=(8,),
        hidden_dim=16, text_layers=1, text_heads=2, chunk_size=4, trunk_layers=1, flow_steps=2, **acting,
    )  # fmt: skip
    policy = VLAPolicy(config)
    rng = np.random.default_rng(0)
    actions = np.concatenate([rng.normal(0.0, 0.3, (100, 6)), rng.choice([-1.0, 1.0], (100, 1))], axis=1)
    policy.set_stats(NormStats.from_arrays({"action": actions, "proprio": rng.normal(0.0, 0.5, (100, 23))}))
    with torch.no_grad():
        for p in policy.head.parameters():
            p.normal_(0.0, 0.3)
    save_checkpoint(policy, folder, extra={"env_id": TASK, "env_kwargs": {"max_episode_steps": STEPS}})
    return folder


@pytest.fixture(scope="module", params=["l1", "flow", "ensemble"])
def served(request, tmp_path_factory):
    """(checkpoint folder, a running server of it, requests per episode of STEPS steps)."""
    folder = make_checkpoint(tmp_path_factory.mktemp(f"served_{request.param}") / "ckpt", request.param)
    server = PolicyServer(str(folder), port=0).start()
    yield folder, server, STEPS if request.param == "ensemble" else 3  # every step, or a chunk every 3 steps
    server.stop()


def test_wire_round_trip_and_openpis_byte_keys():
    msgpack = pytest.importorskip("msgpack")
    message = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "prompt": "pick up the cup", "s": np.int64(3)}
    back = unpack(pack(message))
    np.testing.assert_array_equal(back["a"], message["a"])
    assert back["a"].dtype == np.float32 and back["prompt"] == "pick up the cup" and back["s"] == 3
    back["a"][0, 0] = 1.0  # writable

    def byte_keys(obj):  # how openpi's own client tags an array
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}

    # openpi's unpacker recognises bytes tag keys only (as its packer writes them), so ours are bytes too
    raw = msgpack.unpackb(pack({"a": np.zeros(2, np.float32), "s": np.int64(3)}), raw=False)
    assert raw["a"][b"__ndarray__"] is True and raw["a"][b"dtype"] == "<f4" and raw["a"][b"shape"] == [2]
    assert raw["s"][b"__npgeneric__"] is True and raw["s"][b"data"] == 3
    theirs = msgpack.Packer(default=byte_keys).pack({"actions": np.ones((4, 7), np.float32)})
    np.testing.assert_array_equal(unpack(theirs)["actions"], np.ones((4, 7), np.float32))
    with pytest.raises(WireError, match="not a message"):
        unpack(b"\xc1")
    with pytest.raises(WireError, match="cannot send"):
        pack({"x": np.array(["text"])})


@pytest.mark.skipif(
    not os.environ.get("VLAGYM_OPENPI_PYTHON"),
    reason="VLAGYM_OPENPI_PYTHON names no interpreter with openpi-client (see docs/serving.md)",
)
def test_openpis_own_client_gets_the_checkpoints_chunks(served, tmp_path):
    """openpi's `WebsocketClientPolicy` (in its own environment: it pins numpy < 2) reads the metadata and gets,
    for LIBERO-keyed observations, the chunks the server computes in process (the flow head's with sent noise)."""
    folder, server, _ = served
    rng = np.random.default_rng(3)
    n, meta = 3, server.metadata
    obs = {key: rng.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8) for key in meta["image_keys"].values()}
    obs["observation/state"] = rng.normal(0.0, 0.5, (n, 23)).astype(np.float32)
    obs["prompt"] = np.array(["pick up the red cup", "pick up the blue cup", "pick up the green cup"])
    if meta["noise_shape"]:
        obs["noise"] = rng.standard_normal((n, *meta["noise_shape"])).astype(np.float32)
    np.savez(tmp_path / "obs.npz", **obs)
    client = Path(__file__).parent / "external" / "openpi_infer.py"
    command = [os.environ["VLAGYM_OPENPI_PYTHON"], str(client), server.uri, str(tmp_path / "obs.npz")]
    result = subprocess.run([*command, str(tmp_path / "out.npz")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.splitlines()[-1])["chunk_size"] == meta["chunk_size"]
    got = np.load(tmp_path / "out.npz")["actions"]
    want = np.stack(
        [server.infer({k: (str(v[i]) if k == "prompt" else v[i]) for k, v in obs.items()})["actions"] for i in range(n)]
    )
    assert got.shape == (n, meta["chunk_size"], 7) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    assert len({a.tobytes() for a in got}) == n, "the three observations got different chunks"


@pytest.mark.skipif(
    not os.environ.get("VLAGYM_OPENPI_PYTHON"),
    reason="VLAGYM_OPENPI_PYTHON names no interpreter with openpi-client (see docs/serving.md)",
)
def test_vlagyms_client_reads_a_server_using_openpis_codec():
    """`ServedPolicy` against a server that packs and unpacks with openpi's own `msgpack_numpy` (how openpi's
    servers speak): the observations arrive as the right arrays and strings, the chunks come back."""
    server = Path(__file__).parent / "external" / "openpi_codec_server.py"
    with subprocess.Popen(
        [os.environ["VLAGYM_OPENPI_PYTHON"], str(server)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            remote = ServedPolicy(f"ws://127.0.0.1:{int(proc.stdout.readline())}")
            assert not remote.vlagym_server and remote.chunk_execution()["n_action_steps"] is None
            envs = make_rollout_envs(TASK, 1, "sync", obs_mode="rgb", image_size=16, max_episode_steps=STEPS)
            obs, _ = envs.reset(seed=[5])
            first = remote(obs)
            mean = np.float32(obs["images"]["front"][0].mean() / 255.0)
            want = (
                np.asarray(obs["proprio"][0][:7], np.float32)[None] + np.arange(1, 5, dtype=np.float32)[:, None] * mean
            )
            executed = [first[0]] + [remote(envs.step(a)[0])[0] for a in (first, first, first)]
            np.testing.assert_allclose(np.stack(executed), want, rtol=1e-6)  # one chunk of 4, executed whole
            assert len(remote.latencies) == 1
            envs.close()
            remote.close()
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)


def test_served_actions_equal_the_in_process_checkpoints_step_by_step(served):
    folder, server, per_episode = served
    local, remote = CheckpointPolicy(folder), ServedPolicy(server.uri)
    assert remote.env_kwargs == local.env_kwargs and remote.env_id == TASK
    assert remote.chunk_execution()["n_action_steps"] == local.chunk_execution()["n_action_steps"]
    envs = make_rollout_envs(TASK, 1, "sync", **local.env_kwargs)
    try:
        for seed in (11, 12):
            obs, _ = envs.reset(seed=[seed])
            for policy in (local, remote):
                policy.reset(np.ones(1, bool), seeds=[seed])
            for _ in range(STEPS - 1):
                expected, got = local(obs), remote(obs)
                np.testing.assert_array_equal(got, expected)
                obs, *_ = envs.step(expected)
    finally:
        envs.close()
        remote.close()
    assert len(remote.latencies) == 2 * (STEPS - 1 if per_episode == STEPS else 2)  # 6 steps: every step, or 2 chunks


def test_chunks_of_an_ensemble_server_executed_as_chunks_equal_the_checkpoints(tmp_path):
    """A protocol that fixes actions per chunk turns a temporal ensemble off: both sides then execute raw chunks
    and snap the gripper per action."""
    folder = make_checkpoint(tmp_path / "ckpt", "ensemble")
    with PolicyServer(str(folder), port=0) as server:
        local, remote = CheckpointPolicy(folder), ServedPolicy(server.uri)
        local.execute_chunks(2)
        remote.execute_chunks(2)
        envs = make_rollout_envs(TASK, 1, "sync", **local.env_kwargs)
        try:
            obs, _ = envs.reset(seed=[21])
            for policy in (local, remote):
                policy.reset(np.ones(1, bool), seeds=[21])
            for _ in range(STEPS - 1):
                expected, got = local(obs), remote(obs)
                np.testing.assert_array_equal(got, expected)
                assert abs(expected[0, -1]) == 1.0
                obs, *_ = envs.step(expected)
        finally:
            envs.close()
            remote.close()


def test_eval_through_the_server_gives_the_in_process_episodes(served, tmp_path):
    folder, server, per_episode = served
    common = dict(episodes=2, seed=500, progress=False)
    local = evaluate(EvalConfig(policy=str(folder), out=str(tmp_path / "local"), **common))
    remote = evaluate(EvalConfig(policy=server.uri, out=str(tmp_path / "remote"), **common))
    assert remote["tasks"][TASK]["episodes"] == local["tasks"][TASK]["episodes"]
    assert remote["env_kwargs"] == local["env_kwargs"]
    latency = remote["served_latency"]
    assert latency["requests"] == 2 * per_episode and 0 < latency["p50_ms"] <= latency["p99_ms"]


def test_bad_requests_and_unreachable_servers_are_clear_errors(served):
    _, server, _ = served
    policy = ServedPolicy(server.uri)
    with pytest.raises(EvalError, match="reported an error: bad request: the observation lacks"):
        policy.infer({"prompt": "pick up the cup"})
    policy.close()
    with pytest.raises(EvalError, match="cannot reach a policy server at ws://127.0.0.1:1"):
        ServedPolicy("ws://127.0.0.1:1", timeout=5)
    with pytest.raises(EvalError, match="served_mapping: n_action_steps must be"):
        ServedPolicy(server.uri, {"n_action_steps": 0})


def test_mapping_converts_keys_state_and_actions():
    m = ServedMapping.from_dict({"image_keys": {"front": "img"}, "state_indices": [0, 1], "action_scale": [2.0] * 7})
    assert m.image_keys == {"front": "img"} and m.state_key == "observation/state"
    with pytest.raises(ValueError, match="action_scale must list 7 numbers"):
        ServedMapping(action_scale=[1.0])


class ZeroPolicy:
    """A user's batched policy: zero actions, counting resets."""

    env_kwargs = {"obs_mode": "state"}
    env_id = "VLA-PressButton-v0"

    def __init__(self):
        self.resets = 0

    def reset(self, mask, seeds=None):
        self.resets += int(np.sum(mask))

    def __call__(self, obs):
        return np.zeros((len(obs), 7), np.float32)


MADE: list[ZeroPolicy] = []


def make_zero_policy() -> ZeroPolicy:
    MADE.append(ZeroPolicy())
    return MADE[-1]


def test_factory_policy_is_evaluated(tmp_path):
    spec = f"{__name__}:make_zero_policy"
    assert policy_kind(spec) == "factory" and policy_kind("ws://h:1") == "served" and policy_kind("expert") == "expert"
    results = evaluate(EvalConfig(policy=spec, episodes=2, out=str(tmp_path / "e"), progress=False,
                                  env_kwargs={"max_episode_steps": 3}))  # fmt: skip
    summary = results["tasks"]["VLA-PressButton-v0"]
    assert summary["n"] == 2 and [e["length"] for e in summary["episodes"]] == [3, 3]
    assert MADE[-1].resets == 2
    with pytest.raises(EvalError, match="has no callable 'nope'"):
        load_eval_policy(f"{__name__}:nope")
    with pytest.raises(EvalError, match="cannot import 'no_such_module_xyz'"):
        load_eval_policy("no_such_module_xyz:make")


def test_serve_command_errors(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "missing")]) == 2
    assert "serve: error:" in capsys.readouterr().err
    folder = make_checkpoint(tmp_path / "ckpt", "l1")
    assert main(["serve", str(folder), "--port", "70000"]) == 2
    assert "port must be between 0 and 65535" in capsys.readouterr().err
    assert main(["eval", "--policy", str(folder), "--served-mapping", json.dumps({"state_key": ""})]) == 2
    assert "--served-mapping is for a policy server" in capsys.readouterr().err


def test_a_suite_through_the_server_gives_the_in_process_bundle(served, tmp_path, monkeypatch):
    from vlagym.eval import suites
    from vlagym.eval.configs import SuiteRunConfig
    from vlagym.eval.suite_run import run_suite
    from vlagym.eval.suites import SuiteProtocol

    folder, server, _ = served
    tiny = SuiteProtocol(
        name="tiny", version="0", description="one task, two splits", tasks=(TASK,), splits=("train", "lighting"),
        episodes=2, base_seed=5_000_000, horizons=((TASK, 100),),
    )  # fmt: skip
    monkeypatch.setitem(suites.SUITES, "tiny", tiny)
    local = run_suite(SuiteRunConfig(suite="tiny", policy=str(folder), out=str(tmp_path / "l"), progress=False))
    remote = run_suite(SuiteRunConfig(suite="tiny", policy=server.uri, out=str(tmp_path / "r"), progress=False))
    for split in ("train", "lighting"):
        assert remote["results"][TASK][split]["episodes"] == local["results"][TASK][split]["episodes"]
    assert set(remote["fingerprint"]["checkpoint_sha256"].values()) == {"served: not hashed"}
    assert f"--policy {server.uri}" in remote["reproduce"]
