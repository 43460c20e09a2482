"""Pretrained Hugging Face backbones in the VLA: tiny random models saved locally (nothing is downloaded), frozen,
fully trained or LoRA-adapted; exact checkpoints that load offline; ONNX with merged adapters; the default VLA
unchanged; clear errors."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from vlagym.policies import VLAConfig, VLAPolicy  # noqa: E402
from vlagym.policies.config import BackboneConfig  # noqa: E402
from vlagym.policies.vla import load_policy  # noqa: E402
from vlagym.wrappers.language import Tokenizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_vla import TINY, make_batch  # noqa: E402

# Widths of the tiny transformers; the QLoRA test's are wider, since bitsandbytes' CPU kernels for NF4 weights (the
# packed layout it switches to in inference on CPUs with AVX512-BF16) need at least 64 input features per layer.
TINY_WIDTH = {"hidden_size": 32, "intermediate_size": 37}
QLORA_WIDTH = {"hidden_size": 64, "intermediate_size": 128}
VISION = {
    "siglip": lambda width: transformers.SiglipVisionConfig(
        num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8, **width
    ),
    "dinov2": lambda width: transformers.Dinov2Config(
        num_hidden_layers=1, num_attention_heads=2, image_size=32, patch_size=8, **width
    ),
    "resnet": lambda width: transformers.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1]),
}


def _attention_projections(config: transformers.PretrainedConfig) -> list[str]:
    """The query and value projections' names in this transformers version (DINOv2's are q_proj, v_proj in 5.25)."""
    names = {name.rsplit(".", 1)[-1] for name, _ in transformers.AutoModel.from_config(config).named_modules()}
    return ["q_proj", "v_proj"] if "q_proj" in names else ["query", "value"]


# Attention projections of each family (the union is matched in each model, the BERT text model included).
TARGETS = {
    "siglip": ["q_proj", "v_proj"],
    "dinov2": _attention_projections(VISION["dinov2"](TINY_WIDTH)),
    "resnet": ["convolution"],
}


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_tasks()


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer) -> dict[str, str]:
    """{name: local folder} of tiny random models: the vision families and a BERT with its own WordPiece vocab."""
    return make_models(tmp_path_factory.mktemp("hf"), tokenizer, TINY_WIDTH, VISION)


@pytest.fixture(scope="module")
def qlora_models(tmp_path_factory, tokenizer) -> dict[str, str]:
    """A SigLIP and a BERT wide enough for bitsandbytes' CPU kernels."""
    return make_models(tmp_path_factory.mktemp("hf_qlora"), tokenizer, QLORA_WIDTH, {"siglip": VISION["siglip"]})


def make_models(root: Path, tokenizer: Tokenizer, width: dict[str, int], vision: dict) -> dict[str, str]:
    folders = {}
    torch.manual_seed(0)
    for name, make in vision.items():
        transformers.AutoModel.from_config(make(width)).save_pretrained(root / name)
        folders[name] = str(root / name)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *tokenizer.vocab[2:], "##s"]
    (root / "bert").mkdir()
    (root / "bert" / "vocab.txt").write_text("\n".join(vocab) + "\n")
    transformers.BertTokenizer(str(root / "bert" / "vocab.txt")).save_pretrained(root / "bert")
    bert = transformers.BertConfig(
        vocab_size=len(vocab), num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=32, **width
    )
    transformers.BertModel(bert).save_pretrained(root / "bert")
    folders["bert"] = str(root / "bert")
    return folders


def policy(tokenizer, models, vision="siglip", text=None, tuning="frozen", **overrides) -> VLAPolicy:
    torch.manual_seed(0)
    backbone = dict(vision_model=models[vision] if vision else None, text_model=models[text] if text else None)
    targets = TARGETS[vision or "dinov2"] + (["query", "value"] if text else [])
    backbone.update({"tuning": tuning, "lora_r": 4, "lora_target_modules": targets, **overrides})
    return VLAPolicy(VLAConfig(**TINY, backbone=backbone), tokenizer)


def train(p: VLAPolicy, steps: int = 3, lr: float = 1e-2) -> None:
    opt = torch.optim.AdamW([x for x in p.parameters() if x.requires_grad], lr=lr)
    p.train()
    for i in range(steps):
        loss, _ = p(make_batch(seed=i))
        opt.zero_grad()
        loss.backward()
        opt.step()
    p.eval()


def snapshot(p: VLAPolicy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in p.state_dict().items()}


def changed(before: dict, after: dict) -> set[str]:
    return {k for k in before if not torch.equal(before[k], after[k])}


