"""Fixtures every test gets."""
import logging

import pytest


@pytest.fixture(autouse=True)
def _distlab_logger_restored():
    """A test that runs a worker in-process gives the ``distlab`` logger its own handlers and stops it
    propagating; restore it so that a later test's ``caplog`` still sees distlab's warnings."""
    log = logging.getLogger("distlab")
    saved = (list(log.handlers), log.level, log.propagate)
    yield
    log.handlers[:], log.level, log.propagate = saved
