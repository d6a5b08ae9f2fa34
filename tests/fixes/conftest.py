"""Fixtures of the tests of the fixes' data: pip's settings naming a test's own index."""

from __future__ import annotations

import os

import pytest

from support import released


@pytest.fixture
def pip_index(monkeypatch):
    """pip's settings name the test's index only: PIP_INDEX_URL, and no configuration file (its extra indexes)."""

    def use(address: str) -> None:
        monkeypatch.setenv("PIP_INDEX_URL", address)
        monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
        monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
        monkeypatch.delenv("PIP_PROXY", raising=False)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # an HTTP_PROXY of the machine's does not reach the test's index

    yield use
    released.forget()
