"""The seeds' model sizes on one GPU: peak memory, step time and doctor's estimate per configuration (issue 30).

GRPO steps the 1.5B Qwen2.5 shape (seed 002) and SCoRe the 3B Llama-3.2 shape with its other models (seed 004),
both with random weights (``model.source=random:<shape>``), under combinations of the memory options. Each case is
its own ``distlab train`` process with a time limit; a failure, an out-of-memory or a time-out is a row of the
table, never the end of the script. ``--cap-gib 44.5`` runs a case under ``torch.cuda.set_per_process_memory_fraction``
(the seed's 44.5 GiB card on a larger one). Each row also holds ``distlab doctor --recipe``'s estimate for the
same overrides, and its error against the measured peak.

    python benchmarks/lm_shapes.py --only grpo --out $OUT
    python benchmarks/lm_shapes.py --only score --out $OUT
    python benchmarks/lm_shapes.py --smoke            # the plumbing on a CPU with the tiny model
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mem_options import _commit, _device  # the same header as the other memory tables (this folder is on sys.path)

GRPO = ["train", "grpo", "model.source=random:qwen2.5-1.5b", "model.prompt_mode=text", "prompts_per_step=8",
        "num_generations=8", "micro_batch_size=8", "sampling.max_completion_length=256", "task.train_size=64",
        "task.eval_size=8", "evaluation.before=false", "dist.precision=bf16", "models.reference.dtype=bf16",
        "beta=0.04", "lr=1e-6", "log.every=1", "log.progress=false", "ckpt.every=0", "ckpt.at_end=false", "sandbox.workers=8"]
GRPO_CASES = [
    ("baseline", []),
    ("activation_checkpointing=blocks", ["dist.activation_checkpointing=blocks"]),
    ("optim.state_dtype=bf16", ["optim.state_dtype=bf16"]),
    ("optim.state_dtype=int8", ["optim.state_dtype=int8"]),
    ("reference=cpu", ["models.reference.placement=cpu"]),
    ("reference=offload", ["models.reference.placement=offload"]),
    ("AC + int8 + reference=offload", ["dist.activation_checkpointing=blocks", "optim.state_dtype=int8",
                                       "models.reference.placement=offload"]),
    ("AC + int8 + reference=offload, cap 44.5 GiB", ["dist.activation_checkpointing=blocks",
                                                     "optim.state_dtype=int8", "models.reference.placement=offload",
                                                     "@cap"]),
    # the doctor's FSDP2 offload term, fitted to the SCoRe 3B row, checked on another shape (case 8)
    ("AC + FSDP2 CPU offload, reference=offload, cap 44.5 GiB", ["dist.activation_checkpointing=blocks",
                                                                 "models.reference.placement=offload",
                                                                 "dist.wrap=fsdp", "dist.cpu_offload=true", "@cap"]),
]
SCORE = ["train", "score", "model.source=random:llama-3.2-3b", "model.prompt_mode=text", "prompts_per_step=4",
         "num_generations=4", "micro_batch_size=4", "sampling.max_completion_length=128", "hint_max_tokens=32",
         "task.train_size=32", "task.eval_size=4", "evaluation.before=false", "dist.precision=bf16",
         "models.reference.dtype=bf16", "models.guidance.dtype=bf16", "guidance=frozen", "advantage=critic",
         "beta1=0.01", "lr=1e-6", "log.every=1", "log.progress=false", "ckpt.every=0", "ckpt.at_end=false", "sandbox.workers=8"]
SCORE_CASES = [
    ("all on the GPU", []),
    ("AC + int8", ["dist.activation_checkpointing=blocks", "optim.state_dtype=int8"]),
    ("AC + int8 + reference=offload", ["dist.activation_checkpointing=blocks", "optim.state_dtype=int8",
                                       "models.reference.placement=offload"]),
    ("budget, cap 44.5 GiB", ["dist.activation_checkpointing=blocks", "optim.state_dtype=int8",
                              "models.reference.placement=offload", "models.target_critic.placement=cpu", "@cap"]),
    ("budget + FSDP2 CPU offload, cap 44.5 GiB", ["dist.activation_checkpointing=blocks", "optim.state_dtype=int8",
                                                  "models.reference.placement=offload",
                                                  "models.target_critic.placement=cpu", "dist.wrap=fsdp",
                                                  "dist.cpu_offload=true", "@cap"]),
    ("budget + guidance on the CPU, cap 44.5 GiB", ["dist.activation_checkpointing=blocks", "optim.state_dtype=int8",
                                                    "models.reference.placement=offload",
                                                    "models.target_critic.placement=cpu",
                                                    "models.guidance.placement=cpu", "@cap"]),
    # the offload row with fp32 moments: on the host they cost host memory only, and int8's compiled step runs there
    ("budget + FSDP2 CPU offload, fp32 states, cap 44.5 GiB", ["dist.activation_checkpointing=blocks",
                                                              "models.reference.placement=offload",
                                                              "models.target_critic.placement=cpu", "dist.wrap=fsdp",
                                                              "dist.cpu_offload=true", "@cap"]),
]
LORA_CASES = [  # issue 49 item 3: adapters only (fp32 adapters on the bf16 frozen base) against full fine-tuning
    ("full fine-tuning", []),
    ("LoRA r=16", ["model.lora_r=16"]),
    ("LoRA r=64", ["model.lora_r=64"]),
]
PRECISION_CASES = [  # issue 30 item 1: the same GRPO step with bf16 and with fp16 autocast (loss scaling)
    ("bf16", ["models.policy.dtype=bf16"]),
    ("fp16 (loss scaling)", ["dist.precision=fp16", "models.policy.dtype=fp16", "models.reference.dtype=fp16"]),
]
SMOKE = ["model.source=tiny:llama-2l", "dist.precision=fp32", "sampling.max_completion_length=16",
         "sandbox.workers=2"]


def measure(run_dir: Path) -> dict:
    """Peak GPU memory (or the process's RSS on a CPU) and the steady step time from metrics.jsonl."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["split"] == "train"]
    out: dict = {"steps": train[-1]["step"] if train else 0}
    keys = sorted({k for r in train for k in r if k.startswith("peak_mem_gib_cuda")}) or ["peak_rss_gib"]
    out["peak_gib"] = {k.removeprefix("peak_mem_gib_"): max(r[k] for r in train if k in r) for k in keys}
    if len(train) >= 2 and train[-1]["step"] > train[0]["step"]:
        out["step_s"] = (train[-1]["time"] - train[0]["time"]) / (train[-1]["step"] - train[0]["step"])
    steady = train[1:] or train  # the first step holds the warm-up
    for key in ("generate_s", "ref_logprobs_s", "update_s"):  # where a step's time goes
        values = [r[key] for r in steady if key in r]
        if values:
            out[key] = sum(values) / len(values)
    for key in sorted({k for r in train for k in r if k.startswith("peak_gib_after/")}):  # per step: which phase
        out[key] = [round(r[key], 3) for r in train if key in r]                       # set the peak
    for key in ("grad_norm", "kl", "entropy", "amp/skipped_steps"):
        if train and key in train[-1]:
            out[key] = train[-1][key]
    return out


def estimate(args: list[str]) -> dict:
    """doctor's per-device totals (GiB) for the same overrides."""
    cmd = [sys.executable, "-m", "distlab.cli", "doctor", "--json", "--no-bandwidth", "--recipe", args[1],
           *[a for a in args[2:] if "=" in a and not a.startswith(("run.", "log."))]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    try:
        rows = json.loads(proc.stdout)["memory"]["per_device"]
    except (ValueError, KeyError, TypeError):
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]}
    return {r["device"].replace(":", ""): r["total"] / 2**30 for r in rows}


