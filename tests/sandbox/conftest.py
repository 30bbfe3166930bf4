import shutil
import tempfile
from pathlib import Path

import pytest
from sandbox_helpers import leftovers

from distlab.sandbox import Sandbox


@pytest.fixture(scope="module")
def box():
    with Sandbox(timeout_s=1.0, workers=2, max_procs=32) as b:
        yield b
    assert not leftovers(b)


@pytest.fixture
def shared_dir():
    """A directory outside the sandbox that its uid can reach (/tmp/pytest-of-root is 0700: it could not)."""
    d = Path(tempfile.mkdtemp(prefix="distlab-sbx-test-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)
