"""Task lists for a recipe config: training prompts and the held-out evaluation set."""

from __future__ import annotations

from distlab.recipes.lm.config import TaskConfig
from distlab.recipes.lm.tasks import Task, load_tasks

GENERATED = ("synthetic", "math", "math_synthetic")  # sources whose tasks are drawn, not read


def _families(spec: str) -> list[str] | None:
    names = [f.strip() for f in spec.split(",") if f.strip()]
    return names or None


def train_tasks(cfg: TaskConfig) -> list[Task]:
    n = cfg.train_size or (512 if cfg.train in GENERATED else None)
    return load_tasks(cfg.train, cfg.train_split, mbpp_dir=cfg.mbpp_dir, n=n, seed=cfg.seed,
                      families=_families(cfg.families))


def eval_tasks(cfg: TaskConfig) -> list[Task]:
    """Held out from training: another seed for synthetic tasks (and, by default, other families)."""
    n = cfg.eval_size or (64 if cfg.eval in GENERATED else None)
    return load_tasks(cfg.eval, cfg.eval_split, mbpp_dir=cfg.mbpp_dir, n=n, seed=cfg.seed + 10_007,
                      families=_families(cfg.eval_families))


def task_split(cfg: TaskConfig) -> tuple[list[Task], list[Task], list[Task]]:
    """``(training tasks, held-out tasks, few-shot examples)``: the examples are the first training tasks."""
    tasks = train_tasks(cfg)
    return tasks, eval_tasks(cfg), tasks[: cfg.few_shot]


def check_task_data(cfg: TaskConfig) -> None:
    """Before any process starts: the data files a task set needs exist (MBPP is read from ``task.mbpp_dir``)."""
    task_split(cfg)  # sources, splits, families and every line of a user's file, checked before a rank reads them
