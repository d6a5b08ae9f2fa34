"""A log followed as a server writes it, from a file that may not exist yet and may be
truncated by a restart (``> server.log`` again).

Each ``poll`` reads what was appended since the last one and returns the whole lines.  The
log starts over (from line 1) when the file's inode changes, when it is shorter than what was
read, or when its first bytes are no longer the ones read (truncated and written past the old
length between two polls).  It never writes, and it holds at most one poll's bytes
(MAX_POLL) and one partial line (MAX_LINE).
"""

from __future__ import annotations

import os
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
        self._file = None
        self._inode = None
        self._pos = 0
        self._head = b""
        self._partial = b""
        self._skipping = False
        self._number = 0

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

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
        if self._file is not None and (st.st_ino != self._inode or st.st_size < self._pos or not self._same_head()):
            self.close()
            restarted = True
            self.restarts += 1
        if self._file is None:
            try:
                self._file = open(self.path, "rb")
            except FileNotFoundError:
                return [], restarted
            except PermissionError:
                raise BadInput(str(self.path), "permission denied") from None
            self.exists = True
            self._inode = os.fstat(self._file.fileno()).st_ino
            self._pos, self._head, self._partial, self._skipping, self._number = 0, b"", b"", False, 0
        data = self._file.read(MAX_POLL)
        self._pos += len(data)
        if len(self._head) < HEAD:
            self._head += data[: HEAD - len(self._head)]
        return self._lines(data), restarted

    def _same_head(self) -> bool:
        return os.pread(self._file.fileno(), len(self._head), 0) == self._head

    def _lines(self, data: bytes) -> list[tuple[int, str]]:
        out = []
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
