"""DAgger rounds in one command (`vlagym.eval.dagger_rounds.train_dagger`, `vlagym train-dagger`)."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from vlagym.cli import main
from vlagym.eval.dagger_config import ROUND_SEEDS, DaggerConfig, DaggerError
from vlagym.eval.dagger_rounds import SUMMARY_NAME, labelled_tasks, suite_summary, train_dagger
from vlagym.policies import VLAConfig, VLAPolicy, load_policy
from vlagym.policies.checkpoint import save_checkpoint
from vlagym.train.configs import BCConfig, DemoConfig
from vlagym.train.demos import collect_demos
from vlagym.wrappers.language import Tokenizer
from vlagym.wrappers.normalize import NormStats

TASK = "VLA-PickCup-v0"
SHORT = {"max_episode_steps": 10}
TINY = dict(image_size=32, vision_channels=(8,), hidden_dim=16, text_layers=1, text_heads=2, chunk_size=4,
            trunk_layers=1)  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny untrained checkpoint on 32 px images, and expert demos of PickCup and PushCube at that size."""
    import torch

    root = tmp_path_factory.mktemp("dagger_rounds")
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(**TINY), Tokenizer.from_tasks())
    rng = np.random.default_rng(0)
    actions = np.concatenate([rng.normal(0.0, 0.3, (200, 6)), rng.choice([-1.0, 1.0], (200, 1))], axis=1)
    policy.set_stats(NormStats.from_arrays({"action": actions, "proprio": rng.normal(0.0, 0.5, (200, 23))}))
    save_checkpoint(policy, root / "ckpt", extra={"env_id": TASK, "env_kwargs": {"image_size": 32}})
    demos = {}
    for task in (TASK, "VLA-PushCube-v0"):
        path = root / f"{task}.hdf5"
        collect_demos(DemoConfig(task=task, episodes=2, image_size=32, keep_failures=True, env_kwargs=SHORT,
                                 out=str(path), progress=False))  # fmt: skip
        demos[task] = str(path)
    return {"init": str(root / "ckpt"), "demos": demos}


def config(files, tmp_path, **kwargs) -> DaggerConfig:
    bc = BCConfig(dataset=[files["demos"][TASK]], steps=2, batch_size=4, checkpoint_every=0, progress=False)
    values = dict(init=files["init"], bc=bc, out=str(tmp_path / "run"), rounds=2, episodes=2, num_envs=1,
                  env_kwargs=SHORT, progress=False)  # fmt: skip
    return DaggerConfig(**{**values, **kwargs})


def seeds(path) -> list[int]:
    with h5py.File(path, "r") as f:
        return sorted(int(demo.attrs["seed"]) for demo in f["data"].values())


def test_each_round_acts_with_the_last_checkpoint_and_trains_on_every_round_so_far(files, tmp_path):
    cfg = config(files, tmp_path, task_episodes={TASK: 3})
    summary = train_dagger(cfg)
    first, second = summary["rounds"]
    assert first["acting"] == files["init"] and second["acting"] == first["checkpoint"]
    assert summary["checkpoint"] == second["checkpoint"] and summary["tasks"] == [TASK]
    run = tmp_path / "run"
    assert seeds(run / "round_1" / "demos" / "PickCup.hdf5") == [cfg.collect_seed + i for i in range(3)]
    assert seeds(run / "round_2" / "demos" / "PickCup.hdf5") == [cfg.collect_seed + ROUND_SEEDS + i for i in range(3)]
    assert first["collection"][TASK]["episodes"] == 3 and first["collection"][TASK]["policy_successes"] == 0
    trained_on = json.loads((run / "round_2" / "bc" / "bc_config.json").read_text())
    assert trained_on["dataset"] == [files["demos"][TASK]] + [
        str(run / f"round_{r}" / "demos" / "PickCup.hdf5") for r in (1, 2)
    ]
    assert trained_on["init"] == first["checkpoint"] and trained_on["steps"] == 2
    assert json.loads((run / SUMMARY_NAME).read_text()) == json.loads(json.dumps(summary))


def test_the_rounds_checkpoints_act_as_asked(files, tmp_path):
    summary = train_dagger(config(files, tmp_path, rounds=1, temporal_ensemble=True))
    assert summary["rounds"][0]["acting"] == files["init"]  # round 1's episodes act as init (chunks of 4)
    acting = load_policy(summary["checkpoint"]).config
    assert acting.temporal_ensemble and acting.n_action_steps == 1
    assert load_policy(files["init"]).config.n_action_steps == TINY["chunk_size"]


