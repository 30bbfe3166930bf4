"""doctor's memory model of an LM recipe follows the settings that change memory: trained weights held in fp32
whatever their dtype says, and activations recomputed under either checkpointing switch."""

from distlab.config import resolve_config
from distlab.memory_estimate import recipe_specs
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
    # LoRA trains fp32 adapters, so its policy is sampled from a bf16 copy too, as models.SamplingCopy does
    assert "policy (sampling copy)" in {s.name for s in _specs("models.policy.dtype=bf16", "model.lora_r=8")}


def test_an_fsdp2_offloaded_policy_counts_its_autocast_casts_and_root_unit_on_the_gpu():
    """Measured on an H200 (docs/benchmarks.md): without these the SCoRe 3B offload row's estimate was 43% low."""
    from distlab.recipes.lm.memory import shape

    s = shape("random:qwen2.5-0.5b")
    assert s["root"] == 151936 * 896 + 896  # the tied embedding/head and the final norm: outside the blocks
    for precision, cast_bytes in (("bf16", 2), ("fp32", 0)):  # fp32 runs no autocast, so nothing is cast
        sharded = _policy(f"dist.precision={precision}", "models.policy.wrap=fsdp")
        offloaded = _policy(f"dist.precision={precision}", "models.policy.wrap=fsdp", "dist.cpu_offload=true")
        grown = ((offloaded.activation_bytes_per_example - sharded.activation_bytes_per_example)
                 * offloaded.batch_per_device)
        expected = s["params"] * cast_bytes + s["root"] * 4
        assert abs(grown - expected) <= offloaded.batch_per_device  # per-rollout integer division
    lora = _policy("dist.precision=bf16", "models.policy.wrap=fsdp", "dist.cpu_offload=true", "model.lora_r=8")
    lora_sharded = _policy("dist.precision=bf16", "models.policy.wrap=fsdp", "model.lora_r=8")
    grown = (lora.activation_bytes_per_example - lora_sharded.activation_bytes_per_example) * lora.batch_per_device
    assert abs(grown - (lora.trainable_params * 2 + s["root"] * 4)) <= lora.batch_per_device  # only adapters train
    narrow = _policy("dist.precision=bf16", "models.policy.wrap=fsdp", "dist.cpu_offload=true", "model.lora_r=8",
                     "models.policy.dtype=bf16")  # a frozen bf16 base: its root unit is bf16 too
    narrow_sharded = _policy("dist.precision=bf16", "models.policy.wrap=fsdp", "model.lora_r=8",
                             "models.policy.dtype=bf16")
    grown = (narrow.activation_bytes_per_example - narrow_sharded.activation_bytes_per_example) * narrow.batch_per_device
    assert abs(grown - (narrow.trainable_params * 2 + s["root"] * 2)) <= narrow.batch_per_device


def test_a_cache_freed_after_sampling_counts_the_larger_phase_a_kept_one_both():
    """Measured on an H200 (docs/benchmarks.md, 2026-11-26) with transformers' generate: the GRPO 1.5B offload
    step's peak was set while sampling and did not rise in the update; adding the two phases had put its estimate
    20% over the peak. Our static sampler keeps its cache on the model, so there both phases count."""
    def act(*overrides):
        return _policy("dist.precision=bf16", "prompts_per_step=64", *overrides).activation_bytes_per_example

    hf = [act("sampling.backend=hf", f"micro_batch_size={mb}") for mb in (2, 4, 64)]
    assert hf[0] == hf[1] < hf[2]  # the KV cache is the larger phase until the micro-batch outgrows it
    kept = [act(f"micro_batch_size={mb}") for mb in (2, 4)]
    assert hf[0] < kept[0] < kept[1]  # a kept cache adds to the update at every micro-batch size
