"""Typed run configuration: schema, presets, ``key=value`` overrides, world-size scaling, run name.

Every recipe's config is a dataclass that extends :class:`BaseConfig`; OmegaConf turns it into a
structured config so an unknown key or a value of the wrong type is rejected *before* any worker
process starts, with the closest valid keys named in a one-line error.
"""

from __future__ import annotations

import fnmatch
import hashlib
import math
import re
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

from distlab.choices import Choice
from distlab.errors import DistlabError, near_matches


class Resume(Choice):
    auto = "auto"    # resume if the run directory holds a checkpoint, else start fresh
    never = "never"  # refuse to reuse a run directory that already has checkpoints
    must = "must"    # fail if there is nothing to resume from
    fresh = "fresh"  # start again from step 0; existing checkpoints are moved aside, never deleted


class Wrap(Choice):
    ddp = "ddp"
    fsdp = "fsdp"
    none = "none"


class Precision(Choice):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"  # autocast to float16 with dynamic loss scaling (see distlab.training.amp)


class CompileMode(Choice):
    """``torch.compile`` modes by name: ``reduce_overhead`` replays CUDA graphs (fewer launches); the
    ``max_autotune`` ones benchmark GEMM and fusion choices at compile time (slower to start)."""

    default = "default"
    reduce_overhead = "reduce-overhead"
    max_autotune = "max-autotune"
    max_autotune_no_cudagraphs = "max-autotune-no-cudagraphs"

    @property
    def replays_cuda_graphs(self) -> bool:
        """A replayed graph writes its outputs into memory its next replay reuses: a caller that keeps an output
        across calls (a recurrent carry, a gradient accumulated over micro-batches) must copy it out first."""
        return self in (CompileMode.reduce_overhead, CompileMode.max_autotune)


class ActivationCheckpointing(Choice):
    none = "none"
    blocks = "blocks"  # recompute every declared block in backward
    selective = "selective"  # recompute every other declared block (0, 2, 4, ...): about half the saving, half the cost


class CommHook(Choice):
    none = "none"
    fp16 = "fp16"
    bf16 = "bf16"
    powersgd = "powersgd"


class StateDtype(Choice):
    fp32 = "fp32"
    bf16 = "bf16"
    int8 = "int8"


class BatchScale(Choice):
    none = "none"
    linear = "linear"


class LrScale(Choice):
    none = "none"
    sqrt = "sqrt"
    linear = "linear"


BF16_NEEDS_NCCL = ("dist.comm_hook=bf16 needs NCCL on CUDA (DDP refuses the bf16 hook on gloo/CPU); use "
                   "dist.comm_hook=fp16 or powersgd here")


class PlacementKind(Choice):
    device = "device"  # the rank's compute device: its first GPU, or the CPU on a CPU run
    cuda = "cuda"  # cuda:N, the N-th of the rank's own GPUs (dist.devices_per_rank)
    cpu = "cpu"
    offload = "offload"  # weights in (pinned) host memory, each layer's streamed to the compute device as it runs


@dataclass(frozen=True)
class Placement:
    """Where one model lives and computes: the text of ``models.<name>.placement`` as a value.

    The text is read by this one rule (:meth:`parse`) and every reader (the checks before launch, the recipes'
    checks, the doctor's per-device plan, the memory estimate, ``placement.place``) asks the value, so the spellings
    the config accepts (``CUDA:1``, a bare ``cuda``) mean the same thing everywhere.
    """

    kind: PlacementKind = PlacementKind.device
    index: int = 0  # N of cuda:N; 0 for the other kinds

    @classmethod
    def parse(cls, text: str | Placement, model: str = "<name>") -> Placement:
        """The value of a placement text; a one-line error naming ``models.<model>.placement`` for anything else."""
        if isinstance(text, Placement):
            return text
        s = str(text).strip().lower()
        if s in ("device", "cpu", "offload"):
            return cls(PlacementKind(s))
        if s == "cuda" or s.startswith("cuda:") and s[5:].isdigit():
            return cls(PlacementKind.cuda, int(s[5:] or 0))
        raise DistlabError(f"models.{model}.placement={text!r} is not one of device, cpu, offload, cuda:N "
                           f"(N counts the rank's own GPUs, 0..dist.devices_per_rank-1)")

    def __str__(self) -> str:
        return f"cuda:{self.index}" if self.kind == PlacementKind.cuda else str(self.kind)

    @property
    def offload(self) -> bool:
        return self.kind == PlacementKind.offload

    def node_devices(self, gpu: bool) -> tuple[str, str]:
        """``(where the weights live, where the model computes)`` as ``cpu`` or ``cuda:N`` of rank 0's device group,
        for a plan of a node's memory (``gpu``: whether the rank computes on a GPU)."""
        first = "cuda:0" if gpu else "cpu"
        if self.kind == PlacementKind.cpu:
            return "cpu", "cpu"
        if self.kind == PlacementKind.offload:
            return "cpu", first
        if self.kind == PlacementKind.cuda:
            return str(self), str(self)
        return first, first


