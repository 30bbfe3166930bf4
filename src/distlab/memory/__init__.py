"""Memory in one room: the estimate of a model's bytes, the doctor's per-device plan, host memory, OOM messages and
CUDA memory snapshots."""
