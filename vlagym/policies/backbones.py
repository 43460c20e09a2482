"""Pretrained Hugging Face `transformers` encoders inside the VLA (`BackboneConfig`; docs/backbones.md).

`PretrainedVision` replaces the per-camera CNNs: one backbone shared by every camera (the cameras go through it
as one batch), its pooled output (``pooler_output``, else the mean of its last hidden state) projected per camera
to the VLA's width. FiLM conditioning on the instruction, when the config asks for it, modulates that projected
feature (zero-initialised, so it starts as the identity): the backbone itself stays as it was pretrained.

`PretrainedText` replaces the instruction transformer. The VLA's word tokenizer stays the policy's input (the ONNX
graph and vector envs carry its ids); a buffer maps each of its words to up to `text_subwords` ids of the text
model's own tokenizer, so the model reads its own subwords and the checkpoint needs no tokenizer files.

Both are built in one of two ways: from the pretrained weights (`pretrained=True`, a new policy), or from the
config saved in the checkpoint alone (`pretrained=False`, a checkpoint being loaded: the weights, the subword
table included, then come from its model.safetensors; the Hub is never called). LoRA adapters (peft) are injected
into the backbone module itself, so the state dict keeps the backbone's own key names with the adapters' beside
them; `merge_lora` folds them in for export.
"""

from __future__ import annotations

import copy
import inspect
import logging
from typing import Any

import torch
from torch import Tensor, nn

from vlagym.policies.config import QLORA_HINT, BackboneConfig, _require_hf
from vlagym.wrappers.language import PAD_ID, UNK_ID, Tokenizer

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _hf_config(transformers: Any, saved: dict[str, Any]) -> Any:
    """The transformers config object of a saved config dict (offline)."""
    model_type = saved["model_type"]
    if model_type not in transformers.CONFIG_MAPPING:
        raise ValueError(f"this transformers ({transformers.__version__}) does not know model_type {model_type!r}")
    return transformers.CONFIG_MAPPING[model_type].from_dict(dict(saved))


def load_backbone(cfg: BackboneConfig, kind: str, pretrained: bool) -> nn.Module:
    """The `kind` ("vision" or "text") model of `cfg`, with its pretrained weights or (offline) its architecture
    only, in the config's dtype, with LoRA adapters when `tuning` is "lora" and frozen when "frozen"."""
    transformers = _require_hf("transformers", f"the pretrained {kind} backbone")
    name, config = getattr(cfg, f"{kind}_model"), _hf_config(transformers, getattr(cfg, f"{kind}_config"))
    dtype = DTYPES[cfg.dtype]
    if pretrained:
        # `config=` picks the tower's class (e.g. SiglipVisionModel out of a two-tower SigLIP checkpoint).
        model = transformers.AutoModel.from_pretrained(name, config=config)
    else:
        model = transformers.AutoModel.from_config(config)
    model = model.to(dtype)  # not a loading argument: its name changed across transformers versions
    if cfg.quantization is not None:
        model = quantize_nf4(model, dtype)
    if cfg.tuning == "lora":
        model = _inject_lora(cfg, model, name)
    elif cfg.tuning == "frozen":
        model.requires_grad_(False)
    return model


def _inject_lora(cfg: BackboneConfig, model: nn.Module, name: str) -> nn.Module:
    peft = _require_hf("peft", "tuning='lora'")
    lora = peft.LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_target_modules),
    )
    try:
        # Into the module itself (no PeftModel wrapper): only the adapters stay trainable.
        model = peft.inject_adapter_in_model(lora, model)
    except ValueError as e:
        first = str(e).strip().splitlines()[0]
        raise ValueError(f"lora_target_modules {list(cfg.lora_target_modules)} do not fit {name!r}: {first}") from e
    # The adapters train in float32 whatever the base's dtype (peft casts their input and output).
    for n, x in model.named_parameters():
        if "lora_" in n:
            x.data = x.data.float()
    return model


def quantize_nf4(model: nn.Module, compute_dtype: torch.dtype) -> nn.Module:
    """`model` with every `nn.Linear` replaced by a bitsandbytes 4-bit NormalFloat layer (QLoRA's storage: the
    weights frozen, packed two per byte with a scale per block of 64), computing in `compute_dtype`; quantized
    here, on the CPU (a later `.to("cuda")` moves the packed weights)."""
    bnb = _require_hf("bitsandbytes", "quantization='nf4'", QLORA_HINT)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not nn.Linear:
                continue
            q = bnb.nn.Linear4bit(
                child.in_features, child.out_features, bias=child.bias is not None, compute_dtype=compute_dtype,
                quant_type="nf4", device="cpu",
            )  # fmt: skip
            q.weight = bnb.nn.Params4bit(
                child.weight.data.float().cpu(), requires_grad=False, quant_type="nf4", module=q
            )
            if child.bias is not None:
                q.bias = nn.Parameter(child.bias.data.cpu().clone(), requires_grad=False)
            q._register_load_state_dict_pre_hook(_load_nf4, with_module=True)
            setattr(parent, name, q.to("cpu"))  # quantizes
    return model


