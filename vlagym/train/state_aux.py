"""An auxiliary loss that makes a camera's features say where things stand (`BCConfig.aux_state_weight`).

A linear head reads the front camera's encoder output (what the trunk reads of that view) and regresses two
vectors of the privileged state the demos record: the target minus the grasp site and the goal minus the target
(`VLAEnv`'s task-state layout, the same on every task), in units of 10 cm, by L1, so that the view which shows
where the goal is from afar has to encode it. Measured in a DAgger round: StackBlocks, whose goal is a second
block like the target, +15 points against the same round without it; the other tasks unmoved (docs/multitask.md,
sessions 54-55; the same head on the trunk's output did worse and was not kept).

The head trains with the policy and stays out of its checkpoints' weights (acting never uses it); the training
state keeps it, so a resumed run continues exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from vlagym.envs.base import RELATIVE_AT, TASK_SCALARS_AT
from vlagym.envs.robot import Robot
from vlagym.policies.vla import VLAPolicy

STATE_KEY = "observation.state"
#: where target - grasp site (3) and goal - target (3) sit in the privileged state: the proprio, then the task state
#: (`VLAEnv._task_state`)
AUX_STATE = slice(Robot.PROPRIO_DIM + RELATIVE_AT, Robot.PROPRIO_DIM + TASK_SCALARS_AT)
UNIT = 0.1  # metres per regressed unit
CAMERA = "front"


class StateAuxiliary(nn.Module):
    """The head, and a hook that keeps the front encoder's output of each training forward pass for it.

    Call `loss(batch)` after the policy's forward pass on `batch`; `remove()` takes the hook off.
    """

    def __init__(self, policy: VLAPolicy):
        super().__init__()
        cfg = policy.config
        if CAMERA not in cfg.cameras:
            raise ValueError(f"aux_state_weight needs the {CAMERA!r} camera; the policy reads {list(cfg.cameras)}")
        if not isinstance(policy.vision, nn.ModuleDict):
            raise ValueError("aux_state_weight needs the policy's own image encoders (no pretrained vision backbone)")
        self.head = nn.Linear(cfg.hidden_dim, AUX_STATE.stop - AUX_STATE.start)
        self._features: Tensor | None = None
        self._hook = policy.vision[CAMERA].register_forward_hook(self._keep)

    def _keep(self, module: nn.Module, inputs: Any, output: Tensor) -> None:
        # The first training pass of a step: the whole batch (a subtask head may re-encode rows); passes in eval
        # mode (acting, evaluating the same module) are not a training step's.
        if self._features is None and module.training and torch.is_grad_enabled():
            self._features = output

    def loss(self, batch: Mapping[str, Any]) -> Tensor:
        """The L1 loss of the head on the features of the forward pass just run on `batch`."""
        feats, self._features = self._features, None
        if feats is None:
            raise RuntimeError("StateAuxiliary.loss needs the policy's forward pass on the batch first")
        state = torch.as_tensor(batch[STATE_KEY], device=feats.device).float()
        if state.ndim != 2 or state.shape[0] != feats.shape[0] or state.shape[1] < AUX_STATE.stop:
            raise ValueError(f"{STATE_KEY} must be (B, >= {AUX_STATE.stop}), got {tuple(state.shape)}")
        return (self.head(feats.float()) - state[:, AUX_STATE] / UNIT).abs().mean()

    def average_gradients(self, world: int) -> None:
        """With several ranks, the head's gradients averaged over them (the policy's are, by DDP)."""
        if world > 1:
            for p in self.head.parameters():
                if p.grad is not None:
                    dist.all_reduce(p.grad)
                    p.grad /= world

    def remove(self) -> None:
        self._hook.remove()
        self._features = None