@pytest.mark.parametrize("vision", sorted(VISION))
@pytest.mark.parametrize("tuning", ["frozen", "full", "lora"])
def test_forward_backward(tokenizer, models, vision, tuning):
    p = policy(tokenizer, models, vision, tuning=tuning)
    loss, metrics = p(make_batch(size=48))  # resized to the backbone's 32 inside
    loss.backward()
    assert np.isfinite(metrics["loss"])
    grads = {n: x.grad for n, x in p.named_parameters() if x.requires_grad}
    unused = {n for n, g in grads.items() if g is None}
    assert unused <= {"vision.model.embeddings.mask_token"}  # DINOv2's masked-image-modelling token
    assert all(torch.isfinite(g).all() for g in grads.values() if g is not None)
    backbone = [x for n, x in p.named_parameters() if n.startswith("vision.model.")]
    trainable = {n for n, x in p.vision.model.named_parameters() if x.requires_grad}
    if tuning == "frozen":
        assert not trainable
    elif tuning == "full":
        assert len(trainable) == len(backbone)
    else:
        assert trainable and all("lora_" in n for n in trainable)
    assert p.predict_action_chunk(make_batch()).shape == (4, TINY["chunk_size"], 7)


def test_text_backbone_reads_the_instruction(tokenizer, models):
    p = policy(tokenizer, models, vision=None, text="bert", tuning="full")
    assert (p.text.subwords[2:] >= 0).any(dim=1).all(), "every word of the vocabulary maps to subwords"
    train(p, steps=2)
    a = p.text(p.tokenize(["pick up the red cup"]))
    b = p.text(p.tokenize(["pick up the blue cup"]))
    assert a.shape == (1, TINY["hidden_dim"]) and not torch.allclose(a, b)


def test_train_save_reload_offline(tmp_path, tokenizer, models):
    # Copies of the model folders, deleted before loading: the checkpoint alone must rebuild the policy.
    local = {k: shutil.copytree(v, tmp_path / "models" / k) for k, v in models.items()}
    p = policy(tokenizer, {k: str(v) for k, v in local.items()}, "siglip", text="bert", tuning="lora")
    train(p)
    p.save_pretrained(tmp_path / "ckpt")
    shutil.rmtree(tmp_path / "models")
    meta = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert meta["config"]["backbone"]["vision_config"]["model_type"] == "siglip_vision_model"
    q = load_policy(tmp_path / "ckpt")  # strict
    batch = make_batch(seed=5)
    assert torch.equal(p.predict_action_chunk(batch), q.predict_action_chunk(batch))


@pytest.mark.parametrize("tuning", ["frozen", "lora"])
def test_bfloat16_backbone_trains_saves_and_reloads(tmp_path, tokenizer, models, tuning):
    # The dtype path is the same on every device; the CPU runs it here (slower than CUDA, same arithmetic).
    p = policy(tokenizer, models, "siglip", text="bert", tuning=tuning, dtype="bfloat16")
    base = {n: x.dtype for n, x in p.named_parameters() if n.startswith(("vision.model.", "text.model."))}
    assert {d for n, d in base.items() if "lora_" not in n} == {torch.bfloat16}
    assert {d for n, d in base.items() if "lora_" in n} == ({torch.float32} if tuning == "lora" else set())
    assert {x.dtype for n, x in p.named_parameters() if n.startswith("trunk.")} == {torch.float32}
    before = snapshot(p)
    train(p)
    diff = changed(before, snapshot(p))
    backbone = {k for k in diff if k.startswith(("vision.model.", "text.model."))}
    assert all("lora_" in k for k in backbone) and (bool(backbone) == (tuning == "lora"))
    p.save_pretrained(tmp_path / "ckpt")
    q = load_policy(tmp_path / "ckpt")
    assert q.vision.model.embeddings.patch_embedding.weight.dtype == torch.bfloat16
    batch = make_batch(seed=5)
    out = p.predict_action_chunk(batch)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    assert torch.equal(out, q.predict_action_chunk(batch))
    # Against the same weights in float32: bfloat16 keeps ~3 significant digits (measured 6e-4 here).
    fp32 = VLAPolicy(replace(p.config, backbone=replace(p.config.backbone, dtype="float32")), tokenizer)
    fp32.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in p.state_dict().items()})
    assert (fp32.eval().predict_action_chunk(batch) - out).abs().max() < 0.01


