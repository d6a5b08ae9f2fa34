"""watch's ready line is the one of the project the log is of: SGLang's "The server is fired up and
ready to roll!", logged after its warm-up request (uvicorn's "Application startup complete." comes
before that request in SGLang's log, and a warm-up that crashes comes after it); vLLM's, uvicorn's
"Application startup complete.".  The logs are real text (tests/logs/real_text.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from logs import real_text as r

from patchkit.commands.watch import POLL, watch
from patchkit.errors import OK, PROBLEMS
from patchkit.logs import phases
from patchkit.render import document, text
from support.cli import run_cli

NO_KERNEL = "RuntimeError: RMSNorm failed with error code no kernel image is available for execution on the device"


class Clock:
    """watch's clock and sleep: each sleep advances the clock, nothing else happens."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds == POLL
        self.now += seconds


def lines(*parts) -> int:
    """How many lines ``parts`` (lists of lines, or single lines) are."""
    return sum(1 if isinstance(part, str) else len(part) for part in parts)


def watched(tmp_path: Path, *parts):
    log = tmp_path / "server.log"
    log.write_bytes(r.log(*parts))
    clock = Clock()
    return log, watch(log, 60, None, clock.clock, clock.sleep)


def test_an_sglang_warm_up_that_crashes_after_uvicorns_startup_line(tmp_path: Path) -> None:
    parts = (r.START, r.LOAD, r.UVICORN, r.ACCESS, r.WARMUP_NO_KERNEL, r.SIGQUIT_RUNNING)
    log, report = watched(tmp_path, *parts)
    at = lines(*parts[:4]) + 1 + r.WARMUP_NO_KERNEL.index(NO_KERNEL)
    assert report.exit_code == PROBLEMS
    assert text(report, terminal=True)[-1] == f"crashed after 0 s: {NO_KERNEL} (line {at}); 1 known SM120 failure above"
    assert document(report)["outcome"] == "crashed"
    done = run_cli("watch", str(log), "--timeout", "60")  # the command line, as a user runs it
    assert done.returncode == PROBLEMS, done.stdout.decode()
    assert re.fullmatch(rf"crashed after \d+ s: {re.escape(NO_KERNEL)} \(line {at}\); 1 known SM120 failure above",
                        done.stdout.decode().splitlines()[-1])


def test_sglang_is_ready_at_its_own_line(tmp_path: Path) -> None:
    parts = (r.START, r.LOAD, r.CAPTURE, r.CAPTURED, r.UVICORN, r.ACCESS, r.READY)
    log, report = watched(tmp_path, *parts)
    assert report.exit_code == OK
    assert text(report, terminal=True) == [f"ready after 0 s: {log} line {lines(*parts)}"]


def test_vllm_is_ready_at_uvicorns_line(tmp_path: Path) -> None:
    log, report = watched(tmp_path, r.VLLM_SERVE)
    assert report.exit_code == OK
    assert text(report, terminal=True) == [f"ready after 0 s: {log} line {len(r.VLLM_SERVE)}"]


@pytest.mark.parametrize("line", r.START + r.LOAD + r.UVICORN + [r.ACCESS, r.CHILD_FAILED, r.SIGQUIT_RUNNING] + r.READY
                         + ["[2026-02-11 10:03:02.417 DP1 TP3 EP3] Load weight begin. avail mem=93.17 GB"])
def test_sglangs_records(line: str) -> None:
    assert phases.sglang_record(line)


@pytest.mark.parametrize("line", r.VLLM_SERVE + [line.split("] ", 1)[1] for line in r.START] + r.KEYERROR[1:3])
def test_what_is_no_sglang_record(line: str) -> None:
    assert not phases.sglang_record(line)
