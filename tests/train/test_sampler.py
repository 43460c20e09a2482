"""Distributed sampling: every (rank, DataLoader worker) pair reads a disjoint share; together, every sample once."""

from __future__ import annotations

import json
import socket
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset, get_worker_info

from vlagym.train.dataset import DemoDataset
from vlagym.train.sampler import ShardSampler, epoch_permutation, group_counts, group_epoch_order, shard_indices

WORLD = 2
WORKERS = 2
EPOCHS = 2


class _WorkerTagged(Dataset):
    """The sample ids of a DemoDataset, each tagged with the DataLoader worker that read it."""

    def __init__(self, inner: DemoDataset) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> tuple[int, int]:
        info = get_worker_info()
        return self.inner[i]["index"], (info.id if info is not None else -1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, port: int, demo_file: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        dataset = _WorkerTagged(DemoDataset(demo_file, chunk_size=3))
        dataset.inner[0]  # this process now holds an open HDF5 handle that the forked workers must not use
        sampler = ShardSampler(dataset, seed=5)  # rank and world size from the process group
        # mp.spawn makes "spawn" this process's default start method (torchrun does not); forking the
        # workers keeps the test fast, and it exercises the per-process reopening of the HDF5 file.
        loader = DataLoader(dataset, batch_size=3, sampler=sampler, num_workers=WORKERS, multiprocessing_context="fork")
        seen = {}
        for epoch in range(EPOCHS):
            sampler.set_epoch(epoch)
            pairs = [(int(i), int(w)) for ids, workers in loader for i, w in zip(ids, workers, strict=True)]
            gathered: list = [None] * WORLD
            dist.all_gather_object(gathered, pairs)
            seen[epoch] = gathered
        if rank == 0:
            Path(out).write_text(json.dumps(seen))
    finally:
        dist.destroy_process_group()


def test_two_ranks_two_workers_cover_every_sample_once_per_epoch(demo_file_factory, tmp_path):
    demo_file = demo_file_factory(lengths=(9, 4, 11, 7))  # 31 samples: uneven shares on purpose
    out = tmp_path / "seen.json"
    mp.spawn(_rank_main, args=(_free_port(), str(demo_file), str(out)), nprocs=WORLD, join=True)
    seen = json.loads(out.read_text())
    orders = []
    for epoch in map(str, range(EPOCHS)):
        shares: dict[tuple[int, int], list[int]] = {}
        for rank, pairs in enumerate(seen[epoch]):
            for index, worker in pairs:
                shares.setdefault((rank, worker), []).append(index)
        assert set(shares) == {(r, w) for r in range(WORLD) for w in range(WORKERS)}  # all four pairs read
        everything = [i for share in shares.values() for i in share]
        assert sorted(everything) == list(range(31)), "every sample exactly once, no padding duplicates"
        for a in shares:
            for b in shares:
                assert a == b or not set(shares[a]) & set(shares[b]), f"{a} and {b} overlap"
        orders.append([i for pairs in seen[epoch] for i, _ in pairs])
    assert orders[0] != orders[1], "set_epoch reshuffles"


def test_sampler_shares_without_a_process_group():
    shares = [list(ShardSampler(10, num_replicas=3, rank=r, seed=1)) for r in range(3)]
    assert [len(s) for s in shares] == [4, 3, 3]
    assert [len(ShardSampler(10, num_replicas=3, rank=r)) for r in range(3)] == [4, 3, 3]
    assert sorted(sum(shares, [])) == list(range(10))
    assert list(ShardSampler(5, shuffle=False)) == [0, 1, 2, 3, 4]
    sampler = ShardSampler(50, num_replicas=1, rank=0, seed=1)
    first = list(sampler)
    assert first == list(sampler), "same epoch, same order"
    sampler.set_epoch(1)
    assert list(sampler) != first and sorted(sampler) == list(range(50))
    assert list(ShardSampler(50, num_replicas=1, rank=0, seed=2)) != first
    with pytest.raises(ValueError, match="rank"):
        ShardSampler(10, num_replicas=2, rank=2)


def test_shard_indices_for_iterable_datasets():
    parts = [
        shard_indices(23, seed=0, epoch=3, rank=r, world_size=2, worker_id=w, num_workers=3).tolist()
        for r in range(2)
        for w in range(3)
    ]
    flat = sum(parts, [])
    assert sorted(flat) == list(range(23)) and len(flat) == len(set(flat))
    assert torch.equal(torch.as_tensor(epoch_permutation(23, 0, 3)), torch.as_tensor(epoch_permutation(23, 0, 3)))
    with pytest.raises(ValueError, match="worker_id"):
        shard_indices(5, seed=0, epoch=0, rank=0, world_size=1, worker_id=2, num_workers=2)


def test_group_counts_are_proportional_and_sum_to_the_total():
    assert group_counts([1, 1, 2], 8).tolist() == [2, 2, 4]
    counts = group_counts([1, 1, 1], 10)
    assert counts.sum() == 10 and sorted(counts.tolist()) == [3, 3, 4]
    for bad in ([], [0, 0], [1, -1], [float("nan")]):
        with pytest.raises(ValueError, match="shares"):
            group_counts(bad, 5)


def test_group_epoch_order_gives_each_group_its_share_cycling_within_it():
    small, large = np.arange(0, 3), np.arange(3, 23)  # 3 and 20 samples, equal shares of the 23 draws
    order = group_epoch_order([small, large], [1.0, 1.0], seed=0, epoch=0)
    assert len(order) == 23
    seen = Counter(order.tolist())
    assert sum(seen[i] for i in small) == 12 and sum(seen[i] for i in large) == 11
    assert sorted(seen[i] for i in small) == [4, 4, 4]  # 12 draws over 3 samples: each 4 times
    assert all(seen[i] <= 1 for i in large) and sum(1 for i in large if seen[i]) == 11  # no repeats
    # The groups are mixed, not laid end to end; the order is a function of (seed, epoch).
    assert set(order[:12].tolist()) & set(large.tolist())
    assert np.array_equal(order, group_epoch_order([small, large], [1.0, 1.0], seed=0, epoch=0))
    assert not np.array_equal(order, group_epoch_order([small, large], [1.0, 1.0], seed=0, epoch=1))
    with pytest.raises(ValueError, match="2 groups but 1 shares"):
        group_epoch_order([small, large], [1.0], seed=0, epoch=0)


def test_grouped_sampler_splits_one_weighted_order_between_ranks():
    groups, shares = [np.arange(0, 4), np.arange(4, 30)], [3.0, 1.0]
    ranks = [ShardSampler(30, num_replicas=2, rank=r, seed=5, groups=groups, shares=shares) for r in range(2)]
    for sampler in ranks:
        sampler.set_epoch(2)
    merged = [None] * 30
    merged[0::2], merged[1::2] = list(ranks[0]), list(ranks[1])
    assert merged == group_epoch_order(groups, shares, seed=5, epoch=2).tolist()
    assert sum(1 for i in merged if i < 4) == 23  # 3/4 of the 30 draws: 22.5, the tie to the first group
    with pytest.raises(ValueError, match="hold 4 samples, the data 30"):
        ShardSampler(30, groups=[np.arange(4)], shares=[1.0])
    with pytest.raises(ValueError, match="together"):
        ShardSampler(30, groups=groups)


def test_task_samples_group_the_samples_by_the_demos_task(demo_file_factory):
    path = demo_file_factory(lengths=(5, 3, 7))
    with h5py.File(path, "a") as f:
        f["data"][sorted(f["data"])[1]].attrs["task"] = "VLA-PushCube-v0"
    tasks = DemoDataset(path).task_samples()
    assert list(tasks) == ["VLA-PickCup-v0", "VLA-PushCube-v0"]
    assert tasks["VLA-PickCup-v0"].tolist() == [0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 14]
    assert tasks["VLA-PushCube-v0"].tolist() == [5, 6, 7]
