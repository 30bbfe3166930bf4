import sys, time, torch
sys.path.insert(0, "src"); sys.path.insert(0, "tests")
from distlab.recipes.hrm.models import build_model
from distlab.recipes.hrm.optim import build_optimizers
from distlab.recipes.hrm.flops import flops_per_example
print(torch.__version__, torch.cuda.get_device_name())
md = {"vocab_size": 11, "seq_len": 81, "num_puzzle_identifiers": 1000}
for name in ["hrm", "trm"]:
    cfg = dict(name=name, act="q_learning" if name == "hrm" else "halt_only", mlp_t=(name == "trm"),
               L_layers=4 if name == "hrm" else 2, H_cycles=2 if name == "hrm" else 3, L_cycles=2 if name == "hrm" else 6)
    torch.manual_seed(0)
    model = build_model(cfg, md).cuda().train()
    opts = build_optimizers(model, "adamw", lr=1e-4)
    B = 384
    batch = {"inputs": torch.randint(0, 11, (B, 81), device="cuda"), "labels": torch.randint(0, 11, (B, 81), device="cuda"),
             "puzzle_identifiers": torch.randint(0, 1000, (B,), device="cuda")}
    cm = torch.compile(model)
    carry = cm.initial_carry(batch) if hasattr(cm, "initial_carry") else model.initial_carry(batch)
    for i in range(12):
        if i == 4: torch.cuda.synchronize(); t = time.time()
        carry, loss, metrics, out, _ = cm(carry, batch)
        (loss / B).backward()
        for o in opts: o.step(); o.zero_grad()
    torch.cuda.synchronize(); dt = (time.time() - t) / 8
    f = flops_per_example(cfg, md) * B / dt
    print(name, "step %.1f ms" % (dt * 1e3), "TFLOP/s %.1f" % (f / 1e12), "loss", loss.item(), "count", metrics["count"].item())
