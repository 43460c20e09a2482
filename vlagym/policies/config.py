"""The VLA policy's configuration: a dataclass (with one nested `BackboneConfig`), validated on construction, saved
as JSON with the weights."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlagym.config import Config, nested_config
from vlagym.envs.constants import CAMERAS
from vlagym.wrappers.normalize import MODES as NORMALIZATIONS

logger = logging.getLogger(__name__)

HEADS = ("l1", "flow")
BACKBONE_TUNINGS = ("frozen", "full", "lora")
BACKBONE_DTYPES = ("float32", "bfloat16")
BACKBONE_QUANTIZATIONS = ("nf4",)
HF_HINT = "pip install 'vlagym[hf]'"
QLORA_HINT = "pip install 'vlagym[qlora]'"
FLOW_TIME_SAMPLINGS = ("uniform", "beta")
TEXT_POSITIONS = ("learned", "rotary")


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


# Per-channel image normalisation of backbone families without a preprocessor_config.json beside their weights.
_HALF = (0.5, 0.5, 0.5)
_IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
_FAMILY_NORMS = {"siglip": (_HALF, _HALF), "siglip_vision_model": (_HALF, _HALF)}


@dataclass
class BackboneConfig(Config):
    """Pretrained Hugging Face `transformers` encoders in place of the VLA's own CNNs and instruction transformer
    (docs/backbones.md; ``pip install 'vlagym[hf]'``). The default (no models) is the VLA of before, unchanged.

    When a model is named and its `vision_config`/`text_config` is None, construction reads the model's config
    (and image normalisation) once; those then travel in the checkpoint, so loading one never calls the Hub."""

    vision_model: str | None = None
    """a transformers vision model id or local folder (SigLIP, DINOv2, ResNet, CLIP, ...) shared by every camera,
    each camera with its own projection; None: the VLA's own per-camera CNNs"""
    text_model: str | None = None
    """a transformers text encoder id or local folder (BERT-like, with its tokenizer) that reads the instruction;
    None: the VLA's own instruction transformer"""
    tuning: str = "frozen"
    """how the pretrained models train: "frozen" (no gradients, kept in eval mode), "full" (fine-tuned) or "lora"
    (peft LoRA adapters only)"""
    lora_r: int = 16
    """rank of the LoRA adapters"""
    lora_alpha: float = 32.0
    """LoRA scale numerator: the adapter's update is scaled by lora_alpha / lora_r"""
    lora_dropout: float = 0.0
    """dropout on the LoRA adapters' input"""
    lora_target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    """names of the modules that get adapters, matched in each pretrained model (each must have one of them):
    q_proj v_proj (SigLIP, CLIP; DINOv2 in transformers 5.25), query value (BERT; DINOv2 in 4.x), convolution
    (ResNet)"""
    dtype: str = "float32"
    """dtype of the pretrained models' weights: "float32", or "bfloat16" (meant for CUDA; runs on the CPU too,
    slower); LoRA adapters stay float32"""
    quantization: str | None = None
    """"nf4": the pretrained models' linear layers stored in 4 bits (NormalFloat, QLoRA's storage), computing in
    `dtype`; with tuning "lora" (QLoRA) or "frozen"; needs bitsandbytes (pip install 'vlagym[qlora]'), on the
    CPU or CUDA. None: full precision"""
    image_size: int | None = None
    """side the images are resized to for the vision model (None: its config's image_size, else the VLA's)"""
    image_mean: tuple[float, ...] | None = None
    """per-channel mean the [0, 1] images are normalised with (None: the model's preprocessor_config.json, else
    its family's: 0.5 for SigLIP, ImageNet's for the others)"""
    image_std: tuple[float, ...] | None = None
    """per-channel standard deviation, as image_mean"""
    text_subwords: int = 4
    """subword tokens of the text model kept per instruction word (longer words are cut, with a warning)"""
    vision_config: dict[str, Any] | None = None
    """the vision model's transformers config as a dict (None: read from vision_model); saved in checkpoints"""
    text_config: dict[str, Any] | None = None
    """the text model's transformers config as a dict (None: read from text_model); saved in checkpoints"""

    def __post_init__(self) -> None:
        self._check_fields()
        if self._needs_resolving():
            self._resolve()

    def _check_quantization(self) -> None:
        if self.quantization is None:
            return
        _choice("quantization", self.quantization, BACKBONE_QUANTIZATIONS)
        if self.tuning == "full":
            raise ValueError("quantization 'nf4' stores frozen weights: use tuning 'lora' (QLoRA) or 'frozen'")

    def _check_fields(self) -> None:
        for name in ("vision_model", "text_model"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a model id or folder (or None), got {value!r}")
            if value is None and getattr(self, name.replace("_model", "_config")) is not None:
                raise ValueError(f"{name.replace('_model', '_config')} is set but {name} is None")
        _choice("tuning", self.tuning, BACKBONE_TUNINGS)
        _choice("dtype", self.dtype, BACKBONE_DTYPES)
        self._check_quantization()
        _positive_int("lora_r", self.lora_r)
        _positive_int("text_subwords", self.text_subwords)
        if self.image_size is not None:
            _positive_int("image_size", self.image_size)
        if not (_finite(self.lora_alpha) and self.lora_alpha > 0):
            raise ValueError(f"lora_alpha must be a number > 0, got {self.lora_alpha!r}")
        if not (_finite(self.lora_dropout) and 0 <= self.lora_dropout < 1):
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout!r}")
        if isinstance(self.lora_target_modules, str):
            raise ValueError(
                f"lora_target_modules must be a list of module names, got the string {self.lora_target_modules!r}"
            )
        self.lora_target_modules = tuple(self.lora_target_modules)
        if not self.lora_target_modules or not all(isinstance(m, str) and m for m in self.lora_target_modules):
            raise ValueError(f"lora_target_modules must name at least one module, got {list(self.lora_target_modules)}")
        for name in ("image_mean", "image_std"):
            value = getattr(self, name)
            if value is None:
                continue
            value = tuple(value)
            if len(value) != 3 or not all(_finite(v) for v in value) or (name == "image_std" and min(value) <= 0):
                raise ValueError(f"{name} must be 3 finite numbers (std > 0), got {list(value)}")
            setattr(self, name, tuple(float(v) for v in value))
        for name in ("vision_config", "text_config"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, dict) and isinstance(value.get("model_type"), str)):
                raise ValueError(f"{name} must be a transformers config dict with a 'model_type', got {value!r:.80}")

    def _needs_resolving(self) -> bool:
        return (self.vision_model is not None and self.vision_config is None) or (
            self.text_model is not None and self.text_config is None
        )

    def _resolve(self) -> None:
        """Read the models' configs (and the vision model's image normalisation) from their ids or folders."""
        transformers = _require_hf("transformers", "a pretrained backbone")
        if self.tuning == "lora":
            _require_hf("peft", "tuning='lora'")
        if self.quantization is not None:
            _require_hf("bitsandbytes", f"quantization={self.quantization!r}", QLORA_HINT)
        for kind in ("vision", "text"):
            name = getattr(self, f"{kind}_model")
            if name is None or getattr(self, f"{kind}_config") is not None:
                continue
            try:
                config = transformers.AutoConfig.from_pretrained(name)
            except (OSError, ValueError) as e:
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ValueError(f"{kind}_model {name!r} is not a transformers model: {first}") from e
            config = getattr(config, f"{kind}_config", None) or config  # a two-tower model (CLIP, SigLIP): one tower
            setattr(self, f"{kind}_config", json.loads(config.to_json_string(use_diff=False)))
        if self.vision_model is not None and (self.image_mean is None or self.image_std is None):
            mean, std = _image_norm(transformers, self.vision_model, self.vision_config["model_type"])
            self.image_mean = self.image_mean or mean
            self.image_std = self.image_std or std

    @property
    def enabled(self) -> bool:
        """Whether any pretrained model replaces one of the VLA's own encoders."""
        return self.vision_model is not None or self.text_model is not None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _require_hf(package: str, what: str, hint: str = HF_HINT) -> Any:
    """The imported `package` (transformers, peft, bitsandbytes), or a one-line error naming the extra to install."""
    try:
        return importlib.import_module(package)
    except ImportError as e:
        raise ValueError(f"{what} needs the {package!r} package: {hint}") from e


