"""A log read in one streaming pass, in bounded memory, at close to ``grep``'s speed.

The log is read in chunks of CHUNK bytes.  ``bytes.find`` (C speed) jumps to each line that
holds one of the needles; from there the lines are handed on one by one for as long as the
caller wants more (a traceback's frames and exception), then it jumps again.  Line numbers
are counted with ``bytes.count``.  A line keeps at most MAX_LINE bytes (the rest is skipped);
bytes that are not UTF-8 become U+FFFD, and NUL bytes and binary noise are read like text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from patchkit.errors import BadInput

CHUNK = 1 << 20  # a block the needles' passes find in the cache
MAX_LINE = 4096


def open_log(path: Path) -> BinaryIO:
    """The log at ``path`` opened for reading; a BadInput line when it cannot be."""
    try:
        if path.is_dir():
            raise BadInput(str(path), "is a directory, not a log file")
        return open(path, "rb", buffering=0)
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


def chunks(stream: BinaryIO) -> Iterator[tuple[bytearray, int]]:
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


def words(texts: tuple[bytes, ...], shortest: int = 6) -> tuple[bytes, ...]:
    """Fewer needles that still find every line holding one of ``texts``: greedily, the word
    (``shortest`` letters or more) that most texts share, the longest first; a text sharing none
    is kept whole, a longer needle being found faster.  Each needle is one pass of ``bytes.find`` over the log."""
    left = list(dict.fromkeys(texts))
    chosen: list[bytes] = []
    while left:
        counts: dict[bytes, int] = {}
        for t in left:
            for w in set(re.findall(rb"[A-Za-z_]{%d,}" % shortest, t)):
                counts[w] = counts.get(w, 0) + 1
        if not counts or max(counts.values()) == 1:  # a text alone: the whole of it (a longer needle is found faster)
            chosen += left
            break
        best = max(counts, key=lambda w: (counts[w], len(w)))
        chosen.append(best)
        left = [t for t in left if best not in t]
    return tuple(chosen)


class Scan:
    """(number, text) of every line holding one of ``needles``, and of each line after one for
    as long as ``more()`` says; ``lines`` is the count of all lines once it has run."""

    def __init__(self, stream: BinaryIO, needles: tuple[bytes, ...], more: Callable[[], bool]) -> None:
        self.stream, self.needles, self.more = stream, words(needles), more
        self.lines = 0

    def __iter__(self) -> Iterator[tuple[int, str]]:
        more = self.more
        for block, end in chunks(self.stream):
            nexts = {n: block.find(n, 0, end) for n in self.needles}
            pos = counted = 0
            number = self.lines  # lines before ``counted``
            while pos < end:
                if not more():
                    hit = -1
                    for needle, at in nexts.items():
                        if 0 <= at < pos:
                            nexts[needle] = at = block.find(needle, pos, end)
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
