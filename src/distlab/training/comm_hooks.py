"""Gradient compression for DDP (``dist.comm_hook``) through torch's own DDP communication hooks.

* ``fp16`` / ``bf16``: each gradient bucket is cast to 16 bits, all-reduced, and cast back: half the bytes
  on the wire, at the rounding error of the 16-bit format (``default_hooks.fp16_compress_hook`` /
  ``bf16_compress_hook``). DDP accepts the bf16 hook only with NCCL (CUDA) or XCCL: on gloo/CPU it is
  refused in one line; fp16 works on both. fp16 can overflow above 65504: prefer bf16 on GPUs.
* ``powersgd``: PowerSGD (Vogels et al. 2019): each gradient matrix is all-reduced as a rank-``r``
  factorisation with error feedback (``powerSGD_hook``), after ``dist.powersgd_start_iter`` plain steps.
  Vectors (biases, norms) and matrices too small to gain are all-reduced uncompressed. PowerSGD's
  error-feedback memory is not checkpointed: a resumed run starts it from zero.

FSDP2 reduce-scatters instead of all-reducing and has no DDP hooks: the config checks refuse the
combination before any process starts.
"""

from __future__ import annotations

import logging
from typing import Any

from torch import nn

from distlab.config import BF16_NEEDS_NCCL
from distlab.errors import DistlabError

log = logging.getLogger("distlab")

COMM_HOOKS = ("none", "fp16", "bf16", "powersgd")


def register_comm_hook(ddp_model: nn.Module, hook: str, process_group: Any = None, powersgd_rank: int = 4,
                       powersgd_start_iter: int = 10) -> Any:
    """Register ``hook`` on a DDP model; returns the hook's state (PowerSGD's) or None."""
    if hook == "none":
        return None
    if not hasattr(ddp_model, "register_comm_hook"):
        raise DistlabError(f"dist.comm_hook={hook} needs a DDP-wrapped model, got {type(ddp_model).__name__}; "
                           f"use dist.wrap=ddp or dist.comm_hook=none")
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if hook == "fp16":
        ddp_model.register_comm_hook(process_group, default_hooks.fp16_compress_hook)
        return None
    if hook == "bf16":
        try:
            ddp_model.register_comm_hook(process_group, default_hooks.bf16_compress_hook)
        except TypeError:  # DDP allows it on NCCL (CUDA 11+, NCCL 2.10+) or XCCL only
            raise DistlabError(BF16_NEEDS_NCCL) from None
        return None
    if hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=process_group, matrix_approximation_rank=powersgd_rank,
                                            start_powerSGD_iter=powersgd_start_iter)
        ddp_model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return state
    raise DistlabError(f"dist.comm_hook={hook} is not one of {', '.join(COMM_HOOKS)}")
