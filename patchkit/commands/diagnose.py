"""``patchkit diagnose [LOG ...]``: the failures patchkit knows, found in a server's log.

Each log (``-``, or none: standard input) is read in one streaming pass
(``patchkit.logs.read``); every traceback and warning a signature matches is reported, however
deep under later noise: where in the log, what failed in which file and line of which
project, and the fix with the one ``patchkit apply`` that applies it to the SGLang the
traceback ran (``patchkit.logs.match``).  Known failures no patch fixes say what to do
instead; explained warnings say what they mean.

A finding points at the exception's line (``KeyError: 12``), not at the traceback's first line.
Text from the log is printed ``escaped`` (control characters as ``cat -v`` shows them) and every
command printed is shell-quoted; ``--json`` keeps the text as it is (JSON escapes it).

Exit 1 when a known SM120 failure was found, 0 when none (a crash patchkit does not know is
not claimed), 2 for a log that cannot be read (a stream that does not end, a FIFO nothing writes
to: ``patchkit.logs.read``).  Returns a ``DiagnoseResult``, which ``render/diagnose.py`` says (each
finding as ``render/findings.py`` says it, for watch too).
"""

from __future__ import annotations

import io
import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from patchkit.cc import CC, SM12X
from patchkit.errors import OK, PROBLEMS, PatchkitError
from patchkit.logs.match import EFFECT, FAILURE, FIX, MODE, LogFinding, Matcher, needles
from patchkit.logs.read import Log, Scan, Stream, open_log
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.fixes.modes import WayOut
    from patchkit.judge.kernels import DistributionHere, FileHere
    from patchkit.logs.tracebacks import Frame
    from patchkit.targets.environment import Environment
    from patchkit.targets.session import Session

STDIN = "<stdin>"


class LogRead(Value):
    """One log, read: its name (``<stdin>``), how many lines and tracebacks it held, what patchkit
    knows in it, and for each finding the compiled code behind it (``CodeBehind``, or None)."""

    label: str
    lines: int
    tracebacks: int
    findings: tuple[LogFinding, ...]
    code: tuple[CodeBehind | None, ...]  # one per finding
    ready: int | None = None  # the line the server said it was ready at
    applied: tuple[bool, ...] = ()  # one per finding: a fix's finding whose fix is applied now where its frame's files are here
    ways: tuple[tuple[WayOut, ...] | None, ...] = ()  # judge.modes.log_ways: a failure mode's ways out for --python's releases

    def started_after(self, f: LogFinding) -> bool:
        """Whether the server was ready after ``f``, a warning of a fix's (a log line, no
        traceback): the start went on without the fix, so it is no failure."""
        return f.kind is FIX and f.start is None and self.ready is not None and f.line < self.ready


class DiagnoseResult(Value):
    """Each log diagnosed (``render/diagnose.py`` says it)."""

    logs: tuple[LogRead, ...]
    python: str | None = None  # the server's interpreter, as --python gave it

    @property
    def failures(self) -> int:
        """The known SM120 failures found (fixes and failures no patch fixes; not a fix's warning
        the server was ready after)."""
        return sum(f.kind is not EFFECT and not log.started_after(f) for log in self.logs for f in log.findings)

    @property
    def effects(self) -> int:
        """The warnings explained (a fix's warning the server was ready after among them)."""
        return sum(f.kind is EFFECT or log.started_after(f) for log in self.logs for f in log.findings)

    @property
    def exit_code(self) -> int:
        return PROBLEMS if self.failures else OK


