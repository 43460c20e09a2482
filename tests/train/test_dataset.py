"""DemoDataset items, action chunks, history, multiple files; statistics; augmentation."""

from __future__ import annotations

import inspect
import json
import logging
import os
import pickle

import h5py
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from vlagym.train import augment as augment_module
from vlagym.train import layout
from vlagym.train.augment import NUM_UNIFORMS, SHADING_UNIFORMS, ImageAugment
from vlagym.train.configs import AugmentConfig
from vlagym.train.dataset import (
    DemoDataset,
    compute_stats,
    counter_uniforms,
    load_or_compute_stats,
    stats_path,
    to_norm_stats,
)
from vlagym.wrappers.normalize import NormStats


# ---------------------------------------------------------------------------- items
def test_item_keys_shapes_dtypes(demo_file):
    ds = DemoDataset(demo_file, chunk_size=4, keys=("proprio", "state"))
    assert len(ds) == 5 + 3 + 7 and ds.num_episodes == 3 and ds.cameras == ["front", "wrist"]
    item = ds[6]
    assert set(item) == {
        "observation.images.front",
        "observation.images.wrist",
        "observation.proprio",
        "observation.state",
        "instruction",
        "action",
        "action_is_pad",
        "index",
        "episode_index",
        "frame_index",
        "task",
    }
    for cam in ("front", "wrist"):
        img = item[f"observation.images.{cam}"]
        assert img.dtype == torch.uint8 and img.shape == (3, 8, 8)
    assert item["observation.proprio"].dtype == torch.float32 and item["observation.proprio"].shape == (23,)
    assert item["observation.state"].dtype == torch.float32 and item["observation.state"].shape == (83,)
    assert item["action"].dtype == torch.float32 and item["action"].shape == (4, 7)
    assert item["action_is_pad"].dtype == torch.bool and item["action_is_pad"].shape == (4,)
    assert (item["index"], item["episode_index"], item["frame_index"]) == (6, 1, 1)
    assert item["instruction"] == "pick up the cup 1" and item["task"] == "VLA-PickCup-v0"


def test_images_match_the_file_in_chw_and_hwc(demo_file):
    with h5py.File(demo_file) as f:
        frame = f["data/demo_2/obs/wrist_rgb"][4]
    chw = DemoDataset(demo_file)[5 + 3 + 4]["observation.images.wrist"]
    hwc = DemoDataset(demo_file, image_format="hwc")[5 + 3 + 4]["observation.images.wrist"]
    np.testing.assert_array_equal(hwc.numpy(), frame)
    np.testing.assert_array_equal(chw.permute(1, 2, 0).numpy(), frame)


def test_action_chunk_and_padding_at_episode_end(demo_file):
    ds = DemoDataset(demo_file, chunk_size=4)
    for index in range(len(ds)):
        item = ds[index]
        n = [5, 3, 7][item["episode_index"]]
        t = item["frame_index"]
        steps = np.arange(t, t + 4)
        expected_t = np.minimum(steps, n - 1)  # padding repeats the last action
        np.testing.assert_array_equal(item["action"][:, 0].numpy(), expected_t)
        np.testing.assert_array_equal(item["action"][:, 1].numpy(), item["episode_index"])
        np.testing.assert_array_equal(item["action_is_pad"].numpy(), steps >= n)
        assert item["observation.proprio"][0] == t
    # The last step of the 3-step demo: one real action, three pads.
    assert ds[5 + 2]["action_is_pad"].tolist() == [False, True, True, True]
    assert ds[0]["action_is_pad"].tolist() == [False] * 4


