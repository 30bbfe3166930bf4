"""The Python tool: a model's tool call runs in the sandbox, and what it printed comes back.

The call's code is never compiled or run in the training process: it travels as a string literal inside a small
program that the sandbox runs (its own process tree, limits, namespaces and file system view; see
:mod:`~distlab.sandbox`). Inside, the code runs with an import hook that admits only the calculation
modules of :data:`ALLOWED_MODULES`, so ``import os`` fails with an ``ImportError`` naming them, and like a REPL the
value of a last bare expression is printed (``12 * 7`` answers ``84``). The hook is a convenience that tells a model
what the tool is for, not the security boundary: code that gets around it is still confined by the sandbox, which
is what keeps a write outside the run's own folder or a fork bomb from reaching the machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab.sandbox import Sandbox

ALLOWED_MODULES = ("math", "cmath", "fractions", "decimal", "statistics", "itertools", "functools", "operator",
                   "collections", "re", "string", "random", "numbers", "datetime")
RUNS = "assert True  # a tool call is judged only on running to the end\n"

_PROGRAM = '''def _distlab_tool(source, allowed):
    import ast, builtins
    real_import = builtins.__import__

    def guarded(name, globals=None, locals=None, fromlist=(), level=0):
        if level or name.partition(".")[0] not in allowed:
            raise ImportError("the python tool can import only " + ", ".join(allowed) + "; not " + repr(name))
        return real_import(name, globals, locals, fromlist, level)

    scope = {"__name__": "__tool__", "__builtins__": dict(vars(builtins), __import__=guarded)}
    tree = ast.parse(source, "<tool>")
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<tool>", "exec"), scope)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), "<tool>", "eval"), scope)
        if value is not None:
            print(repr(value))


_distlab_tool(%r, %r)
del _distlab_tool
'''


def tool_program(code: str) -> str:
    """The program the sandbox runs for one tool call: ``code`` as a literal, run by the guarded runner above."""
    return _PROGRAM % (code, ALLOWED_MODULES)


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gave: the text the model sees and the sandbox's status (``passed``: it ran to the end)."""

    output: str
    status: str

    @property
    def ok(self) -> bool:
        return self.status == "passed"


def clipped(text: str, max_chars: int) -> str:
    """``text`` within ``max_chars``: its start and its end, the middle left out."""
    if len(text) <= max_chars:
        return text
    head = max_chars // 2
    return text[:head] + "\n...\n" + text[len(text) - (max_chars - head):]


def run_tool(sandbox: Sandbox, code: str, max_chars: int) -> ToolResult:
    """Run one tool call in ``sandbox``; its output, or its printed output and the error that stopped it."""
    result = sandbox.run(tool_program(code), RUNS)
    out = result.stdout_tail
    if result.status == "timeout":
        out += f"TimeoutError: the tool call ran longer than {sandbox.config.timeout_s:g} s"
    elif result.status == "memory":
        out += "MemoryError: the tool call ran out of memory"
    elif not result.passed:
        lines = [x for x in result.stderr_tail.strip().splitlines() if x.strip()]
        out += lines[-1] if lines else f"the tool call failed ({result.status})"
    return ToolResult(clipped(out.strip(), max_chars), result.status)
