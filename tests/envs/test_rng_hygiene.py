"""One random generator: no global RNG inside vlagym/envs and vlagym/wrappers (STYLE #5)."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

import vlagym

PACKAGE = Path(vlagym.__file__).resolve().parent
CHECKED_DIRS = ("envs", "wrappers")
NUMPY_ALLOWED = {"Generator"}  # type hints only; everything else must come from self.np_random


def global_rng_uses(source: str) -> list[tuple[int, str]]:
    """(line, snippet) of every global-RNG use in `source`, ignoring comments and strings."""
    tokens = [
        t
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type in (tokenize.NAME, tokenize.OP) and t.string != "\n"
    ]
    names = [t.string for t in tokens]
    hits = []
    for i, tok in enumerate(tokens):
        after_dot = i > 0 and names[i - 1] == "."
        nxt = names[i + 1 : i + 5]
        if tok.string in ("np", "numpy") and not after_dot and nxt[:3] == [".", "random", "."]:
            attr = nxt[3] if len(nxt) > 3 else ""
            if attr not in NUMPY_ALLOWED:
                hits.append((tok.start[0], f"{tok.string}.random.{attr}"))
        elif tok.string == "random" and not after_dot:
            prev = names[i - 1] if i > 0 else ""
            if prev == "import" or (prev == "from" and nxt[:1] == ["import"]):
                hits.append((tok.start[0], "import of the random module"))
            elif nxt[:1] == ["."]:
                hits.append((tok.start[0], f"random.{nxt[1] if len(nxt) > 1 else ''}"))
        elif tok.string == "torch" and not after_dot and nxt[:1] == ["."] and len(nxt) > 1:
            if nxt[1].startswith("rand") or nxt[1] in ("normal", "bernoulli", "multinomial", "manual_seed"):
                hits.append((tok.start[0], f"torch.{nxt[1]}"))
    # `from numpy.random import default_rng` / `from numpy import random`
    for i in range(len(tokens) - 3):
        if names[i] == "from" and names[i + 1] == "numpy":
            if names[i + 2 : i + 4] == [".", "random"] or names[i + 2 : i + 4] == ["import", "random"]:
                hits.append((tokens[i].start[0], "import from numpy.random"))
    return hits


def source_files() -> list[Path]:
    return [p for d in CHECKED_DIRS if (PACKAGE / d).is_dir() for p in sorted((PACKAGE / d).rglob("*.py"))]


@pytest.mark.parametrize(
    "snippet",
    [
        "x = np.random.uniform(0, 1)",
        "rng = np.random.default_rng()",
        "np.random.seed(0)",
        "numpy.random.rand(3)",
        "import random",
        "from random import choice",
        "y = random.random()",
        "t = torch.rand(3)",
        "t = torch.randint(0, 5, (2,))",
        "from numpy.random import default_rng",
        "from numpy import random",
    ],
)
def test_checker_catches_global_rng(snippet):
    assert global_rng_uses(snippet + "\n"), snippet


@pytest.mark.parametrize(
    "snippet",
    [
        "def f(rng: np.random.Generator) -> None: ...",
        "x = self.np_random.uniform(0, 1)",
        "x = rng.random()",
        "# np.random.uniform is forbidden here",
        "'''No np.random.* or random.* inside envs/'''",
        "self.random = 3",
    ],
)
def test_checker_allows_generator_use(snippet):
    assert not global_rng_uses(snippet + "\n"), snippet


def test_checked_directories_exist_and_hold_code():
    assert any(p.name == "base.py" for p in source_files()), "the checker found no env sources to check"


def test_no_global_rng_in_envs_and_wrappers():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
        for path in source_files()
        for line, what in global_rng_uses(path.read_text())
    ]
    assert not offenders, "global RNG use (take self.np_random instead):\n" + "\n".join(offenders)
