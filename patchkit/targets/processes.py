"""Name running processes that started before a change and may still run the old code.

Patching files does not change a server that is already running: Python read the
old sources when it imported them.  After ``apply``/``revert`` and in ``status``,
patchkit names the Python processes that run the patched project and started
before the change, so the user knows what to restart.

Linux only, through /proc, and read-only: nothing is ever signalled.  Where /proc is
not available the answer is [].  A process that vanishes mid-scan, or whose files
cannot be read (another user's), is left out silently: this is advice for a report,
never a check.  Standard library only and cheap to import.
"""

from __future__ import annotations

import glob
import os
import re
import time
from pathlib import Path
from typing import NamedTuple

from patchkit.text import printable

PROC = Path("/proc")
# python, python3, python3.11, python3.13t, python3.11-dbg, pypy, pypy3, pypy3.10
_PYTHON = re.compile(r"(?:python|pypy)(?:\d+(?:\.\d+)*)?[a-z]*(?:-dbg)?")
_DELETED = " (deleted)"  # readlink of /proc/PID/exe after the binary was replaced
_START_FIELD = 22  # starttime in /proc/PID/stat, 1-based (proc(5))
_NS = 10**9


class Process(NamedTuple):
    pid: int
    cmdline: str  # argv joined with spaces, control characters escaped
    started_ns: int  # wall-clock start time, ns since epoch (approximate; for display)


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


_VALUE_OPTIONS = ("-X", "-W", "--check-hash-based-pycs")  # interpreter options that take the next argument


def runs_project(argv: list[str], project: str) -> bool:
    """Whether a command line (argv[0] being the interpreter) runs ``project``.

    The interpreter's own options are read as CPython reads them, up to what it runs:
    ``-m project``, ``-m project.x`` (or the joined ``-mproject.x``), or a script that is a
    path to a file named ``project`` (a console script, ``/venv/bin/vllm``) or to a ``.py``
    file below a ``project`` folder (``.../sglang/launch_server.py``).  Arguments of what
    runs are not scripts (``patchkit generate --repo ~/sglang`` runs patchkit), except a
    later ``-m project...`` pair, as wrappers such as ``python -m debugpy ... -m sglang.x`` pass it.
    """
    args = argv[1:]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _VALUE_OPTIONS:
            i += 2
            continue
        if arg.startswith("-m") or arg.startswith("-c") or not arg.startswith("-") or arg in ("-", "--"):
            break
        i += 1
    rest = args[i:]
    if not rest or rest[0].startswith("-c") or rest[0] in ("-", "--"):
        return False
    if rest[0].startswith("-m"):
        main = rest[0][2:] or (rest[1] if len(rest) > 1 else "")
        if main == project or main.startswith(project + "."):
            return True
    elif _is_script_of(rest[0], project):
        return True
    later = [m for flag, m in zip(rest[1:], rest[2:], strict=False) if flag == "-m"]
    return any(m == project or m.startswith(project + ".") for m in later)


def _is_script_of(arg: str, project: str) -> bool:
    parts = arg.split("/")
    if len(parts) < 2:  # a bare word is not a path ("pytest -k sglang")
        return False
    return parts[-1] == project or (parts[-1].endswith(".py") and project in parts[:-1])


def _looks_like_python(path: str | None) -> bool:
    return bool(path) and _PYTHON.fullmatch(os.path.basename(path)) is not None


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:  # vanished (ENOENT, ESRCH) or not ours (EACCES)
        return None


def _readlink(path: Path) -> str | None:
    try:
        target = os.readlink(path)
    except OSError:
        return None
    return target[: -len(_DELETED)] if target.endswith(_DELETED) else target


def _start_ticks(pid: int) -> int | None:
    raw = _read(PROC / str(pid) / "stat")
    try:
        return parse_start_ticks(raw.decode(errors="replace")) if raw else None
    except ValueError:
        return None


def _argv(pid: int) -> list[str]:
    """The process's argv; [] for a zombie, a kernel thread or an unreadable one."""
    raw = _read(PROC / str(pid) / "cmdline")
    if not raw:
        return []
    if raw.endswith(b"\0"):
        raw = raw[:-1]
    return [os.fsdecode(arg) for arg in raw.split(b"\0")]


def _search_path(pid: int) -> str | None:
    """PATH from the process's initial environment; None if it cannot be read."""
    raw = _read(PROC / str(pid) / "environ")
    if raw is None:
        return None
    for entry in raw.split(b"\0"):
        if entry.startswith(b"PATH="):
            return os.fsdecode(entry[5:])
    return os.defpath  # what execvp searches when there is no PATH


def _absolute(path: str, cwd: str | None) -> str | None:
    """``path`` made absolute against the process's cwd, lexically (no symlink resolved)."""
    if os.path.isabs(path):
        return os.path.normpath(path)
    return os.path.normpath(os.path.join(cwd, path)) if cwd else None