def test_history_repeats_frame_zero_and_flags_padding(demo_file):
    ds = DemoDataset(demo_file, chunk_size=2, history=3, keys=("proprio", "state"))
    item = ds[5 + 1]  # demo 1, t = 1
    assert item["observation.images.front"].shape == (3, 3, 8, 8)
    assert item["observation.proprio"].shape == (3, 23) and item["observation.state"].shape == (3, 83)
    assert item["observation_is_pad"].tolist() == [True, False, False]
    assert item["observation.images.front"][:, 0, 0, 0].tolist() == [0, 0, 1]  # pixel (0,0) red = t
    assert item["observation.images.front"][:, 1, 0, 0].tolist() == [1, 1, 1]  # green = demo number
    assert item["observation.proprio"][:, 0].tolist() == [0, 0, 1]
    assert item["observation.state"][:, 0].tolist() == [0, 0, -1]
    np.testing.assert_array_equal(item["observation.images.front"][0], item["observation.images.front"][1])
    late = ds[5 + 3 + 6]  # demo 2, t = 6: no padding
    assert late["observation_is_pad"].tolist() == [False] * 3
    assert late["observation.proprio"][:, 0].tolist() == [4, 5, 6]
    assert "observation_is_pad" not in DemoDataset(demo_file)[0]


def test_multiple_files_concatenate_with_global_episode_index(demo_file_factory):
    a = demo_file_factory("a.hdf5", lengths=(4, 2), tag=1.0)
    b = demo_file_factory("b.hdf5", lengths=(3,), tag=2.0)
    ds = DemoDataset([a, b], chunk_size=3)
    assert len(ds) == 9 and ds.num_episodes == 3
    item = ds[6]
    assert (item["episode_index"], item["frame_index"]) == (2, 0)
    assert item["action"][0, 2] == 2.0 and item["action"][0, 1] == 0  # file b's demo_0
    assert ds[4]["action"][0, 2] == 1.0 and ds[4]["episode_index"] == 1
    # No chunk runs across a demo boundary: the end of a's demo_1 pads with its own last action.
    assert ds[5]["action"][:, 0].tolist() == [1, 1, 1] and ds[5]["action_is_pad"].tolist() == [False, True, True]


def test_incomplete_demos_are_skipped(demo_file_factory):
    path = demo_file_factory(lengths=(2, 3, 4, 5), incomplete=(1,), unfinished=(3,))
    ds = DemoDataset(path)
    assert len(ds) == 2 + 4 and ds.num_episodes == 2 and ds.num_skipped == 2
    assert ds[2]["action"][0, 1] == 2  # sample 2 is demo_2's first step
    assert ds[2]["instruction"] == "pick up the cup 2"


def test_demo_order_is_numeric(demo_file_factory):
    path = demo_file_factory(lengths=[1] * 12)
    ds = DemoDataset(path)
    assert [int(ds[i]["action"][0, 1]) for i in range(12)] == list(range(12))


def test_no_cameras_reads_no_images(demo_file):
    item = DemoDataset(demo_file, cameras=[], chunk_size=2)[3]
    assert not [k for k in item if k.startswith("observation.images.")]
    assert item["observation.proprio"][0] == 3 and item["action"].shape == (2, 7)


def test_bad_arguments_and_foreign_files_raise(demo_file, tmp_path):
    with pytest.raises(ValueError, match="available: \\['front', 'wrist'\\]"):
        DemoDataset(demo_file, cameras=["side"])
    with pytest.raises(ValueError, match="known: \\['proprio', 'state'\\]"):
        DemoDataset(demo_file, keys=("joints",))
    with pytest.raises(ValueError, match="image_format"):
        DemoDataset(demo_file, image_format="nchw")
    with pytest.raises(ValueError, match="chunk_size"):
        DemoDataset(demo_file, chunk_size=0)
    with pytest.raises(IndexError):
        DemoDataset(demo_file)[15]
    foreign = tmp_path / "foreign.hdf5"
    with h5py.File(foreign, "w") as f:
        f.create_group("data")
    with pytest.raises(ValueError, match="not a vlagym demo file"):
        DemoDataset(foreign)


def test_one_camera_and_dataloader_workers(demo_file):
    ds = DemoDataset(demo_file, chunk_size=3, cameras=["wrist"])
    ds[0]  # opens the file in this process; workers must open their own
    loader = DataLoader(ds, batch_size=4, num_workers=2, shuffle=False)
    batches = list(loader)
    assert "observation.images.front" not in batches[0]
    assert batches[0]["observation.images.wrist"].shape == (4, 3, 8, 8)
    assert batches[0]["action"].shape == (4, 3, 7)
    assert torch.cat([b["index"] for b in batches]).tolist() == list(range(15))
    assert pickle.loads(pickle.dumps(ds))[3]["frame_index"] == 3  # no h5py handle in the pickle
    ds.close()


