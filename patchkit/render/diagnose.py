"""What ``patchkit diagnose`` says (``commands.diagnose.DiagnoseResult``): the findings of each
log grouped under its name (``render/findings.py``), under a missing kernel image the files
with no code for the GPUs, then one line: how many known failures, of which GPUs (``findings.gpus``), in which logs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.kernels.compat import UNKNOWN
from patchkit.logs.match import EFFECT
from patchkit.render.findings import finding_json, finding_lines, gpus
from patchkit.render.kernels import file_json, verdict
from patchkit.render.lines import render
from patchkit.text import escaped, plural

if TYPE_CHECKING:
    from patchkit.commands.diagnose import CodeBehind, DiagnoseResult, Gpus


def to_text(r: DiagnoseResult, terminal: bool) -> list[str]:
    lines: list[str] = []
    for log in r.logs:
        lines += finding_lines(log.label, log.findings, [code_lines(c) for c in log.code],
                               [log.ready if log.started_after(f) else None for f in log.findings], r.python, log.applied,
                               log.ways)
    failures, effects = r.failures, r.effects
    where = escaped(r.logs[0].label) if len(r.logs) == 1 else plural(len(r.logs), "log")
    if failures:
        found = [f for log in r.logs for f in log.findings if f.kind is not EFFECT and not log.started_after(f)]
        lines.append(f"{plural(failures, f'known {gpus(found)} failure')} in {where}" + (f"; {plural(effects, 'warning')} explained" if effects else ""))
    elif effects:
        lines.append(f"no known SM120 failure in {where}; {plural(effects, 'warning')} explained")
    else:
        tracebacks = sum(log.tracebacks for log in r.logs)
        lines.append(f"nothing patchkit knows was found in {where} ({plural(tracebacks, 'traceback')}, "
                     f"{plural(sum(log.lines for log in r.logs), 'line')} read)")
    return render(lines, terminal)


def gpus_words(g: Gpus) -> str:
    """The GPUs the code was judged for (``commands.diagnose.Gpus``)."""
    if g.seen:
        return f"this machine's GPUs ({', '.join(cc.smi_text() for cc in g.ccs)}, nvidia-smi)"
    return f"any 12.x GPU (nvidia-smi: {g.why})" if g.why is not None else "any 12.x GPU (nvidia-smi is not on PATH)"


def code_lines(c: CodeBehind | None) -> list[str]:
    """What a finding says of the compiled code behind it (``commands.diagnose.CodeBehind``; None:
    nothing, as for every finding but a missing kernel image from an installed package)."""
    if c is None:
        return []
    missing = c.missing()
    if not c.found:
        return [f"files: no distribution in that environment lists {c.top}/ in its RECORD"]
    words = gpus_words(c.gpus)
    if not missing:
        unknown = [Path(x.shown).name for d in c.found for x in d.files if any(fit.runs == UNKNOWN for fit in x.fits)]
        if unknown:  # kernels loaded another way, or a module without one: no file lacks code, some cannot be told
            return [f"files: no shared object of {', '.join(d.label for d in c.found)} lacks code for {words}; "
                    f"cannot tell for {', '.join(unknown)} (kernels loaded another way)"]
        return [f"files: every shared object of {', '.join(d.label for d in c.found)} has code for {words}"]
    return [f"files with no code for {words}:"] + \
        [f"  {x.shown} ({d.label}): {verdict(x)}" + (f" ({x.known.what})" if x.known else "") for d, x in missing]


def to_json(r: DiagnoseResult) -> dict[str, object]:
    return {
        "command": "diagnose",
        "logs": [{"log": log.label, "lines": log.lines, "tracebacks": log.tracebacks,
                  "ready_line": log.ready,
                  "findings": [finding_json(f, _files(c)) | {"started_after": log.started_after(f), "applied_now": now}
                               for f, c, now in zip(log.findings, log.code, log.applied, strict=True)]} for log in r.logs],
        "failures": r.failures,
        "effects": r.effects,
    }


def _files(c: CodeBehind | None) -> list[dict[str, object]] | None:
    return None if c is None else [file_json(x, d.dist) for d, x in c.missing()]
