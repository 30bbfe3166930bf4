"""doctor's memory model of an LM recipe follows the settings that change memory: trained weights held in fp32
whatever their dtype says, and activations recomputed under either checkpointing switch."""

from distlab.config import resolve_config
from distlab.memory.estimate import recipe_specs
from distlab.recipe import load_recipe


def _policy(*overrides):
    recipe = load_recipe("grpo")
    specs = recipe_specs(recipe, resolve_config(recipe, [], ["model.source=random:qwen2.5-0.5b", *overrides]))
    return next(s for s in specs if s.name == "policy")


def test_trained_weights_count_four_bytes_and_checkpointing_shrinks_activations():
    plain = _policy()
    assert _policy("models.policy.dtype=bf16").param_dtype_bytes == 4 == plain.param_dtype_bytes
    assert _policy("models.policy.dtype=bf16", "model.lora_r=8").param_dtype_bytes == 2  # a frozen bf16 base
    for switch in ("dist.activation_checkpointing=blocks", "model.gradient_checkpointing=true"):
        assert _policy(switch).activation_bytes_per_example < plain.activation_bytes_per_example


def test_cpu_offload_moves_the_trained_state_to_the_host():
    assert _policy().placement == "device"
    assert _policy("models.policy.wrap=fsdp", "dist.cpu_offload=true").placement == "offload"


def _specs(*overrides):
    recipe = load_recipe("grpo")
    return recipe_specs(recipe, resolve_config(recipe, [], ["model.source=random:qwen2.5-0.5b", *overrides]))


def test_a_narrow_policy_dtype_adds_its_sampling_copy_and_keeps_activations_in_the_autocast_dtype():
    plain = {s.name: s for s in _specs("dist.precision=bf16")}
    narrow = {s.name: s for s in _specs("dist.precision=bf16", "models.policy.dtype=bf16")}
    assert "policy (sampling copy)" not in plain  # fp32 weights are sampled from directly
    copy = narrow["policy (sampling copy)"]
    assert copy.param_dtype_bytes == 2 and copy.trainable_params == 0 and copy.params == plain["policy"].params
    # the training activations are bf16 either way; only the rollout KV cache narrows with the copy's dtype
    assert narrow["policy"].activation_bytes_per_example < plain["policy"].activation_bytes_per_example
    fp32 = {s.name: s for s in _specs("dist.precision=fp32")}
    assert fp32["policy"].activation_bytes_per_example > plain["policy"].activation_bytes_per_example
    assert "policy (sampling copy)" not in {s.name for s in _specs("models.policy.dtype=bf16",
                                                                     "models.policy.wrap=fsdp")}  # FSDP2: gathered
    # LoRA trains fp32 adapters, so its policy is sampled from a bf16 copy too, as models.SamplingCopy does: a copy
    # of the adapters alone, the frozen base shared
    lora = {s.name: s for s in _specs("models.policy.dtype=bf16", "model.lora_r=8")}
    assert lora["policy (sampling copy)"].params == lora["policy"].trainable_params < plain["policy"].params / 50


def _seq(*overrides):
    """The tokens the doctor must size a rollout for: the run's longest prompt plus its completion."""
    from distlab.recipes.lm.rollout.generate import max_prompt_tokens
    from distlab.recipes.lm.memory import training_prompts

    recipe = load_recipe("grpo")
    cfg = resolve_config(recipe, [], ["model.source=random:qwen2.5-0.5b", *overrides])
    tok, _, _, prompts = training_prompts(cfg)
    return cfg, max_prompt_tokens(tok, prompts) + cfg.sampling.max_completion_length


def test_sequences_are_sized_from_the_runs_own_prompts():
    from distlab.recipes.grpo.recipe import model_spec
    from distlab.recipes.lm.memory import lm_specs

    for extra in ([], ["task.few_shot=3"], ["sampling.max_completion_length=64"]):
        cfg, seq = _seq(*extra)
        assert model_spec(cfg) == lm_specs(cfg, ["policy", "reference"], cfg.prompts_per_step * cfg.num_generations,
                                           seq)
    assert _seq("task.few_shot=3")[1] > _seq()[1] > _seq("sampling.max_completion_length=64")[1]