def test_normalisation_with_stats_matches_the_wrappers(demo_file):
    stats = load_or_compute_stats(demo_file)
    raw = DemoDataset(demo_file, chunk_size=2)[4]
    norm = DemoDataset(demo_file, chunk_size=2, stats=stats)[4]
    mean, std = np.array(stats["actions"]["mean"]), np.array(stats["actions"]["std"])
    assert std[2] == 0  # the constant "tag" dimension: floored, not divided by zero
    expected = (raw["action"].numpy() - mean) / np.maximum(std, 1e-6)
    np.testing.assert_allclose(norm["action"].numpy(), expected, rtol=1e-5, atol=1e-6)
    q = DemoDataset(demo_file, chunk_size=2, stats=stats, normalization="quantile")[4]
    q01, q99 = np.array(stats["proprio"]["q01"]), np.array(stats["proprio"]["q99"])
    expected = 2 * (raw["observation.proprio"].numpy() - q01) / np.maximum(q99 - q01, 1e-6) - 1
    np.testing.assert_allclose(q["observation.proprio"].numpy(), expected, rtol=1e-4, atol=1e-5)
    # The wrappers' NormStats (what NormalizeAction applies at evaluation) gives the same numbers.
    norm_stats = to_norm_stats(stats, mode="quantile")
    assert isinstance(norm_stats, NormStats) and "action" in norm_stats.keys()
    via = DemoDataset(demo_file, chunk_size=2, stats=norm_stats)[4]
    np.testing.assert_allclose(via["action"].numpy(), norm_stats.normalize("action", raw["action"].numpy()), rtol=1e-6)
    np.testing.assert_array_equal(via["observation.proprio"].numpy(), q["observation.proprio"].numpy())
    bad = {**stats, "actions": {k: v[:6] for k, v in stats["actions"].items()}}
    with pytest.raises(ValueError, match="shape \\(6,\\), the data \\(7,\\)"):
        DemoDataset(demo_file, stats=bad)
    with pytest.raises(ValueError, match="no entry for \\['state'\\]"):
        DemoDataset(demo_file, keys=("proprio", "state"), stats={k: stats[k] for k in ("actions", "proprio")})
    with pytest.raises(ValueError, match="normalization"):
        DemoDataset(demo_file, normalization="zscore")


# ---------------------------------------------------------------------------- statistics
def _numpy_stats(x: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "mean": x.mean(0),
        "std": x.std(0),
        "min": x.min(0),
        "max": x.max(0),
        "q01": np.quantile(x, 0.01, axis=0),
        "q99": np.quantile(x, 0.99, axis=0),
    }


def test_stats_match_numpy_over_complete_demos(demo_file_factory):
    a = demo_file_factory("a.hdf5", lengths=(30, 50), incomplete=(0,), seed=1)
    b = demo_file_factory("b.hdf5", lengths=(40,), seed=2)
    stats = compute_stats([a, b])
    assert set(stats) == {"actions", "proprio", "state"}
    for key, dset in (("actions", "actions"), ("proprio", "obs/proprio"), ("state", "obs/state")):
        with h5py.File(a) as fa, h5py.File(b) as fb:
            x = np.concatenate([fa[f"data/demo_1/{dset}"][()], fb[f"data/demo_0/{dset}"][()]]).astype(np.float64)
        ref = _numpy_stats(x)
        for field in ("mean", "std", "min", "max"):
            np.testing.assert_allclose(stats[key][field], ref[field], rtol=1e-9, atol=1e-9, err_msg=f"{key}.{field}")
        tol = (ref["max"] - ref["min"]) / 10_000 + 1e-12  # one histogram bin
        for field in ("q01", "q99"):
            assert np.all(np.abs(np.array(stats[key][field]) - ref[field]) <= tol), f"{key}.{field}"
            assert all(isinstance(v, float) for v in stats[key][field])