@dataclass
class RunConfig:
    name: str | None = None  # default: <recipe>-<hash of the config>, so re-running resumes
    dir: str = "runs"
    seed: int = 0
    resume: Resume = Resume.auto
    stop_at: int = 0  # checkpoint and exit once this step is reached (time-sliced jobs); 0 = off
    time_limit_s: float = 0.0  # end training (then evaluate) after this much wall time; 0 = off
    smoke: bool = False  # a quick end-to-end check (--smoke): the recipe's smoke settings shrink steps and evaluation


@dataclass
class DistConfig:
    backend: str = "auto"  # auto | nccl | gloo
    device: str = "auto"  # auto | cpu | cuda
    timeout_s: float = 600.0  # a collective that waits longer fails the job, naming the late ranks
    wrap: Wrap = Wrap.ddp
    bucket_mb: float = 25.0
    compile: bool = False
    compile_mode: CompileMode = CompileMode.default  # with compile=true: see CompileMode
    # with compile=true under DDP: split the compiled graph at the gradient buckets so each bucket's all-reduce
    # overlaps the rest of the backward (torch's DDPOptimizer), or false: one graph, the all-reduce after backward
    compile_split_ddp: bool = True
    precision: Precision = Precision.fp32
    loss_scale_init: float = 65536.0  # dist.precision=fp16: the first loss scale (2^16, torch's default)
    loss_scale_growth_interval: int = 2000  # dist.precision=fp16: steps without overflow before the scale doubles
    grad_accum: int = 1
    tf32: bool = True
    verify_init: bool = True  # all-gather a parameter checksum at start to prove ranks agree
    devices_per_rank: int = 1  # GPUs each rank drives (placement.<model>=cuda:N indexes them)
    activation_checkpointing: ActivationCheckpointing = ActivationCheckpointing.none  # see distlab.training.activation_ckpt
    comm_hook: CommHook = CommHook.none  # DDP gradient compression (see distlab.training.comm_hooks)
    powersgd_rank: int = 4  # dist.comm_hook=powersgd: rank of the low-rank gradient approximation
    powersgd_start_iter: int = 10  # plain all-reduce for this many steps before compressing (at least 2)
    auto_micro_batch: bool = False  # probe the largest micro-batch that fits; dist.grad_accum makes up the rest
    cpu_offload: bool = False  # FSDP2-wrapped models keep parameters, gradients and optimizer states on the CPU


@dataclass
class ModelSettings:
    """How one named model of a recipe is held; recipes nest a ``dict[str, ModelSettings]`` as ``models``."""

    trainable: bool = True
    wrap: Wrap | None = None  # ddp | fsdp; None: as dist.wrap, the run's default for every trained model
    dtype: str = "fp32"  # fp32 | bf16 | fp16: frozen weights' dtype; trained ones stay fp32 (compute: dist.precision)
    compile: bool = False
    placement: str = "device"  # device | cuda:N | cpu | offload: where it lives and computes

    @property
    def where(self) -> Placement:
        """``placement`` as a value (:class:`~distlab.config.Placement`): what every reader of it asks."""
        return Placement.parse(self.placement)


def wrap_of(settings: ModelSettings, dist_cfg: DistConfig) -> str:
    """How a model is wrapped: its own ``models.<name>.wrap`` when set, else the run's ``dist.wrap``."""
    wrap = settings.wrap if settings.wrap is not None else dist_cfg.wrap
    return str(wrap)


