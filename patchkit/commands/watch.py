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
- the time-out: exit 124 (as ``timeout(1)``), the phase the start reached and its last lines, and
  the failure modes that hang in that phase (a hang prints nothing): with ``--python EXE``, only
  those the releases it has installed are exposed to on SM12x GPUs (``judge/modes.py``).

It polls every POLL seconds (no busy loop; a FIFO or a device is read without waiting, so a
FIFO that nothing writes to ends at the time-out), reports progress through ``progress`` (a
``Progress``; the command line prints ``render.watch.progress_line`` of it on a terminal only),
and never starts, signals or kills a process.  The time-out is a finite number of seconds above
0.  It returns a ``WatchResult``, which ``render/watch.py`` says (the findings as diagnose's,
``render/findings.py``); text from the log (and the log's name) is printed ``escaped``: control
characters as ``cat -v`` shows them.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.cc import SM12X
from patchkit.errors import OK, PROBLEMS, TIMED_OUT, BadInput
from patchkit.fixes.modes import Phase
from patchkit.logs import phases
from patchkit.logs.follow import Follower
from patchkit.logs.match import EFFECT, Matcher
from patchkit.logs.tracebacks import Traceback
from patchkit.types import StrEnum
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.fixes.modes import Mode, WayOut
    from patchkit.logs.match import LogFinding
    from patchkit.targets.environment import Environment

POLL = 0.25
SETTLE = 1.0  # seconds without a new line before a traceback that has its exception counts as ended
LAST_LINES = 5
READY, CRASHED, OUT_OF_TIME = "ready", "crashed", "timed out"  # the outcomes, as --json names them


class Step(StrEnum):
    """What progress reports."""

    WAITING = "waiting"
    STARTED_OVER = "started over"
    PHASE = "phase"


WAITING, STARTED_OVER, PHASE = Step.WAITING, Step.STARTED_OVER, Step.PHASE


class Progress(Value):
    """What the start has shown so far, as it happens (``render.watch.progress_line`` says it):
    the log does not exist yet (WAITING), it started over (STARTED_OVER), or a new phase (PHASE)."""

    kind: Step
    log: str  # the log, as given
    seconds: float = 0.0  # since watch began
    phase: str | None = None
    line: int | None = None  # the phase's line


class WatchResult(Value):
    """How the watch ended (``render/watch.py`` says it): ``outcome`` READY, CRASHED or OUT_OF_TIME,
    after ``seconds`` (the time-out when it timed out), with what the log said that patchkit knows."""

    log: str  # the log, as given
    outcome: str
    seconds: float
    restarts: int  # how often the log started over
    findings: tuple[LogFinding, ...]
    line: int | None = None  # the ready line, or the line of the exception that ended the start
    traceback: Traceback | None = None  # a crash's traceback (None: a child process failed, SGLang's SIGQUIT handler)
    exists: bool = True  # timed out: whether the log exists
    phase: tuple[str, int] | None = None  # timed out: the phase the start reached, and its line
    last: tuple[tuple[int, str], ...] = ()  # timed out: the start's last lines, (number, text)
    hangs: tuple[Mode, ...] = ()  # timed out: the failure modes that hang in that phase
    judged: bool = False  # whether ``hangs`` holds only the modes the releases installed are exposed to (--python)
    ways: tuple[tuple[WayOut, ...] | None, ...] = ()  # judge.modes.log_ways: a failure mode's ways out for --python's releases

    @property
    def failures(self) -> int:
        return sum(f.kind is not EFFECT for f in self.findings)

    @property
    def exit_code(self) -> int:
        return {READY: OK, CRASHED: PROBLEMS}.get(self.outcome, TIMED_OUT)


class _Start:
    """What one start of the server (one life of the log) has shown so far."""

    def __init__(self, env: Environment | None = None) -> None:
        from patchkit.commands.diagnose import Releases  # a fix offered only to a release it changes, as diagnose does

        self.matcher = Matcher(helps=Releases(env=env).helps)
        self.phase: tuple[Phase, int] | None = None
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


def watch(path: Path, timeout: float | None, progress: Callable[[Progress], None] | None = None,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
          env: Environment | None = None) -> WatchResult:
    timeout = seconds(timeout)
    if path.is_dir():
        raise BadInput(str(path), "is a directory, not a log file")
    log = str(path)
    say = progress or (lambda event: None)
    follower, start = Follower(path), _Start(env)
    began = last_data = clock()
    said_waiting = False
    try:
        while True:
            lines, restarted = follower.poll()
            now = clock()
            if restarted:
                start = _Start(env)
                say(Progress(STARTED_OVER, log, now - began))
            if not follower.exists and not said_waiting:
                say(Progress(WAITING, log))
                said_waiting = True
            for number, text in lines:
                ended = start.matcher.feed(number, text)
                if ended is not None and _ends_start(ended, start.matcher):
                    return _crashed(path, start, now - began, ended, follower.restarts, env)
                if not start.sglang and phases.sglang_record(text):
                    start.sglang = True
                if phases.ready(text, start.sglang):
                    return _ready(path, start, now - began, number, follower.restarts, env)
                phase = phases.phase(text)
                if phase and (start.phase is None or start.phase[0] != phase):
                    start.phase = (phase, number)
                    say(Progress(PHASE, log, now - began, phase, number))
                if phases.CHILD_FAILED in text:
                    start.child_failed = True
                if text.strip():
                    start.last.append((number, text))
            if lines:
                last_data = now
            elif now - last_data >= SETTLE:
                if start.matcher.reader.complete:
                    ended = start.matcher.finish()  # a traceback, as it is open
                    if ended is not None and _ends_start(ended, start.matcher):
                        return _crashed(path, start, now - began, ended, follower.restarts, env)
                if start.child_failed and not start.matcher.reader.open:
                    return _crashed(path, start, now - began, None, follower.restarts, env)
            if timeout is not None and now - began >= timeout:
                return _timed_out(path, start, timeout, follower.exists, follower.restarts, env)
            sleep(POLL)
    finally:
        follower.close()


def _ends_start(tb: Traceback, matcher: Matcher) -> bool:
    """Whether a traceback that ended is a crash: one a signature or known failure matched, a
    scheduler's exception, or one printed from the start of a line (uncaught); never the logging
    module's own (``--- Logging error ---``)."""
    if tb.logging_error:
        return False
    known = matcher.verdict is not None and matcher.verdict.kind is not EFFECT
    return known or phases.SCHEDULER_EXCEPTION in tb.header or not tb.header.strip()


def _ways(start: _Start, env: Environment | None) -> tuple[tuple[WayOut, ...] | None, ...]:
    from patchkit.commands.diagnose import log_ways  # as diagnose says them

    return log_ways(start.matcher.findings, list(env.sites) if env is not None else None)


def _ready(path: Path, start: _Start, elapsed: float, number: int, restarts: int, env: Environment | None) -> WatchResult:
    return WatchResult(str(path), READY, elapsed, restarts, tuple(start.matcher.findings), line=number, ways=_ways(start, env))


def _crashed(path: Path, start: _Start, elapsed: float, tb: Traceback | None, restarts: int,
             env: Environment | None) -> WatchResult:
    return WatchResult(str(path), CRASHED, elapsed, restarts, tuple(start.matcher.findings), line=tb.last_line if tb else None,
                       traceback=tb, ways=_ways(start, env))


def _timed_out(path: Path, start: _Start, timeout: float, exists: bool, restarts: int,
               env: Environment | None = None) -> WatchResult:
    return WatchResult(str(path), OUT_OF_TIME, timeout, restarts, tuple(start.matcher.findings), exists=exists,
                       phase=start.phase, last=tuple(start.last), hangs=_hangs(start.phase[0] if start.phase else None, env),
                       judged=env is not None, ways=_ways(start, env))


def _hangs(phase: Phase | None, env: Environment | None) -> tuple[Mode, ...]:
    """The modes that hang in ``phase``; with ``env`` (--python), those its releases are exposed to."""
    from patchkit.fixes.modes import modes

    found = tuple(m for m in modes() if phase is not None and phase in m.hangs_in)
    if env is None or not found:
        return found
    from patchkit.judge.modes import Exposed, modes_here
    from patchkit.targets.dist_info import installed_versions

    sites = list(env.sites)
    exposed = {h.mode.name for h in modes_here(installed_versions(sites), list(SM12X), sites) if h.verdict != Exposed.AVERTED}
    return tuple(m for m in found if m.name in exposed)
