"""Running patchkit's command line from a test: as a separate process (``run_cli``) or in
the test's own process (``invoke``), with the same arguments, environment, exit code and bytes."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

from support.repos import GIT_ENV

# Where the Python processes the tests start keep their own bytecode: patchkit's source tree is
# imported by every ``python -m patchkit``, and with PYTHONDONTWRITEBYTECODE (as CI sets it) each
# of them would compile it again.  Only Python's cache moves; what patchkit reads and writes does not.
# One folder for the whole run, all workers (PATCHKIT_TEST_PYCACHE: make test's, or the one
# tests/conftest.py makes): patchkit, libcst, click and the standard library compile once a run.
PYCACHE = os.environ.get("PATCHKIT_TEST_PYCACHE") or tempfile.mkdtemp(prefix="patchkit-test-pycache-")
if "PATCHKIT_TEST_PYCACHE" not in os.environ:
    atexit.register(shutil.rmtree, PYCACHE, True)
PROCESS_ENV = {"PYTHONPYCACHEPREFIX": PYCACHE, "PYTHONDONTWRITEBYTECODE": None}


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m patchkit`` as a user would: a separate process, bytes out."""
    full_env = dict(os.environ, **GIT_ENV)
    full_env.pop("PATCHKIT_SGLANG_REPO", None)
    for key, value in {**PROCESS_ENV, **(env or {})}.items():  # None removes a variable
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return subprocess.run(
        [sys.executable, "-m", "patchkit", *args], cwd=cwd, env=full_env, capture_output=True
    )



_IN_PROCESS = threading.Lock()  # click swaps sys.stdout and os.environ for the length of a call


def invoke(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run patchkit's command line in this process: the entry point of ``python -m patchkit``
    (the click group ``patchkit.cli.cli``) with the same arguments and environment as
    ``run_cli``; its exit code and its stdout and stderr bytes.

    It saves a Python start-up and patchkit's imports (about 0.3 s) per command.  Anything
    but the command's own exit (an exception patchkit let through: a traceback for a user)
    fails the test.  ``cwd``: the current folder for the call.  Kills (PATCHKIT_FAULT) and
    concurrent runs need ``run_cli``/Popen.
    """
    from click.testing import CliRunner

    from patchkit.cli import cli as group

    extra = {**GIT_ENV, "PATCHKIT_SGLANG_REPO": None, **(env or {})}
    assert not extra.get("PATCHKIT_FAULT"), "a fault kills the process: run it with run_cli"
    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        runner = CliRunner()
    with _IN_PROCESS:
        here = os.getcwd()
        try:
            if cwd is not None:
                os.chdir(cwd)
            result = runner.invoke(group, list(args), env=extra, prog_name="patchkit", catch_exceptions=True)
        finally:
            os.chdir(here)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError("patchkit raised:\n" + "".join(traceback.format_exception(*result.exc_info)))
    return subprocess.CompletedProcess(
        ["patchkit", *args], result.exit_code, result.stdout_bytes, result.stderr_bytes or b""
    )


MODES_HEADER = "failure modes of the releases installed"


def split_modes(lines: list[str]) -> tuple[list[str], list[str]]:
    """doctor's lines without its section of failure modes (its header, the indented lines under it and the
    blank line before it), and that section: for the tests of what doctor says besides the modes, which
    tests/fixes/test_modes.py holds to the modes' data."""
    at = next((i for i, line in enumerate(lines) if line.startswith(MODES_HEADER)), None)
    if at is None:
        return lines, []
    end = at + 1
    while end < len(lines) and lines[end].startswith("  "):
        end += 1
    start = at - 1 if at and lines[at - 1] == "" else at
    return lines[:start] + lines[end:], lines[at:end]
