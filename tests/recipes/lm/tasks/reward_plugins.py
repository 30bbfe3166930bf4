"""User reward functions the reward tests name by import path (``reward_plugins:...``; tests/ is on sys.path)."""

import time


def short_is_good(prompt: str, completion: str, task) -> float:  # noqa: ARG001
    return 1.0 / (1.0 + len(completion))


def slow(prompt: str, completion: str, task) -> float:  # noqa: ARG001
    time.sleep(5)
    return 0.0


def broken(prompt: str, completion: str, task) -> float:  # noqa: ARG001
    raise ValueError("no score for you")


def wordy(prompt: str, completion: str, task) -> str:  # noqa: ARG001
    return "high"


NOT_A_FUNCTION = 3