def estimate_as_gpu(args: list[str], gpu_gib: float = 139.8) -> dict:
    """The doctor's per-device totals (GiB) for ``args`` as on one GPU, computed here without one: the memory
    model is arithmetic on the config, so a CPU machine recomputes a GPU row's estimate at any commit."""
    from distlab.config import resolve_config
    from distlab.memory.plan import plan_devices
    from distlab.memory.estimate import recipe_specs
    from distlab.recipe import load_recipe

    recipe = load_recipe(args[1])
    overrides = [a for a in args[2:] if "=" in a and not a.startswith(("run.", "log.")) and a != "@cap"]
    specs = recipe_specs(recipe, resolve_config(recipe, [], overrides))
    plan = plan_devices(specs if isinstance(specs, list) else [specs], {0: int(gpu_gib * 2**30)}, 128 * 2**30, 1)
    return {r["device"].replace(":", ""): r["total"] / 2**30 for r in plan["per_device"]}


def re_estimate(path: Path) -> str:
    """Measured rows of an earlier ``lm_shapes.jsonl`` beside the doctor's estimate at this commit."""
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    by_suite: dict[str, list[dict]] = {}
    for r in rows:
        args = [a for a in r["command"].split() if not a.startswith("--gpus") and a != "1"]
        r["estimate_gib"] = estimate_as_gpu(args)
        by_suite.setdefault(r.get("suite", "?"), []).append(r)
    head = f"estimates recomputed at commit {_commit()} (measured rows from {path.name})"
    return head + "\n\n" + "\n\n".join(table(k, v) for k, v in by_suite.items()) + "\n"


