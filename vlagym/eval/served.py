"""Policies served over the openpi websocket protocol (`vlagym.eval.wire`), as `vlagym eval` policies.

    vlagym eval --policy ws://127.0.0.1:8000 --tasks VLA-PickCup-v0 --out runs/served
    vlagym serve runs/bc/checkpoints/step_5000 --port 8000           # a vlagym checkpoint, same protocol

`ServedPolicy` is the client: per sub-env it sends one observation, receives an action chunk and executes its
first `n_action_steps` actions before asking again (openpi's clients do the same). `ServedMapping` says how
vlagym's observations become the server's keys and how the returned chunk becomes vlagym actions; its default
is the LIBERO convention of openpi's examples:

    observation/image         the front camera, uint8 (H, W, 3)
    observation/wrist_image   the wrist camera, uint8 (H, W, 3)
    observation/state         the proprio vector (float32; `state_indices` selects entries)
    prompt                    the instruction
    actions                   the reply: (K, A) chunk, executed as ``action * action_scale + action_offset``

A vlagym server announces itself in its metadata (``"server": "vlagym"``) with the env settings the checkpoint
was trained with and its chunk execution, which the client then follows; for a flow head the client also
sends each request's ``noise`` (K, A), drawn from the episode's own generator as `vlagym eval` draws it in
process, so the served evaluation reproduces the in-process one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vlagym.config import Config
from vlagym.eval.adapters import episode_noise_generator
from vlagym.eval.configs import EvalError
from vlagym.eval.wire import WireError, pack, unpack

logger = logging.getLogger(__name__)

SERVER_NAME = "vlagym"


def default_image_key(camera: str) -> str:
    """The LIBERO-convention key of a camera: observation/image (front), observation/wrist_image, ..."""
    return "observation/image" if camera == "front" else f"observation/{camera}_image"


@dataclass
class ServedMapping(Config):
    """How vlagym observations map to a served policy's keys, and its chunks to vlagym actions."""

    image_keys: dict[str, str] = field(
        default_factory=lambda: {"front": default_image_key("front"), "wrist": default_image_key("wrist")}
    )
    """camera -> key of its uint8 (H, W, 3) image (the cameras the env renders)"""
    state_key: str = "observation/state"
    """key of the proprio vector ("" sends none)"""
    state_indices: list[int] | None = None
    """entries of the 23-long proprio vector to send (None: all)"""
    prompt_key: str = "prompt"
    """key of the instruction"""
    action_key: str = "actions"
    """key of the reply's action chunk, (K, A) or (A,)"""
    n_action_steps: int | None = None
    """actions of each chunk executed before asking again (None: the vlagym server's setting, else the chunk)"""
    action_scale: list[float] | None = None
    """per-dimension scale of the returned actions (None: 1)"""
    action_offset: list[float] | None = None
    """per-dimension offset added after scaling (None: 0)"""

    def __post_init__(self) -> None:
        if not isinstance(self.image_keys, dict) or not self.image_keys:
            raise ValueError(f"image_keys must map at least one camera to a key, got {self.image_keys!r}")
        if self.n_action_steps is not None and (not isinstance(self.n_action_steps, int) or self.n_action_steps < 1):
            raise ValueError(f"n_action_steps must be an integer >= 1, got {self.n_action_steps!r}")
        for name in ("action_scale", "action_offset"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, list) or len(value) != 7):
                raise ValueError(f"{name} must list 7 numbers (one per action dimension), got {value!r}")


