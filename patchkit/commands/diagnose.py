"""``patchkit diagnose [LOG ...]``: the failures patchkit knows, found in a server's log.

Each log (``-``, or none: standard input) is read in one streaming pass
(``patchkit.logs.read``); every traceback and warning a signature matches is reported, however
deep under later noise: where in the log, what failed in which file and line of which
project, and the fix with the one ``patchkit apply`` that applies it to the SGLang the
traceback ran (``patchkit.logs.match``).  Known failures no patch fixes say what to do
instead; explained warnings say what they mean.

A finding points at the exception's line (``KeyError: 12``), not at the traceback's first line.
Text from the log is printed ``escaped`` (control characters as ``cat -v`` shows them) and every
command printed is shell-quoted; ``--json`` keeps the text as it is (JSON escapes it).

Exit 1 when a known SM120 failure was found, 0 when none (a crash patchkit does not know is
not claimed), 2 for a log that cannot be read (a stream that does not end, a FIFO nothing writes
to: ``patchkit.logs.read``).
"""

from __future__ import annotations

import io
import os
import stat
import sys
from pathlib import Path
from typing import BinaryIO

from patchkit.errors import OK, PROBLEMS
from patchkit.logs.match import EFFECT, FAILURE, FIX, Finding, Matcher, needles
from patchkit.logs.origin import target
from patchkit.logs.read import Scan, Stream, open_log
from patchkit.report import Heading, Place, Report
from patchkit.text import escaped, plural

STDIN = "<stdin>"


def diagnose(logs: list[str], stdin: BinaryIO | None = None, python: str | None = None) -> Report:
    """Diagnose each of ``logs`` (paths; ``-`` is standard input, as is an empty list).  ``python``: the
    interpreter whose environment the server ran (else the site-packages folder of the frames)."""
    results = []
    for log in logs or ["-"]:
        label, stream = (STDIN, _stdin(stdin)) if log == "-" else (log, open_log(Path(log)))
        try:
            matcher = Matcher()
            scan, feed = Scan(stream, needles(matcher.data), matcher.reader), matcher.feed
            for number, text in scan:
                feed(number, text)
            matcher.finish()
            results.append((label, scan.lines, matcher))
        finally:
            if label != STDIN:
                stream.close()
    report = Report()
    code = KernelsBehind(python)
    for label, _, matcher in results:
        report.lines += finding_lines(label, matcher.findings, code.lines)
    findings = [f for _, _, m in results for f in m.findings]
    failures = sum(f.kind != EFFECT for f in findings)
    effects = len(findings) - failures
    where = escaped(results[0][0]) if len(results) == 1 else plural(len(results), "log")
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
        "logs": [{"log": label, "lines": n, "tracebacks": m.tracebacks, "findings": [finding_json(f, code.files(f)) for f in m.findings]}
                 for label, n, m in results],
        "failures": failures,
        "effects": effects,
    }
    return report


def _stdin(stdin: BinaryIO | None) -> BinaryIO:
    """Standard input, bounded as any stream is unless it is a regular file (``< server.log``)."""
    stream = stdin or sys.stdin.buffer
    try:
        regular = stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # not a file descriptor (a test's bytes)
        regular = False
    return stream if regular else Stream(None, STDIN, source=stream)


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


def finding_lines(label: str, findings: list[Finding], more=None) -> list[str]:
    """The findings of one log, grouped under its name (piped: ``log:line: ...``); ``more(f)``: lines to add
    under a finding.  Every word from the log (and the log's name) is ``escaped``: a log may hold escape
    sequences, and these lines go to a terminal."""
    if not findings:
        return []
    label = escaped(label)
    lines: list[str] = [Heading(label)]
    for f in findings:
        head = escaped(headline(f))
        lines.append(Place(f"  {f.line}: {head}", label, f.line, head))
        lines += [Place(f"      {d}", label, f.line, d) for d in map(escaped, details(f) + (more(f) if more else []))]
    return lines


class KernelsBehind:
    """The shared objects behind a missing kernel image: those of the distribution that installed the
    package its frame names (in the frame's site-packages, or ``--python``'s), that have no code for the
    GPUs nvidia-smi reports, or, when it does not answer, for 12.0 or 12.1.  Read when its environment
    is here to read; said nothing of otherwise."""

    def __init__(self, python: str | None) -> None:
        self.sites = None
        if python is not None:
            from patchkit.targets.environment import interpreter, site_packages_of

            self.sites = site_packages_of(interpreter(python))
        self._ccs: tuple[list, str] | None = None
        self._found: dict = {}

    def ccs(self) -> tuple[list, str]:
        if self._ccs is None:
            import shutil

            from patchkit.errors import BadInput

            self._ccs = ([(12, 0), (12, 1)], "any 12.x GPU (nvidia-smi is not on PATH)")
            if shutil.which("nvidia-smi") is not None:
                from patchkit.gpus.smi import machine

                try:
                    m = machine()
                    self._ccs = (m.ccs(), f"this machine's GPUs ({', '.join(f'{a}.{b}' for a, b in m.ccs())}, nvidia-smi)")
                except BadInput as exc:
                    self._ccs = ([(12, 0), (12, 1)], f"any 12.x GPU (nvidia-smi: {exc.reason})")
        return self._ccs

    def _judge(self, f: Finding):
        from patchkit.logs.match import FAILURE
        from patchkit.logs.origin import site_of

        where = site_of(f.origin) if f.kind == FAILURE and f.origin else None
        if where is None:
            return None
        if where not in self._found:
            site, top = where
            sites = self.sites if self.sites is not None else [Path(site)]
            if not any(s.is_dir() for s in sites):
                self._found[where] = None
            else:
                from patchkit.judge.kernels import installed_code

                ccs, words = self.ccs()
                self._found[where] = (installed_code(sites, ccs, only=top), words)
        return self._found[where]

    def lines(self, f: Finding) -> list[str]:
        judged = self._judge(f)
        if judged is None:
            return []
        found, words = judged
        missing = [(d, x) for d in found for x in d.files if x.missing]
        if not found:
            return [f"files: no distribution in that environment lists {site_of_top(f)}/ in its RECORD"]
        if not missing:
            return [f"files: every shared object of {', '.join(d.label for d in found)} has code for {words}"]
        out = [f"files with no code for {words}:"]
        out += [f"  {x.shown} ({d.label}): {x.verdict()}" + (f" ({x.known.what})" if x.known else "") for d, x in missing]
        return out

    def files(self, f: Finding) -> list[dict] | None:
        judged = self._judge(f)
        return None if judged is None else [x.to_json(d.dist) for d in judged[0] for x in d.files if x.missing]


def site_of_top(f: Finding) -> str:
    from patchkit.logs.origin import site_of

    where = site_of(f.origin or "")
    return where[1] if where else "?"


def finding_json(f: Finding, kernels: list[dict] | None = None) -> dict:
    """A finding in --json: the log's text as it is (JSON escapes control characters itself), the line
    of the exception (``line``) and of its traceback's start (``traceback_line``, None for a log line)."""
    return {
        "kind": {FIX: "fix", FAILURE: "known-failure", EFFECT: "effect"}[f.kind],
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
    } | ({"kernels": kernels} if f.kind == FAILURE else {})
