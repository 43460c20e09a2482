"""Per-step advantage weights for filtered BC: a success critic on the privileged state (AWR-style).

Success-filtered BC weighs every step of a successful episode alike, so the steps that decided the outcome (keep
the gripper closed right after the grasp, say) count no more than the steps any episode gets right. Advantage-
weighted regression (Peng et al. 2019; the M-step of EM policy search with a learned baseline) weighs each
imitated step by exp(A / beta) instead, where A is how much the step raised the chance of success.

The critic is asymmetric, as in PPO post-training: it reads the simulator's privileged `state` vector (object and
robot poses), which the actor never sees, plus the step index, and predicts V(s, t) = P(success | s at step t)
under the collecting (noisy) policy. It trains by binary cross-entropy on the outcomes of *every* collection
episode of the last few rounds, failures included: each state's label is its episode's success (the Monte Carlo
return of a 0/1 reward with no discount).

The advantage of step t of a successful episode of length T is the rise of V over the chunk the policy executes
from there: A_t = V(s_{t+k}) - V(s_t), k the policy's `n_action_steps`, with V = 1 once the episode has
succeeded (t + k >= T). Over an episode the advantages add up to about k (1 - V(s_0)), so a success on a state
the policy seldom solves weighs more, as with the "state" weighting, and within the episode the weight goes to
the chunks where success became likely. Each round the critic is refitted (warm-started) and the weights of
every kept success recomputed with it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import torch
from torch import Tensor, nn

from vlagym.io import atomic_write_npz
from vlagym.train.dataset import complete_demos

STATES_KEY = "rollout_states"  # the info key the in-env recorder fills at the end of every episode
_EPS = 1e-6


@dataclass
class EpisodeStates:
    """The privileged state before each action of one collection episode, and how it ended."""

    seed: int
    state: np.ndarray
    """(T, D) float32, row t the state the t-th action was chosen in"""
    success: bool


class SuccessCritic(nn.Module):
    """V(s, t) as logits: an MLP on the standardised (privileged state, step index).

    The standardisation is fitted once, on the first data it sees (`fit_inputs`), and kept in buffers, so the
    critic's inputs mean the same through a run and across a resume."""

    def __init__(self, state_dim: int, hidden: int = 256, layers: int = 2):
        super().__init__()
        if state_dim < 1:
            raise ValueError(f"state_dim must be >= 1, got {state_dim}")
        dims = [state_dim + 1] + [hidden] * layers
        blocks: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:], strict=True):
            blocks += [nn.Linear(a, b), nn.GELU()]
        self.net = nn.Sequential(*blocks, nn.Linear(dims[-1], 1))
        self.register_buffer("mean", torch.zeros(state_dim + 1))
        self.register_buffer("std", torch.ones(state_dim + 1))
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    @property
    def state_dim(self) -> int:
        return int(self.mean.shape[0]) - 1

    def fit_inputs(self, state: np.ndarray, step: np.ndarray) -> None:
        """Set the input standardisation from this data (once; later calls keep the first)."""
        if bool(self.fitted):
            return
        x = _inputs(state, step)
        self.mean.copy_(torch.from_numpy(x.mean(axis=0)))
        self.std.copy_(torch.from_numpy(x.std(axis=0)).clamp_min(_EPS))
        self.fitted.fill_(True)

    def forward(self, state: Tensor, step: Tensor) -> Tensor:
        """(N,) logits of success from (N, D) states at (N,) step indices."""
        if state.ndim != 2 or state.shape[1] != self.state_dim:
            raise ValueError(f"state must be (N, {self.state_dim}), got {tuple(state.shape)}")
        x = torch.cat([state.float(), step.float()[:, None]], dim=1)
        return self.net((x - self.mean) / self.std).squeeze(-1)

    @torch.no_grad()
    def value(self, state: np.ndarray, step: np.ndarray) -> np.ndarray:
        """(N,) P(success) of (N, D) states at (N,) steps."""
        logits = self(torch.from_numpy(np.asarray(state, np.float32)), torch.from_numpy(np.asarray(step)))
        return torch.sigmoid(logits).numpy().astype(np.float64)


def _inputs(state: np.ndarray, step: np.ndarray) -> np.ndarray:
    return np.concatenate([np.asarray(state, np.float64), np.asarray(step, np.float64)[:, None]], axis=1)


# ---------------------------------------------------------------------------- the critic's data
def states_path(out: str | os.PathLike, round_: int) -> Path:
    """``OUT/rollouts/round_<r>.states.npz``: the privileged states and outcomes of round r's episodes."""
    return Path(out) / "rollouts" / f"round_{round_:04d}.states.npz"


