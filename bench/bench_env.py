"""Speed of the vlagym environments, measured side by side in one run.

    python bench/bench_env.py [--tasks ID ...] [--steps 2000] [--json out.json]

Rows, one per task:
  * state steps/s through `gym.make` beside the raw `mujoco.mj_step` rate of the
    same model replaying the very same controls from the same states, and the
    ratio between them (the env's own overhead);
  * rgb steps/s with the front and wrist cameras at 128x128, the process pinned
    to one core (Mesa's llvmpipe software renderer when no GPU is present);
  * reset time;
  * what MuJoCo's default visual settings would cost per camera image, one
    setting at a time, to show why the scene turns them off.

Numbers are for comparison within one run on one machine, never asserted in tests.
"""

from __future__ import annotations

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # before mujoco is imported: it picks its GL backend then

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import gymnasium as gym  # noqa: E402
import mujoco  # noqa: E402
import numpy as np  # noqa: E402

import vlagym  # noqa: E402, F401  (registers the tasks)


def pin_to_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        core = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(0, {core})
        return f"pinned to core {core}"
    return "not pinned (no sched_setaffinity)"


def rollout_with_log(env: gym.Env, steps: int, seed: int) -> tuple[float, list, float]:
    """Random actions for `steps` env steps (resetting at episode end).

    Returns step seconds (resets excluded); per episode the model as that
    episode had it (tasks move fixtures and switch parked objects' contacts per
    episode), its start state, the controls and the final qpos; and seconds per reset.
    """
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, size=(steps, 7)).astype(np.float32)
    u = env.unwrapped
    env.reset(seed=seed)  # warm-up: the first reset creates the renderer
    episodes: list[dict] = []
    step_time = reset_time = 0.0

    def start_episode(episode_seed: int) -> None:
        nonlocal reset_time
        t = time.perf_counter()
        env.reset(seed=episode_seed)
        reset_time += time.perf_counter() - t
        state = np.empty(mujoco.mj_stateSize(u.model, mujoco.mjtState.mjSTATE_INTEGRATION))
        mujoco.mj_getState(u.model, u.data, state, mujoco.mjtState.mjSTATE_INTEGRATION)
        episodes.append({"model": copy.copy(u.model), "state": state, "ctrls": [], "final_qpos": None})

    start_episode(seed)
    for i, a in enumerate(actions):
        t = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(a)
        step_time += time.perf_counter() - t
        episodes[-1]["ctrls"].append(u.data.ctrl.copy())
        episodes[-1]["final_qpos"] = u.data.qpos.copy()
        if terminated or truncated:
            start_episode(seed + i + 1)
    if not episodes[-1]["ctrls"]:
        episodes.pop()
    return step_time, episodes, reset_time / (len(episodes) + 1)


def raw_physics_time(env: gym.Env, episodes: list) -> tuple[float, bool]:
    """Seconds `mj_step` alone takes for the same models, substeps, controls and start states,
    and whether the replay ended every episode in exactly the env's state (it must)."""
    n_substeps = env.unwrapped.n_substeps
    total, identical = 0.0, True
    for ep in episodes:
        m = ep["model"]
        d = mujoco.MjData(m)
        mujoco.mj_setState(m, d, ep["state"], mujoco.mjtState.mjSTATE_INTEGRATION)
        mujoco.mj_forward(m, d)
        t = time.perf_counter()
        for c in ep["ctrls"]:
            d.ctrl[:] = c
            mujoco.mj_step(m, d, nstep=n_substeps)
        total += time.perf_counter() - t
        identical &= bool(np.array_equal(d.qpos, ep["final_qpos"]))
    return total, identical


def render_cost(env: gym.Env, size: int, repeats: int, **changes) -> float:
    """Microseconds per camera image with some visual settings changed."""
    u = env.unwrapped
    m = u.model
    saved = {
        "shadowsize": m.vis.quality.shadowsize,
        "offsamples": m.vis.quality.offsamples,
        "numslices": m.vis.quality.numslices,
        "numstacks": m.vis.quality.numstacks,
        "castshadow": m.light_castshadow.copy(),
        "offwidth": m.vis.global_.offwidth,
        "offheight": m.vis.global_.offheight,
    }
    try:
        for k in ("shadowsize", "offsamples", "numslices", "numstacks"):
            if k in changes:
                setattr(m.vis.quality, k, changes[k])
        if changes.get("castshadow"):
            m.light_castshadow[:] = 1
        m.vis.global_.offwidth = m.vis.global_.offheight = changes.get("buffer", size)
        renderer = mujoco.Renderer(m, size, size)
        for _ in range(3):
            renderer.update_scene(u.data, camera="front")
            renderer.render()
        t = time.perf_counter()
        for i in range(repeats):
            renderer.update_scene(u.data, camera=("front", "wrist")[i % 2])
            renderer.render()
        renderer.close()
        return (time.perf_counter() - t) / repeats * 1e6
    finally:
        m.vis.quality.shadowsize = saved["shadowsize"]
        m.vis.quality.offsamples = saved["offsamples"]
        m.vis.quality.numslices = saved["numslices"]
        m.vis.quality.numstacks = saved["numstacks"]
        m.light_castshadow[:] = saved["castshadow"]
        m.vis.global_.offwidth, m.vis.global_.offheight = saved["offwidth"], saved["offheight"]


