"""One played episode as token ids, with a role per token and the mask of the policy's own tokens.

The ids are the ones the policy was sampled from and sampled: the first prompt, then each reply's sampled ids and
each observation's ids (tokenised piece by piece), never the transcript re-tokenised, so one forward over the
episode scores every reply at the positions it was sampled at. ``mask`` is 1 exactly on the replies' tokens: what
the loss, the KL and every token count read, so the environment's text (test results, tool output, glue of a chat
template) is never trained on. It has the attributes the GRPO update reads of a single completion
(``prompt_ids``, ``token_ids``, ``truncated``, ``text``), ``token_ids`` being everything after the first prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from distlab.recipes.lm.envs.api import ROLE_PROMPT, Piece, resolved
from distlab.recipes.lm.rollout.stops import FINISH_LENGTH, Completion


def encode(tok, text: str) -> list[int]:
    """``text``'s ids with no special tokens added (a piece in the middle of an episode); none for no text."""
    return tok(text, add_special_tokens=False)["input_ids"] if text else []


def encode_pieces(tok, pieces: Sequence[Piece]) -> tuple[list[int], list[int]]:
    """``(ids, roles)`` of observation pieces, each tokenised on its own (its role then covers exactly its tokens)."""
    ids: list[int] = []
    roles: list[int] = []
    for text, role in pieces:
        piece = encode(tok, text)
        ids += piece
        roles += [role] * len(piece)
    return ids, roles


@dataclass
class Trajectory:
    """An episode: ``prompt_ids``, then ``token_ids`` (replies and observations) with ``mask`` (1: the policy's) and
    ``roles`` over ``prompt_ids + token_ids``; the replies and each turn's reward (a ``Future`` until resolved)."""

    prompt_index: int
    prompt_ids: list[int]
    token_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    roles: list[int] = field(default_factory=list)
    replies: list[Completion] = field(default_factory=list)
    rewards: list[float | Future] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)  # each observation's text, for the transcript
    said: list[str] = field(default_factory=list)  # each reply's decoded tokens (its text keeps no stop string)
    info: dict[str, float] = field(default_factory=dict)  # summed over the episode's steps
    cut_tokens: int = 0  # observation tokens left out to keep within the cap (see :meth:`add_observation`)

    @classmethod
    def start(cls, prompt_index: int, prompt_ids: Sequence[int], role: int = ROLE_PROMPT) -> Trajectory:
        return cls(prompt_index, list(prompt_ids), roles=[role] * len(prompt_ids))

    @property
    def ids(self) -> list[int]:
        """The whole episode so far: what the next turn is sampled from."""
        return self.prompt_ids + self.token_ids

    def add_reply(self, reply: Completion, role: int, said: str | None = None) -> None:
        """Append a reply; ``said`` is its decoded tokens, stop string included (default: its text)."""
        self.replies.append(reply)
        self.said.append(reply.text if said is None else said)
        self.token_ids += reply.token_ids
        self.mask += [1] * len(reply.token_ids)
        self.roles += [role] * len(reply.token_ids)

    def add_observation(self, tok, pieces: Sequence[Piece], max_tokens: int | None = None) -> None:
        """Append the environment's answer, masked out. Past ``max_tokens`` its middle is left out (its start says
        what happened, its end leads into the next reply)."""
        ids, roles = encode_pieces(tok, pieces)
        if max_tokens is not None and len(ids) > max_tokens:
            head = max_tokens // 2
            tail = max_tokens - head
            self.cut_tokens += len(ids) - max_tokens
            ids, roles = ids[:head] + ids[len(ids) - tail:], roles[:head] + roles[len(roles) - tail:]
        self.token_ids += ids
        self.mask += [0] * len(ids)
        self.roles += roles
        self.observations.append("".join(text for text, _ in pieces))

    def add_info(self, info: dict[str, float]) -> None:
        for key, value in info.items():
            self.info[key] = self.info.get(key, 0.0) + float(value)

    def resolve(self) -> None:
        """Rewards as numbers (waited for): what a checkpoint or the advantages can hold."""
        self.rewards = [resolved(r) for r in self.rewards]

    @property
    def total_reward(self) -> float:
        """The episode's return: the sum of its turns' rewards."""
        return sum(resolved(r) for r in self.rewards)

    @property
    def turns(self) -> int:
        return len(self.replies)

    @property
    def truncated(self) -> bool:
        """The last reply ran out of tokens (``mask_truncated_completions`` drops such episodes)."""
        return bool(self.replies) and self.replies[-1].finish_reason == FINISH_LENGTH

    @property
    def text(self) -> str:
        """The transcript after the first prompt: each reply as sampled, then the environment's answer."""
        parts = []
        for i, said in enumerate(self.said):
            parts.append(said)
            if i < len(self.observations):
                parts.append(self.observations[i])
        return "".join(parts)
