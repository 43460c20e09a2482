"""`vlagym train-bc`, `train-dagger`, `train-fbc`, `train-rl`, `train-residual`, `distill`, `quickstart`: learning a
policy."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vlagym.cli.common import EXIT_OK, UserError, add_options, build, check_task, config_from_args
from vlagym.cli.options import option_values
from vlagym.eval.dagger_config import ROUND_SET_BC_FIELDS, DaggerConfig
from vlagym.eval.quickstart import QuickstartConfig
from vlagym.rl.fbc.config import FilteredBCConfig
from vlagym.rl.ppo.config import RLConfig
from vlagym.rl.residual.config import DistillConfig, ResidualConfig
from vlagym.train.configs import BCConfig

DEPRECATED_ALGO = "filtered-bc"  # `train-rl --algo filtered-bc` became `train-fbc` (kept for one release)
# Filtered-BC options removed because they measured no gain: a script that still passes one is told why.
RETIRED_FBC_FLAGS = (
    "--preference-weight", "--preference-beta", "--preference-pairs", "--preference-chunks", "--preference-rounds",
    "--hindsight-make-room", "--retry-noise-std", "--retry-noise-hold", "--buffer-rounds", "--ema",
    "--max-episode-steps", "--collect-env-kwargs", "--advantage-beta", "--advantage-max-weight", "--critic-rounds",
    "--critic-updates",
)  # fmt: skip


class _Retired(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001 - argparse's signature
        parser.error(f"{option_string} was retired: it measured no gain (docs/post-training.md, 'Retired options')")


# ---------------------------------------------------------------------------- train-bc
def bc_config(args: argparse.Namespace) -> BCConfig:
    """The `BCConfig` of `vlagym train-bc` options; the policy takes the demos' image size and cameras unless
    given."""
    from vlagym.train.bc import demo_env

    values = option_values(args, BCConfig)
    datasets = values.get("dataset") or []
    missing = [p for p in datasets if not Path(p).exists()]
    if missing:
        raise UserError(f"--dataset file {missing[0]!r} does not exist")
    if any(Path(p).is_dir() for p in datasets):
        datasets = values["dataset"] = _lerobot_datasets(datasets, values.get("lerobot", {}))
    if datasets:
        try:
            _, env_kwargs = demo_env(datasets[0])
        except (OSError, KeyError, ValueError) as e:
            raise UserError(f"--dataset {datasets[0]!r} is not a vlagym demo file: {e}") from e
        policy = dict(values.get("policy", {}))
        for key in ("image_size", "cameras"):
            if key in env_kwargs:
                policy.setdefault(key, env_kwargs[key])
        values["policy"] = policy
    if values.get("init"):  # fine-tuning: the checkpoint's architecture, unless an option says otherwise
        given, policy = values.get("policy", {}), _checkpoint_policy(values["init"])
        if given.get("temporal_ensemble") and "n_action_steps" not in given:
            policy["n_action_steps"] = None  # the ensemble's own: 1
        if "n_action_steps" in given and "temporal_ensemble" not in given:
            policy["temporal_ensemble"] = False
        values["policy"] = {**policy, **given}
    return build(BCConfig, values)


def _lerobot_datasets(datasets: list[str], mapping: dict[str, Any]) -> list[str]:
    """The demo files of `--dataset` entries, LeRobot v3.0 folders converted (`UserError` for a bad folder)."""
    from vlagym.train.lerobot.format import LeRobotMapping
    from vlagym.train.lerobot.read import resolve_dataset

    mapping = build(LeRobotMapping, mapping)
    out = []
    for path in datasets:
        try:
            out.append(str(resolve_dataset(path, mapping)))
        except ValueError as e:  # LeRobotError: not a LeRobot v3.0 folder, or one the mapping does not fit
            raise UserError(f"--dataset {path!r}: {e}") from e
    return out


def _checkpoint_policy(folder: str) -> dict:
    """The `VLAConfig` dict a checkpoint folder was trained with (a `UserError` when it is none)."""
    from vlagym.policies.checkpoint import read_checkpoint_config

    try:
        return dict(read_checkpoint_config(folder)["config"])
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"--init: {e}") from e


def cmd_train_bc(args: argparse.Namespace) -> int:
    from vlagym.eval.evaluate import checkpoint_success_rate
    from vlagym.train.bc import train_bc

    cfg = bc_config(args)
    try:
        result = train_bc(cfg, evaluator=checkpoint_success_rate)
    except ValueError as e:  # a batch larger than the data, no CUDA, a resume of another run
        raise UserError(str(e)) from e
    print(f"trained {result['step']} steps, final loss {result['loss']:.4f}")
    if result.get("success_rate") is not None:
        print(f"success rate at the last evaluation: {100 * result['success_rate']:.1f}%")
    print(f"checkpoint: {result['checkpoint']}")
    print(f"logs: {Path(cfg.out) / 'tb'} (tensorboard --logdir {Path(cfg.out) / 'tb'})")
    return EXIT_OK


# ---------------------------------------------------------------------------- train-dagger
def dagger_config(args: argparse.Namespace) -> DaggerConfig:
    """The `DaggerConfig` of `vlagym train-dagger` options (the BC options fill its `bc`)."""
    values = option_values(args, DaggerConfig)
    if not values.get("init"):
        raise UserError("--init is required: the checkpoint that acts in the first round and is fine-tuned")
    if not values.get("bc", {}).get("dataset"):
        raise UserError("--dataset is required: the demo files every round trains on")
    return build(DaggerConfig, values)


def cmd_train_dagger(args: argparse.Namespace) -> int:
    from vlagym.eval.dagger_rounds import SUMMARY_NAME, train_dagger

    cfg = dagger_config(args)
    try:
        summary = train_dagger(cfg)
    except ValueError as e:  # DaggerError, DemoError: a folder or file that does not fit the settings
        raise UserError(str(e)) from e
    for record in summary["rounds"]:
        solved = sum(c["policy_successes"] for c in record["collection"].values())
        episodes = sum(c["episodes"] for c in record["collection"].values())
        line = f"round {record['round']}: the acting policy solved {solved} of {episodes} DAgger episodes"
        if "suite" in record:
            line += f"; {cfg.suite} {100 * record['suite']['mean']:.1f}%"
        print(line)
    print(f"checkpoint: {summary['checkpoint']}")
    print(f"summary: {Path(cfg.out) / SUMMARY_NAME}")
    return EXIT_OK


# ---------------------------------------------------------------------------- train-fbc and train-rl
def _with_task(cls: type, args: argparse.Namespace) -> Any:
    values = option_values(args, cls)
    if values.get("task") is not None:
        values["task"] = check_task(values["task"])
    return build(cls, values)


def fbc_config(args: argparse.Namespace) -> FilteredBCConfig:
    """The `FilteredBCConfig` of `vlagym train-fbc` options."""
    return _with_task(FilteredBCConfig, args)


def rl_config(args: argparse.Namespace) -> RLConfig:
    """The `RLConfig` of `vlagym train-rl` options: a BC checkpoint to post-train, or a run from scratch."""
    values = option_values(args, RLConfig)
    if values.get("policy") is None and not values.get("from_scratch"):
        raise UserError("give a BC checkpoint (--policy DIR) or --from-scratch --task TASK")
    return _with_task(RLConfig, args)


def _report(result: dict[str, Any], out: Path) -> None:
    from vlagym.train.run_files import CURVE_NAME, EVAL_DIR, RL_CONFIG_NAME, TB_DIR

    if result["success_rate"] is not None:
        print(f"success rate at the last evaluation: {100 * result['success_rate']:.1f}%")
        print(f"learning curve: {out / EVAL_DIR / CURVE_NAME}")
    print(f"checkpoint: {result['checkpoint']}")
    print(f"config: {out / RL_CONFIG_NAME}; logs: {out / TB_DIR} (tensorboard --logdir {out / TB_DIR})")


def _post_train(cfg: FilteredBCConfig | RLConfig, train: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """`train(cfg)`; what the user's input caused (env kwargs the task rejects, a resume from other BC weights,
    no CUDA) becomes a `UserError`."""
    try:
        return train(cfg)
    except (TypeError, ValueError) as e:
        if isinstance(e, TypeError) and not cfg.env_kwargs:  # a TypeError without env kwargs is a bug: show it
            raise
        raise UserError(str(e)) from e


def cmd_train_fbc(args: argparse.Namespace) -> int:
    from vlagym.rl.fbc import train_filtered_bc

    cfg = fbc_config(args)
    result = _post_train(cfg, train_filtered_bc)
    print(f"trained {result['rounds']} rounds: {result['updates']} updates, {result['env_steps']} env steps")
    _report(result, Path(cfg.out))
    return EXIT_OK


def cmd_train_rl(args: argparse.Namespace) -> int:
    from vlagym.rl.ppo import train_rl

    cfg = rl_config(args)
    result = _post_train(cfg, train_rl)
    print(f"trained {result['timesteps']} timesteps ({result['env_steps']} env steps this run and before)")
    _report(result, Path(cfg.out))
    return EXIT_OK


def residual_config(args: argparse.Namespace) -> ResidualConfig:
    """The `ResidualConfig` of `vlagym train-residual` options."""
    return _with_task(ResidualConfig, args)


def cmd_train_residual(args: argparse.Namespace) -> int:
    from vlagym.rl.residual import train_residual

    cfg = residual_config(args)
    result = _post_train(cfg, train_residual)
    t = result["timing"]
    print(
        f"trained {result['timesteps']} timesteps in {result['train_minutes']:.1f} min "
        f"(sub-envs {t['env_s'] / 60:.1f} min, base inference {t['base_s'] / 60:.1f} min)"
    )
    print(f"teacher success rate at the last evaluation: {100 * result['success_rate']:.1f}%")
    print(f"teacher: {result['checkpoint']}")
    out = Path(cfg.out)
    print(f"learning curve: {out / 'eval' / 'curve.json'}; logs: {out / 'tb'} (tensorboard --logdir {out / 'tb'})")
    return EXIT_OK


def cmd_distill(args: argparse.Namespace) -> int:
    from vlagym.rl.residual import distill

    cfg = config_from_args(DistillConfig, args)
    summary = _post_train(cfg, distill)
    teacher, student, t = summary["teacher"], summary["student"], summary["seconds"]
    print(f"teacher: {teacher['successes']} of {teacher['episodes']} episodes succeeded (kept as demos)")
    print(f"student success rate: {100 * student['success_rate']:.1f}%")
    print(f"time: collection {t['collect']:.0f} s, training {t['train']:.0f} s, evaluation {t['evaluate']:.0f} s")
    print(f"checkpoint: {student['checkpoint']}")
    return EXIT_OK


def forward_deprecated(argv: Sequence[str]) -> list[str]:
    """``train-rl --algo filtered-bc ...`` → ``train-fbc ...`` with a warning on stderr (one release)."""
    argv = list(argv)
    if not argv or argv[0] != "train-rl":
        return argv
    for i, arg in enumerate(argv):
        if arg == f"--algo={DEPRECATED_ALGO}" or (arg == "--algo" and argv[i + 1 : i + 2] == [DEPRECATED_ALGO]):
            width = 1 if "=" in arg else 2
            print("vlagym: `train-rl --algo filtered-bc` is deprecated: use `vlagym train-fbc`", file=sys.stderr)
            return ["train-fbc", *argv[1:i], *argv[i + width :]]
    return argv


# ---------------------------------------------------------------------------- quickstart
def cmd_quickstart(args: argparse.Namespace) -> int:
    from vlagym.eval.evaluate import format_results
    from vlagym.eval.quickstart import run_quickstart

    summary = run_quickstart(config_from_args(QuickstartConfig, args))
    t = summary["timings_s"]
    evals = list(summary["results"])
    dagger = summary["dagger"]
    if dagger is not None:
        print(f"DAgger round: the BC policy solved {dagger['policy_successes']} of {dagger['episodes']} episodes")
    for name in evals:
        print(f"\n{summary['labels'][name]}:")
        print(format_results(summary["results"][name]))
    round_s = f", DAgger round {t['dagger']:.0f} s" if "dagger" in t else ""
    print(
        f"\ntime: demos {t['demos']:.0f} s, training {t['train']:.0f} s{round_s}, evaluation "
        f"{sum(t[name] for name in evals):.0f} s, total {summary['total_s'] / 60:.1f} min"
    )
    print(f"demos: {summary['demos']['path']}")
    print(f"checkpoint: {summary['checkpoint']}")
    print(f"logs: {summary['tensorboard']} (tensorboard --logdir {summary['tensorboard']})")
    print(f"results and videos: {', '.join(str(Path(summary['out']) / name) for name in evals)}")
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quickstart",
        help="the main job: demos -> train the VLA -> a DAgger round -> evaluate (built-in defaults)",
        description="Collect scripted demos for VLA-PickCup-v0, train the VLA by behaviour cloning, fine-tune it "
        "in one DAgger round (the policy acts, the scripted expert labels), and evaluate it on fresh seeds with the "
        "train and the held-out instruction wordings. No arguments needed.",
    )
    add_options(p, QuickstartConfig)
    p.set_defaults(handler=cmd_quickstart, config=lambda args: config_from_args(QuickstartConfig, args))
    p = sub.add_parser(
        "train-bc",
        help="behaviour cloning of the VLA on demo files",
        description="Train the VLA policy by behaviour cloning (checkpoints, TensorBoard logs, periodic evaluation); "
        "under torchrun every rank runs it (DDP). Policy options default to the demos' image size and cameras.",
    )
    add_options(p, BCConfig)
    p.set_defaults(handler=cmd_train_bc, config=bc_config)
    p = sub.add_parser(
        "train-dagger",
        help="DAgger rounds: a checkpoint acts, the scripted experts label, fine-tune on the aggregate",
        description="Each round runs the latest checkpoint on fresh seeds of every task whose expert can label "
        "another policy's states, stores the expert's action for each state it visits, and fine-tunes the "
        "checkpoint on the demos plus every round's DAgger files (the BC options are the fine-tuning's, per "
        "round); optionally evaluates each round on a suite.",
    )
    add_options(p, DaggerConfig, skip=[f"bc.{name}" for name in ROUND_SET_BC_FIELDS])
    p.set_defaults(handler=cmd_train_dagger, config=dagger_config)
    p = sub.add_parser(
        "train-fbc",
        help="post-train a BC checkpoint by success-filtered BC",
        description="Success-filtered behaviour cloning: each round runs the policy with exploration noise on fresh "
        "seeds, keeps its successes (optionally relabelled) and trains on them mixed with its demos.",
    )
    add_options(p, FilteredBCConfig)
    for retired in RETIRED_FBC_FLAGS:
        p.add_argument(retired, nargs="*", action=_Retired, help=argparse.SUPPRESS)
    p.set_defaults(handler=cmd_train_fbc, config=fbc_config)
    p = sub.add_parser(
        "train-rl",
        help="PPO post-training of a BC checkpoint, or PPO/SAC from scratch",
        description="PPO post-training of a BC checkpoint (stable-baselines3; chunk-level actions), or RL "
        "baselines from scratch on state observations (--from-scratch --algo ppo|sac).",
    )
    add_options(p, RLConfig, aliases={"total_timesteps": ["--timesteps"]})
    p.set_defaults(handler=cmd_train_rl, config=rl_config)
    p = sub.add_parser(
        "train-residual",
        help="residual RL on a frozen BC checkpoint (SAC on privileged state)",
        description="Train a small bounded residual by SAC on top of a frozen VLA checkpoint: the residual acts "
        "every control step on the simulator's state and the base's action (Policy Decorator-style warm-up and "
        "progressive exploration). Writes teacher checkpoints (base + residual) and their success curve.",
    )
    add_options(p, ResidualConfig, aliases={"total_timesteps": ["--timesteps"]})
    p.set_defaults(handler=cmd_train_residual, config=residual_config)
    p = sub.add_parser(
        "distill",
        help="clone a residual teacher's behaviour into an image-only VLA",
        description="Run a train-residual teacher (base VLA + residual) on fresh seeds, keep its successful "
        "episodes as demos and train a VLA of the base's architecture on them by behaviour cloning; evaluate it.",
    )
    add_options(p, DistillConfig)
    p.set_defaults(handler=cmd_distill, config=lambda args: config_from_args(DistillConfig, args))
