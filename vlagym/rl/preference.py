"""Learning from the failed tries too: a pairwise preference term for filtered BC (DPO on the tries of one state).

Success-filtered BC imitates the successes and drops every failure, so it never learns what made a failure fail;
by the time its own successes look like its policy, the rounds stop adding information and success plateaus.
With ``group_size`` G > 1 a round tries each initial state G times, each try with exploration noise of its own,
so a state the policy solves on some tries and not on others gives *pairs*: a success and a failure from the
same start, which differ only by the noise drawn and its consequences. Direct preference optimisation (Rafailov
et al. 2023; on robot trajectories e.g. GRAPE, Zhang et al. 2024) turns such pairs into a bounded loss:

    loss = -log sigmoid(beta * (d_won - d_lost)),    d = mean over steps of log pi_theta(a | s) - log pi_ref(a | s)

with pi a Gaussian of std `sigma` (the collection's noise std, in normalised action units) around the policy's
chunk, so that log pi_theta(a | s) - log pi_ref(a | s) = (|a - mu_ref(s)|^2 - |a - mu_theta(s)|^2) / (2 sigma^2)
on the arm dimensions (the gripper is never perturbed). `pi_ref` is the policy that collected the round; its
chunk is computed once, when the pairs are built (before the round's updates move the weights). The loss pulls
the chunk toward the success's executed actions and away from the failure's, in proportion to how much the
current policy does not already prefer the success, and saturates once it does (unlike a plain negative
likelihood term, which would push away without bound).

Each side of a pair is compared over the same number of steps: the success ends at its success, the failure runs
on, so both are cut to the shorter length (what happened after the success cannot be compared). The samples are
the chunk starts (every `n_action_steps` steps: where the policy predicted what it then executed, open loop),
each with the observation, the executed actions of its chunk and the reference chunk. One round's pairs are
written as ``OUT/rollouts/round_<r>.pairs.npz``; an update draws `pairs` pairs from the last rounds and `chunks`
chunk starts of each side. Acting with temporal ensembling, or a flow head (which has no mean chunk), cannot use
the term.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from vlagym.io import atomic_write_npz
from vlagym.policies.vla import VLAPolicy

if TYPE_CHECKING:
    from vlagym.rl.filtered_bc import RolloutEpisode

PAIRS_SUFFIX = ".pairs.npz"
FAILURE_KEY = "rollout_failure"  # the info key the in-env recorder fills at the end of a failed episode
_REFERENCE_BATCH = 64


@dataclass
class PairBank:
    """One round's pairs: the chunk-start samples of every episode in a pair, once each, and per pair the rows of
    its success's (`won`) and its failure's (`lost`) samples, -1 padded."""

    images: dict[str, np.ndarray]
    """camera -> (N, H, W, 3) uint8 observation at each chunk start"""
    proprio: np.ndarray
    """(N, P) float32"""
    instructions: np.ndarray
    """(N,) str"""
    actions: np.ndarray
    """(N, n, A) float32: the actions executed from that chunk start, normalised"""
    reference: np.ndarray
    """(N, n, A) float32: the collecting policy's chunk there (its first n actions), normalised"""
    valid: np.ndarray
    """(N, n) bool: the steps within the pair's compared length"""
    won: np.ndarray
    """(pairs, M) int64"""
    lost: np.ndarray
    """(pairs, M) int64"""

    def __len__(self) -> int:
        return len(self.won)


def pair_tries(successes: Sequence[RolloutEpisode], failures: Sequence[RolloutEpisode]) -> list[tuple[Any, Any]]:
    """Every (success, failure) of one initial state (same seed), states in seed order, tries in list order."""
    failed: dict[int, list[Any]] = {}
    for e in failures:
        failed.setdefault(e.seed, []).append(e)
    return [(w, lost) for w in successes for lost in failed.get(w.seed, [])]


