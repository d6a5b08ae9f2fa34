"""What ``patchkit watch`` says (``commands.watch.WatchResult``): what the log said that patchkit
knows (``render/findings.py``), then how the watch ended: ready after N s at its line, crashed
(on what, and whether patchkit knows it), or timed out (the phase the start reached and its last
lines, each a place in the log).  ``progress_line``: what it reports as it goes, on a terminal."""

from __future__ import annotations

from patchkit.commands.watch import CRASHED, READY, STARTED_OVER, WAITING, Progress, WatchResult
from patchkit.logs.match import EFFECT
from patchkit.render.findings import finding_json, finding_lines, gpus
from patchkit.render.lines import Heading, Place, render
from patchkit.render.modes import mode_lines
from patchkit.text import escaped, plural


def progress_line(p: Progress) -> str:
    """A ``commands.watch.Progress`` in words."""
    shown = escaped(p.log)
    if p.kind is WAITING:
        return f"waiting for {shown} to appear"
    if p.kind is STARTED_OVER:
        return f"{p.seconds:.0f} s: {shown} started over (truncated or replaced); reading it from its start"
    return f"{p.seconds:.0f} s: {p.phase} (line {p.line})"  # PHASE


def _restarts(restarts: int) -> str:
    return f" (the log started over {plural(restarts, 'time')})" if restarts else ""


def to_text(r: WatchResult, terminal: bool) -> list[str]:
    lines = finding_lines(r.log, r.findings, ways=r.ways)
    shown = escaped(r.log)
    if r.outcome == READY:
        lines.append(f"ready after {r.seconds:.0f} s: {shown} line {r.line}{_restarts(r.restarts)}")
    elif r.outcome == CRASHED:
        tb = r.traceback
        what = (f"{escaped(tb.last) or 'a traceback'} (line {tb.last_line})" if tb is not None
                else "a child process failed (SGLang's SIGQUIT handler)")
        found = [f for f in r.findings if f.kind is not EFFECT]
        known = f"{plural(r.failures, f'known {gpus(found)} failure')} above" if r.failures else "nothing patchkit knows was found"
        lines.append(f"crashed after {r.seconds:.0f} s: {what}{_restarts(r.restarts)}; {known}")
    elif not r.exists:
        lines.append(f"timed out after {r.seconds:g} s: {shown} does not exist")
    else:
        reached = f"; the start reached: {r.phase[0]} (line {r.phase[1]})" if r.phase else ""
        lines.append(f"timed out after {r.seconds:g} s: no ready line in {shown}{reached}{_restarts(r.restarts)}")
        if r.last:
            lines.append(Heading(f"last lines of {shown}:"))
            lines += [Place(f"  {n}: {escaped(text)}", shown, n, escaped(text)) for n, text in r.last]
        if r.hangs:
            whose = "its installed releases are exposed to" if r.judged else "that stop a start there (--python EXE: only those its releases are exposed to)"
            lines.append(f"a hang prints nothing: the failure modes {whose}:")
            for mode in r.hangs:
                lines += [f"  {line}" for line in mode_lines(mode)]
    return render(lines, terminal)


def to_json(r: WatchResult) -> dict[str, object]:
    extra: dict[str, object]
    if r.outcome == READY:
        extra = {"line": r.line}
    elif r.outcome == CRASHED:
        tb = r.traceback
        extra = {"line": r.line, "traceback_line": tb.line if tb else None, "exception": tb.last if tb else None}
    else:
        extra = {"phase": r.phase[0] if r.phase else None, "last_lines": [{"line": n, "text": t} for n, t in r.last],
                 "hangs": [m.name for m in r.hangs], "hangs_judged": r.judged}
    return {"command": "watch", "log": r.log, "outcome": r.outcome, "seconds": round(r.seconds, 1),
            "restarts": r.restarts, **extra, "findings": [finding_json(f) for f in r.findings]}
