"""``--to-cc auto`` on apply, verify and generate: the keys this machine's GPUs need.

The GPUs come from ``nvidia-smi`` (``patchkit.gpus``); their ccs are spelled the way each
project keys them (12 for SGLang, "12.0" or "12.1" for vLLM: ``here.spelled``).  A cc a
release already holds (an H200's 9), or the one it copies from, needs nothing: that is
said, and the command exits 0.  No nvidia-smi or no GPU is one BadInput line (exit 2).
"""

from __future__ import annotations

from patchkit.errors import BadInput
from patchkit.fixes.registry import Project, default_fixes, fixes_for
from patchkit.gpus.smi import Machine, machine as read_machine
from patchkit.commands.here import fix_here, spelled
from patchkit.report import Report, combine
from patchkit.rewrite.capability import same
from patchkit.targets.session import Session


def gpus_line(m: Machine) -> str:
    kinds: dict[tuple, int] = {}
    for g in m.gpus:
        kinds[(g.name, g.cc_text())] = kinds.get((g.name, g.cc_text()), 0) + 1
    return "this machine: " + ", ".join(f"{n} x {name} (cc {cc})" for (name, cc), n in kinds.items())


def wanted(project: Project, m: Machine, from_cc=None) -> list:
    """The machine's ccs for ``project``, less the one its rules copy from."""
    source = project.from_cc if from_cc is None else from_cc
    return [cc for cc in spelled(project, m) if not same(cc, source)]


def _missing(s: Session, ccs: list, fixes) -> list:
    """Those of ``ccs`` that some fix of ``fixes`` lacks at the target of ``s``."""
    current = s.current()
    found = []
    for name in fixes_for(s.project.name, fixes):
        found += fix_here(s, name, ccs, current).missing
    return [cc for cc in ccs if cc in found]


def _one(label: str, ccs: list, what: str) -> object:
    if len(ccs) > 1:
        given = " or ".join(f"--to-cc {cc}" for cc in ccs)
        raise BadInput(None, f"this machine's GPUs need {label} keys {', '.join(map(repr, ccs))}; "
                             f"{what} adds one at a time: give {given}")
    return ccs[0]


def _nothing(s: Session, m: Machine) -> list[str]:
    keys = ", ".join(map(repr, spelled(s.project, m)))
    return [s.describe(), f"nothing to do: {s.project.label} already holds key {keys} for this machine's GPUs"]


def _documents(report: Report) -> list[dict]:
    return report.data["targets"] if "targets" in report.data and "path" not in report.data else [report.data]


def apply_auto(found, patches, no_generate, from_cc, dry_run, version, fixes) -> Report:
    from patchkit.commands.apply import apply_all

    m = read_machine()
    fixes = default_fixes() if fixes is None else fixes
    out = Report()
    out.add(gpus_line(m))
    todo, ccs, idle = [], {}, []
    for path, name, install in found:
        s = Session.open(path, version, name, install)
        if not fixes_for(s.project.name, fixes):
            todo.append((path, name, install))  # apply says which fix would patch it
            continue
        missing = _missing(s, wanted(s.project, m, from_cc), fixes)
        if missing:
            todo.append((path, name, install))
            ccs[str(path)] = _one(s.project.label, missing, "apply")
        else:
            out.lines += _nothing(s, m)
            idle.append(str(s.target.root))
    applied = apply_all(todo, patches, no_generate, from_cc, None, dry_run, version, fixes, to_ccs=ccs) if todo else None
    if applied is not None:
        out.lines += applied.lines
        out.exit_code = applied.exit_code
    out.data = {"command": "apply", "to_cc": "auto", "machine": m.to_json(), "nothing_to_do": idle,
                "targets": _documents(applied) if applied else []}
    return out


def verify_auto(found, fixes, verify) -> Report:
    """verify each key this machine's GPUs need: those a fix lacks, or that patchkit added;
    a key the release holds by itself needs no proof."""
    m = read_machine()
    out = Report()
    out.add(gpus_line(m))
    reports = []
    for path, name, install in found:
        s = Session.open(path, project=name, install=install)
        applied = s.applied()
        ccs = wanted(s.project, m)
        if not fixes_for(s.project.name, fixes or default_fixes()):
            reports.append(verify(path, None, None, name, fixes, install))
            continue
        check = [cc for cc in ccs if cc in _missing(s, ccs, fixes or default_fixes())
                 or applied is not None and same(cc, applied.to_cc)]
        if check:
            reports += [verify(path, s.project.from_cc, cc, name, fixes, install) for cc in check]
        else:
            out.lines += _nothing(s, m)
    if reports:
        done = combine("verify", reports)
        out.lines += done.lines
        out.exit_code = done.exit_code
    docs = [d for r in reports for d in _documents(r)]
    out.data = {"command": "verify", "to_cc": "auto", "machine": m.to_json(), "ok": out.exit_code == 0, "targets": docs}
    return out


def generate_cc(project: Project, from_cc) -> tuple[object | None, Machine]:
    """The one cc generate writes for this machine (None when the GPUs need none), and the machine."""
    m = read_machine()
    ccs = wanted(project, m, from_cc)
    return (_one(project.label, ccs, "generate") if ccs else None), m

