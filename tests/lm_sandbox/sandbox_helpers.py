"""Process checks shared by the sandbox tests (a module of its own: every test directory has a conftest)."""

import os
from pathlib import Path

from distlab.recipes.lm.sandbox import Sandbox


def leftovers(box: Sandbox) -> list[str]:
    """Processes (zombies included) of the sandbox's uids, or running its runner: must be none after any run."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if uid in box.uids or str(box.root) in cmd:
            found.append(f"pid {pid} uid {uid} state {state}: {cmd[:80]}")
    return found


def my_zombies() -> list[int]:
    """Children of this test process that exited and were never reaped."""
    me, found = os.getpid(), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == me:
            found.append(int(pid))
    return found
