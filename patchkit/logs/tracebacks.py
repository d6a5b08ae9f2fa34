"""Python tracebacks in a log, line by line: the frames and the exception of each part of a
chain, in bounded memory.

A traceback starts at ``Traceback (most recent call last):`` anywhere in a line (what comes
before it is the header: SGLang's ``[2026-02-11 10:03:02 TP3] Scheduler hit an exception: ``).
Its frames are ``  File "...", line N, in f`` (the indented source and caret lines under them
are skipped); the first line after them that is not indented is the exception.  Lines after
the exception continue its message until a blank line or a new record; a chained exception
("During handling of the above exception, ..." or "The above exception was the direct
cause ...") adds a part.  ``--- Logging error ---`` (the logging module's handleError) marks
the traceback after it as one of the logging module's own.
"""

from __future__ import annotations

import re
from collections import deque
from typing import NamedTuple

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


class Frame(NamedTuple):
    path: str
    line: int
    func: str


class Part(NamedTuple):
    frames: tuple[Frame, ...]  # outermost first (at most HEAD_FRAMES + TAIL_FRAMES of them)
    exception: str  # "KeyError: 12"; a message of several lines joined with "\n"


class Traceback(NamedTuple):
    line: int  # the log line of its first "Traceback (most recent call last):"
    header: str  # what came before that on the line
    parts: tuple[Part, ...]  # the first raised first, as Python prints a chain
    logging_error: bool  # printed by the logging module's handleError

    @property
    def last(self) -> str:
        """The exception that ended it (the last part's), its first line."""
        return self.parts[-1].exception.split("\n", 1)[0] if self.parts else ""


def strip_prefix(text: str) -> str:
    match = _PREFIX.match(text)
    return text[match.end():] if match else text


class TracebackReader:
    """Feed it lines in order; it returns each traceback as it ends."""

    def __init__(self) -> None:
        self._open: dict | None = None
        self._logging_error_at = -2

    @property
    def open(self) -> bool:
        """Inside a traceback: the next line may belong to it."""
        return self._open is not None

    def feed(self, number: int, text: str) -> Traceback | None:
        """The traceback that this line ends (the line itself is read afresh after it), if any."""
        text = strip_prefix(text)
        ended = None
        if self._open is not None and not self._take(number, text):
            ended = self.finish()
        if self._open is None:
            self._start(number, text)
        return ended

    def finish(self) -> Traceback | None:
        """End the open traceback here (the log ended, or paused after its exception)."""
        tb, self._open = self._open, None
        if tb is None:
            return None
        self._end_part(tb)
        return Traceback(tb["line"], tb["header"], tuple(tb["parts"]), tb["logging_error"])

    @property
    def complete(self) -> bool:
        """The open traceback has its exception: it may end at any line now."""
        return self._open is not None and self._open["state"] in ("message", "gap")

    # -- states -------------------------------------------------------------------------

    def _start(self, number: int, text: str) -> None:
        if text.strip() == LOGGING_ERROR:
            self._logging_error_at = number
            return
        at = text.find(HEADER)
        if at < 0:
            return
        self._open = {"line": number, "header": text[:at], "parts": [], "state": "frames",
                      "logging_error": self._logging_error_at == number - 1}
        self._new_part(self._open)

    def _take(self, number: int, text: str) -> bool:
        """Whether the line belongs to the open traceback (and read it)."""
        tb = self._open
        state, stripped = tb["state"], text.strip()
        if state == "frames":
            frame = _FRAME.match(text)
            if frame:
                tb["frames"].append(Frame(frame["path"], int(frame["line"]), frame["func"] or ""))
                if len(tb["frames"]) > HEAD_FRAMES:
                    tb["tail"].append(tb["frames"].pop())
                return True
            if not stripped or text[0].isspace():
                return True  # source and caret lines, "[Previous line repeated ...]"
            tb["message"], tb["state"] = [text[:MAX_MESSAGE]], "message"
            return True
        if stripped in CHAINS:
            tb["state"] = "chain"
            return True
        if state == "chain":
            if not stripped:
                return True
            if HEADER in text:
                self._end_part(tb)
                self._new_part(tb)
                return True
            return False
        if state == "message":
            if not stripped:
                tb["state"] = "gap"
                return True
            if HEADER in text or stripped == LOGGING_ERROR or stripped == "Call stack:" or _RECORD.match(text) \
                    or _FRAME.match(text) or len(tb["message"]) >= MAX_MESSAGE_LINES:
                return False
            tb["message"].append(text[:MAX_MESSAGE])
            return True
        return not stripped  # "gap": blank lines until a chain or the end

    def _new_part(self, tb: dict) -> None:
        tb.update(frames=[], tail=deque(maxlen=TAIL_FRAMES), message=[], state="frames")

    def _end_part(self, tb: dict) -> None:
        if tb["state"] == "done":
            return
        frames = tuple(tb["frames"]) + tuple(tb["tail"])
        tb["parts"].append(Part(frames, "\n".join(tb["message"])[:MAX_MESSAGE]))
        if len(tb["parts"]) > MAX_PARTS:
            del tb["parts"][1]  # keep the first raised and the latest ones
        tb["state"] = "done"
