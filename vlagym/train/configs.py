"""The configs of `vlagym demos` (`DemoConfig`) and `vlagym train-bc` (`BCConfig`), and the choices they check.

This module imports neither torch nor mujoco, h5py or stable-baselines3: the CLI generates its options (and
``--help``) from these dataclasses, and that must stay fast. A check that needs a heavy module (the env's
cameras and observation modes live beside the MuJoCo code) imports it inside ``__post_init__``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import vlagym
from vlagym.checks import check_float, check_int
from vlagym.config import EMPTY_FLAG, Config, nested_config
from vlagym.distributed import backend_problem
from vlagym.envs.constants import CAMERAS, VECTORIZATION_MODES
from vlagym.policies.config import ACTING_FIELDS, VLAConfig
from vlagym.train import layout
from vlagym.train.lerobot.format import LeRobotMapping

COMPRESSIONS = ("gzip", "lzf", "none")
DEVICES = ("auto", "cpu", "cuda")
PaddedActions = Literal["mask", "gripper"]
PADDED_ACTIONS = get_args(PaddedActions)
CONFIG_SUFFIX = ".config.json"  # the config beside a demo file: FILE.hdf5.config.json
# Set by DemoConfig's own fields; env_kwargs may not repeat them.
RESERVED_ENV_KWARGS = ("obs_mode", "image_size", "cameras", "render_mode")


class DemoError(ValueError):
    """Bad collection settings, or an output file that does not fit them; the message says which."""


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise DemoError(f"{name} must be one of {list(choices)}, got {value!r}")


# ---------------------------------------------------------------------------- demos
@dataclass
class DemoConfig(Config):
    """Options of `collect_demos` (and `vlagym demos`)."""

    task: str
    """registered vlagym env id, e.g. VLA-PickCup-v0"""
    episodes: int = 100
    """episodes to run, with seeds seed .. seed + episodes - 1; failed ones are dropped unless keep_failures"""
    num_envs: int = 1
    """sub-envs running the expert side by side (the file does not depend on it)"""
    out: str = ""
    """output HDF5 path (.hdf5 or .h5); empty means demos/<task>.hdf5"""
    seed: int = 0
    """episode i is reset with seed + i"""
    obs_mode: str = "rgb"
    """env observation mode: "rgb" or "rgb+state" record camera images; "state" records none. obs/proprio and
    obs/state are recorded in every mode"""
    image_size: int = 128
    """height and width of every camera image, in pixels"""
    cameras: tuple[str, ...] = ("front", "wrist")
    """cameras recorded as obs/<camera>_rgb"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """further keyword arguments of the env, e.g. {"split": "train"}; JSON-serialisable"""
    keep_failures: bool = False
    """also keep episodes the expert failed (their success attribute is false)"""
    action_noise: float = 0.0
    """std of Gaussian noise added to the expert's arm actions before they are executed (DART-style): the
    expert corrects the perturbations, so the demos show recoveries from the small errors a cloned policy
    makes. `actions` then stores what was executed, `expert_actions` the expert's own (the training labels).
    The gripper command is never perturbed; the noise of an episode depends only on its seed"""
    policy: str | None = None
    """a VLA checkpoint folder that acts instead of the expert (DAgger): the expert, re-deriving its phase from
    the scene (`ScriptedExpert.recover`), labels every state the policy visits. `actions` then stores the
    policy's actions, `expert_actions` the labels; keep_failures keeps the policy's failed episodes, whose
    labels teach it to recover. An episode ends where the expert can no longer finish it (a cup knocked over).
    The env's image size and cameras must be the checkpoint's"""
    resume: bool = False
    """continue an interrupted file from the episode after its last demo (same settings required); a missing file
    is started afresh"""
    overwrite: bool = False
    """replace an existing output file (without it, an existing file is an error unless resume)"""
    compression: str = "gzip"
    """HDF5 filter of the image datasets: "gzip" (the layout's), "lzf" (faster, larger) or "none\""""
    vectorization: str = "sync"
    """"sync" (one process), "async" (one worker process per sub-env) or "pool" (a worker per CPU, each stepping
    a slice of the sub-envs; `vlagym.envs.pool`)"""
    progress: bool = True
    """show a progress bar on stderr"""
    backend: str = "local"
    """"local" (this process) or "ray" (workers on a Ray cluster, each with a vector env of num_envs; the file is
    the local one's, committed in seed order; docs/ray.md)"""
    address: str | None = None
    """Ray cluster to join ("auto", "HOST:6379", "ray://HOST:10001"); unset: $RAY_ADDRESS, else a new local one"""
    workers: int | None = None
    """Ray workers (one CPU each); unset: one per CPU of the cluster"""
    unit_size: int | None = None
    """Ray: episodes per work unit (unset: twice num_envs); the driver hands out a few hundred units a second,
    so a large cluster wants larger units (docs/ray.md). The episodes do not depend on it"""

    def __post_init__(self) -> None:
        self.task = self.task.removeprefix("vlagym:")
        if self.task not in vlagym.TASKS:
            raise DemoError(f"unknown task {self.task!r}; known tasks: {sorted(vlagym.TASKS)}")
        if not self.out:
            self.out = str(Path("demos") / f"{self.task}.hdf5")
        if Path(self.out).suffix.lower() not in (".hdf5", ".h5"):
            raise DemoError(f"out must end in .hdf5 or .h5, got {self.out!r}")
        self._check_numbers()
        self._check_observations()
        _choice("compression", self.compression, COMPRESSIONS)
        _choice("vectorization", self.vectorization, VECTORIZATION_MODES)
        if self.resume and self.overwrite:
            raise DemoError("resume and overwrite exclude each other")
        problem = backend_problem(self.backend, self.address, self.workers, self.unit_size)
        if problem:
            raise DemoError(problem)
        self._check_env_kwargs()
        if self.policy is not None:
            self._check_policy()

    def _check_policy(self) -> None:
        if not isinstance(self.policy, str) or not self.policy:
            raise DemoError(f"policy must be a checkpoint folder, got {self.policy!r}")
        if not self.has_images():
            raise DemoError(f"a policy acting needs camera images: obs_mode {self.obs_mode!r} records none")
        if self.action_noise > 0:
            raise DemoError(
                "action_noise perturbs the expert's actions: with a policy acting there are none to perturb"
            )
        if self.backend != "local":
            raise DemoError("a policy acting runs with backend 'local' only")
        from vlagym.envs.expert import labels_others

        if not labels_others(self.task):
            raise DemoError(
                f"{self.task}'s expert cannot label another policy's states: its recovery is not written or not "
                "measured (PushCube's labels made the policy worse; docs/multitask.md)"
            )

    def _check_numbers(self) -> None:
        for name in ("episodes", "num_envs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise DemoError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise DemoError(f"seed must be a non-negative integer, got {self.seed!r}")
        if isinstance(self.action_noise, bool) or not isinstance(self.action_noise, (int, float)):
            raise DemoError(f"action_noise must be a number, got {self.action_noise!r}")
        if not 0.0 <= self.action_noise <= 1.0:
            raise DemoError(f"action_noise must be in [0, 1] (normalised action units), got {self.action_noise!r}")
        self.action_noise = float(self.action_noise)

    def _check_observations(self) -> None:
        from vlagym.envs.base import CAMERAS, OBS_MODES  # mujoco: only when a config is built, never for --help

        _choice("obs_mode", self.obs_mode, OBS_MODES)
        if not isinstance(self.image_size, int) or not 8 <= self.image_size <= 2048:
            raise DemoError(f"image_size must be an integer between 8 and 2048, got {self.image_size!r}")
        self.cameras = (self.cameras,) if isinstance(self.cameras, str) else tuple(self.cameras)
        if not self.cameras or len(set(self.cameras)) != len(self.cameras):
            raise DemoError(f"cameras must name one or more distinct cameras of {list(CAMERAS)}, got {self.cameras}")
        for camera in self.cameras:
            _choice("camera", camera, CAMERAS)

    def _check_env_kwargs(self) -> None:
        self.env_kwargs = dict(self.env_kwargs)
        clash = sorted(set(self.env_kwargs) & set(RESERVED_ENV_KWARGS))
        if clash:
            raise DemoError(f"env_kwargs may not set {clash}: they are options of their own (or not recordable)")
        try:
            json.dumps(self.env_kwargs)
        except TypeError as e:
            raise DemoError(f"env_kwargs must be JSON-serialisable (they are stored in the file): {e}") from e

    def make_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `gym.make(task, ...)` that rebuild the env of these demos (stored in the file)."""
        return {"obs_mode": self.obs_mode, "image_size": self.image_size, "cameras": list(self.cameras)} | dict(
            self.env_kwargs
        )

    def has_images(self) -> bool:
        return self.obs_mode != "state"

    def obs_keys(self) -> list[str]:
        images = [layout.image_key(c) for c in self.cameras] if self.has_images() else []
        return [*images, "proprio", "state"]


# ---------------------------------------------------------------------------- behaviour cloning
@dataclass
class AugmentConfig(Config):
    """The random image augmentation of training (`vlagym.train.augment.ImageAugment`): a zoom and shift of the
    view, then colour jitter, drawn independently for every camera of every sample. Never a mirror or a turn (a
    mirrored image would flip the meaning of left/right actions). The defaults are wide enough for the
    `lighting` and `camera` splits without drawing from their held-out ranges (docs/speed.md, "A quicker, more
    robust quickstart"); the gain field (`shading`, off here, 0.15 in `vlagym quickstart`) adds what a change of the
    light does to parts of an image and the jitter cannot imitate (docs/speed.md, "A gain field")."""

    crop_scale: tuple[float, float] = (0.8, 1.0)
    """(min, max) fraction of the image area the view is zoomed in to (aspect kept, anywhere in the image);
    (1, 1) turns zooming off"""
    shift_px: float = 4.0
    """then move the view by up to this many pixels on each axis (sub-pixel, borders extended)"""
    brightness: float = 0.4
    """multiply by a factor in [1 - brightness, 1 + brightness]"""
    contrast: float = 0.3
    """blend with the image's mean gray by a factor in [1 - contrast, 1 + contrast]"""
    saturation: float = 0.3
    """blend with each pixel's gray by a factor in [1 - saturation, 1 + saturation]"""
    hue: float = 0.03
    """turn the colours by up to this fraction of a full turn (0.5: 180 degrees), either way"""
    shading: float = 0.0
    """before the jitter, multiply by a smooth gain field: a log-gain in [-shading, shading] at each node of a 3 x 3
    grid over the image, bilinear in between. Light that falls differently across the scene (a tilted key light, or
    key and ambient light changing apart) changes parts of an image by different factors, which one gain for the
    whole image cannot imitate (0: off)"""
    unshifted_cameras: tuple[str, ...] = field(default=("wrist",), metadata={EMPTY_FLAG: True})
    """cameras whose views are never zoomed or shifted, only colour-jittered: the camera on the hand ("wrist") shows
    how far the object is from the fingers as a position in its image, which a zoom or shift would blur (a
    policy without such a camera has nothing to leave out; the flag without a name zooms and shifts every camera)"""
    unshaded_cameras: tuple[str, ...] = field(default=("wrist",), metadata={EMPTY_FLAG: True})
    """cameras whose images never get the gain field (`shading`): the lighting split changes the hand camera's
    image almost only by one gain and contrast for the whole image, which the jitter already covers, and shading it
    too cost the quickstart 3.9 points in distribution (docs/speed.md; the flag without a name shades every camera)"""

    def __post_init__(self) -> None:
        crop = self.crop_scale
        ok = isinstance(crop, (tuple, list)) and len(crop) == 2
        ok = ok and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in crop)
        if not ok or not 0.0 < crop[0] <= crop[1] <= 1.0:
            raise ValueError(f"crop_scale must be (min, max) with 0 < min <= max <= 1, got {crop!r}")
        self.crop_scale = (float(crop[0]), float(crop[1]))
        check_float("shift_px", self.shift_px, 0.0)
        for name in ("brightness", "contrast", "saturation"):
            check_float(name, getattr(self, name), 0.0, 1.0)
        check_float("hue", self.hue, 0.0, 0.5)
        check_float("shading", self.shading, 0.0, 1.0)
        for name in ("unshifted_cameras", "unshaded_cameras"):
            cams = getattr(self, name)
            if not isinstance(cams, (list, tuple)) or not all(c in CAMERAS for c in cams):
                raise ValueError(f"{name} must be camera names among {list(CAMERAS)}, got {cams!r}")
            setattr(self, name, tuple(cams))
        for name in ("shift_px", "brightness", "contrast", "saturation", "hue", "shading"):
            setattr(self, name, float(getattr(self, name)))


@dataclass
class BCConfig(Config):
    """Options of `train_bc` (and `vlagym train-bc`); saved as ``OUT/bc_config.json``."""

    dataset: list[str]
    """demo files (HDF5, `vlagym demos`) or LeRobot v3.0 dataset folders (converted once into a cached demo file,
    as `lerobot` maps them; docs/lerobot.md); the env of the first one is the evaluation env"""
    out: str = "runs/bc"
    """run folder: config, TensorBoard logs, checkpoints, evaluations"""
    policy: VLAConfig = field(default_factory=VLAConfig)
    """the policy's architecture (a `VLAConfig`, or its dict)"""
    init: str | None = None
    """a VLA checkpoint folder to start from (fine-tuning): its weights and normalisation statistics replace the
    fresh initialisation; `policy` must be its architecture, while how it acts (`ACTING_FIELDS`, e.g. the temporal
    ensemble) is `policy`'s. None: train from scratch"""
    steps: int = 3000
    """total optimiser steps (every DDP rank stops at this count)"""
    batch_size: int = 64
    """samples per optimiser step and rank"""
    lr: float = 3e-4
    """peak learning rate of AdamW"""
    weight_decay: float = 1e-4
    """AdamW weight decay of the weight matrices (biases, norms and embeddings' 1-d params get none)"""
    warmup_steps: int = 100
    """linear warmup from lr / warmup_steps to lr, then cosine decay to 0 at `steps`"""
    padded_actions: PaddedActions = "mask"
    """the chunk's steps past a demo's end: "mask" leaves them out of the loss; "gripper" learns their gripper
    command, the one the demo ended with, and leaves their motion out. The demos end on success, so the place
    tasks' release, one step per demo, becomes a label on the rest of the chunk (docs/multitask.md)"""
    grad_clip: float = 1.0
    """clip the global gradient norm to this (0: no clipping; the norm is logged either way)"""
    ema: float = 0.0
    """decay of an exponential moving average of the weights, e.g. 0.999 (0: off); when on, the EMA weights are
    what gets evaluated and saved as the policy"""
    seed: int = 0
    """seeds the model init, the batch order, the augmentation and the flow noise"""
    num_workers: int = 0
    """DataLoader worker processes per rank"""
    task_balance: float = 0.0
    """how each task's share of the batches is set, with demos of several tasks: share proportional to (its
    samples) ** (1 - task_balance). 0: every sample equally often, so a task's share is its share of the samples;
    1: every task the same share; in between, small tasks come more often than their size says"""
    aux_state_weight: float = 0.0
    """weight of an auxiliary loss: a linear head on the front camera's features regresses the target's and the
    goal's positions relative to the hand and the target (the privileged state the demos record, L1 in 10 cm
    units; `vlagym.train.state_aux`), so that view's features carry them. 0: none"""
    preload_gb: float = 8.0
    """read the demos into memory, decoded, when they take at most this many GB (0: read every sample from the
    files); the batches are the same, fetched faster"""
    augment: bool = True
    """augment the images (zoom, shift and colour jitter, as `augmentation` says)"""
    augmentation: AugmentConfig = field(default_factory=AugmentConfig)
    """the image augmentation's ranges (an `AugmentConfig`, or its dict)"""
    eval_every: int = 0
    """evaluate the success rate every this many steps and at the end (0: never)"""
    eval_episodes: int = 10
    """episodes per evaluation (seeds 100000 + i, as `vlagym eval`)"""
    eval_num_envs: int = 1
    """parallel sub-envs of the evaluation"""
    checkpoint_every: int = 1000
    """write a checkpoint every this many steps (0: only at the end; the last step always gets one)"""
    log_every: int = 10
    """TensorBoard scalars every this many steps"""
    device: str = "auto"
    """"auto" (CUDA when available), "cpu" or "cuda\""""
    bf16: bool = True
    """bf16 autocast of the forward pass (CUDA only; ignored on the CPU)"""
    tf32: bool = False
    """allow TF32 matmuls and convolutions on CUDA (faster, less precise)"""
    resume: bool = False
    """continue from OUT/checkpoints/last.json when it exists (otherwise start afresh)"""
    progress: bool = True
    """show a progress bar (rank 0)"""
    lerobot: LeRobotMapping = field(default_factory=LeRobotMapping)
    """how the features of LeRobot dataset folders in `dataset` map onto the demo keys (a `LeRobotMapping`, or
    its dict)"""

    def __post_init__(self) -> None:
        if isinstance(self.dataset, (str, os.PathLike)):
            self.dataset = [self.dataset]
        self.dataset = [str(p) for p in self.dataset]
        if not self.dataset:
            raise ValueError("dataset must name at least one demo file, got []")
        self.lerobot = nested_config("lerobot", self.lerobot, LeRobotMapping)
        for path in self.dataset:
            if not Path(path).exists():
                raise ValueError(f"dataset file {path!r} does not exist")
        if any(Path(path).is_dir() for path in self.dataset):
            from vlagym.train.lerobot.read import resolve_dataset  # pyarrow, av, h5py: only for LeRobot folders

            # The run reads (and records in bc_config.json) the converted demo files, so a resume finds them.
            self.dataset = [str(resolve_dataset(path, self.lerobot)) for path in self.dataset]
        self.policy = nested_config("policy", self.policy, VLAConfig)
        self.augmentation = nested_config("augmentation", self.augmentation, AugmentConfig)
        if self.init is not None:
            self.init = str(self.init)
            self._check_init()
        self._check_numbers()
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {list(DEVICES)}, got {self.device!r}")
        for name in ("augment", "bf16", "tf32", "resume", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")

    def _check_init(self) -> None:
        """The `init` checkpoint exists and has `policy`'s architecture (how it acts may differ: `ACTING_FIELDS`)."""
        from vlagym.policies.checkpoint import read_checkpoint_config  # lazy: imports torch

        try:
            theirs = VLAConfig.from_dict(dict(read_checkpoint_config(self.init)["config"])).to_dict()
        except (OSError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"init: {e}") from e
        ours = self.policy.to_dict()
        keys = (set(theirs) | set(ours)) - set(ACTING_FIELDS) - {"subtasks"}  # subtasks: from the demos
        differ = sorted(k for k in keys if theirs.get(k) != ours.get(k))
        if differ:
            raise ValueError(f"the policy differs from the init checkpoint's architecture in {differ}")

    def _check_numbers(self) -> None:
        for name, low in (
            ("steps", 1),
            ("batch_size", 1),
            ("warmup_steps", 0),
            ("seed", 0),
            ("num_workers", 0),
            ("eval_every", 0),
            ("eval_episodes", 1),
            ("eval_num_envs", 1),
            ("checkpoint_every", 0),
            ("log_every", 1),
        ):
            check_int(name, getattr(self, name), low)
        check_float("lr", self.lr, 0.0, low_open=True)
        check_float("weight_decay", self.weight_decay, 0.0)
        check_float("grad_clip", self.grad_clip, 0.0)
        check_float("ema", self.ema, 0.0, 1.0)
        check_float("preload_gb", self.preload_gb, 0.0)
        check_float("task_balance", self.task_balance, 0.0, 1.0)
        check_float("aux_state_weight", self.aux_state_weight, 0.0)
        if self.padded_actions not in PADDED_ACTIONS:
            raise ValueError(f"padded_actions must be one of {list(PADDED_ACTIONS)}, got {self.padded_actions!r}")
        if self.ema == 1.0:
            raise ValueError(f"ema must be < 1 (1 would never move the weights), got {self.ema!r}")


__all__ = [
    "BCConfig",
    "COMPRESSIONS",
    "CONFIG_SUFFIX",
    "DEVICES",
    "PADDED_ACTIONS",
    "DemoConfig",
    "DemoError",
    "RESERVED_ENV_KWARGS",
    "VECTORIZATION_MODES",
]
