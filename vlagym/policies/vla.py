"""A small vision-language-action policy: per-camera CNNs (FiLM-conditioned on the instruction), an instruction
transformer, a proprio MLP, a trunk, and an action-chunk head (L1 regression or flow matching). Pretrained Hugging
Face encoders can replace the CNNs and the instruction transformer (`vlagym.policies.backbones`).

Batches use the keys of `vlagym.train.dataset.DemoDataset`: ``observation.images.<camera>`` uint8 ``(B, 3, H, W)``,
``observation.proprio`` ``(B, 23)``, ``instruction`` (list of str) or ``instruction_tokens`` ``(B, L)`` int64,
and for training ``action`` ``(B, K, A)`` in env units with ``action_is_pad`` ``(B, K)`` (or ``(B, K, A)``, per
entry). Proprio and actions are normalised inside the model with statistics held in buffers (`set_stats`), so a
checkpoint is self-contained.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vlagym.policies.acting import temporal_ensemble_step
from vlagym.policies.backbones import PretrainedText, PretrainedVision
from vlagym.policies.checkpoint import check_state_dict, read_checkpoint_config, read_weights, save_checkpoint
from vlagym.policies.config import VLAConfig
from vlagym.policies.subtasks import recode, training_features
from vlagym.policies.text import InstructionEncoder
from vlagym.wrappers.language import PAD_ID, Tokenizer
from vlagym.wrappers.normalize import NormStats

logger = logging.getLogger(__name__)

IMAGE_KEY = "observation.images."
PROPRIO_KEY = "observation.proprio"
#: The flow head's noise source: one generator for the whole batch, or one per row (None entries draw from torch's
#: global generator), e.g. one per sub-env seeded from its episode seed so an episode's noise is its own.
Generators = torch.Generator | Sequence[torch.Generator | None] | None


def _mlp(dims: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(nn.GELU())
    return nn.Sequential(*layers)


def _groups(channels: int) -> int:
    return math.gcd(channels, 8)


class FiLMConvEncoder(nn.Module):
    """Stride-2 conv blocks (conv, GroupNorm, optional FiLM, GELU), then spatial-softmax keypoints and a
    global average pool, projected.

    The keypoints (the expected image position of each channel's activation) keep *where* things are;
    an average pool alone throws position away, and a policy must know where the named object stands.
    """

    def __init__(self, channels: tuple[int, ...], cond_dim: int, out_dim: int, film: bool):
        super().__init__()
        self.convs, self.norms = nn.ModuleList(), nn.ModuleList()
        self.films = nn.ModuleList() if film else None
        c_in = 3
        for c in channels:
            self.convs.append(nn.Conv2d(c_in, c, kernel_size=3, stride=2, padding=1))
            self.norms.append(nn.GroupNorm(_groups(c), c))
            if self.films is not None:
                f = nn.Linear(cond_dim, 2 * c)
                # Zero init: FiLM starts as the identity, so early training is not disturbed by random modulation.
                nn.init.zeros_(f.weight)
                nn.init.zeros_(f.bias)
                self.films.append(f)
            c_in = c
        self.proj = nn.Linear(3 * c_in, out_dim)

    def forward(self, images: Tensor, cond: Tensor) -> Tensor:
        x = images
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms, strict=True)):
            x = norm(conv(x))
            if self.films is not None:
                gamma, beta = self.films[i](cond).chunk(2, dim=-1)
                x = x * (1 + gamma[:, :, None, None]) + beta[:, :, None, None]
            x = F.gelu(x)
        return self.proj(torch.cat([_spatial_softmax(x), x.mean(dim=(-2, -1))], dim=-1))


def _spatial_softmax(x: Tensor) -> Tensor:
    """(B, C, H, W) feature maps -> (B, 2C) expected (x, y) positions in [-1, 1] of each channel's softmax."""
    b, c, h, w = x.shape
    attention = torch.softmax(x.flatten(2), dim=-1).view(b, c, h, w)
    ys = torch.linspace(-1.0, 1.0, h, device=x.device, dtype=x.dtype)
    xs = torch.linspace(-1.0, 1.0, w, device=x.device, dtype=x.dtype)
    expected_x = (attention.sum(dim=2) * xs).sum(dim=-1)
    expected_y = (attention.sum(dim=3) * ys).sum(dim=-1)
    return torch.cat([expected_x, expected_y], dim=-1)


def _time_embedding(t: Tensor, dim: int) -> Tensor:
    """Sinusoidal features of t in [0, 1] (B,) -> (B, dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(1000.0) * torch.arange(half, device=t.device, dtype=t.dtype) / max(half - 1, 1))
    angles = 1000.0 * t[:, None] * freqs[None]
    emb = torch.cat([angles.sin(), angles.cos()], dim=-1)
    return F.pad(emb, (0, dim - emb.shape[-1]))


class VLAPolicy(nn.Module):
    """Vision-language-action policy with an action-chunk head; see the module docstring for batch keys.

    Args:
        config: architecture and acting settings.
        tokenizer: vocabulary of the instruction encoder (default `Tokenizer.from_tasks()`); saved with the policy.
        pretrained_backbones: load the pretrained weights of `config.backbone`'s models (False: build them from
            their saved configs only, for a checkpoint's weights to fill; never calls the Hub).
    """

    def __init__(
        self, config: VLAConfig | None = None, tokenizer: Tokenizer | None = None, pretrained_backbones: bool = True
    ):
        super().__init__()
        self.config = cfg = config if config is not None else VLAConfig()
        if not isinstance(cfg, VLAConfig):
            raise TypeError(f"config must be a VLAConfig, got {type(cfg).__name__}")
        self.tokenizer = tokenizer if tokenizer is not None else Tokenizer.from_tasks()
        h, chunk = cfg.hidden_dim, cfg.chunk_size * cfg.action_dim
        bb, pretrained = cfg.backbone, pretrained_backbones
        if bb.text_model is not None:
            self.text = PretrainedText(bb, self.tokenizer, h, pretrained)
        else:
            self.text = InstructionEncoder(
                self.tokenizer.vocab_size,
                cfg.max_tokens,
                h,
                cfg.text_layers,
                cfg.text_heads,
                cfg.text_position_std,
                cfg.text_positions,
            )
        if bb.vision_model is not None:  # one backbone for every camera (docs/backbones.md)
            self.vision = PretrainedVision(bb, cfg.cameras, cfg.image_size, h, cfg.film, pretrained)
        else:
            self.vision = nn.ModuleDict(
                {cam: FiLMConvEncoder(cfg.vision_channels, h, h, cfg.film) for cam in cfg.cameras}
            )
        if cfg.film_words:  # the words training saw (a word no demo says carries no meaning: left out)
            self.film_words = nn.Embedding(self.tokenizer.vocab_size, h, padding_idx=PAD_ID)
            self.register_buffer("film_seen", torch.zeros(self.tokenizer.vocab_size, dtype=torch.bool))
            self.film_norm = nn.LayerNorm(h)
        self.proprio = _mlp([cfg.proprio_dim, h, h])
        self.subtask_head = nn.Linear(h, 1 + len(cfg.subtasks)) if cfg.subtasks else None
        trunk_in = h * (len(cfg.cameras) + 2)
        self.trunk = nn.Sequential(_mlp([trunk_in] + [h] * cfg.trunk_layers), nn.GELU())
        if cfg.head == "l1":
            self.head = nn.Linear(h, chunk)
        else:  # flow: velocity of the noisy chunk given trunk features and flow time
            self.head = _mlp([h + h + chunk, 2 * h, 2 * h, chunk])
        # Identity normalisation until `set_stats`; saved in the state dict either way.
        self.register_buffer("action_offset", torch.zeros(cfg.action_dim))
        self.register_buffer("action_scale", torch.ones(cfg.action_dim))
        self.register_buffer("proprio_offset", torch.zeros(cfg.proprio_dim))
        self.register_buffer("proprio_scale", torch.ones(cfg.proprio_dim))
        self.norm_stats: NormStats | None = None
        # Acting state, one row per batch entry (per sub-env), so `reset(mask)` can restart single rows.
        self._chunk: Tensor | None = None  # (B, n_action_steps, A) the actions being executed
        self._step: Tensor | None = None  # (B,) index of each row's next action in `_chunk`
        self._ensemble: Tensor | None = None  # (B, K-1, A) running averages of the steps ahead
        self._ensemble_count: Tensor | None = None  # (B, K-1) predictions averaged per step ahead

    # ------------------------------------------------------------------ statistics
    def set_stats(self, stats: Mapping[str, Any] | NormStats) -> None:
        """Normalisation from dataset statistics (`load_or_compute_stats` output or a `NormStats`) into buffers.

        Uses the config's `normalization` mode; needs "action" (or the dataset's "actions") and "proprio".
        """
        norm = NormStats.from_dataset_stats(stats, mode=self.config.normalization)
        mode = self.config.normalization
        for key, dim in (("action", self.config.action_dim), ("proprio", self.config.proprio_dim)):
            shape = norm[key].shape
            if shape != (dim,):
                raise ValueError(f"statistics of {key!r} have shape {shape}, the policy expects ({dim},)")
            offset = norm.unnormalize(key, np.zeros(dim), mode)
            scale = norm.unnormalize(key, np.ones(dim), mode) - offset
            getattr(self, f"{key}_offset").copy_(torch.as_tensor(offset, dtype=torch.float32))
            getattr(self, f"{key}_scale").copy_(torch.as_tensor(scale, dtype=torch.float32))
        self.norm_stats = norm

    # ------------------------------------------------------------------ inputs
    @property
    def device(self) -> torch.device:
        return self.action_offset.device

    def tokenize(self, instructions: list[str] | tuple[str, ...]) -> Tensor:
        """(B, max_tokens) int64 ids of the instruction strings."""
        ids = np.stack([self.tokenizer.encode(text, self.config.max_tokens) for text in instructions])
        return torch.from_numpy(ids)

    def _images(self, batch: Mapping[str, Any], cam: str) -> Tensor:
        key = IMAGE_KEY + cam
        if key not in batch:
            raise KeyError(
                f"batch has no {key!r} (the policy reads cameras {list(self.config.cameras)}); "
                f"its keys: {sorted(batch)}"
            )
        x = torch.as_tensor(batch[key], device=self.device)
        x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
        if x.ndim != 4 or x.shape[1] != 3:
            raise ValueError(f"{key!r} must be (B, 3, H, W), got shape {tuple(x.shape)}")
        if isinstance(self.vision, PretrainedVision):
            return x  # [0, 1]: the backbone resizes and normalises as it was pretrained
        size = self.config.encoder_size or self.config.image_size
        if x.shape[-2:] != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        return x * 2.0 - 1.0

    def _tokens(self, batch: Mapping[str, Any]) -> Tensor:
        if "instruction_tokens" in batch:
            ids = torch.as_tensor(batch["instruction_tokens"], dtype=torch.long)
        elif "instruction" in batch:
            text = batch["instruction"]
            ids = self.tokenize([text] if isinstance(text, str) else list(text))
        else:
            raise KeyError(f"batch needs 'instruction' (str list) or 'instruction_tokens'; its keys: {sorted(batch)}")
        if ids.ndim != 2 or ids.shape[1] > self.config.max_tokens:
            raise ValueError(f"instruction tokens must be (B, L<={self.config.max_tokens}), got {tuple(ids.shape)}")
        return ids.to(self.device)

    def features(self, batch: Mapping[str, Any]) -> Tensor:
        """(B, hidden_dim) trunk features of the observation and instruction."""
        ids = self._tokens(batch)
        text = self.text(ids)
        cond = self._bag_of_words(ids) if self.config.film_words else text
        if self.config.film_text:
            cond = cond + text
        proprio = torch.as_tensor(batch[PROPRIO_KEY], device=self.device).float()
        proprio = (proprio - self.proprio_offset) / self.proprio_scale
        if isinstance(self.vision, PretrainedVision):
            parts = self.vision([self._images(batch, cam) for cam in self.config.cameras], cond)
        else:
            parts = [self.vision[cam](self._images(batch, cam), cond) for cam in self.config.cameras]
        return self.trunk(torch.cat([*parts, text, self.proprio(proprio)], dim=-1))

    def acting_features(self, batch: Mapping[str, Any]) -> Tensor:
        """Trunk features to act on: with `subtasks`, the rows whose subtask head picks a sub-instruction are
        encoded again with it."""
        feats = self.features(batch)
        if self.subtask_head is None:
            return feats
        return recode(self, batch, feats, self.subtask_head(feats).argmax(-1), self._observation_keys())

    def _observation_keys(self) -> list[str]:
        return [IMAGE_KEY + cam for cam in self.config.cameras] + [PROPRIO_KEY]

    def mark_words(self, instructions: Sequence[str]) -> None:
        """With `film_words`: count the words of `instructions` as seen by training (their vectors enter the bag).
        Training batches mark their own words; a trainer marks its whole dataset's up front, so every DDP rank
        (whose buffers rank 0 broadcasts) holds them all."""
        if self.config.film_words:
            self.film_seen[self.tokenize(list(instructions)).to(self.device).unique()] = True

    def _bag_of_words(self, ids: Tensor) -> Tensor:
        """(B, hidden_dim) normalised mean of the `film_words` embeddings of each row's words that training saw."""
        if self.training:
            self.film_seen[ids] = True
        keep = ((ids != PAD_ID) & self.film_seen[ids]).unsqueeze(-1).float()
        return self.film_norm((self.film_words(ids) * keep).sum(1) / keep.sum(1).clamp_min(1.0))

    # ------------------------------------------------------------------ heads
    def _velocity(self, feats: Tensor, x: Tensor, t: Tensor) -> Tensor:
        inp = torch.cat([feats, _time_embedding(t, self.config.hidden_dim), x.flatten(1)], dim=-1)
        return self.head(inp).view_as(x)

    def forward(self, batch: Mapping[str, Any]) -> tuple[Tensor, dict[str, float]]:
        """Training loss over the non-padded actions of the chunk, and metrics (floats)."""
        cfg = self.config
        if self.subtask_head is not None and "task_instruction" in batch:  # `vlagym.policies.subtasks`
            feats, subtask_loss, metrics = training_features(self, batch, self._observation_keys())
        else:  # a batch without task instructions (e.g. the policy's own rollouts) trains as the policy acts
            feats, subtask_loss, metrics = self.acting_features(batch), 0.0, {}
        target = torch.as_tensor(batch["action"], device=self.device).float()
        if target.shape[1:] != (cfg.chunk_size, cfg.action_dim):
            raise ValueError(f"action must be (B, {cfg.chunk_size}, {cfg.action_dim}), got {tuple(target.shape)}")
        target = (target - self.action_offset) / self.action_scale
        pad = batch.get("action_is_pad")  # (B, K), or (B, K, A) to leave out single entries
        pad = torch.zeros(target.shape[:2], dtype=torch.bool) if pad is None else torch.as_tensor(pad).bool()
        valid = (~(pad if pad.dim() == 3 else pad[..., None])).to(self.device).expand_as(target).float()
        denom = valid.sum().clamp_min(1.0)
        if cfg.head == "l1":
            pred = self.head(feats).view_as(target)
            loss = ((pred - target).abs() * valid).sum() / denom
            return loss + subtask_loss, {
                "loss": loss.item() + metrics.get("subtask_ce", 0.0),
                "l1": loss.item(),
                **metrics,
            }
        # Padded slots enter the flow head's input (the whole noisy chunk), so their values must not matter:
        # they become 0, the mean action in normalised units.
        target = torch.where(valid.bool(), target, torch.zeros_like(target))
        b = target.shape[0]
        if cfg.flow_time_sampling == "uniform":
            t = torch.rand(b, device=self.device)
        else:
            t = torch.distributions.Beta(1.5, 1.0).sample((b,)).to(self.device)
        noise = torch.randn_like(target)
        tt = t[:, None, None]
        x_t = tt * target + (1 - tt) * noise  # t = 0: noise, t = 1: data
        err = (self._velocity(feats, x_t, t) - (target - noise)) ** 2
        loss = (err * valid).sum() / denom
        return loss + subtask_loss, {
            "loss": loss.item() + metrics.get("subtask_ce", 0.0),
            "flow_mse": loss.item(),
            **metrics,
        }

    # ------------------------------------------------------------------ acting
    @torch.inference_mode()
    def predict_action_chunk(
        self,
        batch: Mapping[str, Any],
        generator: Generators = None,
        *,
        rows: Tensor | None = None,
        noise: Tensor | None = None,
    ) -> Tensor:
        """(B, K, A) actions in env units. The flow head draws its initial noise from `generator` (seed it for
        determinism; on CPU the draw is the same whatever device the model is on): one generator draws the whole
        batch's noise, a sequence of B generators draws each row's from its own (so a row's noise does not depend
        on which rows share the batch).

        `rows` (bool (B,), None: all) with per-row generators: only those rows draw noise, so a row's generator
        advances only when that row takes a new chunk; the other rows' chunks are meaningless (zero noise).
        `noise` (B, K, A) gives the flow's starting point instead (e.g. drawn by a remote client)."""
        cfg = self.config
        feats = self.acting_features(batch)
        if cfg.head == "flow":
            if noise is None:
                noise = self._initial_noise(feats.shape[0], generator, rows)
            noise = torch.as_tensor(noise, dtype=feats.dtype, device=self.device)
            if noise.shape != (feats.shape[0], cfg.chunk_size, cfg.action_dim):
                raise ValueError(
                    f"noise must be ({feats.shape[0]}, {cfg.chunk_size}, {cfg.action_dim}), got {tuple(noise.shape)}"
                )
        return self.chunk_from_features(feats, noise)

    def chunk_from_features(self, feats: Tensor, noise: Tensor | None = None) -> Tensor:
        """(B, K, A) actions in env units from trunk features; the flow head integrates from `noise` (B, K, A).
        Tensors only, so `vlagym.policies.onnx` exports it as it is."""
        cfg = self.config
        if cfg.head == "l1":
            pred = self.head(feats).view(-1, cfg.chunk_size, cfg.action_dim)
        else:
            pred, dt = noise, 1.0 / cfg.flow_steps
            for i in range(cfg.flow_steps):
                t = torch.full((pred.shape[0],), i * dt, device=self.device)
                pred = pred + dt * self._velocity(feats, pred, t)
        return pred * self.action_scale + self.action_offset

    def _initial_noise(self, b: int, generator: Generators, rows: Tensor | None) -> Tensor:
        """(B, K, A) standard normal noise on the model's device, drawn on each generator's own device."""
        shape = (b, self.config.chunk_size, self.config.action_dim)
        if generator is None or isinstance(generator, torch.Generator):
            gen_device = generator.device if generator is not None else self.device
            return torch.randn(shape, generator=generator, device=gen_device).to(self.device)
        generators = list(generator)
        if len(generators) != b:
            raise ValueError(f"got {len(generators)} generators for a batch of {b} rows: pass one per row")
        noise = torch.zeros(shape, device=self.device)
        for i in range(b) if rows is None else torch.nonzero(torch.as_tensor(rows).cpu()).flatten().tolist():
            g = generators[i]
            noise[i] = torch.randn(shape[1:], generator=g, device=g.device if g is not None else self.device)
        return noise

    @torch.inference_mode()  # the acting state is made of inference tensors: update it in the same mode
    def reset(self, mask: np.ndarray | Tensor | None = None) -> None:
        """Forget queued actions and the temporal ensemble: call at every episode start.

        `mask` (bool, one per batch row) restarts only those rows, e.g. the sub-envs of a vector env that
        begin a new episode; the other rows keep executing their chunks. None restarts every row.
        """
        rows = None if mask is None else torch.as_tensor(np.asarray(mask, dtype=bool))
        state = self._step if self._step is not None else self._ensemble_count
        if rows is None or state is None or rows.shape != state.shape[:1]:
            # Everything (or another batch size: the next call starts afresh anyway).
            self._chunk = self._step = self._ensemble = self._ensemble_count = None
            return
        if self._step is not None:
            self._step[rows] = self.config.n_action_steps  # exhausted: the next call predicts for these rows
        if self._ensemble_count is not None:
            self._ensemble_count[rows.to(self._ensemble_count.device)] = 0

    @torch.inference_mode()
    def select_action(self, batch: Mapping[str, Any], generator: Generators = None) -> Tensor:
        """(B, A) the action to execute now: the next of `n_action_steps` actions of the row's current chunk,
        with a new chunk predicted for the rows that ran out; with temporal ensembling, a weighted average of
        every chunk predicted for this step. With `binary_gripper` the gripper entry is then snapped to +-1.

        `generator` as in `predict_action_chunk`; per-row generators advance only for the rows that take a new
        chunk, so a row's noise depends on its own steps alone."""
        if self.config.temporal_ensemble:
            action = self._ensembled_action(self.predict_action_chunk(batch, generator))
        else:
            action = self._queued_action(batch, generator)
        if self.config.binary_gripper:
            action = action.clone()
            action[:, -1] = torch.where(action[:, -1] >= 0, 1.0, -1.0)
        return action

    def _queued_action(self, batch: Mapping[str, Any], generator: Generators) -> Tensor:
        n = self.config.n_action_steps
        b = self._batch_size(batch)
        if self._step is None or self._step.shape[0] != b:
            self._chunk, self._step = None, torch.full((b,), n, dtype=torch.long)
        refill = self._step >= n
        if bool(refill.any()):
            if generator is None or isinstance(generator, torch.Generator):
                chunk = self.predict_action_chunk(batch, generator)[:, :n]
            else:  # per-row generators: only the refilled rows may draw
                chunk = self.predict_action_chunk(batch, generator, rows=refill)[:, :n]
            if self._chunk is None or bool(refill.all()):
                self._chunk = chunk.clone()
            else:
                self._chunk[refill.to(chunk.device)] = chunk[refill.to(chunk.device)]
            self._step[refill] = 0
        action = self._chunk[torch.arange(b, device=self._chunk.device), self._step.to(self._chunk.device)]
        self._step += 1
        return action

    def _batch_size(self, batch: Mapping[str, Any]) -> int:
        if PROPRIO_KEY in batch:
            return int(torch.as_tensor(batch[PROPRIO_KEY]).reshape(-1, self.config.proprio_dim).shape[0])
        return int(torch.as_tensor(batch[IMAGE_KEY + self.config.cameras[0]]).shape[0])

    def _ensembled_action(self, chunk: Tensor) -> Tensor:
        """ACT's temporal ensemble of this step's chunks (`temporal_ensemble_step`); rows reset get count 0."""
        b, k = chunk.shape[:2]
        if self._ensemble is None or self._ensemble.shape[0] != b:
            self._ensemble = torch.zeros(b, k - 1, chunk.shape[2], device=chunk.device, dtype=chunk.dtype)
            self._ensemble_count = torch.zeros(b, k - 1, dtype=torch.long, device=chunk.device)
        action, self._ensemble, self._ensemble_count = temporal_ensemble_step(
            chunk, self._ensemble, self._ensemble_count, self.config.ensemble_coeff
        )
        return action

    def batch_from_obs(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        """The model's batch from a Gymnasium rgb observation: ``{"images": {cam: (B, H, W, 3) uint8},
        "proprio": (B, 23), "instruction": tuple of str or (B, L) token ids}``; an unbatched observation gains B=1."""
        images = obs["images"]
        missing = [cam for cam in self.config.cameras if cam not in images]
        if missing:
            raise KeyError(f"observation lacks cameras {missing}; it has {sorted(images)}")
        proprio = torch.as_tensor(np.asarray(obs["proprio"], dtype=np.float32), device=self.device)
        single = proprio.ndim == 1
        batch: dict[str, Any] = {PROPRIO_KEY: proprio[None] if single else proprio}
        for cam in self.config.cameras:
            img = torch.as_tensor(np.asarray(images[cam]), device=self.device)
            img = img[None] if single else img
            batch[IMAGE_KEY + cam] = img.permute(0, 3, 1, 2)
        instr = obs["instruction"]
        if isinstance(instr, str):
            batch["instruction"] = [instr]
        elif isinstance(instr, np.ndarray) and np.issubdtype(instr.dtype, np.integer):
            batch["instruction_tokens"] = torch.as_tensor(instr[None] if single else instr, dtype=torch.long)
        else:
            batch["instruction"] = [str(s) for s in instr]
        return batch

    # ------------------------------------------------------------------ checkpoints
    def save_pretrained(self, folder: str | os.PathLike, extra: Mapping[str, Any] | None = None) -> None:
        """`vlagym.policies.checkpoint.save_checkpoint(self, folder, extra)`."""
        save_checkpoint(self, folder, extra)

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, device: str | torch.device = "cpu") -> VLAPolicy:
        """Rebuild config, tokenizer, statistics and weights (strict) from a checkpoint folder, in eval mode."""
        return load_policy(folder, device=device)


def policy_from_meta(meta: Mapping[str, Any]) -> VLAPolicy:
    """An untrained `VLAPolicy` with the config, tokenizer and statistics of a checkpoint's ``config.json``."""
    config, tokenizer = VLAConfig.from_dict(dict(meta["config"])), Tokenizer.from_dict(dict(meta["tokenizer"]))
    policy = VLAPolicy(config, tokenizer, pretrained_backbones=False)  # the weights follow, from the checkpoint
    if meta.get("stats") is not None:
        policy.set_stats(NormStats.from_dict(meta["stats"]))
    return policy


def load_policy(folder: str | os.PathLike, device: str | torch.device = "cpu") -> VLAPolicy:
    """Rebuild the policy saved by `save_checkpoint` (config, tokenizer, statistics, weights; strict) in eval mode."""
    policy = policy_from_meta(read_checkpoint_config(folder))
    state = read_weights(folder)
    check_state_dict(policy, state)
    policy.load_state_dict(state, strict=True)
    return policy.to(device).eval()