def run_case(name: str, args: list[str], runs: Path, timeout: float, cap_gib: float) -> dict:
    run_name = "".join(c if c.isalnum() else "-" for c in name)[:60]
    capped = "@cap" in args
    args = [a for a in args if a != "@cap"]
    full = [*args, f"run.dir={runs}", f"run.name={run_name}", "run.resume=fresh"]
    if capped:  # one process, in this interpreter's child: the fraction applies to the whole run
        code = ("import sys, torch; torch.cuda.set_per_process_memory_fraction(%r / "
                "(torch.cuda.get_device_properties(0).total_memory / 2**30)); from distlab.cli import main; "
                "sys.exit(main(sys.argv[1:]))" % cap_gib)
        cmd = [sys.executable, "-c", code, *full]
    else:
        cmd = [sys.executable, "-m", "distlab.cli", *full]
    t0 = time.time()
    returncode, said = run_bounded(cmd, timeout)
    if returncode is None:  # where it was: the stacks the run printed when asked, else its last line
        status = f"timed out after {timeout:.0f} s; " + (where_stuck(said) or "last said: " + _last_line(said))
    else:
        status = "ok" if returncode == 0 else f"exit {returncode}: " + _last_line(said)
    row = {"case": name, "status": status, "wall_s": round(time.time() - t0, 1), "command": " ".join(full),
           "host_rss_gib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20}
    try:
        row.update(measure(runs / run_name))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        row["status"] += f" (no metrics: {type(exc).__name__})"
    row["estimate_gib"] = estimate(args)
    return row


def run_bounded(cmd: list[str], timeout: float, grace_s: float = 5.0) -> tuple[int | None, str]:
    """``(exit status or None on time-out, everything it printed)``. The case leads its own process group: at the
    time limit the group is asked for its stacks (SIGUSR2, which distlab ranks answer without stopping), then
    killed whole, so no child left holding the output pipe (a compile worker, a sandbox) can keep this script
    waiting past its own budget, as happened on 2026-11-26 with the SCoRe 3B offload case."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
            _signal_group(proc.pid, signal.SIGUSR2)
            time.sleep(grace_s)
        _signal_group(proc.pid, signal.SIGKILL)  # also whatever a finished case left behind
        proc.wait()
        out.seek(0)
        return code, out.read()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def where_stuck(said: str, frames: int = 3) -> str:
    """The innermost distlab frames of the first dumped thread that is inside distlab, innermost first."""
    for block in said.split("most recent call first")[1:]:
        found = re.findall(r'File "[^"]*/(distlab/[^"]+)", line (\d+) in (\S+)', block.split("\n\n")[0])
        if found:
            return "stuck in " + " < ".join(f"{fn} ({path}:{line})" for path, line, fn in found[:frames])
    return ""


def parse_pick(text: str, sizes: dict[str, int]) -> dict[str, list[int]]:
    """``--pick`` as suite -> case indices, refused in one line before anything runs or is written."""
    picks: dict[str, list[int]] = {}
    for part in filter(None, text.split(";")):
        key, _, indices = part.partition(":")
        try:
            picks[key] = [int(i) for i in indices.split(",")]
        except ValueError:
            picks[key] = []
        if key not in sizes or not picks[key] or not all(0 <= i < sizes[key] for i in picks[key]):
            raise SystemExit(f"lm_shapes.py: --pick '{part}': give SUITE:I,J;... with SUITE one of "
                             f"{', '.join(f'{k} (cases 0-{n - 1})' for k, n in sizes.items())}")
    return picks


def _last_line(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip() and "Warning" not in x]
    return lines[-1][:200] if lines else "no output"


def _split(row: dict) -> str:
    parts = [row.get(k) for k in ("generate_s", "ref_logprobs_s", "update_s")]
    return " / ".join(f"{x:.2f}" for x in parts) if all(isinstance(x, float) for x in parts) else ""


def table(title: str, rows: list[dict]) -> str:
    out = [f"### {title}", "", "| configuration | peak GiB (measured) | doctor's estimate GiB | error | step s | "
           "split: generate / ref / update s | host RSS GiB (max so far) | status |",
           "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
    for r in rows:
        peak = r.get("peak_gib") or {}
        dev = next(iter(peak), None)
        measured = peak.get(dev) if dev else None
        est = (r.get("estimate_gib") or {}).get(dev or "cuda0")
        err = f"{(est - measured) / measured:+.0%}" if measured and isinstance(est, float) else ""
        cells = [r["case"], f"{measured:.2f}" if measured else "", f"{est:.2f}" if isinstance(est, float) else "",
                 err, f"{r['step_s']:.2f}" if r.get("step_s") else "", _split(r), f"{r['host_rss_gib']:.1f}",
                 r["status"]]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated suites: grpo, score, precision, lora (default: all)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--extra", default="", help="overrides added to every case, e.g. sampling.backend=hf")
    p.add_argument("--timeout", type=float, default=150.0, help="seconds per case")
    p.add_argument("--cap-gib", type=float, default=44.5)
    p.add_argument("--runs", default="runs/lm-shapes")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--pick", default="", help="grpo:0,1,7;score:0,3 = only these cases (indices) of each suite")
    p.add_argument("--smoke", action="store_true", help="tiny model on the CPU, two cases: checks this script")
    p.add_argument("--re-estimate", nargs="+", default=[], metavar="JSONL",
                   help="no runs: print earlier results beside the doctor's estimate at this commit")
    a = p.parse_args()
    if a.re_estimate:
        print("\n".join(re_estimate(Path(f)) for f in a.re_estimate))
        return 0
    gpu = [] if a.smoke else ["--gpus", "1"]
    suites = {"grpo": (GRPO, GRPO_CASES, "GRPO step, Qwen2.5-1.5B shape (random weights), 64 completions x 256"),
              "score": (SCORE, SCORE_CASES, "SCoRe step, Llama-3.2-3B shape (random weights), policy + reference + "
                                            "frozen guidance + critics, 16 episodes x 128"),
              "precision": (GRPO, PRECISION_CASES, "GRPO step, Qwen2.5-1.5B shape (random weights): bf16 vs fp16"),
              "lora": (GRPO, LORA_CASES, "GRPO step, Qwen2.5-1.5B shape (random weights): LoRA vs full fine-tuning")}
    picks = parse_pick(a.pick, {key: len(cases) for key, (_, cases, _) in suites.items()})
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sections, raw = [], {}
    for key, (base, cases, title) in suites.items():
        if a.only and key not in a.only.split(","):
            continue
        if key in picks:
            cases = [cases[i] for i in picks[key]]
        cases = cases[:2] if a.smoke else cases
        args = base + [f"steps={a.steps}"] + a.extra.split() + (SMOKE if a.smoke else []) + gpu
        rows = []
        for name, extra in cases:
            rows.append(run_case(name, args + extra, Path(a.runs) / key, a.timeout, a.cap_gib))
            print(json.dumps(rows[-1], default=str), flush=True)
            with open(out / "lm_shapes.jsonl", "a") as fh:  # kept even if a time limit ends the script
                fh.write(json.dumps({"suite": key, **rows[-1]}, default=str) + "\n")
        raw[key] = rows
        sections.append(table(title, rows))
    head = f"date -u: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\ncommit: {_commit()}\ndevice: {_device()}"
    text = head + "\n\n" + "\n\n".join(sections) + "\n"
    print(text)
    (out / "lm_shapes.md").write_text(text)
    (out / "lm_shapes.json").write_text(json.dumps(raw, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
