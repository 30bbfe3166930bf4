"""benchmarks/device_stage.sh: a stage stopped at the device call's time limit (SIGTERM) still packs what it wrote,
with the rows of runs cut short, and leaves no process behind."""

import os
import signal
import subprocess
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STAGE = """
set -uo pipefail
source benchmarks/device_stage.sh
pack_at_exit demo "$RES" "$EXTRA"
echo "result" > "$RES/table.txt"
sleep 60 & wait $!
echo "not reached" > "$RES/late.txt"
"""


def test_a_stage_stopped_by_sigterm_packs_its_results_and_partial_rows(tmp_path):
    out, res, runs, extra = (tmp_path / name for name in ("out", "res", "runs", "extra"))
    for folder in (out, res, runs / "run-a", extra):
        folder.mkdir(parents=True)
    (runs / "run-a" / "metrics.jsonl").write_text('{"step": 1}\n')
    (extra / "speed.json").write_text("{}")
    env = dict(os.environ, OUT=str(out), RES=str(res), EXTRA=str(extra), PACK_RUNS=str(runs))
    proc = subprocess.Popen(["bash", "-c", STAGE], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 20
    while not (res / "table.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143
    with tarfile.open(out / "demo.tgz") as tar:
        names = {n.lstrip("./") for n in tar.getnames()}
    assert {"table.txt", "run-a.partial.jsonl", "extra/speed.json"} <= names and "late.txt" not in names
    assert (out / "log-demo").exists()
    time.sleep(0.5)
    left = [pid for pid in subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
            if Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"]
    for pid in left:  # clean up before failing, so a regression leaves nothing running
        os.kill(int(pid), signal.SIGKILL)
    assert left == []  # the stage's backgrounded command was stopped with it (an exited tee awaiting reaping is not)


def test_without_out_nothing_is_packed(tmp_path):
    res = tmp_path / "res"
    res.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    proc = subprocess.run(["bash", "-c", "source benchmarks/device_stage.sh; pack_at_exit demo \"$1\"; echo ok",
                           "-", str(res)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0 and proc.stdout == "ok\n" and list(res.iterdir()) == []
