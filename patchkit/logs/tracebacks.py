"""Python tracebacks in a log, line by line: the frames and the exception of each part of a
chain, in bounded memory.

A traceback starts at ``Traceback (most recent call last):`` anywhere in a line (what comes
before it is the header: SGLang's ``[2026-02-11 10:03:02 TP3] Scheduler hit an exception: ``).
Its frames are ``  File "...", line N, in f`` (the indented source and caret lines under them
are skipped); the first line after them that is not indented is the exception (its log line is
kept: a finding points there).  Lines after the exception continue its message until a blank
line or a new record; a chained exception ("During handling of the above exception, ..." or
"The above exception was the direct cause ...") adds a part.  ``--- Logging error ---`` (the
logging module's handleError) marks the traceback after it as one of the logging module's own.

The reader is called for every line of a traceback (a log of a million tracebacks is a few
million calls): its state is plain attributes, and each line is looked at once.
"""

from __future__ import annotations

import re
from collections import deque

from patchkit.values import Record

HEADER = "Traceback (most recent call last):"
CHAINS = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
LOGGING_ERROR = "--- Logging error ---"
_FRAME = re.compile(r'\s*File "(?P<path>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.*))?$')
# A line that begins a record of its own: SGLang's "[2026-...", vLLM's and uvicorn's "INFO ...".
_RECORD = re.compile(r"\[\d|(DEBUG|INFO|WARNING|ERROR|CRITICAL)[ :]")
# A process's prefix on every line of its output: "(EngineCore pid=12) ", "[rank0]: ".
_PREFIX = re.compile(r"\([^()]*\) |\[rank\d+\]: ")
HEAD_FRAMES, TAIL_FRAMES = 8, 40  # the outermost and innermost frames kept of a part
MAX_PARTS, MAX_MESSAGE_LINES, MAX_MESSAGE = 16, 12, 4096
MAX_SEEN = 4096  # frame lines remembered
_FRAMES, _MESSAGE, _GAP, _CHAIN, _DONE = range(5)  # the states of the open part
_TAIL: tuple[()] = ()  # no frames past the head yet (a deque of the innermost ones once there are)


class Frame(Record):
    path: str
    line: int
    func: str


class TracebackPart(Record):
    frames: tuple[Frame, ...]  # outermost first (at most HEAD_FRAMES + TAIL_FRAMES of them)
    exception: str  # "KeyError: 12"; a message of several lines joined with "\n"
    line: int = 0  # the log line of the exception's first line (0: the log ended before it)


class Traceback(Record):
    line: int  # the log line of its first "Traceback (most recent call last):"
    header: str  # what came before that on the line
    parts: tuple[TracebackPart, ...]  # the first raised first, as Python prints a chain
    logging_error: bool  # printed by the logging module's handleError

    @property
    def last(self) -> str:
        """The exception that ended it (the last part's), its first line."""
        return self.parts[-1].exception.split("\n", 1)[0] if self.parts else ""

    @property
    def last_line(self) -> int:
        """The log line of that exception (of the traceback's start when there is none)."""
        return (self.parts[-1].line if self.parts else 0) or self.line


_new = tuple.__new__  # Part(...) and Traceback(...) without their Python-level __new__ (a million tracebacks)


def strip_prefix(text: str) -> str:
    match = _PREFIX.match(text)
    return text[match.end():] if match else text


