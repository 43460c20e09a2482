"""Tokenizer and LanguageTokens: vocabulary from the suite's templates, unknown words, save/load, the Box space."""

from __future__ import annotations

import itertools
import logging

import gymnasium as gym
import numpy as np
import pytest
from fake_env import FakeEnv

import vlagym
from vlagym.wrappers import LanguageTokens, Tokenizer
from vlagym.wrappers.language import (
    DEFAULT_MAX_TOKENS,
    PAD_ID,
    UNK_ID,
    split_words,
    task_templates,
    template_field_words,
    template_fields,
)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer.from_tasks()


def _every_instruction():
    """Every template of every registered task in both splits, formatted with every value its fields take."""
    words = template_field_words()
    for env_id, splits in task_templates().items():
        for template in (t for ts in splits.values() for t in ts):
            fields = template_fields(template)
            for values in itertools.product(*(words[f] for f in fields)):
                yield env_id, template.format(**dict(zip(fields, values, strict=True)))


def test_split_words():
    assert split_words("Could you open the drawer, then put the RED cup in?") == [
        "could", "you", "open", "the", "drawer", "then", "put", "the", "red", "cup", "in",
    ]  # fmt: skip
    assert split_words(" ,!? ") == []


def test_templates_cover_every_task():
    found = task_templates()
    assert set(found) == set(vlagym.TASKS) - {"VLA-MultiTask-v0"}
    assert all(found[t]["train"] and found[t]["heldout"] for t in found)


def test_every_instruction_encodes_without_unknown_words_and_fits(tok):
    count = 0
    for env_id, text in _every_instruction():
        ids = tok.tokenize(text)
        assert UNK_ID not in ids, (env_id, text)
        assert len(ids) <= DEFAULT_MAX_TOKENS, (env_id, text)
        assert tok.decode(tok.encode(text, DEFAULT_MAX_TOKENS)) == " ".join(split_words(text))
        count += 1
    assert count > 500  # the product over colours and kinds really ran


@pytest.mark.parametrize("env_id", ["VLA-StackBlocks-v0", "VLA-PutCupInDrawer-v0", "VLA-PressButton-v0"])
@pytest.mark.parametrize("split", ["train", "heldout_paraphrase", "unseen_combo"])
def test_real_instructions_have_no_unknown_words(tok, make_env, env_id, split):
    env = make_env(env_id, split=split)
    for seed in range(4):
        env.reset(seed=seed)
        text = env.unwrapped.instruction
        assert UNK_ID not in tok.tokenize(text) and len(split_words(text)) <= DEFAULT_MAX_TOKENS, text


def test_unknown_words_map_to_unk_never_crash(tok):
    ids = tok.encode("Zorble the  ünïcode cup!!", 6)
    assert ids.dtype == np.int64 and ids.shape == (6,)
    assert ids[0] == UNK_ID and ids[1] == tok.tokenize("the")[0] and ids[-1] == PAD_ID
    assert tok.decode(ids) == "<unk> the <unk> <unk> cup"
    assert tok.encode("", 3).tolist() == [PAD_ID] * 3


def test_encode_truncates_and_pads(tok):
    text = "pick up the red cup"
    assert tok.encode(text, 3).tolist() == tok.tokenize(text)[:3]
    padded = tok.encode(text, 8)
    assert padded[5:].tolist() == [PAD_ID] * 3 and tok.decode(padded) == text
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([len(tok)])


def test_save_load_round_trip(tok, tmp_path):
    path = tok.save(tmp_path / "tokenizer.json")
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]
    loaded = Tokenizer.load(path)
    assert loaded == tok and loaded.vocab == tok.vocab
    text = "could you stack the purple cube on top of the orange cube?"
    np.testing.assert_array_equal(loaded.encode(text, 16), tok.encode(text, 16))
    (tmp_path / "bad.json").write_text('{"format": "vlagym-tokenizer", "format_version": 1, "vocab": ["a"]}')
    with pytest.raises(ValueError, match="starts with"):
        Tokenizer.load(tmp_path / "bad.json")


def test_vocabulary_does_not_depend_on_text_order():
    texts = ["b a c", "d a"]
    assert Tokenizer.from_texts(texts).vocab == Tokenizer.from_texts(texts[::-1]).vocab


def test_language_tokens_wrapper(tok):
    env = LanguageTokens(FakeEnv(), tok, max_tokens=8)
    space = env.observation_space["instruction"]
    assert isinstance(space, gym.spaces.Box) and space.shape == (8,) and space.dtype == np.int64
    assert space.low.min() == 0 and space.high.max() == len(tok) - 1
    seen = set()
    for seed in range(8):
        obs, _ = env.reset(seed=seed)
        assert env.observation_space.contains(obs)
        np.testing.assert_array_equal(obs["instruction"], tok.encode(env.unwrapped.instruction, 8))
        seen.add(env.unwrapped.instruction)
        obs, *_ = env.step(np.zeros(2, np.float32))
        assert env.observation_space.contains(obs)
    assert len(seen) > 1  # the instruction, hence the tokens, follow the episode


def test_truncation_warns_once(tok, caplog):
    env = LanguageTokens(FakeEnv(instructions=("pick up the red cup",)), tok, max_tokens=3)
    with caplog.at_level(logging.WARNING, logger="vlagym.wrappers.language"):
        obs, _ = env.reset(seed=0)
        env.step(np.zeros(2, np.float32))
        env.reset(seed=1)
    assert obs["instruction"].tolist() == tok.tokenize("pick up the")
    assert len([r for r in caplog.records if "max_tokens=3" in r.getMessage()]) == 1


def test_bad_arguments_raise(tok):
    with pytest.raises(ValueError, match="max_tokens"):
        LanguageTokens(FakeEnv(), tok, max_tokens=0)
    with pytest.raises(TypeError, match="Dict observation"):
        LanguageTokens(FakeEnv(obs_mode="state"), tok)
    with pytest.raises(KeyError, match="no key 'text'"):
        LanguageTokens(FakeEnv(), tok, key="text")
    with pytest.raises(TypeError, match="must be a Text space"):
        LanguageTokens(FakeEnv(), tok, key="proprio")
