"""Logs that are streams: a FIFO (with a writer or none), /dev/zero, standard input from a device;
and the --timeout watch takes.  Nothing blocks in open(), nothing reads without end, every refusal
is one line and exit 2.  Each run has a time limit of its own: a hang fails the test."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from logs import real_text as r

from patchkit.errors import BAD_INPUT, OK, PROBLEMS, TIMED_OUT
from support.cli import PROCESS_ENV

ENV = dict(os.environ, **{k: v for k, v in PROCESS_ENV.items() if v})
HEALTHY = (r.START, r.LOAD, r.CAPTURE, r.CAPTURED, r.READY)
KEYERROR_AT = len(r.START) + len(r.LOAD) + 1 + r.KEYERROR.index("KeyError: 12")
WAIT = 0.5  # the runs below wait this long for a FIFO's writer (WRITER_WAIT, 10 s as shipped)


def patchkit(*args: str, stdin=None, limit: float = 60) -> subprocess.CompletedProcess:
    """``python -m patchkit ARGS``, a FIFO's writer waited for WAIT seconds; past ``limit`` the test fails."""
    code = f"import patchkit.logs.read as read; read.WRITER_WAIT = {WAIT}; from patchkit.__main__ import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], stdin=stdin, capture_output=True, env=ENV, timeout=limit)


def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "server.log"
    os.mkfifo(path)
    return path


def writer(path: Path, data: bytes, silent: float) -> threading.Thread:
    """A process's side of the FIFO: opens it for writing (which waits for the reader), says nothing for
    ``silent`` seconds (a server loading its weights), then writes ``data`` and closes."""

    def run() -> None:
        with open(path, "wb") as f:
            time.sleep(silent)
            f.write(data)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_watch_a_fifo_that_nothing_writes_to_times_out(tmp_path: Path) -> None:
    log = fifo(tmp_path)
    began = time.monotonic()
    done = patchkit("watch", str(log), "--timeout", "2", limit=30)
    assert (done.returncode, done.stdout.decode(), done.stderr) == (TIMED_OUT, f"timed out after 2 s: no ready line in {log}\n", b"")
    assert time.monotonic() - began < 20


def test_watch_a_fifo_a_server_writes_to(tmp_path: Path) -> None:
    log = fifo(tmp_path)
    thread = writer(log, r.log(*HEALTHY), silent=1.0)
    done = patchkit("watch", str(log), "--timeout", "60")
    thread.join()
    assert done.returncode == OK, done.stdout + done.stderr
    assert re.fullmatch(rf"ready after \d+ s: {re.escape(str(log))} line {sum(map(len, HEALTHY))}\n", done.stdout.decode())


def test_diagnose_a_fifo_that_nothing_writes_to(tmp_path: Path) -> None:
    log = fifo(tmp_path)
    done = patchkit("diagnose", str(log), limit=30)
    assert (done.returncode, done.stdout, done.stderr.decode()) == (
        BAD_INPUT, b"", f"patchkit: {log}: a FIFO that no process has open for writing (waited {WAIT:g} s)\n")


def test_diagnose_reads_a_fifo_to_its_end(tmp_path: Path) -> None:
    """The writer is silent past the wait (it holds the FIFO open): a stream still being written, read to its end."""
    log = fifo(tmp_path)
    thread = writer(log, r.log(r.START, r.LOAD, r.KEYERROR, r.CHILD_FAILED), silent=3 * WAIT)
    done = patchkit("diagnose", str(log))
    thread.join()
    assert done.returncode == PROBLEMS, done.stderr
    assert done.stdout.decode().splitlines()[0].startswith(f"{log}:{KEYERROR_AT}: KeyError: 12 raised at ")


def test_diagnose_dev_zero_stops(tmp_path: Path) -> None:
    done = patchkit("diagnose", "/dev/zero", limit=120)
    assert (done.returncode, done.stdout, done.stderr.decode()) == (
        BAD_INPUT, b"", "patchkit: /dev/zero: no end after 4 GiB (a stream that does not end, such as /dev/zero): not read further\n")


def test_diagnose_standard_input_from_dev_zero_stops(tmp_path: Path) -> None:
    with open("/dev/zero", "rb") as zero:
        done = patchkit("diagnose", stdin=zero, limit=120)
    assert (done.returncode, done.stdout, done.stderr.decode()) == (
        BAD_INPUT, b"", "patchkit: <stdin>: no end after 4 GiB (a stream that does not end, such as /dev/zero): not read further\n")


def test_watch_dev_zero_until_the_time_out(tmp_path: Path) -> None:
    done = patchkit("watch", "/dev/zero", "--timeout", "1", limit=60)
    assert done.returncode == TIMED_OUT and done.stderr == b""
    lines = done.stdout.decode().splitlines()
    assert lines[0] == "timed out after 1 s: no ready line in /dev/zero"
    assert lines[1] == "/dev/zero:1: " + "^@" * 4096  # a line is cut at 4096 bytes, its NULs escaped


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "soon"])
def test_a_timeout_that_is_no_finite_positive_number(tmp_path: Path, value: str) -> None:
    log = tmp_path / "server.log"
    done = patchkit("watch", str(log), "--timeout", value, limit=30)
    assert (done.returncode, done.stdout, done.stderr.decode()) == (
        BAD_INPUT, b"", f"patchkit: --timeout must be a finite number of seconds above 0, not '{value}'\n")
    done = patchkit("watch", str(log), "--timeout", value, "--json", limit=30)
    assert done.returncode == BAD_INPUT and json.loads(done.stdout)["exit_code"] == BAD_INPUT
