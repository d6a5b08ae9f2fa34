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
