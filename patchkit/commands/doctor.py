"""``patchkit doctor``: what the fixes do on this machine, on one screen.

Read only.  The GPUs and how they are linked come from ``nvidia-smi`` (``patchkit.gpus``),
the projects from the targets the command line found (a PATH, or every project installed
for ``--python``), each fix's state from the target's files (``here.py``), and what the
fix does from its ``[effect]`` data (``fixes/effects.py``).  Neither torch nor the
target's code is imported or run.

A fix whose keys are missing is "not needed here" when these GPUs lack what it needs to
take effect and the release turns the feature off cleanly without it (``here.unneeded``).
On SM12x GPUs linked by PCIe only, doctor also names the all-reduce that does help there
(``speedups.py``), or which project to upgrade for it.

With ``--python``, the compiled CUDA code of that environment is judged for these GPUs too
(``kernels.py``): each distribution's files with no code for them, and what to do.

With ``--to-cc 12`` (or 12.0, 12.1) the fixes are judged for GPUs of that compute capability,
given and not measured (an image build has no GPU): nvidia-smi's GPUs, if it shows any, are
listed and not judged, and how the GPUs are linked is not known, so no fix is "not needed" for
want of multicast.  With no GPU seen (no nvidia-smi, "No devices were found", a hang) and no
``--to-cc``, the projects and their fixes are still reported, judged for the cc the fixes are
for (12.0), and doctor says it cannot say what this machine needs (exit 2).

Exit 0 when nothing the GPUs judged for need is missing, 1 when something is (the one command
that applies it is printed) or when a distribution the server loads at every start has a file
with no code for them, 2 for bad input (a target that is none) or when no GPU was seen and
no ``--to-cc`` given: the report is printed, and one line on stderr says why.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from patchkit.errors import BAD_INPUT, OK, PROBLEMS, BadInput
from patchkit.fixes.effects import Effect, read_effects
from patchkit.fixes.registry import FIXES, PROJECTS
from patchkit.gpus.smi import Machine, given, machine as read_machine, timeout
from patchkit.judge.here import (CANNOT, IN_EFFECT, INCOMPLETE, MISSING, NOT_FOR_THESE, NOTHING, FixHere, clean_start_only,
                                 fixes_here, no_multicast, spelled, unneeded)
from patchkit.rewrite.capability import cap
from patchkit.judge.speedups import speedups_here
from patchkit.report import Report
from patchkit.text import plural
from patchkit.targets.session import Session
from patchkit.versions import at_least


def _state(h: FixHere, these: str = "these GPUs") -> str:
    if h.status == MISSING:
        return f"not applied: {h.detail}"
    if h.status == IN_EFFECT:
        return "applied (by patchkit)" if h.by_patchkit else "in effect (the release has it)"
    if h.status == CANNOT:
        return f"cannot apply here: {h.detail}"
    if h.status == INCOMPLETE:
        return f"incomplete here, not applied: {h.detail}"
    if h.status == NOTHING:
        return f"nothing to patch ({h.detail})"
    if h.held:
        return f"not needed: the release holds key {', '.join(map(repr, h.held))} for {these}"
    return f"not for {these}"


def _why(h: FixHere, need: bool, spare: str | None, because: list[str], effect: Effect | None, these: str) -> str:
    """--json's ``why``: why the fix is needed here or not, in one clause."""
    if spare or because:
        return spare or "; ".join(because)
    if need:
        return f"on by default, {_state(h, these)}"
    if h.status == MISSING and not FIXES[h.fix].default and effect is not None:
        return f"opt-in: only with {effect.asked_with}"
    return _state(h, these)


def _machine_lines(effect: Effect, m: Machine) -> list[str]:
    """What the fix needs of the machine, and what this machine gives."""
    lines = []
    for need in effect.needs:
        if need.machine == "multicast":
            why = no_multicast(m)
            if m.links is None:
                lines.append(f"it needs {need.says}: how the GPUs are linked is not known (none measured); "
                             f"without multicast {need.otherwise}, and {need.then}")
            elif why:
                lines.append(f"{need.otherwise}: {why}; {need.then}")
            else:
                lines.append(f"it needs {need.says}: NVLink links these GPUs, but topo -m does not show NVSwitch; "
                             f"without multicast {need.otherwise}, and {need.then}")
        elif need.machine == "nvcc":
            nvcc = shutil.which("nvcc")
            lines.append(f"it needs {need.says}: " + (f"nvcc is {nvcc}" if nvcc else f"no nvcc on PATH; {need.otherwise}"))
    return lines


def _effect_line(effect: Effect, project: str, version: str | None, h: FixHere) -> str | None:
    """What the fix prevents on this release."""
    failing = effect.failing(project, version)
    if not failing or h.status in (NOTHING, NOT_FOR_THESE):
        return None
    label = PROJECTS[project].label
    words = []
    for f in failing:
        if f.outcome == "off":
            words.append(f"without it {label} {f.says} ({f.where})")
        else:
            verb = "prevents" if h.status == MISSING else "prevented"
            words.append(f"{verb}: {'the warning ' if f.outcome == 'warning' else ''}{f.says} ({f.where})")
    return "; ".join(words)


