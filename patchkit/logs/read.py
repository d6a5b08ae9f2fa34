"""A log read in one streaming pass, in bounded memory, at close to ``grep``'s speed.

The log is read in chunks of CHUNK bytes.  One pass of a compiled multi-pattern matcher
(``ahocorasick_rs``, Aho-Corasick with SIMD prefilters, as ``grep -F`` uses) finds every line
that holds one of the needles; from there the lines are handed on one by one for as long as
the caller wants more (a traceback's frames and exception), then it jumps to the next line
found.  Line numbers are counted with ``bytes.count``.  A line keeps at most MAX_LINE bytes (the rest is skipped);
bytes that are not UTF-8 become U+FFFD, and NUL bytes and binary noise are read like text.

A regular file is read to its end.  A stream (standard input, a FIFO, a character device) is
read to its end too, at most MAX_STREAM bytes (``/dev/zero`` ends there, exit 2); a FIFO that
no process has open for writing is waited for at most WRITER_WAIT seconds (exit 2), never
blocked on in ``open``.  A block device or a socket is no log.
"""

from __future__ import annotations

import os
import select
import stat
import time
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from patchkit.errors import BadInput

if TYPE_CHECKING:
    from ahocorasick_rs import BytesAhoCorasick

    from patchkit.logs.tracebacks import TracebackReader

CHUNK = 1 << 20  # a block the needles' passes find in the cache
MAX_LINE = 4096
MAX_STREAM = 4 << 30  # bytes read from a stream before it counts as one that does not end
WRITER_WAIT = 10.0  # seconds a FIFO may go without a writer


class Log(Protocol):
    """What a log is read through: a file opened unbuffered, standard input's buffer, a ``Stream``."""

    def readinto(self, buffer: memoryview, /) -> int | None: ...

    def close(self) -> None: ...


def open_log(path: Path) -> Log:
    """The log at ``path`` opened for reading (a stream: bounded, see ``Stream``); a BadInput
    line when it cannot be."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO with no writer: no wait here
    except FileNotFoundError:
        raise BadInput(str(path), "no such file") from None
    except PermissionError:
        raise BadInput(str(path), "permission denied") from None
    except IsADirectoryError:
        raise BadInput(str(path), "is a directory, not a log file") from None
    except OSError as exc:  # a socket (ENXIO), a loop of links
        raise BadInput(str(path), exc.strerror or str(exc)) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise BadInput(str(path), "is a directory, not a log file")
        if stat.S_ISREG(mode):
            os.set_blocking(fd, True)
            log = open(fd, "rb", buffering=0, closefd=True)
            log.name = str(path)  # an OSError while reading names the log
            return log
        if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
            return Stream(fd, str(path), fifo=stat.S_ISFIFO(mode))
        raise BadInput(str(path), "a block device, not a log file" if stat.S_ISBLK(mode) else "not a log file")
    except BaseException:
        os.close(fd)
        raise


class Stream:
    """A log that is a stream, read to its end: at most MAX_STREAM bytes (then a BadInput line);
    a FIFO first waits, at most ``wait`` seconds, for a process that writes to it.  ``fd``: a
    descriptor it owns, or ``source``: a file object (standard input) it reads from."""

    def __init__(self, fd: int | None, name: str, fifo: bool = False, source: Log | None = None,
                 wait: float | None = None) -> None:
        self.fd, self.name, self.source = fd, name, source
        self.left = MAX_STREAM
        self._pending = b""
        if fd is not None:
            if fifo:
                self._pending = _wait_for_writer(fd, name, WRITER_WAIT if wait is None else wait)
            os.set_blocking(fd, True)  # from here on, a stream to its end (as standard input is)

    def readinto(self, buffer: memoryview, /) -> int:
        if self.left <= 0:
            raise BadInput(self.name, f"no end after {MAX_STREAM >> 30} GiB (a stream that does not end, such as "
                                      "/dev/zero): not read further")
        view = memoryview(buffer)[: self.left]
        if self._pending:
            n = len(self._pending)
            view[:n], self._pending = self._pending, b""
        elif self.source is not None:
            n = self.source.readinto(view) or 0
        elif self.fd is not None:
            n = os.readv(self.fd, [view])
        else:
            raise ValueError("I/O operation on closed file")  # as a closed file says
        self.left -= n
        return n

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _wait_for_writer(fd: int, name: str, wait: float) -> bytes:
    """Wait until a FIFO has a writer (the bytes read to learn it), or raise BadInput after
    ``wait`` seconds without one.  Linux reports a FIFO readable once data comes or a writer
    that came has gone; a writer that holds it open in silence is told by EAGAIN."""
    deadline = time.monotonic() + wait
    while True:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(left, 0))
        if ready:
            return b""
        if left <= 0:
            try:
                first = os.read(fd, 1)
            except BlockingIOError:  # a writer, silent so far: a server still starting
                return b""
            if first:
                return first
            raise BadInput(name, f"a FIFO that no process has open for writing (waited {wait:g} s)")


def text(raw: bytes) -> str:
    """A line's bytes as text: at most MAX_LINE of them, without the line ending; a progress
    bar's carriage returns keep the last state only."""
    line = (raw[:MAX_LINE] if len(raw) > MAX_LINE else raw).decode("utf-8", "replace").rstrip("\n")
    return _carriage(line) if "\r" in line else line


