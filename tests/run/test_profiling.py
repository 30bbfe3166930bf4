"""``log.profile_steps``: a real run writes a step profile whose numbers add up, and only where asked."""

import gzip
import json

from clitools import run_cli, summary

from distlab.run.profiling import kernel_kind

TOY = ["train", "toy", "steps=8", "log.every=1", "num_examples=128", "global_batch_size=16", "d_model=32",
       "eval_examples=32", "log.progress=false"]


def test_profile_of_toy_run_has_phases_that_fit_in_the_step(tmp_path):
    run_cli([*TOY, "run.name=prof", "log.profile_steps=3", "log.profile_wait=2"], tmp_path)
    run = tmp_path / "runs" / "prof"
    assert summary(run)["status"] == "completed"
    prof = json.loads((run / "profile" / "summary.json").read_text())
    assert prof["steps"] == 3 and prof["device"] == "cpu"
    phases = prof["phases_ms_per_step"]
    assert set(phases) == {"forward", "backward", "optimizer"}
    assert all(v > 0 for v in phases.values())
    # phases are nested in the step, so together they cannot exceed its wall time
    assert sum(phases.values()) <= prof["wall_ms_per_step"] * 1.05
    assert "kernel_ms_per_step" not in prof  # no device kernels on a CPU run
    trace = json.loads(gzip.open(run / "profile" / "trace.json.gz").read())
    assert any(e.get("name") == "phase:forward" for e in trace["traceEvents"])
    assert "Self CPU" in (run / "profile" / "top_ops.txt").read_text()


def test_no_profile_unless_asked_and_recipes_that_cannot_refuse(tmp_path):
    run_cli([*TOY, "run.name=plain"], tmp_path)
    assert not (tmp_path / "runs" / "plain" / "profile").exists()
    p = run_cli(["train", "multitoy", "log.profile_steps=2"], tmp_path, check=False)
    assert p.returncode == 2 and "ignores log.profile_steps" in p.stderr
    p = run_cli([*TOY, "log.profile_wait=0", "log.profile_steps=2"], tmp_path, check=False)
    assert p.returncode == 2 and "log.profile_wait=0" in p.stderr


def test_kernel_kinds():
    # names seen in the H200 profile of HRM's step (docs/benchmarks.md)
    assert kernel_kind("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN") == "matmul"
    assert kernel_kind("void cutlass::Kernel2<cutlass_75_tensorop_s1688gemm_...>") == "matmul"
    assert kernel_kind("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma") == "attention"
    assert kernel_kind("triton_per_fused__to_copy__unsafe_view_add_mean_mul_") == "fused elementwise (triton)"
    assert kernel_kind("Memcpy HtoD (Pageable -> Device)") == "copy"
    assert kernel_kind("void at::native::direct_copy_kernel_cuda(...)") == "copy"
    assert kernel_kind("void at::native::vectorized_elementwise_kernel<4, ...>") == "elementwise"
    assert kernel_kind("some_custom_thing") == "other"
    # NCCL's collectives name reductions and copies: they count as communication, not as the local work
    assert kernel_kind("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)") \
        == "communication (nccl)"


def test_host_waits_are_the_calls_that_drain_the_queue():
    from distlab.run.profiling import HOST_WAITS

    for name in ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy"):
        assert HOST_WAITS.search(name), name
    for name in ("cudaMemcpyAsync", "cudaLaunchKernel", "cudaEventRecord", "cudaStreamSynchronizeX"):
        assert not HOST_WAITS.search(name), name