@dataclass
class CkptConfig:
    every: int = 0  # steps between checkpoints; 0 = only at the end
    at_end: bool = True  # false: no checkpoint when training ends (throw-away benchmark runs); a stop signal still saves
    keep_last: int = 3
    async_save: bool = False
    verify: str = "hash"  # hash | size: how a checkpoint is checked before it is trusted


@dataclass
class LogConfig:
    every: int = 10
    progress: bool = True
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str = "distlab"
    wandb_mode: str = "offline"
    wandb_group: str | None = None
    peak_tflops: float | None = None  # per device; default: a table of known GPUs, none on CPU
    profile_steps: int = 0  # > 0: torch.profiler over this many steps on rank 0 -> <run>/profile/ (0 = off)
    profile_wait: int = 10  # steps before recording starts (compilation and warm-up), 1 or more
    memory_snapshot: bool = False  # CUDA: write memory_snapshot.pickle of the first steps (PyTorch memory viewer)
    sync_phases: bool = False  # phase timers (generate_s, update_s...) wait for the GPU at each edge: exact split


@dataclass
class OptimConfig:
    state_dtype: StateDtype = StateDtype.fp32  # Adam moments in fp32, bf16 or int8 (torchao; see distlab.training.optim_state)


@dataclass
class ScaleConfig:
    batch: BatchScale = BatchScale.none
    lr: LrScale = LrScale.none
    base_world_size: int = 1  # the world size the batch and lr values were tuned for


