"""Turn a model's completion into the program the sandbox runs.

Completions mix prose, markdown fences, usage examples, ``print`` calls, asserts the model wrote for itself and,
when generation hits the token limit, a half-written last definition. Running all of that would let the model's
own asserts or prints decide the outcome (or crash a correct solution), so only definitions survive: imports,
complete top-level functions and classes, and simple constant assignments they may use.
"""

from __future__ import annotations

import ast
import re
import textwrap
import warnings

# A fenced block; the closing fence is optional because a completion may stop inside the block.
_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.S | re.M)
_FENCE_LINE = re.compile(r"^[ \t]*```.*$", re.M)
_CODE_LANGS = {"", "python", "py", "python3", "py3"}
_MAX_JOIN = 12  # top-level chunks tried together when one alone does not parse (decorators, closing brackets)
# First line of a statement that could be kept; other chunks (prose, calls, loops, asserts) are skipped unparsed,
# which keeps a long chatty completion cheap (each parse attempt of a prose line costs up to _MAX_JOIN parses).
_KEEPABLE_START = re.compile(r"(?:async\s+def|def|class|import|from)\b|@|[A-Za-z_]\w*\s*(?::|=(?!=))")

# Calls allowed in a kept constant assignment: pure constructors that cannot run model code or touch the outside.
_PURE_CALLS = {"int", "float", "str", "bool", "tuple", "list", "set", "frozenset", "dict", "range", "complex",
               "bytes", "len", "abs", "min", "max", "sorted", "ord", "chr"}
_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _is_simple_value(node: ast.AST) -> bool:
    """A value computed from literals, names and a few pure builtins: safe to evaluate at import time."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            if not (isinstance(sub.func, ast.Name) and sub.func.id in _PURE_CALLS):
                return False
        elif isinstance(sub, (ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, ast.ListComp,
                              ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Subscript, ast.Starred,
                              ast.JoinedStr)):
            return False
    return True


def _is_annotation(node: ast.AST) -> bool:
    """Annotations are evaluated at module level too, so they may only name types, never call anything."""
    return all(isinstance(sub, (ast.Name, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.Constant,
                                ast.BinOp, ast.BitOr, ast.Load, ast.expr_context))
               for sub in ast.walk(node))


def _keep(node: ast.stmt) -> bool:
    if isinstance(node, _DEFINITIONS):
        return True
    if isinstance(node, ast.Assign):
        return all(isinstance(t, ast.Name) for t in node.targets) and _is_simple_value(node.value)
    if isinstance(node, ast.AnnAssign):
        return (isinstance(node.target, ast.Name) and node.value is not None and _is_simple_value(node.value)
                and _is_annotation(node.annotation))
    return False


def _chunks(source: str) -> list[str]:
    """Split at every line that starts at column 0, so each chunk holds one top-level statement or prose line."""
    chunks: list[list[str]] = []
    for line in source.splitlines():
        starts_statement = bool(line) and not line[0].isspace()
        if starts_statement or not chunks:
            chunks.append([line])
        else:
            chunks[-1].append(line)
    return ["\n".join(c) for c in chunks]


def _parse_chunk(text: str) -> list[ast.stmt] | None:
    try:
        with warnings.catch_warnings():  # model code is full of invalid escapes; their warnings are noise here
            warnings.simplefilter("ignore")
            return ast.parse(text).body
    except (SyntaxError, ValueError):  # ValueError: null bytes
        return None


def _definitions(source: str) -> list[str]:
    """Source of each kept statement, in order; chunks that never parse (prose, truncated code) are skipped."""
    chunks = _chunks(source)
    kept: list[str] = []
    i = 0
    while i < len(chunks):
        if not _KEEPABLE_START.match(chunks[i]):
            i += 1
            continue
        for j in range(i, min(i + _MAX_JOIN, len(chunks))):
            text = "\n".join(chunks[i:j + 1])
            body = _parse_chunk(text)
            if body is not None:
                lines = text.splitlines()
                for node in body:
                    if _keep(node):
                        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                        kept.append("\n".join(lines[start - 1:node.end_lineno]).rstrip())
                i = j + 1
                break
        else:
            i += 1
    return kept


def _defines(code: str, name: str) -> bool:
    body = _parse_chunk(code) or []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def _clean(source: str) -> str:
    parts = _definitions(source)
    return ("\n\n".join(parts) + "\n") if parts else ""


def extract_code(completion: str, entry_point: str | None = None) -> str:
    """The runnable definitions in ``completion``, or ``""`` when there are none.

    Fenced code blocks are preferred over the surrounding prose (all python or unlabelled blocks, in order: a later
    definition overrides an earlier one, as Python would). If those blocks do not define ``entry_point`` but the
    whole text does (the function written outside the fences), the whole text is used instead.
    """
    if not completion or not completion.strip():
        return ""
    completion = completion.replace("\r\n", "\n")
    blocks = [textwrap.dedent(m.group(2)) for m in _FENCE.finditer(completion)
              if m.group(1).lower() in _CODE_LANGS]
    whole = _clean(_FENCE_LINE.sub("", completion))
    if not blocks:
        return whole
    fenced = _clean("\n".join(blocks))
    if entry_point and not _defines(fenced, entry_point) and _defines(whole, entry_point):
        return whole
    return fenced or whole