def bench_task(task: str, steps: int, rounds: int = 5) -> dict:
    """State and rgb rates, the physics limit and reset time of one task.

    The env's steps and their raw-physics replay alternate in `rounds` blocks, so
    that drifts of the machine's speed hit both sides alike; the ratio is the
    median over the blocks.
    """
    env = gym.make(task, obs_mode="state")
    step_total = raw_total = reset_total = 0.0
    ratios, identical = [], True
    per_round = max(steps // rounds, 50)
    for r in range(rounds):
        step_s, episodes, reset_s = rollout_with_log(env, per_round, seed=1000 * r)
        raw_s, same = raw_physics_time(env, episodes)
        step_total, raw_total, reset_total = step_total + step_s, raw_total + raw_s, reset_total + reset_s
        ratios.append(step_s / raw_s)
        identical &= same
    env.close()
    rgb = gym.make(task, obs_mode="rgb", image_size=128, cameras=("front", "wrist"))
    rgb_steps = max(steps // 4, 100)
    rgb_step_s, _, rgb_reset_s = rollout_with_log(rgb, rgb_steps, seed=0)
    rgb.close()
    return {
        "state_steps_per_s": per_round * rounds / step_total,
        "raw_physics_steps_per_s": per_round * rounds / raw_total,
        "env_over_physics": float(np.median(ratios)),
        "env_over_physics_rounds": ratios,
        "replay_identical": identical,
        "rgb_steps_per_s": rgb_steps / rgb_step_s,
        "reset_ms_state": reset_total / rounds * 1e3,
        "reset_ms_rgb": rgb_reset_s * 1e3,
    }


ABLATION = {
    "vlagym scene settings": {},
    "+ 4x multisampling": {"offsamples": 4},
    "+ 4096^2 shadow map, shadows on": {"shadowsize": 4096, "castshadow": True},
    "+ default tessellation (28x16)": {"numslices": 28, "numstacks": 16},
    "+ 640x480-sized offscreen buffer": {"buffer": 640},
    "MuJoCo defaults, all of the above": {
        "offsamples": 4,
        "shadowsize": 4096,
        "castshadow": True,
        "numslices": 28,
        "numstacks": 16,
        "buffer": 640,
    },
}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="*", default=None, help="task ids (default: every single task)")
    parser.add_argument("--steps", type=int, default=2000, help="state-mode steps per task (rgb: a quarter)")
    parser.add_argument("--render-repeats", type=int, default=200)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    tasks = args.tasks or sorted(t for t in vlagym.TASKS if t != "VLA-MultiTask-v0")

    pinned = pin_to_one_core()
    results: dict = {
        "machine": {"python": platform.python_version(), "mujoco": mujoco.__version__, "cpu": platform.processor()},
        "pinning": pinned,
        "tasks": {task: bench_task(task, args.steps) for task in tasks},
    }
    rgb = gym.make(tasks[0], obs_mode="rgb", image_size=128, cameras=("front", "wrist"))
    rgb.reset(seed=0)
    n = args.render_repeats
    results["render_us_per_image_128"] = {name: render_cost(rgb, 128, n, **ch) for name, ch in ABLATION.items()}
    rgb.close()

    print(f"vlagym env benchmark, MuJoCo {mujoco.__version__}, {pinned}")
    print()
    print(
        "| task | state steps/s | raw mj_step steps/s | env / physics time (median of 5) | replay identical "
        "| rgb steps/s | reset ms (state / rgb) |"
    )
    print("|---|---|---|---|---|---|---|")
    for task, r in results["tasks"].items():
        print(
            f"| {task} | {r['state_steps_per_s']:.0f} | {r['raw_physics_steps_per_s']:.0f} | "
            f"{r['env_over_physics']:.3f} | {'yes' if r['replay_identical'] else 'NO'} | {r['rgb_steps_per_s']:.0f} | "
            f"{r['reset_ms_state']:.2f} / {r['reset_ms_rgb']:.2f} |"
        )
    print()
    print("rgb: front + wrist cameras at 128x128. raw mj_step: the same substeps, controls and start states.")
    print()
    base = results["render_us_per_image_128"]["vlagym scene settings"]
    print(f"| render setting (one 128x128 image, {tasks[0]}) | us | x vlagym |")
    print("|---|---|---|")
    for name, us in results["render_us_per_image_128"].items():
        print(f"| {name} | {us:.0f} | {us / base:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
