"""The VLA as a stable-baselines3 actor-critic policy, for PPO post-training of a behaviour-cloned checkpoint.

Actor: a diagonal Gaussian over the flat chunk of the first K actions (K = the checkpoint's `n_action_steps`,
what one RL step executes), in the VLA's normalised action units. Its mean is the VLA's L1 head on the trunk
features, so at the start of RL the deterministic action is the BC policy's chunk; its log-std is one learned,
state-independent parameter per chunk entry, initialised small (`log_std_init`). The flow head has no mean
to start from and no tractable likelihood, so it is refused.

Critic: an MLP value head, on the privileged ``state`` observation when `critic_state` (asymmetric
actor-critic: the actor never reads it), otherwise on the VLA's trunk features with the gradient stopped, so
that value regression never reshapes the features the actor acts on.

The policy is built from the checkpoint's description (config, tokenizer, statistics: `vla_meta`), never from
a module object, so SB3 can save its constructor arguments; the caller loads the weights afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch
from gymnasium import spaces
from stable_baselines3.common.distributions import DiagGaussianDistribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.preprocessing import preprocess_obs
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from torch import Tensor, nn

from vlagym.policies.config import VLAConfig
from vlagym.policies.vla import IMAGE_KEY, PROPRIO_KEY, VLAPolicy, policy_from_meta
from vlagym.rl.envs import IMAGE_PREFIX

META_KEYS = ("config", "tokenizer", "stats")
ACTOR_LAYERS = ("all", "head")


def vla_from_meta(meta: Mapping[str, Any]) -> VLAPolicy:
    """A `VLAPolicy` with the architecture, tokenizer and statistics of a checkpoint's config.json (random weights)."""
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise ValueError(f"VLA description lacks {missing}; it needs {list(META_KEYS)} (a checkpoint's config.json)")
    return policy_from_meta(meta)


def check_rl_config(config: VLAConfig) -> None:
    """Raise `ValueError` when the VLA cannot be an RL actor (flow head, temporal ensembling)."""
    if config.head != "l1":
        raise ValueError(
            f"RL post-training needs the 'l1' head (a Gaussian around its chunk); this checkpoint has head "
            f"{config.head!r}, whose chunk is sampled by integrating a flow with no tractable likelihood"
        )
    if config.temporal_ensemble:
        raise ValueError(
            "RL post-training executes each chunk open-loop (n_action_steps actions per RL step); this checkpoint "
            "uses temporal ensembling, which averages overlapping chunks every step: retrain without it"
        )


class VLAFeaturesExtractor(BaseFeaturesExtractor):
    """SB3 features extractor around a `VLAPolicy`: the trunk features of its image, instruction and proprio inputs.

    Reads ``"image_<cam>"`` (3xHxW, as SB3 hands them over: floats in [0, 1]) for every camera the VLA uses,
    ``"proprio"`` and ``"instruction"`` (token ids); any other key (``"state"``) is ignored.
    """

    def __init__(self, observation_space: spaces.Dict, vla_meta: Mapping[str, Any]):
        vla = vla_from_meta(vla_meta)
        super().__init__(observation_space, features_dim=vla.config.hidden_dim)
        if not isinstance(observation_space, spaces.Dict):
            raise TypeError(f"the VLA needs a Dict observation space, got {observation_space}")
        needed = [IMAGE_PREFIX + cam for cam in vla.config.cameras] + ["proprio", "instruction"]
        missing = [k for k in needed if k not in observation_space.spaces]
        if missing:
            raise KeyError(f"observation lacks {missing} for the VLA; it has {sorted(observation_space.spaces)}")
        self.vla = vla

    def batch(self, observations: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The VLA's batch of (preprocessed) SB3 observations."""
        batch = {IMAGE_KEY + cam: observations[IMAGE_PREFIX + cam] for cam in self.vla.config.cameras}
        batch[PROPRIO_KEY] = observations["proprio"]
        # Token ids travel as floats through SB3's preprocessing; they are small integers, exact in float32.
        batch["instruction_tokens"] = observations["instruction"].round().long()
        return batch

    def forward(self, observations: Mapping[str, Tensor]) -> Tensor:
        return self.vla.features(self.batch(observations))


class Evaluation(NamedTuple):
    """What one PPO minibatch needs from the policy; actor fields are None when only the critic is evaluated."""

    values: Tensor
    log_prob: Tensor | None
    entropy: Tensor | None
    mean: Tensor | None
    features: Tensor | None


def _value_mlp(in_dim: int, hidden: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), nn.Tanh()]
        in_dim = width
    layers.append(nn.Linear(in_dim, 1))
    return nn.Sequential(*layers)


