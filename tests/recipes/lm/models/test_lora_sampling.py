"""The sampler under LoRA (issue 49 item 3): generation reads the adapters in place through peft's forward, from a
sampling copy that holds only the adapters (in the sampling dtype) and shares the frozen base with the trained
model, so a step makes no second copy of the base, merges nothing, and samples exactly what a full copy would."""

import copy

import pytest
import torch

pytest.importorskip("peft", reason="LoRA needs the llm extra: pip install -e '.[llm]'")

PROMPTS = ["def add(a, b):\n    return", "x = 3\ny ="]


@pytest.fixture()
def lora_policy():
    """A bf16 tiny model with rank-4 adapters held in fp32 as training holds them, moved off their zero start."""
    from distlab.training.placement import keep_trained_weights_fp32
    from distlab.recipes.lm.models.source import load_causal_lm

    model, tok = load_causal_lm("tiny:llama-4l", dtype=torch.bfloat16, lora_r=4, seed=0)
    keep_trained_weights_fp32(model)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return model, tok


def _logits(model, tok) -> torch.Tensor:
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits


def _greedy(model, tok) -> list[str]:
    from distlab.recipes.lm.rollout.generate import generate
    from distlab.recipes.lm.config import SamplingConfig

    return [c.text for c in generate(model, tok, PROMPTS, SamplingConfig(max_completion_length=8, temperature=0.0),
                                     compile=False)]


def _bytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


def test_the_sampling_copy_of_a_lora_model_holds_the_adapters_only(lora_policy):
    from distlab.recipes.lm.models.placed import SamplingCopy

    model, _ = lora_policy
    sampling = SamplingCopy(model, torch.bfloat16)
    assert sampling.is_copy
    source = {id(p) for p in model.parameters()}
    own = [(n, p) for n, p in sampling.module.named_parameters() if id(p) not in source]
    assert own and all(".lora_" in n for n, _ in own)
    assert {p.dtype for _, p in own} == {torch.bfloat16}
    adapters = [p for p in model.parameters() if p.requires_grad]
    assert _bytes(p for _, p in own) == _bytes(adapters) // 2  # fp32 adapters copied once, in bf16
    whole = _bytes(sampling.module.parameters())
    assert _bytes(p for _, p in own) < 0.1 * whole  # a full copy would add `whole` bytes
    shared = {n for n, p in sampling.module.named_parameters() if id(p) in source}
    assert shared == {n for n, p in model.named_parameters() if not p.requires_grad}


def test_sampling_from_it_equals_sampling_from_a_full_copy_and_merges_nothing(lora_policy):
    from distlab.recipes.lm.models.placed import SamplingCopy

    model, tok = lora_policy
    base = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    sampling = SamplingCopy(model, torch.bfloat16)
    full = copy.deepcopy(model).to(torch.bfloat16).eval()  # what the sampler held before: the whole model again
    assert torch.equal(_logits(sampling.module, tok), _logits(full, tok))
    assert _greedy(sampling.module, tok) == _greedy(full, tok)
    assert not any(getattr(m, "merged", False) for m in sampling.module.modules())
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if not p.requires_grad)


def test_refresh_after_an_adapter_step_follows_the_trained_adapters(lora_policy):
    from distlab.recipes.lm.models.placed import SamplingCopy

    model, tok = lora_policy
    sampling = SamplingCopy(model, torch.bfloat16)
    before = _logits(sampling.module, tok)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    model(**batch).logits.float().pow(2).mean().backward()
    opt.step()
    assert torch.equal(_logits(sampling.module, tok), before)  # not refreshed yet: still the old adapters
    sampling.refresh()
    after = _logits(sampling.module, tok)
    assert not torch.equal(after, before)
    assert torch.equal(after, _logits(copy.deepcopy(model).to(torch.bfloat16).eval(), tok))


class _Session:
    """What the recipes' model loaders read of a session: its runtime (one CPU process)."""

    def __init__(self) -> None:
        from distlab.runtime.dist import Runtime

        self.rt = Runtime()


def _adapters_fp32_over_bf16(model) -> None:
    trained = {n: p for n, p in model.named_parameters() if p.requires_grad}
    frozen = [p for p in model.parameters() if not p.requires_grad]
    assert trained and all(".lora_A." in n or ".lora_B." in n for n in trained)
    assert {p.dtype for p in trained.values()} == {torch.float32}
    assert frozen and {p.dtype for p in frozen} == {torch.bfloat16}


@pytest.mark.parametrize("recipe", ["grpo", "score"])
def test_the_recipes_load_a_lora_policy_as_fp32_adapters_over_a_bf16_base(recipe):
    """GRPO's and SCoRe's own loaders with ``model.lora_r>0`` and bf16 models: only the adapters train, in fp32; the
    reference is the bare base; SCoRe's trained guidance model gets adapters too."""
    from distlab.config import resolve_config
    from distlab.recipe import load_recipe

    keys = ["model.source=tiny:llama-2l", "model.lora_r=4", "dist.verify_init=false", "models.policy.dtype=bf16",
            "models.reference.dtype=bf16"]
    if recipe == "score":
        keys += ["guidance=trained", "models.guidance.dtype=bf16", "sft_steps=0", "beta1=0.05"]
    else:
        keys += ["beta=0.04"]
    cfg = resolve_config(load_recipe(recipe), [], keys)
    if recipe == "grpo":
        from distlab.recipes.lm.models.placed import load_placed

        policy = load_placed("policy", cfg, _Session(), 0)[0]
        reference = load_placed("reference", cfg, _Session(), 0, lora=False)[0]
        guidance = None
    else:
        from distlab.recipes.score.models import load_models

        m = load_models(cfg, _Session())
        policy, reference, guidance = m.policy, m.reference, m.guidance
    _adapters_fp32_over_bf16(policy)
    if guidance is not None:
        _adapters_fp32_over_bf16(guidance)
    assert reference is not None and not any(p.requires_grad for p in reference.parameters())
    assert not any(".lora_" in n for n, _ in reference.named_parameters())
