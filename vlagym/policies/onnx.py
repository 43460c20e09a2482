"""The VLA's acting path as an ONNX graph, and acting through onnxruntime.

    export_onnx("runs/bc/checkpoints/step_5000", "policy.onnx")     # one self-contained file
    policy = OnnxPolicy("policy.onnx")                                # onnxruntime, no VLA weights in torch
    chunk = policy.predict_action_chunk(batch)                        # (B, K, A) float32, env units

The graph maps one observation batch to an action chunk, normalisation included:

    inputs   <camera>  uint8 (B, 3, S, S) per camera of the policy (e.g. "front", "wrist"), S = its image_size
             tokens    int64 (B, max_tokens), the instruction's ids (the checkpoint's word tokenizer, 0-padded)
             proprio   float32 (B, proprio_dim)
             noise     float32 (B, K, A), flow head only: the flow's starting point (standard normal)
    output   actions   float32 (B, K, A) in env units

The batch axis is dynamic. LoRA adapters of a pretrained backbone are merged into its weights in the graph. The
checkpoint's config.json (architecture, tokenizer vocabulary, normalisation statistics) is stored in the model's
metadata under ``vlagym.checkpoint``, so a deployer tokenizes and reads the action layout without vlagym's
checkpoint folder. Executing a chunk (queue, temporal ensemble, binary gripper) stays with the caller, as for
`VLAPolicy.predict_action_chunk`.

Exporting needs ``onnx`` and ``onnxscript`` (torch's exporter), acting needs ``onnxruntime``: ``pip install
"vlagym[onnx]"``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from vlagym.io import temp_path
from vlagym.policies.backbones import backbones_to_float32, dequantize_nf4, merge_lora
from vlagym.policies.checkpoint import read_checkpoint_config
from vlagym.policies.config import VLAConfig
from vlagym.policies.vla import IMAGE_KEY, PROPRIO_KEY, Generators, VLAPolicy, load_policy
from vlagym.wrappers.language import Tokenizer

logger = logging.getLogger(__name__)

METADATA_KEY = "vlagym.checkpoint"
DEFAULT_OPSET = 18


class ExportError(Exception):
    """A checkpoint that cannot be exported, or a file that is not a vlagym ONNX policy."""


def _missing(package: str, what: str) -> ExportError:
    return ExportError(f"{what} needs the {package!r} package: pip install 'vlagym[onnx]'")


class ActingGraph(nn.Module):
    """`VLAPolicy.predict_action_chunk` on tensors only (what the exporter traces): images, tokens, proprio
    (and the flow's noise) to the action chunk in env units, through `VLAPolicy.chunk_from_features`. With
    `subtasks`, each row's features are those of the sub-instruction its head picks (computed for every row, so
    the graph has no data-dependent branch)."""

    def __init__(self, policy: VLAPolicy):
        super().__init__()
        self.policy = policy.eval()

    def forward(self, *inputs: Tensor) -> Tensor:
        p, cfg = self.policy, self.policy.config
        n = len(cfg.cameras)
        batch: dict[str, Any] = {IMAGE_KEY + cam: x for cam, x in zip(cfg.cameras, inputs[:n], strict=True)}
        batch["instruction_tokens"], batch[PROPRIO_KEY] = inputs[n], inputs[n + 1]
        feats = p.features(batch)
        if p.subtask_head is not None:  # every row encoded with every sub-instruction; each keeps its pick's
            pick = p.subtask_head(feats).argmax(-1)
            for k, text in enumerate(cfg.subtasks, start=1):
                tokens = p.tokenize([text]).to(feats.device).expand(feats.shape[0], -1)
                feats = torch.where((pick == k)[:, None], p.features({**batch, "instruction_tokens": tokens}), feats)
        return p.chunk_from_features(feats, inputs[n + 2] if cfg.head == "flow" else None)


def input_names(config: VLAConfig) -> list[str]:
    """The graph's input names, in order."""
    return [*config.cameras, "tokens", "proprio"] + (["noise"] if config.head == "flow" else [])


def example_inputs(policy: VLAPolicy, batch_size: int = 2, seed: int = 0) -> tuple[Tensor, ...]:
    """Random inputs of the graph's shapes and dtypes (for tracing and checks)."""
    cfg, g = policy.config, torch.Generator().manual_seed(seed)
    s = cfg.image_size
    images = [torch.randint(0, 256, (batch_size, 3, s, s), dtype=torch.uint8, generator=g) for _ in cfg.cameras]
    words = [w for w in policy.tokenizer.vocab[2:8]] or ["pick"]
    tokens = policy.tokenize([" ".join(words[: 1 + i % len(words)]) for i in range(batch_size)])
    proprio = torch.randn(batch_size, cfg.proprio_dim, generator=g)
    noise = [torch.randn(batch_size, cfg.chunk_size, cfg.action_dim, generator=g)] if cfg.head == "flow" else []
    return (*images, tokens, proprio, *noise)


@dataclass(frozen=True)
class ExportReport:
    """What `export_onnx` wrote and, when checked, how far onnxruntime's chunks lie from torch's."""

    path: str
    bytes: int
    opset: int
    export_s: float
    max_abs_diff: float | None
    """max |onnxruntime - torch| over a chunk of every input row, in env units; None when not checked"""


