"""What a command returns: lines for people, a document for --json, an exit code."""

from __future__ import annotations

from patchkit.errors import OK


def plan_fields(plan, dry_run: bool, set_aside: str | None) -> dict:
    """What apply's and revert's --json say of their plan (a ``plan.Plan``)."""
    return {"action": plan.action, "dry_run": dry_run, "source": plan.source, "notes": list(plan.notes), "set_aside": set_aside}


class Report:
    __slots__ = ("lines", "data", "exit_code")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.data: dict = {}
        self.exit_code = OK

    def add(self, line: str) -> None:
        self.lines.append(line)
