"""Cases for test_fused_mixer.py, run in a child process under Triton's CPU interpreter (TRITON_INTERPRET=1 must be
set before the kernel is defined, so not in the pytest process). Prints one JSON object of measured differences and
counts; the test asserts on them. float32 throughout: the interpreter's bf16 ``tl.dot`` is not exact."""

from __future__ import annotations

import json

import torch

from distlab.recipes.hrm.models import fused_mixer
from distlab.recipes.hrm.models.layers import PostNormBlock, SwiGLU, rms_norm

from .tiny import make_batch, tiny_model

CALLS = {"n": 0}
_kernel = fused_mixer.seq_mixer_block


def _counted(*args, **kwargs):
    CALLS["n"] += 1
    return _kernel(*args, **kwargs)


def block_diff(positions: int, batch: int, width: int) -> float:
    torch.manual_seed(positions)
    mixer = SwiGLU(positions, 4.0)
    x = torch.randn(positions, batch, width)
    with torch.no_grad():
        ref = rms_norm(x + mixer.mix_leading(x), 1e-5, dim=0)
        out = _kernel(x, *mixer.weights(x.dtype), 1e-5)
    return (out - ref).abs().max().item()


def block_dispatch() -> dict:
    torch.manual_seed(0)
    block = PostNormBlock(24, 2, 4.0, 1e-5, seq_mix_len=19, fused_mixer=True)
    x = torch.randn(19, 3, 24)
    CALLS["n"] = 0
    with torch.no_grad():
        fused = block(x, None)
    no_grad_calls = CALLS["n"]
    with_grad = block(x, None)  # gradients wanted: the PyTorch path, whatever the flag
    grad_calls = CALLS["n"] - no_grad_calls
    block.fused_mixer = False
    with torch.no_grad():
        plain = block(x, None)
    return {"diff": (fused - plain).abs().max().item(), "no_grad_calls": no_grad_calls, "grad_calls": grad_calls,
            "grad_path_has_grad_fn": with_grad.grad_fn is not None,
            "grad_path_diff": (with_grad.detach() - plain).abs().max().item()}


def trm_segment() -> dict:
    outs, calls = {}, {}
    for fused in (True, False):
        model = tiny_model("trm", mlp_t=True, pos_encodings="none", L_layers=2, H_cycles=3, L_cycles=2,
                           act="halt_only", fused_mixer=fused)
        batch = make_batch()
        CALLS["n"] = 0
        carry = model.initial_carry(batch)
        model(carry, batch)  # a training forward: only its first T-1 recursions are without gradients
        with torch.no_grad():
            outs[fused] = model.model.inner(carry.inner, batch)[1]
        calls[fused] = CALLS["n"]
    return {"logit_diff": (outs[True] - outs[False]).abs().max().item(), "calls_fused": calls[True],
            "calls_plain": calls[False]}


def bad_weights() -> str:
    try:
        _kernel(torch.randn(5, 4), torch.randn(256, 5), torch.randn(256, 5), torch.randn(5, 128), 1e-5)
    except ValueError as err:
        return str(err)
    return ""


def main() -> None:
    fused_mixer.seq_mixer_block = _counted
    print(json.dumps({"available": fused_mixer.available(torch.empty(1)),
                      "diff_padded": block_diff(23, 3, 10), "diff_pow2": block_diff(16, 2, 8),
                      "dispatch": block_dispatch(), "trm": trm_segment(), "bad_weights": bad_weights()}))


if __name__ == "__main__":
    main()
