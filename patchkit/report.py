"""What a command returns: lines for people, a document for --json, an exit code."""

from __future__ import annotations

from patchkit.errors import OK
from patchkit.types import PATCHED


def plan_fields(plan, dry_run: bool, set_aside: str | None) -> dict:
    """What apply's and revert's --json say of their plan (a ``plan.Plan``)."""
    return {"action": plan.action, "dry_run": dry_run, "source": plan.source, "notes": list(plan.notes), "set_aside": set_aside}


def found_line(t: dict) -> str:
    """One thing a rule found (``rewrite.rules``' dict), as apply and status say it."""
    kind = t.get("kind", "dict-key")
    patched = t["status"] == PATCHED
    if kind == "backport":
        return f"{t['name']}: " + (f"{t['added_key']} applied {t['value']}" if patched else "already there, left alone")
    if kind == "predicate":
        return f"{t['name']}: " + (f"{t['added_key']} added" if patched else f"already has {t['added_key']}, left alone")
    if kind == "list-member":
        return f"{t['name']} ({t['scope']}): " + (
            f"member {t['added_key']!r} after {t['copied_from']!r}" if patched else f"already has {t['added_key']!r}, left alone")
    if patched:
        return f"{t['name']} ({t['scope']}): key {t['added_key']!r} = key {t['copied_from']!r}"
    return f"{t['name']} ({t['scope']}): already has key {t['added_key']!r}, left alone"


class Heading(str):
    """A line that heads a group of places (a file, a class of gates): printed on a terminal,
    left out when the output is piped (each place then names its file)."""

    __slots__ = ()


class Place(str):
    """A line that names a place in a file.  Its text is the grouped form, printed on a
    terminal under its Heading; piped, it prints as ``path:line: text``, as compilers and
    ripgrep do, for editors and grep."""

    __slots__ = ("path", "line", "text")

    def __new__(cls, grouped: str, path: str, line: int, text: str) -> "Place":
        place = super().__new__(cls, grouped)
        place.path, place.line, place.text = path, line, text
        return place

    def piped(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def render(lines: list[str], terminal: bool) -> list[str]:
    """The lines a report prints: grouped on a terminal, ``path:line: text`` when piped."""
    if terminal:
        return list(lines)
    return [line.piped() if isinstance(line, Place) else line for line in lines if not isinstance(line, Heading)]


class Report:
    __slots__ = ("lines", "data", "exit_code", "failure")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.data: dict = {}
        self.exit_code = OK
        self.failure: str | None = None  # a report that still fails (doctor with no GPU): its one line on stderr

    def add(self, line: str) -> None:
        self.lines.append(line)


def environment_line(report: Report, exe, installs, missing: list[str]) -> Report:
    """``report`` under a first line naming what ``--python EXE`` holds: each project judged
    (wheel or editable) and the known projects not installed (``not_installed`` in its document)."""
    from patchkit.fixes.registry import PROJECTS

    found = ", ".join(f"{PROJECTS[i.project].label} ({i.how})" for i in installs)
    absent = f"; not installed: {', '.join(PROJECTS[name].label for name in missing)}" if missing else ""
    report.lines.insert(0, f"{exe}: {found}{absent}")
    report.data["not_installed"] = list(missing)
    return report


def combine(command: str, reports: list[Report]) -> Report:
    """One report of a command run on several targets (the projects of one environment):
    their lines one after the other, their documents in ``targets``, the worst exit code."""
    if len(reports) == 1:
        return reports[0]
    out = Report()
    for i, r in enumerate(reports):
        out.lines += ([""] if i else []) + r.lines
    out.data = {"command": command, "targets": [r.data for r in reports]}
    out.exit_code = max(r.exit_code for r in reports)
    return out