def test_stats_are_cached_and_recomputed_when_the_file_changes(demo_file_factory, caplog):
    path = demo_file_factory(lengths=(6, 4))
    first = load_or_compute_stats(path)
    cache = stats_path(path)
    assert cache.name == path.name + layout.STATS_SUFFIX
    blob = json.loads(cache.read_text())
    assert blob["stats"] == first and blob["source"]["size"] == path.stat().st_size
    # A cache that matches the file is used as is: tamper with it and see the tampered value come back.
    blob["stats"]["actions"]["mean"][0] = 123.0
    cache.write_text(json.dumps(blob))
    assert load_or_compute_stats(path)["actions"]["mean"][0] == 123.0
    # Rewriting the file (different size and mtime) makes the cache stale.
    demo_file_factory(lengths=(6, 4, 9))
    with caplog.at_level(logging.INFO, logger="vlagym.train.stats"):
        fresh = load_or_compute_stats(path)
    assert "stale" in caplog.text
    assert fresh["actions"]["max"][0] == 8.0 and fresh["actions"]["mean"][0] != 123.0
    assert json.loads(cache.read_text())["stats"] == fresh
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # atomic write left nothing


def test_stats_cache_detects_mtime_change_at_same_size(demo_file_factory):
    path = demo_file_factory(lengths=(6,))
    load_or_compute_stats(path)
    cache = stats_path(path)
    blob = json.loads(cache.read_text())
    blob["stats"]["actions"]["mean"][0] = 123.0
    cache.write_text(json.dumps(blob))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert load_or_compute_stats(path)["actions"]["mean"][0] != 123.0


# ---------------------------------------------------------------------------- augmentation
def _gradient_image(size: int = 32) -> torch.Tensor:
    """Brightness rising left to right in red and top to bottom in green: any flip or rotation shows."""
    ramp = torch.linspace(0, 255, size)
    img = torch.zeros(3, size, size)
    img[0] = ramp[None, :]
    img[1] = ramp[:, None]
    img[2] = 128
    return img.round().to(torch.uint8)


