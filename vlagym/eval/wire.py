"""The messages of the openpi policy-server protocol: msgpack, with numpy arrays as tagged maps.

One websocket connection per client. The server first sends its metadata (a map); then every binary message
from the client is one observation (a map of arrays and strings) and the server answers each with one map
holding the action chunk (e.g. ``{"actions": float32 (K, A)}``). A text message from the server is an error
report. An array travels as ``{b"__ndarray__": True, b"data": raw bytes, b"dtype": numpy dtype string,
b"shape": [...]}`` and a numpy scalar as ``{b"__npgeneric__": True, b"data": value, b"dtype": ...}``, the tag
keys being msgpack *bytes*: the convention of openpi's `msgpack_numpy`, which looks for bytes keys only, so
either side can be openpi's or vlagym's (tests/eval/test_served.py runs openpi's own client against `vlagym
serve`). Messages with str tag keys are read too.

Needs ``msgpack`` (``pip install "vlagym[serve]"``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

ARRAY_TAG = "__ndarray__"
SCALAR_TAG = "__npgeneric__"


class WireError(Exception):
    """A message that is not msgpack of the protocol, or a value it cannot carry."""


def _msgpack() -> Any:
    try:
        import msgpack
    except ImportError as e:
        raise WireError("the policy-server protocol needs the 'msgpack' package: pip install 'vlagym[serve]'") from e
    return msgpack


def _encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "VOcU":
            raise WireError(f"cannot send an array of dtype {value.dtype} (numbers and booleans only)")
        value = np.ascontiguousarray(value)
        return {b"__ndarray__": True, b"data": value.tobytes(), b"dtype": value.dtype.str, b"shape": list(value.shape)}
    if isinstance(value, np.generic):
        return {b"__npgeneric__": True, b"data": value.item(), b"dtype": value.dtype.str}
    raise WireError(f"cannot send a value of type {type(value).__name__}")


def _decode(obj: dict[Any, Any]) -> Any:
    def get(key: str) -> Any:
        return obj[key] if key in obj else obj[key.encode()]

    if ARRAY_TAG in obj or ARRAY_TAG.encode() in obj:
        dtype = get("dtype")
        dtype = np.dtype(dtype.decode() if isinstance(dtype, bytes) else dtype)
        # a copy: frombuffer's view of the message would be read-only
        return np.frombuffer(get("data"), dtype=dtype).reshape(tuple(get("shape"))).copy()
    if SCALAR_TAG in obj or SCALAR_TAG.encode() in obj:
        dtype = get("dtype")
        return np.dtype(dtype.decode() if isinstance(dtype, bytes) else dtype).type(get("data"))
    return obj


def pack(message: Any) -> bytes:
    """One message as bytes (maps, lists, str, numbers, numpy arrays and scalars)."""
    try:
        return _msgpack().packb(message, default=_encode, use_bin_type=True)
    except (TypeError, ValueError) as e:
        raise WireError(f"cannot pack the message: {e}") from e


def unpack(data: bytes) -> Any:
    """The message in `data`; `WireError` when it is not msgpack."""
    msgpack = _msgpack()
    try:
        return msgpack.unpackb(data, object_hook=_decode, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException, KeyError, TypeError) as e:
        raise WireError(f"not a message of the policy-server protocol: {e}") from e