def write_states(path: Path, episodes: list[EpisodeStates]) -> None:
    """Every episode's states, one row per step, with its step index, episode success and seed (atomic)."""
    if not episodes:
        raise ValueError("no episodes to write")
    lengths = np.array([len(e.state) for e in episodes], np.int64)
    arrays = {
        "state": np.concatenate([np.asarray(e.state, np.float32) for e in episodes]),
        "step": np.concatenate([np.arange(n, dtype=np.int32) for n in lengths]),
        "success": np.repeat([bool(e.success) for e in episodes], lengths),
        "seed": np.array([e.seed for e in episodes], np.int64),
        "lengths": lengths,
    }
    atomic_write_npz(path, arrays)


def read_states(paths: list[Path]) -> dict[str, np.ndarray]:
    """The rows of several `write_states` files together: state (N, D), step (N,), success (N,)."""
    if not paths:
        raise ValueError("no state files to read")
    parts: dict[str, list[np.ndarray]] = {"state": [], "step": [], "success": []}
    for path in paths:
        with np.load(path) as f:
            for key in parts:
                parts[key].append(f[key])
    return {key: np.concatenate(value) for key, value in parts.items()}


def read_success_states(path: str | os.PathLike) -> list[np.ndarray]:
    """The ``obs/state`` array of each episode of a rollout (demos-layout) file, in its demos' order."""
    with h5py.File(path, "r") as f:
        data = f["data"]
        return [np.asarray(data[name]["obs"]["state"], np.float32) for name in complete_demos(data, Path(path))]


# ---------------------------------------------------------------------------- training and weights
def train_critic(
    critic: SuccessCritic,
    optimizer: torch.optim.Optimizer,
    data: dict[str, np.ndarray],
    updates: int,
    batch_size: int,
    rng: np.random.Generator,
) -> dict[str, float]:
    """`updates` Adam steps of binary cross-entropy on minibatches of `data` drawn by `rng`; returns the mean
    loss of the steps and, after them, the Brier score of the whole data and that of the constant predictor
    (the data's success rate), whose ratio tells how much the critic explains."""
    state, step = data["state"], data["step"]
    label = data["success"].astype(np.float32)
    n = len(label)
    if n == 0:
        raise ValueError("no states to train the critic on")
    critic.fit_inputs(state, step)
    critic.train()
    losses = []
    for _ in range(updates):
        idx = rng.integers(0, n, min(batch_size, n))
        logits = critic(torch.from_numpy(state[idx]), torch.from_numpy(step[idx]))
        loss = nn.functional.binary_cross_entropy_with_logits(logits, torch.from_numpy(label[idx]))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    critic.eval()
    brier, constant = brier_scores(critic, data)
    return {"loss": float(np.mean(losses)) if losses else float("nan"), "brier": brier, "brier_constant": constant}


def brier_scores(critic: SuccessCritic, data: dict[str, np.ndarray]) -> tuple[float, float]:
    """The critic's Brier score on `data` (mean squared error of P(success) against the 0/1 outcome), and that of
    the best constant predictor (the data's success rate): below it, the critic tells states apart."""
    label = data["success"].astype(np.float64)
    value = critic.value(data["state"], data["step"])
    return float(np.mean((value - label) ** 2)), float(np.var(label))


def episode_advantages(critic: SuccessCritic, state: np.ndarray, horizon: int) -> np.ndarray:
    """(T,) A_t = V(s_{t+horizon}) - V(s_t) of a *successful* episode's states (V = 1 from its end on)."""
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1 step, got {horizon}")
    t = len(state)
    value = critic.value(state, np.arange(t))
    after = np.ones(t)
    after[: max(t - horizon, 0)] = value[horizon:]
    return after - value


def advantage_weights(advantages: np.ndarray, beta: float, max_weight: float) -> np.ndarray:
    """exp(A / beta), capped at `max_weight` (AWR's clip: a few steps must not take over the batches)."""
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    return np.minimum(np.exp(np.minimum(np.asarray(advantages, np.float64) / beta, 50.0)), max_weight)


def effective_share(weights: np.ndarray) -> float:
    """Kish's effective sample size of the weights as a share of their count: 1 uniform, 1/n a single one."""
    w = np.asarray(weights, np.float64)
    if w.size == 0:
        return float("nan")
    return float(w.sum() ** 2 / (w.size * (w**2).sum()))


def make_critic(state_dim: int, seed: int, lr: float = 1e-3) -> tuple[SuccessCritic, torch.optim.Optimizer]:
    """A fresh critic, initialised from `seed` alone (the global torch stream is left as it was), and its Adam."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        critic = SuccessCritic(state_dim)
    return critic, torch.optim.Adam(critic.parameters(), lr=lr)


def critic_state(critic: SuccessCritic | None, optimizer: torch.optim.Optimizer | None) -> dict[str, Any] | None:
    """What a checkpoint keeps of the critic (None without one)."""
    if critic is None or optimizer is None:
        return None
    return {"state_dim": critic.state_dim, "model": critic.state_dict(), "optimizer": optimizer.state_dict()}
