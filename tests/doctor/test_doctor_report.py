"""The whole doctor on this machine: JSON shape, a real gloo all-reduce, findings from the environment."""

from __future__ import annotations

import argparse
import json
import socket

import pytest
from rich.console import Console

from distlab.doctor import REPORT_KEYS, ModelSpec, collect_report, register, run_doctor
from distlab.doctor.bandwidth import bus_bandwidth, run_allreduce, sizes_up_to
from distlab.doctor.render import render
from distlab.errors import DistlabError

MIB = 2**20


@pytest.fixture(scope="module")
def report() -> dict:
    """One full run with the bandwidth test (the expensive part), shared by the shape checks."""
    model = ModelSpec("hrm", 27_000_000, activation_bytes_per_example=1_000_000, batch_per_device=16)
    return collect_report(bandwidth=True, model=model, procs=2, bandwidth_mb=2, timeout_s=60)


def test_json_has_stable_keys_and_round_trips(report) -> None:
    assert tuple(report) == REPORT_KEYS
    assert json.loads(json.dumps(report)) == report
    assert {"python", "torch", "torch_git", "cuda_runtime", "cudnn", "nccl", "driver", "gloo_available",
            "distlab"} <= set(report["versions"])
    assert report["versions"]["gloo_available"] is True
    for f in report["findings"]:
        assert f["severity"] in ("error", "warn", "info") and f["code"] and f["message"]


def test_gloo_bandwidth_is_measured_and_plausible(report) -> None:
    bw = report["bandwidth"]
    if report["gpus"]:
        pytest.skip("GPU machine: the bandwidth test ran over NCCL")
    assert (bw["backend"], bw["world_size"], bw["status"]) == ("gloo", 2, "ok")
    assert [r["size_bytes"] for r in bw["results"]] == [1 * MIB, 2 * MIB]
    for r in bw["results"]:
        assert r["correct"] and r["seconds"] > 0
        assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / r["seconds"] / 1e9)
        # gloo over loopback moves real bytes through memory: slower than 10 MB/s means the test measured
        # something else (a stall, a wrong size), faster than 50 GB/s exceeds what one host's memory delivers
        assert 1e-2 < r["algbw_gbps"] < 50
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (2 - 1) / 2)


def test_memory_section_compares_against_ram(report) -> None:
    mem = report["memory"]
    assert mem["ddp"]["total"] == 27_000_000 * 16 + 16 * 1_000_000
    if not report["gpus"]:
        assert mem["capacity_bytes"] == report["host"]["ram_available_bytes"] // 2
        assert mem["verdict"] == "fits"


def test_exit_code_follows_worst_severity(report) -> None:
    severities = {f["severity"] for f in report["findings"]}
    expected = 3 if "error" in severities else 0  # warnings alone do not fail the command
    assert report["exit_code"] == expected


def test_rich_render_shows_every_section(report) -> None:
    console = Console(record=True, width=140)
    render(report, console)
    text = console.export_text()
    for title in ("versions", "host", "GPUs", "all-reduce bandwidth", "memory estimate", "scaling", "findings",
                  "recommendations"):
        assert title in text
    assert f"(exit {report['exit_code']})" in text
    if report["memory"] and "largest" in report["memory"]:
        assert f"largest term (DDP): {report['memory']['largest']['term']}" in " ".join(text.split())


def test_piped_render_is_not_cut_to_80_columns(report, capsys, monkeypatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    render(report)  # no console given: the one the command uses, here writing to a pipe
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) > 80


def test_busy_port_and_env_findings_reach_the_json(monkeypatch, capsys) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(port))
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
        code = run_doctor(json_out=True, bandwidth=False)
    out = json.loads(capsys.readouterr().out)
    codes = {f["code"]: f for f in out["findings"]}
    assert {"master_port_busy", "cuda_visible_devices_empty", "nccl_p2p_disabled"} <= set(codes)
    assert str(port) in codes["master_port_busy"]["message"]
    assert out["bandwidth"]["status"] == "skipped" and out["bandwidth"]["results"] == []
    assert code == out["exit_code"] == 3
    assert codes["master_port_busy"]["fix"] in out["recommendations"]


def test_bandwidth_test_times_out_instead_of_hanging() -> None:
    bw = run_allreduce("gloo", 2, sizes_up_to(1), timeout_s=0.2)
    assert bw["status"] == "timeout" and "killed" in bw["detail"]
    assert bw["wall_s"] < 5


def test_broken_backend_is_reported_not_raised() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA to break the nccl ranks")
    bw = run_allreduce("nccl", 1, sizes_up_to(1), timeout_s=60)
    assert bw["status"] == "failed" and "exited with code" in bw["detail"]


def test_cli_subcommand_flags_and_validation() -> None:
    parser = argparse.ArgumentParser(prog="distlab")
    register(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["doctor", "--json", "--no-bandwidth", "--bandwidth-mb", "8", "--procs", "3"])
    assert (args.json_out, args.bandwidth, args.bandwidth_mb, args.procs) == (True, False, 8, 3)
    assert callable(args.func)
    with pytest.raises(DistlabError, match="--procs must be >= 2"):
        collect_report(bandwidth=False, procs=1)
    with pytest.raises(DistlabError, match="--bandwidth-mb"):
        collect_report(bandwidth=False, bandwidth_mb=0)


def test_bus_bandwidth_formula() -> None:
    assert bus_bandwidth(10.0, 8) == pytest.approx(17.5)
    assert sizes_up_to(64) == [MIB, 16 * MIB, 64 * MIB] and sizes_up_to(20) == [MIB, 16 * MIB, 20 * MIB]


def test_scaling_results_are_found_in_distributed_results(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "distributed_results"
    results.mkdir()
    (results / "broken.json").write_text("{not json")
    rep = collect_report(bandwidth=False)
    assert "scaling_file_invalid" in {f["code"] for f in rep["findings"]}
    assert rep["speedup"]["measured"] == []
    (results / "broken.json").unlink()
    (results / "ppo.json").write_text(json.dumps({"recipe": "ppo", "device": "cpu", "results": [
        {"gpus": 1, "throughput": 50.0}, {"gpus": 2, "throughput": 90.0}]}))
    rep = collect_report(bandwidth=False)
    assert [r["speedup"] for r in rep["speedup"]["measured"]] == pytest.approx([1.0, 1.8])
    assert rep["speedup"]["source"].endswith("ppo.json")


def test_cli_on_a_one_process_recipe_config_exits_0_and_advises_for_one_process(tmp_path) -> None:
    """The README's demo runs one process: the doctor sizes that run and does not talk about two."""
    from clitools import run_cli

    proc = run_cli(["doctor", "--json", "--no-bandwidth", "--recipe", "hrm", "--config", "demo-sudoku"], tmp_path,
                   check=False)
    out = json.loads(proc.stdout)
    assert proc.returncode == out["exit_code"]
    if not any(f["severity"] == "error" for f in out["findings"]):
        assert proc.returncode == 0  # warnings alone never fail the command
    if not out["gpus"]:
        assert out["memory"]["device"] == "CPU RAM of 1 process"
        assert out["memory"]["capacity_bytes"] == out["host"]["ram_available_bytes"]
        assert not any("2 gloo" in r or "2 processes" in r for r in out["recommendations"]), out["recommendations"]