def test_a_resume_skips_finished_rounds_and_can_add_rounds(files, tmp_path):
    first = train_dagger(config(files, tmp_path, rounds=1))
    weights = tmp_path / "run" / "round_1" / "bc"
    before = {p: p.stat().st_mtime_ns for p in weights.rglob("*") if p.is_file()}
    with pytest.raises(DaggerError, match="already holds a DAgger run"):
        train_dagger(config(files, tmp_path, rounds=1))
    with pytest.raises(DaggerError, match=r"differ .*\['episodes'\]"):
        train_dagger(config(files, tmp_path, rounds=2, episodes=3, resume=True))
    summary = train_dagger(config(files, tmp_path, rounds=2, resume=True))
    assert summary["rounds"][0] == first["rounds"][0] and len(summary["rounds"]) == 2
    assert {p: p.stat().st_mtime_ns for p in before} == before  # round 1 was not run again


def test_a_round_killed_in_training_resumes_with_its_demos_as_they_are(files, tmp_path, monkeypatch):
    import vlagym.eval.dagger_rounds as rounds

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(rounds, "_fine_tune", killed)
    with pytest.raises(KeyboardInterrupt):
        train_dagger(config(files, tmp_path, rounds=1))
    demos = tmp_path / "run" / "round_1" / "demos" / "PickCup.hdf5"
    stamp = demos.stat().st_mtime_ns
    collected = json.loads((tmp_path / "run" / "round_1" / "seconds.json").read_text())
    assert set(collected) == {"collect"}  # the stage that finished before the kill
    monkeypatch.undo()
    summary = train_dagger(config(files, tmp_path, rounds=1, resume=True))
    assert summary["rounds"][0]["collection"][TASK]["episodes"] == 2
    assert demos.stat().st_mtime_ns == stamp  # complete: the resume ran no episode again
    # ... and it reports the collection's own seconds, not those of its skip
    assert summary["rounds"][0]["seconds"]["collect"] == collected["collect"]
    assert set(summary["rounds"][0]["seconds"]) == {"collect", "train"}


