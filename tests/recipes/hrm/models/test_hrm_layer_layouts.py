"""The faster formulations of issue 19 compute TRM's and HRM's published layers, values and gradients:

* SwiGLU as two matmuls on the halves of ``gate_up_proj`` == one matmul, then split into gate and up;
* the sequence mixer positions-first, ``W @ x`` on (S, B, D) with the norm over dim 0, == TRM's transposed
  form: ``x.transpose(1, 2)``, a feature-wise SwiGLU over positions, the norm over the last dim, transposed back.

fp32, so any difference beyond summation order (a swapped half, a wrong axis for the norm) shows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from distlab.recipes.hrm.models.layers import PostNormBlock, SwiGLU, rms_norm

TOL = dict(rtol=1e-4, atol=1e-5)  # as the compiled-vs-eager test: fp32 sums in another order


def _textbook_swiglu(mlp: SwiGLU, x: torch.Tensor) -> torch.Tensor:
    gate, up = F.linear(x, mlp.gate_up_proj.weight).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, mlp.down_proj.weight)


def _grads(module: torch.nn.Module, x: torch.Tensor, fn) -> tuple[torch.Tensor, list[torch.Tensor]]:
    x = x.detach().clone().requires_grad_(True)
    out = fn(x)
    (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
    grads = [p.grad.clone() for p in module.parameters()]
    module.zero_grad(set_to_none=True)
    return out.detach(), [x.grad] + grads


def test_split_swiglu_equals_one_matmul_then_split() -> None:
    torch.manual_seed(0)
    mlp = SwiGLU(48, 4.0)
    x = torch.randn(3, 7, 48)
    out, grads = _grads(mlp, x, mlp)
    ref, ref_grads = _grads(mlp, x, lambda t: _textbook_swiglu(mlp, t))
    torch.testing.assert_close(out, ref, **TOL)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, **TOL)


def test_positions_first_mixer_equals_transposed_form() -> None:
    torch.manual_seed(0)
    seq, batch, dim, eps = 13, 4, 32, 1e-5
    block = PostNormBlock(dim, num_heads=4, expansion=4.0, eps=eps, seq_mix_len=seq)
    x = torch.randn(batch, seq, dim)

    def textbook(t: torch.Tensor) -> torch.Tensor:  # TRM's layout: (B, S, D) throughout
        tt = t.transpose(1, 2)
        t = rms_norm(tt + _textbook_swiglu(block.mixer, tt), eps).transpose(1, 2)
        return rms_norm(t + _textbook_swiglu(block.mlp, t), eps)

    out, grads = _grads(block, x, lambda t: block(t.transpose(0, 1), None).transpose(0, 1))
    ref, ref_grads = _grads(block, x, textbook)
    torch.testing.assert_close(out, ref, **TOL)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, **TOL)
    # the norm is over positions: each (example, feature) column has unit RMS before the feature MLP
    mixed = rms_norm(x.transpose(0, 1) + block.mixer.mix_leading(x.transpose(0, 1)), eps, dim=0)
    torch.testing.assert_close(mixed.square().mean(0), torch.ones(batch, dim), rtol=1e-4, atol=1e-4)
