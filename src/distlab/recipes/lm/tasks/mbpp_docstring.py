"""MBPP problems asked the way HumanEval asks (``task.train=mbpp:docstring``): a signature and a docstring to continue.

Why: GRPO on MBPP's own prompts (a sentence and an assert, the reply a whole program) raised MBPP test by 11.8 points
and HumanEval by 1.2 (issue 46 item 3). HumanEval hands the model a function head and a docstring with examples and
wants the body. This rendering trains on that form without reading HumanEval: the function's name, argument names
and any other definitions the tests need (a class, a helper, an import) come from MBPP's reference solution, the
docstring holds the problem text and the example of the problem's first assert, and the reference completion is
the solution's body, re-indented by four spaces (``ast.unparse``: MBPP mixes tabs and spaces, which Python refuses
under a four-space docstring). Everything the solution defines besides the entry function goes above it, as
HumanEval's prompts show their helpers (HumanEval/10), so the body alone completes the program.
"""

from __future__ import annotations

import ast
import textwrap
import warnings

from distlab.recipes.lm.tasks.jsonl import Row, without_visible_test

SOURCE = "mbpp-docstring"  # Task.source of these tasks; prompts.py continues their function as HumanEval's
STYLES = ("docstring",)  # what may follow "mbpp:" in task.train / task.eval


def _parse(source: str) -> ast.Module | None:
    try:
        with warnings.catch_warnings():  # upstream solutions use invalid escapes like '\d'
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except SyntaxError:
        return None


def _first_assert(tests: str) -> tuple[str, ast.Assert] | None:
    tree = _parse(tests)
    for node in tree.body if tree else []:
        if isinstance(node, ast.Assert):
            return ast.get_source_segment(tests, node) or "", node
    return None


def example_lines(tests: str, entry_point: str) -> list[str]:
    """The first assert as a doctest: ``>>> call`` then the expected value when it reads
    ``assert entry(...) == literal``, else the assert itself after ``>>>`` (a doctest that prints nothing)."""
    found = _first_assert(tests)
    if found is None:
        return []
    text, node = found
    test = node.test
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.left, ast.Call) and isinstance(test.left.func, ast.Name)
            and test.left.func.id == entry_point):
        call = ast.get_source_segment(tests, test.left)
        expected = ast.get_source_segment(tests, test.comparators[0])
        try:
            ast.literal_eval(test.comparators[0])
            if call and expected:
                return [f">>> {call}", expected]
        except ValueError:
            pass
    return [f">>> {text}"]


def _docstring(text: str, example: list[str]) -> str:
    lines = [" ".join(text.split())] + example
    body = "\n".join(lines).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return textwrap.indent(f'"""{body}\n"""', "    ")


def _body(fn: ast.FunctionDef) -> str:
    stmts = fn.body[1:] if ast.get_docstring(fn, clean=False) is not None else fn.body  # ours replaces its own
    return textwrap.indent("\n".join(ast.unparse(s) for s in stmts) or "pass", "    ") + "\n"


def docstring_row(row: Row) -> Row | None:
    """The HumanEval-style form of one MBPP row, or ``None`` when its solution has no top-level entry function
    (then there is no head to hand over) or the rendering does not parse."""
    solution, entry = row.get("solution", ""), row.get("entry_point")
    tree = _parse(solution)
    if tree is None or not entry:
        return None
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry and not n.decorator_list]
    if len(fns) != 1:
        return None
    fn = fns[0]
    others = [ast.get_source_segment(solution, n, padded=False) or ast.unparse(n) for n in tree.body if n is not fn]
    head = "".join(f"{line.rstrip()}\n" for o in others for line in o.splitlines()) + ("\n\n" if others else "")
    returns = f" -> {ast.unparse(fn.returns)}" if fn.returns else ""
    text = without_visible_test(row["prompt"], row.get("visible_test", ""))
    prompt = (f"{head}def {entry}({ast.unparse(fn.args)}){returns}:\n"
              f"{_docstring(text, example_lines(row['tests'], entry))}\n")
    body = _body(fn)
    if _parse(prompt + body) is None:
        return None
    base, _, number = str(row["task_id"]).partition("/")
    return {"task_id": f"{base}-docstring/{number}", "prompt": prompt, "entry_point": entry, "tests": row["tests"],
            "source": SOURCE, "solution": prompt + body}
