"""Final-answer checking for math tasks: pull the answer out of a completion and compare it with the reference.

Pure Python on the completion's text: nothing the model wrote is ever executed or ``eval``-ed (no sympy parser,
which evals). Extraction takes the last ``\\boxed{...}`` (balanced braces, nested ones included), else the last stated
answer ("the answer is X", "Answer: X", GSM8K's "#### X"), else the last number in the text. Comparison first tries
numbers: both sides go through a small ``ast``-walking evaluator that knows only number literals, ``+ - * / ^``,
parentheses and ``\\frac`` (exact :class:`fractions.Fraction` arithmetic, bounded exponents), so ``3/4`` equals
``0.75`` and ``1,234`` equals ``1234``; values equal within a relative 1e-6 count as equal. Anything else is compared
as a normalised string (spaces, ``$``, ``\\text{}``, ``\\left``/``\\right`` and a trailing period removed).
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

MAX_ANSWER_CHARS = 200  # longer candidates are not evaluated numerically (compared as strings only)
MAX_EXPONENT = 64
REL_TOL = Fraction(1, 10**6)

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?|-?\.\d+")
_STATED = re.compile(r"(?:####|\banswer\s*(?:is|=|:)|\bAnswer\s*:)\s*(?::\s*)?(.+)", re.I)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_FRAC_SHORT = re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)")
_ATOM_PARENS = re.compile(r"\((-?[\w.\\]+)\)")
_POWER = re.compile(r"\^\s*\{([^{}]*)\}")
_SQRT = re.compile(r"\\sqrt\s*\{([^{}]*)\}")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces; None when there is none."""
    best = None
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            best = text[m.end():i - 1]
    return best


def _first_sentence(s: str) -> str:
    s = s.strip().splitlines()[0] if s.strip() else ""
    # stop at a sentence end: ". " or a final "." that is not a decimal point
    m = re.search(r"\.(?:\s|$)(?!\d)", s)
    return s[:m.start()] if m else s


def stated_answer(text: str) -> str | None:
    """The last "answer is X" / "Answer: X" / "#### X" in ``text`` (up to the end of its sentence)."""
    found = None
    for m in _STATED.finditer(text):
        cand = _first_sentence(m.group(1))
        if cand.strip():
            found = cand
    return found


def last_number(text: str) -> str | None:
    found = _NUMBER.findall(text.replace("\u2212", "-"))
    return found[-1] if found else None


def extract_answer(text: str, strict: bool = False) -> str | None:
    """The completion's final answer as text; None when there is none. ``strict``: boxed or stated only."""
    if not text:
        return None
    for getter in (last_boxed, stated_answer):
        got = getter(text)
        if got is not None and normalize(got):
            return got.strip()
    return None if strict else last_number(text)


def normalize(answer: str) -> str:
    """A canonical string form: LaTeX wrappers, dollars, spaces, thousands separators, percent and the trailing
    period removed; ``x = 5`` becomes ``5``."""
    s = answer.strip().replace("\u2212", "-")
    for _ in range(3):  # inner groups first: \frac{\sqrt{3}}{2}
        s = _TEXT.sub(r"\1", s)
        s = _SQRT.sub(r"\\sqrt(\1)", s)
        s = _POWER.sub(r"^(\1)", s)
        s = _FRAC.sub(r"(\1)/(\2)", s)
    s = _FRAC_SHORT.sub(r"(\1)/(\2)", s)
    for old, new in (("\\left", ""), ("\\right", ""), ("\\!", ""), ("\\,", ""), ("\\;", ""), ("\\ ", ""),
                     ("\\$", ""), ("$", ""), ("\\%", ""), ("%", ""), ("\\cdot", "*"), ("\\times", "*"),
                     ("\\div", "/"), ("{", "("), ("}", ")"), ("^\\circ", ""), ("\\circ", "")):
        s = s.replace(old, new)
    if "=" in s:
        s = s.rsplit("=", 1)[1]
    s = _THOUSANDS.sub("", s)
    s = re.sub(r"\s+", "", s).rstrip(".").lower()
    while True:  # "x^(2)" and "x^2", "(3)/(4)" and "3/4": no parentheses around a single number or name
        t = _ATOM_PARENS.sub(r"\1", s)
        if t == s:
            return s
        s = t


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _value(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        v = _value(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.Div):
            return a / b  # ZeroDivisionError is caught by the caller
        if isinstance(node.op, ast.Pow) and b.denominator == 1 and abs(b) <= MAX_EXPONENT and abs(a) < 10**12:
            return a ** int(b)
    raise ValueError("not a plain number expression")


def numeric_value(answer: str) -> Fraction | None:
    """The exact value of a number or a small arithmetic expression (``3/4``, ``-2^3``, ``\\frac{1}{2}``); None
    for anything else. Walks the parsed tree itself; never evaluates."""
    s = normalize(answer)
    if not s or len(s) > MAX_ANSWER_CHARS or not re.fullmatch(r"[0-9.+\-*/^()e]+", s):
        return None
    s = s.replace("^", "**")
    try:
        return _value(ast.parse(s, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError, MemoryError):
        return None


def answers_match(got: str | None, reference: str) -> bool:
    """Equal as numbers (exact, or within a relative 1e-6) or, failing that, as normalised strings."""
    if got is None:
        return False
    want = numeric_value(reference)
    if want is not None:
        have = numeric_value(got)
        if have is None:  # "12 apples", "x = 12 cm": the first number of a stated answer
            m = _NUMBER.search(normalize(got))
            have = numeric_value(m.group(0)) if m else None
        if have is not None:
            return have == want or abs(have - want) <= REL_TOL * max(abs(want), Fraction(1, 10**6))
        return False
    return bool(normalize(got)) and normalize(got) == normalize(reference)


def check_answer(completion: str, reference: str) -> tuple[float, str, str]:
    """``(reward, status, detail)`` of a completion: 1.0 ``passed`` when its final answer matches, else 0.0
    ``wrong_answer`` or ``no_answer``. ``detail`` names what was read, never the reference."""
    got = extract_answer(completion)
    if got is None:
        return 0.0, "no_answer", "no final answer was found in the attempt"
    if answers_match(got, reference):
        return 1.0, "passed", ""
    return 0.0, "wrong_answer", f"the final answer read from the attempt, {got.strip()[:80]!r}, is wrong"
