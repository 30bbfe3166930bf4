"""dist.compile_mode reaches torch.compile, and is refused where it could not act."""

import pytest
import torch
from torch import nn

from distlab.config import CompileMode, compose, resolve_config, to_object
from distlab.errors import DistlabError
from distlab.recipe import load_recipe
from distlab.recipes.toy import ToyConfig
from distlab.training.wrap import compiled


@pytest.fixture
def calls(monkeypatch):
    seen = []

    def fake_compile(model, **kwargs):
        seen.append(kwargs)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    return seen


def test_modes_pass_through_and_default_passes_none(calls):
    model = nn.Linear(2, 2)
    for mode in CompileMode:
        assert compiled(model, mode) is model
    assert calls == [{}, {"mode": "reduce-overhead"}, {"mode": "max-autotune"},
                     {"mode": "max-autotune-no-cudagraphs"}]
    compiled(model, "max-autotune")  # the value form as well as the member
    assert calls[-1] == {"mode": "max-autotune"}


def test_config_takes_member_names():
    cfg = to_object(compose(ToyConfig, overrides=["dist.compile_mode=reduce_overhead"]))
    assert cfg.dist.compile_mode == CompileMode.reduce_overhead


def test_a_mode_without_compilation_or_on_a_recipe_that_does_not_compile_is_refused():
    hrm = load_recipe("hrm")
    with pytest.raises(DistlabError, match="acts only on compiled models; add dist.compile=true"):
        resolve_config(hrm, [], ["dist.compile_mode=max_autotune", "data.path=nowhere"])
    ok = resolve_config(hrm, [], ["dist.compile=true", "dist.compile_mode=max_autotune", "data.path=nowhere"])
    assert ok.dist.compile_mode == CompileMode.max_autotune
    with pytest.raises(DistlabError, match="recipe 'ppo' ignores dist.compile_mode"):
        resolve_config(load_recipe("ppo"), [], ["dist.compile_mode=max_autotune"])


def test_split_ddp_needs_compilation_and_sets_dynamos_ddp_optimizer(calls):
    import torch._dynamo

    from distlab.config import DistConfig
    from distlab.runtime.dist import Runtime
    from distlab.training.wrap import wrap_model

    hrm = load_recipe("hrm")
    with pytest.raises(DistlabError, match="compile_split_ddp=false acts only on compiled models"):
        resolve_config(hrm, [], ["dist.compile_split_ddp=false", "data.path=nowhere"])
    with pytest.raises(DistlabError, match="recipe 'ppo' ignores dist.compile_split_ddp"):
        resolve_config(load_recipe("ppo"), [], ["dist.compile_split_ddp=false"])
    before = torch._dynamo.config.optimize_ddp
    try:
        for split in (False, True):
            wrap_model(nn.Linear(2, 2), Runtime(), DistConfig(compile=True, compile_split_ddp=split))
            assert torch._dynamo.config.optimize_ddp is split
    finally:
        torch._dynamo.config.optimize_ddp = before
