"""``distlab export RUN --format hf`` on a SCoRe run: the trained policy, loadable by transformers as trained."""

import torch
from score_cli import TINY, run_cli

PROMPTS = ["def add(a, b):\n    return", "Write a function that doubles x."]


def test_the_exported_policy_has_the_trained_logits(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from distlab.training.checkpoint import find_checkpoint, load_model_weights
    from distlab.recipes.lm.models.source import load_causal_lm

    run_cli(["train", "score", *TINY, "steps=1", "guidance=none", "run.name=exp", "run.seed=5"], tmp_path)
    run = tmp_path / "runs" / "exp"
    out = tmp_path / "hf"
    run_cli(["export", str(run), "--format", "hf", "--output", str(out)], tmp_path)
    trained, tok = load_causal_lm("tiny:llama-2l", seed=5)
    base = [p.detach().clone() for p in trained.parameters()]
    load_model_weights(trained, find_checkpoint(run), prefer="policy")
    assert any(not torch.equal(a, b) for a, b in zip(base, trained.parameters()))  # it did train
    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    hf_tok = AutoTokenizer.from_pretrained(out)
    hf_tok.padding_side = "left"
    batch, hf_batch = (t(PROMPTS, return_tensors="pt", padding=True) for t in (tok, hf_tok))
    assert torch.equal(batch["input_ids"], hf_batch["input_ids"])
    with torch.no_grad():
        want = trained.eval()(**batch).logits[batch["attention_mask"].bool()]
        got = loaded(**hf_batch).logits[hf_batch["attention_mask"].bool()]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
