"""Files written atomically get the permissions any new file gets, not the temporary file's private 0600: a suite
report or a summary is meant to be read by the group that shares the results folder."""

from __future__ import annotations

import os
import stat

from distlab.atomic import atomic_save_figure, atomic_write_json, atomic_write_text


def test_atomic_files_follow_the_umask_not_mkstemp(tmp_path) -> None:
    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # what the umask gives a file opened the ordinary way
    expected = stat.S_IMODE(os.stat(plain).st_mode)
    atomic_write_text(tmp_path / "a.txt", "x")
    atomic_write_json(tmp_path / "b.json", {"a": 1})
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()
    atomic_save_figure(fig, tmp_path / "c.png")
    plt.close(fig)
    for name in ("a.txt", "b.json", "c.png"):
        mode = stat.S_IMODE(os.stat(tmp_path / name).st_mode)
        assert mode == expected, (name, oct(mode), oct(expected))
    assert expected & stat.S_IRGRP  # the usual umask (022 or 002) lets the group read