def _interpreter_path(pid: int, argv0: str) -> str | None:
    """argv[0] of ``pid`` as an absolute path, symlinks not resolved: a venv's
    ``bin/python`` is a symlink to the base interpreter, and only the link tells
    which environment runs.  A bare name is looked up in the process's PATH;
    failing that (or when its environment cannot be read), /proc/PID/exe."""
    cwd = _readlink(PROC / str(pid) / "cwd")
    if "/" in argv0:
        return _absolute(argv0, cwd)
    search = _search_path(pid)
    for folder in search.split(os.pathsep) if search is not None else []:
        candidate = _absolute(os.path.join(folder or ".", argv0), cwd)
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return _readlink(PROC / str(pid) / "exe")


def _in_venv(interpreter: str) -> bool:
    """Whether the interpreter at this path starts a virtualenv (pyvenv.cfg beside or above it)."""
    folder = os.path.dirname(interpreter)
    return any(os.path.isfile(os.path.join(f, "pyvenv.cfg")) for f in (folder, os.path.dirname(folder)))


class _Environment:
    """Tells whether a process's interpreter is that of the environment at ``prefix``."""

    def __init__(self, prefix: Path) -> None:
        bin_dir = os.path.join(os.path.abspath(prefix), "bin")
        self.bin = os.path.realpath(bin_dir)
        # A system Python (no pyvenv.cfg) may also run under a name outside prefix/bin
        # (/usr/local/bin/python3 -> ...): then its binary identifies it.
        system = not os.path.isfile(os.path.join(prefix, "pyvenv.cfg"))
        pythons = glob.glob(os.path.join(glob.escape(bin_dir), "python*")) if system else []
        self.binaries = {os.path.realpath(p) for p in pythons}

    def owns(self, pid: int, argv0: str) -> bool:
        # The interpreter's own link is never followed, but its folder is resolved:
        # /bin/python3 is in /usr/bin/ where /bin links to /usr/bin.
        path = _interpreter_path(pid, argv0)
        if path and os.path.realpath(os.path.dirname(path)) == self.bin:
            return True
        if not self.binaries or (path and _in_venv(path)):
            return False  # a venv on the same base binary runs its own site-packages
        exe = _readlink(PROC / str(pid) / "exe")
        return exe is not None and os.path.realpath(exe) in self.binaries


def _is_python(pid: int, argv0: str) -> bool:
    return _looks_like_python(argv0) or _looks_like_python(_readlink(PROC / str(pid) / "exe"))


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


def _stale(pid: int, project: str, changed_ticks: int, environment: _Environment | None):
    """(argv, start ticks) if ``pid`` is a Python process running ``project`` that
    started in an earlier clock tick than the change, else None."""
    start = _start_ticks(pid)
    if start is None or start >= changed_ticks:
        return None
    argv = _argv(pid)
    if not argv or not runs_project(argv, project) or not _is_python(pid, argv[0]):
        return None
    if environment is not None and not environment.owns(pid, argv[0]):
        return None
    if _start_ticks(pid) != start:  # the process exited and its pid was reused mid-read
        return None
    return argv, start


def stale_processes(project: str, changed_ns: int, interpreter_prefix: Path | None) -> list[Process]:
    """Python processes running `project` that started strictly before `changed_ns`
    (a wall-clock time in ns, e.g. the newest st_mtime_ns of the files just written).
    interpreter_prefix: for an installed package, the environment prefix (e.g. the venv
    folder V for V/lib/python3.11/site-packages): only processes whose interpreter is that
    environment's count. None (a checkout): any Python counts. Sorted by pid; excludes this process."""
    if not (PROC / "self" / "stat").exists() or not hasattr(time, "CLOCK_BOOTTIME"):
        return []
    ticks_per_s = os.sysconf("SC_CLK_TCK")
    boot_ns = _boot_epoch_ns()
    # The kernel keeps start times in whole ticks since boot: compare in that clock.
    # start < changed_ticks means the process started before the change's tick began.
    changed_ticks = (changed_ns - boot_ns) * ticks_per_s // _NS
    environment = _Environment(interpreter_prefix) if interpreter_prefix is not None else None
    found = []
    for pid in _pids():
        stale = _stale(pid, project, changed_ticks, environment) if pid != os.getpid() else None
        if stale:
            argv, start = stale
            found.append(Process(pid, printable(" ".join(argv)), boot_ns + start * _NS // ticks_per_s))
    return found


def restart_lines(procs: list[Process]) -> list[str]:
    """The report's lines about ``procs``: [] when there are none."""
    if not procs:
        return []
    noun, pronoun = ("process", "it") if len(procs) == 1 else ("processes", "them")
    head = (
        f"{len(procs)} running {noun} started before the change and may still run the old code;"
        f" restart {pronoun} to load the change:"
    )
    return [head] + [f"  pid {p.pid}: {p.cmdline}" for p in procs]
