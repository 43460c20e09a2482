"""`VLAPPO`: SB3's PPO for the VLA actor-critic, with a penalty toward the BC policy and a critic warmup.

SB3's PPO update has no hook for either, so `train` writes the update out once more: the clipped surrogate,
the value loss and the entropy bonus as SB3 computes them, plus

* ``bc_coef``: the squared distance between the action mean and the BC policy's (for two Gaussians of equal
  std it is the KL divergence up to the factor 1 / (2 std^2)), pulling the policy back toward what it cloned;
* ``critic_warmup_steps``: until then only the value head learns and the actor is frozen, so the first actor
  updates do not follow the advantages of an untrained critic.

The learning rates of actor and critic are the optimiser's param groups' own (constant), not SB3's schedule.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from stable_baselines3 import PPO
from stable_baselines3.common.utils import explained_variance

from vlagym.policies.vla import VLAPolicy
from vlagym.rl.sb3_policy import VLAActorCriticPolicy


class VLAPPO(PPO):
    """SB3's PPO for `VLAActorCriticPolicy`, with an optional penalty toward the BC policy's action mean and a
    critic warmup (see the module docstring). The learning rates of actor and critic are the optimiser's
    param groups' own (constant), not SB3's single schedule."""

    def __init__(self, *args: Any, bc_coef: float = 0.0, critic_warmup_steps: int = 0, **kwargs: Any):
        self.bc_coef = float(bc_coef)
        self.critic_warmup_steps = int(critic_warmup_steps)
        self._reference: VLAPolicy | None = None
        super().__init__(*args, **kwargs)
        if not isinstance(self.policy, VLAActorCriticPolicy):
            raise TypeError(f"VLAPPO trains a VLAActorCriticPolicy, got {type(self.policy).__name__}")

    def set_reference(self, vla: VLAPolicy) -> None:
        """The frozen BC policy the penalty pulls toward (a copy is kept)."""
        ref = copy.deepcopy(vla).to(self.device).eval()
        self._reference = ref.requires_grad_(False)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_reference"]

    def _reference_mean(self, obs: Any, features: torch.Tensor | None = None) -> torch.Tensor:
        """The BC policy's action mean on `obs`; with a frozen trunk (actor_layers="head") the policy's
        `features` are the BC trunk's, so only the BC head runs."""
        if self._reference is None:
            raise RuntimeError("bc_coef > 0 needs the BC policy: call set_reference(vla) before learning")
        if features is not None and self.policy.actor_layers == "head":
            with torch.no_grad():
                return self._reference.head(features)[:, : self.policy.chunk_entries]
        extractor = self.policy.features_extractor
        with torch.no_grad():
            batch = extractor.batch(self.policy.preprocess(obs))
            return self._reference.head(self._reference.features(batch))[:, : self.policy.chunk_entries]

    def train(self) -> None:  # noqa: C901 - the PPO update, one loop
        self.policy.set_training_mode(True)
        clip = self.clip_range(self._current_progress_remaining)
        actor = self.num_timesteps > self.critic_warmup_steps
        logs: dict[str, list[float]] = defaultdict(list)
        stop = False
        for _ in range(self.n_epochs):
            for data in self.rollout_buffer.get(self.batch_size):
                ev = self.policy.evaluate(data.observations, data.actions, actor=actor)
                value_loss = F.mse_loss(data.returns, ev.values.flatten())
                loss = self.vf_coef * value_loss
                logs["value_loss"].append(value_loss.item())
                if actor:
                    adv = data.advantages
                    if self.normalize_advantage and len(adv) > 1:
                        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    log_ratio = ev.log_prob - data.old_log_prob
                    ratio = log_ratio.exp()
                    policy_loss = -torch.min(adv * ratio, adv * ratio.clamp(1 - clip, 1 + clip)).mean()
                    entropy_loss = -ev.entropy.mean()
                    loss = loss + policy_loss + self.ent_coef * entropy_loss
                    if self.bc_coef > 0:
                        bc_loss = (ev.mean - self._reference_mean(data.observations, ev.features)).pow(2).mean()
                        loss = loss + self.bc_coef * bc_loss
                        logs["bc_loss"].append(bc_loss.item())
                    with torch.no_grad():
                        approx_kl = ((ratio - 1) - log_ratio).mean().item()
                    logs["policy_gradient_loss"].append(policy_loss.item())
                    logs["entropy_loss"].append(entropy_loss.item())
                    logs["clip_fraction"].append(((ratio - 1).abs() > clip).float().mean().item())
                    logs["approx_kl"].append(approx_kl)
                    if self.target_kl is not None and approx_kl > 1.5 * self.target_kl:
                        stop = True  # this minibatch already moved too far: do not step on it
                        break
                self.policy.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()
                logs["loss"].append(loss.item())
            self._n_updates += 1
            if stop:
                break
        for name, values in logs.items():
            self.logger.record(f"train/{name}", float(np.mean(values)))
        buf = self.rollout_buffer
        self.logger.record("train/explained_variance", explained_variance(buf.values.flatten(), buf.returns.flatten()))
        self.logger.record("train/std", self.policy.log_std.exp().mean().item())
        self.logger.record("train/actor_frozen", float(not actor))
        self.logger.record("train/actor_lr", self.policy.optimizer.param_groups[0]["lr"])
        self.logger.record("train/critic_lr", self.policy.optimizer.param_groups[1]["lr"])
        self.logger.record("train/clip_range", clip)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
