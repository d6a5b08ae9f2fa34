"""What a command returns: lines for people, a document for --json, an exit code."""

from __future__ import annotations

from dataclasses import dataclass, field

from patchkit.errors import OK


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)
    exit_code: int = OK

    def add(self, line: str) -> None:
        self.lines.append(line)
