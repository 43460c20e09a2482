"""`ResidualSAC`: SB3's SAC with the residual-RL changes of Policy Decorator, DAWN and ResFiT.

- n-step returns (SB3's `NStepReplayBuffer`): the sparse success reaches the critic in fewer updates.
- Critics with LayerNorm after every hidden linear layer (`LayerNormCritic`; DAWN: stable, faster residual RL).
- The actor's mean layer starts at zero, so the deterministic residual starts as exactly zero: the teacher
  begins as the base policy.
- Warm-up on base-policy transitions: for the first `learning_starts` timesteps the residual is off (the env
  executes the base's actions, the buffer stores a zero residual); then `critic_warmup_updates` gradient steps
  train the critics alone (the actor and the entropy coefficient are held), before the usual SAC updates.
- Progressive exploration: in an episode whose residual is off (`ResidualVecEnv.residual_on`), the stored
  action is zero, what the env executed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from stable_baselines3 import SAC
from stable_baselines3.common.policies import ContinuousCritic
from stable_baselines3.common.torch_layers import create_mlp
from stable_baselines3.sac.policies import SACPolicy
from torch import nn


class LayerNormCritic(ContinuousCritic):
    """SB3's twin Q-networks with a LayerNorm after every hidden linear layer."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        first = self.q_networks[0]
        linears = [m for m in first if isinstance(m, nn.Linear)]
        in_dim, arch = linears[0].in_features, [m.out_features for m in linears[:-1]]
        activation = type(next(m for m in first if not isinstance(m, nn.Linear)))
        self.q_networks = []
        for idx in range(self.n_critics):
            q_net = nn.Sequential(*create_mlp(in_dim, 1, arch, activation, post_linear_modules=[nn.LayerNorm]))
            self.add_module(f"qf{idx}", q_net)  # replaces SB3's network of the same name
            self.q_networks.append(q_net)


class ResidualSACPolicy(SACPolicy):
    """SAC's MLP policy with `LayerNormCritic` critics, a zero-initialised mean layer and a log-std layer that
    starts at `initial_log_std` everywhere (the exploration noise before tanh)."""

    def __init__(self, *args: Any, initial_log_std: float = 0.0, **kwargs: Any):
        self.initial_log_std = float(initial_log_std)
        super().__init__(*args, **kwargs)

    def make_critic(self, features_extractor=None) -> ContinuousCritic:  # noqa: ANN001 - SB3's signature
        critic_kwargs = self._update_features_extractor(self.critic_kwargs, features_extractor)
        return LayerNormCritic(**critic_kwargs).to(self.device)

    def _build(self, lr_schedule) -> None:  # noqa: ANN001 - SB3's signature
        super()._build(lr_schedule)
        with torch.no_grad():
            self.actor.mu.weight.zero_()
            self.actor.mu.bias.zero_()
            self.actor.log_std.weight.zero_()
            self.actor.log_std.bias.fill_(self.initial_log_std)


class ResidualSAC(SAC):
    """SAC with base-policy warm-up, critic-only updates first, and per-episode residual switching."""

    def __init__(self, *args: Any, critic_warmup_updates: int = 0, **kwargs: Any):
        self.critic_warmup_updates = int(critic_warmup_updates)
        self.critic_updates_done = 0
        self._critic_only = False  # set during the critic-only updates
        super().__init__(*args, **kwargs)

    def _sample_action(self, learning_starts: int, action_noise=None, n_envs: int = 1):  # noqa: ANN001
        if self.num_timesteps < learning_starts:  # warm-up: the base acts alone
            zeros = np.zeros((n_envs, *self.action_space.shape), np.float32)
            return zeros, zeros.copy()
        action, buffer_action = super()._sample_action(learning_starts, action_noise, n_envs)
        off = ~np.asarray(self.env.get_attr("residual_on")[0], bool)
        action[off], buffer_action[off] = 0.0, 0.0
        return action, buffer_action

    def train(self, gradient_steps: int, batch_size: int = 64) -> None:
        if self.critic_updates_done < self.critic_warmup_updates:
            n = self.critic_warmup_updates - self.critic_updates_done
            self._critic_only = True
            try:
                super().train(n, batch_size)
            finally:
                self._critic_only = False
            self.critic_updates_done += n
        super().train(gradient_steps, batch_size)

    def _update_learning_rate(self, optimizers) -> None:  # noqa: ANN001 - SB3's signature
        super()._update_learning_rate(optimizers)
        if self._critic_only:  # the actor and entropy coefficient are held still
            for optimizer in optimizers:
                if optimizer is not self.critic.optimizer:
                    for group in optimizer.param_groups:
                        group["lr"] = 0.0
