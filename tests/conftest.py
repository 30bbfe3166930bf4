"""Fixtures every test gets."""
import logging

import pytest

import markers
from clitools import run_cli


@pytest.fixture(autouse=True)
def _distlab_logger_restored():
    """A test that runs a worker in-process gives the ``distlab`` logger its own handlers and stops it
    propagating; restore it so that a later test's ``caplog`` still sees distlab's warnings."""
    log = logging.getLogger("distlab")
    saved = (list(log.handlers), log.level, log.propagate)
    yield
    log.handlers[:], log.level, log.propagate = saved


@pytest.fixture
def cli():
    """The real ``distlab`` command, run in a subprocess (``clitools.run_cli``)."""
    return run_cli


def pytest_configure(config: pytest.Config) -> None:
    for name, doc in markers.MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    markers.mark(items)
