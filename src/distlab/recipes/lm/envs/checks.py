"""The ``env.*`` checks made before any process starts: an environment that exists, limits that can hold an episode,
rewards and tasks of the kind it plays. Apart from :mod:`.config` because they read the registry of environments,
which itself builds on the config."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from distlab.errors import DistlabError, near_matches
from distlab.recipes.lm.envs.config import EnvConfig
from distlab.recipes.lm.envs.registry import ENVS


def env_names() -> tuple[str, ...]:
    return tuple(ENVS)


def check_env(env: EnvConfig, reward_funcs: Sequence[str]) -> None:
    """An environment that exists, limits that can hold an episode, rewards that read one."""
    if not env.name:  # env.* keys changed with no environment named would be accepted and do nothing
        changed = [f"env.{f.name}" for f in dataclasses.fields(env) if getattr(env, f.name) != f.default]
        if changed:
            raise DistlabError(f"{', '.join(changed)} set without env.name: they act only in an environment; add "
                               f"env.name={'|'.join(env_names())} or remove them")
        return
    names = env_names()
    if env.name not in names:
        hint = near_matches(env.name, names)
        raise DistlabError(f"env.name={env.name!r} is not an environment; give one of {', '.join(names)}, or leave it "
                           f"empty for one reply per prompt" + (f" (did you mean {hint[0]}?)" if hint else ""))
    if env.max_turns < 1:
        raise DistlabError(f"env.max_turns={env.max_turns} must be >= 1 (the policy's replies per episode)")
    if env.max_observation_chars < 1:
        raise DistlabError(f"env.max_observation_chars={env.max_observation_chars} must be >= 1")
    if env.max_observation_tokens < 16:
        raise DistlabError(f"env.max_observation_tokens={env.max_observation_tokens} must be >= 16: an environment's "
                           f"answer is cut to it, and a shorter one holds no test result")
    if "tests_fraction" in reward_funcs:
        raise DistlabError(f"reward_funcs tests_fraction scores one program, not an episode of env.name={env.name}; "
                           f"use tests (the episode's reward from the environment)")


def check_env_tasks(env: EnvConfig, kinds: set[str]) -> None:
    """The task set is of the kind the environment plays (``kinds``: the kinds of the training tasks); after
    :func:`check_env`, which has refused env.* settings without an environment."""
    if not env.name:
        return
    want = ENVS[env.name].task_kind
    if kinds - {want}:
        other = ", ".join(sorted(kinds - {want}))
        raise DistlabError(f"env.name={env.name} plays {want} tasks but task.train holds {other} tasks; pick a "
                           f"{want} task set or another environment")
