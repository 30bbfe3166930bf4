"""Each misconfiguration check fed a broken setup directly (no broken machine needed)."""

from __future__ import annotations

import socket

from distlab.doctor import checks

GIB = 1024**3


def _codes(findings) -> set[str]:
    return {f.code for f in findings}


def _bound_socket() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    return s


def test_busy_master_port_is_an_error_with_a_free_replacement() -> None:
    with _bound_socket() as s:
        port = s.getsockname()[1]
        [f] = checks.check_master_port({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        assert (f.severity, f.code) == ("error", "master_port_busy")
        suggested = int(f.fix.split("MASTER_PORT=")[1].split()[0])
        assert suggested != port and checks.port_is_free(suggested)
    assert checks.check_master_port({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}) == []


def test_invalid_and_remote_master_port() -> None:
    assert _codes(checks.check_master_port({"MASTER_PORT": "abc"})) == {"master_port_invalid"}
    # 192.0.2.0/24 is TEST-NET-1: never an address of this machine
    assert _codes(checks.check_master_port({"MASTER_ADDR": "192.0.2.7", "MASTER_PORT": "29500"})) \
        == {"master_port_remote"}


def test_cuda_visible_devices_empty_and_missing() -> None:
    [f] = checks.check_cuda_visible_devices({"CUDA_VISIBLE_DEVICES": ""}, visible=0, physical=None)
    assert f.code == "cuda_visible_devices_empty" and "unset CUDA_VISIBLE_DEVICES" in f.fix
    [f] = checks.check_cuda_visible_devices({"CUDA_VISIBLE_DEVICES": "0,3"}, visible=1, physical=2)
    assert (f.severity, f.code) == ("error", "cuda_visible_devices_missing") and "[3]" in f.message
    [f] = checks.check_cuda_visible_devices({"CUDA_VISIBLE_DEVICES": "0,1"}, visible=0, physical=None)
    assert f.code == "cuda_visible_devices_missing"
    assert checks.check_cuda_visible_devices({"CUDA_VISIBLE_DEVICES": "0,1"}, visible=2, physical=2) == []
    assert checks.check_cuda_visible_devices({}, visible=0, physical=None) == []


def test_nccl_variables_that_hurt() -> None:
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_DEBUG": "info"}
    found = {f.code: f for f in checks.check_nccl_env(env, n_gpus=4, ib_devices=["mlx5_0"])}
    assert set(found) == {"nccl_p2p_disabled", "nccl_ib_disabled", "nccl_debug_verbose", "nccl_nvls_enabled"}
    assert found["nccl_p2p_disabled"].severity == "warn"
    assert found["nccl_nvls_enabled"].severity == "info"
    # without InfiniBand hardware, disabling IB is harmless; NVLS=0 silences the note
    quiet = checks.check_nccl_env({"NCCL_IB_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}, n_gpus=4, ib_devices=[])
    assert quiet == []
    # on a CPU box P2P being disabled is only informative
    [f] = checks.check_nccl_env({"NCCL_P2P_DISABLE": "1"}, n_gpus=0, ib_devices=[])
    assert f.severity == "info"


def test_small_shm_and_omp_oversubscription() -> None:
    [f] = checks.check_shm(64 * 2**20)
    assert f.code == "shm_small" and "--shm-size" in f.fix
    assert checks.check_shm(2 * GIB) == [] and checks.check_shm(None) == []
    [f] = checks.check_omp({}, procs=4, cores=16, threads_per_proc=16)
    assert f.fix.startswith("export OMP_NUM_THREADS=4")
    assert checks.check_omp({"OMP_NUM_THREADS": "2"}, procs=4, cores=16, threads_per_proc=2) == []
    assert checks.check_omp({}, procs=1, cores=16, threads_per_proc=16) == []


def _gpu(i: int, name: str, free: float, total: float = 80) -> dict:
    return {"index": i, "name": name, "free_bytes": int(free * GIB), "total_bytes": int(total * GIB)}


def test_mixed_models_low_memory_and_missing_p2p() -> None:
    gpus = [_gpu(0, "RTX 4090", 23, 24), _gpu(1, "RTX 6000 Ada", 10, 48)]
    found = {f.code: f for f in checks.check_gpus(gpus)}
    assert set(found) == {"mixed_gpu_models", "gpu_low_free_memory"}
    assert "GPU 1" in found["gpu_low_free_memory"].message
    assert checks.check_gpus([_gpu(0, "H100", 79), _gpu(1, "H100", 79)]) == []
    [f] = checks.check_p2p([[True, False], [False, True]])
    assert f.code == "p2p_unavailable" and "0<->1" in f.message
    assert checks.check_p2p([[True, True], [True, True]]) == []


def test_torch_build_against_hardware() -> None:
    cpu_torch = {"torch": "2.13.0+cpu", "cuda_runtime": None, "hip_runtime": None}
    [f] = checks.check_torch_build(cpu_torch, cuda_available=False, physical=2)
    assert (f.severity, f.code) == ("error", "torch_without_cuda")
    [f] = checks.check_torch_build(cpu_torch, cuda_available=False, physical=None)
    assert f.code == "no_gpu" and f.severity == "info"


def test_recommendations_are_fixes_of_problems_first_errors() -> None:
    findings = [checks.Finding("warn", "a", "m", "fix-warn"), checks.Finding("error", "b", "m", "fix-error"),
                checks.Finding("info", "c", "m", "fix-info")]
    recs = checks.recommendations(findings, n_gpus=2, procs=2, memory_plan=None)
    assert recs == ["use --gpus -1: 2 GPUs visible", "fix-error", "fix-warn"]