def test_the_tasks_default_to_those_whose_expert_can_label(files, tmp_path):
    bc = BCConfig(dataset=list(files["demos"].values()), steps=2, progress=False)
    assert labelled_tasks(config(files, tmp_path, bc=bc)) == [TASK]  # PushCube's expert is no labeller
    with pytest.raises(DaggerError, match="not collected"):
        labelled_tasks(config(files, tmp_path, bc=bc, task_episodes={"VLA-PushCube-v0": 5}))
    (tmp_path / "notes.txt").write_text("not a demo file")
    with pytest.raises(DaggerError, match="notes.txt' is not a vlagym demo file"):
        labelled_tasks(config(files, tmp_path, bc=BCConfig(dataset=[str(tmp_path / "notes.txt")])))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"tasks": ["VLA-Nope-v0"]}, "unknown task 'VLA-Nope-v0'"),
        ({"tasks": ["VLA-PushCube-v0"]}, "cannot label another policy's states"),
        ({"tasks": [TASK], "task_episodes": {"VLA-StackBlocks-v0": 3}}, "not collected"),
        ({"episodes": 0}, "episodes must be an integer >= 1"),
        ({"rounds": 0}, "rounds must be an integer >= 1"),
        ({"task_episodes": {TASK: ROUND_SEEDS + 1}}, "at most 100000"),
        ({"env_kwargs": {"image_size": 64}}, r"may not set \['image_size'\]"),
        ({"vectorization": "threads"}, "vectorization must be one of"),
        ({"suite": "nope"}, "nope"),
        ({"init": "missing_folder"}, "init: checkpoint folder 'missing_folder' does not exist"),
        ({"n_action_steps": 2, "temporal_ensemble": True}, "not both"),
        ({"n_action_steps": 0}, "n_action_steps must be an integer >= 1"),
        ({"n_action_steps": 5}, "n_action_steps=5 must be <= chunk_size=4"),
    ],
)
def test_bad_settings_are_refused_by_name(files, tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        config(files, tmp_path, **kwargs)


def test_the_starting_checkpoint_is_init_not_bc_init(files, tmp_path):
    bc = BCConfig(dataset=[files["demos"][TASK]], init=files["init"], policy=VLAConfig(**TINY))
    with pytest.raises(DaggerError, match="bc.init is set by each round"):
        config(files, tmp_path, bc=bc)


def test_suite_summary_reads_the_bundle():
    cell = lambda rate: {"success_rate": rate}  # noqa: E731
    bundle = {
        "results": {"A": {"train": cell(1.0), "camera": cell(0.5)}, "B": {"train": cell(0.0), "camera": cell(0.5)}},
        "suite_average": {"success": {"mean": 0.5, "ci95": [0.2, 0.8]}},
    }
    assert suite_summary(bundle) == {
        "mean": 0.5, "ci95": [0.2, 0.8], "splits": {"train": 0.5, "camera": 0.5}, "train": {"A": 1.0, "B": 0.0},
    }  # fmt: skip


def test_the_command_line(files, tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["train-dagger", "--init", files["init"], "--dataset", files["demos"][TASK], "--steps", "2",
            "--batch-size", "4", "--rounds", "1", "--episodes", "2", "--num-envs", "1", "--env-kwargs",
            json.dumps(SHORT), "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "round 1: the acting policy solved 0 of 2 DAgger episodes" in printed
    assert json.loads((out / "dagger_config.json").read_text())["bc"]["steps"] == 2
    assert main(argv) == 2  # the folder holds a run: one line, exit 2
    assert "already holds a DAgger run" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--dataset", "x.hdf5"], "--init is required"),
        (["--init", "{init}"], "--dataset is required"),
        (["--init", "{init}", "--dataset", "{demos}", "--tasks", "VLA-PushCube-v0"], "cannot label"),
        (["--init", "{init}", "--dataset", "{demos}", "--episodes", "0"], "--episodes must be an integer >= 1"),
        (["--init", "{init}", "--dataset", "{demos}", "--n-action-steps", "2", "--temporal-ensemble"], "not both"),
    ],
)
def test_bad_command_lines_exit_2_with_one_line(files, capsys, argv, match):
    argv = [a.format(init=files["init"], demos=files["demos"][TASK]) for a in argv]
    assert main(["train-dagger", *argv]) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err


def test_the_round_sets_the_fine_tunings_own_folders(capsys):
    assert main(["train-dagger", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--init" in text and "--steps" in text and "--task-balance" in text
    assert "--bc-out" not in text and "--bc-init" not in text and "--film-text" not in text


def test_each_round_is_evaluated_on_the_suite(files, tmp_path, monkeypatch):
    import vlagym.eval.suite_run as suite_run

    seen = []

    def fake_suite(cfg):
        seen.append(cfg)
        cell = {"success_rate": 0.25}
        return {"results": {TASK: {"train": cell}}, "suite_average": {"success": {"mean": 0.25, "ci95": [0.1, 0.5]}}}

    monkeypatch.setattr(suite_run, "run_suite", fake_suite)
    summary = train_dagger(config(files, tmp_path, rounds=2, suite="vlagym-pick", sequential_width=0.3))
    assert [cfg.policy for cfg in seen] == [r["checkpoint"] for r in summary["rounds"]]
    assert [cfg.out for cfg in seen] == [str(tmp_path / "run" / f"round_{r}" / "suite") for r in (1, 2)]
    assert all(cfg.suite == "vlagym-pick" and cfg.sequential_width == 0.3 for cfg in seen)
    assert summary["rounds"][1]["suite"] == {"mean": 0.25, "ci95": [0.1, 0.5], "splits": {"train": 0.25},
                                             "train": {TASK: 0.25}}  # fmt: skip
    assert set(summary["rounds"][1]["seconds"]) == {"collect", "train", "evaluate"}


def test_a_resume_starts_an_added_rounds_suite_afresh_and_continues_an_interrupted_one(files, tmp_path, monkeypatch):
    import vlagym.eval.suite_run as suite_run
    from vlagym.eval.journal import JOURNAL_DIR, RUN_JSON

    seen = []

    def fake_suite(cfg):
        seen.append(cfg)
        return {
            "results": {TASK: {"train": {"success_rate": 0.5}}},
            "suite_average": {"success": {"mean": 0.5, "ci95": [0.4, 0.6]}},
        }

    monkeypatch.setattr(suite_run, "run_suite", fake_suite)
    train_dagger(config(files, tmp_path, rounds=1, suite="vlagym-pick"))
    train_dagger(config(files, tmp_path, rounds=2, suite="vlagym-pick", resume=True))
    # A suite that was killed leaves its journal: the resume continues it.
    journal = tmp_path / "run" / "round_3" / "suite" / JOURNAL_DIR
    journal.mkdir(parents=True)
    (journal / RUN_JSON).write_text("{}")
    summary = train_dagger(config(files, tmp_path, rounds=3, suite="vlagym-pick", resume=True))
    assert [cfg.out.split("/")[-2] for cfg in seen] == ["round_1", "round_2", "round_3"]
    assert [cfg.resume for cfg in seen] == [False, False, True]
    assert len(summary["rounds"]) == 3
