"""The layering rules, read from the import statements of every module (static: nothing is imported).

Every import counts, also one inside a function: a lazy import hides a circle from Python but not from a reader.

* No import circle anywhere in ``src/distlab``.
* The core stands on floors (``CORE_FLOORS``, from the ground up): a module imports only from its own floor or the
  floors below it, and never names a recipe. A new top-level module or folder must be given a floor here.
* The shared LM layer (``recipes/lm``) stands on floors of its own (``LM_FLOORS``) and never reaches up into a
  recipe built on it; GRPO and SCoRe never import each other.
* No recipe talks to ``torch.distributed`` itself (the core's ``Runtime`` and checkpointer do).
* The sandbox imports nothing from distlab but ``distlab.errors`` (its runner is copied into the sandbox, and the
  package must not depend on what it guards).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "distlab"

# the core's floors, from the ground up: a module's floor is that of its top-level file or folder under distlab/
CORE_FLOORS: list[tuple[str, ...]] = [
    ("errors", "atomic", "choices"),
    ("config", "recipe"),
    ("runtime",),
    ("memory",),
    ("run",),
    ("training",),
    ("launch", "doctor", "suite", "sandbox"),
    ("cli", "api", "__init__"),
]
# the shared LM layer's floors (names under recipes/lm/), from the ground up
LM_FLOORS: list[tuple[str, ...]] = [
    ("__init__", "config"),
    ("models", "tasks"),
    ("pg", "rollout", "rewards", "harnesses", "checks", "memory"),
    ("eval", "envs"),
]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(["distlab", *(parts[:-1] if parts[-1] == "__init__" else parts)])


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the distlab modules it imports (anywhere in its code), each resolved to the module file it names."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}

    def resolve(name: str) -> str:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for mod, path in paths.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                out |= {resolve(a.name) for a in node.names if a.name.split(".")[0] == "distlab"}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                if base.split(".")[0] != "distlab":
                    continue
                out |= {f"{base}.{a.name}" if f"{base}.{a.name}" in paths else resolve(base) for a in node.names}
        graph[mod] = out - {mod, "", "distlab"}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _floor(module: str, prefix: str, floors: list[tuple[str, ...]]) -> int | None:
    rest = module[len(prefix):].lstrip(".") if module.startswith(prefix) else None
    if rest is None:
        return None
    unit = rest.split(".")[0] or "__init__"
    return next((i for i, names in enumerate(floors) if unit in names), -1)


def upward_imports(graph: dict[str, set[str]], prefix: str, floors: list[tuple[str, ...]],
                   skip: tuple[str, ...] = ()) -> list[str]:
    """Imports from a module under ``prefix`` to one on a higher floor under the same prefix, and modules under
    ``prefix`` whose file or folder has no floor."""
    bad = []
    for mod, names in sorted(graph.items()):
        here = _floor(mod, prefix, floors)
        if here is None or mod.startswith(skip):
            continue
        if here < 0:
            bad.append(f"{mod} has no floor: add its file or folder to the floors of {prefix}")
            continue
        for name in sorted(names):
            there = _floor(name, prefix, floors)
            if there is not None and not name.startswith(skip) and there > here:
                bad.append(f"{mod} (floor {here}) imports {name} (floor {there})")
    return bad


def _offenders(graph: dict[str, set[str]], under: str, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{m} imports {n}" for m, names in sorted(graph.items()) if m.startswith(under)
            for n in sorted(names) if n.startswith(forbidden)]


def _raw_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(SRC)


def test_no_import_circle(graph):
    assert len(graph) > 100
    assert circles(graph) == []


def test_the_core_imports_only_downwards(graph):
    assert upward_imports(graph, "distlab", CORE_FLOORS, skip=("distlab.recipes",)) == []


def test_the_core_never_names_a_recipe(graph):
    core = {m: n for m, n in graph.items() if not m.startswith("distlab.recipes")}
    assert _offenders(core, "distlab", ("distlab.recipes",)) == []


def test_the_lm_layer_imports_only_downwards(graph):
    assert upward_imports(graph, "distlab.recipes.lm", LM_FLOORS) == []


@pytest.mark.parametrize("under, forbidden", [
    ("distlab.recipes.lm", ("distlab.recipes.grpo", "distlab.recipes.score")),
    ("distlab.recipes.grpo", ("distlab.recipes.score",)),
    ("distlab.recipes.score", ("distlab.recipes.grpo",)),
    ("distlab.sandbox", ("distlab.recipes", "distlab.config", "distlab.training", "distlab.runtime", "distlab.run",
                         "distlab.launch.launcher", "distlab.memory", "distlab.atomic", "distlab.choices")),
])
def test_recipes_never_reach_sideways_or_up(graph, under, forbidden):
    assert any(m.startswith(under) for m in graph), under
    assert _offenders(graph, under, forbidden) == []


def test_no_recipe_talks_to_torch_distributed():
    found = [f"{p.relative_to(SRC)} imports {n}" for p in sorted((SRC / "recipes").rglob("*.py"))
             for n in sorted(_raw_imports(p)) if n.startswith("torch.distributed")]
    assert found == []


def test_the_checks_see_a_circle_an_upward_import_and_a_floorless_module(tmp_path):
    """The rules above must be able to fail: a small tree with one of each offence."""
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "__init__.py").write_text("")
    (tmp_path / "training" / "a.py").write_text("def f():\n    from distlab.training import b\n")
    (tmp_path / "training" / "b.py").write_text("from distlab.training.a import f\n")  # a -> b -> a, one of them lazy
    (tmp_path / "config.py").write_text("from distlab.training.a import f\n")  # the ground floor reaching up
    (tmp_path / "newroom.py").write_text("import os\n")
    g = import_graph(tmp_path)
    assert circles(g) == [["distlab.training.a", "distlab.training.b"]]
    assert upward_imports(g, "distlab", CORE_FLOORS) == [
        "distlab.config (floor 1) imports distlab.training.a (floor 5)",
        "distlab.newroom has no floor: add its file or folder to the floors of distlab"]
