"""Distributed sampling without duplicates: every (rank, DataLoader worker) pair gets a disjoint share.

`ShardSampler` splits one seeded permutation per epoch between the ranks of a `torch.distributed` job,
with no padding: the ranks' shares differ by at most one sample and together cover every sample exactly
once. Inside a rank, the DataLoader hands whole batches of the sampler's indices to its workers in turn,
so the workers' shares are disjoint too. (torch's `DistributedSampler` instead repeats samples to even the
shares out, which double-counts them in an epoch.) Uneven shares mean uneven batch counts: wrap the DDP
training loop in `torch.distributed.algorithms.join.Join([model])` or stop every rank at the shortest
rank's batch count.

`shard_indices` is the same split for an `IterableDataset`, which has to divide its stream between
workers itself.

With `groups` and `shares` (e.g. the samples of each task, and each task's share of the batches), an epoch
is still `len(data)` draws, but group g fills round(share_g * len(data)) of them (`group_epoch_order`):
a small group's samples come several times per epoch, a large group's not all of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence, Sized

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Sampler, get_worker_info


def _world() -> tuple[int, int]:
    """(rank, world size) of the default process group, or (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def epoch_permutation(n: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The order of the `n` samples in `epoch`: the same on every rank, different every epoch."""
    if not shuffle:
        return np.arange(n)
    generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    return torch.randperm(n, generator=generator).numpy()


def group_counts(shares: Sequence[float], total: int) -> np.ndarray:
    """Integer draws per group summing to `total`, proportional to `shares` (largest remainders)."""
    p = np.asarray(shares, dtype=np.float64)
    if p.ndim != 1 or len(p) == 0 or not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError(f"shares must be non-negative with a positive sum, got {list(shares)!r}")
    exact = p / p.sum() * total
    counts = np.floor(exact).astype(np.int64)
    counts[np.argsort(-(exact - counts), kind="stable")[: total - int(counts.sum())]] += 1
    return counts


def group_epoch_order(groups: Sequence[np.ndarray], shares: Sequence[float], seed: int, epoch: int) -> np.ndarray:
    """The draws of `epoch` when group g (an array of sample indices) fills its share of them.

    The epoch has as many draws as the groups have samples. A group takes its draws in passes over its own
    seeded permutation, so within a group no sample comes twice before every other has come once; then the
    draws of all groups are shuffled together. The same (seed, epoch) gives the same order on every rank.
    """
    if len(groups) != len(shares):
        raise ValueError(f"{len(groups)} groups but {len(shares)} shares")
    if any(len(g) == 0 for g in groups):
        raise ValueError("every group needs at least one sample")
    counts = group_counts(shares, sum(len(g) for g in groups))
    generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    draws = []
    for group, count in zip(groups, counts, strict=True):
        group = np.asarray(group)
        passes = -(-int(count) // len(group))
        order = [group[torch.randperm(len(group), generator=generator).numpy()] for _ in range(passes)]
        draws.append(np.concatenate(order)[:count] if order else group[:0])
    mixed = np.concatenate(draws)
    return mixed[torch.randperm(len(mixed), generator=generator).numpy()]


class ShardSampler(Sampler[int]):
    """This rank's disjoint share of a seeded per-epoch permutation of the dataset, without padding.

    Args:
        data: the dataset (or its length).
        num_replicas: the number of ranks (default: the process group's world size, or 1).
        rank: this rank (default: the process group's rank, or 0).
        shuffle: permute the samples every epoch (`set_epoch`); otherwise go in index order.
        seed: the permutation seed; must be the same on every rank.
        groups, shares: sample indices of each group and the group's share of an epoch's draws
            (`group_epoch_order`; shuffling only). None: every sample once per epoch.

    Use it as `DataLoader(dataset, sampler=ShardSampler(dataset), ...)` and call `set_epoch(epoch)` before
    each epoch.
    """

    def __init__(
        self,
        data: Sized | int,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        groups: Sequence[np.ndarray] | None = None,
        shares: Sequence[float] | None = None,
    ) -> None:
        default_rank, default_world = _world()
        self.num_samples_total = data if isinstance(data, int) else len(data)
        self.num_replicas = default_world if num_replicas is None else int(num_replicas)
        self.rank = default_rank if rank is None else int(rank)
        if self.num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas!r}")
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank must be in [0, {self.num_replicas}), got {rank!r}")
        self.shuffle = shuffle
        self.seed = int(seed)
        self.epoch = 0
        if (groups is None) != (shares is None):
            raise ValueError("groups and shares go together")
        if groups is not None:
            if not shuffle:
                raise ValueError("groups and shares need shuffle=True")
            held = sum(len(g) for g in groups)
            if held != self.num_samples_total:
                raise ValueError(f"the groups hold {held} samples, the data {self.num_samples_total}")
            group_counts(shares, self.num_samples_total)  # checks the shares
        self.groups, self.shares = groups, shares

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of `epoch` (call on every rank with the same value)."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        if self.groups is not None:
            order = group_epoch_order(self.groups, self.shares, self.seed, self.epoch)
        else:
            order = epoch_permutation(self.num_samples_total, self.seed, self.epoch, self.shuffle)
        return iter(order[self.rank :: self.num_replicas].tolist())

    def __len__(self) -> int:
        return len(range(self.rank, self.num_samples_total, self.num_replicas))


def shard_indices(
    n: int,
    seed: int,
    epoch: int,
    shuffle: bool = True,
    rank: int | None = None,
    world_size: int | None = None,
    worker_id: int | None = None,
    num_workers: int | None = None,
) -> np.ndarray:
    """The sample indices one (rank, DataLoader worker) pair reads in `epoch`, for an `IterableDataset`.

    Defaults come from the process group and from `torch.utils.data.get_worker_info()` (call it inside
    `__iter__`). The shares of all pairs are disjoint and cover `range(n)` exactly once.
    """
    default_rank, default_world = _world()
    rank = default_rank if rank is None else rank
    world_size = default_world if world_size is None else world_size
    info = get_worker_info()
    if worker_id is None:
        worker_id = info.id if info is not None else 0
    if num_workers is None:
        num_workers = info.num_workers if info is not None else 1
    if not 0 <= rank < world_size or not 0 <= worker_id < num_workers:
        raise ValueError(
            f"need 0 <= rank < world_size and 0 <= worker_id < num_workers, got "
            f"rank={rank}, world_size={world_size}, worker_id={worker_id}, num_workers={num_workers}"
        )
    order = epoch_permutation(n, seed, epoch, shuffle)
    return order[rank::world_size][worker_id::num_workers]