def _load_nf4(module: nn.Module, state_dict: dict[str, Tensor], prefix: str, *args: Any) -> None:
    """Load a packed 4-bit weight with its quantization state (saved beside it as ``weight.absmax``, ...)."""
    import bitsandbytes as bnb

    key = prefix + "weight"
    stats = {k[len(key) + 1 :]: state_dict.pop(k) for k in list(state_dict) if k.startswith(key + ".")}
    if stats:
        module.weight = bnb.nn.Params4bit.from_prequantized(
            data=state_dict[key], quantized_stats=stats, requires_grad=False, device=module.weight.device, module=module
        )


def _is_nf4(module: nn.Module) -> bool:
    return type(module).__name__ == "Linear4bit" and type(module).__module__.startswith("bitsandbytes")


def dequantize_nf4(module: nn.Module) -> nn.Module:
    """A copy of `module` whose 4-bit layers are plain float32 `nn.Linear`s of the same values (for export);
    `module` itself when it has none."""
    if not any(_is_nf4(m) for m in module.modules()):
        return module
    import bitsandbytes as bnb

    module = copy.deepcopy(module)
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if _is_nf4(child):
                data, state = child.weight.data, child.weight.quant_state
                if getattr(state, "packing_format_for_cpu", False):
                    # bitsandbytes >= 0.49 repacks the weights for its CPU kernels at the first inference on an
                    # AVX512-BF16 CPU; dequantize_4bit reads only the standard layout (its own save unpacks too).
                    data, state = bnb.functional._convert_weight_packed_for_cpu_inverse(data, state)
                weight = bnb.functional.dequantize_4bit(data, state).float()
                plain = nn.Linear(child.in_features, child.out_features, bias=child.bias is not None)
                plain.weight = nn.Parameter(weight.reshape(child.out_features, child.in_features), requires_grad=False)
                if child.bias is not None:
                    plain.bias = nn.Parameter(child.bias.data.float(), requires_grad=False)
                setattr(parent, name, plain)
    return module


def merge_lora(module: nn.Module) -> nn.Module:
    """A copy of `module` with every LoRA adapter's update added to its base layer's weight and the adapter
    modules removed (the plain architecture, for export); `module` itself when it has none. The bases must be
    plain layers (`dequantize_nf4` first)."""
    if not any(hasattr(m, "lora_A") for m in module.modules()):
        return module
    module = copy.deepcopy(module)
    for parent in list(module.modules()):
        for child_name, child in list(parent.named_children()):
            if hasattr(child, "lora_A") and hasattr(child, "get_base_layer"):
                base = child.get_base_layer()
                with torch.no_grad():
                    for adapter in child.active_adapters:
                        base.weight += child.get_delta_weight(adapter).to(base.weight.dtype)
                setattr(parent, child_name, base)
    return module


def backbones_to_float32(module: nn.Module) -> nn.Module:
    """A copy of `module` whose pretrained backbones compute in float32 (a portable graph: onnxruntime's CPU
    kernels have no bfloat16 convolutions or matmuls); `module` itself when they already do."""
    if all(m.dtype == "float32" for m in module.modules() if isinstance(m, _Tuned)):
        return module
    module = copy.deepcopy(module)
    for m in module.modules():
        if isinstance(m, _Tuned):
            m.model.float()
            m.dtype = "float32"
    return module


class _Tuned(nn.Module):
    """Keeps a frozen backbone in eval mode (no dropout, BatchNorm statistics as pretrained) and, under LoRA,
    its BatchNorm layers: only what trains may change."""

    tuning: str
    model: nn.Module

    def train(self, mode: bool = True) -> _Tuned:
        super().train(mode)
        if self.tuning == "frozen":
            self.model.eval()
        elif self.tuning == "lora":
            for m in self.model.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()
        return self

    def _run(self, **inputs: Tensor) -> Any:
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.tuning != "frozen"):
            return self.model(**inputs)


