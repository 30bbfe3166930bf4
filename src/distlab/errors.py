"""User-facing errors.

Anything a person can fix (a bad key, a missing path, an impossible setting) is raised as
:class:`DistlabError`; the CLI prints its message as one line and exits with status 2 instead of
showing a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class DistlabError(Exception):
    """An error caused by input the user can correct; the message says what and how."""


class InRunError(DistlabError):
    """A user-correctable error that can only show once a run is under way (a user reward function that raises or
    returns NaN): unlike a preflight refusal, the run directory already exists. The worker adds to the message that
    it is kept, what it holds, and how to resume or delete it, so the user is not left to guess."""


def near_matches(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Closest spellings of ``word`` among ``candidates`` (for 'did you mean' hints)."""
    cands = list(candidates)
    close = difflib.get_close_matches(word, cands, n=n, cutoff=0.5)
    if not close:
        tail = word.rsplit(".", 1)[-1]
        close = [c for c in cands if c.rsplit(".", 1)[-1] == tail][:n]
    return close
