"""DAgger demos: a policy acts, the task's scripted expert labels every state it visits (Ross et al. 2011).

    summary = collect_dagger_demos(DemoConfig(task="VLA-StackBlocks-v0", policy="runs/bc/checkpoints/step_5000",
                                              episodes=200, keep_failures=True, image_size=64,
                                              out="stack_dagger.hdf5"))

A behaviour-cloned policy drifts into states the expert's demos never show (a block lifted and let go, a cup
carried past its bowl) and, not knowing what to do there, drifts further. Here the policy's actions are
executed and the expert, following the scene rather than its own plan (`ScriptedExpert.recover`), says what it
would do in each state; the demo file stores both (`actions`: the policy's, `expert_actions`: the labels, which
`vlagym train-bc` trains on). Training on the demos plus these files (`train-bc --init CKPT` to fine-tune) is
one DAgger round. It is imitation learning with the scripted expert as teacher, so it belongs to the BC loop,
not to post-training (`vlagym.rl` never uses the experts).

The policy is anything `vlagym eval --policy` takes except the expert: a checkpoint folder, a policy server or
a ``package.module:factory``; it sees the demo env's observations, so the image size and cameras must be the
ones it was trained on.
"""

from __future__ import annotations

from typing import Any

from vlagym.eval.configs import EvalError, policy_kind
from vlagym.eval.loading import load_eval_policy
from vlagym.train.configs import DemoConfig, DemoError
from vlagym.train.demos import DemoSummary, collect_demos


def load_acting_policy(cfg: DemoConfig) -> Any:
    """The policy `cfg.policy` names, loaded and checked against the env the demos record; `DemoError` if it
    cannot act there."""
    if cfg.policy is None:
        raise DemoError("no policy to act: set policy to a checkpoint folder, a ws:// server or a factory")
    try:
        if policy_kind(cfg.policy) == "expert":
            raise DemoError("policy 'expert' is the plain demos: leave policy unset")
        policy = load_eval_policy(cfg.policy)
    except EvalError as e:
        raise DemoError(str(e)) from e
    wanted = dict(getattr(policy, "env_kwargs", None) or {})
    recorded = cfg.make_kwargs()
    for key in ("image_size", "cameras", "obs_mode"):
        if key not in wanted:
            continue
        mine, theirs = recorded.get(key), wanted[key]
        if key == "cameras":
            missing = sorted(set(theirs) - set(mine))
            if missing:
                raise DemoError(f"the policy reads cameras {missing}, which these demos do not record ({list(mine)})")
        elif key == "obs_mode":
            if theirs == "rgb+state" and mine != "rgb+state":
                raise DemoError(f"the policy reads obs_mode 'rgb+state'; these demos record {mine!r}")
        elif mine != theirs:
            raise DemoError(
                f"the policy was trained on {key} {theirs!r}; these demos record {mine!r}: record its {key}"
            )
    return policy


def collect_dagger_demos(cfg: DemoConfig) -> DemoSummary:
    """`collect_demos` with `cfg.policy` acting and the expert labelling; the same file layout, resume and
    errors."""
    return collect_demos(cfg, policy=load_acting_policy(cfg))