@dataclass
class BaseConfig:
    run: RunConfig = field(default_factory=RunConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    ckpt: CkptConfig = field(default_factory=CkptConfig)
    log: LogConfig = field(default_factory=LogConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)


def schema_keys(cls: type, prefix: str = "") -> list[str]:
    """All dotted keys a config dataclass accepts (used for 'did you mean' hints)."""
    keys = []
    for f in fields(cls):
        name = prefix + f.name
        keys.append(name)
        default = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        if is_dataclass(default):
            keys.extend(schema_keys(type(default), name + "."))
    return keys


def _one_line(exc: OmegaConfBaseException) -> str:
    return str(exc).strip().splitlines()[0]


def _override_error(exc: OmegaConfBaseException, item: str, cls: type) -> DistlabError:
    key = item.split("=", 1)[0]
    if isinstance(exc, (ConfigAttributeError, ConfigKeyError)):
        hint = near_matches(key, schema_keys(cls))
        did = f"; did you mean {', '.join(hint)}?" if hint else "; run with --show-config to list keys"
        return DistlabError(f"unknown config key '{key}'{did}")
    if isinstance(exc, ValidationError):
        return DistlabError(f"bad value in '{item}': {_one_line(exc)}")
    return DistlabError(f"cannot apply override '{item}': {_one_line(exc)}")


def find_preset(name: str, presets_dir: Path | None) -> Path:
    """A preset is a YAML file given by path or by name from the recipe's presets folder."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    if presets_dir is not None:
        cand = presets_dir / f"{name}.yaml"
        if cand.exists():
            return cand
        names = sorted(p.stem for p in presets_dir.glob("*.yaml"))
        hint = near_matches(name, names)
        raise DistlabError(f"no preset '{name}'; available: {', '.join(names) or 'none'}"
                           + (f" (closest: {', '.join(hint)})" if hint else ""))
    raise DistlabError(f"config file '{name}' not found; pass a path to a .yaml file")


def compose(cls: type, presets: list[Path] = (), overrides: list[str] = (),
            aliases: dict[str, str] | None = None) -> DictConfig:
    """Schema <- presets (in order) <- ``key=value`` overrides, each validated against the schema.

    ``aliases`` maps a recipe's older key names to their current ones (``gradient_accumulation_steps`` ->
    ``dist.grad_accum``), in config files and overrides alike; flag-style aliases (``--x``) are the CLI's.
    """
    cfg = OmegaConf.structured(cls)
    placed = "models" in {f.name for f in fields(cls)}
    renamed = {k: v for k, v in (aliases or {}).items() if not k.startswith("-")}
    for p in presets:
        try:
            data = OmegaConf.load(p)
        except Exception as exc:  # yaml errors carry multi-line messages
            raise DistlabError(f"cannot read config file {p}: {str(exc).splitlines()[0]}") from None
        if data is None or isinstance(data, DictConfig) and not data:
            raise DistlabError(f"config file {p} is empty; give it key: value lines (e.g. steps: 100) or leave "
                               f"--config out")
        if not isinstance(data, DictConfig):
            raise DistlabError(f"config file {p} holds a {type(data).__name__.replace('Config', '').lower()}, not a "
                               f"mapping; write it as key: value lines (e.g. steps: 100)")
        if placed:
            data = _placement_into_models(data)
        data = _renamed_keys(data, renamed)
        try:
            cfg = OmegaConf.merge(cfg, data)
        except OmegaConfBaseException as exc:
            raise DistlabError(f"in {p}: " + str(_override_error(exc, _first_bad_key(exc), cls))) from None
    for item in overrides:
        if "=" not in item:
            raise DistlabError(f"override '{item}' is not key=value (example: lr=1e-4 arch.H_cycles=4)")
        if placed:
            item = _PLACEMENT_KEY.sub(r"models.\1.placement=", item, count=1)
        key, sep, value = item.partition("=")
        if key.strip() in renamed:
            item = f"{renamed[key.strip()]}{sep}{value}"
        _check_boolean(cfg, item)
        try:
            if _is_text_field(cfg, key.strip(), value):  # YAML would read off/no/123 as False/False/123
                OmegaConf.update(cfg, item.partition("=")[0].strip(), value.strip(), merge=True)
            else:
                cfg.merge_with(OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException as exc:
            raise _override_error(exc, item, cls) from None
    return cfg


def _is_text_field(cfg: DictConfig, key: str, value: str) -> bool:
    """A plain string setting given a plain word: the text as typed is the value (``run.name=off`` names a run
    'off', not 'False'). Choices, lists, quoted text and interpolations take the usual parsing."""
    from omegaconf.nodes import StringNode

    parent_key, _, leaf = key.rpartition(".")
    try:
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        node = parent._get_node(leaf) if isinstance(parent, DictConfig) else None
    except (OmegaConfBaseException, KeyError, AttributeError):
        return False
    v = value.strip()
    return (isinstance(node, StringNode) and bool(v) and v[0] not in "[{'\"" and not v.startswith("${")
            and v not in ("null", "~"))


# ``placement.<model>=<spec>``, a second dict before placement became a field of each model's settings
_PLACEMENT_KEY = re.compile(r"^\s*placement\.([^.=\s]+)\s*=")


def _placement_into_models(data: DictConfig) -> DictConfig:
    """A config file's ``placement: {model: spec}`` block, the spelling of earlier versions, as
    ``models: {model: {placement: spec}}``."""
    if "placement" not in data:
        return data
    data = data.copy()
    moved = data.pop("placement")
    if not isinstance(moved, DictConfig):
        raise DistlabError(f"placement: holds {moved!r}; write models.<name>.placement: device|cpu|offload|cuda:N")
    for name, spec in moved.items():
        OmegaConf.update(data, f"models.{name}.placement", spec, merge=True)
    return data


def _renamed_keys(data: DictConfig, renamed: dict[str, str]) -> DictConfig:
    """A config file's top-level keys under their older names, moved to the current ones."""
    old = [k for k in renamed if k in data]
    if not old:
        return data
    data = data.copy()
    for key in old:
        OmegaConf.update(data, renamed[key], data.pop(key), merge=True)
    return data


BOOL_WORDS = ("true", "false", "yes", "no", "on", "off")


def _check_boolean(cfg: DictConfig, item: str) -> None:
    """OmegaConf turns any integer into a bool (``compile=2`` -> true): a switch takes a yes/no word only."""
    key, value = item.split("=", 1)
    current = OmegaConf.select(cfg, key.strip(), default=None, throw_on_missing=False)
    if isinstance(current, bool) and value.strip().lower() not in BOOL_WORDS:
        raise DistlabError(f"{item} is not a boolean; use {key.strip()}=true or {key.strip()}=false")


