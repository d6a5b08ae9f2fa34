"""``patchkit watch LOG [--timeout SECONDS]``: follow a server's log until it is ready, crashes or
the time is up, instead of a shell loop that greps it every few seconds.

The log may not exist yet, and a restart that redirects with ``>`` truncates it: then it is
read again from its start (``patchkit.logs.follow``).  Every line goes through the same
matcher as ``patchkit diagnose``.  It ends at the first of:

- the ready line of the project the log is of (``patchkit.logs.phases``): SGLang's "The server
  is fired up and ready to roll!", logged after its warm-up request (uvicorn's "Application
  startup complete." comes before that request in SGLang's log, and is no ready line there);
  vLLM's, uvicorn's "Application startup complete.": exit 0, "ready after N s", and what the
  log said that patchkit knows;
- a crash: a scheduler exception, an uncaught traceback, a traceback a signature knows, or
  SGLang's "Received sigquit from a child process" with nothing after it: exit 1 and the
  diagnosis;
- the time-out: exit 124 (as ``timeout(1)``), the phase the start reached and its last lines.

It polls every POLL seconds (no busy loop; a FIFO or a device is read without waiting, so a
FIFO that nothing writes to ends at the time-out), reports progress through ``progress`` (the
command line prints it on a terminal only), and never starts, signals or kills a process.  The
time-out is a finite number of seconds above 0.  Text from the log (and the log's name) is
printed ``escaped``: control characters as ``cat -v`` shows them.
"""

from __future__ import annotations

import math
import time
from collections import deque
from pathlib import Path
from typing import Callable

from patchkit.commands.diagnose import finding_lines, finding_json
from patchkit.errors import PROBLEMS, TIMED_OUT, BadInput
from patchkit.logs import phases
from patchkit.logs.follow import Follower
from patchkit.logs.match import EFFECT, Matcher
from patchkit.logs.tracebacks import Traceback
from patchkit.report import Heading, Place, Report
from patchkit.text import escaped, plural

POLL = 0.25
SETTLE = 1.0  # seconds without a new line before a traceback that has its exception counts as ended
LAST_LINES = 5


class _Start:
    """What one start of the server (one life of the log) has shown so far."""

    def __init__(self) -> None:
        self.matcher = Matcher()
        self.phase: tuple[str, int] | None = None
        self.sglang = False  # a line was one of SGLang's records: its ready line is SGLang's own
        self.child_failed = False
        self.last: deque[tuple[int, str]] = deque(maxlen=LAST_LINES)


def seconds(value: str | float | None) -> float | None:
    """A --timeout: a finite number of seconds above 0 (None: wait for as long as it takes), else
    one BadInput line (``nan``, ``inf``, ``0``, ``-1`` and ``soon`` are refused alike)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise BadInput(None, f"--timeout must be a finite number of seconds above 0, not {value!r}")
    return number


def watch(path: Path, timeout: float | None, progress: Callable[[str], None] | None = None,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Report:
    timeout = seconds(timeout)
    if path.is_dir():
        raise BadInput(str(path), "is a directory, not a log file")
    shown = escaped(str(path))
    say = progress or (lambda line: None)
    follower, start = Follower(path), _Start()
    began = last_data = clock()
    said_waiting = False
    try:
        while True:
            lines, restarted = follower.poll()
            now = clock()
            if restarted:
                start = _Start()
                say(f"{now - began:.0f} s: {shown} started over (truncated or replaced); reading it from its start")
            if not follower.exists and not said_waiting:
                say(f"waiting for {shown} to appear")
                said_waiting = True
            for number, text in lines:
                ended = start.matcher.feed(number, text)
                if ended is not None and _ends_start(ended, start.matcher):
                    return _crashed(path, start, now - began, ended, follower.restarts)
                if not start.sglang and phases.sglang_record(text):
                    start.sglang = True
                if phases.ready(text, start.sglang):
                    return _ready(path, start, now - began, number, text, follower.restarts)
                phase = phases.phase(text)
                if phase and (start.phase is None or start.phase[0] != phase):
                    start.phase = (phase, number)
                    say(f"{now - began:.0f} s: {phase} (line {number})")
                if phases.CHILD_FAILED in text:
                    start.child_failed = True
                if text.strip():
                    start.last.append((number, text))
            if lines:
                last_data = now
            elif now - last_data >= SETTLE:
                if start.matcher.reader.complete:
                    ended = start.matcher.finish()
                    if _ends_start(ended, start.matcher):
                        return _crashed(path, start, now - began, ended, follower.restarts)
                if start.child_failed and not start.matcher.reader.open:
                    return _crashed(path, start, now - began, None, follower.restarts)
            if timeout is not None and now - began >= timeout:
                return _timed_out(path, start, timeout, follower.exists, follower.restarts)
            sleep(POLL)
    finally:
        follower.close()


def _ends_start(tb: Traceback, matcher: Matcher) -> bool:
    """Whether a traceback that ended is a crash: one a signature or known failure matched, a
    scheduler's exception, or one printed from the start of a line (uncaught); never the logging
    module's own (``--- Logging error ---``)."""
    if tb.logging_error:
        return False
    known = matcher.verdict is not None and matcher.verdict.kind != EFFECT
    return known or phases.SCHEDULER_EXCEPTION in tb.header or not tb.header.strip()


