"""LoRA runs (issue 49 item 3) through the real ``distlab`` command: only the adapters train (fp32, over a frozen
bf16 base), the checkpoint holds the adapters and their optimizer state and not the base, a run cut and resumed
onto a freshly built base ends bit-identical to an uninterrupted one, and a resume over another base is refused."""

import json
import sys
from pathlib import Path

import pytest
import torch

from clitools import run_cli, run_clis, summary  # noqa: E402

pytest.importorskip("peft", reason="LoRA needs the llm extra: pip install -e '.[llm]'")

GRPO = ["model.source=tiny:llama-4l", "model.prompt_mode=text", "prompts_per_step=2", "num_generations=2",
        "micro_batch_size=4", "sampling.max_completion_length=12", "task.train_size=16", "task.eval_size=2",
        "task.families=add_const", "task.eval_families=add_const", "task.eval_split=train", "sft_steps=0",
        "lr=1e-2", "log.every=1", "log.progress=false", "evaluation.before=false", "sandbox.timeout_s=3",
        "models.policy.dtype=bf16", "steps=4"]
LORA = ["model.lora_r=2"]


def _metadata(ckpt: Path):
    import torch.distributed.checkpoint as dcp

    return dcp.FileSystemReader(str(ckpt)).read_metadata().state_dict_metadata


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "time" and not k.endswith("_s") and not k.startswith("peak_")}
            for r in rows if r["split"] == "train"]


def _size(ckpt: Path) -> int:
    return sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """A full fine-tune, an uninterrupted LoRA run, and a LoRA run cut after step 2 then resumed (4 steps each)."""
    d = tmp_path_factory.mktemp("lora")
    run_clis([["train", "grpo", *GRPO, "run.name=full"], ["train", "grpo", *GRPO, *LORA, "run.name=lora"],
              ["train", "grpo", *GRPO, *LORA, "run.name=cut", "run.stop_at=2"]], d)  # independent: side by side
    assert summary(d / "runs" / "cut")["status"] == "preempted"
    run_cli(["train", "grpo", *GRPO, *LORA, "run.name=cut"], d)
    return d


def test_a_lora_checkpoint_holds_fp32_adapters_and_their_optimizer_state_only(runs):
    ckpt = runs / "runs" / "lora" / "checkpoints" / "step00000004"
    meta = _metadata(ckpt)
    weights = {k: v for k, v in meta.items() if k.startswith("models.policy.")}
    state = {k for k in meta if k.startswith("optim.policy.state.")}
    assert weights and all(".lora_A." in k or ".lora_B." in k for k in weights), sorted(weights)
    assert {v.properties.dtype for v in weights.values()} == {torch.float32}
    assert {k.rsplit(".", 1)[0] for k in state} == {"optim.policy.state." + k[len("models.policy."):]
                                                     for k in weights}  # AdamW's moments of each adapter, no more
    extra = json.loads((ckpt / "extra.json").read_text())
    assert extra["frozen_bases"] == {"policy": "tiny:llama-4l seed=0"}
    full = runs / "runs" / "full" / "checkpoints" / "step00000004"
    assert json.loads((full / "extra.json").read_text())["frozen_bases"] == {}
    assert _size(ckpt) < 0.1 * _size(full), (_size(ckpt), _size(full))


def test_a_resumed_lora_run_ends_bit_identical_to_an_uninterrupted_one(runs):
    lora, cut = summary(runs / "runs" / "lora"), summary(runs / "runs" / "cut")
    assert cut["status"] == "completed" and cut["step"] == 4
    assert cut["param_checksum"] == lora["param_checksum"]
    assert _rows(runs / "runs" / "cut") == _rows(runs / "runs" / "lora")
    assert lora["param_checksum"] != summary(runs / "runs" / "full")["param_checksum"]


