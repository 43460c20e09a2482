"""Sends observations to a policy server with openpi's own client (`openpi-client`) and saves the replies.

Run by tests/eval/test_served.py under another interpreter (openpi-client pins numpy < 2):
``python openpi_infer.py ws://HOST:PORT OBS.npz OUT.npz``. OBS.npz holds one array per message key with a
leading message axis (``prompt`` as a string array); OUT.npz gets ``actions`` (messages, K, A) and the server's
metadata as JSON on stdout."""

import json
import sys

import numpy as np
from openpi_client.websocket_client_policy import WebsocketClientPolicy

uri, obs_file, out = sys.argv[1:4]
client = WebsocketClientPolicy(uri)
stored = np.load(obs_file)
messages = [
    {k: (str(v[i]) if v.dtype.kind == "U" else v[i]) for k, v in stored.items()} for i in range(len(stored["prompt"]))
]
np.savez(out, actions=np.stack([client.infer(m)["actions"] for m in messages]))
print(json.dumps(client.get_server_metadata()))
