"""The demonstration file format (HDF5, robomimic/LIBERO layout), shared by writer, validator and dataset.

    file attrs   format="vlagym-demos", format_version=1, vlagym_version, mujoco_version, created (ISO 8601)
    /data        attrs: env_id, env_kwargs (JSON object: everything `gym.make(env_id, **env_kwargs)` needs
                 to rebuild the env, obs_mode/image_size/cameras included), total (steps in complete demos),
                 obs_keys (JSON list)
    /data/demo_<i>               i = 0, 1, ...; attrs: num_samples N, seed, instruction, success (bool),
                                 task (the episode's task id: differs from env_id for VLA-MultiTask-v0),
                                 complete (bool, written last: a demo without it is unfinished)
        obs/<camera>_rgb         (N, H, W, 3) uint8, chunked one frame per chunk, gzip-compressed
        obs/proprio              (N, 23) float32
        obs/state                (N, 83) float32
        actions                  (N, A) float32; A = 7 (ee_delta_pose) or 8 (joint_delta_pos): the actions
                                 executed (replaying them reproduces the episode)
        expert_actions           optional (N, A) float32: the expert's own actions where they differ from the
                                 executed ones (demos collected with action noise); the training labels
        rewards                  (N,) float32
        dones                    (N,) uint8, 1 at the last step of an episode that ended (success or limit)
        states                   (N, S) float64: mj_getState(mjSTATE_INTEGRATION) before action t

Observation t is what the policy saw before taking action t.
"""

from __future__ import annotations

FORMAT = "vlagym-demos"
FORMAT_VERSION = 1
DEMO_PREFIX = "demo_"
IMAGE_SUFFIX = "_rgb"
EXPERT_ACTIONS = "expert_actions"  # training labels when present, else "actions"
STATS_SUFFIX = ".stats.json"  # dataset statistics beside the file: FILE.hdf5.stats.json


def demo_name(i: int) -> str:
    return f"{DEMO_PREFIX}{i}"


def label_actions(demo):
    """The demo group's training labels: `expert_actions` when the demo has them, else `actions`."""
    return demo[EXPERT_ACTIONS] if EXPERT_ACTIONS in demo else demo["actions"]


def image_key(camera: str) -> str:
    return f"{camera}{IMAGE_SUFFIX}"
