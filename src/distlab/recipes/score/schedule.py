"""Which SCoRe stage a step trains: ``stage_schedule="I:10,II:20"`` cycles 10 stage-I steps, 20 stage-II steps.

The paper runs stage I, then stage II, and mentions repeating stage I; a cycled pattern covers both
(``"I:30,II:*"`` is "stage I for 30 steps, then stage II to the end"). The stage is a pure function of
the schedule position, and that position is registered with the session so a resumed run continues
the pattern where it stopped, not from its start.
"""

from __future__ import annotations

from dataclasses import dataclass

from distlab.errors import DistlabError

STAGES = ("I", "II")


@dataclass(frozen=True)
class Segment:
    stage: str
    steps: int  # -1: until the end of training (only as the last segment)


def parse_schedule(spec: str) -> list[Segment]:
    """``"I:10,II:20"`` -> segments; a one-line error for anything else."""
    segments: list[Segment] = []
    parts = [p.strip() for p in str(spec).split(",") if p.strip()]
    if not parts:
        raise DistlabError(f"stage_schedule={spec!r} is empty; write e.g. I:10,II:20 (cycled) or I:30,II:*")
    for i, part in enumerate(parts):
        stage, sep, count = part.partition(":")
        stage = stage.strip().upper()
        if not sep or stage not in STAGES:
            raise DistlabError(f"stage_schedule={spec!r}: {part!r} is not STAGE:STEPS with STAGE I or II")
        count = count.strip()
        if count == "*":
            if i != len(parts) - 1:
                raise DistlabError(f"stage_schedule={spec!r}: only the last segment may run to the end (*)")
            segments.append(Segment(stage, -1))
            continue
        if not count.isdigit() or int(count) < 1:
            raise DistlabError(f"stage_schedule={spec!r}: {part!r} needs a step count >= 1 or *")
        segments.append(Segment(stage, int(count)))
    return segments


def stage_at(segments: list[Segment], position: int) -> str:
    """The stage of the ``position``-th step (0-based) of a cycled schedule."""
    period = sum(s.steps for s in segments if s.steps > 0)
    if segments[-1].steps == -1:
        if position >= period:
            return segments[-1].stage
    else:
        position %= period
    for s in segments:
        if position < s.steps:
            return s.stage
        position -= s.steps
    raise AssertionError("unreachable")


class StageSchedule:
    """The schedule's position and how many steps each stage has had: small state saved in every checkpoint."""

    def __init__(self, spec: str) -> None:
        self.segments = parse_schedule(spec)
        self.position = 0
        self.steps_in = {s: 0 for s in STAGES}

    @property
    def stage(self) -> str:
        return stage_at(self.segments, self.position)

    def advance(self) -> None:
        self.steps_in[self.stage] += 1
        self.position += 1

    def state_dict(self) -> dict:
        return {"position": self.position, "steps_I": self.steps_in["I"], "steps_II": self.steps_in["II"]}

    def load_state_dict(self, state: dict) -> None:
        self.position = int(state["position"])
        self.steps_in = {"I": int(state["steps_I"]), "II": int(state["steps_II"])}
