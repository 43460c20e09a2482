"""The dataset section: `DemoDataset` samples/s through a DataLoader, plain and with `ImageAugment`, batched
and item by item, per worker count."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

from vlagym.perf.config import BenchConfig
from vlagym.perf.table import Table
from vlagym.perf.timing import interleaved, passes_note, ratios, summarise
from vlagym.perf.training import policy_config
from vlagym.perf.work import Work


def loader_samples_per_s(dataset: Any, workers: int, batch_size: int, epochs: int) -> float:
    """Samples/s of `epochs` shuffled epochs through one DataLoader (persistent workers, start-up included)."""
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        generator=torch.Generator().manual_seed(0),
    )
    start = time.perf_counter()
    count = 0
    for _ in range(epochs):
        for batch in loader:
            count += len(batch["index"])
    return count / (time.perf_counter() - start)


class _OneByOne:
    """A dataset seen through `__getitem__` alone, so a DataLoader fetches its batches item by item."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]


def bench_dataset(cfg: BenchConfig, work: Work) -> Table:
    """The dataset table: one row per DataLoader worker count."""
    from vlagym.train.augment import ImageAugment
    from vlagym.train.dataset import DemoDataset

    b, path = cfg.budget, work.demo_file()
    chunk = policy_config(cfg, "l1").chunk_size
    plain = DemoDataset(path, chunk_size=chunk)
    augmented = DemoDataset(path, chunk_size=chunk, augment=ImageAugment())
    # the same items fetched one by one: augmented per item, as before DemoDataset.__getitems__
    datasets = {"plain": plain, "augmented": augmented, "augmented item by item": _OneByOne(augmented)}
    rates = interleaved(
        {
            f"{name}, {workers} workers": functools.partial(
                loader_samples_per_s, data, workers, b.batch_size, b.dataset_epochs
            )
            for workers in b.dataset_workers
            for name, data in datasets.items()
        },
        cfg.repeats,
        "dataset",
    )
    first = b.dataset_workers[0]
    rows: list[dict[str, Any]] = []
    for workers in b.dataset_workers:
        p, a = rates[f"plain, {workers} workers"], rates[f"augmented, {workers} workers"]
        one = rates[f"augmented item by item, {workers} workers"]
        metrics = {
            "samples_per_s": p,
            "x_first": ratios(p, rates[f"plain, {first} workers"]),
            "augmented_samples_per_s": a,
            "augmented_x_first": ratios(a, rates[f"augmented, {first} workers"]),
            "augmented_one_by_one_per_s": one,
            "x_one_by_one": ratios(a, one),
        }
        rows.append({"num_workers": workers, **summarise(metrics)})
    source = "synthetic" if cfg.demos is None else Path(cfg.demos).name
    return Table(
        "dataset",
        "Dataset samples/s (DemoDataset through a DataLoader)",
        ["num_workers"],
        {
            "num_workers": "DataLoader workers",
            "samples_per_s": "samples/s",
            "x_first": "x first row",
            "augmented_samples_per_s": "samples/s with ImageAugment",
            "augmented_x_first": "x first row",
            "augmented_one_by_one_per_s": "augmented, fetched item by item",
            "x_one_by_one": "batched x item by item",
        },
        rows,
        [
            f"{source} demo file: {len(plain)} samples in {plain.num_episodes} episodes; batch {b.batch_size}, "
            f"chunks of {chunk} actions, {b.dataset_epochs} shuffled epoch(s) per row, worker start-up included",
            "batched: the DataLoader fetches a batch with DemoDataset.__getitems__, augmenting it in one pass; "
            "item by item: the same items through __getitem__ alone",
            passes_note(cfg.repeats),
        ],
    )
