"""A policy server speaking through openpi's own codec (`openpi_client.msgpack_numpy`), as openpi's
`WebsocketPolicyServer` does: metadata first, then one reply per observation.

Run by tests/eval/test_served.py under another interpreter (openpi-client pins numpy < 2):
``python openpi_codec_server.py`` prints its port, serves until stdin closes. Its policy is a formula of the
observation a test can recompute: actions[k] = state[:7] + (k + 1) * (mean of the main image / 255), four steps;
an observation of the wrong types gets a text error, as openpi's server reports exceptions."""

import sys
import threading

import numpy as np
from openpi_client import msgpack_numpy
from websockets.sync.server import serve


def policy(obs):
    image, wrist, state = obs["observation/image"], obs["observation/wrist_image"], obs["observation/state"]
    if not (image.dtype == wrist.dtype == np.uint8 and image.ndim == 3 and state.dtype == np.float32):
        raise TypeError(f"unexpected observation types: {image.dtype} {image.shape} {state.dtype}")
    if not isinstance(obs["prompt"], str):
        raise TypeError(f"prompt is {type(obs['prompt']).__name__}")
    steps = np.arange(1, 5, dtype=np.float32)[:, None]
    return {"actions": state[:7][None] + steps * np.float32(image.mean() / 255.0), "policy_timing": {"infer_ms": 0.0}}


def handle(conn):
    conn.send(msgpack_numpy.packb({"policy": "openpi codec stand-in"}))
    for message in conn:
        try:
            conn.send(msgpack_numpy.packb(policy(msgpack_numpy.unpackb(message))))
        except Exception as e:
            conn.send(f"error: {e}")
            conn.close()
            return


with serve(handle, "127.0.0.1", 0, compression=None, max_size=None) as server:
    print(server.socket.getsockname()[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()
