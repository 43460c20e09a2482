"""A vlagym checkpoint served over the openpi websocket protocol (`vlagym serve`).

    server = PolicyServer("runs/bc/checkpoints/step_5000", port=8000)
    server.serve_forever()                    # or server.start() ... server.stop() in a background thread

On connect the server sends its metadata: ``"server": "vlagym"``, the checkpoint, its task and env settings,
cameras, chunk size and ``n_action_steps`` (how `vlagym eval` executes its chunks), and for a flow head the
``noise_shape`` a client may fill. Every observation message (keys of `ServedMapping`, the LIBERO convention
by default: one (H, W, 3) uint8 image per camera, the proprio vector, the prompt; optionally ``noise``) gets
``{"actions": (K, A) float32, "server_timing": {"infer_ms": ...}}``: the checkpoint's chunk in env units, the
gripper snapped to +-1 when the checkpoint does so (a temporal-ensemble checkpoint's chunks come back raw: a
vlagym client averages them over steps, then snaps, as the checkpoint does in process). A bad message gets a
one-line text reply and the connection is closed, as openpi's servers do. One model serves every connection,
one request at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

import vlagym
from vlagym.eval.adapters import CheckpointPolicy
from vlagym.eval.configs import EvalError
from vlagym.eval.served import SERVER_NAME, ServedMapping, default_image_key
from vlagym.eval.wire import WireError, pack, unpack

logger = logging.getLogger(__name__)


class PolicyServer:
    """Serves one checkpoint on ``ws://host:port`` (port 0: a free port, read back from `port`)."""

    def __init__(self, checkpoint: str, host: str = "127.0.0.1", port: int = 8000, n_action_steps: int | None = None):
        self.checkpoint = CheckpointPolicy(checkpoint)
        policy = self.checkpoint.policy
        cfg = policy.config
        if n_action_steps is not None:
            try:
                self.checkpoint.execute_chunks(n_action_steps)
            except ValueError as e:
                raise EvalError(f"n_action_steps: {e}") from e
        cfg = policy.config
        self.mapping = ServedMapping(image_keys={cam: default_image_key(cam) for cam in cfg.cameras})
        self.metadata: dict[str, Any] = {
            "server": SERVER_NAME,
            "vlagym_version": vlagym.__version__,
            "checkpoint": str(Path(checkpoint)),
            "env_id": self.checkpoint.env_id,
            "env_kwargs": self.checkpoint.env_kwargs,
            "cameras": list(cfg.cameras),
            "image_keys": self.mapping.image_keys,
            "chunk_size": cfg.chunk_size,
            "action_dim": cfg.action_dim,
            "n_action_steps": cfg.n_action_steps,
            # A temporal ensemble predicts every step and averages the chunks (a vlagym client does it); its chunks
            # come back raw, since the gripper is snapped after averaging.
            "temporal_ensemble": cfg.temporal_ensemble,
            "ensemble_coeff": cfg.ensemble_coeff,
            "binary_gripper": cfg.binary_gripper,
            "gripper_snapped": cfg.binary_gripper and not cfg.temporal_ensemble,
            "noise_shape": [cfg.chunk_size, cfg.action_dim] if cfg.head == "flow" else None,
        }
        self._lock = threading.Lock()
        try:
            from websockets.sync.server import serve
        except ImportError as e:
            raise EvalError("serving needs the 'websockets' package: pip install 'vlagym[serve]'") from e
        try:
            self._server = serve(self._handle, host, port, compression=None, max_size=None)
        except OSError as e:
            raise EvalError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
        self.host, self.port = self._server.socket.getsockname()[:2]
        self._thread: threading.Thread | None = None

    @property
    def uri(self) -> str:
        return f"ws://{self.host}:{self.port}"

    # ------------------------------------------------------------------ one request
    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        """The reply to one observation message; `ValueError` naming what is wrong with it."""
        import torch

        policy, m = self.checkpoint.policy, self.mapping
        if not isinstance(obs, dict):
            raise ValueError(f"an observation must be a map, got {type(obs).__name__}")
        missing = [k for k in (*m.image_keys.values(), m.state_key, m.prompt_key) if k not in obs]
        if missing:
            raise ValueError(f"the observation lacks {missing} (it holds {sorted(obs)})")
        images = {}
        for cam, key in m.image_keys.items():
            image = np.asarray(obs[key])
            if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
                raise ValueError(f"{key!r} must be a uint8 (H, W, 3) image, got {image.dtype} {image.shape}")
            images[cam] = image
        state = np.asarray(obs[m.state_key], np.float32)
        if state.shape != (policy.config.proprio_dim,):
            raise ValueError(f"{m.state_key!r} must hold {policy.config.proprio_dim} numbers, got shape {state.shape}")
        # the conversion `vlagym eval` makes in process (same memory layout, so the same float results)
        batch = policy.batch_from_obs({"images": images, "proprio": state, "instruction": str(obs[m.prompt_key])})
        noise = obs.get("noise")
        if noise is not None:
            noise = torch.from_numpy(np.asarray(noise, np.float32))[None]
        start = time.perf_counter()
        with self._lock, torch.inference_mode():
            chunk = policy.predict_action_chunk(batch, noise=noise)[0].float().numpy()
        if self.metadata["gripper_snapped"]:  # as select_action snaps every executed action
            chunk[:, -1] = np.where(chunk[:, -1] >= 0, 1.0, -1.0)
        return {"actions": chunk, "server_timing": {"infer_ms": (time.perf_counter() - start) * 1e3}}

    def _handle(self, conn: Any) -> None:
        conn.send(pack(self.metadata))
        for message in conn:
            try:
                if isinstance(message, str):
                    raise ValueError("observations are binary msgpack messages, got text")
                reply = pack(self.infer(unpack(message)))
            except (ValueError, WireError, KeyError) as e:
                logger.warning("bad request from %s: %s", conn.remote_address, e)
                conn.send(f"bad request: {e}")
                conn.close(1003, "bad request")
                return
            conn.send(reply)

    # ------------------------------------------------------------------ running
    def serve_forever(self) -> None:
        logger.info("serving %s on %s", self.metadata["checkpoint"], self.uri)
        self._server.serve_forever()

    def start(self) -> PolicyServer:
        """Serve from a background thread (until `stop`)."""
        self._thread = threading.Thread(target=self._server.serve_forever, name="vlagym-policy-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> PolicyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
