"""``random:<shape>`` sources: the seeds' model sizes without their weights, for systems benchmarks."""

import pytest
import torch

from distlab.errors import DistlabError
from distlab.recipes.lm.memory import shape
from distlab.recipes.lm.models.source import load_causal_lm, resolve_source

pytest.importorskip("transformers")

# parameter counts of the published checkpoints (tied embeddings counted once)
PUBLISHED = {"qwen2.5-0.5b": 494_032_768, "qwen2.5-1.5b": 1_543_714_304, "qwen2.5-3b": 3_085_938_688,
             "qwen2.5-7b": 7_615_616_512, "llama-3.2-1b": 1_235_814_400, "llama-3.2-3b": 3_212_749_824,
             "smollm2-135m": 134_515_008}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shapes_have_the_published_parameter_counts(name):
    assert shape(f"random:{name}")["params"] == PUBLISHED[name]


def test_unknown_shape_is_one_line_with_a_hint():
    with pytest.raises(DistlabError, match=r"no such shape.*did you mean qwen2.5-1.5b"):
        resolve_source("random:qwen2.5-1.5")


def test_a_random_model_loads_generates_and_is_the_same_on_every_rank():
    model, tok = load_causal_lm("random:qwen2.5-0.5b", dtype="bf16", seed=3)
    again, _ = load_causal_lm("random:qwen2.5-0.5b", dtype="bf16", seed=3)
    assert sum(p.numel() for p in model.parameters()) == PUBLISHED["qwen2.5-0.5b"]
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    ids = tok("def add(a, b):", return_tensors="pt").input_ids
    assert int(ids.max()) < model.config.vocab_size  # the byte tokenizer fits every vocabulary
    out = model.generate(ids, max_new_tokens=2, do_sample=False)
    assert out.shape == (1, ids.shape[1] + 2)
