"""What a finding in a server's log says (``logs.match.Finding``), the one place for diagnose
and watch: its headline (what failed, raised where, in which project), the lines under it
(cause, fix, the ``patchkit apply`` to run, what to do or what it means, how often it was
seen), the findings of one log grouped under its name (piped: ``log:line: ...``), and a
finding in --json.

Every word from the log (and the log's name) is ``escaped`` in the lines: a log may hold escape
sequences, and these lines go to a terminal.  --json keeps the log's text as it is (JSON
escapes control characters itself).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

from patchkit.fixes.registry import FIXES, PROJECTS
from patchkit.logs.match import EFFECT, FAILURE, FIX, MODE, LogFinding
from patchkit.logs.origin import target
from patchkit.render.lines import Heading, Place
from patchkit.render.modes import by_name, mode_lines
from patchkit.render.modes import headline as headline_of
from patchkit.text import escaped

if TYPE_CHECKING:
    from patchkit.fixes.modes import WayOut


def project_of(path: str) -> str | None:
    """The project whose package a frame's path is in (its label)."""
    for name, project in PROJECTS.items():
        if target(path, name, project.source_root) is not None:
            return project.label
    return None


def gpus(findings: Sequence[LogFinding]) -> str:
    """The GPUs the failures found are of, as a summary names them: "SM121" where each is a 12.1 GPU's
    (ptxas refusing sm_121a), "SM120" where each is of SM12x as the fixes are (named for 12.0, as
    their titles are), "SM12x" for a mix."""
    names = {f"SM{f.cc.sm()}" if f.cc is not None else "SM120" for f in findings}
    return names.pop() if len(names) == 1 else "SM12x"


def headline(f: LogFinding) -> str:
    what = f.what.split("\n", 1)[0]
    if f.frame is None:
        return what
    project = project_of(f.frame.path) or (PROJECTS[f.project].label if f.project in PROJECTS else None)
    return f"{what} raised at {f.frame.path}:{f.frame.line}" + (f" ({project})" if project else "")


def details(f: LogFinding, started: int | None = None, python: str | None = None, applied: bool = False,
            ways: tuple[WayOut, ...] | None = None) -> list[str]:
    """What a finding says under its headline; ``started``: the line the server was ready at after
    it (a fix's warning that did not stop the start); ``python``: the server's interpreter, given;
    ``applied``: the fix is applied now where the server ran (the frames' files on this machine, else
    ``--python``'s environment); ``ways``: a
    failure mode's ways out that fit the releases installed (None: every one, the releases not known)."""
    out = []
    if f.kind is FIX:
        fix = FIXES[f.name]
        label = PROJECTS[f.project].label if f.project in PROJECTS else f.project
        out.append(f"cause: {f.cause} ({label} {f.releases})")
        out.append(f"fix: {fix.name}" + ("" if fix.default else " (opt-in)") + f": {fix.title}")
        option = [] if fix.default else ["--fix", fix.name]
        doctor = shlex.join(["patchkit", "doctor", *(["--python", python] if python else [])])
        if started is not None:
            out.append(f"started: the server was ready at line {started}, after this warning: it did not stop the start; "
                       f"whether this machine needs {fix.name}: {doctor}")
            return out + _mode(f) + _seen(f)
        if applied:
            out.append(f"applied: {fix.name} is applied there now, after this log was written: restart the server to run it")
            return out + _mode(f) + _seen(f)
        # --python names the environment the server ran, where the fix was judged: its command, not one for
        # the paths the log's frames show (which may be another machine's or a container's)
        runs = (shlex.join(["patchkit", "apply", "--python", python, *option]),) if python else f.commands
        out += [f"run: {command}" for command in runs]
        if not runs:
            out.append(f"run: patchkit apply for the {label} that wrote this log: the log does not show where it is "
                       "(diagnose --python EXE, the server's Python, names the command)")
    elif f.kind is FAILURE:
        out += [f"cause: {f.cause}", f"do: {f.advice}"]
    elif f.kind is MODE:
        mode = by_name(f.name)
        out += mode_lines(mode, ways) if mode is not None else []
    else:
        out.append(f"means: {f.advice}")
    return out + _mode(f) + _seen(f)


def _mode(f: LogFinding) -> list[str]:
    """The failure mode a fix's or a known failure's finding is of (a mode's own finding says it above)."""
    mode = by_name(f.mode) if f.mode is not None and f.kind is not MODE else None
    return [f"mode: {headline_of(mode)}"] if mode is not None else []


def _seen(f: LogFinding) -> list[str]:
    if f.count > 1:
        more = ", ".join(map(str, f.lines)) + (", ..." if f.count > len(f.lines) else "")
        return [f"seen {f.count} times: lines {more}"]
    return []


def finding_lines(label: str, findings: Sequence[LogFinding], under: Sequence[list[str]] = (),
                  started: Sequence[int | None] = (), python: str | None = None, applied: Sequence[bool] = (),
                  ways: Sequence[tuple[WayOut, ...] | None] = ()) -> list[str]:
    """The findings of one log, grouped under its name (piped: ``log:line: ...``); ``under``: the
    lines to add under each finding (as many as findings, or none); ``started``: for each, the line
    the server was ready at after it (None: not); ``applied``: for each, whether its fix is applied now
    where its frames' files are; ``ways``: for each, a failure mode's ways out for the releases installed."""
    if not findings:
        return []
    label = escaped(label)
    lines: list[str] = [Heading(label)]
    for i, f in enumerate(findings):
        head = escaped(headline(f))
        lines.append(Place(f"  {f.line}: {head}", label, f.line, head))
        more = details(f, started[i] if started else None, python, bool(applied) and applied[i], ways[i] if ways else None) + \
            (under[i] if under else [])
        lines += [Place(f"      {d}", label, f.line, d) for d in map(escaped, more)]
    return lines


def finding_json(f: LogFinding, kernels: list[dict[str, object]] | None = None) -> dict[str, object]:
    """A finding in --json: the log's text as it is, the line of the exception (``line``) and of
    its traceback's start (``traceback_line``, None for a log line); a known failure's ``kernels``:
    the files with no code for the GPUs behind it (None: not judged)."""
    return {
        "kind": {FIX: "fix", FAILURE: "known-failure", EFFECT: "effect", MODE: "failure-mode"}[f.kind],
        "mode": f.mode,
        "name": f.name,
        "line": f.line,
        "traceback_line": f.start,
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
    } | ({"kernels": kernels} if f.kind is FAILURE else {})
