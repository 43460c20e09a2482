"""Distributed sampling: every (rank, DataLoader worker) pair reads a disjoint share; together, every sample once."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, Dataset, get_worker_info

from vlagym.train.dataset import DemoDataset
from vlagym.train.sampler import ShardSampler, epoch_permutation, shard_indices

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
