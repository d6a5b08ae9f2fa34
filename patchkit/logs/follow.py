"""A log followed as a server writes it, from a file that may not exist yet and may be
truncated by a restart (``> server.log`` again).

Each ``poll`` reads what was appended since the last one and returns the whole lines.  The
log starts over (from line 1) when the file's inode changes, when it is shorter than what was
read, or when its first bytes are no longer the ones read (truncated and written past the old
length between two polls).  It never writes, and it holds at most one poll's bytes
(MAX_POLL) and one partial line (MAX_LINE).

A log that is a FIFO or a character device is opened with O_NONBLOCK (``open`` never waits for
a writer) and each poll reads what is there, without waiting: a FIFO that nothing writes to
is a log that says nothing, until the caller's time-out.  A stream never starts over.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.logs.read import MAX_LINE, text

MAX_POLL = 4 << 20
HEAD = 256  # the first bytes read, to tell a truncated log from a grown one


class Follower:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.exists = False
        self.restarts = 0
        self._fd: int | None = None
        self._stream = False  # a FIFO or a character device: read without waiting, never truncated
        self._inode: int | None = None
        self._pos = 0
        self._head = b""
        self._partial = b""
        self._skipping = False
        self._number = 0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def poll(self) -> tuple[list[tuple[int, str]], bool]:
        """The new whole lines (number, text), and whether the log started over first; an
        OSError (a log that is /proc/self/mem, that became a folder) names the log."""
        try:
            return self._poll()
        except OSError as exc:
            if exc.filename is None:
                raise OSError(exc.errno, exc.strerror, str(self.path)) from None
            raise

    def _poll(self) -> tuple[list[tuple[int, str]], bool]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return [], False
        restarted = False
        if self._fd is not None and (st.st_ino != self._inode or self._truncated(self._fd, st.st_size)):
            self.close()
            restarted = True
            self.restarts += 1
        fd = self._fd if self._fd is not None else self._open()
        if fd is None:
            return [], restarted
        try:
            data = os.read(fd, MAX_POLL)
        except BlockingIOError:  # a stream with nothing to read now
            data = b""
        self._pos += len(data)
        if len(self._head) < HEAD:
            self._head += data[: HEAD - len(self._head)]
        return self._lines(data), restarted

    def _open(self) -> int | None:
        """Open the log: its descriptor (None: it is not there); a folder or a block device is a BadInput line."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: no wait for a writer
        except FileNotFoundError:
            return None
        except PermissionError:
            raise BadInput(str(self.path), "permission denied") from None
        st = os.fstat(fd)
        kind = stat.S_IFMT(st.st_mode)
        if kind not in (stat.S_IFREG, stat.S_IFIFO, stat.S_IFCHR):
            os.close(fd)
            if kind == stat.S_IFDIR:  # the log became a folder while watched
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(self.path))
            raise BadInput(str(self.path), "a block device, not a log file" if kind == stat.S_IFBLK else "not a log file")
        self._stream = kind != stat.S_IFREG
        if not self._stream:
            os.set_blocking(fd, True)
        self._fd, self._inode, self.exists = fd, st.st_ino, True
        self._pos, self._head, self._partial, self._skipping, self._number = 0, b"", b"", False, 0
        return fd

    def _truncated(self, fd: int, size: int) -> bool:
        """A regular file (open as ``fd``) shorter than what was read, or whose first bytes changed (a stream never is)."""
        return not self._stream and (size < self._pos or os.pread(fd, len(self._head), 0) != self._head)

    def _lines(self, data: bytes) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            if self._skipping:
                self._skipping = False
            else:
                self._number += 1
                out.append((self._number, text(self._partial + data[start:nl])))
            self._partial, start = b"", nl + 1
        if not self._skipping:
            self._partial += data[start:]
            if len(self._partial) > MAX_LINE:  # a line longer than the cap: keep its start
                self._number += 1
                out.append((self._number, text(self._partial)))
                self._partial, self._skipping = b"", True
        return out
