"""A GRPO step whose gradient is inf is skipped, counted in every metrics row (bf16 too, where the log showed only
``grad_norm: null``), named in the closing report and the checkpoint, and its micro-batches are written down once."""

import json

import pytest
import torch

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

TINY_GRPO = ["model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=2", "num_generations=4",
             "micro_batch_size=4", "sampling.max_completion_length=16", "task.train_size=16", "task.eval_size=2",
             "task.families=add_const", "task.eval_families=add_const", "task.eval_split=train", "sft_steps=0",
             "lr=1e-3", "log.every=1", "log.progress=false", "sandbox.timeout_s=3", "steps=3",
             "evaluation.before=false", "dist.precision=bf16", "run.name=inf"]


def _inject_inf_into_step_1_micro_batch_0(monkeypatch) -> dict:
    """A gradient hook on the policy's first trained parameter that turns its gradient to inf in micro-batch 0 of
    step 1 (the step's own backward and the replay of that micro-batch): a finite loss whose backward overflows."""
    import distlab.recipes.grpo.train as grpo_train

    real_update, real_load = grpo_train.policy_update, grpo_train.load_placed
    state = {"calls": 0, "micro_batch": None, "armed": False, "injected": 0}

    def hook(grad: torch.Tensor) -> torch.Tensor:
        if state["armed"] and state["micro_batch"] == 0:
            state["injected"] += 1
            return torch.full_like(grad, float("inf"))
        return grad

    def load_placed(role, *args, **kwargs):
        out = real_load(role, *args, **kwargs)
        if role == "policy":
            next(p for p in out[0].parameters() if p.requires_grad).register_hook(hook)
        return out

    def policy_update(session, model, opt, micro_batches, micro_loss, **kwargs):
        state["armed"], state["calls"] = state["calls"] == 1, state["calls"] + 1

        def tracked(m: int):
            state["micro_batch"] = m
            return micro_loss(m)

        try:
            return real_update(session, model, opt, micro_batches, tracked, **kwargs)
        finally:
            state["armed"] = False

    monkeypatch.setattr(grpo_train, "load_placed", load_placed)
    monkeypatch.setattr(grpo_train, "policy_update", policy_update)
    return state


def test_an_inf_gradient_is_skipped_counted_in_bf16_and_its_micro_batch_written(tmp_path, monkeypatch):
    from distlab.launch.worker import run

    state = _inject_inf_into_step_1_micro_batch_0(monkeypatch)
    monkeypatch.chdir(tmp_path)
    result = run("grpo", [], TINY_GRPO)
    run_dir = tmp_path / "runs" / "inf"
    assert state["injected"] == 2  # the step's backward of micro-batch 0, then its replay alone
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["split"] == "train"]
    assert [r["skipped_steps"] for r in train] == [0, 1, 1]  # a running count, 0 included, in bf16
    assert [r["grad_norm"] is None for r in train] == [False, True, False]
    assert result["status"] == "completed" and result["train"]["skipped_steps"] == 1
    log = (run_dir / "train.log").read_text()
    closing = [line for line in log.splitlines() if "run inf completed" in line]
    assert "; 1 update(s) skipped for an inf/NaN gradient norm" in closing[0], closing
    assert "its micro-batches (ids, log-probs, reference, KL) are in" in log
    meta = json.loads(next((run_dir / "checkpoints").glob("step*/extra.json")).read_text())
    assert meta["skipped_steps"] == 1  # kept for a resume and for `distlab eval` (skipped_fields)

    dump = torch.load(run_dir / "nonfinite_policy_rank0.pt", weights_only=False)
    assert (dump["model"], dump["step"], dump["rank"], dump["skipped_steps"]) == ("policy", 1, 0, 1)
    assert dump["loss_finite"] == [True, True] and dump["grad_finite_alone"] == [False, True]
    assert dump["offending"] == [0] and len(dump["nonfinite_params"]) == 1
    assert len(dump["micro_batches"]) == 2
    for mb in dump["micro_batches"]:
        scored = mb["scored_mask"].bool()
        assert mb["ids"].shape == mb["logprobs"].shape == mb["ref_logprobs"].shape == mb["kl"].shape
        assert bool(scored.any()) and bool((mb["logprobs"][scored] < 0).all())
        assert bool(torch.isfinite(mb["kl"]).all()) and bool((mb["kl"][~scored] == 0).all())
        assert bool((mb["kl"][scored] >= 0).all())  # k3 is never negative
    assert not list(run_dir.glob(".nonfinite*"))  # written atomically: no temporary file left behind
    # a resumed bf16 run goes on counting from the checkpoint (no loss-scale state carries it there)
    run("grpo", [], [*TINY_GRPO, "steps=4"])
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["skipped_steps"] for r in rows if r["split"] == "train"][-1] == 1


def test_skipped_fields_give_updates_for_a_checkpoint_that_kept_the_count():
    from distlab.training.loop import skipped_fields

    assert skipped_fields({"step": 57, "skipped_steps": 2}) == {"skipped_steps": 2, "updates": 55}
    assert skipped_fields({"step": 57}) == {}  # older checkpoints: nothing claimed