def _turned_on(effect: Effect, s: Session, versions: dict[str, str | None], m: Machine) -> list[str]:
    """Why an opt-in fix is needed here although nobody asked for it: the release turns the
    feature on by itself on these GPUs, with a version of the other project that fails."""
    if not any(major == 12 for major, _ in m.ccs()):
        return []
    why = []
    for d in effect.turned_on(s.project.name, s.version):
        other = versions.get(d.with_project)
        if other and not at_least(other, d.fixed_in):
            why.append(f"{s.project.label} {s.version} turns it on by itself on SM120 for {', '.join(d.models)}, "
                       f"with {PROJECTS[d.with_project].label} {other} (the fix is upstream from {d.fixed_in})")
    return why


def _cc(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def _seen() -> tuple[Machine | None, str | None]:
    """This machine's GPUs from nvidia-smi, or why none was seen (not on PATH, no devices, hung,
    failing, unreadable).  A PATCHKIT_NVIDIA_SMI_TIMEOUT that is no time limit stays bad input."""
    limit = timeout()
    try:
        return read_machine(limit), None
    except BadInput as exc:
        return None, str(exc)


def _header(report: Report, seen: Machine | None, unseen: str | None) -> None:
    if seen is None:
        report.add(f"no GPU seen: {unseen}")
        return
    report.add(f"GPUs ({seen.nvidia_smi}):")
    for g in seen.gpus:
        report.add(f"  GPU{g.index}  {g.name}  cc {g.cc_text()} ({g.sm()})  {g.bus_id}")
    report.add(f"links: {seen.link_summary()}")


def doctor(found: list[tuple], apply_target: str, env=None, to_cc: tuple[tuple[int, int], str] | None = None) -> Report:
    """``found``: (path, project, install) of each target (``cli.targets``); ``apply_target``: how the command line
    named them (``--python EXE`` or PATH), for the command to run; ``env``: the environment ``--python`` read
    (``targets.environment``), whose compiled CUDA code is judged for the GPUs (``kernels.installed_code``);
    ``to_cc``: --to-cc's cc and how it was written, judged for instead of the GPUs nvidia-smi shows."""
    seen, unseen = _seen()
    effects = read_effects()
    report = Report()
    _header(report, seen, unseen)
    sessions = [Session.open(path, project=name, install=install) for path, name, install in found]
    if to_cc is not None:
        m, basis = given(to_cc[0]), "--to-cc"
        report.add(f"judged for cc {_cc(to_cc[0])} as given (--to-cc {to_cc[1]}) "
                   + (f"instead of the GPUs above: how GPUs of cc {_cc(to_cc[0])} would be linked is not known" if seen
                      else "and not measured: how the GPUs are linked is not known"))
    elif seen is None:  # the fixes' own cc: what each fix's state is, not what this machine needs
        m, basis = given(max((cap(s.project.to_cc).major, cap(s.project.to_cc).minor) for s in sessions)), "default"
        report.add(f"cannot say what this machine needs: each fix below is judged for cc {_cc(m.ccs()[0])}, the GPUs "
                   f"the fixes are for (--to-cc CC judges for GPUs of that cc)")
    else:
        m, basis = seen, "nvidia-smi"
    here, these = ("here", "these GPUs") if m is seen else (f"for cc {_cc(m.ccs()[0])}", f"GPUs of cc {_cc(m.ccs()[0])}")
    versions = {s.project.name: s.version for s in sessions}
    states = [(s, fixes_here(s, m)) for s in sessions]
    # An opt-in fix is needed here when one of the projects turns its feature on by itself.
    pulled = {h.fix: why for s, hs in states for h in hs if h.fix in effects and not FIXES[h.fix].default
              for why in [_turned_on(effects[h.fix], s, versions, m)] if why}
    needed: list[str] = []
    needing: dict[str, object] = {}  # project -> its key for the GPUs judged, where a fix is needed
    documents = []
    for s, hs in states:
        report.add("")
        report.add(s.describe())
        fixes = []
        for h in hs:
            fix = FIXES[h.fix]
            effect = effects.get(h.fix)
            # Not needed on this machine at all: it lacks what the fix needs, and the release turns off cleanly.
            spare = unneeded(effect, s.project, s.version, m) if h.status == MISSING else None
            need = h.status == MISSING and (fix.default or h.fix in pulled) and spare is None
            kind = "on by default" if fix.default else "opt-in"
            verdict = (f"needed {here}, " if need else f"not needed {here}, " if spare else "") if h.status == MISSING else ""
            report.add(f"  {h.fix} ({kind}): {verdict}{_state(h, these)}")
            because = pulled.get(h.fix, []) if h.status == MISSING and spare is None else []
            lines = []
            if spare is not None:
                lines = [f"not needed because {spare}"]
            elif h.status == MISSING and not fix.default and not because and effect is not None:
                lines = [f"not needed by default: only with {effect.asked_with}"]
            lines += [f"needed because {w}" for w in because]
            said = []
            if effect is not None and h.status in (MISSING, IN_EFFECT) and spare is None:
                line = _effect_line(effect, s.project.name, s.version, h)
                only = clean_start_only(effect, s.project, s.version, m)
                said = ([line] if line else []) + _machine_lines(effect, m) + ([only] if only else [])
            report.lines += [f"    {line}" for line in lines + said]
            if need and h.fix not in needed:
                needed.append(h.fix)
            if need:
                needing[s.project.name] = spelled(s.project, m)[0]
            fixes.append(dict(h.to_json(), default=fix.default, needed=need, why=_why(h, need, spare, because, effect, these),
                              needed_because=because, effect_here=said))
        documents.append(s.data("doctor", project=s.project.name, label=s.project.label,
                                kind=s.target.kind, fixes=fixes))
    code_lines, code, no_code = _compiled_code(env, m)
    report.lines += code_lines
    speedup_lines, speedups = speedups_here(m, versions)
    report.lines += speedup_lines
    command = None
    report.add("")
    if no_code:
        report.add(f"no code for {these} in what the server loads: {'; '.join(no_code)}; no patch adds it (what to do is above)")
    if needed:
        # Keep what is in effect by patchkit too: apply replaces what it applied before.
        keep = [n for n in FIXES if n in needed or any(h.fix == n and h.by_patchkit for _, hs in states for h in hs)]
        defaults = [n for n in FIXES if FIXES[n].default]
        options = "" if keep == defaults else " --all-fixes" if keep == list(FIXES) else "".join(f" --fix {n}" for n in keep)
        command = _apply_command(apply_target, options, None if m is seen else needing)
        report.add(f"needed{'' if m is seen else ' ' + here}: {', '.join(needed)}; to apply: {command}")
    elif not no_code:
        report.add("nothing this machine needs is missing" if m is seen else f"nothing {these} need is missing")
    report.exit_code = PROBLEMS if needed or no_code else OK
    if basis == "default":
        report.exit_code = BAD_INPUT
        report.failure = (f"no GPU seen, so doctor cannot say what this machine needs (the report is for cc {_cc(m.ccs()[0])}); "
                          "give --to-cc with the cc of the GPUs the server will run on")
    report.data = {"command": "doctor", "ok": report.exit_code == OK, "exit_code": report.exit_code,
                   "machine": seen.to_json() if seen else None, "no_gpu": unseen,
                   "judged_for": {"ccs": [_cc(c) for c in m.ccs()], "from": basis},
                   "targets": documents, "needed": needed, "apply": command,
                   "recommendation": speedups[0] if speedups else None, "compiled_code": code}
    if report.failure:
        report.data["error"] = report.failure
    return report


def _apply_command(target: str, options: str, keys: dict[str, object] | None) -> str:
    """The one command that applies what is needed: ``--to-cc auto`` for the GPUs measured; for a
    cc given, its key as each project needing a fix spells it (one command per project when
    they spell it differently: SGLang 12, vLLM 12.0)."""
    if keys is None:
        return f"patchkit apply {target} --to-cc auto{options}"
    if len(set(map(str, keys.values()))) == 1:
        return f"patchkit apply {target} --to-cc {next(iter(keys.values()))}{options}"
    return "; ".join(f"patchkit apply {target} --project {name} --to-cc {key}{options}" for name, key in keys.items())


def _compiled_code(env, m: Machine) -> tuple[list[str], dict | None, list[str]]:
    """What doctor says of the compiled CUDA code installed for ``--python`` on these GPUs: its
    lines, its --json object, and the distributions loaded at every start with a file that has no
    code for them (each with those files)."""
    if env is None:
        return [], None, []
    from patchkit.judge.kernels import distribution_lines, installed_code

    ccs = m.ccs()
    found = installed_code(list(env.sites), ccs)
    cuda = [d for d in found if d.files or d.dist.cubins]
    lines = ["", f"compiled CUDA code for {', '.join(f'{a}.{b}' for a, b in ccs)} ({plural(len(cuda), 'distribution')} of {env.exe} {'carries' if len(cuda) == 1 else 'carry'} it):"]
    if not found:
        lines[-1] = f"compiled CUDA code: no distribution installed for {env.exe} carries any"
    no_code = []
    for d in found:
        lines += distribution_lines(d, ccs, listing=False)
        missing = [f for f in d.files if f.missing]
        if d.known.always and missing:
            no_code.append(f"{d.label} ({', '.join(Path(f.shown).name for f in missing)})")
    doc = {"gpus": [f"{a}.{b}" for a, b in ccs], "no_code": no_code,
           "distributions": [{"name": d.dist.name, "version": d.dist.version, "always": d.known.always,
                              "cubins": d.dist.cubins, "problem": d.dist.problem,
                              "files": [f.to_json(d.dist) for f in d.files]} for d in found]}
    return lines, doc, no_code


def apply_target(path: Path | None, python: str | None) -> str:
    """How the command to run names the target, as the command line did."""
    return f"--python {shlex.quote(python)}" if python is not None else shlex.quote(str(path if path is not None else "."))