def _first_bad_key(exc: OmegaConfBaseException) -> str:
    key = getattr(exc, "full_key", None) or "?"
    return f"{key}="


def to_object(cfg: DictConfig) -> Any:
    """The dataclass instance behind a structured config (attribute access, real types)."""
    return OmegaConf.to_object(cfg)


def to_yaml(cfg: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg) if not isinstance(cfg, DictConfig) else cfg)


IDENTITY_EXCLUDED = ("run", "dist", "ckpt", "log", "models.*.wrap")  # where and how a run runs


def default_run_name(recipe: str, cfg: Any, layout_keys: tuple[str, ...] = ()) -> str:
    """Deterministic from what defines the experiment, so re-running the same command resumes it.

    Only settings that differ from their schema's defaults enter the name, so a new key added with a default (every
    release adds some) leaves the names of existing runs, and with them their resume, as they were. Where and how it
    runs (devices, process count, logging, checkpoint cadence, a model's wrapping, the recipe's ``layout_keys``) is
    left out, so the same command on another world size continues the same run; the seed is kept in.
    """
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_object(cfg)
    ident = _changed(cfg, _defaults_of(cfg), "", (*IDENTITY_EXCLUDED, *layout_keys))
    ident = {**(ident if isinstance(ident, dict) else {}), "seed": cfg.run.seed}
    digest = hashlib.sha1(OmegaConf.to_yaml(OmegaConf.create(ident), sort_keys=True).encode()).hexdigest()[:8]
    return f"{recipe}-{digest}"


_SAME = object()


def _defaults_of(value: Any) -> Any:
    """A dataclass's schema defaults (its type built with no arguments), or None where it has required fields."""
    try:
        return type(value)()
    except TypeError:
        return None


def _plain(value: Any) -> Any:
    """A value as the config file would hold it (enums by their value, tuples as lists)."""
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value.value if isinstance(value, Enum) else value


def _changed(value: Any, default: Any, path: str, skip: tuple[str, ...]) -> Any:
    """What of ``value`` differs from ``default``, as plain nested dicts; ``_SAME`` where nothing does. Dotted paths
    matching a ``skip`` pattern (fnmatch: ``models.*.wrap``) count as unchanged. A dataclass with no counterpart (a
    model named only in this config) is compared with its own type's defaults."""
    if path and any(fnmatch.fnmatchcase(path, p) for p in skip):
        return _SAME
    if is_dataclass(value) or isinstance(value, dict):
        if is_dataclass(value):
            if type(default) is not type(value):
                default = _defaults_of(value)
            if default is None:
                default = {}
            items = {f.name: getattr(value, f.name) for f in fields(value)}
            get = (lambda k: getattr(default, k)) if is_dataclass(default) else (lambda k: _SAME)
        else:
            items = {str(k): v for k, v in value.items()}
            get = (lambda k: default.get(k, _SAME)) if isinstance(default, dict) else (lambda k: _SAME)
        out = {k: _changed(v, get(k), f"{path}.{k}" if path else k, skip) for k, v in items.items()}
        out = {k: v for k, v in out.items() if v is not _SAME}
        return out or _SAME
    return _SAME if _plain(value) == _plain(default) else _plain(value)


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _set(obj: Any, dotted: str, value: Any) -> None:
    *head, last = dotted.split(".")
    for part in head:
        obj = getattr(obj, part)
    setattr(obj, last, value)


def apply_scaling(cfg: Any, world_size: int, batch_keys: tuple[str, ...], lr_keys: tuple[str, ...]) -> list[dict]:
    """Apply ``scale.batch`` / ``scale.lr`` once, in place; return the record kept in the manifest.

    The factor is relative to ``scale.base_world_size`` (the size the values were tuned for), so
    resuming on another world size re-derives values from the command line, never compounds them.
    """
    ratio = world_size / cfg.scale.base_world_size
    applied = []
    rules = [(cfg.scale.batch, batch_keys, {"linear": ratio}), (cfg.scale.lr, lr_keys,
             {"linear": ratio, "sqrt": math.sqrt(ratio)})]
    for rule, keys, factors in rules:
        rule = str(rule)
        if rule == "none":
            continue
        for key in keys:
            before = _get(cfg, key)
            after = before * factors[rule]
            after = int(round(after)) if isinstance(before, int) else after
            _set(cfg, key, after)
            applied.append({"key": key, "rule": rule, "factor": factors[rule], "before": before, "after": after})
    return applied


