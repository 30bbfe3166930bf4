"""Human output of a doctor report: rich tables and panels, problems first in colour.

Rendering only reads the report dict that ``--json`` prints, so both views always agree.
"""

from __future__ import annotations

import shutil
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

GIB = 1024**3
STYLE = {"error": "bold red", "warn": "yellow", "info": "cyan"}


def _gib(n: int | float | None) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def _kv_table(rows: dict[str, Any]) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows.items():
        table.add_row(key, "-" if value is None else str(value))
    return table


def _versions(report: dict[str, Any]) -> Panel:
    return Panel(_kv_table(report["versions"]), title="versions", expand=False)


def _host(report: dict[str, Any]) -> Panel:
    h = report["host"]
    rows = {"host": h["hostname"], "cpu cores": h["cpu_count"], "torch threads": h["torch_threads"],
            "RAM available": f"{_gib(h['ram_available_bytes'])} of {_gib(h['ram_total_bytes'])}",
            "/dev/shm": _gib(h["shm_bytes"]), "InfiniBand": ", ".join(h["infiniband"]) or "none"}
    return Panel(_kv_table(rows), title="host", expand=False)


def _gpus(report: dict[str, Any]) -> Panel:
    gpus = report["gpus"]
    if not gpus:
        return Panel("no GPU visible to torch", title="GPUs", expand=False)
    table = Table("#", "name", "cc", "SMs", "free / total", "bf16", "tf32")
    for g in gpus:
        table.add_row(str(g["index"]), g["name"], g["capability"], str(g["sm_count"]),
                      f"{_gib(g['free_bytes'])} / {_gib(g['total_bytes'])}",
                      "yes" if g["bf16"] else "no", "yes" if g["tf32"] else "no")
    return Panel(table, title="GPUs", expand=False)


def _topology(report: dict[str, Any]) -> Panel | None:
    topo = report["topology"]
    parts: list[Any] = []
    p2p = topo["p2p"]
    if len(p2p) > 1:
        table = Table("P2P", *[str(j) for j in range(len(p2p))])
        for i, row in enumerate(p2p):
            table.add_row(str(i), *["-" if i == j else ("yes" if ok else "NO") for j, ok in enumerate(row)])
        parts.append(table)
    if topo["nvidia_smi_topo"]:
        parts.append(Text(topo["nvidia_smi_topo"]))
    return Panel(Group(*parts), title="topology", expand=False) if parts else None


def _bandwidth(report: dict[str, Any]) -> Panel:
    bw = report["bandwidth"]
    title = f"all-reduce bandwidth ({bw['backend']}, {bw['world_size']} ranks)"
    if bw["status"] != "ok":
        return Panel(f"{bw['status']}: {bw['detail']}", title=title, expand=False)
    table = Table("size", "time/iter", "algbw GB/s", "busbw GB/s")
    for r in bw["results"]:
        table.add_row(f"{r['size_bytes'] // 2**20} MiB", f"{r['seconds'] * 1e3:.2f} ms",
                      f"{r['algbw_gbps']:.2f}", f"{r['busbw_gbps']:.2f}")
    return Panel(table, title=title, expand=False)


def _memory(report: dict[str, Any]) -> Panel | None:
    plan = report["memory"]
    if not plan:
        return None
    if "per_device" in plan:
        return _placement(plan)
    table = Table("per rank", "DDP", f"FSDP / {plan['world_size']}")
    for key in ("params", "grads", "optimizer", "activations", "total"):
        table.add_row(key, _gib(plan["ddp"][key]), _gib(plan["fsdp"][key]))
    table.add_row("usable", _gib(plan["usable_bytes"]), _gib(plan["usable_bytes"]))
    lines = [Text(plan["recommendation"])]
    if plan.get("largest"):
        big = plan["largest"]
        lines.append(Text(f"largest term (DDP): {big['term']}, {_gib(big['bytes'])}; shrink it with "
                          f"{big['shrink_with']}"))
    return Panel(Group(table, *lines),
                 title=f"memory estimate: {plan['model']['name']} on {plan['device']}", expand=False)


def _placement(plan: dict[str, Any]) -> Panel:
    """One row per device of a several-model placement (rank 0's device group)."""
    table = Table("device", "models", "params", "grads", "optimizer", "activations", "total", "free", "fits")
    for row in plan["per_device"]:
        free = "-" if row["free_bytes"] is None else _gib(row["free_bytes"])
        fits = {True: "yes", False: "NO", None: "not here"}[row["fits"]]
        table.add_row(row["device"], ", ".join(row["models"]), *(_gib(row[k]) for k in
                      ("params", "grads", "optimizer", "activations", "total")), free, fits)
    return Panel(table, title=f"memory estimate per device ({plan['verdict'].replace('_', ' ')})", expand=False)


def _speedup(report: dict[str, Any]) -> Panel:
    sp = report["speedup"]
    if not sp["measured"]:
        return Panel(sp["note"], title="scaling", expand=False)
    table = Table("GPUs", "throughput", "speedup", "efficiency", "kind")
    for r in sp["measured"] + sp["estimates"]:
        thr = f"{r['throughput']:.4g}" if "throughput" in r else "-"
        style = None if r["kind"] == "measured" else "dim italic"
        table.add_row(str(r["gpus"]), thr, f"{r['speedup']:.2f}x", f"{r['efficiency']:.0%}", r["kind"], style=style)
    title = f"scaling: {sp['recipe']} on {sp['device']} ({sp['source']})"
    return Panel(Group(table, Text(sp["note"], style="dim")), title=title, expand=False)


def _findings(report: dict[str, Any]) -> Panel:
    if not report["findings"]:
        return Panel("no problems found", title="findings", expand=False)
    table = Table("severity", "check", "finding")
    for f in report["findings"]:
        table.add_row(Text(f["severity"], style=STYLE[f["severity"]]), f["code"], f["message"])
    return Panel(table, title="findings", expand=False)


def _recommendations(report: dict[str, Any]) -> Panel:
    body = "\n".join(f"{i}. {r}" for i, r in enumerate(report["recommendations"], 1)) or "nothing to change"
    return Panel(body, title="recommendations", expand=False)


def render(report: dict[str, Any], console: Console | None = None) -> None:
    """Print every section of ``report``; sections with nothing to say are left out."""
    # piped (| less, > file) rich would cut every table to 80 columns: a wide default unless COLUMNS says otherwise
    console = console or Console(width=shutil.get_terminal_size((140, 24)).columns)
    sections = [_versions(report), _host(report), _gpus(report), _topology(report)]
    if report["bandwidth"]["status"] != "skipped":
        sections.append(_bandwidth(report))
    sections += [_memory(report), _speedup(report), _findings(report), _recommendations(report)]
    for section in sections:
        if section is not None:
            console.print(section)
    code = report["exit_code"]
    warned = any(f["severity"] == "warn" for f in report["findings"])
    verdict = ("[red]errors found[/]" if code else "[yellow]no errors, see the warnings above[/]" if warned
               else "[green]all checks passed[/]")
    console.print(f"doctor: {verdict} (exit {code})")
