"""Processes the tests start and look at (tests of patchkit.targets.processes, and of what
apply reports about running servers)."""

from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
TICK_NS = 10**9 // TICKS_PER_S


@contextmanager
def running(argv, standin: Path | None, env: dict | None = None, **popen):
    """Start argv with the stand-ins importable (``standin`` its PYTHONPATH; None: no PYTHONPATH,
    as where the current folder holds them, ``cwd=``); yield it once it printed "ready"; kill it."""
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(standin)}
    if standin is None:
        del env["PYTHONPATH"]
    with subprocess.Popen(
        [str(a) for a in argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        **popen,
    ) as proc:
        try:
            line = proc.stdout.readline()
            if line != b"ready\n":
                proc.kill()
                pytest.fail(f"{argv} did not start: {(line + proc.stdout.read()).decode(errors='replace')}")
            yield proc
        finally:
            proc.kill()


def after_start(pid: int) -> int:
    """A wall-clock time (ns) read once the boot clock is two ticks past pid's start tick.

    One tick makes the process's start strictly earlier; the second is margin for
    the module's estimate of the boot time, which may run late by the (sub-microsecond)
    gap between two clock readings.  Waiting for a condition, not for a duration.
    """
    from patchkit.targets.processes import parse_start_ticks

    start = parse_start_ticks(Path(f"/proc/{pid}/stat").read_text())
    while time.clock_gettime_ns(time.CLOCK_BOOTTIME) * TICKS_PER_S // 10**9 < start + 2:
        time.sleep(0.001)
    return time.time_ns()
