"""Rows of the bad-input table for issue 45's guards, checked by the table's own test (one line naming the problem
and the fix, no traceback, nothing written): a run the doctor says cannot fit is refused before its directory
exists. Kept beside ``test_bad_inputs.py`` so each file has one owner while other rows are being added there."""

import pytest
from test_bad_inputs import test_bad_input_is_one_line as one_line
from test_bad_inputs import workdir  # noqa: F401 (the table's fixture: its props, checked unchanged after each row)

ROWS = [
    ("toy-cannot-fit", ["train", "toy", "d_model=65536", "n_layers=64", "n_heads=8", "dist.device=cpu"],
     ["needs", "GiB per rank", "usable", "the doctor's estimate", "shrinks it most", "--force"]),
    ("grpo-7b-cpu", ["train", "grpo", "model.source=random:qwen2.5-7b", "dist.device=cpu"],
     ["cpu needs 191.64 GiB for policy, reference", "usable", "model.lora_r=16 shrinks it most", "--force"]),
    ("toy-cannot-fit-2-procs", ["train", "toy", "d_model=65536", "n_layers=64", "n_heads=8", "--procs", "2"],
     ["needs", "usable", "--force"]),
]


@pytest.mark.parametrize("argv,words", [pytest.param(a, w, id=i) for i, a, w in ROWS])
def test_guard_input_is_one_line(argv, words, workdir, capsys, monkeypatch):  # noqa: F811
    one_line(argv, words, workdir, capsys, monkeypatch)
