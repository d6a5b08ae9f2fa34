"""A log read in one streaming pass, in bounded memory, at close to ``grep``'s speed.

The log is read in chunks of CHUNK bytes.  ``bytes.find`` (C speed) jumps to each line that
holds one of the needles; from there the lines are handed on one by one for as long as the
caller wants more (a traceback's frames and exception), then it jumps again.  Line numbers
are counted with ``bytes.count``.  A line keeps at most MAX_LINE bytes (the rest is skipped);
bytes that are not UTF-8 become U+FFFD, and NUL bytes and binary noise are read like text.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from patchkit.errors import BadInput

CHUNK = 1 << 20
MAX_LINE = 4096


def open_log(path: Path) -> BinaryIO:
    """The log at ``path`` opened for reading; a BadInput line when it cannot be."""
    try:
        if path.is_dir():
            raise BadInput(str(path), "is a directory, not a log file")
        return open(path, "rb")
    except FileNotFoundError:
        raise BadInput(str(path), "no such file") from None
    except PermissionError:
        raise BadInput(str(path), "permission denied") from None
    except OSError as exc:
        raise BadInput(str(path), exc.strerror or str(exc)) from None


def text(raw: bytes) -> str:
    """A line's bytes as text: at most MAX_LINE of them, without the line ending; a progress
    bar's carriage returns keep the last state only."""
    line = raw[:MAX_LINE].rstrip(b"\r\n").decode("utf-8", "replace")
    return line.rsplit("\r", 1)[-1] if "\r" in line else line


def chunks(stream: BinaryIO) -> Iterator[bytes]:
    """The stream in blocks of whole lines (the last one given an end), a long line cut to MAX_LINE."""
    carry, skipping = b"", False
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            if carry:
                yield carry + b"\n"
            return
        if skipping:  # the rest of a line longer than the cap
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk, skipping = chunk[nl:], False
        data = carry + chunk
        end = data.rfind(b"\n") + 1
        if end == 0:
            carry = data
            if len(carry) > MAX_LINE:
                carry, skipping = carry[:MAX_LINE], True
            continue
        carry = data[end:]
        if len(carry) > MAX_LINE:
            carry, skipping = carry[:MAX_LINE], True
        yield data[:end]


class Scan:
    """(number, text) of every line holding one of ``needles``, and of each line after one for
    as long as ``more()`` says; ``lines`` is the count of all lines once it has run."""

    def __init__(self, stream: BinaryIO, needles: tuple[bytes, ...], more: Callable[[], bool]) -> None:
        self.stream, self.needles, self.more = stream, needles, more
        self.lines = 0

    def __iter__(self) -> Iterator[tuple[int, str]]:
        more = self.more
        for block in chunks(self.stream):
            end = len(block)
            nexts = {n: block.find(n) for n in self.needles}
            pos = counted = 0
            number = self.lines  # lines before ``counted``
            while pos < end:
                if not more():
                    hit = -1
                    for needle, at in nexts.items():
                        if 0 <= at < pos:
                            nexts[needle] = at = block.find(needle, pos)
                        if at >= 0 and (hit < 0 or at < hit):
                            hit = at
                    if hit < 0:
                        break
                    pos = block.rfind(b"\n", 0, hit) + 1
                    number += block.count(b"\n", counted, pos)
                    counted = pos
                nl = block.find(b"\n", pos)
                number += 1
                yield number, text(block[pos:nl])
                pos = counted = nl + 1
            self.lines = number + block.count(b"\n", counted, end)