def _image_norm(transformers: Any, name: str, model_type: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) of the model's image processor config where it has one, else its family's."""
    path = transformers.utils.cached_file(name, "preprocessor_config.json", _raise_exceptions_for_missing_entries=False)
    if path is not None:
        processor = json.loads(Path(path).read_text())
        if "image_mean" in processor and "image_std" in processor:
            return tuple(map(float, processor["image_mean"])), tuple(map(float, processor["image_std"]))
    mean, std = _FAMILY_NORMS.get(model_type, _IMAGENET)
    logger.info("%s has no image processor config: normalising with %s mean %s std %s", name, model_type, mean, std)
    return mean, std


#: `VLAConfig` fields that say how a policy acts, not what it computes: a fine-tuned checkpoint may set them apart
#: from the one it starts from (`BCConfig.init`)
ACTING_FIELDS = ("n_action_steps", "temporal_ensemble", "ensemble_coeff", "binary_gripper", "flow_steps")


@dataclass
class VLAConfig(Config):
    """Architecture and acting settings of `VLAPolicy`. Small by default: trains on a laptop CPU in minutes."""

    cameras: tuple[str, ...] = ("front", "wrist")
    """Cameras the policy reads, each with its own CNN (names of `vlagym.envs.base.CAMERAS`)."""
    image_size: int = 64
    """Square side of the camera images the policy reads (what the env renders for it); the model resizes images
    of another side to it, or to `encoder_size` when that is set."""
    encoder_size: int | None = None
    """Square side the images are resized to (antialiased) before the VLA's own CNNs; None: `image_size`. A
    smaller side cuts the encoders' cost while the env still renders `image_size` (docs/speed.md)."""
    proprio_dim: int = 23
    """Length of the proprioception vector."""
    action_dim: int = 7
    """Length of one action (ee_delta_pose: 3 translation + 3 rotation + gripper)."""
    chunk_size: int = 10
    """K: actions predicted per forward pass."""
    n_action_steps: int | None = None
    """Actions of a chunk that `select_action` executes before predicting again (None: chunk_size; 1 with
    temporal ensembling)."""
    temporal_ensemble: bool = False
    """ACT-style temporal ensembling: predict every step and average the overlapping chunks' actions."""
    ensemble_coeff: float = 0.01
    """Weight exp(-coeff * i) of the i-th oldest prediction of a step in the temporal ensemble (ACT's m)."""
    binary_gripper: bool = True
    """Snap the last action entry (the gripper command: the scripted demos only ever hold -1 or +1) to its sign
    in `select_action`. A regressed or ensembled gripper value between the two is a half-closed, weak grip."""
    head: str = "l1"
    """"l1": regress the normalised chunk with an L1 loss; "flow": flow matching (generative)."""
    vision_channels: tuple[int, ...] = (16, 32, 64)
    """Output channels of the stride-2 conv blocks of each camera's CNN. (16, 32, 64) trains ~2x faster than
    (32, 64, 128) on a CPU and scored the same on the quickstart (docs/speed.md, "Training twice as fast")."""
    hidden_dim: int = 128
    """Width of the token embeddings, encoders' outputs and the trunk."""
    text_layers: int = 2
    """Transformer encoder layers over the instruction tokens."""
    text_heads: int = 4
    """Attention heads of the instruction encoder (must divide hidden_dim)."""
    text_position_std: float = 0.02
    """Initial scale of the instruction encoder's position embeddings; its word embeddings start at 1. At 0.02 the
    trained encoder hardly tells "the red block on the blue block" from "the blue block on the red block" (its
    outputs 0.2-1.2% apart); at 1.0, 46-57% (docs/multitask.md). 0.02 is the default the quickstart measured.
    Learned positions only (`text_positions`)."""
    text_positions: str = "learned"
    """How the instruction encoder knows word order: "learned" absolute position embeddings (scale
    `text_position_std`) or "rotary" positions inside its attention (RoPE), which see only how far apart two words
    are, so a wording that starts the same words elsewhere reads alike: StackBlocks' held-out paraphrases 32%
    against 10% with learned positions at std 1, the train wordings the same (docs/multitask.md). Needs
    `text_layers` >= 1."""
    max_tokens: int = 16
    """Instruction length in tokens (longer instructions are truncated)."""
    film: bool = True
    """FiLM-condition every conv block on the instruction embedding, so the instruction changes what is seen."""
    film_words: bool = False
    """FiLM-condition the image encoders on a bag of words (the mean of the instruction words' own embeddings, a
    table of their own) instead of the instruction encoder's output: additive over the words, so a colour and a
    kind learned on different objects modulate the image together (docs/generalization.md)."""
    film_text: bool = False
    """With `film_words`: FiLM reads the bag of words plus the instruction encoder's output. The bag has no word
    order, so it cannot tell "the red block on the blue one" from "the blue block on the red one"; the encoder can,
    with `text_position_std` 1 (StackBlocks alone: 4% -> 44%, docs/multitask.md)."""
    trunk_layers: int = 2
    """Hidden layers of the trunk MLP over the concatenated camera, instruction and proprio features."""
    flow_steps: int = 10
    """Euler steps of the flow head at inference."""
    flow_time_sampling: str = "uniform"
    """Training distribution of the flow time t: "uniform" U(0, 1) or "beta" (Beta(1.5, 1): more weight near the
    data end, where the velocity field is hardest)."""
    normalization: str = "mean_std"
    """How proprio and actions are normalised with the dataset statistics (see `vlagym.wrappers.normalize`)."""
    subtasks: tuple[str, ...] = ()
    """Sub-instructions the policy may act on instead of the instruction it is given: a head on the trunk
    features of (observation, instruction) picks one of them or the instruction itself, and the chunk is predicted
    with the pick (a closed-set version of pi0.5's subtask prediction). `vlagym train-bc` sets them from demo
    files split by `vlagym dataset split-subtasks`; empty: no head (docs/multitask.md)."""
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    """Pretrained Hugging Face encoders in place of the CNNs and the instruction transformer (a `BackboneConfig`,
    or its dict; docs/backbones.md). The default uses none."""

    def __post_init__(self) -> None:
        self.backbone = nested_config("backbone", self.backbone, BackboneConfig)
        self._check_cameras()
        self._check_subtasks()
        self._check_sizes()
        self._check_choices()
        if self.encoder_size is not None and self.backbone.vision_model is not None:
            raise ValueError(
                f"encoder_size={self.encoder_size!r} sizes the VLA's own CNNs; a pretrained vision_model is sized by "
                "backbone.image_size"
            )

    def _check_cameras(self) -> None:
        if isinstance(self.cameras, str):
            raise ValueError(f"cameras must be a sequence of camera names, got the string {self.cameras!r}")
        self.cameras = tuple(self.cameras)
        if not self.cameras:
            raise ValueError(f"cameras must name at least one camera; valid choices: {list(CAMERAS)}")
        for cam in self.cameras:
            _choice("camera", cam, CAMERAS)
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"cameras has duplicates: {list(self.cameras)}")

    def _check_subtasks(self) -> None:
        if isinstance(self.subtasks, str):
            raise ValueError(f"subtasks must be a sequence of instructions, got the string {self.subtasks!r}")
        self.subtasks = tuple(self.subtasks)
        if not all(isinstance(s, str) and s.strip() for s in self.subtasks) or len(set(self.subtasks)) != len(
            self.subtasks
        ):
            raise ValueError(f"subtasks must be distinct non-empty instructions, got {list(self.subtasks)}")

    def _check_sizes(self) -> None:
        self.vision_channels = tuple(self.vision_channels)
        if not self.vision_channels:
            raise ValueError(f"vision_channels must have at least one entry, got {self.vision_channels!r}")
        for c in self.vision_channels:
            _positive_int("each vision_channels entry", c)
        for name in ("image_size", "proprio_dim", "action_dim", "chunk_size", "hidden_dim", "text_heads"):
            _positive_int(name, getattr(self, name))
        for name in ("max_tokens", "flow_steps", "trunk_layers"):
            _positive_int(name, getattr(self, name))
        std = self.text_position_std
        if isinstance(std, bool) or not (isinstance(std, (int, float)) and 0 <= std < math.inf):
            raise ValueError(f"text_position_std must be a finite number >= 0, got {self.text_position_std!r}")
        if isinstance(self.text_layers, bool) or not isinstance(self.text_layers, int) or self.text_layers < 0:
            raise ValueError(f"text_layers must be an integer >= 0, got {self.text_layers!r}")
        if self.text_positions not in TEXT_POSITIONS:
            raise ValueError(f"text_positions must be one of {list(TEXT_POSITIONS)}, got {self.text_positions!r}")
        if self.text_positions == "rotary" and self.text_layers < 1:
            raise ValueError("text_positions='rotary' needs text_layers >= 1 (the positions act inside attention)")
        if self.text_positions == "rotary" and std != VLAConfig.text_position_std:
            raise ValueError(f"text_position_std={std!r} scales learned positions; rotary positions have none")
        if self.hidden_dim % self.text_heads:
            raise ValueError(f"text_heads={self.text_heads!r} must divide hidden_dim={self.hidden_dim!r}")
        if self.text_positions == "rotary" and (self.hidden_dim // self.text_heads) % 2:
            raise ValueError(
                f"text_positions='rotary' needs an even hidden_dim / text_heads, got {self.hidden_dim} / "
                f"{self.text_heads}"
            )
        if self.encoder_size is not None:
            _positive_int("encoder_size", self.encoder_size)
        side = self.encoder_size or self.image_size
        if 2 ** len(self.vision_channels) > side:
            name = "encoder_size" if self.encoder_size else "image_size"
            raise ValueError(f"{name}={side!r} is too small for {len(self.vision_channels)} stride-2 conv blocks")

    def _check_choices(self) -> None:
        _choice("head", self.head, HEADS)
        _choice("flow_time_sampling", self.flow_time_sampling, FLOW_TIME_SAMPLINGS)
        _choice("normalization", self.normalization, NORMALIZATIONS)
        for name in ("temporal_ensemble", "film", "film_words", "film_text", "binary_gripper"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.film_text and not self.film_words:
            raise ValueError("film_text adds the instruction encoder to film_words' bag of words: set film_words too")
        if not (isinstance(self.ensemble_coeff, (int, float)) and math.isfinite(self.ensemble_coeff)):
            raise ValueError(f"ensemble_coeff must be a finite number, got {self.ensemble_coeff!r}")
        if self.n_action_steps is None:
            self.n_action_steps = 1 if self.temporal_ensemble else self.chunk_size
        _positive_int("n_action_steps", self.n_action_steps)
        if self.n_action_steps > self.chunk_size:
            raise ValueError(
                f"n_action_steps={self.n_action_steps!r} must be <= chunk_size={self.chunk_size!r}: "
                "a chunk holds only chunk_size actions"
            )
        if self.temporal_ensemble and self.n_action_steps != 1:
            raise ValueError(
                f"temporal_ensemble predicts every step, so n_action_steps must be 1, got {self.n_action_steps!r}"
            )

    def executing(self, n_action_steps: int | None = None, temporal_ensemble: bool = False) -> VLAConfig:
        """This config acting with `n_action_steps` actions of each chunk (no ensemble), or with the temporal
        ensemble (one action a step); neither given: unchanged. ValueError where the chunk cannot be run so."""
        if temporal_ensemble:
            return dataclasses.replace(self, temporal_ensemble=True, n_action_steps=n_action_steps or 1)
        if n_action_steps is not None:
            return dataclasses.replace(self, temporal_ensemble=False, n_action_steps=n_action_steps)
        return self


EXPORT_FORMATS = ("onnx",)


@dataclass
class ExportConfig(Config):
    """Options of `vlagym export CHECKPOINT`: the policy's acting path in a format other runtimes load."""

    checkpoint: str
    """a vlagym policy checkpoint folder (e.g. runs/quickstart/bc/checkpoints/step_5000)"""
    format: str = "onnx"
    """"onnx": images, instruction tokens and proprio to the action chunk, normalisation included"""
    out: str | None = None
    """the file to write (None: CHECKPOINT/model.onnx)"""
    opset: int = 18
    """ONNX opset of the graph"""
    check: bool = True
    """run the written file in onnxruntime against torch on random inputs and report the largest difference"""

    def __post_init__(self) -> None:
        _choice("format", self.format, EXPORT_FORMATS)
        _positive_int("opset", self.opset)
        if self.out == "":
            raise ValueError("out must name the file to write, e.g. policy.onnx")
