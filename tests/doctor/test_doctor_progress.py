"""The doctor's probes as one phase: a doctor that runs long names each probe as it starts, with count, rate and
ETA, on stderr (``--json`` keeps stdout for the report); a quick one prints no progress at all."""

import json
import time

import distlab.doctor.checks as checks
from distlab.doctor import run_doctor
from distlab.doctor.report import PROBES, probes_progress


def test_a_slow_doctor_names_each_probe_with_count_rate_and_eta(monkeypatch, capsys):
    real = checks.probe_gpus

    def slow_probe(timeout_s):  # a GPU probe stuck for a while, as a hung driver makes it
        time.sleep(3.5)
        return real(timeout_s)

    monkeypatch.setattr(checks, "probe_gpus", slow_probe)
    code = run_doctor(json_out=True, bandwidth=False)
    captured = capsys.readouterr()
    report = json.loads(captured.out)  # stdout: the report alone
    assert code == report["exit_code"]
    lines = [x for x in captured.err.splitlines() if "doctor: probe" in x]
    assert [x.split("now=")[1] for x in lines] == ["all-reduce bandwidth", "memory plan", "done"]
    assert lines[0].split("  ")[0].endswith(f"probe 2/{len(PROBES)}") and "s/probe" in lines[0]
    assert "eta " in lines[0]


def test_a_quick_doctor_prints_no_progress(capsys):
    run_doctor(json_out=True, bandwidth=False)
    assert "doctor: probe" not in capsys.readouterr().err
    assert probes_progress(recipe=True).total == len(PROBES) + 1  # --recipe reads the recipe's models first