def resolve_config(recipe: Any, presets: list[str], overrides: list[str]) -> Any:
    """A recipe's schema + presets + overrides -> dataclass instance (DistlabError on any bad input).

    This is the one place every value passes through (the launcher, rank 0 of a job started without it, the doctor,
    --show-config), so the value checks live here and a bad number never reaches a process that would crash on it.
    """
    return resolve_with_smoke(recipe, presets, overrides)[0]


def resolve_with_smoke(recipe: Any, presets: list[str], overrides: list[str]) -> tuple[Any, str | None]:
    """:func:`resolve_config` and the log line of a smoke run (:func:`smoke_line`) from one composition, for a
    process that resolves a run once and hands both on (the launcher to its ranks, rank 0 to the others)."""
    cfg = composed_config(recipe, presets, overrides)
    line = None
    if getattr(cfg.run, "smoke", False):
        changes = smoke_changes(recipe, cfg)
        for key, _, after in changes:
            _set(cfg, key, after)
        line = _smoke_text(changes)
    check_values(recipe, cfg)
    return cfg, line


def composed_config(recipe: Any, presets: list[str], overrides: list[str]) -> Any:
    """Schema, presets and overrides merged, before the smoke settings and the value checks: what a rank reads only to
    know how to join its job (``dist.*``) before rank 0 hands it the resolved config."""
    paths = [find_preset(p, recipe.presets_dir) for p in presets]
    return to_object(compose(recipe.config, paths, overrides, getattr(recipe, "aliases", None)))


def smoke_changes(recipe: Any, cfg: Any) -> list[tuple[str, Any, Any]]:
    """``(key, value, smoke value)`` for each of ``Recipe.smoke`` that ``run.smoke=true`` changes in ``cfg``.

    Like Lightning's ``fast_dev_run``, a smoke run checks that a config runs end to end (data, model, steps,
    evaluation, checkpoint) in seconds, without the user working out which keys make each recipe short. The recipe's
    values go on top of the user's, except that a positive number the user already set smaller is kept: a smoke run
    only ever shrinks.
    """
    changes = []
    for key, value in dict(getattr(recipe, "smoke", None) or {}).items():
        try:
            before = _get(cfg, key)
        except AttributeError:
            raise DistlabError(f"recipe {recipe.name}: its smoke setting {key!r} is not a config key; fix "
                               f"Recipe.smoke in the recipe") from None
        plain = _plain(before)
        number = isinstance(plain, (int, float)) and not isinstance(plain, bool)
        if plain == value or number and isinstance(value, (int, float)) and 0 < plain < value:
            continue
        changes.append((key, plain, value))
    return changes


def smoke_line(recipe: Any, presets: list[str], overrides: list[str]) -> str | None:
    """The one log line of a smoke run, saying what ``run.smoke=true`` changed (None when it is off)."""
    return resolve_with_smoke(recipe, presets, overrides)[1]


def _smoke_text(changes: list[tuple[str, Any, Any]]) -> str:
    changed = ", ".join(f"{key} {before}->{after}" for key, before, after in changes)
    return (f"run.smoke: a short check run ({changed or 'nothing to shrink: the config is already as small'}); "
            f"leave out --smoke / run.smoke=true for the real run")


# Core settings only some recipes act on; a recipe lists the ones it honours in ``Recipe.supports``
# and any other one set away from its default is refused instead of being silently ignored.
OPTIONAL_CORE_KEYS = ("dist.grad_accum", "run.time_limit_s", "dist.wrap", "dist.compile", "dist.compile_mode",
                      "dist.compile_split_ddp",
                      "log.profile_steps", "dist.activation_checkpointing", "dist.comm_hook", "dist.auto_micro_batch",
                      "optim.state_dtype", "dist.cpu_offload")