def test_a_sharded_policy_samples_gathered_at_its_training_width():
    """FSDP2 gathers the fp32 trained weights to sample and no autocast runs there, so the KV cache is fp32 too:
    the SCoRe 3B and GRPO 1.5B offload rows' peaks were set so (H200, 2026-11-26: +4% and -2% with this term)."""
    from distlab.recipes.lm.memory import shape

    s = shape("random:qwen2.5-0.5b")
    opts = ("dist.precision=bf16", "sampling.backend=hf", "dist.activation_checkpointing=blocks",
            "micro_batch_size=1", "models.policy.wrap=fsdp", "dist.cpu_offload=true")
    cfg, seq = _seq(*opts)
    p = _policy(*opts)
    kv = 2 * s["layers"] * s["kv_width"] * seq * 4 * p.batch_per_device
    assert p.placement == "offload"
    assert abs(p.activation_bytes_per_example * p.batch_per_device - (s["params"] * 4 + kv)) < p.batch_per_device


def test_fp32_adam_steps_with_a_temporary_as_large_as_the_weights():
    """torch.optim.AdamW's foreach step: measured as the peak of the GRPO 1.5B checkpointed row (31.73 GiB,
    H200, 2026-11-26; estimate 31.63 with it). torchao's bf16/int8 steps and a step on the host have none."""
    from distlab.recipes.lm.memory import shape

    s = shape("random:qwen2.5-0.5b")
    opts = ("dist.precision=bf16", "dist.activation_checkpointing=blocks", "micro_batch_size=1")
    fp32 = _policy(*opts, "sampling.backend=hf")
    assert fp32.activation_bytes_per_example * fp32.batch_per_device - s["params"] * 4 in range(fp32.batch_per_device)
    int8 = _policy(*opts, "sampling.backend=hf", "optim.state_dtype=int8")
    assert int8.activation_bytes_per_example < fp32.activation_bytes_per_example


def test_the_layer_count_is_what_a_real_layer_saves_for_backward():
    """The per-token bytes the doctor charges a decoder layer, against the tensors autograd keeps for one layer
    of the Qwen2.5-0.5B shape under bf16 autocast (padded batch, grouped attention); the weights' casts counted
    apart, as the doctor counts them."""
    import torch
    from transformers import AutoModelForCausalLM

    from distlab.recipes.lm.memory import layer_bytes_per_token, shape
    from distlab.recipes.lm.models.random_shapes import random_config

    cfg = random_config("qwen2.5-0.5b")
    cfg.num_hidden_layers = 2
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg)
    weights = {tuple(p.shape) for p in model.model.layers[1].parameters()}
    weights |= {tuple(reversed(w)) for w in weights}
    saved: dict[int, tuple[int, bool]] = {}
    on = []

    def pack(t):
        if on:
            storage = t.untyped_storage()
            saved[storage.data_ptr()] = (storage.nbytes(), tuple(t.shape) in weights and t.dim() == 2)
        return t

    model.model.layers[1].register_forward_pre_hook(lambda *a: on.append(1))
    model.model.layers[1].register_forward_hook(lambda *a: on.clear())
    rows, length = 2, 192
    mask = torch.ones(rows, length, dtype=torch.long)
    mask[0, :48] = 0
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.model(input_ids=torch.randint(0, 1000, (rows, length)), attention_mask=mask)
    tokens = rows * length
    activations = sum(n for n, is_weight in saved.values() if not is_weight) / tokens
    casts = sum(n for n, is_weight in saved.values() if is_weight)
    expected = layer_bytes_per_token(shape("random:qwen2.5-0.5b"), 2)
    assert abs(activations - expected) / expected < 0.03, (activations, expected)
    layer_params = sum(p.numel() for p in model.model.layers[1].parameters() if p.dim() == 2)
    assert casts == 2 * layer_params  # every projection's bf16 weight: the doctor's cast term, per layer


def test_a_cache_freed_after_sampling_counts_the_larger_phase_a_kept_one_both():
    """Measured on an H200 (docs/benchmarks.md, 2026-11-26) with transformers' generate: the GRPO 1.5B offload
    step's peak was set while sampling and did not rise in the update; adding the two phases had put its estimate
    20% over the peak. Our static sampler keeps its cache on the model, so there both phases count."""
    def act(*overrides):
        return _policy("dist.precision=bf16", "prompts_per_step=64", "models.policy.wrap=fsdp",
                       "dist.cpu_offload=true", "dist.activation_checkpointing=blocks",
                       *overrides).activation_bytes_per_example

    hf = [act("sampling.backend=hf", f"micro_batch_size={mb}") for mb in (1, 2, 64)]
    assert hf[0] == hf[1] < hf[2]  # the gathered model and its cache are the larger phase until the micro-batch
    kept = [act(f"micro_batch_size={mb}") for mb in (1, 2)]  # outgrows them
    assert hf[0] < kept[0] < kept[1]  # a kept cache adds to the update at every micro-batch size
