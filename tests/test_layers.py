"""The house rules a reader relies on, checked on the source: layers, no import cycles, sizes, no private
name used across packages (DESIGN.md "Layout")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "vlagym"
LAYERS = ("envs", "wrappers", "policies", "train", "eval", "rl", "perf", "cli")  # lowest first
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 100


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


MODULES = _modules()


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every `from vlagym... import names` and `import vlagym...` in a file, nested ones too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vlagym"):
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.startswith("vlagym")]
    return found


def _edges(name: str) -> set[str]:
    deps = set()
    for module, names in _imports(MODULES[name]):
        subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES]
        deps.update(subs)
        if len(subs) < len(names) or not names:
            deps.add(module)
    # Importing a submodule initialises its parent packages; that is not a dependency of this module's code.
    return {d for d in deps if d in MODULES and d != name and d != "vlagym"}


def _layer(name: str) -> int:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else -1


def test_no_import_reaches_a_higher_layer():
    upward = [
        f"{name} -> {dep}"
        for name in MODULES
        for dep in _edges(name)
        if _layer(name) >= 0 and _layer(dep) > _layer(name)
    ]
    assert not upward, f"imports from a lower layer to a higher one ({' < '.join(LAYERS)}): {upward}"


def test_no_import_cycles():
    graph = {name: _edges(name) for name in MODULES}
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep) :] + [dep])
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, f"import cycles: {cycles}"


def test_no_private_name_crosses_a_package():
    crossing = []
    for name, path in MODULES.items():
        package = name.rsplit(".", 1)[0] if path.name != "__init__.py" else name
        for module, names in _imports(path):
            home = module if module in MODULES and MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
            if home != package and not home.startswith(package + "."):
                crossing += [f"{name}: {module}.{n}" for n in names if n.startswith("_") and n != "__version__"]
    assert not crossing, f"private names imported from another package: {crossing}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_sizes(name):
    path = MODULES[name]
    rel = path.relative_to(PACKAGE).as_posix()
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{rel} has {lines} lines (at most {MAX_MODULE_LINES}): split it"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{rel}: functions over {MAX_FUNCTION_LINES} lines: {long}"
