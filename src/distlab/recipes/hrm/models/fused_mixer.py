"""TRM's sequence-mixer sub-block as one Triton kernel, for the forward passes that keep no activations.

With ``mlp_t`` the mixer is a SwiGLU over about 100 positions with a 512-wide intermediate, so its matmuls have an
inner dimension near 100 and are bound by memory traffic: the gate and up outputs (five times the size of the
activations) are written, read back by the gating, written again and read by the down projection, and the
residual norm over positions reads the result once more. All positions of one column (an example's feature) fit in
one program, so the whole sub-block, ``rms_norm(x + W_d (silu(W_g x) * W_u x), over positions)``, can run with the
intermediate kept on chip: x is read once and the result written once (TRM's training step 10% shorter on an H200;
docs/benchmarks.md, issue 19). TRM's first T-1 recursions and evaluation run under ``torch.no_grad``, which is where
the block uses it (``PostNormBlock``); with gradients the PyTorch path runs.

The sums are the same; only the roundings differ (the gate and up outputs stay float32 before the gating, as
Inductor's fusions already keep other intermediates).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the PyTorch path is used
    triton = None

_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


MAX_POSITIONS = 128  # one program holds (columns x padded positions) in float32 registers; measured at 97 (Sudoku)


def available(x: torch.Tensor) -> bool:
    """Whether the fused kernel can run on positions-first ``x``: on CUDA with Triton (or Triton's CPU interpreter),
    and for at most ``MAX_POSITIONS`` positions; longer sequences (a 30x30 maze has 900) take the PyTorch path."""
    return triton is not None and (x.is_cuda or _INTERPRETED) and x.shape[0] <= MAX_POSITIONS


def supported(device: torch.device) -> bool:
    """Whether a model on CUDA ``device`` may use the kernel: Triton's bf16 tensor-core dot needs an Ampere or newer
    GPU. Checked once when the model is built (``recipes/hrm/train.py``), outside anything ``torch.compile`` traces."""
    return torch.cuda.get_device_capability(device)[0] >= 8


if triton is not None:

    def _configs() -> list[triton.Config]:
        if _INTERPRETED:  # the CPU interpreter in tests: one configuration, nothing to time
            return [triton.Config({"BLOCK_N": 16, "BLOCK_I": 16})]
        return [triton.Config({"BLOCK_N": n, "BLOCK_I": i}, num_warps=w, num_stages=s)
                for n, i, w, s in ((64, 64, 4, 3), (64, 64, 4, 4), (128, 64, 8, 2), (128, 64, 8, 3),
                                   (128, 64, 8, 4), (128, 32, 8, 3), (128, 32, 4, 3), (128, 128, 8, 2),
                                   (64, 128, 4, 2), (256, 64, 8, 3), (128, 64, 16, 3), (256, 64, 16, 3))]

    @triton.autotune(configs=_configs(), key=["S", "I"])
    @triton.jit
    def _mixer_block_kernel(x_ptr, gate_t_ptr, up_t_ptr, down_t_ptr, out_ptr, S, N, I, eps,
                            BLOCK_S: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_I: tl.constexpr):
        # Laid out as attention's forward: columns are the rows of every matmul (the large dimension), the gated
        # intermediate stays in registers as the left operand of the down projection, and the (columns,
        # positions) accumulator holds the whole normalised dimension. The weights come transposed and padded to
        # BLOCK_S positions, so their loads need no mask.
        cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        pos = tl.arange(0, BLOCK_S)
        tile = cols[:, None] + pos[None, :].to(tl.int64) * N  # (columns, positions) of the (S, N) input
        tile_ok = (cols[:, None] < N) & (pos[None, :] < S)
        x = tl.load(x_ptr + tile, mask=tile_ok, other=0.0)  # padded positions are 0 and stay 0
        acc = tl.zeros((BLOCK_N, BLOCK_S), dtype=tl.float32)
        for start in range(0, I, BLOCK_I):
            inner = start + tl.arange(0, BLOCK_I)
            gate = tl.dot(x, tl.load(gate_t_ptr + pos[:, None] * I + inner[None, :]))
            up = tl.dot(x, tl.load(up_t_ptr + pos[:, None] * I + inner[None, :]))
            hidden = (gate * tl.sigmoid(gate) * up).to(x.dtype)
            acc = tl.dot(hidden, tl.load(down_t_ptr + inner[:, None] * BLOCK_S + pos[None, :]), acc)
        y = acc + x.to(tl.float32)
        scale = tl.rsqrt(tl.sum(y * y, axis=1) / S + eps)
        tl.store(out_ptr + tile, (y * scale[:, None]).to(out_ptr.dtype.element_ty), mask=tile_ok)

    @torch.library.triton_op("distlab::seq_mixer_block", mutates_args=())
    def _seq_mixer_block(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor,
                         eps: float) -> torch.Tensor:
        positions, inner = x.shape[0], down.shape[1]
        padded = max(16, triton.next_power_of_2(positions))
        gate_t, up_t = (F.pad(w, (0, padded - positions)).T.contiguous() for w in (gate, up))
        down_t = F.pad(down, (0, 0, 0, padded - positions)).T.contiguous()
        flat = x.reshape(positions, -1)
        out = torch.empty_like(flat)
        columns = flat.shape[1]

        def grid(meta: dict) -> tuple[int]:
            return (triton.cdiv(columns, meta["BLOCK_N"]),)

        torch.library.wrap_triton(_mixer_block_kernel)[grid](
            flat, gate_t, up_t, down_t, out, positions, columns, inner, eps, BLOCK_S=padded)
        return out.view(x.shape)


def seq_mixer_block(x: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor,
                    eps: float) -> torch.Tensor:
    """``rms_norm(x + down @ (silu(gate @ x) * (up @ x)), eps, dim=0)`` for positions-first ``x`` (S, ...).

    ``gate`` and ``up`` are (I, S), ``down`` is (S, I), all in ``x``'s dtype (``SwiGLU.weights``). No autograd: call
    it only where no gradient is needed.
    """
    if triton is None:
        raise RuntimeError("the fused sequence mixer needs Triton; use the PyTorch path (arch.fused_mixer=false)")
    positions, inner = x.shape[0], down.shape[1]
    if gate.shape != (inner, positions) or up.shape != gate.shape or down.shape != (positions, inner):
        raise ValueError(f"mixer weights {tuple(gate.shape)}, {tuple(up.shape)} and {tuple(down.shape)} do not fit "
                         f"{positions} positions")
    if inner % 128:  # the kernel steps through the intermediate in unmasked blocks of up to 128
        raise ValueError(f"the fused sequence mixer needs an intermediate width divisible by 128, got {inner}")
    return _seq_mixer_block(x.contiguous(), gate.contiguous(), up.contiguous(), down.contiguous(), eps)