class TracebackReader:
    """Feed it lines in order; it returns each traceback as it ends."""

    __slots__ = ("open", "_logging_error_at", "_line", "_header", "_parts", "_logging_error", "_state", "_frames",
                 "_tail", "_message", "_at", "_seen")
    open: bool
    _logging_error_at: int
    _line: int
    _header: str
    _parts: list[TracebackPart]
    _logging_error: bool
    _state: int
    _frames: list[Frame]
    _tail: deque[Frame] | tuple[()]
    _message: list[str]
    _at: int
    _seen: dict[str, Frame | None]

    def __init__(self) -> None:
        self.open = False  # inside a traceback: the next line may belong to it
        self._logging_error_at = -2
        self._seen = {}

    def feed(self, number: int, text: str) -> Traceback | None:
        """The traceback that this line ends (the line itself is read afresh after it), if any."""
        if text[:1] in "([":
            text = strip_prefix(text)
        ended = None
        if self.open:
            if self._header and text.startswith(self._header):  # a logger that writes its record's prefix on
                text = text[len(self._header):]  # every line of the traceback (vLLM's "ERROR 01-12 01:09:14 [core.py:708] ")
            if self._state == _FRAMES:  # the most lines of a traceback: read here, without a call
                frame = self._seen.get(text, ...) if "File" in text else None
                if frame is ...:  # not seen before
                    frame = self._frame(text)
                if frame:
                    frames = self._frames
                    frames.append(frame)
                    if len(frames) > HEAD_FRAMES:
                        if not self._tail:
                            self._tail = deque(maxlen=TAIL_FRAMES)
                        self._tail.append(frames.pop())
                elif text and not text[0].isspace():  # source and caret lines are indented
                    self._message, self._at, self._state = [text[:MAX_MESSAGE]], number, _MESSAGE
                return None
            if self._take(text):
                return None
            ended = self.finish()  # and the line is read afresh
        at = text.find(HEADER)
        if at >= 0:
            self.open, self._line, self._header, self._parts = True, number, text[:at], []
            self._logging_error = self._logging_error_at == number - 1
            self._new_part()
        elif text.strip() == LOGGING_ERROR:
            self._logging_error_at = number
        return ended

    def _frame(self, text: str) -> Frame | None:
        """The frame a ``File "..."`` line names (remembered: every rank prints the same frames)."""
        match = _FRAME.match(text)
        frame = Frame(match["path"], int(match["line"]), match["func"] or "") if match else None
        if len(self._seen) >= MAX_SEEN:
            self._seen.clear()
        self._seen[text] = frame
        return frame

    def finish(self) -> Traceback | None:
        """End the open traceback here (the log ended, or paused after its exception)."""
        if not self.open:
            return None
        self.open = False
        if self._state != _DONE:
            self._end_part()
        return _new(Traceback, (self._line, self._header, tuple(self._parts), self._logging_error))

    @property
    def complete(self) -> bool:
        """The open traceback has its exception: it may end at any line now."""
        return self.open and self._state in (_MESSAGE, _GAP)

    # -- states -------------------------------------------------------------------------

    def _take(self, text: str) -> bool:
        """Whether a line after the frames belongs to the open traceback (and read it)."""
        state = self._state
        stripped = text.strip()
        if stripped in CHAINS:
            self._state = _CHAIN
            return True
        if state == _CHAIN:
            if not stripped:
                return True
            if HEADER in text:
                self._end_part()
                self._new_part()
                return True
            return False
        if state == _MESSAGE:
            if not stripped:
                self._state = _GAP
                return True
            if HEADER in text or stripped == LOGGING_ERROR or stripped == "Call stack:" or _RECORD.match(text) \
                    or _FRAME.match(text) or len(self._message) >= MAX_MESSAGE_LINES:
                return False
            self._message.append(text[:MAX_MESSAGE])
            return True
        return not stripped  # _GAP: blank lines until a chain or the end

    def _new_part(self) -> None:
        self._frames, self._tail, self._message, self._at, self._state = [], _TAIL, [], 0, _FRAMES

    def _end_part(self) -> None:
        if self._state == _DONE:
            return
        frames = tuple(self._frames) + tuple(self._tail) if self._tail else tuple(self._frames)
        message = self._message[0] if len(self._message) == 1 else "\n".join(self._message)[:MAX_MESSAGE]
        self._parts.append(_new(TracebackPart, (frames, message, self._at)))
        if len(self._parts) > MAX_PARTS:
            del self._parts[1]  # keep the first raised and the latest ones
        self._state = _DONE
