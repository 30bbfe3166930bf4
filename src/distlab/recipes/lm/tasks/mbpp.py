"""MBPP (Austin et al. 2021) as rows of the task schema (:mod:`.jsonl`), with the benchmark's own id-range splits.

The prompt shows one of the asserts, not all three as in the paper: with all three visible, a weak policy learns to
special-case them (a SmolLM2 "pass" was ``return num >= 383``), and the reward stops measuring programming.
"""

from __future__ import annotations

import ast
import builtins
import functools
import json
import os
import warnings
from pathlib import Path

from distlab.errors import DistlabError, near_matches
from distlab.recipes.lm.tasks.jsonl import Row, row_tasks
from distlab.recipes.lm.tasks.task import Task

DEFAULT_MBPP_DIR = "../shared/data/mbpp"
CONFIG_KEY = "task.mbpp_dir"
FULL_FILE = "mbpp.jsonl"
SANITIZED_FILE = "sanitized-mbpp.json"

# Inclusive task_id ranges of the upstream README's standard split.
ID_RANGES: dict[str, tuple[int, int]] = {
    "prompt": (1, 10),
    "test": (11, 510),
    "validation": (511, 600),
    "train": (601, 974),
}
# Every hand-verified task, whatever its id range: the problems EvalPlus's MBPP+ was built from (its exact 378-task
# subset is not in the evalplus package, so this is the closest set that can be written offline; docs/evaluation.md)
SANITIZED_ALL = "sanitized"
SPLITS: tuple[str, ...] = tuple(ID_RANGES) + tuple(f"sanitized-{s}" for s in ID_RANGES) + (SANITIZED_ALL,)


def _lf(text: str) -> str:
    """The files store line breaks as CRLF; LF keeps prompts and token counts the same across sources."""
    return text.replace("\r\n", "\n")


def resolve_dir(data_dir: str | os.PathLike[str] | None) -> Path:
    """Where the MBPP files are; a missing folder is the user's to fix, so say which key points at it."""
    path = Path(data_dir if data_dir is not None else DEFAULT_MBPP_DIR).expanduser()
    if not (path / FULL_FILE).is_file():
        raise DistlabError(f"MBPP data not found: {(path / FULL_FILE).resolve()} does not exist; set {CONFIG_KEY} "
                           f"to the folder holding {FULL_FILE} and {SANITIZED_FILE}")
    return path


