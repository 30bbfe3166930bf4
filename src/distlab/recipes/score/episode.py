"""The two-turn episode as token ids with a role per token: ``x | y1 | (hint) instruction | y2``.

Turn 2 is sampled from a prompt built as *token ids* (turn 1's prompt ids, then y1's sampled ids, then
the tokenised hint and instruction), never by re-tokenising text: a BPE tokenizer can merge characters
across the y1/hint boundary differently from how y1 was sampled, and the trainer would then score
tokens the policy never produced. With ids, one forward pass over the finished episode gives the
log-probs of both turns at exactly the positions they were sampled at, and every token carries a role
from which the per-turn masks are built (``objective.turn_masks``): the policy is trained on y1 and y2
only, never on the prompt, the hint, the instruction or template glue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from distlab.errors import DistlabError
from distlab.recipes.lm.envs.chat_turns import next_user_turn
from distlab.recipes.lm.envs.trajectory import encode, encode_pieces
from distlab.recipes.lm.rollout.stops import FINISH_LENGTH, FINISH_STOP, Completion
from distlab.recipes.lm.tasks import Task, chat_messages
from distlab.recipes.lm.tasks.prompts import (chat_instruction, FENCE_CLOSE, FENCE_OPEN, is_math, render_prompt,
                                              text_lead)

ROLE_PAD, ROLE_PROMPT, ROLE_Y1, ROLE_GLUE, ROLE_HINT, ROLE_INSTR, ROLE_Y2, ROLE_FEEDBACK = -1, 0, 1, 2, 3, 4, 5, 6
ROLE_NAMES = {ROLE_PROMPT: "prompt", ROLE_Y1: "y1", ROLE_GLUE: "glue", ROLE_HINT: "hint", ROLE_INSTR: "instruction",
              ROLE_Y2: "y2", ROLE_FEEDBACK: "feedback"}
GUIDE_INSTRUCTION = ("Here is a programming problem and an attempted solution. Give one short hint in words "
                     "(no code) that would help the author check or fix it.")
GUIDE_INSTRUCTION_MATH = ("Here is a math problem and an attempted solution. Give one short hint in words (not the "
                          "final answer) that would help the author check or fix it.")
EXTRINSIC = "Execution result (extrinsic feedback)"


@dataclass
class Episode:
    """One (prompt, y1, hint, y2) sample; ``ids``/``roles`` grow as the turns are appended."""

    task: Task
    group: int  # index of the prompt within this rank's step: G episodes share it
    ids: list[int] = field(default_factory=list)
    roles: list[int] = field(default_factory=list)
    y1: Completion | None = None
    y2: Completion | None = None
    hint: Completion | None = None
    hint_prompt_ids: list[int] = field(default_factory=list)
    r1: float = 0.0
    r2: float = 0.0
    r2_no_hint: float | None = None
    exec_status: str = ""
    exec_tail: str = ""
    kept: bool | None = None  # arm=selective: turn 2 wrote y1 again unchanged (its verdict "y1 is right")

    def extend(self, ids: Sequence[int], role: int) -> None:
        self.ids += list(ids)
        self.roles += [role] * len(ids)

    @property
    def hint_text(self) -> str:
        return self.hint.text.strip() if self.hint is not None else ""


def execution_feedback(task: Task, status: str, tail: str) -> str:
    """One line on turn 1's test result: passed, or the failing status and the tail of its error output (the
    failing assert). Shown to the guidance (``hint_sees_execution``) or the policy (``policy_sees_execution``)."""
    if status == "passed":
        return f"{EXTRINSIC}: {'the final answer is right' if is_math(task) else 'passed every test'}."
    return f"{EXTRINSIC}: {status}. {tail.strip()}".rstrip()


def turn2_pieces(task: Task, tok, mode: str, prompt1: str, y1: Completion, hint: str, instruction: str,
                 few_shot: Sequence[Task] = (), restate: bool = False, feedback: str = "") -> list[tuple[str, int]]:
    """The text between y1 and y2 as ``(text, role)`` pieces; their ids are appended after y1's ids.

    Text mode: ``[feedback] [Hint: h] instruction [problem again] ```python``; ``feedback`` is turn 1's execution
    result (:func:`execution_feedback`, ``policy_sees_execution``), shown before the instruction. ``restate`` repeats the problem
    statement after the instruction: a base model continues the nearest problem, so without it a
    small text-mode model has only the instruction right before the code it must write. It says
    nothing about whether y1 was right. Chat mode: the tokenizer's template renders the conversation. A math task
    opens ``Solution:`` instead of the fence (and has no fence of y1's to close).
    """
    if mode == "text":
        closed = y1.finish_reason == FINISH_STOP or is_math(task)
        pieces = [] if closed else [("\n" + FENCE_CLOSE, ROLE_GLUE)]
        pieces.append(("\n", ROLE_GLUE))
        if feedback:
            pieces += [(feedback, ROLE_FEEDBACK), ("\n", ROLE_GLUE)]
        if hint:
            pieces += [("Hint: ", ROLE_GLUE), (hint, ROLE_HINT), ("\n", ROLE_GLUE)]
        pieces.append((instruction, ROLE_INSTR))
        if restate:
            pieces += [("\n", ROLE_GLUE), (task.prompt, ROLE_PROMPT)]
        return pieces + [("\n" + text_lead(task), ROLE_GLUE)]
    if mode != "chat":
        raise DistlabError(f"prompt mode {mode!r} is not one of chat, text")
    user = (f"{feedback}\n" if feedback else "") + (f"Hint: {hint}\n" if hint else "") + \
        f"{instruction}\n{chat_instruction(task)}"
    return next_user_turn(tok, chat_messages(task, few_shot=few_shot), prompt1, y1, user,
                          [(feedback, ROLE_FEEDBACK), (hint, ROLE_HINT), (instruction, ROLE_INSTR)], ROLE_GLUE)


def turn2_prompt(ep: Episode, tok, mode: str, prompt1: str, hint: str, instruction: str,
                 few_shot: Sequence[Task] = (), restate: bool = False, feedback: str = ""
                 ) -> tuple[list[int], list[int]]:
    """``(ids, roles)`` of the turn-2 prompt: the episode so far (x, y1) plus feedback, hint and instruction."""
    ids, roles = encode_pieces(tok, turn2_pieces(ep.task, tok, mode, prompt1, ep.y1, hint, instruction, few_shot,
                                                 restate, feedback))
    return list(ep.ids) + ids, list(ep.roles) + roles


def guidance_prompt(task: Task, y1_text: str, tok, mode: str, execution: tuple[str, str] | None) -> str:
    """What the guidance model reads: the problem, turn 1's attempt and (``hint_sees_execution``) its test result."""
    math = is_math(task)
    result = f"{execution_feedback(task, *execution)}\n" if execution is not None else ""
    # a chat reply brings its own fences; a text-mode completion is bare code; a math attempt is prose
    attempt = (f"{y1_text.strip()}\n" if FENCE_CLOSE in y1_text or math
               else f"{FENCE_OPEN}{y1_text.strip()}\n{FENCE_CLOSE}\n")
    if mode == "text":
        return f"Problem:\n{task.prompt}\nAttempt:\n{attempt}{result}Hint:"
    guide = GUIDE_INSTRUCTION_MATH if math else GUIDE_INSTRUCTION
    return render_prompt(tok, [{"role": "user", "content": f"{guide}\n\nProblem:\n{task.prompt}\n\n"
                                                           f"Attempt:\n{attempt}{result}"}])


def leaks_code(hint: str, markers: Sequence[str]) -> bool:
    """A hint that writes code hands over the answer instead of guiding: it is penalised and counted."""
    return any(m and m in hint for m in markers)


def pack(rows: list[list[int]], roles: list[list[int]], pad: int, device: torch.device
         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``ids``, ``attention`` and ``roles`` (``ROLE_PAD`` on padding) of whole episodes."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    role = torch.full((len(rows), width), ROLE_PAD, dtype=torch.long)
    for i, (r, ro) in enumerate(zip(rows, roles)):
        if len(r) != len(ro):
            raise ValueError(f"episode {i}: {len(r)} ids but {len(ro)} roles")
        ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        attn[i, :len(r)] = 1
        role[i, :len(r)] = torch.tensor(ro, dtype=torch.long)
    return ids.to(device), attn.to(device), role.to(device)


def turn2_length_bound(tasks: Sequence[Task], tok, mode: str, prompts1: Sequence[str], instruction: str,
                       few_shot: Sequence[Task], restate: bool, max_completion: int, hint_tokens: int,
                       feedback_chars: int = -1) -> int:
    """Tokens a turn-2 prompt of these tasks can reach: the longest turn-1 prompt with its template pieces, plus a
    full-length y1 and hint (the hint at twice its token budget, since the policy's tokenizer may split the guidance
    model's text finer), and with ``feedback_chars`` >= 0 (``policy_sees_execution``) the feedback line with an error
    tail of that many characters, a token each. Sizes the policy's one compiled cache; a longer prompt still runs,
    on a larger one."""
    empty = Completion(0, [], [], "", FINISH_LENGTH)  # unfinished: text mode closes its fence, the longer case
    longest = 0
    for task, p1 in zip(tasks, prompts1):
        glue = turn2_pieces(task, tok, mode, p1, empty, "", instruction, few_shot, restate)
        longest = max(longest, len(encode(tok, p1)) + sum(len(encode(tok, text)) for text, _ in glue))
    hint = 2 * hint_tokens + len(encode(tok, "Hint: \n")) if hint_tokens > 0 else 0
    feedback = (len(encode(tok, execution_feedback(tasks[0], "bad_tests", "") + "\n\n")) + feedback_chars
                if feedback_chars >= 0 and tasks else 0)
    return longest + max_completion + hint + feedback


def guidance_length_bound(tasks: Sequence[Task], gtok, mode: str, max_completion: int, tail_chars: int,
                          sees_execution: bool) -> int:
    """Tokens a guidance prompt can reach: the problem and template, an attempt of ``max_completion`` tokens (at
    twice that in the guidance model's tokens, as above) and, when the hint sees execution, the error tail."""
    execution = ("error", "x" * tail_chars) if sees_execution else None
    base = max((len(encode(gtok, guidance_prompt(t, "", gtok, mode, execution))) for t in tasks), default=0)
    return base + 2 * max_completion
