"""ONNX export of the acting path: onnxruntime against torch on real observations, errors, the command."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

from vlagym.cli import main  # noqa: E402
from vlagym.policies import VLAConfig, VLAPolicy  # noqa: E402
from vlagym.policies.onnx import ExportError, OnnxPolicy, export_onnx  # noqa: E402
from vlagym.wrappers.language import Tokenizer  # noqa: E402
from vlagym.wrappers.normalize import NormStats  # noqa: E402

TINY = dict(image_size=32, vision_channels=(8, 16), hidden_dim=32, text_layers=1, chunk_size=4, flow_steps=3)
TOLERANCE = 1e-4  # env units (actions lie in [-1, 1]); float32 kernels differ in summation order


def make_checkpoint(folder: Path, head: str) -> Path:
    torch.manual_seed(0)
    # The flow checkpoint also conditions FiLM on a bag of words, reads rotary text positions and resizes its
    # images for the CNNs, so the export covers both conditionings, both instruction encoders and the resize.
    flow = head == "flow"
    extra = dict(film_words=True, text_positions="rotary", encoder_size=24) if flow else {}
    config = VLAConfig(head=head, **extra, **TINY)
    policy = VLAPolicy(config, Tokenizer.from_tasks())
    # Words as training would mark them: the scenes' instructions then hold marked and unmarked words.
    policy.mark_words(["pick up the red cup", "lift the blue cup", "grab the green cup and lift it"])
    rng = np.random.default_rng(0)
    actions = np.concatenate([rng.normal(0.05, 0.3, (200, 6)), rng.choice([-1.0, 1.0], (200, 1))], axis=1)
    policy.set_stats(NormStats.from_arrays({"action": actions, "proprio": rng.normal(0.0, 0.5, (200, 23))}))
    with torch.no_grad():  # visibly non-zero outputs
        for p in policy.head.parameters():
            p.normal_(0.0, 0.3)
    policy.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def exported_by_the_command(tmp_path_factory):
    """`vlagym export` of an L1 checkpoint (default output path): its exit code and what it printed."""
    ckpt = make_checkpoint(tmp_path_factory.mktemp("onnx_l1") / "ckpt", "l1")
    torch.set_num_threads(1)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        code = main(["export", str(ckpt), "--format", "onnx"])
    return ckpt, code, out.getvalue()


@pytest.fixture(scope="module", params=["l1", "flow"])
def exported(request, tmp_path_factory, exported_by_the_command):
    """(checkpoint, report) of each head: the L1 one written by the command, the flow one by `export_onnx`."""
    if request.param == "l1":
        ckpt, _, printed = exported_by_the_command
        return ckpt, SimpleNamespace(path=str(ckpt / "model.onnx"), max_abs_diff=printed_difference(printed))
    folder = tmp_path_factory.mktemp("onnx_flow")
    ckpt = make_checkpoint(folder / "ckpt", "flow")
    torch.set_num_threads(1)
    return ckpt, export_onnx(ckpt, folder / "policy.onnx")


def printed_difference(printed: str) -> float:
    """The onnxruntime-vs-torch difference `vlagym export` printed (its own check of the file it wrote)."""
    return float(printed.split("max |onnxruntime - torch| over a chunk of random inputs: ")[1].split()[0])


def real_batch(policy: VLAPolicy, n: int) -> dict:
    """n real observations of different PickCup scenes and wordings, batched as `vlagym eval` does."""
    env = gym.make("VLA-PickCup-v0", obs_mode="rgb", image_size=32, cameras=["front", "wrist"])
    try:
        obs = [env.reset(seed=s)[0] for s in range(n)]
    finally:
        env.close()
    stacked = {
        "images": {cam: np.stack([o["images"][cam] for o in obs]) for cam in ("front", "wrist")},
        "proprio": np.stack([o["proprio"] for o in obs]),
        "instruction": np.array([o["instruction"] for o in obs]),
    }
    return policy.batch_from_obs(stacked)


@pytest.mark.parametrize("rows", [1, 3])
def test_onnxruntime_matches_torch_on_real_observations(exported, rows):
    ckpt, report = exported
    assert report.max_abs_diff is not None and report.max_abs_diff < TOLERANCE
    policy = VLAPolicy.from_pretrained(ckpt)
    onnx_policy = OnnxPolicy(report.path)
    batch = real_batch(policy, rows)
    expected = policy.predict_action_chunk(batch, torch.Generator().manual_seed(7)).numpy()
    got = onnx_policy.predict_action_chunk(batch, torch.Generator().manual_seed(7))
    assert got.shape == expected.shape == (rows, 4, 7)
    assert np.abs(got - expected).max() < TOLERANCE
    assert np.abs(expected).max() > 0.05  # not a trivially zero chunk
    tokens = {**batch, "instruction_tokens": policy.tokenize(list(batch["instruction"])).numpy()}
    del tokens["instruction"]
    np.testing.assert_array_equal(onnx_policy.predict_action_chunk(tokens, torch.Generator().manual_seed(7)), got)


def test_the_file_carries_the_checkpoints_config(exported):
    ckpt, report = exported
    onnx_policy = OnnxPolicy(report.path)
    policy = VLAPolicy.from_pretrained(ckpt)
    assert onnx_policy.config == policy.config
    assert onnx_policy.tokenizer.vocab == policy.tokenizer.vocab
    assert onnx_policy.input_names[:2] == ["front", "wrist"]
    assert not list(Path(report.path).parent.glob("*.data"))  # one self-contained file


def test_bad_inputs_raise_clear_errors(exported, tmp_path):
    _, report = exported
    with pytest.raises(ExportError, match="cannot load the checkpoint"):
        export_onnx(tmp_path / "nowhere", tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"not a model")
    with pytest.raises(ExportError, match="cannot load .* as an ONNX model"):
        OnnxPolicy(corrupt)
    onnx = pytest.importorskip("onnx")
    foreign = tmp_path / "foreign.onnx"
    model = onnx.load(report.path)
    del model.metadata_props[:]
    onnx.save_model(model, str(foreign))
    with pytest.raises(ExportError, match="not a vlagym policy"):
        OnnxPolicy(foreign)
    onnx_policy = OnnxPolicy(report.path)
    wrong = {"observation.images.front": np.zeros((1, 3, 16, 16), np.uint8)}
    with pytest.raises(ValueError, match="must be uint8 \\(B, 3, 32, 32\\)"):
        onnx_policy.predict_action_chunk(wrong)


def test_export_command(exported_by_the_command, tmp_path, capsys):
    ckpt, code, printed = exported_by_the_command
    out = ckpt / "model.onnx"
    assert code == 0 and out.is_file() and str(out) in printed
    assert printed_difference(printed) < TOLERANCE
    assert "[torch.onnx]" not in printed  # the exporter's progress lines stay out of the command's output
    assert main(["export", str(tmp_path / "missing"), "--out", str(tmp_path / "m.onnx")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vlagym export: error: cannot load the checkpoint") and err.count("\n") == 1
