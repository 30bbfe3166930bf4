"""``gathered``: FSDP2 weights stay gathered for a whole generation and are all freed after it."""

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from distlab.config import DistConfig, Wrap
from distlab.recipes.lm.models.placed import gathered
from distlab.runtime.dist import Runtime
from distlab.training.wrap import wrap_model


def test_every_unit_is_gathered_inside_and_sharded_again_after():
    """FSDP2's reshard is per unit: resharding the root alone left the blocks' full weights on the device."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)
    expected = model(x).detach()
    rt = Runtime()
    try:
        wrapped = wrap_model(model, rt, DistConfig(wrap=Wrap.fsdp, cpu_offload=True),
                             shard_modules=[model[0], model[2]])
        with gathered(wrapped), torch.no_grad():
            first = wrapped(x)
            assert not any(isinstance(p, DTensor) for p in wrapped.parameters())  # kept for the next token
            second = wrapped(x)
        assert all(isinstance(p, DTensor) for p in wrapped.parameters())
        torch.testing.assert_close(first, expected)
        torch.testing.assert_close(second, expected)
        wrapped(x).sum().backward()  # training goes on from the sharded weights
        assert all(isinstance(p.grad, DTensor) for p in wrapped.parameters())
    finally:
        dist.destroy_process_group()