def test_only_the_adapters_moved_and_the_base_kept_its_dtype(runs):
    """The trained policy rebuilt as export rebuilds it: its frozen base equals a fresh bf16 build bit for bit."""
    from distlab.training.checkpoint import load_model_weights
    from distlab.recipes.lm.models.source import load_causal_lm

    fresh, _ = load_causal_lm("tiny:llama-4l", dtype=torch.bfloat16, lora_r=2, seed=0)
    start = {n: p.detach().clone() for n, p in fresh.named_parameters()}
    trained, _ = load_causal_lm("tiny:llama-4l", dtype=torch.bfloat16, lora_r=2, seed=0)
    for p in trained.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    load_model_weights(trained, runs / "runs" / "lora" / "checkpoints" / "step00000004", prefer="policy")
    moved = {n for n, p in trained.named_parameters() if not torch.equal(p.to(start[n].dtype), start[n])}
    assert moved and all(".lora_" in n for n in moved)
    assert {p.dtype for p in trained.parameters() if not p.requires_grad} == {torch.bfloat16}
    assert all(".lora_" in n for n, p in trained.named_parameters() if p.requires_grad)


@pytest.mark.parametrize("change, message", [
    ("run.seed=1", "trained over base 'tiny:llama-4l seed=0', but this run built 'tiny:llama-4l seed=1'"),
    ("model.lora_r=0", "holds only the trainable (LoRA adapter) weights of 'policy'"),
])
def test_resuming_adapters_over_another_base_is_refused_in_one_line(runs, tmp_path, change, message):
    import shutil

    shutil.copytree(runs / "runs" / "lora", tmp_path / "runs" / "lora")
    proc = run_cli(["train", "grpo", *GRPO, *LORA, "run.name=lora", "steps=5", change], tmp_path, check=False)
    lines = [x for x in proc.stderr.splitlines() if "DistlabError" in x or "error" in x.lower()]
    assert proc.returncode != 0 and any(message in x for x in lines), proc.stderr[-3000:]


SCORE = ["model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=2", "num_generations=2",
         "micro_batch_size=4", "sampling.max_completion_length=12", "hint_max_tokens=6", "task.train_size=16",
         "task.eval_size=2", "evaluation.before=false", "log.every=1", "log.progress=false", "lr=1e-2",
         "guidance_lr=1e-2", "sft_steps=0", "guidance=trained", "models.policy.dtype=bf16",
         "models.guidance.dtype=bf16", "model.lora_r=2", "steps=4"]


def test_score_with_lora_checkpoints_adapters_of_both_trained_models_and_resumes_exactly(tmp_path):
    run_clis([["train", "score", *SCORE, "run.name=whole"],  # independent: side by side
              ["train", "score", *SCORE, "run.name=cut", "run.stop_at=2"]], tmp_path)
    run_cli(["train", "score", *SCORE, "run.name=cut"], tmp_path)
    whole, cut = summary(tmp_path / "runs" / "whole"), summary(tmp_path / "runs" / "cut")
    assert cut["status"] == "completed" and cut["param_checksums"] == whole["param_checksums"]
    ckpt = tmp_path / "runs" / "whole" / "checkpoints" / "step00000004"
    extra = json.loads((ckpt / "extra.json").read_text())
    assert extra["frozen_bases"] == {"guidance": "tiny:llama-2l seed=1", "policy": "tiny:llama-2l seed=0"}
    weights = {k: v for k, v in _metadata(ckpt).items() if k.startswith("models.")}
    assert {k.split(".")[1] for k in weights} == {"policy", "guidance"}
    assert all(".lora_" in k and v.properties.dtype == torch.float32 for k, v in weights.items())


def test_two_ranks_checkpoint_the_same_adapters_and_eval_reads_them(runs):
    """Under DDP the state-dict names lose the wrapper's ``module.``: the same adapter keys as one rank, no base; and
    ``distlab eval`` rebuilds the base and scores the adapters as training's final evaluation did."""
    run_cli(["train", "grpo", *GRPO, *LORA, "steps=2", "run.name=ddp", "--procs", "2"], runs)
    two = _metadata(runs / "runs" / "ddp" / "checkpoints" / "step00000002")
    one = _metadata(runs / "runs" / "lora" / "checkpoints" / "step00000004")
    keys = {k for k in two if k.startswith("models.")}
    assert keys and keys == {k for k in one if k.startswith("models.")}
    run_cli(["eval", str(runs / "runs" / "lora")], runs)
    ev = json.loads((runs / "runs" / "lora" / "eval" / "step00000004" / "eval.json").read_text())
    assert ev["step"] == 4 and ev["pass@1"] == summary(runs / "runs" / "lora")["eval"]["pass@1"]
