"""Host memory: what is free (cgroup limits included) and the refusal of CPU training that cannot fit."""

import pytest
import torch

from distlab.errors import DistlabError
from distlab.memory import host as hostmem


def test_cgroup_room_is_limit_minus_usage_and_none_without_a_limit(tmp_path):
    (tmp_path / "memory.max").write_text("1000000\n")
    (tmp_path / "memory.current").write_text("250000\n")
    assert hostmem._cgroup_room(tmp_path) == 750000
    (tmp_path / "memory.max").write_text("max\n")
    assert hostmem._cgroup_room(tmp_path) is None
    assert hostmem._cgroup_room(tmp_path / "absent") is None


def test_meminfo_available_is_read_in_bytes(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   12345 kB\n")
    assert hostmem._meminfo_available(f) == 12345 * 1024
    assert hostmem._meminfo_available(tmp_path / "absent") is None
    assert hostmem.available_bytes() > 0  # this machine has /proc/meminfo


@pytest.mark.parametrize("state, per_element", [("fp32", 4 + 8), ("bf16", 4 + 4), ("int8", 4 + 2)])
def test_training_bytes_count_gradients_and_moments_of_trained_cpu_parameters(state, per_element):
    trained, frozen = torch.nn.Linear(100, 10), torch.nn.Linear(50, 5)
    frozen.requires_grad_(False)
    opt = torch.optim.AdamW([*trained.parameters(), *frozen.parameters()])
    assert hostmem.host_training_bytes([opt], state) == 1010 * per_element


def test_room_is_refused_in_one_line_naming_the_need_and_the_fixes():
    hostmem.check_room("policy", 10 * hostmem.GIB, 2, 30 * hostmem.GIB)  # 20 GiB of 30: fine
    hostmem.check_room("policy", 10 * hostmem.GIB, 2, None)  # unknown: never refused
    with pytest.raises(DistlabError) as err:
        hostmem.check_room("policy", 10 * hostmem.GIB, 2, 12 * hostmem.GIB)
    line = str(err.value)
    assert "\n" not in line and "'policy'" in line and "20.0 GiB" in line and "12.0 GiB is free" in line
    assert "2 ranks on this host" in line and "--gpus" in line and "optim.state_dtype" in line


def test_a_cpu_run_that_cannot_fit_ends_in_one_line_before_its_first_step(tmp_path, monkeypatch, capsys):
    import distlab.launch.worker as worker

    monkeypatch.setattr(hostmem, "available_bytes", lambda: 4096)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.chdir(tmp_path)
    code = worker.main(["toy", "d_model=32", "run.name=nomem"])
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if "error" in ln.lower()]
    assert code != 0 and len(err) == 1, err
    assert "'model' trains on the CPU" in err[0] and "MiB" not in err[0] and "GiB is free" in err[0]
    assert not list((tmp_path / "runs" / "nomem").glob("checkpoints/step*"))
