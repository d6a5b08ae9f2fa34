"""``patchkit diagnose [LOG ...]``: the failures patchkit knows, found in a server's log.

Each log (``-``, or none: standard input) is read in one streaming pass
(``patchkit.logs.read``); every traceback and warning a signature matches is reported, however
deep under later noise: where in the log, what failed in which file and line of which
project, and the fix with the one ``patchkit apply`` that applies it to the SGLang the
traceback ran (``patchkit.logs.match``).  Known failures no patch fixes say what to do
instead; explained warnings say what they mean.

Exit 1 when a known SM120 failure was found, 0 when none (a crash patchkit does not know is
not claimed), 2 for a log that cannot be read.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

from patchkit.errors import OK, PROBLEMS
from patchkit.logs.match import EFFECT, FAILURE, FIX, Finding, Matcher, needles
from patchkit.logs.origin import target
from patchkit.logs.read import Scan, open_log
from patchkit.report import Heading, Place, Report
from patchkit.text import plural

STDIN = "<stdin>"


def diagnose(logs: list[str], stdin: BinaryIO | None = None) -> Report:
    """Diagnose each of ``logs`` (paths; ``-`` is standard input, as is an empty list)."""
    logs = logs or ["-"]
    streams = [(STDIN, stdin or sys.stdin.buffer) if log == "-" else (log, open_log(Path(log))) for log in logs]
    results = []
    try:
        for label, stream in streams:
            matcher = Matcher()
            scan = Scan(stream, needles(matcher.data), lambda m=matcher: m.reader.open)
            for number, text in scan:
                matcher.feed(number, text)
            matcher.finish()
            results.append((label, scan.lines, matcher))
    finally:
        for label, stream in streams:
            if label != STDIN:
                stream.close()
    report = Report()
    for label, _, matcher in results:
        report.lines += finding_lines(label, matcher.findings)
    findings = [f for _, _, m in results for f in m.findings]
    failures = sum(f.kind != EFFECT for f in findings)
    effects = len(findings) - failures
    where = results[0][0] if len(results) == 1 else plural(len(results), "log")
    if failures:
        report.add(f"{plural(failures, 'known SM120 failure')} in {where}" + (f"; {plural(effects, 'warning')} explained" if effects else ""))
    elif effects:
        report.add(f"no known SM120 failure in {where}; {plural(effects, 'warning')} explained")
    else:
        tracebacks = sum(m.tracebacks for _, _, m in results)
        report.add(f"nothing patchkit knows was found in {where} ({plural(tracebacks, 'traceback')}, "
                   f"{plural(sum(n for _, n, _ in results), 'line')} read)")
    report.exit_code = PROBLEMS if failures else OK
    report.data = {
        "command": "diagnose",
        "logs": [{"log": label, "lines": n, "tracebacks": m.tracebacks, "findings": [finding_json(f) for f in m.findings]}
                 for label, n, m in results],
        "failures": failures,
        "effects": effects,
    }
    return report


def project_of(path: str) -> str | None:
    """The project whose package a frame's path is in (its label)."""
    from patchkit.fixes.registry import PROJECTS

    for name, project in PROJECTS.items():
        if target(path, name, project.source_root) is not None:
            return project.label
    return None


def headline(f: Finding) -> str:
    what = f.what.split("\n", 1)[0]
    if f.frame is None:
        return what
    from patchkit.fixes.registry import PROJECTS

    project = project_of(f.frame.path) or (PROJECTS[f.project].label if f.project in PROJECTS else None)
    return f"{what} raised at {f.frame.path}:{f.frame.line}" + (f" ({project})" if project else "")


def details(f: Finding) -> list[str]:
    """What a finding says under its headline."""
    from patchkit.fixes.registry import FIXES, PROJECTS

    out = []
    if f.kind == FIX:
        fix = FIXES[f.name]
        label = PROJECTS[f.project].label if f.project in PROJECTS else f.project
        out.append(f"cause: {f.cause} ({label} {f.releases})")
        out.append(f"fix: {fix.name}" + ("" if fix.default else " (opt-in)") + f": {fix.title}")
        option = "" if fix.default else f" --fix {fix.name}"
        runs = f.commands or (f"patchkit apply PATH{option} (the checkout that wrote this log), or patchkit apply --python EXE{option} (its environment)",)
        out += [f"run: {command}" for command in runs]
    elif f.kind == FAILURE:
        out += [f"cause: {f.cause}", f"do: {f.advice}"]
    else:
        out.append(f"means: {f.advice}")
    if f.count > 1:
        more = ", ".join(map(str, f.lines)) + (", ..." if f.count > len(f.lines) else "")
        out.append(f"seen {f.count} times: lines {more}")
    return out


def finding_lines(label: str, findings: list[Finding]) -> list[str]:
    """The findings of one log, grouped under its name (piped: ``log:line: ...``)."""
    if not findings:
        return []
    lines: list[str] = [Heading(label)]
    for f in findings:
        head = headline(f)
        lines.append(Place(f"  {f.line}: {head}", label, f.line, head))
        lines += [Place(f"      {d}", label, f.line, d) for d in details(f)]
    return lines


def finding_json(f: Finding) -> dict:
    return {
        "kind": {FIX: "fix", FAILURE: "known-failure", EFFECT: "effect"}[f.kind],
        "name": f.name,
        "line": f.line,
        "lines": list(f.lines),
        "count": f.count,
        "what": f.what,
        "file": f.frame.path if f.frame else None,
        "file_line": f.frame.line if f.frame else None,
        "function": f.frame.func if f.frame else None,
        "project": f.project,
        "releases": f.releases or None,
        "cause": f.cause or None,
        "advice": f.advice or None,
        "commands": list(f.commands),
    }
