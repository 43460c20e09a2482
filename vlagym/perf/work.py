"""`Work`: what the sections of one run share, each made once: a scratch folder, the demo file and the BC
checkpoint that the post-training sections start from."""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path

from vlagym.perf.config import BenchConfig
from vlagym.perf.synthetic import write_synthetic_demos
from vlagym.perf.training import bc_pass

logger = logging.getLogger(__name__)


class Work:
    """A run's scratch folder, its demo file (`cfg.demos`, else synthetic) and its BC checkpoint."""

    def __init__(self, cfg: BenchConfig, folder: Path):
        self.cfg, self.folder = cfg, folder
        self._demos: Path | None = Path(cfg.demos) if cfg.demos else None
        self.checkpoint: Path | None = None

    def demo_file(self) -> Path:
        """The demo file, written on first use when `cfg.demos` names none."""
        if self._demos is None:
            b = self.cfg.budget
            start = time.perf_counter()
            self._demos = write_synthetic_demos(
                self.folder / "synthetic.hdf5",
                self.cfg.task_list[0],
                b.demo_episodes,
                b.demo_steps,
                self.cfg.image_size,
            )
            logger.info("wrote a synthetic demo file in %.1f s", time.perf_counter() - start)
        return self._demos

    def bc_run(self) -> dict[str, float]:
        """One `train_bc` run from scratch in a fresh folder: its rates and wall time. The first run's final
        checkpoint becomes `checkpoint` (ppo and filtered-bc start from it)."""
        metrics, checkpoint = bc_pass(self.cfg, self.demo_file(), self.new_folder("bc"))
        self.checkpoint = self.checkpoint or checkpoint
        return metrics

    def bc_checkpoint(self) -> Path:
        """The BC checkpoint: the bc section's first run, or one run made now when that section did not run."""
        if self.checkpoint is None:
            self.bc_run()
        assert self.checkpoint is not None
        return self.checkpoint

    def new_folder(self, prefix: str) -> Path:
        """A fresh scratch folder (one per training pass)."""
        return Path(tempfile.mkdtemp(prefix=f"{prefix}_", dir=self.folder))