def test_augment_is_independent_per_image_and_deterministic():
    aug = ImageAugment(crop_scale=(0.7, 1.0), shift_px=2)
    batch = _gradient_image().expand(4, 3, 32, 32).contiguous()
    out = aug(batch, generator=torch.Generator().manual_seed(0))
    assert out.dtype == torch.uint8 and out.shape == batch.shape
    assert not torch.equal(out[0], out[1]) and not torch.equal(out[2], out[3])
    again = aug(batch, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)
    other = aug(batch, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(out, other)
    shared = aug(batch, generator=torch.Generator().manual_seed(0), shared=True)
    assert all(torch.equal(shared[0], shared[i]) for i in range(4))


def test_augment_apply_of_many_draws_equals_one_call_per_draw():
    aug = ImageAugment(crop_scale=(0.5, 1.0), shift_px=3, hue=0.1)
    images = torch.randint(0, 256, (6, 2, 3, 20, 20), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    one_by_one = torch.stack(
        [aug(images[i], generator=torch.Generator().manual_seed(i), shared=True) for i in range(6)]
    )
    draws = np.concatenate([aug.draw(1, torch.Generator().manual_seed(i)) for i in range(6)])
    assert len(set(aug.views(draws, 20, 20)[:, 0].tolist())) == 6  # zooms of several sizes in one batch
    assert torch.equal(aug.apply(images, draws), one_by_one)
    with pytest.raises(ValueError, match="draws"):
        aug.apply(images, draws[:5])


def test_augment_keeps_orientation():
    aug = ImageAugment(crop_scale=(0.5, 1.0), shift_px=4, brightness=0.2, contrast=0.2, saturation=0.2, hue=0.05)
    img = _gradient_image()
    out = aug(img.expand(64, 3, 32, 32), generator=torch.Generator().manual_seed(3)).float()
    left, right = out[:, 0, :, :8].mean((1, 2)), out[:, 0, :, -8:].mean((1, 2))
    top, bottom = out[:, 1, :8, :].mean((1, 2)), out[:, 1, -8:, :].mean((1, 2))
    assert torch.all(right > left + 30) and torch.all(bottom > top + 30)
    # Geometry alone: every row still rises left to right and every column top to bottom, pixel by pixel.
    geometry = ImageAugment(crop_scale=(0.5, 1.0), shift_px=4, brightness=0, contrast=0, saturation=0, hue=0)
    moved = geometry(img.expand(64, 3, 32, 32), generator=torch.Generator().manual_seed(4)).int()
    assert not torch.equal(moved, img.expand(64, 3, 32, 32).int())
    assert torch.all(moved[:, 0, :, 1:] >= moved[:, 0, :, :-1]) and torch.all(moved[:, 1, 1:, :] >= moved[:, 1, :-1, :])
    scale, centre_y, centre_x = geometry.views(geometry.draw(1000, torch.Generator().manual_seed(0)), 32, 24).T
    assert np.all((np.sqrt(0.5) <= scale) & (scale <= 1.0)) and scale.min() < 0.75 and scale.max() > 0.98
    # The zoomed area lies in the image; the shift moves it by at most 4 output pixels (2 * 4 / size normalised).
    assert np.all(np.abs(centre_y) <= 1.0 - scale + scale * 8.0 / 32 + 1e-9)
    assert np.all(np.abs(centre_x) <= 1.0 - scale + scale * 8.0 / 24 + 1e-9)
    assert np.abs(centre_x).max() > 0.3


def test_augment_has_no_flip_or_rotation_op():
    source = inspect.getsource(augment_module)
    for op in ("flip(", "fliplr", "flipud", "rot90", "rotate(", "transpose(", "RandomRotation", "HorizontalFlip"):
        assert op not in source, op
    assert not [name for name in dir(ImageAugment) if "flip" in name.lower() or "rot" in name.lower()]


def test_augment_identity_settings_and_validation():
    img = _gradient_image()
    identity = ImageAugment(crop_scale=None, shift_px=0, brightness=0, contrast=0, saturation=0, hue=0)
    assert torch.equal(identity(img), img)
    # A zoom of the whole image that stays put resamples every pixel at its own centre: the same image.
    still = ImageAugment(crop_scale=(1.0, 1.0), shift_px=3, brightness=0, contrast=0, saturation=0, hue=0)
    assert torch.equal(still.apply(img[None], np.full((1, NUM_UNIFORMS), 0.5)), img[None])
    shifted = still.apply(img[None], np.array([[0.5, 0.5, 0.5, 0.5, 1.0, 0.5, 0.5, 0.5, 0.5]]))  # 3 px right
    assert torch.equal(shifted[0, :, :, 3:], img[:, :, :-3])
    assert torch.equal(shifted[0, :, :, :3], img[:, :, :1].expand(3, 32, 3))  # the border extended
    config = AugmentConfig(brightness=0.3)
    assert ImageAugment(config).config == config and ImageAugment(config, brightness=0.2).config.brightness == 0.2
    with pytest.raises(TypeError, match="uint8"):
        identity(img.float())
    with pytest.raises(ValueError, match="crop_scale"):
        ImageAugment(crop_scale=(0.0, 1.0))
    with pytest.raises(ValueError, match="hue"):
        ImageAugment(hue=0.7)
    with pytest.raises(ValueError, match="shift_px"):
        AugmentConfig(shift_px=-1)


def test_the_gain_field_is_smooth_bounded_and_its_own_draws():
    still = dict(crop_scale=None, shift_px=0, brightness=0, contrast=0, saturation=0, hue=0)
    shade = ImageAugment(**still, shading=0.3)
    assert ImageAugment().num_uniforms == NUM_UNIFORMS and ImageAugment().config.shading == 0.0  # off by default
    assert shade.num_uniforms == NUM_UNIFORMS + SHADING_UNIFORMS == 18
    gray = torch.full((1, 3, 24, 24), 100, dtype=torch.uint8)
    # Every node at 0.5: log-gain 0 everywhere, the image unchanged.
    assert torch.equal(shade.apply(gray, np.full((1, 18), 0.5)), gray)
    # Top-left node at its brightest, bottom-right at its darkest: e^0.3 and e^-0.3 at those corners.
    u = np.full((1, 18), 0.5)
    u[0, NUM_UNIFORMS], u[0, -1] = 1.0, 0.0
    field = shade.gain_fields(u, 24, 24)[0, 0]
    assert field[0, 0].item() == pytest.approx(np.exp(0.3)) and field[-1, -1].item() == pytest.approx(np.exp(-0.3))
    out = shade.apply(gray, u)[0].float()
    assert out[:, 0, 0].tolist() == [135.0] * 3 and out[:, -1, -1].tolist() == [74.0] * 3  # the same gain per channel
    assert out[0, 12, 12] == 100  # the middle node stays at 1
    assert out[0].diff(dim=1).abs().max() <= 4 and out[0].diff(dim=0).abs().max() <= 4  # no edges: bilinear
    fields = shade.gain_fields(shade.draw(500, torch.Generator().manual_seed(0)), 8, 8)
    assert fields.min() >= np.exp(-0.3) - 1e-6 and fields.max() <= np.exp(0.3) + 1e-6
    assert fields.min() < 0.8 and fields.max() > 1.25
    with pytest.raises(ValueError, match="draws"):
        shade.apply(gray, np.full((1, NUM_UNIFORMS), 0.5))  # the field's draws missing
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="shading"):
            AugmentConfig(shading=bad)


def test_turning_the_gain_field_on_leaves_the_other_draws_as_they_were(demo_file_factory):
    path = demo_file_factory(lengths=(6,), image_size=16)
    index = np.arange(6)
    plain = DemoDataset(path, augment=ImageAugment(), seed=5)
    shaded = DemoDataset(path, augment=ImageAugment(shading=0.3), seed=5)
    for camera in (0, 1):
        base, both = plain._augment_uniforms(index, camera), shaded._augment_uniforms(index, camera)
        assert base.shape == (6, NUM_UNIFORMS) and both.shape == (6, NUM_UNIFORMS + SHADING_UNIFORMS)
        assert np.array_equal(both[:, :NUM_UNIFORMS], base)  # the view and the jitter: the same draws
        assert len(np.unique(both[:, NUM_UNIFORMS:])) == 6 * SHADING_UNIFORMS
    assert not np.array_equal(shaded._augment_uniforms(index, 0), shaded._augment_uniforms(index, 1))
    item, again = shaded[3], DemoDataset(path, augment=ImageAugment(shading=0.3), seed=5)[3]
    front, wrist = "observation.images.front", "observation.images.wrist"
    assert torch.equal(item[front], again[front]) and not torch.equal(item[front], plain[3][front])
    # The hand camera gets no field by default (its image under the lighting split changes by one gain): its
    # image is exactly the one without the field; with every camera shaded it gets one too.
    assert ImageAugment().config.unshaded_cameras == ("wrist",)
    assert torch.equal(item[wrist], plain[3][wrist])
    every = DemoDataset(path, augment=ImageAugment(shading=0.3, unshaded_cameras=()), seed=5)[3]
    assert torch.equal(every[front], item[front]) and not torch.equal(every[wrist], plain[3][wrist])
    with pytest.raises(ValueError, match="unshaded_cameras must be camera names"):
        AugmentConfig(unshaded_cameras=("wirst",))


def test_counter_uniforms_depend_on_key_counter_and_column_only():
    u = counter_uniforms([1, 0, 0], np.arange(20000), 3)
    assert u.shape == (20000, 3) and 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 0.03
    assert np.array_equal(counter_uniforms([1, 0, 0], np.array([7, 3]), 3), u[[7, 3]])  # not on the others
    assert not np.array_equal(counter_uniforms([1, 1, 0], np.array([7]), 3), u[[7]])
    assert not np.array_equal(counter_uniforms([2, 0, 0], np.array([7]), 3), u[[7]])


def test_dataset_augments_each_camera_and_sample_independently(demo_file_factory):
    path = demo_file_factory(lengths=(4,), image_size=16)
    with h5py.File(path, "r+") as f:  # identical cameras: any difference comes from the augmentation
        f["data/demo_0/obs/wrist_rgb"][...] = f["data/demo_0/obs/front_rgb"][()]
    plain = DemoDataset(path, history=2)
    aug = ImageAugment(crop_scale=(0.6, 0.9))
    ds = DemoDataset(path, history=2, augment=aug, seed=7)
    item = ds[2]
    front, wrist = item["observation.images.front"], item["observation.images.wrist"]
    assert front.dtype == torch.uint8 and front.shape == (2, 3, 16, 16) and wrist.shape == front.shape
    assert torch.equal(plain[2]["observation.images.front"], plain[2]["observation.images.wrist"])
    assert not torch.equal(front, plain[2]["observation.images.front"])
    assert not torch.equal(front, wrist)
    # The history frames of one camera share a draw: at t = 0 both frames are frame 0.
    start = ds[0]["observation.images.front"]
    assert torch.equal(start[0], start[1])
    # Same seed, epoch and index: same draw; another index or epoch: another draw.
    assert torch.equal(DemoDataset(path, history=2, augment=aug, seed=7)[2]["observation.images.front"], front)
    ds.set_epoch(1)
    assert not torch.equal(ds[2]["observation.images.front"], front)
    hwc = DemoDataset(path, augment=aug, seed=7, image_format="hwc")[2]["observation.images.front"]
    assert hwc.shape == (16, 16, 3) and hwc.dtype == torch.uint8


def test_an_unshifted_camera_keeps_its_view_and_gets_its_colour_jitter(demo_file_factory):
    path = demo_file_factory(lengths=(4,), image_size=16)
    plain = DemoDataset(path)[2]
    geometry = dict(crop_scale=(0.6, 0.9), shift_px=3)
    colour = dict(brightness=0.4, contrast=0.3, saturation=0.3, hue=0.03)
    still = {k: 0 for k in colour}
    # Geometry only: the wrist image is the demo's own, the front one moves.
    item = DemoDataset(path, augment=ImageAugment(**geometry, **still, unshifted_cameras=("wrist",)), seed=7)[2]
    assert torch.equal(item["observation.images.wrist"], plain["observation.images.wrist"])
    assert not torch.equal(item["observation.images.front"], plain["observation.images.front"])
    # With colour too (the default: the wrist view unshifted): the wrist image gets the colour jitter of the same
    # draw, and the front camera is as when every camera moves.
    assert ImageAugment().config.unshifted_cameras == ("wrist",)
    both = DemoDataset(path, augment=ImageAugment(**geometry, **colour), seed=7)[2]
    colour_only = DemoDataset(path, augment=ImageAugment(crop_scale=None, shift_px=0, **colour), seed=7)[2]
    every = DemoDataset(path, augment=ImageAugment(**geometry, **colour, unshifted_cameras=()), seed=7)[2]
    assert torch.equal(both["observation.images.wrist"], colour_only["observation.images.wrist"])
    assert not torch.equal(both["observation.images.wrist"], plain["observation.images.wrist"])
    assert not torch.equal(every["observation.images.wrist"], colour_only["observation.images.wrist"])
    assert torch.equal(both["observation.images.front"], every["observation.images.front"])
    for bad in ("wrist", ("wirst",), None):
        with pytest.raises(ValueError, match="unshifted_cameras must be camera names"):
            AugmentConfig(unshifted_cameras=bad)


@pytest.mark.parametrize("history, image_format", [(1, "chw"), (2, "hwc")])
def test_a_batch_of_items_equals_the_items_one_by_one(demo_file_factory, history, image_format):
    path = demo_file_factory(lengths=(5, 7), image_size=16)
    ds = DemoDataset(path, chunk_size=3, history=history, image_format=image_format, augment=ImageAugment(), seed=2)
    indices = [11, 0, 4, 11, -1, 6]
    batch = ds.__getitems__(indices)  # what a DataLoader calls: the pixel work once per camera
    for index, item in zip(indices, batch, strict=True):
        single = ds[index]
        assert item.keys() == single.keys()
        for key, value in single.items():
            assert torch.equal(item[key], value) if isinstance(value, torch.Tensor) else item[key] == value, key
    assert torch.equal(batch[0]["observation.images.front"], batch[3]["observation.images.front"])
    loader = torch.utils.data.DataLoader(ds, batch_size=3)
    first = next(iter(loader))
    expected = torch.utils.data.default_collate([ds[i] for i in range(3)])
    assert torch.equal(first["observation.images.wrist"], expected["observation.images.wrist"])


def test_a_plain_callable_augments_each_item_in_a_batch(demo_file_factory):
    path = demo_file_factory(lengths=(5,), image_size=16)
    calls = []

    def invert(images, generator, shared):  # an augmentation without ImageAugment's draw/apply
        calls.append(shared)
        return 255 - images

    plain = DemoDataset(path, seed=0)
    batch = DemoDataset(path, augment=invert, seed=0).__getitems__([1, 3])
    assert calls == [True] * 4  # each camera of each item, its history shared
    for index, item in zip([1, 3], batch, strict=True):
        assert torch.equal(item["observation.images.front"], 255 - plain[index]["observation.images.front"])


# ---------------------------------------------------------------------------- preloading
def _assert_same_items(a: list[dict], b: list[dict]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key, value in x.items():
            assert torch.equal(value, y[key]) if isinstance(value, torch.Tensor) else value == y[key], key


@pytest.mark.parametrize(
    "kwargs",
    [
        {"chunk_size": 4, "history": 1},
        {"chunk_size": 3, "history": 3, "keys": ("proprio", "state"), "image_format": "hwc"},
        {"chunk_size": 2, "cameras": ["wrist"], "augment": ImageAugment(), "seed": 3},
    ],
)
def test_preloaded_items_equal_the_files_items(demo_file_factory, kwargs):
    path = demo_file_factory(lengths=(5, 7), image_size=16)
    files = DemoDataset(path, **kwargs)
    memory = DemoDataset(path, preload=True, **kwargs)
    assert memory.preloaded and not files.preloaded and not memory._handles  # the file is closed again
    indices = [0, 4, 5, 11, -1, 7]
    _assert_same_items(files.__getitems__(indices), memory.__getitems__(indices))
    _assert_same_items([files[i] for i in indices], [memory[i] for i in indices])


def test_preload_size_and_items_that_do_not_alias_the_memory(demo_file_factory):
    path = demo_file_factory(lengths=(5, 7), image_size=16)
    ds = DemoDataset(path, chunk_size=2, image_format="hwc", keys=("proprio", "state"))
    with h5py.File(path, "r") as f:
        demo = f["data/demo_0"]
        per_step = sum(demo["obs"][layout.image_key(c)][0].nbytes for c in ("front", "wrist"))
        per_step += demo["actions"][0].nbytes + demo["obs/proprio"][0].nbytes + demo["obs/state"][0].nbytes
    assert ds.nbytes == 12 * per_step
    assert DemoDataset(path, cameras=["wrist"]).nbytes < ds.nbytes
    ds.preload()
    before = ds[3]["observation.images.front"].clone()
    ds[3]["observation.images.front"].zero_()  # a caller writing into an item
    ds[3]["observation.proprio"].zero_()
    assert torch.equal(ds[3]["observation.images.front"], before)
    assert ds[3]["observation.proprio"].abs().sum() > 0


def test_preload_errors_name_the_problem(demo_file_factory):
    small = demo_file_factory("small.hdf5", lengths=(3,), image_size=8)
    large = demo_file_factory("large.hdf5", lengths=(4,), image_size=16)
    with pytest.raises(ValueError, match="different shapes"):
        DemoDataset([small, large], preload=True)
    ds = DemoDataset(small, preload=True)
    with pytest.raises(IndexError, match="sample index 3 out of range for 3 samples"):
        ds.__getitems__([0, 3])
    with pytest.raises(IndexError, match="out of range"):
        ds[-4]


def test_preloaded_dataset_in_dataloader_workers(demo_file):
    ds = DemoDataset(demo_file, chunk_size=3, preload=True)
    expected = torch.utils.data.default_collate([ds[i] for i in range(15)])
    batches = list(DataLoader(ds, batch_size=5, num_workers=2, shuffle=False))
    for key in ("observation.images.front", "observation.proprio", "action", "index"):
        assert torch.equal(torch.cat([b[key] for b in batches]), expected[key]), key
