"""The text an environment appends after a reply: its next user turn, as the chat template renders it.

In chat mode the tokens between the policy's reply and its next turn are the template's (end of the assistant turn,
the user's header, the new message, the assistant's header). They are taken from the template's rendering of the
whole conversation, cut right after the reply, so the reply's sampled ids stay as they were and only the suffix is
tokenised; the text the environment wrote in it is marked with its roles, the template's glue around it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from distlab.errors import DistlabError
from distlab.recipes.lm.envs.api import ROLE_ENV, Piece
from distlab.recipes.lm.rollout.stops import FINISH_EOS, Completion
from distlab.recipes.lm.tasks.prompts import render_prompt


def next_user_turn(tok, history: Sequence[Mapping[str, str]], prefix: str, reply: Completion, user: str,
                   marked: Sequence[Piece], glue: int = ROLE_ENV) -> list[Piece]:
    """The pieces after ``reply`` up to the policy's next turn, where the user says ``user``.

    ``history`` is the conversation the reply answered and ``prefix`` its rendering (what the reply was sampled
    after). ``marked`` are substrings of ``user``, in order, with their roles; everything else gets ``glue``.
    A template that does not render the conversation so far as a prefix of the next one (some drop earlier turns'
    reasoning) cannot be continued token for token: refused, naming the fix.
    """
    full = render_prompt(tok, [*history, {"role": "assistant", "content": reply.text}, {"role": "user", "content": user}])
    said = reply.text.strip()
    at = full.find(said, len(prefix)) if said else len(prefix)
    if not full.startswith(prefix) or at < 0:
        raise DistlabError("the chat template does not render the conversation so far and the reply as a prefix of "
                           "the next turn's conversation; use model.prompt_mode=text for this model")
    suffix = full[at + len(said):]
    eos = tok.eos_token or ""
    if reply.finish_reason == FINISH_EOS and eos and suffix.lstrip(" ").startswith(eos):  # the reply's ids end it
        suffix = suffix.lstrip(" ")[len(eos):]
    return split_marked(suffix, marked, glue)


def split_marked(text: str, marked: Sequence[Piece], glue: int = ROLE_ENV) -> list[Piece]:
    """``text`` cut around each marked substring (found in order); the rest is ``glue``."""
    out: list[Piece] = []
    pos = 0
    for sub, role in marked:
        if not sub:
            continue
        at = text.find(sub, pos)
        if at < 0:
            raise DistlabError(f"internal: {sub[:30]!r} not found in the rendered next turn")
        if at > pos:
            out.append((text[pos:at], glue))
        out.append((sub, role))
        pos = at + len(sub)
    if pos < len(text):
        out.append((text[pos:], glue))
    return out
