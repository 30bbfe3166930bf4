"""Batched sampling of completions for rollouts, with interchangeable backends.

* ``hf`` -- ``transformers``' ``model.generate``: the reference behaviour, dynamic KV cache.
* ``hf-static`` -- the same with ``cache_implementation="static"``, which transformers compiles
  automatically on CUDA.
* ``static`` -- our own loop: one prefill over the left-padded prompts, then one token per step from
  a KV cache with explicit position ids. With ``compile`` (the default on CUDA) the decode step runs
  on a preallocated ``StaticCache`` under ``torch.compile(mode="reduce-overhead")``, i.e. replayed as
  a CUDA graph: a small model's decode step is otherwise bound by kernel launches, not by the GPU
  (SmolLM2, H100, bf16, 64 x 256 tokens: 46 ms per step eager, 3.6 ms replayed). The cache and the
  compiled step are kept on the model and the cache length is rounded up to a multiple of 128, so
  later rollouts of the same batch size reuse the captured graph. Without ``compile`` a growing
  ``DynamicCache`` is used, and on CPU rows that have finished are dropped from the batch.

Prefix sharing (``static``, ``share_prefix=True`` by default): a rollout asks for G samples of each
prompt, i.e. G identical rows. Rows with identical prompt token ids are found in the batch itself (no
argument from the caller), each distinct prompt is prefilled once and its keys/values and last logits
are copied to all of its rows (``DynamicCache.batch_select_indices``; for a ``StaticCache`` the rows
are written into its layers with ``Cache.update``). Only the prefill is shared: every row then samples
its own tokens. Models with sliding-window layers on the ``StaticCache`` path prefill every row, as the
scratch cache of the shared prefill would keep only the window.

One compiled graph per run (``static`` with ``compile``): the graph is specialised on the cache's
(rows, length), and each new shape costs a recompilation and capture (35-39 s on a GPU). By default the
shape follows each call (prompt length + ``sampling.max_completion_length`` rounded up to 128, rows = prompts x n),
so a rollout with a longer prompt or fewer prompts recompiles. A caller that passes
``max_prompt_length`` (the longest prompt of its whole task set, see :func:`max_prompt_tokens`) and
``batch_rows`` (the rows of its largest call) fixes the shape for the run: the cache is sized for
``max_prompt_length + sampling.max_completion_length`` and smaller batches are padded with finished rows (copies of
the first prompt, so prefix sharing prefills them for free). A call that exceeds either still runs, on
a larger cache, and logs a warning. Both are ignored where no ``StaticCache`` is used.

Finished rows (``static`` with ``compile``, ``compact_rows=True``): the compiled step decodes every row of its
cache, finished or not, so a batch whose rows mostly ended early keeps paying for the longest one. With
``compact_rows`` the loop, at the stop checks it already syncs for, moves the live rows into a cache of half as
many rows once at most half are live (down to ``COMPACT_MIN_ROWS``), each such cache kept on the model beside the
first and its graph compiled once per run: at most twice the KV memory, one capture per row count. Off by default
until it is measured on a GPU; at temperature 0 it changes no token.

Greedy decoding (``temperature=0``) gives the same tokens with either backend; sampling is
reproducible for a given ``seed`` within a backend. All completions of one call are padded into one
batch, so call it with every prompt x G sample of a rollout at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from distlab.errors import DistlabError
from distlab.recipes.lm.models.parts import position_ids_from_mask, unwrap_model
from distlab.recipes.lm.rollout.sampling import nonfinite_rows, sample_next
from distlab.recipes.lm.rollout.stops import Completion, decode, finish, first_stop, stop_window_tokens
from distlab.training.placement import compute_device

if TYPE_CHECKING:
    from distlab.recipes.lm.config import SamplingConfig

BACKENDS = ("hf", "hf-static", "static")

log = logging.getLogger("distlab")


@dataclass(frozen=True)
class StaticOptions:
    """The ``static`` backend's settings, carried together from :func:`generate` to the decode loop."""

    compile: bool | None = None
    share_prefix: bool = True
    max_prompt_length: int | None = None
    batch_rows: int | None = None
    compact_rows: bool = False

    def check(self) -> None:
        for name in ("max_prompt_length", "batch_rows"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise DistlabError(f"{name} must be >= 1 (or None), got {value}")


def eos_token_ids(model, tokenizer) -> set[int]:
    """Every id that ends a turn: the tokenizer's EOS and the model's generation-config EOS (one or a list)."""
    ids: set[int] = set()
    for value in (tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return ids


def encode_prompts(tokenizer, prompts: Sequence[str], device, add_special_tokens: bool = False):
    """Left-padded ``(input_ids, attention_mask)`` and each prompt's unpadded ids.

    Prompts are expected to be complete texts (:func:`~distlab.recipes.lm.tasks.prompts.render_prompt` output already holds the
    template's special tokens), so none are added unless asked.
    """
    enc = tokenizer(list(prompts), add_special_tokens=add_special_tokens, padding=True,
                    padding_side="left", return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    unpadded = [row[m.bool()].tolist() for row, m in zip(ids, mask)]
    return ids.to(device), mask.to(device), unpadded


def left_pad(prompt_ids: Sequence[Sequence[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of token-id prompts, padded on the left to the longest."""
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for i, p in enumerate(prompt_ids):
        if len(p):
            ids[i, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
            mask[i, width - len(p):] = 1
    return ids.to(device), mask.to(device)


def generate(
    model,
    tokenizer,
    prompts: Sequence[str] | Sequence[Sequence[int]],
    sampling: SamplingConfig,
    *,
    n: int = 1,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    stop_strings: Sequence[str] = (),
    max_prompt_length: int | None = None,
    batch_rows: int | None = None,
    compile: bool | None = None,
    share_prefix: bool = True,
    stop_check_every: int = 4,
    add_special_tokens: bool = False,
    on_step: Callable[[int], None] | None = None,
) -> list[Completion]:
    """Sample ``n`` completions of each prompt as ``sampling`` says; results are ordered prompt-major
    (``prompt_index``).

    ``prompts`` are texts, tokenised here, or token-id lists taken as they are (a multi-turn episode, which must not
    be re-tokenised). ``sampling`` is the run's :class:`~distlab.recipes.lm.config.SamplingConfig` (a caller
    that samples differently, greedy evaluation or a guidance model's hints, passes a ``dataclasses.replace`` of it):
    ``max_completion_length`` tokens at most, ``temperature`` (0 is greedy, and then ``top_p`` is not used),
    ``top_p``, ``backend`` and ``compact_rows``. ``seed`` (or a ``generator``, ``static`` backend only) makes the
    sampling reproducible without touching the global RNG. ``stop_strings`` end a completion when its decoded text
    contains one (checked every ``stop_check_every`` tokens, cut exactly afterwards). ``compile`` (default: on for
    CUDA), ``share_prefix`` (prefill each distinct prompt once), ``max_prompt_length`` and ``batch_rows`` (fix the
    compiled cache shape for a whole run: the longest prompt in tokens, and the rows = prompts x ``n`` of the largest
    call) and ``compact_rows`` (decode only live rows on a smaller cache once most have finished) apply to the
    ``static`` backend only; see the module docstring. ``on_step(k)`` is called after the k-th decode step (a
    progress hook: a call of a few minutes is otherwise silent until it returns); it must not touch the device.
    """
    if isinstance(prompts, str):
        raise DistlabError("generate() takes a list of prompts, not one string")
    device = compute_device(model)  # not its first parameter's: FSDP2's CPU offload keeps those on the host
    rows = [p for p in prompts for _ in range(n)]
    if not rows:
        return []
    if all(isinstance(p, str) for p in rows):
        input_ids, attention_mask, prompt_ids = encode_prompts(tokenizer, rows, device, add_special_tokens)
    elif not any(isinstance(p, str) for p in rows):
        prompt_ids = [list(p) for p in rows]
        eos = eos_token_ids(model, tokenizer)
        input_ids, attention_mask = left_pad(prompt_ids, tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                                             else min(eos), device)
    else:
        raise DistlabError("generate() takes prompts as texts or as token-id lists, not a mix of both")
    options = StaticOptions(compile, share_prefix, max_prompt_length, batch_rows, sampling.compact_rows)
    return _generate_padded(model, tokenizer, input_ids, attention_mask, prompt_ids, n,
                            sampling.max_completion_length, sampling.temperature, sampling.top_p, stop_strings, seed,
                            generator, sampling.backend, options, stop_check_every, on_step)


def max_prompt_tokens(tokenizer, prompts: Sequence[str], add_special_tokens: bool = False) -> int:
    """The longest prompt's length in tokens, tokenised as :func:`generate` does: what a run passes once as
    ``max_prompt_length`` (over its whole task set) so that every rollout fits one compiled cache."""
    enc = tokenizer(list(prompts), add_special_tokens=add_special_tokens)
    return max((len(ids) for ids in enc["input_ids"]), default=0)


def _generate_padded(model, tokenizer, input_ids, attention_mask, prompt_ids, n, max_new_tokens, temperature, top_p,
                     stop_strings, seed, generator, backend, options: StaticOptions,
                     stop_check_every, on_step: Callable[[int], None] | None = None) -> list[Completion]:
    options.check()
    if backend not in BACKENDS:
        raise DistlabError(f"unknown generation backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if max_new_tokens < 1:
        raise DistlabError(f"sampling.max_completion_length must be >= 1, got {max_new_tokens}")
    device = input_ids.device
    eos = eos_token_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)
    stops = [s for s in stop_strings if s]
    was_training = model.training
    model.eval()  # no dropout (LoRA dropout included) while sampling
    try:
        with torch.no_grad():
            if backend == "static":
                if generator is None and seed is not None and temperature > 0:
                    generator = torch.Generator(device=device).manual_seed(seed)
                rows = _static_generate(model, tokenizer, input_ids, attention_mask, prompt_ids, max_new_tokens,
                                        temperature, top_p, stops, generator, eos, pad, options, stop_check_every,
                                        on_step)
            else:
                rows = _hf_generate(model, tokenizer, input_ids, attention_mask, max_new_tokens, temperature,
                                    top_p, stops, seed, eos, pad, backend == "hf-static", stop_check_every, on_step)
    finally:
        model.train(was_training)
    return [finish(tokenizer, i // n, list(prompt_ids[i]), rows[i], eos, stops) for i in range(len(rows))]


def _hf_generate(model, tokenizer, input_ids, attention_mask, max_new_tokens, temperature, top_p, stops, seed,
                 eos, pad, static_cache, check_every, on_step=None) -> list[list[int]]:
    from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

    prompt_len = input_ids.shape[1]
    window = stop_window_tokens(stops, check_every)

    class StopOnText(StoppingCriteria):
        """Marks rows whose recent text holds a stop string (per row, every ``check_every`` steps)."""

        def __call__(self, ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
            done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
            steps = ids.shape[1] - prompt_len
            if steps % check_every == 0:
                tails = ids[:, max(prompt_len, ids.shape[1] - window):].tolist()
                hits = [first_stop(decode(tokenizer, t), stops) >= 0 for t in tails]
                done |= torch.tensor(hits, device=ids.device)
            return done

    class Tick(StoppingCriteria):
        """Stops nothing: tells ``on_step`` how many tokens each row has so far."""

        def __call__(self, ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
            on_step(ids.shape[1] - prompt_len)
            return torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)

    sampling = temperature > 0
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=sampling,
        temperature=temperature if sampling else None,
        top_p=top_p if sampling else None,
        top_k=0 if sampling else None,  # HF would otherwise default to top-k 50 when sampling
        num_beams=1,
        eos_token_id=sorted(eos),
        pad_token_id=pad,
        use_cache=True,
        cache_implementation="static" if static_cache else None,
    )
    criteria = StoppingCriteriaList(([StopOnText()] if stops else []) + ([Tick()] if on_step else [])) or None
    cuda = [input_ids.device] if input_ids.device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):  # HF samples from the global RNG; keep the caller's stream
        if seed is not None:
            torch.manual_seed(seed)
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config,
                             stopping_criteria=criteria)
    return out[:, prompt_len:].tolist()


def _static_generate(model, tokenizer, input_ids, attention_mask, prompt_ids, max_new_tokens, temperature, top_p,
                     stops, generator, eos, pad, options: StaticOptions, check_every,
                     on_step: Callable[[int], None] | None = None) -> list[list[int]]:
    from transformers import DynamicCache

    base = unwrap_model(model)
    device = input_ids.device
    real_rows, prompt_len = input_ids.shape
    use_compile = (device.type == "cuda") if options.compile is None else options.compile
    static = use_compile  # a static cache only pays off when the decode step is a replayed graph
    if static:
        batch, total = static_cache_shape(real_rows, prompt_len, max_new_tokens, options.max_prompt_length,
                                          options.batch_rows)
        input_ids, attention_mask, prompt_ids = _pad_rows(input_ids, attention_mask, prompt_ids, batch)
        cache = _reusable_static_cache(model, base.config, batch, total, device)
    else:
        batch, total = real_rows, prompt_len + max_new_tokens
        cache = DynamicCache(config=base.config)
    mask = torch.ones(batch, total, dtype=attention_mask.dtype, device=device)
    mask[:, :prompt_len] = attention_mask
    positions = position_ids_from_mask(attention_mask)

    key = cache_keyword(model)
    logits = _prefill(model, cache, input_ids, attention_mask, positions, prompt_ids, options.share_prefix)
    next_pos = positions[:, -1:] + 1

    step_fn = _compiled_decode_step(model) if use_compile else None
    eos_t = torch.tensor(sorted(eos), device=device)
    tokens = torch.full((batch, max_new_tokens), pad, dtype=torch.long, device=device)
    lengths = torch.zeros(batch, dtype=torch.long, device=device)  # tokens kept per row
    alive = torch.arange(batch, device=device)  # original row index of each row still in the batch
    finished = alive >= real_rows  # rows padding the batch to its fixed size are done from the start
    window = stop_window_tokens(stops, check_every)
    on_cpu = device.type == "cpu"
    compact = static and options.compact_rows and not _has_sliding_layers(cache)

    broken = torch.zeros_like(finished)  # live rows whose logits held inf/NaN; checked at each sync
    for step in range(max_new_tokens):
        broken |= nonfinite_rows(logits) & ~finished
        tok = sample_next(logits, temperature, top_p, generator)
        tok = torch.where(finished, torch.full_like(tok, pad), tok)  # finished rows only carry padding
        tokens[alive, step] = tok
        lengths[alive] += (~finished).long()
        finished |= torch.isin(tok, eos_t)
        if on_step is not None:
            on_step(step + 1)
        if stops and (step + 1) % check_every == 0:
            finished |= _rows_with_stop(tokenizer, tokens[alive], lengths[alive], finished, stops, window)
        # Every check costs a device sync; on CUDA only look every few steps (and at the last).
        last = step == max_new_tokens - 1
        checked = on_cpu or last or (step + 1) % check_every == 0
        live = None
        if checked:
            live, bad = torch.stack([(~finished).sum(), broken.sum()]).tolist()
            if bad:
                _refuse_nonfinite(alive[broken].tolist(), real_rows, step, attention_mask.sum(-1).tolist())
        if last or live == 0:
            break
        if on_cpu and not static:
            keep = (~finished).nonzero().squeeze(-1)
            if keep.numel() <= finished.numel() // 2:  # drop finished rows once they are half the batch
                cache.batch_select_indices(keep)
                alive, finished, broken, mask = alive[keep], finished[keep], broken[keep], mask[keep]
                tok, next_pos = tok[keep], next_pos[keep]
        if compact and live is not None and (step + 1) % check_every == 0:  # counted at the sync above
            rows = compacted_rows(batch, live)
            if rows < batch:
                keep = compaction_index(finished, rows)
                cache = _compacted_cache(model, base.config, cache, keep, total, prompt_len + step, device)
                alive, finished, broken, mask = alive[keep], finished[keep], broken[keep], mask[keep]
                tok, next_pos, batch = tok[keep], next_pos[keep], rows
        if step_fn is not None:
            torch.compiler.cudagraph_mark_step_begin()
            logits = step_fn(tok[:, None], next_pos, mask, cache).float()
        else:
            cur = prompt_len + step + 1  # tokens in the cache once this step's token is in
            logits = model(input_ids=tok[:, None], attention_mask=mask[:, :cur], position_ids=next_pos,
                           use_cache=True, **{key: cache}).logits[:, -1].float()
        next_pos = next_pos + 1
    return [row[:n] for row, n in zip(tokens.tolist(), lengths.tolist())][:real_rows]


def _refuse_nonfinite(rows: list[int], real_rows: int, step: int, prompt_tokens: list[int]) -> None:
    """Stop a rollout whose logits overflowed, naming where, instead of sampling from garbage."""
    shown = ", ".join(f"{r} ({prompt_tokens[r]} prompt tokens)" for r in rows[:4]) + (" ..." if len(rows) > 4 else "")
    raise DistlabError(f"generate: the model's logits held inf/NaN at decode step {step} in {len(rows)} of "
                       f"{real_rows} rows: {shown}; the weights or activations overflowed (see the run's "
                       "grad_norm and amp/skipped_steps), or try sampling.backend=hf to tell a sampler defect "
                       "from the model's")


def distinct_prompts(prompt_ids: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """``(first, which)``: the row of each distinct prompt's first occurrence, and for every row the index
    into ``first`` of its prompt. Found from the ids themselves, so any caller's repeated prompts share."""
    seen: dict[tuple[int, ...], int] = {}
    first: list[int] = []
    which: list[int] = []
    for row, ids in enumerate(prompt_ids):
        key = tuple(ids)
        if key not in seen:
            seen[key] = len(first)
            first.append(row)
        which.append(seen[key])
    return first, which


def _prefill(model, cache, input_ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor,
             prompt_ids: Sequence[Sequence[int]], share: bool) -> torch.Tensor:
    """Fills ``cache`` with every row's prompt and returns each row's fp32 next-token logits [B, V].

    With ``share``, rows holding the same prompt (a rollout's G samples) are computed once: the prefill is
    the one step whose cost grows with prompt length x rows, and identical rows give identical keys.
    """
    from transformers import DynamicCache

    first, which = distinct_prompts(prompt_ids)
    direct = isinstance(cache, DynamicCache)
    if not share or len(first) == len(prompt_ids) or (not direct and _has_sliding_layers(cache)):
        return _forward_prompts(model, cache, input_ids, attention_mask, positions)
    device = input_ids.device
    rows = torch.tensor(first, device=device)
    expand = torch.tensor(which, device=device)
    scratch = cache if direct else DynamicCache(config=unwrap_model(model).config)
    logits = _forward_prompts(model, scratch, input_ids[rows], attention_mask[rows], positions[rows])
    if direct:
        cache.batch_select_indices(expand)  # the same row copy that drops finished rows, here repeating them
    else:
        for index, layer in enumerate(scratch.layers):  # written in place into the static layers' tensors
            cache.update(layer.keys.index_select(0, expand), layer.values.index_select(0, expand), index)
    return logits.index_select(0, expand)


def _forward_prompts(model, cache, input_ids, attention_mask, positions) -> torch.Tensor:
    """One forward over left-padded prompts into ``cache``; only the last position's logits are computed."""
    key = cache_keyword(model)
    return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                 use_cache=True, logits_to_keep=1, **{key: cache}).logits[:, -1].float()


def _has_sliding_layers(cache) -> bool:
    """A sliding-window layer of a scratch ``DynamicCache`` keeps only its window, which a static layer
    cannot take as a prefill, so such models are prefilled row by row on the static path."""
    return any(getattr(layer, "is_sliding", False) for layer in cache.layers)


def static_cache_shape(rows: int, prompt_len: int, max_new_tokens: int, max_prompt_length: int | None = None,
                       batch_rows: int | None = None) -> tuple[int, int]:
    """``(rows, length)`` of the ``StaticCache`` for a call: fixed by the caller's ``max_prompt_length`` and
    ``batch_rows`` where the call fits them, else the call's own shape (with a warning, as it recompiles).

    The length is rounded up to a multiple of ``STATIC_LENGTH_BUCKET`` so that callers fixing nothing still
    reuse a graph across slightly different prompt lengths.
    """
    longest = prompt_len
    if max_prompt_length is not None:
        if prompt_len > max_prompt_length:
            log.warning("generate: a prompt of %d tokens exceeds max_prompt_length=%d; a larger cache is "
                        "allocated (and the decode step recompiled)", prompt_len, max_prompt_length)
        longest = max(prompt_len, max_prompt_length)
    if batch_rows is not None:
        if rows > batch_rows:
            log.warning("generate: %d rows exceed batch_rows=%d; a larger cache is allocated (and the decode "
                        "step recompiled)", rows, batch_rows)
        rows = max(rows, batch_rows)
    length = -(-(longest + max_new_tokens) // STATIC_LENGTH_BUCKET) * STATIC_LENGTH_BUCKET
    return rows, length


def _pad_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_ids: Sequence[Sequence[int]],
              rows: int) -> tuple[torch.Tensor, torch.Tensor, list[Sequence[int]]]:
    """The batch grown to ``rows`` with copies of its first row: the cache keeps one shape, and a copied
    prompt is prefilled for free by prefix sharing. The decode loop marks these rows finished."""
    extra = rows - input_ids.shape[0]
    if extra <= 0:
        return input_ids, attention_mask, list(prompt_ids)
    index = torch.cat([torch.arange(input_ids.shape[0]), torch.zeros(extra, dtype=torch.long)]).to(input_ids.device)
    return input_ids[index], attention_mask[index], list(prompt_ids) + [prompt_ids[0]] * extra


COMPACT_MIN_ROWS = 8  # below this a smaller graph saves less than its capture costs


def compacted_rows(rows: int, live: int) -> int:
    """The row count to decode ``live`` rows in: ``rows`` halved while the half still holds them all (and at
    least ``COMPACT_MIN_ROWS``), so a run meets a handful of shapes, each compiled once."""
    while rows // 2 >= max(live, COMPACT_MIN_ROWS):
        rows //= 2
    return rows


def compaction_index(finished: torch.Tensor, rows: int) -> torch.Tensor:
    """Indices into the batch of the ``rows`` rows kept: every live row in order, then a finished row repeated
    as filler (finished rows only carry padding, so the filler decodes nothing that is kept)."""
    live = (~finished).nonzero().squeeze(-1)
    filler = finished.nonzero()[:1].squeeze(-1).expand(rows - live.numel())
    return torch.cat([live, filler])


def _compacted_cache(model, config, cache, keep: torch.Tensor, length: int, filled: int, device: torch.device):
    """A cache of ``keep.numel()`` rows holding the first ``filled`` positions of the ``keep`` rows of ``cache``
    (as the shared prefill writes a static cache); one per row count is kept on the model for the next call."""
    from transformers import StaticCache

    held = model.__dict__.setdefault("_distlab_compact_caches", {})
    key = _cache_key(model, keep.numel(), length, device)
    smaller = held.get(key)
    if smaller is None:
        smaller = held[key] = StaticCache(config=config, max_cache_len=length)
    else:
        smaller.reset()
    for index, layer in enumerate(cache.layers):
        smaller.update(layer.keys[:, :, :filled].index_select(0, keep),
                       layer.values[:, :, :filled].index_select(0, keep), index)
    return smaller


def _rows_with_stop(tokenizer, tokens: torch.Tensor, lengths: torch.Tensor, finished: torch.Tensor,
                    stops: Sequence[str], window: int) -> torch.Tensor:
    """Bool per row: its last ``window`` kept tokens decode to text holding a stop string."""
    hits = []
    for row, n, done in zip(tokens.tolist(), lengths.tolist(), finished.tolist()):
        hits.append(not done and first_stop(decode(tokenizer, row[max(0, n - window):n]), stops) >= 0)
    return torch.tensor(hits, device=finished.device)


STATIC_LENGTH_BUCKET = 128


def cache_keyword(model) -> str:
    """The forward's name for the KV cache: ``cache`` in newer transformers, ``past_key_values`` before (the old
    name still works there but warns on every decode step)."""
    import inspect

    forward = type(unwrap_model(model)).forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def _cache_key(model, rows: int, length: int, device: torch.device) -> tuple:
    """What a kept ``StaticCache`` is reused for: its shape, the weights' dtype and the device."""
    return rows, length, next(unwrap_model(model).parameters()).dtype, device


def _reusable_static_cache(model, config, batch: int, length: int, device: torch.device):
    """One ``StaticCache`` kept on the model and reset between calls.

    The compiled decode step is specialised on the cache's tensors (fixed addresses, fixed shapes);
    a fresh cache every call would force a recompilation and a new CUDA-graph capture each rollout.
    Only the latest shape is kept, so memory does not accumulate.
    """
    from transformers import StaticCache

    key = _cache_key(model, batch, length, device)
    held = model.__dict__.get("_distlab_static_cache")
    if held is not None and held[0] == key:
        held[1].reset()
        return held[1]
    cache = StaticCache(config=config, max_cache_len=length)
    model.__dict__["_distlab_static_cache"] = (key, cache)  # a plain attribute, not a registered module
    model.__dict__.pop("_distlab_compact_caches", None)  # the smaller caches of the old shape go with it
    return cache


def _compiled_decode_step(model):
    """One decode step under ``torch.compile(mode="reduce-overhead")``: captured once as a CUDA graph
    for a (batch, cache length), then replayed, so the ~30 layers' kernels launch as one graph."""
    step = model.__dict__.get("_distlab_decode_step")
    if step is None:
        key = cache_keyword(model)  # looked up once, outside the compiled function

        def decode(tok, pos, mask, cache):
            return model(input_ids=tok, attention_mask=mask, position_ids=pos, **{key: cache},
                         use_cache=True).logits[:, -1]

        step = torch.compile(decode, mode="reduce-overhead", fullgraph=False, dynamic=False)
        model.__dict__["_distlab_decode_step"] = step
    return step
