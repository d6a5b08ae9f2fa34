"""Name running processes that started before a change and may still run the old code.

Patching files does not change a server that is already running: Python read the
old sources when it imported them.  After ``apply``/``revert`` and in ``status``,
patchkit names the Python processes that run the project, started before the change,
and would run the target's own files, each with its evidence (``evidence.py``: its
PYTHONPATH, its current folder, its interpreter's environment, the script it runs), so
the user knows what to restart and why.

Linux only, through /proc, read-only and bounded: nothing is ever signalled, run or
imported, and no file of /proc is read past a cap.  Where /proc is not available the
answer is [].  A process that is gone by the end of its reading (or whose pid was reused
meanwhile) is left out: it runs nothing any more.  One whose environment, current folder or
executable cannot be read (another user's) and that shows no evidence otherwise is named
with an evidence that says patchkit cannot tell.  Standard library only and cheap to import:
``evidence.py`` is imported for a process whose command line names the project, and most
scans find none.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.match import Pattern
from patchkit.text import printable
from patchkit.values import Value

if TYPE_CHECKING:  # for the annotations only; the evidence is read for a process that names the project
    from patchkit.targets.evidence import Evidence, Seen, Sites

PROC = "/proc"  # (a str: every path below it is made per process, the cheapest way)
# python, python3, python3.11, python3.13t, python3.11-dbg, pypy, pypy3, pypy3.10
_PYTHON = Pattern(r"(?:python|pypy)(?:\d+(?:\.\d+)*)?[a-z]*(?:-dbg)?")
_DELETED = " (deleted)"  # readlink of /proc/PID/exe after the binary was replaced
_START_FIELD = 22  # starttime in /proc/PID/stat, 1-based (proc(5))
_NS = 10**9
# What patchkit reads of a process's /proc files at most: a stat line is about 300 bytes; Linux
# caps one argument at 128 KiB and argv with the environment at a quarter of the stack limit.
STAT_CAP = 4 << 10
CMDLINE_CAP = 256 << 10
ENVIRON_CAP = 1 << 20

class Package(Value):
    """The files a process must run to be named: a target's package folder (``/x/python/sglang``
    of a checkout, ``site-packages/sglang`` of an install), and for an installed package the
    prefix of its environment (``V`` for ``V/lib/python3.11/site-packages``), else None."""

    folder: Path
    environment: Path | None = None


class Process(Value):
    pid: int
    cmdline: str  # argv joined with spaces, control characters escaped (" ..." ends one cut at the cap)
    started_ns: int  # wall-clock start time, ns since epoch (approximate; for display)
    why: Evidence  # what shows that it runs the target's files, or that patchkit cannot tell


def parse_start_ticks(stat: str) -> int:
    """Field 22 of a /proc/PID/stat line: the start time, in clock ticks since boot.

    Field 2 (comm) is in parentheses and may itself hold spaces and parentheses, so
    fields are counted from after the *last* ')'.  ValueError if the line is not one.
    """
    _, paren, rest = stat.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) <= _START_FIELD - 3:
        raise ValueError(f"not a /proc/PID/stat line: {stat[:80]!r}")
    return int(fields[_START_FIELD - 3])  # fields[0] is field 3 (state)


def _looks_like_python(path: str | None) -> bool:
    return path is not None and _PYTHON.fullmatch(os.path.basename(path)) is not None


def _read(path: str, cap: int) -> bytes:
    """At most ``cap + 1`` bytes of a /proc file (one more than the cap tells that it is larger);
    OSError when it cannot be read (vanished: ENOENT, ESRCH; not ours: EACCES)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        chunks: list[bytes] = []
        total = 0
        while total <= cap:
            chunk = os.read(fd, min(1 << 16, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _maybe(path: str, cap: int) -> bytes | None:
    try:
        return _read(path, cap)
    except OSError:
        return None


def _readlink(path: str) -> str:
    target = os.readlink(path)  # OSError passes through
    return target[: -len(_DELETED)] if target.endswith(_DELETED) else target


class _Gone(Exception):
    """The process exited while patchkit read it."""


def _unread(path: str, exc: OSError, unread: list[Evidence]) -> None:
    """Note why ``path`` could not be read; _Gone when the process has exited (ENOENT, ESRCH)."""
    from patchkit.targets.evidence import Evidence, Why

    if exc.errno in (errno.ENOENT, errno.ESRCH):
        raise _Gone(path) from None
    unread.append(Evidence(Why.UNREADABLE, path, exc.strerror or type(exc).__name__))


def _link(path: str, unread: list[Evidence]) -> str | None:
    try:
        return _readlink(path)
    except OSError as exc:
        _unread(path, exc, unread)
        return None


def _start_ticks(pid: int) -> int | None:
    """The start tick of a process that runs (None: gone, a zombie, or no stat line)."""
    raw = _maybe(f"{PROC}/{pid}/stat", STAT_CAP)
    if not raw:
        return None
    try:
        start = parse_start_ticks(raw.decode(errors="replace"))
    except ValueError:
        return None
    state = raw.rpartition(b")")[2].split()[:1]
    return None if state in ([b"Z"], [b"X"], [b"x"]) else start


def _cmdline(pid: int) -> tuple[bytes, bool]:
    """Its arguments, each ended by a NUL, and whether they were cut at the cap (whole arguments
    only); b"" for a zombie, a kernel thread or an unreadable one."""
    raw = _maybe(f"{PROC}/{pid}/cmdline", CMDLINE_CAP) or b""
    cut = len(raw) > CMDLINE_CAP
    return (raw[:CMDLINE_CAP].rpartition(b"\0")[0] if cut else raw.removesuffix(b"\0")), cut


def _argv(pid: int) -> tuple[list[str], bool]:
    """(argv, whether it was cut at the cap); [] for a zombie, a kernel thread or an unreadable one."""
    raw, cut = _cmdline(pid)
    return [os.fsdecode(arg) for arg in raw.split(b"\0")] if raw else [], cut


def _environ(path: str, unread: list[Evidence]) -> dict[str, str] | None:
    """The process's initial environment, or None (and why, in ``unread``) when not read whole."""
    from patchkit.targets.evidence import Evidence, Why

    try:
        raw = _read(path, ENVIRON_CAP)
    except OSError as exc:
        _unread(path, exc, unread)
        return None
    if len(raw) > ENVIRON_CAP:
        unread.append(Evidence(Why.TOO_LARGE, path, str(ENVIRON_CAP)))
        return None
    found: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        name, eq, value = entry.partition(b"=")
        if eq and name:
            found.setdefault(os.fsdecode(name), os.fsdecode(value))  # the first, as getenv finds it
    return found


def _interpreter_path(argv0: str, cwd: str | None, environ: dict[str, str] | None, exe: str | None) -> str | None:
    """argv[0] as an absolute path, symlinks not resolved: a venv's ``bin/python`` is a symlink
    to the base interpreter, and only the link tells which environment runs.  A bare name is
    looked up in the process's PATH; failing that (or when its environment or current folder
    cannot be read), its executable."""
    from patchkit.targets.evidence import absolute

    if "/" in argv0:
        return absolute(argv0, cwd) or exe
    search = environ.get("PATH", os.defpath) if environ is not None else None  # execvp's default
    for folder in search.split(os.pathsep) if search is not None else []:
        candidate = absolute(os.path.join(folder or ".", argv0), cwd)
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return exe


def _see(pid: int, argv: list[str], exe: str | None, unread: list[Evidence]) -> Seen:
    from patchkit.targets.evidence import Seen, parse_command

    folder = f"{PROC}/{pid}"
    cwd = _link(f"{folder}/cwd", unread)
    environ = _environ(f"{folder}/environ", unread)
    interpreter = _interpreter_path(argv[0], cwd, environ, exe)
    return Seen(parse_command(argv), cwd, environ, interpreter, exe, tuple(unread))


def _boot_epoch_ns() -> int:
    """The wall-clock time of boot, in ns, never earlier than the truth.

    Read BOOTTIME, the wall clock, BOOTTIME again: the wall clock minus the first
    reading overestimates by at most the gap between the two BOOTTIME readings,
    and the best of three samples keeps that gap tiny even on a loaded CPU.
    Overestimating can only make a change look earlier, so a process that
    started after the change is never named.
    """
    samples = []
    for _ in range(3):
        before = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        wall = time.time_ns()
        after = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        samples.append((after - before, wall - before))
    return min(samples)[1]


def _pids() -> list[int]:
    try:
        return sorted(int(name) for name in os.listdir(PROC) if name.isdigit())
    except OSError:
        return []


def _stale(pid: int, project: str, changed_ticks: int, package: Package, sites: Sites, boot_ns: int) -> Process | None:
    """``pid`` as a Process with its evidence if it is a Python process running ``project``
    that started in an earlier clock tick than the change and runs ``package``'s files, else None."""
    # A command line that runs the project names it: the one file read of every other process.
    if os.fsencode(project) not in _cmdline(pid)[0]:
        return None
    start = _start_ticks(pid)
    if start is None or start >= changed_ticks:
        return None
    from patchkit.targets.evidence import (  # a process that may run the project: the rest is evidence
        evidence,
        runs_project,
    )

    argv, cut = _argv(pid)
    if not argv or not runs_project(argv, project):
        return None
    unread: list[Evidence] = []
    try:
        exe = _link(f"{PROC}/{pid}/exe", unread)
        if not (_looks_like_python(argv[0]) or _looks_like_python(exe)):
            return None
        why = evidence(_see(pid, argv, exe, unread), package.folder, package.environment, sites)
    except _Gone:
        return None
    if why is None or _start_ticks(pid) != start:  # not ours; or it exited (its pid maybe reused) meanwhile
        return None
    started_ns = boot_ns + start * _NS // os.sysconf("SC_CLK_TCK")
    return Process(pid, printable(" ".join(argv)) + (" ..." if cut else ""), started_ns, why)


def stale_processes(project: str, changed_ns: int, package: Package) -> list[Process]:
    """Python processes running ``project`` that started strictly before ``changed_ns`` (a
    wall-clock time in ns, e.g. the newest st_mtime_ns of the files just written) and would run
    the files of ``package`` (the target's package folder; for an installed package, also the
    prefix of its environment, whose interpreters count), each with its evidence.  Sorted by
    pid; excludes this process."""
    if not os.path.exists(f"{PROC}/self/stat") or not hasattr(time, "CLOCK_BOOTTIME"):
        return []
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    boot_ns = _boot_epoch_ns()
    # The kernel keeps start times in whole ticks since boot: compare in that clock.
    # start < changed_ticks means the process started before the change's tick began.
    changed_ticks = (changed_ns - boot_ns) * ticks_per_s // _NS
    sites: Sites = {}  # the import paths of the site folders seen, for this scan
    found: list[Process] = []
    me = os.getpid()
    for pid in _pids():
        stale = _stale(pid, project, changed_ticks, package, sites, boot_ns) if pid != me else None
        if stale is not None:
            found.append(stale)
    return found