class ServedPolicy:
    """An `EvalPolicy` whose chunks come from a policy server (see the module docstring)."""

    def __init__(self, uri: str, mapping: ServedMapping | dict[str, Any] | None = None, timeout: float = 30.0):
        try:
            from websockets.sync.client import connect
        except ImportError as e:
            raise EvalError("a served policy needs the 'websockets' package: pip install 'vlagym[serve]'") from e
        try:
            given = mapping if isinstance(mapping, ServedMapping) else ServedMapping.from_dict(dict(mapping or {}))
        except (TypeError, ValueError) as e:
            raise EvalError(f"served_mapping: {e}") from e
        self.uri, self.timeout = uri, timeout
        try:
            # entered as a context manager (websockets >= 17.1 deprecates bare connections); `close` exits it
            self._conn = connect(uri, compression=None, max_size=None, open_timeout=timeout).__enter__()
            self.metadata = unpack(self._recv())
        except (OSError, TimeoutError, WireError) as e:
            raise EvalError(f"cannot reach a policy server at {uri}: {e}") from e
        except Exception as e:  # websockets' handshake errors (InvalidURI, InvalidHandshake, ...)
            raise EvalError(f"cannot reach a policy server at {uri}: {type(e).__name__}: {e}") from e
        if not isinstance(self.metadata, dict):
            self.close()
            raise EvalError(f"{uri} sent no metadata map: not a policy server of the openpi protocol")
        self.vlagym_server = self.metadata.get("server") == SERVER_NAME
        ours = self.vlagym_server
        if ours and mapping is None:
            given = ServedMapping(image_keys={cam: default_image_key(cam) for cam in self.metadata["cameras"]})
        self.mapping = given
        self.env_id: str | None = self.metadata.get("env_id") if ours else None
        self.env_kwargs: dict[str, Any] = {"obs_mode": "rgb", "cameras": list(given.image_keys)}
        if ours:
            self.env_kwargs.update(self.metadata.get("env_kwargs") or {})
        self.n_action_steps = given.n_action_steps or (self.metadata.get("n_action_steps") if ours else None)
        # a vlagym server's temporal ensemble: a chunk every step, averaged here, the gripper snapped afterwards
        self._ensemble_coeff = (
            self.metadata.get("ensemble_coeff") if ours and self.metadata.get("temporal_ensemble") else None
        )
        self._snap = bool(ours and self.metadata.get("binary_gripper") and not self.metadata.get("gripper_snapped"))
        self._average: Any = None
        self._count: Any = None
        self._noise_shape = tuple(self.metadata["noise_shape"]) if ours and self.metadata.get("noise_shape") else None
        self.latencies: list[float] = []
        """seconds of every request, send to reply"""
        self._queues: list[list[np.ndarray]] = []
        self._generators: list[Any] = []

    # ------------------------------------------------------------------ the connection
    def _recv(self) -> bytes:
        message = self._conn.recv(timeout=self.timeout)
        if isinstance(message, str):
            raise EvalError(f"the policy server at {self.uri} reported an error: {message.strip().splitlines()[-1]}")
        return message

    def infer(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request and its reply (the round trip is appended to `latencies`)."""
        start = time.perf_counter()
        try:
            self._conn.send(pack(request))
            reply = unpack(self._recv())
        except (OSError, TimeoutError, WireError) as e:
            raise EvalError(f"the policy server at {self.uri} did not answer: {e}") from e
        except EvalError:
            raise
        except Exception as e:  # websockets' ConnectionClosed and friends
            raise EvalError(f"the policy server at {self.uri} closed the connection: {e}") from e
        self.latencies.append(time.perf_counter() - start)
        if not isinstance(reply, dict) or self.mapping.action_key not in reply:
            keys = sorted(reply) if isinstance(reply, dict) else type(reply).__name__
            raise EvalError(f"the policy server's reply has no {self.mapping.action_key!r} (it holds {keys})")
        return reply

    def close(self) -> None:
        self._conn.__exit__(None, None, None)

    # ------------------------------------------------------------------ EvalPolicy
    def chunk_execution(self) -> dict[str, Any] | None:
        ensemble = self._ensemble_coeff is not None
        return {
            "n_action_steps": 1 if ensemble else self.n_action_steps,
            "temporal_ensemble": ensemble,
            "served": self.uri,
        }

    def execute_chunks(self, n_action_steps: int | None = None, temporal_ensemble: bool = False) -> None:
        if temporal_ensemble:
            if self._ensemble_coeff is None:
                raise ValueError("temporal ensembling needs a vlagym server that announces its ensemble_coeff")
            return
        self.n_action_steps, self._ensemble_coeff = n_action_steps, None  # raw chunks stay snapped per action

    def reset(self, mask: np.ndarray, seeds: np.ndarray | None = None) -> None:
        mask = np.asarray(mask, bool)
        if len(self._queues) != len(mask):
            self._queues, self._generators = [[] for _ in mask], [None] * len(mask)
        if self._count is not None and len(self._count) == len(mask):
            self._count[np.flatnonzero(mask)] = 0
        else:
            self._average = self._count = None
        for i in np.flatnonzero(mask):
            self._queues[i] = []
            if self._noise_shape is not None:
                self._generators[i] = None if seeds is None else episode_noise_generator(int(seeds[i]))

    def __call__(self, obs: Any) -> np.ndarray:
        b = len(obs["proprio"])
        if len(self._queues) != b:
            self.reset(np.ones(b, bool))
        if self._ensemble_coeff is not None:
            return self._ensembled(obs, b)
        actions = []
        for i in range(b):
            if not self._queues[i]:
                self._queues[i] = self._chunk(obs, i)
            actions.append(self._queues[i].pop(0))
        return self._snapped(np.stack(actions).astype(np.float32))

    def _ensembled(self, obs: Any, b: int) -> np.ndarray:
        """Every row's chunk of this step, averaged with the earlier ones (`temporal_ensemble_step`), snapped."""
        import torch

        from vlagym.policies.acting import temporal_ensemble_step

        chunk = torch.from_numpy(np.stack([np.stack(self._chunk(obs, i, cut=False)) for i in range(b)]))
        if self._count is None:
            k, a = chunk.shape[1:]
            self._average = torch.zeros(b, k - 1, a, dtype=chunk.dtype)
            self._count = torch.zeros(b, k - 1, dtype=torch.long)
        action, self._average, self._count = temporal_ensemble_step(
            chunk, self._average, self._count, float(self._ensemble_coeff)
        )
        return self._snapped(action.numpy().astype(np.float32))

    def _snapped(self, actions: np.ndarray) -> np.ndarray:
        """The gripper entries snapped to +-1 when the server returns raw chunks of a checkpoint that snaps."""
        if self._snap:
            actions[:, -1] = np.where(actions[:, -1] >= 0, 1.0, -1.0)
        return actions

    def _chunk(self, obs: Any, i: int, cut: bool = True) -> list[np.ndarray]:
        m = self.mapping
        request: dict[str, Any] = {}
        for cam, key in m.image_keys.items():
            if cam not in obs["images"]:
                raise EvalError(f"served_mapping names camera {cam!r}, the env renders {sorted(obs['images'])}")
            request[key] = np.asarray(obs["images"][cam][i], np.uint8)
        if m.state_key:
            state = np.asarray(obs["proprio"][i], np.float32)
            request[m.state_key] = state if m.state_indices is None else state[m.state_indices]
        request[m.prompt_key] = str(obs["instruction"][i])
        if self._noise_shape is not None:  # the episode's noise, drawn as VLAPolicy draws a row's
            import torch

            request["noise"] = torch.randn(self._noise_shape, generator=self._generators[i]).numpy()
        chunk = np.asarray(self.infer(request)[m.action_key], np.float32)
        chunk = chunk[None] if chunk.ndim == 1 else chunk
        if chunk.ndim != 2:
            raise EvalError(f"the policy server's {m.action_key!r} must be (K, A) or (A,), got shape {chunk.shape}")
        if m.action_scale is not None:
            chunk = chunk * np.asarray(m.action_scale, np.float32)
        if m.action_offset is not None:
            chunk = chunk + np.asarray(m.action_offset, np.float32)
        return list(chunk[: self.n_action_steps or len(chunk)] if cut else chunk)


def latency_summary(latencies: list[float]) -> dict[str, float] | None:
    """p50/p99/mean of request round trips in ms (None without requests)."""
    if not latencies:
        return None
    ms = np.asarray(latencies) * 1e3
    return {
        "requests": len(ms),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
    }


__all__ = ["ServedMapping", "ServedPolicy", "default_image_key", "latency_summary"]
