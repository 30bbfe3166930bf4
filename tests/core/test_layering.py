"""The layering rules, read from the import statements of every module (static: nothing is imported).

The core never names a recipe; the shared LM layer never reaches up into a recipe built on it; GRPO and
SCoRe never import each other; and no recipe talks to ``torch.distributed`` itself (the core's
``Runtime`` and checkpointer do).
"""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "distlab"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(folder: str) -> list[Path]:
    return sorted((SRC / folder).rglob("*.py"))


def _offenders(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{p.relative_to(SRC)} imports {name}" for p in _modules(folder) for name in sorted(_imports(p))
            if name.startswith(forbidden)]


@pytest.mark.parametrize("folder, forbidden", [
    ("recipes/lm", ("distlab.recipes.grpo", "distlab.recipes.score")),
    ("recipes/grpo", ("distlab.recipes.score",)),
    ("recipes/score", ("distlab.recipes.grpo",)),
    ("recipes", ("torch.distributed",)),
])
def test_layers_import_only_downwards(folder, forbidden):
    assert _modules(folder), folder
    assert _offenders(folder, forbidden) == []


def test_the_checker_sees_an_offending_import(tmp_path, monkeypatch):
    bad = tmp_path / "recipes" / "lm"
    bad.mkdir(parents=True)
    (bad / "x.py").write_text("import torch.distributed as dist\nfrom distlab.recipes.grpo.config import GRPOConfig\n")
    monkeypatch.setattr(__import__(__name__), "SRC", tmp_path)
    assert len(_offenders("recipes/lm", ("distlab.recipes.grpo", "torch.distributed"))) == 2