def _lines_of(path: Path, start: _Start) -> list[str]:
    return finding_lines(str(path), start.matcher.findings)


def _restarts(restarts: int) -> str:
    return f" (the log started over {plural(restarts, 'time')})" if restarts else ""


def _ready(path: Path, start: _Start, elapsed: float, number: int, text: str, restarts: int) -> Report:
    report = Report()
    report.lines += _lines_of(path, start)
    report.add(f"ready after {elapsed:.0f} s: {escaped(str(path))} line {number}{_restarts(restarts)}")
    report.data = _data(path, start, "ready", elapsed, restarts, line=number)
    return report


def _crashed(path: Path, start: _Start, elapsed: float, tb, restarts: int) -> Report:
    report = Report()
    findings = start.matcher.findings
    report.lines += _lines_of(path, start)
    failures = sum(f.kind != EFFECT for f in findings)
    what = (f"{escaped(tb.last) or 'a traceback'} (line {tb.last_line})" if tb is not None
            else "a child process failed (SGLang's SIGQUIT handler)")
    known = f"{plural(failures, 'known SM120 failure')} above" if failures else "nothing patchkit knows was found"
    report.add(f"crashed after {elapsed:.0f} s: {what}{_restarts(restarts)}; {known}")
    report.exit_code = PROBLEMS
    report.data = _data(path, start, "crashed", elapsed, restarts, line=tb.last_line if tb else None,
                        traceback_line=tb.line if tb else None, exception=tb.last if tb else None)
    return report


def _timed_out(path: Path, start: _Start, timeout: float, exists: bool, restarts: int) -> Report:
    report = Report()
    report.lines += _lines_of(path, start)
    shown = escaped(str(path))
    if not exists:
        report.add(f"timed out after {timeout:g} s: {shown} does not exist")
    else:
        reached = f"; the start reached: {start.phase[0]} (line {start.phase[1]})" if start.phase else ""
        report.add(f"timed out after {timeout:g} s: no ready line in {shown}{reached}{_restarts(restarts)}")
        if start.last:
            report.add(Heading(f"last lines of {shown}:"))
            report.lines += [Place(f"  {n}: {escaped(text)}", shown, n, escaped(text)) for n, text in start.last]
    report.exit_code = TIMED_OUT
    report.data = _data(path, start, "timed out", timeout, restarts,
                        phase=start.phase[0] if start.phase else None,
                        last_lines=[{"line": n, "text": t} for n, t in start.last])
    return report


def _data(path: Path, start: _Start, outcome: str, elapsed: float, restarts: int, **extra) -> dict:
    return {"command": "watch", "log": str(path), "outcome": outcome, "seconds": round(elapsed, 1),
            "restarts": restarts, **extra, "findings": [finding_json(f) for f in start.matcher.findings]}
