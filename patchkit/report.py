"""What a command returns: lines for people, a document for --json, an exit code."""

from __future__ import annotations

from patchkit.errors import OK


class Report:
    __slots__ = ("lines", "data", "exit_code")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.data: dict = {}
        self.exit_code = OK

    def add(self, line: str) -> None:
        self.lines.append(line)


def plural(n: int, noun: str) -> str:
    """``plural(1, "file")`` -> "1 file"; ``plural(2, "stale bytecode file")`` -> "2 stale bytecode files"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
