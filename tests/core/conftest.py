import pytest

from clitools import losses, run_cli, summary  # noqa: F401  (re-exported for older imports)


@pytest.fixture
def cli():
    return run_cli
