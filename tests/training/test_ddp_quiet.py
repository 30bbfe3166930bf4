"""A multi-process run prints no torch deprecation noise for the DDP settings distlab chooses on purpose
(broadcast_buffers=False: buffers are never broadcast, at init included; see distlab.training.wrap)."""

from clitools import run_cli


def test_a_two_process_run_prints_no_broadcast_buffers_warning(tmp_path):
    p = run_cli(["train", "toy", "steps=2", "num_examples=64", "global_batch_size=8", "d_model=16", "eval_examples=16",
                 "log.progress=false", "run.name=ddp", "--procs", "2"], tmp_path)
    assert "broadcast_buffers" not in p.stderr + p.stdout and "FutureWarning" not in p.stderr