def _normalised(policy: VLAPolicy, actions: np.ndarray) -> np.ndarray:
    offset = policy.action_offset.detach().cpu().numpy()
    scale = policy.action_scale.detach().cpu().numpy()
    return ((actions - offset) / scale).astype(np.float32)


def build_bank(pairs: Sequence[tuple[Any, Any]], policy: VLAPolicy) -> PairBank | None:
    """The `PairBank` of `pairs` with the reference chunks of `policy` (the one that collected them; run in eval
    mode, without gradients); None when there are no pairs."""
    if not pairs:
        return None
    cfg = policy.config
    if cfg.head != "l1":
        raise ValueError(f"the preference term needs a policy with a mean chunk (head 'l1'), got head {cfg.head!r}")
    if cfg.temporal_ensemble:
        raise ValueError("the preference term needs chunks executed open loop, not the temporal ensemble")
    n = cfg.n_action_steps
    row_of: dict[tuple[int, int, int], int] = {}  # (episode id, chunk start, compared length) -> sample row
    samples: list[tuple[Any, int, int]] = []  # (episode, chunk start, compared length)
    won, lost = [], []
    for w, f in pairs:
        length = min(len(w.actions), len(f.actions))
        sides = []
        for e in (w, f):
            side = []
            for t in range(0, length, n):
                key = (id(e), t, length)
                if key not in row_of:
                    row_of[key] = len(samples)
                    samples.append((e, t, length))
                side.append(row_of[key])
            sides.append(side)
        won.append(sides[0])
        lost.append(sides[1])
    width = max(len(s) for s in won + lost)
    a_dim = samples[0][0].actions.shape[1]
    actions = np.zeros((len(samples), n, a_dim), np.float32)
    valid = np.zeros((len(samples), n), bool)
    for i, (e, t, length) in enumerate(samples):
        k = min(n, length - t)
        actions[i, :k] = e.actions[t : t + k]
        valid[i, :k] = True
    cams = list(samples[0][0].images)
    bank = PairBank(
        images={cam: np.stack([e.images[cam][t] for e, t, _ in samples]) for cam in cams},
        proprio=np.stack([e.proprio[t] for e, t, _ in samples]).astype(np.float32),
        instructions=np.array([e.instruction for e, _, _ in samples]),
        actions=_normalised(policy, actions),
        reference=np.zeros_like(actions),
        valid=valid,
        won=np.array([s + [-1] * (width - len(s)) for s in won], np.int64),
        lost=np.array([s + [-1] * (width - len(s)) for s in lost], np.int64),
    )
    was_training = policy.training
    policy.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(samples), _REFERENCE_BATCH):
                rows = np.arange(start, min(start + _REFERENCE_BATCH, len(samples)))
                chunk = policy.predict_action_chunk(_obs_batch(policy, bank, rows))
                bank.reference[rows] = _normalised(policy, chunk[:, :n].float().cpu().numpy())
    finally:
        policy.train(was_training)
    return bank


def _obs_batch(policy: VLAPolicy, bank: PairBank, rows: np.ndarray) -> dict[str, Any]:
    obs = {
        "images": {cam: bank.images[cam][rows] for cam in bank.images},
        "proprio": bank.proprio[rows],
        "instruction": [str(s) for s in bank.instructions[rows]],
    }
    return policy.batch_from_obs(obs)


def pairs_path(rollout: Path) -> Path:
    """``round_<r>.pairs.npz`` beside the round's rollout file ``round_<r>.hdf5``."""
    return rollout.with_name(rollout.stem + PAIRS_SUFFIX)


def write_bank(path: Path, bank: PairBank) -> None:
    """`bank` as one compressed npz, written to a temporary name and renamed."""
    arrays = {f.name: getattr(bank, f.name) for f in fields(PairBank) if f.name != "images"}
    arrays.update({f"images/{cam}": img for cam, img in bank.images.items()})
    atomic_write_npz(path, arrays, compressed=True)


