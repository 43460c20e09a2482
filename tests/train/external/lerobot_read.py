"""Reads a LeRobot v3.0 folder with LeRobot's own `LeRobotDataset` and saves every frame to an .npz.

Run by tests/train/test_lerobot.py under another interpreter (LeRobot pins versions vlagym's environment cannot
share): ``python lerobot_read.py DATASET_DIR OUT.npz``. Works with `lerobot` or the standalone `lerobot-dataset`
package (imported as `ledataset`); decodes video with PyAV."""

import json
import sys
from pathlib import Path

import numpy as np

try:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
except ImportError:
    from ledataset.datasets.lerobot_dataset import LeRobotDataset

root, out = Path(sys.argv[1]), sys.argv[2]
dataset = LeRobotDataset("local/vlagym-export", root=root, video_backend="pyav")
columns: dict[str, list] = {}
for i in range(len(dataset)):
    for key, value in dataset[i].items():
        columns.setdefault(key, []).append(value if isinstance(value, str) else value.numpy())
np.savez(out, **{k: np.array(v) if isinstance(v[0], str) else np.stack(v) for k, v in columns.items()})
print(json.dumps({"episodes": dataset.num_episodes, "frames": dataset.num_frames, "fps": dataset.fps}))