def diagnose(logs: list[str], stdin: BinaryIO | None = None, python: str | None = None) -> DiagnoseResult:
    """Diagnose each of ``logs`` (paths; ``-`` is standard input, as is an empty list).  ``python``: the
    interpreter whose environment the server ran (else the site-packages folder of the frames)."""
    results: list[tuple[str, int, Matcher]] = []
    releases = Releases(python)
    for log in logs or ["-"]:
        label, stream = (STDIN, _stdin(stdin)) if log == "-" else (log, open_log(Path(log)))
        try:
            matcher = Matcher(helps=releases.helps, python=python)
            scan, feed = Scan(stream, needles(matcher.data), matcher.reader), matcher.feed
            for number, text in scan:
                feed(number, text)
            matcher.finish()
            results.append((label, scan.lines, matcher))
        finally:
            if label != STDIN:
                stream.close()
    code = KernelsBehind(python)
    return DiagnoseResult(tuple(LogRead(label, n, m.tracebacks, tuple(m.findings), tuple(map(code.behind, m.findings)), m.ready,
                                        tuple(map(releases.applied, m.findings)), log_ways(m.findings, code.sites))
                                for label, n, m in results), python)


def log_ways(findings: Sequence[LogFinding], sites: list[Path] | None) -> tuple[tuple[WayOut, ...] | None, ...]:
    """For each finding of a log, a failure mode's ways out that fit the releases installed in ``sites``
    (--python's: where the server's files are on this machine); None for a finding of no failure mode;
    () where ``sites`` is not known (every way out is said)."""
    if sites is None:
        return ()
    from patchkit.fixes.modes import modes
    from patchkit.judge.modes import ways_here
    from patchkit.targets.dist_info import installed_versions

    versions, by_name = installed_versions(sites), {m.name: m for m in modes()}
    return tuple(ways_here(by_name[f.name], versions) if f.kind is MODE and f.name in by_name else None for f in findings)


class Releases:
    """Whether a fix does something for the release a traceback's frames ran: read where those
    frames' files are on this machine, else in the environment ``--python`` names, which the server
    ran (the release as apply finds it, and what its shipped manifest says of the fix: only
    ``patched`` helps).  A log from another machine without ``--python``, or a release patchkit has
    no manifest for, cannot be told: the fix is offered, as its signature says."""

    def __init__(self, python: str | None = None, env: Environment | None = None) -> None:
        self._sessions: dict[str, Session | None] = {}  # a frame's folder -> its Session, or None
        self._python, self._env = python, env
        self._installed: dict[str, Session] | None = None  # --python's targets by project, opened when first asked

    def helps(self, fix: str, project: str, frames: tuple[Frame, ...]) -> bool:
        from patchkit.types import PATCHED

        session = self._ran(project, frames)
        status = session.shipped_series.status(fix) if session is not None else None
        return status is None or status is PATCHED

    def applied(self, f: LogFinding) -> bool:
        """Whether a fix's finding is cured where it ran (``_ran``, for one of the fix's projects):
        patchkit's state there records the fix applied to this release (the server that wrote the log
        started before: it needs a restart)."""
        from patchkit.fixes.registry import FIXES

        if f.kind is not FIX:
            return False
        frames = (f.frame,) if f.frame is not None else ()
        for project in dict.fromkeys(([f.project] if f.project else []) + [r.project for r in FIXES[f.name].rules]):
            session = self._ran(project, frames)
            if session is not None:
                try:
                    applied, changed = session.state()
                except PatchkitError:  # a state patchkit cannot read: cannot tell
                    return False
                return applied is not None and changed is None and f.name in applied.fixes()
        return False

    def _ran(self, project: str, frames: tuple[Frame, ...]) -> Session | None:
        """The target of ``project`` the frames ran: where a frame's file is on this machine, in a
        target of it; else ``--python``'s target of it; None when neither tells."""
        from patchkit.fixes.registry import PROJECTS
        from patchkit.logs.origin import target

        if project not in PROJECTS:
            return None
        for frame in frames:
            if target(frame.path, project, PROJECTS[project].source_root) is not None and os.path.isfile(frame.path):
                return self._session(os.path.dirname(frame.path), project)
        return self._environment().get(project)

    def _environment(self) -> dict[str, Session]:
        """``--python``'s targets, by project ({} without ``--python``, or where they cannot be opened)."""
        if self._installed is None:
            self._installed = {}
            if self._env is None and self._python is not None:
                from patchkit.targets.environment import read_environment

                try:
                    self._env = read_environment(self._python, None, True)
                except PatchkitError:  # said where the command reads the environment itself
                    self._env = None
            for install in self._env.installs if self._env is not None else ():
                from patchkit.targets.session import Session

                try:
                    self._installed.setdefault(install.project, Session.open(install.path, None, install.project, install))
                except PatchkitError:  # not a target patchkit reads: cannot tell
                    continue
        return self._installed

    def _session(self, folder: str, project: str) -> Session | None:
        if folder not in self._sessions:
            from patchkit.errors import PatchkitError
            from patchkit.targets.session import Session

            try:
                self._sessions[folder] = Session.open(Path(folder), project=project)
            except PatchkitError:  # not a target patchkit reads (a copy, a broken install): cannot tell
                self._sessions[folder] = None
        return self._sessions[folder]


