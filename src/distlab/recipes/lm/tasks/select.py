"""Task lists for a recipe config: training prompts and the held-out evaluation set."""

from __future__ import annotations

from distlab.errors import DistlabError
from distlab.recipes.lm.config import TaskConfig
from distlab.recipes.lm.tasks import Task, load_tasks
from distlab.recipes.lm.tasks.mixture import mix_tasks, mixture_sources, mixture_weights, names_mixture

GENERATED = ("synthetic", "math", "math_synthetic")  # sources whose tasks are drawn, not read


def _families(spec: str) -> list[str] | None:
    names = [f.strip() for f in spec.split(",") if f.strip()]
    return names or None


def _source_tasks(cfg: TaskConfig, source: str) -> list[Task]:
    n = cfg.train_size or (512 if source in GENERATED else None)
    return load_tasks(source, cfg.train_split, mbpp_dir=cfg.mbpp_dir, n=n, seed=cfg.seed,
                      families=_families(cfg.families))


def train_tasks(cfg: TaskConfig) -> list[Task]:
    """One source's tasks, or a mixture's (``task.train=a+b``, :mod:`.mixture`): the same list on every rank."""
    sources = mixture_sources(cfg.train)
    weights = mixture_weights(cfg.train_weights, sources)
    if len(sources) == 1 and weights is None:
        return _source_tasks(cfg, sources[0])
    return mix_tasks([_source_tasks(cfg, s) for s in sources], weights, cfg.seed)


def eval_tasks(cfg: TaskConfig) -> list[Task]:
    """Held out from training: another seed for synthetic tasks (and, by default, other families)."""
    if names_mixture(cfg.eval):
        raise DistlabError(f"task.eval={cfg.eval!r}: evaluation reads one set (a mixture is for task.train); score "
                           f"each with distlab eval RUN task.eval=SET")
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