# Leaf names of the core's numeric keys that count something or scale something, so 0 or less is meaningless.
# A recipe names its own in ``Recipe.positive_keys``. When a schema's default for such a key is 0, 0 keeps its
# "off/automatic" meaning and is allowed (``ckpt.every=0``).
POSITIVE_KEYS = frozenset({
    "every", "grad_accum", "base_world_size", "timeout_s", "keep_last", "devices_per_rank", "bucket_mb",
    "profile_wait", "powersgd_rank", "loss_scale_init", "loss_scale_growth_interval",
})
DIST_BACKENDS = ("auto", "nccl", "gloo")
DIST_DEVICES = ("auto", "cpu", "cuda")
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@-]*$")
MAX_RUN_NAME = 120  # directory names have to fit filesystems, SLURM job names and log lines


def _numbers(obj: Any, prefix: str = ""):
    """``(dotted key, value)`` for every int/float leaf of a config dataclass (bools excluded)."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        key = prefix + f.name
        if is_dataclass(value):
            yield from _numbers(value, key + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield key, value


def _bad(key: str, value: Any, rule: str, default: Any) -> DistlabError:
    return DistlabError(f"{key}={value} is invalid: it must be {rule} (default {key}={default})")


def check_values(recipe: Any, cfg: Any) -> None:
    """Reject values no recipe can run with, by rule rather than case by case.

    A number is refused when it is NaN or infinite, negative where the schema's default is not, or
    not positive where it counts or scales something (:data:`POSITIVE_KEYS` and the recipe's
    ``positive_keys``). Choices the core owns
    (backend, device), the run name (it becomes a directory) and core settings the recipe would
    ignore (:data:`OPTIONAL_CORE_KEYS` outside ``Recipe.supports``) are checked too.
    """
    try:
        schema = recipe.config()
    except TypeError:  # a schema with required fields: only the rules that need no default apply
        schema = None
    positive = POSITIVE_KEYS | getattr(recipe, "positive_keys", frozenset())
    for key, value in _numbers(cfg):
        default = _get(schema, key) if schema is not None else None
        if isinstance(value, float) and not math.isfinite(value):
            raise _bad(key, value, "a finite number", default)
        if not isinstance(default, (int, float)) or isinstance(default, bool):
            continue
        leaf = key.rsplit(".", 1)[-1]
        if leaf in positive and default > 0 and value <= 0:
            raise _bad(key, value, "greater than 0", default)
        if value < 0 <= default:
            zero = getattr(recipe, "zero_means", {}).get(leaf, "off")
            raise _bad(key, value, "0 or more" + (f" (0 = {zero})" if default == 0 else ""), default)
    d = cfg.dist
    if d.backend not in DIST_BACKENDS:
        hint = near_matches(d.backend, DIST_BACKENDS)
        raise DistlabError(f"dist.backend={d.backend} is not one of {', '.join(DIST_BACKENDS)}"
                           + (f"; did you mean dist.backend={hint[0]}?" if hint else "; use dist.backend=auto"))
    if d.device not in DIST_DEVICES:
        raise DistlabError(f"dist.device={d.device} is not one of {', '.join(DIST_DEVICES)}; use dist.device=auto")
    if cfg.ckpt.verify not in ("hash", "size"):
        raise DistlabError(f"ckpt.verify={cfg.ckpt.verify} is not one of hash, size; use ckpt.verify=hash")
    check_run_name(cfg.run.name)
    for name, settings in (getattr(cfg, "models", None) or {}).items():
        Placement.parse(settings.placement, name)  # the text's one rule, before any process reads it
    supports = getattr(recipe, "supports", None)
    if supports is not None and schema is not None:
        for key in OPTIONAL_CORE_KEYS:
            if key not in supports and _get(cfg, key) != _get(schema, key):
                honours = ", ".join(sorted(supports)) or "none of " + ", ".join(OPTIONAL_CORE_KEYS)
                raise DistlabError(f"recipe '{recipe.name}' ignores {key} (set to {_plain(_get(cfg, key))}); remove "
                                   f"it (of these core settings it honours: {honours})")
    check_memory_options(cfg)  # after the keys a recipe ignores: advice on combining them would mislead there
    compiles = d.compile or any(getattr(m, "compile", False) for m in (getattr(cfg, "models", None) or {}).values())
    if d.compile_mode != CompileMode.default and not compiles:
        raise DistlabError(f"dist.compile_mode={CompileMode(d.compile_mode).name} acts only on compiled models; add "
                           f"dist.compile=true or remove dist.compile_mode")
    if not d.compile_split_ddp and not compiles:
        raise DistlabError("dist.compile_split_ddp=false acts only on compiled models; add dist.compile=true or "
                           "remove dist.compile_split_ddp")


def check_memory_options(cfg: Any) -> None:
    """Combinations of the memory and communication options that cannot work, refused before any process starts."""
    d = cfg.dist
    hook, wrap = _plain(d.comm_hook), _plain(d.wrap)
    if hook != "none" and wrap != "ddp":
        raise DistlabError(f"dist.comm_hook={hook} compresses DDP's gradient all-reduce but dist.wrap={wrap}; use "
                           f"dist.wrap=ddp or dist.comm_hook=none (FSDP2 reduce-scatters and has no DDP comm hooks)")
    models = getattr(cfg, "models", None) or {}
    wraps = {name: wrap_of(m, d) for name, m in models.items() if m.trainable}
    if hook != "none":
        for name, w in wraps.items():
            if w != "ddp":
                raise DistlabError(f"dist.comm_hook={hook} needs DDP but models.{name}.wrap={w}; use "
                                   f"models.{name}.wrap=ddp or dist.comm_hook=none")
    sharded = "fsdp" in wraps.values() if models else wrap == "fsdp"
    if d.cpu_offload and not sharded:
        held = ", ".join(f"models.{n}.wrap={w}" for n, w in wraps.items()) or f"dist.wrap={wrap}"
        raise DistlabError(f"dist.cpu_offload=true offloads what FSDP2 shards, and no trained model is sharded "
                           f"({held}); set dist.wrap=fsdp or models.<name>.wrap=fsdp for the trained model")
    if hook == "bf16" and (d.device == "cpu" or d.backend == "gloo"):
        raise DistlabError(BF16_NEEDS_NCCL)
    if hook == "powersgd" and d.powersgd_start_iter < 2:
        raise DistlabError(f"dist.powersgd_start_iter={d.powersgd_start_iter} is invalid: PowerSGD's error feedback "
                           f"needs at least 2 plain all-reduce steps first (default dist.powersgd_start_iter=10)")
    if _plain(d.precision) != "fp16":
        defaults = DistConfig()
        for key in ("loss_scale_init", "loss_scale_growth_interval"):
            if getattr(d, key) != getattr(defaults, key):
                raise DistlabError(f"dist.{key} sets fp16 loss scaling but dist.precision={_plain(d.precision)}; add "
                                   f"dist.precision=fp16 or remove dist.{key}")
    if d.auto_micro_batch and d.grad_accum != 1:
        raise DistlabError(f"dist.auto_micro_batch=true chooses dist.grad_accum itself (set to {d.grad_accum}); "
                           f"remove one of them")


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def check_run_name(name: str | None) -> None:
    """A run name is one directory under ``run.dir``: no separators, no ``..``, a sane length."""
    if name is None:
        return
    if not name or not RUN_NAME.match(name) or ".." in name:
        raise DistlabError(f"run.name={name!r} is not a plain directory name; use letters, digits and . _ - + = @ "
                           f"(no '/', no '..', not starting with '.' or '-'), e.g. run.name=exp1")
    if len(name) > MAX_RUN_NAME:
        raise DistlabError(f"run.name is {len(name)} characters long; use at most {MAX_RUN_NAME}")


def name_run(recipe: Any, cfg: Any) -> None:
    """Give ``cfg`` its default run name unless the user named it (before world-size scaling changes any key)."""
    if not cfg.run.name:
        cfg.run.name = default_run_name(recipe.name, cfg, getattr(recipe, "layout_keys", ()))


def finalize_config(recipe: Any, cfg: Any, world_size: int) -> tuple[Any, list[dict]]:
    """Name the run and apply world-size scaling, once (in the launcher, and on rank 0 of the job)."""
    name_run(recipe, cfg)
    scaling = apply_scaling(cfg, world_size, recipe.batch_keys, recipe.lr_keys)
    return cfg, scaling