def test_qlora_trains_adapters_over_4bit_weights_reloads_and_exports(tmp_path, tokenizer, qlora_models):
    pytest.importorskip("bitsandbytes")  # its CPU backend: the 4-bit path runs here as on CUDA
    from vlagym.policies.backbones import dequantize_nf4, merge_lora
    from vlagym.policies.onnx import ActingGraph, example_inputs

    p = policy(tokenizer, qlora_models, "siglip", text="bert", tuning="lora", quantization="nf4")
    base = p.vision.model.encoder.layers[0].self_attn.q_proj.base_layer
    assert type(base).__name__ == "Linear4bit" and base.weight.dtype == torch.uint8
    before = snapshot(p)
    train(p)
    diff = changed(before, snapshot(p))
    backbone = {k for k in diff if k.startswith(("vision.model.", "text.model."))}
    assert backbone and all("lora_" in k for k in backbone), "only the adapters learn; the 4-bit weights stay"
    p.save_pretrained(tmp_path / "ckpt")
    q = load_policy(tmp_path / "ckpt")  # strict, offline: packed weights and quantization state restored
    batch = make_batch(seed=5)
    assert torch.equal(p.predict_action_chunk(batch), q.predict_action_chunk(batch))

    assert base.weight.numel() == base.in_features * base.out_features // 2, "two 4-bit weights per byte"
    # What export traces: the 4-bit layers dequantized to float32, the adapters merged; the same actions. On CPUs
    # with AVX512-BF16, bitsandbytes >= 0.49 runs inference through kernels of its own on repacked weights, which
    # round differently (measured 1.7e-4 here; a wrong unpacking measured 0.07).
    inputs = example_inputs(p)
    with torch.inference_mode():
        want = ActingGraph(p)(*inputs)
        got = ActingGraph(merge_lora(dequantize_nf4(p))).eval()(*inputs)
    assert (want - got).abs().max() < 1e-3


def test_frozen_trains_only_the_rest(tokenizer, models):
    p = policy(tokenizer, models, "resnet", text="bert", tuning="frozen")  # BatchNorm statistics must stay too
    before = snapshot(p)
    train(p)
    diff = changed(before, snapshot(p))
    assert not {k for k in diff if k.startswith(("vision.model.", "text.model."))}
    assert {k for k in diff if k.startswith("vision.proj.")} and {k for k in diff if k.startswith("trunk.")}


@pytest.mark.parametrize("vision", ["dinov2", "resnet"])
def test_lora_trains_only_adapters_and_the_rest(tokenizer, models, vision):
    p = policy(tokenizer, models, vision, text="bert", tuning="lora")
    before = snapshot(p)
    train(p)
    diff = changed(before, snapshot(p))
    backbone = {k for k in diff if k.startswith(("vision.model.", "text.model."))}
    assert backbone and all("lora_" in k for k in backbone)
    lora_b = {k for k in before if "lora_B" in k}
    assert lora_b <= diff, "every adapter learned"
    assert {k for k in diff if k.startswith("trunk.")}


# The default VLA of before this feature (computed with the code of the previous commit): its state-dict keys,
# its initial weights and its actions on a fixed seed.
DEFAULT = {
    "l1": ("4721a715f8d5bf20", "4caa9a3bcce2dd9b", 58, [0.21712571, 0.15538883, -0.13469319, -0.10065848], -0.849028),
    "flow": (
        "32a6d381b7f29978",
        "13e6cb71bf3a68dd",
        62,
        [-1.26143289, -1.08872962, -0.23316276, -0.31763563],
        3.887757,
    ),
}


@pytest.mark.parametrize("head", ["l1", "flow"])
def test_default_vla_is_unchanged(tmp_path, head):
    torch.manual_seed(0)
    p = VLAPolicy(VLAConfig(**TINY, head=head)).eval()
    state = p.state_dict()
    keys = hashlib.sha256("\n".join(sorted(state)).encode()).hexdigest()[:16]
    weights = hashlib.sha256(b"".join(state[k].numpy().tobytes() for k in sorted(state))).hexdigest()[:16]
    pred = p.predict_action_chunk(make_batch(), torch.Generator().manual_seed(0))
    want_keys, want_weights, n, first, total = DEFAULT[head]
    assert (keys, weights, len(state)) == (want_keys, want_weights, n)
    np.testing.assert_allclose(pred.flatten()[:4].numpy(), first, atol=1e-5)
    assert float(pred.sum()) == pytest.approx(total, abs=1e-4)
    # A checkpoint written before the option existed (no "backbone" in its config) loads and acts identically.
    p.save_pretrained(tmp_path / "old")
    meta = json.loads((tmp_path / "old" / "config.json").read_text())
    del meta["config"]["backbone"]
    (tmp_path / "old" / "config.json").write_text(json.dumps(meta))
    q = load_policy(tmp_path / "old")
    again = q.predict_action_chunk(make_batch(), torch.Generator().manual_seed(0))
    assert torch.equal(pred, again)


