"""Language: instruction text -> fixed-length token ids, so vector envs and SB3 can carry the instruction.

`Tokenizer` is a word-level vocabulary (lowercased alphanumeric words; pad = 0,
unknown = 1). `Tokenizer.from_tasks()` builds it from every registered vlagym
task's instruction templates in both paraphrase splits, with every colour and
object kind a template field can take, so every instruction the suite can
produce encodes without unknown words. Save it with the policy: ids depend on
the vocabulary.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import re
import string
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vlagym.io import atomic_write_json

logger = logging.getLogger(__name__)

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1
SPECIAL_TOKENS = (PAD, UNK)
FORMAT = "vlagym-tokenizer"
FORMAT_VERSION = 1
DEFAULT_MAX_TOKENS = 16

_WORD = re.compile(r"[a-z0-9]+")


def split_words(text: str) -> list[str]:
    """Lowercased words: runs of letters and digits; everything else separates them."""
    return _WORD.findall(text.lower())


def template_field_words() -> dict[str, list[str]]:
    """Words each template field can take: colours for ``{color}``/``{base_color}``, kinds for ``{kind}``."""
    from vlagym.envs.objects import COLORS, KIND_HEIGHT
    from vlagym.envs.splits import HELDOUT_COLOR

    colors = sorted(COLORS)
    kinds = sorted(set(KIND_HEIGHT) | set(HELDOUT_COLOR))  # every object kind, buttons included
    return {"color": colors, "base_color": colors, "kind": kinds}


def task_templates() -> dict[str, dict[str, tuple[str, ...]]]:
    """Every registered vlagym task's templates per paraphrase split (the multi-task env reuses the others')."""
    from vlagym.envs import TASKS

    out = {}
    for env_id, (entry_point, _) in sorted(TASKS.items()):
        module, name = entry_point.split(":")
        templates = getattr(getattr(importlib.import_module(module), name), "templates", None)
        if templates is not None:
            out[env_id] = dict(templates)
    return out


def template_fields(template: str) -> list[str]:
    """The ``{field}`` names of a template, in order."""
    return [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]


class Tokenizer:
    """A word-level tokenizer with a fixed vocabulary; ids 0 and 1 are padding and unknown words."""

    def __init__(self, words: Iterable[str]):
        vocab = list(SPECIAL_TOKENS)
        seen = set(vocab)
        for word in words:
            if word in seen:
                continue
            if not _WORD.fullmatch(word):
                raise ValueError(f"vocabulary word {word!r} is not a lowercase alphanumeric word")
            vocab.append(word)
            seen.add(word)
        self.vocab: list[str] = vocab
        self._ids = {w: i for i, w in enumerate(vocab)}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> Tokenizer:
        """Vocabulary of every word in `texts`, sorted (so the ids do not depend on the texts' order)."""
        return cls(sorted({w for text in texts for w in split_words(text)}))

    @classmethod
    def from_tasks(cls) -> Tokenizer:
        """Vocabulary of every registered vlagym task's templates (both splits) and every value of their fields."""
        field_words = template_field_words()
        texts: list[str] = []
        for env_id, splits in task_templates().items():
            for template in (t for ts in splits.values() for t in ts):
                for f in template_fields(template):
                    if f not in field_words:
                        raise ValueError(
                            f"{env_id} template {template!r} has field {{{f}}} whose words are unknown; "
                            f"known fields: {sorted(field_words)} (extend template_field_words)"
                        )
                texts.append(re.sub(r"\{[^}]*\}", " ", template))
        texts.extend(w for words in field_words.values() for w in words)
        return cls.from_texts(texts)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "vocab": list(self.vocab)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Tokenizer:
        if d.get("format") != FORMAT:
            raise ValueError(f"not a tokenizer: format is {d.get('format')!r}, expected {FORMAT!r}")
        if d.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"unsupported tokenizer format_version {d.get('format_version')!r}; reads {FORMAT_VERSION}"
            )
        vocab = list(d["vocab"])
        if tuple(vocab[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS or len(set(vocab)) != len(vocab):
            raise ValueError(f"a tokenizer vocabulary starts with {list(SPECIAL_TOKENS)} and has no duplicates")
        return cls(vocab[len(SPECIAL_TOKENS) :])

    def save(self, path: str | os.PathLike) -> Path:
        """Write JSON atomically (a temp file in the same folder, then `os.replace`)."""
        return atomic_write_json(path, self.to_dict(), indent=1)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Tokenizer:
        return cls.from_dict(json.loads(Path(path).read_text()))

    # ------------------------------------------------------------------ use
    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenizer) and self.vocab == other.vocab

    __hash__ = None  # type: ignore[assignment]

    def tokenize(self, text: str) -> list[int]:
        """Ids of every word of `text`, unknown words as `UNK_ID`; no padding or truncation."""
        return [self._ids.get(w, UNK_ID) for w in split_words(text)]

    def encode(self, text: str, length: int) -> np.ndarray:
        """`length` int64 ids: the words of `text`, truncated or padded with `PAD_ID` at the end."""
        ids = self.tokenize(text)[:length]
        out = np.full(length, PAD_ID, np.int64)
        out[: len(ids)] = ids
        return out

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """Words of `ids` joined by spaces; padding dropped, unknown words as ``<unk>``."""
        words = []
        for i in np.asarray(ids, dtype=np.int64).reshape(-1).tolist():
            if not 0 <= i < len(self.vocab):
                raise ValueError(f"token id {i} is outside the vocabulary [0, {len(self.vocab) - 1}]")
            if i != PAD_ID:
                words.append(self.vocab[i])
        return " ".join(words)


class LanguageTokens(gym.ObservationWrapper):
    """Replaces the `Text` instruction of a `Dict` observation by ``Box(0, vocab_size - 1, (max_tokens,), int64)``.

    Words beyond `max_tokens` are dropped; the first time that happens this
    wrapper logs a warning (once per wrapper). The default of 16 tokens fits
    every instruction of every registered vlagym task (a test checks it).
    """

    def __init__(
        self, env: gym.Env, tokenizer: Tokenizer, max_tokens: int = DEFAULT_MAX_TOKENS, key: str = "instruction"
    ):
        super().__init__(env)
        if not isinstance(tokenizer, Tokenizer):
            raise TypeError(f"tokenizer must be a Tokenizer, got {type(tokenizer).__name__}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer)) or max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        space = env.observation_space
        if not isinstance(space, spaces.Dict):
            raise TypeError(f"LanguageTokens needs a Dict observation space (vlagym: obs_mode='rgb'), got {space}")
        if key not in space.spaces:
            raise KeyError(f"observation has no key {key!r}; its keys: {list(space.spaces)}")
        if not isinstance(space[key], spaces.Text):
            raise TypeError(f"observation {key!r} must be a Text space, got {space[key]}")
        self.tokenizer, self.max_tokens, self.key = tokenizer, int(max_tokens), key
        new = dict(space.spaces)
        new[key] = spaces.Box(0, tokenizer.vocab_size - 1, (self.max_tokens,), np.int64)
        self.observation_space = spaces.Dict(new)
        self._warned = False

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        text = observation[self.key]
        out = dict(observation)
        out[self.key] = self.tokenizer.encode(text, self.max_tokens)
        if not self._warned:
            n = len(split_words(text))
            if n > self.max_tokens:
                self._warned = True
                logger.warning(
                    "instruction %r has %d words; LanguageTokens keeps the first max_tokens=%d (warned once)",
                    text,
                    n,
                    self.max_tokens,
                )
        return out
