"""Success-filtered BC post-training of a VLA (``vlagym train-fbc``).

Each *round* rolls the current policy out on fresh seeds with a little exploration noise, keeps the episodes
that succeeded (and the failures that a replay turned into successes: `hindsight`, `close_delays`), and trains
the policy on them by behaviour cloning, mixed with the original demos; then it repeats. With a 0/1 reward this
is reward-weighted regression: no value function, no likelihood, every update an ordinary BC step. The options
and the measured results are in docs/post-training.md.

    from vlagym.rl.fbc import FilteredBCConfig, train_filtered_bc
    result = train_filtered_bc(FilteredBCConfig(policy="runs/bc/checkpoints/step_3000", out="runs/fbc"))

A run folder ``OUT``:

    OUT/rl_config.json                  the `FilteredBCConfig`
    OUT/rollouts/round_<r>.hdf5         the successes round r kept, a demo file (`buffer` lists its attributes)
    OUT/tb/                             TensorBoard (`metrics` lists the scalars)
    OUT/checkpoints/step_<n>/           n = optimiser steps: a VLA checkpoint `vlagym eval` loads, and the
                                        training state of an exact resume (one per round)
    OUT/checkpoints/last.json           the latest complete checkpoint
    OUT/eval/step_<n>/, OUT/eval/curve.json    the evaluations, with the `vlagym eval` protocol

The modules, in the order a round uses them: `config`, `collect` (the noisy actor and the collection envs, whose
recorders and round runner are `vlagym.rl.collection`'s, shared with the other methods), `buffer` (batches),
`phases` (collect → relabel → update → evaluate), `session` (the run's state, resume, checkpoints),
`metrics` (logging), `loop`. Importing this package imports no torch: `train_filtered_bc` loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vlagym.rl.fbc.config import FilteredBCConfig

if TYPE_CHECKING:
    from vlagym.rl.fbc.loop import train_filtered_bc

__all__ = ["FilteredBCConfig", "train_filtered_bc"]


def __getattr__(name: str) -> Any:
    if name == "train_filtered_bc":
        from vlagym.rl.fbc.loop import train_filtered_bc

        return train_filtered_bc
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
