"""Sub-instructions for `VLAPolicy` (`VLAConfig.subtasks`): which one a row acts on, and the batch it is encoded in.

A policy with subtasks has a classifier over ``1 + len(subtasks)`` classes on the trunk features of the
observation and the instruction it was given: class 0 keeps that instruction, class k acts on ``subtasks[k - 1]``.
Training batches carry both texts: ``task_instruction`` (what the episode was told, the classifier's input) and
``instruction`` (what the step's actions were labelled under: the task's or one of its sub-instructions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# `policy` below is a `vlagym.policies.vla.VLAPolicy` (which imports this module: annotated as Any, not imported).


def set_subtasks(policy: Any, subtasks: Sequence[str]) -> None:
    """Give `policy` these subtasks (a fine-tuning start): a new, untrained head unless it has them already."""
    subtasks = tuple(subtasks)
    if subtasks == policy.config.subtasks:
        return
    policy.config = dataclasses.replace(policy.config, subtasks=subtasks)
    head = nn.Linear(policy.config.hidden_dim, 1 + len(subtasks)) if subtasks else None
    policy.subtask_head = head.to(policy.device) if head is not None else None


def subtask_labels(subtasks: Sequence[str], instructions: Sequence[str], task_instructions: Sequence[str]) -> Tensor:
    """(B,) int64 classes: 0 where a row acts on its task's instruction, else 1 + the index of its sub-instruction."""
    index = {text: k + 1 for k, text in enumerate(subtasks)}
    labels = []
    for text, task_text in zip(instructions, task_instructions, strict=True):
        if text == task_text:
            labels.append(0)
        elif text in index:
            labels.append(index[text])
        else:
            raise ValueError(f"instruction {text!r} is neither its task's ({task_text!r}) nor one of {list(subtasks)}")
    return torch.tensor(labels, dtype=torch.long)


def with_instructions(batch: Mapping[str, Any], keys: Sequence[str], rows: Tensor, texts: Sequence[str]) -> dict:
    """The observation `keys` of `batch` at `rows` (bool (B,)), with instructions `texts` (one per selected row)."""
    picked = torch.nonzero(rows.cpu()).flatten()
    out: dict[str, Any] = {}
    for key in keys:
        x = torch.as_tensor(batch[key])
        out[key] = x[picked.to(x.device)]
    out["instruction"] = list(texts)
    return out


def recode(policy: Any, batch: Mapping[str, Any], feats: Tensor, pick: Tensor, keys: Sequence[str]) -> Tensor:
    """`feats` with the rows of class `pick` > 0 (B,) encoded again, from the observation `keys`, with their
    sub-instructions."""
    rows = pick > 0
    if not bool(rows.any()):
        return feats
    texts = [policy.config.subtasks[k - 1] for k in pick[rows].tolist()]
    feats = feats.clone()
    feats[rows] = policy.features(with_instructions(batch, keys, rows, texts))
    return feats


def training_features(
    policy: Any, batch: Mapping[str, Any], keys: Sequence[str]
) -> tuple[Tensor, Tensor, dict[str, float]]:
    """The features the batch's actions are predicted from, the subtask head's cross-entropy and its metrics.

    The head reads each row's `task_instruction`; each row's actions, the instruction they were labelled under.
    (One encoder pass over the batch and its sub-instruction rows together measured no faster than two calls:
    158 against 148 ms a step, runs/s52/step_cost.py.)"""
    labels = subtask_labels(policy.config.subtasks, batch["instruction"], batch["task_instruction"])
    labels = labels.to(policy.device)
    task_batch = {key: batch[key] for key in keys} | {"instruction": list(batch["task_instruction"])}
    feats = policy.features(task_batch)
    logits = policy.subtask_head(feats)
    loss = F.cross_entropy(logits, labels)
    accuracy = (logits.argmax(-1) == labels).float().mean().item()
    return recode(policy, task_batch, feats, labels, keys), loss, {"subtask_ce": loss.item(), "subtask_acc": accuracy}