def _parse(source: str) -> ast.Module | None:
    """Parse quietly: upstream solutions use invalid escapes like '\\w', which warn on every load."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except SyntaxError:
        return None


def _called_names(source: str) -> list[str]:
    """Names called in ``source``, in reading order (``ast.walk`` is breadth-first, so sort by position)."""
    tree = _parse(source)
    if tree is None:
        return []
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    calls.sort(key=lambda n: (n.lineno, n.col_offset))
    return [c.func.id for c in calls]  # type: ignore[attr-defined]


def _defined_names(source: str) -> set[str]:
    tree = _parse(source)
    if tree is None:
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def entry_point_of(code: str, first_test: str) -> str | None:
    """MBPP does not name the function under test; the first name the test calls that the solution defines is it."""
    defined = _defined_names(code)
    called = _called_names(first_test)
    for name in called:
        if name in defined:
            return name
    for name in called:
        if not hasattr(builtins, name):
            return name
    return None


def _make_prompt(text: str, visible_test: str) -> str:
    return f"{text.strip()}\nYour code should pass this test:\n{visible_test}"


def _split_range(split: str) -> tuple[str, tuple[int, int]]:
    if split not in SPLITS:
        hint = near_matches(split, SPLITS)
        raise DistlabError(f"unknown MBPP split {split!r}; choose one of {', '.join(SPLITS)}"
                           + (f" (did you mean {hint[0]!r}?)" if hint else ""))
    if split == SANITIZED_ALL:
        return split, (min(lo for lo, _ in ID_RANGES.values()), max(hi for _, hi in ID_RANGES.values()))
    base = split.removeprefix("sanitized-")
    return base, ID_RANGES[base]


def _is_sanitized(split: str) -> bool:
    return split == SANITIZED_ALL or split.startswith("sanitized-")


def mbpp_rows(split: str = "test", data_dir: str | os.PathLike[str] | None = None, *,
              include_challenge: bool = False) -> list[Row]:
    """Rows of one split, in task_id order.

    ``split`` is ``train``/``validation``/``test``/``prompt`` of the full set, or the same with a ``sanitized-``
    prefix for the authors' hand-verified subset restricted to that id range, or ``sanitized`` for all 427 of it.
    ``include_challenge`` adds the 11 tasks' ``challenge_test_list`` to the hidden tests; it is off by default so
    scores compare with published ones.
    """
    _split_range(split)
    path = resolve_dir(data_dir).resolve()
    cached = _rows(split, str(path), include_challenge, (path / FULL_FILE).stat().st_mtime_ns)
    return [dict(row) for row in cached]  # copies: a caller editing its rows must not edit the cache


def load_mbpp(split: str = "test", data_dir: str | os.PathLike[str] | None = None, *,
              include_challenge: bool = False) -> list[Task]:
    """Built by the one row path (:mod:`.jsonl`), so a split written as JSONL loads back as these tasks."""
    return row_tasks(mbpp_rows(split, data_dir, include_challenge=include_challenge), "MBPP")


FULL_KEYS = ("task_id", "text", "code", "test_list")
SANITIZED_KEYS = ("task_id", "prompt", "code", "test_list")


def _checked(rec: object, keys: tuple[str, ...], where: str) -> dict:
    """One record with the keys the loader reads, a numeric id and at least one test."""
    if not isinstance(rec, dict):
        raise DistlabError(f"{where}: a record must be a JSON object, got {type(rec).__name__}")
    missing = [k for k in keys if k not in rec]
    if missing:
        raise DistlabError(f"{where}: missing key(s) {', '.join(missing)}; an MBPP record has {', '.join(keys)}")
    if not isinstance(rec["task_id"], int) or not isinstance(rec["test_list"], list) or not rec["test_list"]:
        raise DistlabError(f"{where}: task_id must be an integer and test_list a non-empty list")
    return rec


def _full_records(file: Path) -> list[dict]:
    """The JSON-lines file, each line checked and named by its own number in the file."""
    records = []
    with open(file, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise DistlabError(f"{file}:{n}: not valid JSON ({exc.msg}); restore the file") from None
            records.append(_checked(rec, FULL_KEYS, f"{file}:{n}"))
    if not records:
        raise DistlabError(f"{file} holds no MBPP records (empty or truncated); restore it, or set {CONFIG_KEY} to "
                           f"a folder with the complete {FULL_FILE}")
    return records


def _sanitized_records(file: Path) -> list[dict]:
    try:
        records = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DistlabError(f"{file}: not valid JSON ({exc}); restore the file") from None
    if not isinstance(records, list) or not records:
        raise DistlabError(f"{file} holds no list of MBPP records (empty or truncated); restore it")
    return [_checked(rec, SANITIZED_KEYS, f"{file}: record {i}") for i, rec in enumerate(records)]


def _sanitized_row(rec: dict) -> Row:
    asserts = [_lf(t).strip() for t in rec["test_list"]]
    imports = [_lf(t).strip() for t in rec.get("test_imports") or []]
    code = _lf(rec["code"])
    # Asserts such as math.isclose(...) need their import to be read as they will run.
    visible = "\n".join(imports + [asserts[0]])
    return {"task_id": f"mbpp-sanitized/{rec['task_id']}", "prompt": _make_prompt(_lf(rec["prompt"]), visible),
            "entry_point": entry_point_of(code, asserts[0]), "tests": "\n".join(imports + asserts) + "\n",
            "visible_test": visible, "source": "mbpp-sanitized", "solution": code}


def _full_row(rec: dict, include_challenge: bool) -> Row:
    asserts = [_lf(t).strip() for t in rec["test_list"]]
    if include_challenge:
        asserts += [_lf(t).strip() for t in rec.get("challenge_test_list") or []]
    setup = _lf(rec.get("test_setup_code") or "").strip()
    code = _lf(rec["code"])
    # The two tasks with setup code build objects the asserts use, so the visible test needs it to make sense.
    visible = f"{setup}\n{asserts[0]}" if setup else asserts[0]
    return {"task_id": f"mbpp/{rec['task_id']}", "prompt": _make_prompt(rec["text"], visible),
            "entry_point": entry_point_of(code, asserts[0]),
            "tests": "\n".join(([setup] if setup else []) + asserts) + "\n", "visible_test": visible,
            "source": "mbpp", "solution": code}


def _records(split: str, path: Path) -> list[dict]:
    if not _is_sanitized(split):
        return _full_records(path / FULL_FILE)
    sanitized = path / SANITIZED_FILE
    if not sanitized.is_file():
        raise DistlabError(f"MBPP data not found: {sanitized.resolve()} does not exist; set {CONFIG_KEY} to the "
                           f"folder holding {FULL_FILE} and {SANITIZED_FILE}")
    return _sanitized_records(sanitized)


@functools.lru_cache(maxsize=32)
def _rows(split: str, folder: str, include_challenge: bool, _mtime: int) -> tuple[Row, ...]:
    """Cached because parsing every solution for its entry point costs ~0.2 s and recipes load splits repeatedly."""
    _, (lo, hi) = _split_range(split)
    records = sorted(_records(split, Path(folder)), key=lambda r: r["task_id"])
    sanitized = _is_sanitized(split)
    return tuple(_sanitized_row(rec) if sanitized else _full_row(rec, include_challenge)
                 for rec in records if lo <= rec["task_id"] <= hi)
