"""EvalPlus's rules for turning a reply into the program it runs (evalplus 0.3.1, ``sanitize.py``), on Python's own
parser.

EvalPlus parses with tree-sitter, but only code that ``ast.parse`` already accepted (its first step keeps the longest
run of lines that parses), and on valid code the two parsers see the same top-level statements; so the rules are
applied here to ``ast`` nodes, with tree-sitter's node kinds mapped as they fall:

1. Keep the run of at least two consecutive lines that parses and holds the most non-blank lines (the first such
   run wins ties); nothing parses: the first line.
2. From that run keep imports (not ``from __future__``), undecorated classes, undecorated functions that contain a
   ``return`` somewhere, and plain assignments to a name (any value); the first definition of a name wins. Decorated
   definitions, augmented assignments and every other statement are dropped.
3. Keep only the definitions reachable from the entry point through the identifiers they mention (all imports stay).
4. Nothing kept: the run of step 1 as it is.

How this differs from the ``distlab`` harness's extraction (:func:`~distlab.recipes.lm.tasks.extract.extract_code`),
which keeps every definition of every python block and only constants built from literals: a helper assigned from
a call (``PATTERN = re.compile(...)``) survives here and not there; a decorated function (``@lru_cache``) or one
without a ``return`` survives there and not here; code written after the first block is lost here.
"""

from __future__ import annotations

import ast
import warnings
from collections import deque

_DEFINITION = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _parses(code: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(code)
        return True
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False


def longest_valid_run(text: str) -> str:
    """Rule 1. EvalPlus tries every pair of lines (i < j); scanning j from the end and skipping starts that cannot
    beat the best so far gives the same run with far fewer parses."""
    lines = text.split("\n")
    filled = [1 if line.strip() else 0 for line in lines]
    after = [0] * (len(lines) + 1)  # non-blank lines from i to the end
    for i in range(len(lines) - 1, -1, -1):
        after[i] = after[i + 1] + filled[i]
    best, pair = 0, (0, 0)
    for i in range(len(lines)):
        if after[i] <= best:
            break  # no run starting here or later can hold more
        count = after[i]
        for j in range(len(lines) - 1, i, -1):
            if count <= best:
                break
            if _parses("\n".join(lines[i:j + 1])):
                # EvalPlus scans j upwards and keeps the first j with the most lines: drop trailing blank lines
                while j - 1 > i and not filled[j]:
                    j -= 1
                best, pair = count, (i, j)
                break
            count -= filled[j]
    return "\n".join(lines[pair[0]:pair[1] + 1])


def _returns(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Return) for n in ast.walk(node))


def _identifiers(node: ast.AST) -> set[str]:
    """Every identifier a definition mentions: names, attribute names, parameters, keywords, imported names."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.keyword) and n.arg:
            out.add(n.arg)
        elif isinstance(n, _DEFINITION):
            out.add(n.name)
        elif isinstance(n, ast.alias):
            out.update(n.name.split("."))
            if n.asname:
                out.add(n.asname)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            out.update(n.names)
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
    return out


def _definition_name(node: ast.stmt) -> tuple[bool, str | None]:
    """(kept as a definition, its name). An assignment whose first target is not a plain name has no name; like
    EvalPlus, the first such one is kept and later ones are not."""
    if isinstance(node, _DEFINITION):
        if node.decorator_list or (not isinstance(node, ast.ClassDef) and not _returns(node)):
            return False, None
        return True, node.name
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        return True, target.id if isinstance(target, ast.Name) else None
    return False, None


def _reachable(entry_point: str, deps: dict[str | None, set[str]]) -> set[str | None]:
    seen: set[str | None] = {entry_point}
    queue = deque([entry_point])
    while queue:
        for name in deps.get(queue.popleft(), ()):
            if name not in seen:
                seen.add(name)
                queue.append(name)
    return seen


def _kept_code(code: str, entry_point: str | None) -> str:
    """Rules 2 and 3 on a run that parses (or ``""``). A lone first line (nothing longer parsed) may be indented:
    tree-sitter still reads the statement on it, so it is read without its indent."""
    if "\n" not in code:
        code = code.strip()
    if not _parses(code):
        return ""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        body = ast.parse(code).body
    imports = [n for n in body if isinstance(n, ast.Import)
               or (isinstance(n, ast.ImportFrom) and n.module != "__future__")]
    definitions: list[tuple[str | None, ast.stmt]] = []
    names: set[str | None] = set()
    for node in body:
        kept, name = _definition_name(node)
        if kept and name not in names:
            definitions.append((name, node))
            names.add(name)
    if entry_point:
        reachable = _reachable(entry_point, {name: _identifiers(node) for name, node in definitions})
        definitions = [(name, node) for name, node in definitions if name in reachable]
    return "\n".join(ast.get_source_segment(code, n) or "" for n in imports + [n for _, n in definitions]).strip()


def sanitize(code: str, entry_point: str | None = None) -> str:
    """The program EvalPlus would run for ``code`` (rules 1-4)."""
    run = longest_valid_run(code)
    return _kept_code(run, entry_point) or run


def evalplus_program(completion: str, entry_point: str | None, prompt: str = "") -> str:
    """The program for a reply: a direct completion is appended to its ``prompt`` first, and tabs become four
    spaces, as EvalPlus's generation does before it sanitizes."""
    return sanitize(prompt + completion.replace("\t", "    "), entry_point)