def export_onnx(
    checkpoint: str | os.PathLike, out: str | os.PathLike, opset: int = DEFAULT_OPSET, check: bool = True
) -> ExportReport:
    """Write the checkpoint's acting path to `out` (atomically, one file, weights inside); with `check`, run it
    in onnxruntime against torch on random inputs and report the largest difference."""
    try:
        meta = read_checkpoint_config(checkpoint)
        policy = load_policy(checkpoint)
    except (OSError, ValueError, KeyError) as e:
        raise ExportError(f"cannot load the checkpoint {str(checkpoint)!r}: {e}") from e
    try:
        import onnx
    except ImportError as e:
        raise _missing("onnx", "ONNX export") from e
    # LoRA adapters merged into their base layers: the graph is the plain backbone's, at its speed; in float32,
    # which every runtime runs (a bfloat16 backbone's check then measures the dtype change too).
    graph = ActingGraph(merge_lora(backbones_to_float32(dequantize_nf4(policy)))).eval()
    inputs = example_inputs(policy)
    batch = torch.export.Dim("batch", min=1, max=4096)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(out)
    start = time.perf_counter()
    try:
        try:
            program = torch.onnx.export(
                graph,
                inputs,
                dynamo=True,
                verbose=False,  # the exporter's progress lines would go to stdout: library code logs, never prints
                opset_version=opset,
                input_names=input_names(policy.config),
                output_names=["actions"],
                dynamic_shapes=(tuple({0: batch} for _ in inputs),),  # forward's one *inputs argument
            )
        except ImportError as e:
            raise _missing("onnxscript", "ONNX export") from e
        except Exception as e:  # torch.export's and the ONNX translation's own error types
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ExportError(f"torch could not export {str(checkpoint)!r} to ONNX: {first}") from e
        model = program.model_proto
        entry = model.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, json.dumps(meta)
        onnx.save_model(model, str(tmp))  # weights inside: one file to ship (< 2 GB for these policies)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    export_s = time.perf_counter() - start
    diff = None
    if check:
        with torch.inference_mode():
            expected = ActingGraph(policy)(*inputs).numpy()  # unmerged: the check covers the merge too
        diff = float(np.abs(OnnxPolicy(out).run(*[x.numpy() for x in inputs]) - expected).max())
    report = ExportReport(str(out), out.stat().st_size, opset, export_s, diff)
    logger.info("exported %s to %s: %s", checkpoint, out, report)
    return report


class OnnxPolicy:
    """An exported VLA acting through onnxruntime: `predict_action_chunk` as `VLAPolicy`'s, on the same batches
    (``observation.images.<camera>``, ``observation.proprio``, ``instruction`` or ``instruction_tokens``)."""

    def __init__(self, path: str | os.PathLike, threads: int | None = None):
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise _missing("onnxruntime", "acting through ONNX") from e
        options = ort.SessionOptions()
        if threads is not None:
            options.intra_op_num_threads = options.inter_op_num_threads = threads
        try:
            self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own exception types for missing and corrupt files
            raise ExportError(f"cannot load {str(path)!r} as an ONNX model: {e}") from e
        raw = self.session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
        if raw is None:
            raise ExportError(f"{str(path)!r} is not a vlagym policy (no {METADATA_KEY!r} metadata)")
        self.meta: dict[str, Any] = json.loads(raw)
        self.config = VLAConfig.from_dict(dict(self.meta["config"]))
        self.tokenizer = Tokenizer.from_dict(dict(self.meta["tokenizer"]))
        self.input_names = input_names(self.config)

    def run(self, *inputs: np.ndarray) -> np.ndarray:
        """The graph on its inputs, in `input_names` order."""
        return self.session.run(None, dict(zip(self.input_names, inputs, strict=True)))[0]

    def predict_action_chunk(self, batch: Mapping[str, Any], generator: Generators = None) -> np.ndarray:
        """(B, K, A) actions in env units. The flow head's noise comes from `generator` as in `VLAPolicy` (one
        generator for the batch; the same seed gives the same chunk as the torch policy)."""
        cfg = self.config
        images = []
        for cam in cfg.cameras:
            x = np.asarray(batch[IMAGE_KEY + cam])
            if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (3, cfg.image_size, cfg.image_size):
                raise ValueError(
                    f"{IMAGE_KEY + cam!r} must be uint8 (B, 3, {cfg.image_size}, {cfg.image_size}), "
                    f"got {x.dtype} {x.shape}"
                )
            images.append(x)
        if "instruction_tokens" in batch:
            tokens = np.asarray(batch["instruction_tokens"], dtype=np.int64)
        else:
            text = batch["instruction"]
            texts = [text] if isinstance(text, str) else list(text)
            tokens = np.stack([self.tokenizer.encode(t, cfg.max_tokens) for t in texts]).astype(np.int64)
        proprio = np.asarray(batch[PROPRIO_KEY], dtype=np.float32)
        inputs = [*images, tokens, proprio]
        if cfg.head == "flow":
            if generator is not None and not isinstance(generator, torch.Generator):
                raise ValueError("OnnxPolicy takes one torch.Generator for the batch's noise")
            shape = (len(proprio), cfg.chunk_size, cfg.action_dim)
            inputs.append(torch.randn(shape, generator=generator).numpy())
        return self.run(*inputs)
