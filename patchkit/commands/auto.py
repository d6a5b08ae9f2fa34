"""``--to-cc auto`` on apply, verify and generate: the keys this machine's GPUs need.

The GPUs come from ``nvidia-smi`` (``patchkit.gpus``); their ccs are spelled the way each
project keys them (12 for SGLang, "12.0" or "12.1" for vLLM: ``here.spelled``).  A cc a
release already holds (an H200's 9), or the one it copies from, needs nothing, nor does a cc
no fix is for (an A100's 8: the fixes copy SM100's keys for SM12x; its key is never added):
that is said, and the command exits 0.  So does a fix that is not needed on this machine
(``here.unneeded``: the GPUs lack what it needs, and the release turns the feature off
cleanly without it): one line says why, and it is left out unless ``--fix`` names it.
No nvidia-smi or no GPU is one BadInput line (exit 2).
"""

from __future__ import annotations

from patchkit.errors import BadInput
from patchkit.fixes.effects import read_effects
from patchkit.fixes.registry import FIXES, Project, default_fixes, fixes_for
from patchkit.gpus.smi import Machine, machine as read_machine
from patchkit.commands.here import MISSING, fix_here, fixes_here, spelled, unneeded
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


def _missing(s: Session, ccs: list, fixes, m: Machine, named=()) -> tuple[list, dict[str, str]]:
    """(those of ``ccs`` that some fix of ``fixes`` lacks at the target of ``s``, the fixes
    left out: name -> why they are not needed on this machine).  A fix ``named`` by --fix is
    never left out."""
    current = s.current()
    effects = read_effects()
    found, spare = [], {}
    for name in fixes_for(s.project.name, fixes):
        h = fix_here(s, name, ccs, current)
        why = unneeded(effects.get(name), s.project, s.version, m) if h.status == MISSING and name not in named else None
        if why:
            spare[name] = why
        else:
            found += h.missing
    return [cc for cc in ccs if cc in found], spare


def _spare_lines(s: Session, spare: dict[str, str]) -> list[str]:
    """One line per fix left out: why it is not needed here, and how to apply it anyway."""
    return [f"not needed here: {name}: {why} (--fix {name} applies it anyway)"
            for name, why in spare.items()]


def _one(label: str, ccs: list, what: str) -> object:
    if len(ccs) > 1:
        given = " or ".join(f"--to-cc {cc}" for cc in ccs)
        raise BadInput(None, f"this machine's GPUs need {label} keys {', '.join(map(repr, ccs))}; "
                             f"{what} adds one at a time: give {given}")
    return ccs[0]


def _nothing(s: Session, m: Machine) -> list[str]:
    """What a target that needs nothing here is told: the keys its release holds (an H200's 9),
    and those no fix is for (an A100's 8: ``here.NOT_FOR_THESE``)."""
    keys, label = spelled(s.project, m), s.project.label
    held = {cc for h in fixes_here(s, m) for cc in h.held}
    has = ", ".join(repr(cc) for cc in keys if cc in held)
    other = ", ".join(repr(cc) for cc in keys if cc not in held)
    said = f"{label} already holds key {has} for this machine's GPUs" if has else ""
    if other:
        said += (f", and no fix for it is for those of key {other}" if has
                 else f"no fix for {label} is for this machine's GPUs (key {other})")
    return [s.describe(), f"nothing to do: {said}"]


def _left_out(s: Session, spare: dict[str, str]) -> list[dict]:
    """--json's ``not_needed``: each fix left out at the target of ``s``, and why."""
    return [{"path": str(s.target.root), "project": s.project.name, "fix": name, "why": why} for name, why in spare.items()]


def _under(lines: list[str], under: dict[str, list[str]]) -> list[str]:
    """``lines`` with the lines of each fix left out under its target's first line."""
    return [more for line in lines for more in (line, *under.pop(line, ()))]


def _documents(report: Report) -> list[dict]:
    return report.data["targets"] if "targets" in report.data and "path" not in report.data else [report.data]


