"""Check and time TRM's fused sequence-mixer kernel on a GPU against the PyTorch path it replaces.

    python3 benchmarks/fused_mixer_check.py            # trm-sudoku's shape: 97 positions, batch 768, width 512

Prints, as JSON lines: the largest difference of the fused sub-block and of the bf16 PyTorch path from a float32
reference of the same bf16 inputs; the same for a whole TRM segment's logits under no_grad (bf16 fused and PyTorch
against float32 PyTorch); and the time of one sub-block, fused and compiled PyTorch (triton.testing.do_bench, median).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import triton.testing
import yaml

from distlab.recipes.hrm.models import fused_mixer
from distlab.recipes.hrm.models.build import build_model
from distlab.recipes.hrm.models.fused_mixer import seq_mixer_block
from distlab.recipes.hrm.models.layers import SwiGLU, rms_norm

ROOT = Path(__file__).resolve().parents[1]


def block_check(positions: int, batch: int, width: int) -> dict:
    torch.manual_seed(0)
    mixer = SwiGLU(positions, 4.0).cuda()
    x = torch.randn(positions, batch, width, device="cuda").bfloat16()
    weights = mixer.weights(torch.bfloat16)

    def torch_path(x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x + mixer.mix_leading(x), 1e-5, dim=0)

    with torch.no_grad():
        ref = rms_norm(x.float() + mixer.mix_leading(x.float()), 1e-5, dim=0)
        fused = seq_mixer_block(x, *weights, 1e-5)
        eager = torch_path(x)
        compiled = torch.compile(torch_path)
        compiled(x)
        ms_fused = triton.testing.do_bench(lambda: seq_mixer_block(x, *weights, 1e-5))
        ms_compiled = triton.testing.do_bench(lambda: compiled(x))
    moved = 2 * x.numel() * x.element_size()
    return {"check": "sub-block", "shape": [positions, batch, width],
            "max_diff_fused": (fused.float() - ref).abs().max().item(),
            "max_diff_torch_bf16": (eager.float() - ref).abs().max().item(),
            "mean_diff_fused": (fused.float() - ref).abs().mean().item(),
            "mean_diff_torch_bf16": (eager.float() - ref).abs().mean().item(),
            "ms_fused": round(ms_fused, 4), "ms_torch_compiled": round(ms_compiled, 4),
            "fused_tflops": round(2 * 3 * positions * mixer.down_proj.weight.shape[1] * batch * width / ms_fused / 1e9),
            "fused_gb_per_s_x_in_out": round(moved / ms_fused / 1e6),
            "fused_config": str(getattr(fused_mixer._mixer_block_kernel, "best_config", ""))}


def segment(preset: str, batch: int, dtype: str, fused: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits and Q of one no-grad segment from reset states, for a freshly initialised model (seed 0)."""
    cfg = yaml.safe_load((ROOT / "src/distlab/recipes/hrm/presets" / f"{preset}.yaml").read_text())
    cfg["arch"].update(forward_dtype=dtype, fused_mixer=fused)
    torch.manual_seed(0)
    model = build_model(cfg["arch"], {"vocab_size": 11, "seq_len": 81, "num_puzzle_identifiers": 1}).cuda().eval()
    inner = model.model.inner
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randint(1, 11, (batch, 81), device="cuda", generator=gen)
    ids = torch.zeros(batch, dtype=torch.long, device="cuda")
    data = {"inputs": x, "labels": x.clone(), "puzzle_identifiers": ids}
    with torch.no_grad():
        reset = torch.ones(batch, dtype=torch.bool, device="cuda")
        carry = inner.reset_carry(reset, inner.empty_carry(batch, x.device))
        _, logits, q_halt, _ = inner(carry, data)
    return logits.float(), q_halt.float()


def model_check(preset: str, batch: int) -> dict:
    ref, _ = segment(preset, batch, "float32", False)
    row = {"check": f"{preset}: one no-grad segment (T x (n+1) passes), bf16 against float32"}
    for name, fused in (("fused", True), ("torch", False)):
        logits, _ = segment(preset, batch, "bfloat16", fused)
        row[f"max_logit_diff_{name}"] = (logits - ref).abs().max().item()
        row[f"mean_logit_diff_{name}"] = (logits - ref).abs().mean().item()
        row[f"argmax_agreement_{name}"] = (logits.argmax(-1) == ref.argmax(-1)).float().mean().item()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=768)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--positions", type=int, default=97)
    a = ap.parse_args()
    print(json.dumps(block_check(a.positions, a.batch, a.width)), flush=True)
    print(json.dumps(model_check("trm-sudoku", 256)), flush=True)


if __name__ == "__main__":
    main()
