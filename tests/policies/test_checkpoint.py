"""Checkpoints: exact round trip, self-description, strict loading, clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import vlagym
from vlagym.policies import VLAConfig, VLAPolicy, read_checkpoint_config, save_checkpoint
from vlagym.policies.checkpoint import CONFIG_NAME, WEIGHTS_NAME
from vlagym.wrappers.language import Tokenizer
from vlagym.wrappers.normalize import NormStats

TINY = dict(image_size=32, vision_channels=(8, 16), hidden_dim=32, text_layers=1, chunk_size=4)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_tasks()


def batch(b: int = 2) -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "observation.images.front": torch.randint(0, 256, (b, 3, 32, 32), generator=g, dtype=torch.uint8),
        "observation.images.wrist": torch.randint(0, 256, (b, 3, 32, 32), generator=g, dtype=torch.uint8),
        "observation.proprio": torch.randn(b, 23, generator=g),
        "instruction": ["pick up the red cup", "pick up the blue cup"][:b],
    }


def trained_policy(tokenizer: Tokenizer, head: str, film_words: bool = False) -> VLAPolicy:
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(**TINY, head=head, normalization="quantile", film_words=film_words), tokenizer)
    policy.mark_words(["pick up the red cup"])  # film_words: the words the saved bag may read (else: nothing)
    rng = np.random.default_rng(0)
    policy.set_stats(
        NormStats.from_arrays({"action": rng.normal(1.0, 3.0, (200, 7)), "proprio": rng.normal(size=(200, 23))})
    )
    with torch.no_grad():  # weights away from their initial values, so a load that skipped them would show
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return policy.eval()


@pytest.mark.parametrize("head, film_words", [("l1", False), ("flow", False), ("l1", True)])
def test_round_trip_is_exact(tmp_path, tokenizer, head, film_words):
    policy = trained_policy(tokenizer, head, film_words)
    extra = {"env_id": "VLA-PickCup-v0", "env_kwargs": {"obs_mode": "rgb", "image_size": 32}}
    save_checkpoint(policy, tmp_path / "ckpt", extra=extra)
    loaded = VLAPolicy.from_pretrained(tmp_path / "ckpt")
    assert not loaded.training
    assert loaded.config == policy.config and loaded.tokenizer == policy.tokenizer
    assert loaded.norm_stats == policy.norm_stats
    a, b = policy.state_dict(), loaded.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    gen = lambda: torch.Generator().manual_seed(7)  # noqa: E731
    assert torch.equal(policy.predict_action_chunk(batch(), gen()), loaded.predict_action_chunk(batch(), gen()))
    meta = read_checkpoint_config(tmp_path / "ckpt")
    assert meta["extra"] == extra and meta["vlagym_version"] == vlagym.__version__
    assert meta["config"]["head"] == head and meta["tokenizer"]["vocab"] == tokenizer.vocab
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [CONFIG_NAME, WEIGHTS_NAME]  # no temp files


def test_strict_load_rejects_tampered_weights(tmp_path, tokenizer):
    folder = save_checkpoint(trained_policy(tokenizer, "l1"), tmp_path / "ckpt")
    state = load_file(str(folder / WEIGHTS_NAME))
    save_file({**state, "head.extra_bias": torch.zeros(3)}, str(folder / WEIGHTS_NAME))
    with pytest.raises(ValueError, match=r"unexpected keys \['head.extra_bias'\]"):
        VLAPolicy.from_pretrained(folder)
    del state["head.bias"]
    save_file(state, str(folder / WEIGHTS_NAME))
    with pytest.raises(ValueError, match=r"missing keys \['head.bias'\]"):
        VLAPolicy.from_pretrained(folder)
    state["head.bias"] = torch.zeros(5)
    save_file(state, str(folder / WEIGHTS_NAME))
    with pytest.raises(ValueError, match=r"head.bias: checkpoint \(5,\) vs model \(28,\)"):
        VLAPolicy.from_pretrained(folder)


def test_not_a_checkpoint_raises_clearly(tmp_path, tokenizer):
    with pytest.raises(ValueError, match="no such folder"):
        VLAPolicy.from_pretrained(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a policy checkpoint.*config.json"):
        VLAPolicy.from_pretrained(tmp_path / "empty")
    folder = save_checkpoint(trained_policy(tokenizer, "l1"), tmp_path / "ckpt")
    (folder / CONFIG_NAME).write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match="'something-else'"):
        VLAPolicy.from_pretrained(folder)


def test_unserialisable_extra_raises_before_writing(tmp_path, tokenizer):
    with pytest.raises(ValueError, match="JSON-serialisable"):
        save_checkpoint(trained_policy(tokenizer, "l1"), tmp_path / "ckpt", extra={"bad": object()})
    assert not (tmp_path / "ckpt").exists()