def read_bank(path: Path) -> PairBank:
    with np.load(path, allow_pickle=False) as z:
        images = {key.split("/", 1)[1]: z[key] for key in z.files if key.startswith("images/")}
        return PairBank(images=images, **{f.name: z[f.name] for f in fields(PairBank) if f.name != "images"})


def draw_pairs(rng: np.random.Generator, banks: Sequence[PairBank], pairs: int, chunks: int) -> tuple[Any, ...]:
    """`pairs` pairs drawn uniformly over all pairs of `banks`, and `chunks` chunk starts of each side (uniformly,
    with replacement): (bank index, rows) with rows (pairs, 2, chunks), side 0 the success."""
    sizes = np.array([len(b) for b in banks])
    picks = rng.integers(0, sizes.sum(), size=pairs)
    bounds = np.cumsum(sizes)
    which = np.searchsorted(bounds, picks, side="right")
    out = []
    for b, p in zip(which, picks - (bounds - sizes)[which], strict=True):
        sides = []
        for side in (banks[b].won[p], banks[b].lost[p]):
            side = side[side >= 0]
            sides.append(side[rng.integers(0, len(side), size=chunks)])
        out.append((int(b), np.stack(sides)))
    return tuple(out)


def pair_batch(policy: VLAPolicy, banks: Sequence[PairBank], drawn: tuple[Any, ...]) -> dict[str, Any]:
    """The model batch of `draw_pairs`' rows (pairs x 2 sides x chunks, in that order) with their actions,
    reference chunks and valid steps as tensors."""
    parts: dict[str, list[Any]] = {"images": [], "proprio": [], "instruction": [], "a": [], "ref": [], "valid": []}
    for b, rows in drawn:
        bank, flat = banks[b], rows.reshape(-1)
        parts["images"].append({cam: bank.images[cam][flat] for cam in bank.images})
        parts["proprio"].append(bank.proprio[flat])
        parts["instruction"] += [str(s) for s in bank.instructions[flat]]
        parts["a"].append(bank.actions[flat])
        parts["ref"].append(bank.reference[flat])
        parts["valid"].append(bank.valid[flat])
    cams = list(parts["images"][0])
    obs = {
        "images": {cam: np.concatenate([p[cam] for p in parts["images"]]) for cam in cams},
        "proprio": np.concatenate(parts["proprio"]),
        "instruction": parts["instruction"],
    }
    batch = policy.batch_from_obs(obs)
    batch["pref_shape"] = (len(drawn), *drawn[0][1].shape)
    for key, dtype in (("a", torch.float32), ("ref", torch.float32), ("valid", torch.float32)):
        batch[f"pref_{key}"] = torch.as_tensor(np.concatenate(parts[key]), dtype=dtype, device=policy.device)
    return batch


def preference_loss(policy: VLAPolicy, batch: dict[str, Any], sigma: float, beta: float) -> tuple[Tensor, dict]:
    """The DPO loss of a `pair_batch` (see the module docstring) and its metrics: the mean margin
    beta * (d_won - d_lost) and the share of pairs the policy prefers the right way (margin > 0)."""
    cfg = policy.config
    n = batch["pref_a"].shape[1]
    mu = policy.head(policy.features(batch)).view(-1, cfg.chunk_size, cfg.action_dim)[:, :n]
    a, ref, valid = batch["pref_a"], batch["pref_ref"], batch["pref_valid"]
    theta_err = ((a - mu)[..., :-1] ** 2).sum(-1)  # the arm dims: the gripper is never perturbed
    ref_err = ((a - ref)[..., :-1] ** 2).sum(-1)
    log_ratio = ((ref_err - theta_err) * valid).sum(-1) / valid.sum(-1).clamp_min(1.0) / (2.0 * sigma**2)
    d = log_ratio.view(batch["pref_shape"]).mean(-1)  # (pairs, 2): each side's mean over its chunk starts
    margin = beta * (d[:, 0] - d[:, 1])
    loss = -F.logsigmoid(margin).mean()
    return loss, {"margin": float(margin.mean().detach()), "accuracy": float((margin > 0).float().mean())}