def apply_auto(found, patches, no_generate, from_cc, dry_run, version, fixes, named=()) -> Report:
    """``named``: the fixes --fix named, applied even where they are not needed."""
    from patchkit.commands.apply import apply_all

    m = read_machine()
    fixes = default_fixes() if fixes is None else fixes
    out = Report()
    out.add(gpus_line(m))
    todo, ccs, idle, left_out, fixes_at, under = [], {}, [], [], {}, {}
    for path, name, install in found:
        s = Session.open(path, version, name, install)
        if not fixes_for(s.project.name, fixes):
            todo.append((path, name, install))  # apply says which fix would patch it
            continue
        missing, spare = _missing(s, wanted(s.project, m, from_cc), fixes, m, named)
        if spare:
            left_out += _left_out(s, spare)
            fixes_at[(str(path), s.project.name)] = tuple(n for n in fixes if n not in spare)
        if missing:
            under[s.describe()] = _spare_lines(s, spare)
            todo.append((path, name, install))
            ccs[str(path)] = _one(s.project.label, missing, "apply")
        else:
            out.lines += [s.describe(), *_spare_lines(s, spare)] if spare else _nothing(s, m)
            idle.append(str(s.target.root))
    applied = apply_all(todo, patches, no_generate, from_cc, None, dry_run, version, fixes, to_ccs=ccs,
                        fixes_at=fixes_at, named=named) if todo else None
    if applied is not None:
        out.lines += _under(applied.lines, under)
        out.exit_code = applied.exit_code
    out.data = {"command": "apply", "to_cc": "auto", "machine": m.to_json(), "nothing_to_do": idle,
                "not_needed": left_out, "targets": _documents(applied) if applied else []}
    return out


def _less(fixes, applied, spare: dict) -> tuple[str, ...]:
    """The fixes verify proves (``fixes``, else the default ones and those applied), less
    those not needed here."""
    recorded = {t.get("fix") for f in (applied.files if applied else ()) for t in f.tables if isinstance(t, dict)}
    base = fixes if fixes is not None else tuple(n for n in FIXES if FIXES[n].default or n in recorded)
    return tuple(n for n in base if n not in spare)


def verify_auto(found, fixes, verify, named=()) -> Report:
    """verify each key this machine's GPUs need: those a fix lacks, or that patchkit added;
    a key the release holds by itself, or one only a fix not needed here lacks, needs no proof."""
    m = read_machine()
    out = Report()
    out.add(gpus_line(m))
    reports, under, left_out = [], {}, []
    for path, name, install in found:
        s = Session.open(path, project=name, install=install)
        applied = s.applied()
        ccs = wanted(s.project, m)
        if not fixes_for(s.project.name, fixes or default_fixes()):
            reports.append(verify(path, None, None, name, fixes, install))
            continue
        missing, spare = _missing(s, ccs, fixes or default_fixes(), m, named)
        left_out += _left_out(s, spare)
        check = [cc for cc in ccs if cc in missing or applied is not None and same(cc, applied.to_cc)]
        if check:
            under[s.describe()] = _spare_lines(s, spare)
            asked = fixes if not spare else _less(fixes, applied, spare)
            reports += [verify(path, s.project.from_cc, cc, name, asked, install) for cc in check]
        else:
            out.lines += [s.describe(), *_spare_lines(s, spare)] if spare else _nothing(s, m)
    if reports:
        done = combine("verify", reports)
        out.lines += _under(done.lines, under)
        out.exit_code = done.exit_code
    docs = [d for r in reports for d in _documents(r)]
    out.data = {"command": "verify", "to_cc": "auto", "machine": m.to_json(), "ok": out.exit_code == 0,
                "not_needed": left_out, "targets": docs}
    return out


def generate_cc(project: Project, from_cc) -> tuple[object | None, Machine]:
    """The one cc generate writes for this machine (None when the GPUs need none), and the machine."""
    m = read_machine()
    ccs = wanted(project, m, from_cc)
    return (_one(project.label, ccs, "generate") if ccs else None), m


def generate_skip(project: Project, m: Machine, named=()):
    """generate's ``skip(fix, version)`` for this machine: why a fix not ``named`` by --fix is
    not needed here for that release, or None."""
    effects = read_effects()

    def skip(fix: str, version: str) -> str | None:
        return None if fix in named else unneeded(effects.get(fix), project, version, m)

    return skip