def _carriage(line: str) -> str:
    """A line with carriage returns: without the one that ends it, and after the last one left."""
    line = line.rstrip("\r\n")
    return line.rsplit("\r", 1)[-1] if "\r" in line else line


def chunks(stream: Log) -> Iterator[tuple[bytearray, int]]:
    """The stream in blocks (data, end): ``data[:end]`` is whole lines (the last line given an
    end), a long line cut to MAX_LINE.  One buffer is read into again and again (a line cut by
    the buffer's end moves to its front): use a block before asking for the next."""
    buf = bytearray(CHUNK + MAX_LINE + 1)
    view = memoryview(buf)
    have, skipping = 0, False  # bytes of a partial line at the front; inside a line longer than the cap
    while True:
        try:
            n = stream.readinto(view[have:have + CHUNK])
        except OSError as exc:  # /proc/self/mem, a device: said with the log's name (exit 2)
            name = getattr(stream, "name", None)
            raise OSError(exc.errno, exc.strerror, name if isinstance(name, str) else None) from None
        if not n:
            if have:
                buf[have] = 10  # b"\n"
                yield buf, have + 1
            return
        if skipping:  # the rest of a line longer than the cap: drop it up to its end
            nl = buf.find(b"\n", have, have + n)
            if nl < 0:
                continue
            buf[have:have + n - (nl - have)] = buf[nl:have + n]
            n -= nl - have
            skipping = False
        total = have + n
        end = buf.rfind(b"\n", 0, total) + 1
        if end:
            yield buf, end
        have = total - end
        if have > MAX_LINE:
            have, skipping = MAX_LINE, True
        buf[:have] = buf[end:end + have]


@lru_cache(maxsize=4)
def _matcher(needles: tuple[bytes, ...]) -> BytesAhoCorasick:
    """The needles compiled once: leftmost-first matching, whose SIMD search runs at several GB/s
    (the default, every overlapping match, cannot use it); a line holding any needle has a match."""
    from ahocorasick_rs import BytesAhoCorasick, MatchKind

    return BytesAhoCorasick(needles, matchkind=MatchKind.LeftmostFirst)


class Scan:
    """(number, text) of every line holding one of ``needles``, and of each line after one for
    as long as ``reader.open`` says (a ``TracebackReader``: inside a traceback; an attribute, not a
    call, read once a line); ``lines`` is the count of all lines once it has run."""

    def __init__(self, stream: Log, needles: tuple[bytes, ...], reader: TracebackReader) -> None:
        self.stream, self.needles, self.reader = stream, tuple(n for n in dict.fromkeys(needles) if n), reader
        self.lines = 0

    def __iter__(self) -> Iterator[tuple[int, str]]:
        reader = self.reader
        find = _matcher(self.needles).find_matches_as_indexes if self.needles else None
        for block, end in chunks(self.stream):
            hits = [start for _, start, _ in find(memoryview(block)[:end])] if find else []
            next_hit = 0  # the first of ``hits`` not passed yet
            pos = counted = 0
            number = self.lines  # lines before ``counted``
            while pos < end:
                if not reader.open:
                    while next_hit < len(hits) and hits[next_hit] < pos:
                        next_hit += 1
                    if next_hit == len(hits):
                        break
                    pos = block.rfind(b"\n", 0, hits[next_hit]) + 1
                    number += block.count(b"\n", counted, pos)
                    counted = pos
                nl = block.find(b"\n", pos)
                number += 1
                line = block[pos:nl if nl - pos <= MAX_LINE else pos + MAX_LINE].decode("utf-8", "replace")
                yield number, (_carriage(line) if "\r" in line else line)  # text(), without a call
                pos = counted = nl + 1
            self.lines = number + block.count(b"\n", counted, end)