class PretrainedVision(_Tuned):
    """A pretrained vision model shared by the cameras: [0, 1] images in, one (B, out_dim) feature per camera."""

    def __init__(
        self,
        cfg: BackboneConfig,
        cameras: tuple[str, ...],
        default_size: int,
        out_dim: int,
        film: bool,
        pretrained: bool = True,
    ):
        super().__init__()
        self.tuning, self.dtype, self.cameras = cfg.tuning, cfg.dtype, tuple(cameras)
        self.model = load_backbone(cfg, "vision", pretrained)
        self.size = cfg.image_size or cfg.vision_config.get("image_size") or default_size
        # Config values, not weights: non-persistent, so the state dict holds the models' weights only.
        self.register_buffer("mean", torch.tensor(cfg.image_mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(cfg.image_std).view(1, 3, 1, 1), persistent=False)
        width = self._width()
        self.proj = nn.ModuleDict({cam: nn.Linear(width, out_dim) for cam in self.cameras})
        self.films = nn.ModuleDict({cam: nn.Linear(out_dim, 2 * out_dim) for cam in self.cameras}) if film else None
        for f in self.films.values() if self.films is not None else ():
            nn.init.zeros_(f.weight)  # FiLM starts as the identity, as in the CNNs
            nn.init.zeros_(f.bias)

    @torch.no_grad()
    def _width(self) -> int:
        """Width of the pooled feature, found by one forward pass (families name it differently)."""
        was = self.model.training
        self.model.eval()
        x = torch.zeros(1, 3, self.size, self.size, dtype=DTYPES[self.dtype])
        width = self._pool(self.model(pixel_values=x)).shape[-1]
        self.model.train(was)
        return int(width)

    @staticmethod
    def _pool(out: Any) -> Tensor:
        pooled = getattr(out, "pooler_output", None)
        if pooled is None:
            hidden = out.last_hidden_state  # (B, N, D) tokens or (B, C, H, W) maps
            pooled = hidden.mean(dim=1) if hidden.ndim == 3 else hidden.mean(dim=(-2, -1))
        return pooled.flatten(1)

    def forward(self, images: list[Tensor], cond: Tensor) -> list[Tensor]:
        x = torch.cat(images)
        if x.shape[-2:] != (self.size, self.size):
            x = nn.functional.interpolate(x, size=(self.size, self.size), mode="bilinear", antialias=True)
        x = ((x - self.mean) / self.std).to(DTYPES[self.dtype])
        # (cameras * B, D) -> one (B, D) per camera; `unflatten`, not `chunk`: chunk's size arithmetic would pin
        # the batch size of an exported graph.
        pooled = self._pool(self._run(pixel_values=x)).float().unflatten(0, (len(self.cameras), -1)).unbind(0)
        parts = []
        for cam, feat in zip(self.cameras, pooled, strict=True):
            y = self.proj[cam](feat)
            if self.films is not None:
                gamma, beta = self.films[cam](cond).chunk(2, dim=-1)
                y = y * (1 + gamma) + beta
            parts.append(y)
        return parts


class PretrainedText(_Tuned):
    """A pretrained text encoder over the instruction: the VLA's word ids (B, L) in, (B, out_dim) out (the mean
    of its last hidden state over the instruction's subwords, projected and normalised)."""

    def __init__(self, cfg: BackboneConfig, tokenizer: Tokenizer, out_dim: int, pretrained: bool = True):
        super().__init__()
        self.tuning, self.dtype = cfg.tuning, cfg.dtype
        self.model = load_backbone(cfg, "text", pretrained)
        if "position_ids" not in inspect.signature(self.model.forward).parameters:
            raise ValueError(f"text_model {cfg.text_model!r} takes no position_ids; use a BERT-like encoder")
        # Row w: the text model's ids of the VLA's word w (-1: none); `prefix`: its [CLS]/<s> id (-1: none).
        self.register_buffer("subwords", torch.full((tokenizer.vocab_size, cfg.text_subwords), -1))
        self.register_buffer("prefix", torch.full((1,), -1))
        if pretrained:  # loading a checkpoint: the table comes with its state dict
            self._fill_table(cfg, tokenizer)
        self.proj = nn.Linear(self.model.config.hidden_size, out_dim)
        self.norm = nn.LayerNorm(out_dim)

    def _fill_table(self, cfg: BackboneConfig, tokenizer: Tokenizer) -> None:
        transformers = _require_hf("transformers", "the pretrained text backbone")
        hf = transformers.AutoTokenizer.from_pretrained(cfg.text_model)
        cut = []
        for i, word in enumerate(tokenizer.vocab):
            if i == PAD_ID:
                continue
            ids = [hf.unk_token_id] if i == UNK_ID else hf.convert_tokens_to_ids(hf.tokenize(word))
            ids = [t for t in ids if t is not None]
            if len(ids) > cfg.text_subwords:
                cut.append(word)
            ids = ids[: cfg.text_subwords]
            self.subwords[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        prefix = hf.cls_token_id if hf.cls_token_id is not None else hf.bos_token_id
        self.prefix.fill_(-1 if prefix is None else prefix)
        if cut:
            logger.warning("%d words have more than %d subwords, cut: %s", len(cut), cfg.text_subwords, cut[:10])

    def forward(self, ids: Tensor) -> Tensor:
        b = ids.shape[0]
        sub = torch.cat([self.prefix.expand(b, 1), self.subwords[ids].flatten(1)], dim=1)
        valid = sub >= 0
        valid[:, 0] = True  # never an all-masked row (its attention would be NaN)
        # The gaps left by padding and short words are masked out, and the positions count valid slots only, so
        # the model reads the instruction as one contiguous sequence.
        positions = (valid.long().cumsum(1) - 1).clamp_min(0)
        out = self._run(input_ids=sub.clamp_min(0), attention_mask=valid.long(), position_ids=positions)
        keep = valid.unsqueeze(-1).float()
        pooled = (out.last_hidden_state.float() * keep).sum(1) / keep.sum(1)
        return self.norm(self.proj(pooled))
