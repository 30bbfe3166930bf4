"""Where a generated completion ends: EOS, a stop string, or the token budget.

Both generation backends sample a little past the true end (stop strings are checked on decoded text
every few tokens, and finished rows keep a fixed batch shape); :func:`finish` cuts every row by the
same rule afterwards, so the backends return identical completions whenever they sampled the same
tokens. Token ids keep the token that ended the completion (the EOS, or the one completing a stop
string): those are the actions the policy took, so the trainer scores them. The text drops both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

FINISH_EOS, FINISH_STOP, FINISH_LENGTH = "eos", "stop", "length"


@dataclass
class Completion:
    """One sampled continuation of one prompt.

    ``truncated`` is True when neither EOS nor a stop string ended it (the budget ran out), which the
    recipes may penalise or mask. ``prompt_len`` counts the prompt's tokens without padding.
    """

    prompt_index: int
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    prompt_len: int = field(init=False)

    def __post_init__(self) -> None:
        self.prompt_len = len(self.prompt_ids)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == FINISH_LENGTH


def first_stop(text: str, stop_strings: Sequence[str]) -> int:
    """Index of the earliest stop string in ``text`` (-1 when none occurs)."""
    hits = [i for i in (text.find(s) for s in stop_strings if s) if i >= 0]
    return min(hits) if hits else -1


def stop_window_tokens(stop_strings: Sequence[str], check_every: int) -> int:
    """How many trailing tokens to decode so a stop string completed since the last check is seen.

    A character may take up to 4 byte-level tokens; the window also spans the ``check_every`` tokens
    added since the previous check.
    """
    longest = max((len(s) for s in stop_strings), default=0)
    return check_every + 4 * longest + 4


def decode(tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


def finish(tokenizer, prompt_index: int, prompt_ids: list[int], generated: Sequence[int],
           eos_ids: set[int], stop_strings: Sequence[str]) -> Completion:
    """Cut ``generated`` at its first EOS (kept) or the token completing the first stop string (kept),
    whichever comes first; otherwise it ran out of budget."""
    ids = list(generated)
    reason = FINISH_LENGTH
    for i, t in enumerate(ids):
        if t in eos_ids:
            ids, reason = ids[: i + 1], FINISH_EOS
            break
    text = decode(tokenizer, ids)
    at = first_stop(text, stop_strings) if stop_strings else -1
    if at >= 0:
        # Fewest tokens whose text already contains a stop string (containment grows with the prefix).
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if first_stop(decode(tokenizer, ids[:mid]), stop_strings) >= 0:
                hi = mid
            else:
                lo = mid + 1
        ids, reason = ids[:lo], FINISH_STOP
        text = text[:at]
    return Completion(prompt_index, prompt_ids, ids, text, reason)
