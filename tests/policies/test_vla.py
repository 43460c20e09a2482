"""VLAPolicy: shapes, losses that learn, masking, the instruction mattering, action queue, determinism, configs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlagym.policies import VLAConfig, VLAPolicy
from vlagym.wrappers.language import Tokenizer
from vlagym.wrappers.normalize import NormStats

K, A, P = 4, 7, 23
TINY = dict(image_size=32, vision_channels=(8, 16), hidden_dim=32, text_layers=1, chunk_size=K, binary_gripper=False)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_tasks()


def tiny(tokenizer: Tokenizer, **overrides) -> VLAPolicy:
    torch.manual_seed(0)
    return VLAPolicy(VLAConfig(**{**TINY, **overrides}), tokenizer)


def make_batch(b: int = 4, size: int = 32, seed: int = 0, instructions=None) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "observation.images.front": torch.randint(0, 256, (b, 3, size, size), generator=g, dtype=torch.uint8),
        "observation.images.wrist": torch.randint(0, 256, (b, 3, size, size), generator=g, dtype=torch.uint8),
        "observation.proprio": torch.randn(b, P, generator=g),
        "instruction": instructions or ["pick up the red cup"] * b,
        "action": torch.randn(b, K, A, generator=g) * 0.5 + 0.2,
        "action_is_pad": torch.zeros(b, K, dtype=torch.bool),
    }


def train(policy: VLAPolicy, batch: dict, steps: int, lr: float = 3e-3) -> list[float]:
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    losses = []
    policy.train()
    for _ in range(steps):
        loss, metrics = policy(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(metrics["loss"])
    policy.eval()
    return losses


@pytest.mark.parametrize("head", ["l1", "flow"])
def test_shapes_and_image_resize(tokenizer, head):
    policy = tiny(tokenizer, head=head)
    batch = make_batch(b=3, size=48)  # resized to 32 inside
    loss, metrics = policy(batch)
    assert loss.ndim == 0 and np.isfinite(metrics["loss"])
    assert policy.predict_action_chunk(batch).shape == (3, K, A)
    assert policy.select_action(batch).shape == (3, A)


def test_encoder_size_resizes_for_the_cnns_only(tokenizer, tmp_path):
    # The env still renders image_size; the CNNs see encoder_size: the same weights as a policy whose
    # image_size is that side act the same on the rendered images.
    from vlagym.eval.adapters import CheckpointPolicy

    small = tiny(tokenizer, encoder_size=16)
    small.save_pretrained(tmp_path / "ckpt")
    loaded = CheckpointPolicy(tmp_path / "ckpt")
    assert loaded.env_kwargs["image_size"] == 32 and loaded.policy.config.encoder_size == 16
    same = tiny(tokenizer, image_size=16)
    same.load_state_dict(small.state_dict())
    batch = make_batch(b=3, size=32)
    with torch.no_grad():
        expected = same.predict_action_chunk(batch, torch.Generator().manual_seed(0))
        got = small.predict_action_chunk(batch, torch.Generator().manual_seed(0))
        other = tiny(tokenizer).predict_action_chunk(batch, torch.Generator().manual_seed(0))
    assert torch.equal(got, expected)
    assert not torch.allclose(got, other)


def eval_loss(policy: VLAPolicy, batch: dict, seeds: int = 8) -> float:
    out = []
    with torch.no_grad():
        for seed in range(seeds):
            torch.manual_seed(seed)
            out.append(policy(batch)[1]["loss"])
    return float(np.mean(out))


# Flow matching learns more slowly: its loss has a floor well above 0 (the velocity is ill-posed near t = 1).
@pytest.mark.parametrize("head, steps, ratio", [("l1", 30, 0.6), ("flow", 60, 0.9)])
def test_loss_decreases(tokenizer, head, steps, ratio):
    policy = tiny(tokenizer, head=head)
    batch = make_batch()
    before = eval_loss(policy, batch)
    losses = train(policy, batch, steps)
    assert all(np.isfinite(losses))
    after = eval_loss(policy, batch)  # same draws of flow time and noise as `before`
    assert after < ratio * before, (before, after, losses)


def test_l1_loss_ignores_padded_actions(tokenizer):
    policy = tiny(tokenizer)
    batch = make_batch()
    batch["action_is_pad"][:, 2:] = True
    loss, _ = policy(batch)
    changed = dict(batch, action=batch["action"].clone())
    changed["action"][:, 2:] += 100.0
    assert torch.equal(policy(changed)[0], loss)
    changed["action"][:, 1] += 1.0  # a real action does count
    assert not torch.equal(policy(changed)[0], loss)


def test_l1_loss_ignores_padded_entries(tokenizer):
    policy = tiny(tokenizer)
    batch = make_batch()
    batch["action_is_pad"] = torch.zeros(*batch["action"].shape, dtype=torch.bool)
    batch["action_is_pad"][:, 2:, :-1] = True  # past step 2 only the last entry counts
    loss, _ = policy(batch)
    changed = dict(batch, action=batch["action"].clone())
    changed["action"][:, 2:, :-1] += 100.0
    assert torch.equal(policy(changed)[0], loss)
    changed["action"][:, 2:, -1] += 1.0
    assert not torch.equal(policy(changed)[0], loss)


def test_flow_loss_ignores_padded_actions(tokenizer):
    policy = tiny(tokenizer, head="flow")
    batch = make_batch()
    batch["action_is_pad"][:, 3:] = True
    changed = dict(batch, action=batch["action"].clone())
    changed["action"][:, 3:] += 100.0
    torch.manual_seed(5)
    loss = policy(batch)[0]
    torch.manual_seed(5)
    assert torch.allclose(policy(changed)[0], loss)


def test_instruction_changes_the_action(tokenizer):
    """Identical images and proprio; only the instruction says the sign of action dim 0."""
    policy = tiny(tokenizer, film=True)
    instructions = ["pick up the red cup", "pick up the blue cup"] * 4
    batch = make_batch(b=8, instructions=instructions)
    for key in ("observation.images.front", "observation.images.wrist", "observation.proprio"):
        batch[key] = batch[key][:1].expand_as(batch[key]).clone()
    sign = torch.tensor([1.0, -1.0] * 4)
    batch["action"] = torch.zeros(8, K, A)
    batch["action"][:, :, 0] = sign[:, None]
    train(policy, batch, 200)
    pred = policy.predict_action_chunk(batch)[:, :, 0]
    assert (pred[0::2] > 0.5).all() and (pred[1::2] < -0.5).all(), pred


def test_film_words_condition_the_images_on_the_bag_of_the_words_training_saw(tokenizer):
    policy = tiny(tokenizer, film_words=True).train()
    policy.features(make_batch(b=2, instructions=["pick up the purple cup", "lift the red block"]))
    policy.eval()  # acting marks no more words
    texts = ["pick up the purple cup", "cup purple the up pick", "could you pick up the purple cup", "lift the cup"]
    bag = policy._bag_of_words(policy.tokenize(texts))
    # Order-free, and words training never saw ("could", "you") are left out; other words change it.
    assert torch.allclose(bag[0], bag[1], atol=1e-6) and torch.allclose(bag[0], bag[2], atol=1e-6)
    assert not torch.allclose(bag[0], bag[3], atol=1e-3)
    seen = []
    front = policy.vision["front"]
    front.forward = lambda images, cond: (seen.append(cond), type(front).forward(front, images, cond))[1]
    policy.features(make_batch(b=4, instructions=texts))
    assert torch.equal(seen[0], bag)  # what FiLM reads
    assert not hasattr(tiny(tokenizer), "film_words")  # off by default: FiLM reads the instruction encoder


def test_film_text_adds_the_order_the_bag_of_words_loses(tokenizer):
    policy = tiny(tokenizer, film_words=True, film_text=True).train()
    texts = ["put the red block on the blue block", "put the blue block on the red block"]
    policy.features(make_batch(b=2, instructions=texts))
    policy.eval()
    seen = []
    front = policy.vision["front"]
    front.forward = lambda images, cond: (seen.append(cond), type(front).forward(front, images, cond))[1]
    policy.features(make_batch(b=2, instructions=texts))
    ids = policy.tokenize(texts)
    bag = policy._bag_of_words(ids)
    assert torch.allclose(bag[0], bag[1], atol=1e-6)  # the same words
    assert torch.allclose(seen[0], bag + policy.text(ids), atol=1e-6)
    assert not torch.allclose(seen[0][0], seen[0][1], atol=1e-3)  # the order reaches the image encoders


def test_text_position_std_lets_the_instruction_encoder_see_the_word_order(tokenizer):
    texts = ["put the red block on the blue block", "put the blue block on the red block"]
    apart = {}
    for std in (0.02, 1.0):
        with torch.no_grad():
            policy = tiny(tokenizer, text_position_std=std).eval()
            e = policy.text(policy.tokenize(texts))
        apart[std] = float((e[0] - e[1]).norm() / e[0].norm())
    assert apart[1.0] > 5 * apart[0.02]  # same words, swapped: the positions tell them apart


def test_rotary_positions_read_word_order_but_not_where_the_instruction_starts(tokenizer):
    policy = tiny(tokenizer, text_positions="rotary").eval()
    assert policy.text.positions is None
    ids = policy.tokenize(["put the red block on the blue block", "put the blue block on the red block"])
    n = int((ids[0] != 0).sum())
    shifted = torch.zeros_like(ids)
    shifted[:, 3 : 3 + n] = ids[:, :n]  # the same words three slots later (leading padding is masked)
    with torch.no_grad():
        e, moved = policy.text(ids), policy.text(shifted)
    assert torch.allclose(e, moved, atol=1e-5)  # only distances between words count
    # Swapped words read differently (without positions, attention and the mean pool ignore the order: exactly 0).
    assert float((e[0] - e[1]).norm() / e[0].norm()) > 1e-3
    learned = tiny(tokenizer, text_position_std=1.0).eval()
    with torch.no_grad():
        assert not torch.allclose(learned.text(ids), learned.text(shifted), atol=1e-3)  # absolute: it moves


def test_select_action_uses_the_queue_and_reset_clears_it(tokenizer):
    policy = tiny(tokenizer, n_action_steps=3)
    batch = make_batch(b=2)
    calls = []
    inner = policy.predict_action_chunk

    def counted(b, generator=None):
        calls.append(1)
        return inner(b, generator)

    policy.predict_action_chunk = counted
    chunk = inner(batch)
    actions = [policy.select_action(batch) for _ in range(7)]
    assert len(calls) == 3  # steps 0, 3, 6
    assert torch.allclose(torch.stack(actions[:3], 1), chunk[:, :3])
    assert torch.allclose(actions[3], chunk[:, 0])  # the queue restarts from a new chunk's first action
    policy.reset()
    policy.select_action(batch)
    assert len(calls) == 4


def test_temporal_ensemble_averages_overlapping_chunks(tokenizer):
    policy = tiny(tokenizer, temporal_ensemble=True, ensemble_coeff=0.0)
    assert policy.config.n_action_steps == 1
    chunks = iter([torch.arange(K, dtype=torch.float32).view(1, K, 1).expand(1, K, A) + 10 * i for i in range(3)])
    policy.predict_action_chunk = lambda b, generator=None: next(chunks)
    batch = make_batch(b=1)
    # step 0: chunk0[0] = 0; step 1: mean(chunk0[1], chunk1[0]) = mean(1, 10); step 2: mean(2, 11, 20)
    got = [policy.select_action(batch)[0, 0].item() for _ in range(3)]
    assert got == pytest.approx([0.0, 5.5, 11.0])


def _fake_chunks(policy, b):
    """Chunk i has value 100 * i + 10 * row + step in every action entry."""
    count = iter(range(1000))
    base = torch.arange(K, dtype=torch.float32)[None, :] + 10 * torch.arange(b, dtype=torch.float32)[:, None]

    def predict(batch, generator=None):
        return (base + 100 * next(count))[:, :, None].expand(b, K, A).clone()

    policy.predict_action_chunk = predict


def test_masked_reset_restarts_only_those_rows(tokenizer):
    policy = tiny(tokenizer, n_action_steps=3)
    _fake_chunks(policy, 2)
    batch = make_batch(b=2)
    first = [policy.select_action(batch)[:, 0].tolist() for _ in range(2)]
    assert first == [[0.0, 10.0], [1.0, 11.0]]  # chunk 0, steps 0 and 1
    policy.reset(mask=np.array([True, False]))
    # row 0 starts chunk 1; row 1 finishes chunk 0, then both rows refill on their own schedule
    got = [policy.select_action(batch)[:, 0].tolist() for _ in range(4)]
    assert got == [[100.0, 12.0], [101.0, 210.0], [102.0, 211.0], [300.0, 212.0]]
    policy.reset()
    assert policy.select_action(batch)[:, 0].tolist() == [400.0, 410.0]


def test_masked_reset_restarts_the_temporal_ensemble_of_those_rows(tokenizer):
    policy = tiny(tokenizer, temporal_ensemble=True, ensemble_coeff=0.0)
    _fake_chunks(policy, 2)
    batch = make_batch(b=2)
    assert policy.select_action(batch)[:, 0].tolist() == [0.0, 10.0]
    policy.reset(mask=[False, True])
    # row 0 averages chunk 0 step 1 with chunk 1 step 0; row 1 starts afresh from chunk 1
    assert policy.select_action(batch)[:, 0].tolist() == pytest.approx([(1 + 100) / 2, 110.0])
    assert policy.select_action(batch)[:, 0].tolist() == pytest.approx([(2 + 101 + 200) / 3, (111 + 210) / 2])


@pytest.mark.parametrize("temporal_ensemble", [False, True])
def test_binary_gripper_snaps_only_the_last_entry_to_its_sign(temporal_ensemble, tokenizer):
    policy = tiny(tokenizer, binary_gripper=True, temporal_ensemble=temporal_ensemble)
    chunk = torch.linspace(-0.6, 0.6, 2 * K * A).view(2, K, A)
    policy.predict_action_chunk = lambda b, generator=None: chunk
    action = policy.select_action(make_batch(b=2))
    assert torch.equal(action[:, :-1], chunk[:, 0, :-1])
    assert torch.equal(action[:, -1], torch.sign(chunk[:, 0, -1]))
    assert torch.equal(chunk, torch.linspace(-0.6, 0.6, 2 * K * A).view(2, K, A))  # the chunk is left untouched


def test_flow_inference_is_deterministic_for_a_seed(tokenizer):
    policy = tiny(tokenizer, head="flow").eval()
    batch = make_batch(b=2)
    a = policy.predict_action_chunk(batch, torch.Generator().manual_seed(3))
    b = policy.predict_action_chunk(batch, torch.Generator().manual_seed(3))
    c = policy.predict_action_chunk(batch, torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_normalisation_stats_map_actions_to_env_units(tokenizer):
    policy = tiny(tokenizer)
    rng = np.random.default_rng(0)
    stats = NormStats.from_arrays({"action": rng.normal(3.0, 2.0, (500, A)), "proprio": rng.normal(size=(500, P))})
    policy.set_stats({"actions": stats["action"].to_dict(), "proprio": stats["proprio"].to_dict()})
    assert torch.allclose(policy.action_offset, torch.tensor(stats["action"].mean, dtype=torch.float32))
    # the head's zero output (bias and weights zeroed) is the action mean in env units
    torch.nn.init.zeros_(policy.head.weight)
    torch.nn.init.zeros_(policy.head.bias)
    pred = policy.predict_action_chunk(make_batch(b=1))
    assert torch.allclose(pred[0, 0], policy.action_offset)
    with pytest.raises(KeyError, match="proprio"):
        policy.set_stats({"actions": stats["action"].to_dict()})


def test_batch_from_obs_matches_a_dataset_batch(tokenizer):
    policy = tiny(tokenizer).eval()
    batch = make_batch(b=2)
    obs = {
        "images": {cam: batch[f"observation.images.{cam}"].permute(0, 2, 3, 1).numpy() for cam in ("front", "wrist")},
        "proprio": batch["observation.proprio"].numpy(),
        "instruction": tuple(batch["instruction"]),
    }
    assert torch.equal(policy.predict_action_chunk(policy.batch_from_obs(obs)), policy.predict_action_chunk(batch))
    tokens = dict(obs, instruction=np.stack([tokenizer.encode(s, 16) for s in obs["instruction"]]))
    assert torch.equal(policy.predict_action_chunk(policy.batch_from_obs(tokens)), policy.predict_action_chunk(batch))
    single = {"images": {c: v[0] for c, v in obs["images"].items()}, "proprio": obs["proprio"][0],
              "instruction": obs["instruction"][0]}  # fmt: skip
    assert policy.select_action(policy.batch_from_obs(single)).shape == (1, A)
    with pytest.raises(KeyError, match="wrist"):
        policy.batch_from_obs(dict(obs, images={"front": obs["images"]["front"]}))


@pytest.mark.parametrize(
    "kwargs, quoted",
    [
        (dict(head="l2"), "'l2'"),
        (dict(chunk_size=5, n_action_steps=6), "n_action_steps=6"),
        (dict(cameras=("front", "top")), "'top'"),
        (dict(normalization="zscore"), "'zscore'"),
        (dict(image_size=0), "0"),
        (dict(encoder_size=0), "0"),
        (dict(encoder_size=2, vision_channels=(8, 16)), "encoder_size=2"),
        (dict(hidden_dim=30, text_heads=4), "text_heads=4"),
        (dict(temporal_ensemble=True, n_action_steps=2), "2"),
        (dict(vision_channels=(8, -1)), "-1"),
        (dict(film_words=1), "film_words"),
        (dict(film_text=True), "film_text"),
        (dict(text_position_std=float("nan")), "nan"),
        (dict(text_position_std=True), "True"),
        (dict(text_positions="relative"), "'relative'"),
        (dict(text_positions="rotary", text_layers=0), "text_layers"),
        (dict(text_positions="rotary", text_position_std=1.0), "text_position_std=1.0"),
        (dict(text_positions="rotary", hidden_dim=12, text_heads=4), "12 / 4"),
    ],
)
def test_bad_configs_raise_quoting_the_value(kwargs, quoted):
    with pytest.raises(ValueError) as err:
        VLAConfig(**kwargs)
    assert quoted in str(err.value)


def test_config_round_trips_through_json():
    import json

    cfg = VLAConfig(**TINY, head="flow")
    assert VLAConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="bogus"):
        VLAConfig.from_dict({**cfg.to_dict(), "bogus": 1})


def test_instruction_encoder_encodes_each_distinct_instruction_once_and_exactly(tokenizer):
    # Deduplicated rows and trimmed padding columns must give each row's full-width encoding and the same
    # gradients (float64, so that only the arithmetic, not the summation order, could differ).
    policy = tiny(tokenizer, text_layers=2).double().train()
    texts = ["pick up the red cup", "", "open the drawer", "pick up the red cup", "zzz qqq", "open the drawer"]
    ids = policy.tokenize(texts)
    assert ids.shape[1] == policy.config.max_tokens and (ids == 0).all(dim=0).any()  # some columns pad every row
    seen, encode = [], policy.text._encode
    policy.text._encode = lambda x: (seen.append(tuple(x.shape)), encode(x))[1]
    fast = policy.text(ids)
    del policy.text._encode
    assert seen == [(4, int((ids != 0).sum(dim=1).max()))]  # 4 distinct rows, up to the longest one's end
    full = policy.text._encode(ids)  # every row, every column
    assert torch.allclose(fast, full, rtol=0, atol=1e-12)
    assert torch.equal(fast[0], fast[3]) and torch.isfinite(fast[1]).all()
    weights = torch.randn_like(full)
    params = list(policy.text.parameters())
    grads_fast = torch.autograd.grad((policy.text(ids) * weights).sum(), params)
    grads_full = torch.autograd.grad((full * weights).sum(), params)
    for a, b in zip(grads_fast, grads_full, strict=True):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)
    seen.clear()
    policy.text._encode = lambda x: (seen.append(tuple(x.shape)), encode(x))[1]
    policy.eval().text(ids)  # acting encodes the full-width batch
    del policy.text._encode
    assert seen == [tuple(ids.shape)]