def _stdin(stdin: BinaryIO | None) -> Log:
    """Standard input, bounded as any stream is unless it is a regular file (``< server.log``)."""
    stream = stdin or sys.stdin.buffer
    try:
        regular = stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # not a file descriptor (a test's bytes)
        regular = False
    log: Log = stream  # type: ignore[assignment]  # io's binary files have readinto; typing.BinaryIO omits it
    return log if regular else Stream(None, STDIN, source=log)


class Gpus(Value):
    """The GPUs the code behind a missing kernel image is judged for: those nvidia-smi reports
    (``seen``), or, when it is not on PATH (``why`` None) or does not answer (``why``), 12.0 and 12.1."""

    ccs: tuple[CC, ...]
    seen: bool
    why: str | None = None


class CodeBehind(Value):
    """The shared objects behind a missing kernel image (a known failure raised from an installed
    package): the distributions that installed the package folder ``top``, judged for ``gpus``."""

    top: str
    found: tuple[DistributionHere, ...]
    gpus: Gpus

    def missing(self) -> list[tuple[DistributionHere, FileHere]]:
        """(distribution, file) of each file with no code for the GPUs."""
        return [(d, x) for d in self.found for x in d.files if x.missing]


class KernelsBehind:
    """The shared objects behind a missing kernel image: those of the distribution that installed the
    package its frame names (in the frame's site-packages, or ``--python``'s), judged for the GPUs
    nvidia-smi reports, or, when it does not answer, for 12.0 or 12.1.  Read when its environment is
    here to read; judged nothing of otherwise (None)."""

    def __init__(self, python: str | None) -> None:
        from patchkit.logs.match import known

        self.compiled = {x.name for x in known().failures if x.compiled}  # the failures of compiled code
        self.sites: list[Path] | None = None
        if python is not None:
            from patchkit.targets.interpreter import interpreter, site_packages_of

            self.sites = site_packages_of(interpreter(python))
        self._gpus: Gpus | None = None
        self._found: dict[tuple[str, str], CodeBehind | None] = {}

    def gpus(self) -> Gpus:
        if self._gpus is None:
            import shutil

            from patchkit.errors import BadInput

            self._gpus = Gpus(SM12X, False)
            if shutil.which("nvidia-smi") is not None:
                from patchkit.gpus.smi import machine

                try:
                    self._gpus = Gpus(tuple(machine().ccs()), True)
                except BadInput as exc:
                    self._gpus = Gpus(SM12X, False, exc.reason)
        return self._gpus

    def behind(self, f: LogFinding) -> CodeBehind | None:
        """The shared objects behind a failure of compiled code (``compiled`` in known-failures.toml)
        raised from an installed package; None for any other finding."""
        from patchkit.logs.origin import site_of

        where = site_of(f.origin) if f.kind is FAILURE and f.origin and f.name in self.compiled else None
        if where is None:
            return None
        if where not in self._found:
            site, top = where
            sites = self.sites if self.sites is not None else [Path(site)]
            if not any(s.is_dir() for s in sites):
                self._found[where] = None
            else:
                from patchkit.judge.kernels import installed_code

                gpus = self.gpus()
                self._found[where] = CodeBehind(top, tuple(installed_code(sites, list(gpus.ccs), only=top)), gpus)
        return self._found[where]