def test_onnx_export_merges_lora(tmp_path, tokenizer, models):
    # bfloat16 LoRA: the export casts the backbone to float32 and merges the adapters (one export: ~16 s); the
    # adapters move these actions by 0.02, so a merge that lost them would fail the 2e-3 tolerance
    dtype, tol = "bfloat16", 2e-3
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    import onnx

    from vlagym.policies.onnx import OnnxPolicy, export_onnx

    p = policy(tokenizer, models, "siglip", tuning="lora", dtype=dtype)  # the graph computes in float32
    train(p)
    assert any(torch.count_nonzero(x) for n, x in p.named_parameters() if "lora_B" in n)
    p.save_pretrained(tmp_path / "ckpt")
    torch.set_num_threads(1)
    report = export_onnx(tmp_path / "ckpt", tmp_path / "policy.onnx")
    assert report.max_abs_diff is not None and report.max_abs_diff < tol  # against the unmerged torch policy
    names = [t.name for t in onnx.load(str(tmp_path / "policy.onnx")).graph.initializer]
    assert not [n for n in names if "lora" in n], "the adapters are merged into the weights"
    batch = {k: v for k, v in make_batch(b=3, size=TINY["image_size"], seed=9).items() if k != "action"}
    np.testing.assert_allclose(
        OnnxPolicy(tmp_path / "policy.onnx").predict_action_chunk(batch),
        p.predict_action_chunk(batch).numpy(),
        atol=tol,
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(tuning="partial"), "tuning must be one of"),
        (dict(lora_r=0), "lora_r must be an integer >= 1"),
        (dict(lora_dropout=1.0), "lora_dropout must be in [0, 1)"),
        (dict(dtype="float16"), "dtype must be one of"),
        (dict(quantization="int8"), "quantization must be one of"),
        (dict(quantization="nf4", tuning="full"), "use tuning 'lora' (QLoRA) or 'frozen'"),
        (dict(lora_target_modules="q_proj"), "must be a list of module names"),
        (dict(image_mean=[0.5, 0.5]), "image_mean must be 3 finite numbers"),
        (dict(vision_config={"model_type": "siglip_vision_model"}), "vision_config is set but vision_model is None"),
        (dict(vision_model=""), "vision_model must be a model id or folder"),
    ],
)
def test_bad_configs_raise(kwargs, message):
    with pytest.raises(ValueError, match=None) as err:
        BackboneConfig(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_bad_models_raise(tmp_path, tokenizer, models):
    with pytest.raises(ValueError, match="is not a transformers model"):
        BackboneConfig(vision_model=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"lora_target_modules \['nope'\] do not fit"):
        policy(tokenizer, models, "siglip", tuning="lora", lora_target_modules=["nope"])
    with pytest.raises(ValueError, match="encoder_size=32 sizes the VLA's own CNNs; .* backbone.image_size"):
        VLAConfig(encoder_size=32, backbone=BackboneConfig(vision_model=models["siglip"]))


@pytest.mark.parametrize("package, tuning", [("transformers", "frozen"), ("peft", "lora")])
def test_missing_package_is_a_clear_error(monkeypatch, models, package, tuning):
    monkeypatch.setitem(sys.modules, package, None)  # import raises ImportError
    with pytest.raises(ValueError, match=r"needs the '\w+' package: pip install 'vlagym\[hf\]'"):
        BackboneConfig(vision_model=models["siglip"], tuning=tuning)


def test_missing_bitsandbytes_is_a_clear_error(monkeypatch, models):
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)
    with pytest.raises(ValueError, match=r"quantization='nf4' needs the 'bitsandbytes' package: .*vlagym\[qlora\]"):
        BackboneConfig(vision_model=models["siglip"], tuning="lora", quantization="nf4")


def test_cli_has_the_options_and_imports_neither_package():
    code = (
        "import contextlib, io, sys, vlagym, vlagym.policies.vla\n"
        "from vlagym.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "    main(['train-bc', '--help'])\n"
        "print('--vision-model' in out.getvalue(), '--lora-target-modules' in out.getvalue(),"
        " 'transformers' in sys.modules, 'peft' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.split() == ["True", "True", "False", "False"]