class VLAActorCriticPolicy(ActorCriticPolicy):
    """SB3 `ActorCriticPolicy` whose actor is a BC-trained VLA (see the module docstring).

    Args:
        vla_meta: ``{"config", "tokenizer", "stats"}`` of the checkpoint (its config.json entries).
        critic_state: the value head reads the ``"state"`` observation (the env must be ``obs_mode="rgb+state"``).
        critic_hidden: hidden widths of the value MLP.
        critic_lr: learning rate of the value head (None: the actor's).
        log_std_lr: learning rate of the log-std (None: the actor's, in the actor's param group); with a small
            actor lr the std barely moves, a larger one lets PPO widen or narrow its exploration per entry.
        log_std_init: initial log-std of every chunk entry, in normalised action units.
        actor_layers: "all" (the whole VLA learns) or "head" (encoders and trunk frozen at the BC weights and
            run without a graph; only the action head and the log-std learn: a cheaper, more local update).
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Box,
        lr_schedule: Schedule,
        vla_meta: Mapping[str, Any],
        critic_state: bool = False,
        critic_hidden: Sequence[int] = (256, 256),
        critic_lr: float | None = None,
        log_std_lr: float | None = None,
        log_std_init: float = -2.0,
        actor_layers: str = "all",
        **kwargs: Any,
    ):
        if actor_layers not in ACTOR_LAYERS:
            raise ValueError(f"actor_layers must be one of {list(ACTOR_LAYERS)}, got {actor_layers!r}")
        self.actor_layers = actor_layers
        if kwargs.pop("use_sde", False):
            raise ValueError("the VLA policy does not support gSDE (use_sde=True)")
        for fixed in ("features_extractor_class", "features_extractor_kwargs", "share_features_extractor", "net_arch"):
            kwargs.pop(fixed, None)  # set here; present when SB3 rebuilds the policy from its saved arguments
        kwargs.pop("ortho_init", None)  # never: it would overwrite the BC weights' structure
        check_rl_config(VLAConfig.from_dict(dict(vla_meta["config"])))
        if critic_state and (not isinstance(observation_space, spaces.Dict) or "state" not in observation_space.spaces):
            raise ValueError("critic_state=True needs a 'state' observation (obs_mode='rgb+state')")
        self.vla_meta = dict(vla_meta)
        self.critic_state = bool(critic_state)
        self.critic_hidden = [int(w) for w in critic_hidden]
        self.critic_lr = critic_lr
        self.log_std_lr = log_std_lr
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            log_std_init=log_std_init,
            ortho_init=False,
            features_extractor_class=VLAFeaturesExtractor,
            features_extractor_kwargs={"vla_meta": self.vla_meta},
            share_features_extractor=True,
            **kwargs,
        )

    # ------------------------------------------------------------------ construction
    @property
    def vla(self) -> VLAPolicy:
        """The VLA inside (its trunk and head are the actor)."""
        return self.features_extractor.vla

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        for fixed in ("features_extractor_class", "features_extractor_kwargs", "ortho_init", "net_arch"):
            data.pop(fixed, None)
        data.update(
            vla_meta=self.vla_meta,
            critic_state=self.critic_state,
            critic_hidden=self.critic_hidden,
            critic_lr=self.critic_lr,
            log_std_lr=self.log_std_lr,
            actor_layers=self.actor_layers,
        )
        return data

    def _build(self, lr_schedule: Schedule) -> None:
        cfg = self.vla.config
        if not isinstance(self.action_space, spaces.Box) or len(self.action_space.shape) != 1:
            raise ValueError(f"the VLA acts with a flat Box chunk of actions, got {self.action_space}")
        n = self.action_space.shape[0]
        if n % cfg.action_dim or not 1 <= n // cfg.action_dim <= cfg.chunk_size:
            raise ValueError(
                f"action space of {n} entries is not k * action_dim ({cfg.action_dim}) with 1 <= k <= chunk_size "
                f"({cfg.chunk_size})"
            )
        if not isinstance(self.action_dist, DiagGaussianDistribution):
            raise ValueError(f"the VLA's actor is a diagonal Gaussian, got {type(self.action_dist).__name__}")
        self.chunk_entries = n
        self.log_std = nn.Parameter(torch.full((n,), float(self.log_std_init)))
        critic_in = self.observation_space["state"].shape[0] if self.critic_state else cfg.hidden_dim
        self.value_net = _value_mlp(critic_in, self.critic_hidden)
        if self.actor_layers == "head":
            self.vla.requires_grad_(False)
            self.vla.head.requires_grad_(True)
        actor = [p for p in self.vla.parameters() if p.requires_grad]
        base_lr = lr_schedule(1)
        critic_lr = base_lr if self.critic_lr is None else self.critic_lr
        self.optimizer = self.optimizer_class(
            [
                {"params": actor if self.log_std_lr is not None else [*actor, self.log_std], "lr": base_lr},
                {"params": list(self.value_net.parameters()), "lr": critic_lr},
                # a third group only when asked for, so optimiser states saved without it still load
                *([{"params": [self.log_std], "lr": self.log_std_lr}] if self.log_std_lr is not None else []),
            ],
            **self.optimizer_kwargs,
        )

    # ------------------------------------------------------------------ pieces
    def extract_features(self, obs: PyTorchObs, features_extractor: BaseFeaturesExtractor | None = None) -> Tensor:
        if self.actor_layers == "head":  # frozen trunk: no graph to keep
            with torch.no_grad():
                return super().extract_features(obs, features_extractor)
        return super().extract_features(obs, features_extractor)

    def preprocess(self, obs: PyTorchObs) -> PyTorchObs:
        """SB3's preprocessing of raw observation tensors (images to floats in [0, 1]): what the extractor reads."""
        return preprocess_obs(obs, self.observation_space, normalize_images=self.normalize_images)

    def action_mean(self, features: Tensor) -> Tensor:
        """Mean of the Gaussian: the first `chunk_entries` outputs of the VLA's head (normalised units)."""
        return self.vla.head(features)[:, : self.chunk_entries]

    def _values(self, obs: PyTorchObs, features: Tensor | None) -> Tensor:
        if self.critic_state:
            return self.value_net(obs["state"].float())
        assert features is not None
        return self.value_net(features.detach())

    def _distribution(self, features: Tensor) -> DiagGaussianDistribution:
        return self.action_dist.proba_distribution(self.action_mean(features), self.log_std)

    # ------------------------------------------------------------------ SB3 interface
    def forward(self, obs: PyTorchObs, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        features = self.extract_features(obs)
        distribution = self._distribution(features)
        actions = distribution.get_actions(deterministic=deterministic)
        log_prob = distribution.log_prob(actions)
        return actions.reshape((-1, *self.action_space.shape)), self._values(obs, features), log_prob

    def evaluate(self, obs: PyTorchObs, actions: Tensor, actor: bool = True) -> Evaluation:
        """Values, and with `actor` the log-probability of `actions`, the entropy and the mean. Without `actor`
        (critic warmup) the VLA runs without a graph, or not at all when the critic reads the state."""
        if not actor:
            features = None
            if not self.critic_state:
                with torch.no_grad():
                    features = self.extract_features(obs)
            return Evaluation(self._values(obs, features), None, None, None, None)
        features = self.extract_features(obs)
        mean = self.action_mean(features)
        distribution = self.action_dist.proba_distribution(mean, self.log_std)
        return Evaluation(
            self._values(obs, features), distribution.log_prob(actions), distribution.entropy(), mean, features
        )

    def evaluate_actions(self, obs: PyTorchObs, actions: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        ev = self.evaluate(obs, actions)
        return ev.values, ev.log_prob, ev.entropy

    def get_distribution(self, obs: PyTorchObs) -> DiagGaussianDistribution:
        return self._distribution(self.extract_features(obs))

    def predict_values(self, obs: PyTorchObs) -> Tensor:
        return self._values(obs, None if self.critic_state else self.extract_features(obs))
