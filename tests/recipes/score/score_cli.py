"""Running the real ``distlab`` command for the score tests (subprocesses, as a user would)."""

from __future__ import annotations

import json
from pathlib import Path

from clitools import run_cli, summary  # noqa: F401  (the score tests import both from here)

# small enough for two busy cores, with every model and every piece of state in play
TINY = ["model.source=tiny:llama-2l", "model.prompt_mode=text", "prompts_per_step=2", "num_generations=2",
        "micro_batch_size=4", "sampling.max_completion_length=16", "hint_max_tokens=6", "task.train_size=16",
        "task.eval_size=2", "evaluation.before=false", "log.every=1", "log.progress=false", "lr=1e-3",
        "guidance_lr=1e-3", "beta1=0.05", "sft_steps=2", "sft_pack=2", "sft_batch_size=4"]
EVERYTHING = ["guidance=trained", "advantage=critic", "hint_sees_execution=true", "stage_schedule=I:1,II:1"]
ON_CPU = ["placement.reference=cpu", "placement.target_critic=cpu", "placement.guidance=cpu", "placement.value=cpu"]


def rows(run_dir: Path, split: str = "train") -> list[dict]:
    out = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # wall times and process memory differ between runs; everything else must not
    return [{k: v for k, v in r.items() if k != "time" and not k.endswith("_s") and not k.startswith("peak_")}
            for r in out if r["split"] == split]
