"""The tests' fixtures.  Their helpers are the package ``support`` (tests/support/): import
them from there (``from support.cli import invoke``), never from this file."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from support.prebuilt import Prebuilt
from support.repos import make_repo
from support.session import rewrite_test_modules, slow_first


def pytest_configure(config: pytest.Config) -> None:
    """One bytecode folder for the Python processes that every worker of the run starts
    (support.cli.PYCACHE): make test gives it (PATCHKIT_TEST_PYCACHE); a pytest started by
    hand gets one here, before its workers start (they inherit it), removed at the end."""
    if "PATCHKIT_TEST_PYCACHE" not in os.environ:
        folder = tempfile.mkdtemp(prefix="patchkit-test-pycache-")
        os.environ["PATCHKIT_TEST_PYCACHE"] = folder
        config.add_cleanup(lambda: (shutil.rmtree(folder, ignore_errors=True), os.environ.pop("PATCHKIT_TEST_PYCACHE", None)))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Under xdist, before the workers start: the test modules' rewritten bytecode, written
    once for all of them (support.session)."""
    if getattr(session.config.option, "numprocesses", None) and not hasattr(session.config, "workerinput"):
        rewrite_test_modules(session.config)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "sglang")


@pytest.fixture(scope="session")
def prebuilt(tmp_path_factory: pytest.TempPathFactory) -> Prebuilt:
    """What the session builds once (support.prebuilt): mirrors, releases, virtualenvs.  Under
    xdist the workers' temporary folders sit in the run's folder, which they share."""
    base = tmp_path_factory.getbasetemp()
    return Prebuilt((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "prebuilt")


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory):
    """The world of the crash and race tests (support.crash.build_world): an origin repository,
    its patches and template checkouts in every state.  Built once; tests only copy from it."""
    from support.crash import build_world

    return build_world(tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="session")
def sglang_venv(prebuilt: Prebuilt) -> Path:
    """A virtualenv with the real SGLang 0.5.9 wheel (from PyPI, cached: see support.mirror)
    installed by pip, as ``pip install`` leaves it.  A template no test changes: take a copy
    (``copy_venv``).  pip installs it once per session instead of once per test."""
    return prebuilt.sglang_venv("0.5.9")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """What the session builds (``prebuilt``: mirrors, wheels, build backends) comes from PyPI on
    a cold cache: the tests that use it are marked ``network`` (the others that fetch say so
    themselves, ``pytest.mark.network``).  The slowest files first (support.session.SLOW_FIRST)."""
    slow_first(items)  # support.session.SLOW_FIRST
    for item in items:
        if "prebuilt" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.network)
