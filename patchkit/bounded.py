"""Input from outside patchkit, bounded in bytes and in time before anything parses it.

- ``read_file``: a regular file's bytes, at most a cap.  What is not a regular file (a FIFO, a
  device such as ``/dev/zero``, a socket, a folder) is refused before it is opened, and it is
  opened non-blocking, so a file swapped for a FIFO meanwhile cannot hang the read either.
- ``load_json``: a JSON document whose nesting is measured before ``json`` parses it (the
  parser recurses once per level: a deep document would be a RecursionError).
- ``run``: a child process in a session of its own, its output read until both pipes end,
  under one deadline for the whole exchange (start, output, exit) and a cap on the bytes; at
  the deadline, at the cap, and on any exception (Ctrl-C included) its whole process group is
  killed.  A process it started in another session that still holds the pipes does not
  hold patchkit: reading stops at the deadline, and ``Ran`` says which of the two happened.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchkit.errors import BadInput
from patchkit.match import Pattern
from patchkit.signals import held_interrupts
from patchkit.values import Value

if TYPE_CHECKING:
    import subprocess

MAX_DEPTH = 64  # JSON nesting: patchkit's own documents and PEP 610's are 5 deep at most
_STRING = Pattern(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = Pattern(rb"[\[\]{}]")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def size_words(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


def read_open(fd: int, size: int, cap: int) -> bytes | None:
    """The bytes of the regular file open as ``fd``, ``size`` of them when it was looked at, read to its
    end (a byte past its size first: the end is seen in one read); None when it holds more than
    ``cap``: it grew while read."""
    chunks: list[bytes] = []
    total, want = 0, size + 1
    while chunk := os.read(fd, min(want, cap + 1 - total)):
        chunks.append(chunk)
        total, want = total + len(chunk), 1 << 20
        if total > cap:
            return None
    return b"".join(chunks)


def read_file(path: Path | str, cap: int, what: str = "file") -> bytes:
    """The bytes of the regular file at ``path`` (symlinks followed), at most ``cap`` of them;
    BadInput naming the file otherwise.  FileNotFoundError passes through (the caller knows
    what a missing file means)."""
    name = str(path)
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(name, f"{_kind(st.st_mode)}, not a regular file: patchkit reads a {what} from regular files only")
        if st.st_size > cap:
            raise BadInput(name, f"{size_words(st.st_size)}, more than the {size_words(cap)} patchkit reads of a {what}")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, BadInput):
        raise
    except OSError as exc:
        raise BadInput(name, f"cannot read it ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between the two looks
            raise BadInput(name, f"{_kind(st.st_mode)}, not a regular file: patchkit reads a {what} from regular files only")
        data = read_open(fd, st.st_size, cap)
        if data is None:
            raise BadInput(name, f"more than the {size_words(cap)} patchkit reads of a {what} (it grew while read)")
        return data
    except OSError as exc:
        raise BadInput(name, f"cannot read it ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def depth(data: bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest (brackets inside strings aside)."""
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
        return data.count(b"[") + data.count(b"{")  # an upper bound, and small
    level = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub(b"", data)):
        if m.group() in b"[{":
            level += 1
            if level > deepest:
                deepest = level
                if deepest > MAX_DEPTH:
                    return deepest
        else:
            level -= 1
    return deepest


def load_json(data: bytes | str) -> Any:  # Any: JSON, as json.loads; its shape is the caller's to check
    """The JSON document in ``data``; ValueError for one that is not JSON or that nests deeper
    than MAX_DEPTH (never a RecursionError)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if depth(raw) > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("nested too deeply") from None


class Ran(Value):
    """What a child process did within its bounds."""

    returncode: int | None  # None: it had not exited when patchkit stopped reading
    out: bytes
    err: bytes
    stopped: str  # "": it ended by itself; TIME: the deadline came first; BYTES: it printed more than the cap
    exited: bool  # the process itself had exited (at the deadline: a process it started held the pipes)
    ended: bool  # it has ended now (after a kill: a process stuck in the kernel may not end at once)


TIME, BYTES = "time", "bytes"


def _end(proc: subprocess.Popen[bytes], finished: bool) -> None:
    """Close ``proc``'s pipes; unless it ``finished``, end its whole session's group first (the
    deadline, the cap, or an exception such as Ctrl-C) and give it a second to be reaped."""
    import signal
    import subprocess

    if not finished:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    if not finished:
        try:
            proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass


def run(argv: list[str], limit: float, cap: int, stdin: bytes = b"", env: dict[str, str] | None = None) -> Ran:
    """Run ``argv`` in a session of its own (its standard input ``stdin``, or nothing), read
    its stdout and stderr together, at most ``cap`` bytes, and wait for it, all within
    ``limit`` seconds from its start.  OSError when it cannot be started."""
    import selectors
    import subprocess
    import time

    deadline = time.monotonic() + limit
    out, err = bytearray(), bytearray()
    stopped, finished, proc = "", False, None
    try:
        with held_interrupts() as held:  # a Ctrl-C inside Popen is raised just below, where the group is killed
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True, env=env)
        held.release()
        assert proc.stdout is not None and proc.stderr is not None  # stdout=PIPE, stderr=PIPE
        into = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        if stdin:
            assert proc.stdin is not None  # stdin=PIPE when there is input
            try:
                proc.stdin.write(stdin)  # a few hundred bytes: the pipe's buffer takes them at once
                proc.stdin.close()
            except BrokenPipeError:
                pass
        with selectors.DefaultSelector() as sel:
            for pipe in (proc.stdout, proc.stderr):
                sel.register(pipe, selectors.EVENT_READ)
            total = 0
            while sel.get_map() and not stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    stopped = TIME
                    break
                for key, _ in sel.select(left):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    into[key.fd] += chunk
                    total += len(chunk)
                    if total > cap:
                        stopped = BYTES
                        break
        if not stopped:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stopped = TIME
        exited = proc.poll() is not None
        finished = not stopped
    finally:
        if proc is not None:  # None: it could not be started (OSError)
            _end(proc, finished)
    ended = proc.poll() is not None
    return Ran(proc.returncode if exited else None, bytes(out), bytes(err), stopped, exited, ended)
