"""Trained weights stay fp32 whatever ``models.<name>.dtype`` says: bf16 weights stepped at RL rates never move.

The GPU presets once ran the policy with ``models.policy.dtype=bf16`` and plain AdamW: at lr 2e-6 the update
is below half a bf16 ulp for almost every weight, and 13 GRPO steps changed 0.57% of SmolLM2's weights. Here
13 AdamW steps at lr 2e-6 on a placed model must change most of them, frozen weights may stay bf16, and a
LoRA model keeps its base in bf16 while its adapters train in fp32.
"""

import pytest
import torch

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

from distlab.config import DistConfig  # noqa: E402
from distlab.config import ModelSettings  # noqa: E402
from distlab.recipes.lm.models.source import load_causal_lm  # noqa: E402
from distlab.runtime.dist import Runtime  # noqa: E402
from distlab.training.placement import place  # noqa: E402


def _steps(model: torch.nn.Module, n: int = 13, lr: float = 2e-6) -> float:
    """Fraction of trainable weights that ``n`` AdamW steps on a next-token loss changed."""
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    ids = torch.randint(0, 200, (4, 16), generator=torch.Generator().manual_seed(0))
    for _ in range(n):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    changed = sum(int((p.detach() != b).sum()) for p, b in zip(params, before))
    return changed / sum(b.numel() for b in before)


def test_a_trained_model_placed_in_bf16_keeps_fp32_weights_that_move():
    model, _ = load_causal_lm("tiny:llama-2l", dtype=torch.bfloat16, seed=0)
    assert _steps(model) < 0.05  # the defect: bf16 weights stepped in place barely move
    model, _ = load_causal_lm("tiny:llama-2l", dtype=torch.bfloat16, seed=0)
    placed = place("policy", model, ModelSettings(dtype="bf16", wrap="none"), Runtime(), DistConfig())
    assert {p.dtype for p in placed.parameters()} == {torch.float32}
    assert _steps(placed) > 0.9


def test_frozen_weights_keep_the_narrow_dtype_and_lora_adapters_train_in_fp32():
    ref, _ = load_causal_lm("tiny:llama-2l", seed=0)
    ref = place("reference", ref, ModelSettings(trainable=False, dtype="bf16"), Runtime(), DistConfig())
    assert {p.dtype for p in ref.parameters()} == {torch.bfloat16}
    lora, _ = load_causal_lm("tiny:llama-2l", seed=0, lora_r=4)
    lora = place("policy", lora, ModelSettings(dtype="bf16", wrap="none"), Runtime(), DistConfig())
    trained = {p.dtype for p in lora.parameters() if p.requires_grad}
    frozen = {p.dtype for p in lora.parameters() if not p.requires_grad}
    assert trained == {torch.float32} and frozen == {torch.bfloat16}
    assert _steps(lora) > 0.9


def test_sampling_copy_is_narrow_refreshed_in_place_and_only_for_trained_models():
    from distlab.recipes.lm.models.placed import SamplingCopy

    model, _ = load_causal_lm("tiny:llama-2l", seed=0)
    policy = place("policy", model, ModelSettings(dtype="bf16", wrap="none"), Runtime(), DistConfig())
    sampling = SamplingCopy(policy, torch.bfloat16)
    assert sampling.is_copy and {p.dtype for p in sampling.module.parameters()} == {torch.bfloat16}
    addresses = [p.data_ptr() for p in sampling.module.parameters()]
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.5)
    sampling.refresh()
    assert [p.data_ptr() for p in sampling.module.parameters()] == addresses  # a captured graph stays valid
    for dst, src in zip(sampling.module.parameters(), policy.parameters()):
        assert torch.equal(dst, src.to(torch.bfloat16))
    assert not SamplingCopy(policy, torch.float32).is_copy  # fp32 sampling reads the trained weights
    frozen, _ = load_causal_lm("tiny:llama-2l", seed=0)
    frozen = place("reference", frozen, ModelSettings(trainable=False, dtype="bf16"), Runtime(), DistConfig())
    assert not SamplingCopy(frozen, torch.bfloat16).is_copy  # nothing trains: it already is bf16
