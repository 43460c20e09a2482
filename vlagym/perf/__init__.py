"""Speed benchmarks of the whole loop, measured side by side in one run (`vlagym bench`).

Sections, one module each, each a function ``(cfg, work) -> Table`` of rows:

    env          per task: env steps/s with state and with rgb observations beside the raw physics limit (the
                 same model replaying the very same controls from the same states with `mujoco.mj_step` alone,
                 alternated in rounds; median ratio), and reset time; the process pinned to one core
    env-parts    per task: microseconds per call of each part of a step (action check, controller, physics,
                 divergence check, success predicates, reward terms, info, state and rgb observation), alone
    render       what MuJoCo's default visual settings would cost per camera image, one setting at a time
    vector       env steps/s of Gymnasium's sync and async vector envs and vlagym's pool at 2, 8 and 16 sub-envs
    dataset      `DemoDataset` samples/s through a DataLoader, plain and with `ImageAugment`, per worker count
    bc           behaviour-cloning samples/s of `train_bc` (from its TensorBoard log, start-up excluded)
    latency      `select_action` p50/p99 at batch 1: the chunk queue, predicting every call, temporal ensembling
    ppo          PPO env steps/s of `train_rl` (rollout only, and rollout + update), from scratch on state
                 (SB3's MlpPolicy) and post-training the VLA on rgb
    filtered-bc  collection env steps/s and updates/s of `train_filtered_bc`, batches drawn inline or prefetched

Every rate of the env, env-parts, render, vector, dataset, bc, ppo and filtered-bc tables is the median of `repeats`
passes, run interleaved (`vlagym.perf.timing`): pass 1 of every measurement of a table (of the env table: of
one task's columns, task after task), then pass 2 of every one, and so on, so that slow drifts of the machine's
speed hit all of them alike; ratios between rows are taken within each pass, then their median. Every pass's
value stays in the row's `samples` (metric -> values in pass order). Latency reports p50/p99 over its many
calls instead.

The dataset, bc, ppo and filtered-bc sections share one demo file (synthetic, in the real layout, unless
`demos` names one) and one BC checkpoint (the bc section's), in a temporary folder removed at the end
(`vlagym.perf.work`).

Modules: `config` (`BenchConfig`, budgets; imports neither torch nor mujoco), `timing` (interleaved passes,
medians, ratios), `table` (`Table` and its Markdown), `work` (what the sections share), `synthetic` (the
synthetic demo file), one module per section, `run` (`run_bench`: the chosen sections in order, one JSON
document) and `results` (reading, printing and comparing saved runs). Numbers are for comparison within one
run, or between two runs on the same quiet machine; they are never asserted in tests.
"""
