"""What ``patchkit doctor`` says (``commands.doctor.DoctorResult``): the GPUs and how they are
linked (or why none was seen), what they were judged for, each target and its fixes (needed
or not, applied or not, why, and what the fix does on this machine), the compiled CUDA code of
``--python``, the all-reduce that helps on PCIe GPUs (``judge.speedups``), then what is needed
and the one command that applies it.  ``failure``: the line on stderr of a report that still
fails (no GPU seen and no ``--to-cc``: it cannot say what this machine needs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.cc import CC
from patchkit.commands.doctor import DEFAULT, DoctorMarkdown, NoProjectHere
from patchkit.errors import OK
from patchkit.fixes.effects import MachineNeed, Outcome
from patchkit.fixes.registry import PROJECTS
from patchkit.judge.here import no_multicast
from patchkit.judge.reasons import NoNvcc
from patchkit.render import jit
from patchkit.render.kernels import always, distribution_lines, file_json
from patchkit.render.machine import link_summary, machine_json
from patchkit.render.modes import here_json, here_lines
from patchkit.render.reasons import code, said
from patchkit.render.settings import lines as settings_lines
from patchkit.render.settings import set_line, setting_json
from patchkit.render.where import where_line
from patchkit.text import plural
from patchkit.types import Reason, Status

if TYPE_CHECKING:
    from patchkit.commands.doctor import DoctorResult, FixJudged
    from patchkit.fixes.effects import Effect, Needs
    from patchkit.gpus.smi import Machine
    from patchkit.judge.here import FixHere
    from patchkit.judge.speedups import SpeedupHere

    Doctor = DoctorResult | DoctorMarkdown | NoProjectHere  # what doctor returns


def _cc(cc: CC) -> str:
    return cc.smi_text()


def _here(r: DoctorResult) -> tuple[str, str]:
    """How the text names the GPUs judged for: "here" and "these GPUs" when measured."""
    cc = _cc(r.machine.ccs()[0])
    return ("here", "these GPUs") if r.measured else (f"for cc {cc}", f"GPUs of cc {cc}")


def _no_project(r: NoProjectHere) -> list[str]:
    """``patchkit doctor`` in a folder with no project: the GPUs seen, and what to give it."""
    return [*_gpu_lines(r), "", f"no project here: {r.why}",
            "to judge the server's environment, give its Python: patchkit doctor --python EXE (a virtualenv's bin/python, "
            "python3 in an image); or a checkout: patchkit doctor PATH"]


def to_text(r: Doctor, terminal: bool) -> list[str]:
    if isinstance(r, NoProjectHere):
        return _no_project(r)
    if isinstance(r, DoctorMarkdown):
        from patchkit.render.markdown import markdown

        return markdown(r.result, dict(r.versions))
    lines = _header(r)
    here, these = _here(r)
    for t in r.targets:
        lines += ["", where_line(t.where)]
        for j in t.fixes:
            h = j.here
            kind = "on by default" if j.default else "opt-in"
            unread = j.spare is not None and j.spare.code == Reason.NEWER_THAN_READ
            spare = f"not judged {here}" if unread else f"not needed {here}"
            verdict = (f"needed {here}, " if j.needed else f"{spare}, " if j.spare else "") if h.status == Status.MISSING else ""
            state = f"applied by patchkit, {spare}: `patchkit revert` takes it off" if j.spare and h.by_patchkit else _state(h, these)
            lines.append(f"  {h.fix} ({kind}): {verdict}{state}")
            if j.spare is not None:
                why = [f"{'not judged' if unread else 'not needed'} because {said(j.spare)}"]
            elif h.status == Status.MISSING and not j.default and not j.because and j.effect is not None:
                why = [f"not needed by default: only with {j.effect.asked_with}"]
            else:
                why = []
            why += [f"needed because {w}" for w in map(said, j.because)]
            lines += [f"    {line}" for line in why + effect_here(j, t.label, r)]
    lines += _code_lines(r)
    lines += [""] + settings_lines(r.settings) if r.settings else []
    lines += _mode_lines(r)
    for s in r.speedups:
        lines += ["", *speedup_lines(s, r.machine, r.code.exe if r.code is not None else None)]
    lines.append("")
    no_code = _no_code(r)
    if no_code:
        lines.append(f"no code for {these} in what the server loads: {'; '.join(no_code)}; no patch adds it (what to do is above)")
    if r.modes_failing:
        lines.append(f"known to break with this install{' and this launch line' if r.launch is not None else ''}: "
                     + ", ".join(h.mode.name for h in r.modes_failing) + " (the ways out are above)")
    if r.needed:
        lines.append(f"needed{'' if r.measured else ' ' + here}: {', '.join(r.needed)}; to apply: {r.apply}")
    elif not no_code and not r.modes_failing:
        maybe = _no_code(r, maybe=True)
        lacks = ", ".join(h.setting.name for h in r.settings_missing)
        nothing = "no patch this machine needs is missing" if r.measured else f"no patch {these} need is missing"
        lines.append((f"{nothing}, but a setting is: {lacks} (above; `--format env` prints the export lines)" if lacks
                      else "nothing this machine needs is missing" if r.measured else f"nothing {these} need is missing")
                     + (f"; {'; '.join(maybe)} cannot run on them, which matters only if the server loads them (above)" if maybe else ""))
    return lines


def _mode_lines(r: DoctorResult) -> list[str]:
    """The failure modes this install is exposed to, silent wrong output first."""
    if not r.modes and not r.flags:
        return []
    launch = " with this launch line" if r.launch is not None else ""
    read = "; read to " + ", ".join(f"{p} {v}" for p, v in r.read_to) if r.read_to else ""
    out = ["", f"failure modes of the releases installed{launch}, on {_here(r)[1]} (docs/FAILURE-MODES.md{read}):"]
    for h in r.modes:
        out += [f"  {line}" for line in here_lines(h)]
    for f in r.flags:
        spans = ", ".join(f"{a or 'any release'} to before {b}" if b else f"{a} and later" for a, b in f.read_in if a or b)
        where = f"{f.project} {spans}" if spans else f"every {f.project} release read"
        out.append(f"  launch line: {f.flag} is in {where}: " + ("so it is in " if f.known else "not read in ") + f"{f.project} {f.version}")
    return out


def failure(r: Doctor) -> str | None:
    if isinstance(r, DoctorMarkdown):
        return failure(r.result)
    if isinstance(r, NoProjectHere):
        return f"{r.why}; give --python EXE, the Python the server runs with"
    if r.basis != DEFAULT:
        return None
    return (f"no GPU seen, so doctor cannot say what this machine needs (the report is for cc {_cc(r.machine.ccs()[0])}); "
            "give --to-cc with the cc of the GPUs the server will run on")


def to_json(r: DoctorResult | NoProjectHere) -> dict[str, object]:  # --json refuses --format markdown (cli/doctor.py)
    if isinstance(r, NoProjectHere):
        return {"command": "doctor", "ok": False, "exit_code": r.exit_code, "machine": machine_json(r.seen) if r.seen else None,
                "no_gpu": r.unseen, "targets": [], "error": failure(r)}
    these = _here(r)[1]
    targets = [t.where.data("doctor", project=t.project, label=t.label, kind=t.kind, fixes=[
        dict(fix_json(j.here), default=j.default, needed=j.needed, why=_why(j, these), why_reason=_why_reason(j),
             needed_because=[said(b) for b in j.because], effect_here=effect_here(j, t.label, r))
        for j in t.fixes]) for t in r.targets]
    code = None if r.code is None else {
        "gpus": [_cc(c) for c in r.machine.ccs()], "no_code": _no_code(r), "no_code_if_loaded": _no_code(r, maybe=True),
        "distributions": [{"name": d.dist.name, "version": d.dist.version, "always": always(d),
                           "cubins": d.dist.cubins, "problem": d.dist.problem,
                           "files": [file_json(f, d.dist) for f in d.files]} for d in r.code.found],
        "jit": [jit.jit_json(j) for j in r.code.jit]}
    doc: dict[str, object] = {"command": "doctor", "ok": r.exit_code == OK, "exit_code": r.exit_code,
           "machine": machine_json(r.seen) if r.seen else None, "no_gpu": r.unseen,
           "judged_for": {"ccs": [_cc(c) for c in r.machine.ccs()], "from": r.basis},
           "targets": targets, "needed": list(r.needed), "apply": r.apply,
           "recommendation": speedup_json(r.speedups[0]) if r.speedups else None,
           "recommendations": [speedup_json(s) for s in r.speedups], "compiled_code": code,
           "settings": [setting_json(h) | {"set_line": set_line(h)} for h in r.settings],
           "failure_modes": [here_json(h) for h in r.modes], "modes_failing": [h.mode.name for h in r.modes_failing],
           "launch": list(r.launch) if r.launch is not None else None, "modes_read_to": dict(r.read_to),
           "launch_flags": [{"flag": f.flag, "project": f.project, "version": f.version, "known": f.known,
                             "read_in": [list(span) for span in f.read_in]} for f in r.flags]}
    error = failure(r)
    return doc | {"error": error} if error else doc


def _gpu_lines(r: DoctorResult | NoProjectHere) -> list[str]:
    """The GPUs nvidia-smi shows and how they are linked, or why none was seen."""
    seen = r.seen
    if seen is None:
        return [f"no GPU seen: {r.unseen}"]
    return [f"GPUs ({seen.nvidia_smi}):", *(f"  GPU{g.index}  {g.name}  cc {g.cc_text()} ({g.sm()})  {g.bus_id}" for g in seen.gpus),
            f"links: {link_summary(seen)}"]


def _header(r: DoctorResult) -> list[str]:
    seen = r.seen
    lines = _gpu_lines(r)
    if r.to_cc is not None:
        cc = _cc(r.to_cc)
        lines.append(f"judged for cc {cc} as given (--to-cc {r.to_cc}) "
                     + (f"instead of the GPUs above: how GPUs of cc {cc} would be linked is not known" if seen
                        else "and not measured: how the GPUs are linked is not known"))
    elif r.basis == DEFAULT:
        lines.append(f"cannot say what this machine needs: each fix below is judged for cc {_cc(r.machine.ccs()[0])}, the GPUs "
                     f"the fixes are for (--to-cc CC judges for GPUs of that cc)")
    return lines


def fix_json(h: FixHere) -> dict[str, object]:
    """A fix judged at a target (``judge.here.FixHere``) in --json: its status, and the code of
    its reason beside the sentence (``detail``)."""
    return {"fix": h.fix, "status": h.status, "missing": list(h.missing), "held": list(h.held),
            "reason": code(h.reason), "detail": said(h.reason) or "", "applied_by_patchkit": h.by_patchkit}


def _state(h: FixHere, these: str = "these GPUs") -> str:
    if h.status == Status.NOT_FOR_THESE:
        if h.held:
            return f"not needed: the release holds key {', '.join(map(repr, h.held))} for {these}"
        return f"not for {these}"
    if h.status == Status.IN_EFFECT:
        return "applied (by patchkit)" if h.by_patchkit else f"in effect ({said(h.reason)})"
    return _STATES[h.status].format(said(h.reason))


# What doctor says of a fix, by its status, around its reason.
_STATES = {Status.MISSING: "not applied: {}", Status.CANNOT_APPLY: "cannot apply here: {}",
           Status.INCOMPLETE: "incomplete here, not applied: {}", Status.NOTHING_TO_PATCH: "nothing to patch ({})"}


def _why(j: FixJudged, these: str) -> str:
    """--json's ``why``: why the fix is needed here or not, in one clause."""
    h = j.here
    if j.spare or j.because:
        return said(j.spare) or "; ".join(map(said, j.because))
    if j.needed:
        return f"on by default, {_state(h, these)}"
    if h.status == Status.MISSING and not j.default and j.effect is not None:
        return f"opt-in: only with {j.effect.asked_with}"
    return _state(h, these)


def _why_reason(j: FixJudged) -> str | None:
    """The code of the reason ``why`` gives: the fix's spare, what turns it on, else its own reason."""
    return code(j.spare) if j.spare else code(j.because[0]) if j.because else code(j.here.reason)


def effect_here(j: FixJudged, label: str, r: DoctorResult) -> list[str]:
    """What the fix does on this machine (--json's ``effect_here``): what it prevents on this release,
    what it needs of the machine and what this machine gives, and what it does instead."""
    if j.failing is None or j.effect is None:  # commands.doctor says what it prevents only of a fix with an effect
        return []
    line = _effect_line(j, label)
    return ([line] if line else []) + _machine_lines(j.effect, r) + ([said(j.clean_only)] if j.clean_only else [])


def _effect_line(j: FixJudged, label: str) -> str | None:
    """What the fix prevents on this release."""
    if not j.failing or j.here.status in (Status.NOTHING_TO_PATCH, Status.NOT_FOR_THESE):
        return None
    words: list[str] = []
    for f in j.failing:
        if f.outcome is Outcome.OFF:
            words.append(f"without it {label} {f.says} ({f.where})")
        else:
            verb = "prevents" if j.here.status == Status.MISSING else "prevented"
            words.append(f"{verb}: {'the warning ' if f.outcome is Outcome.WARNING else ''}{f.says} ({f.where})")
    return "; ".join(words)


def _for_gpus(need: Needs, r: DoctorResult, otherwise: bool = False) -> str:
    """What the fix needs (``otherwise``: what the code does without it), for the GPUs judged for and the
    releases doctor found (FlashInfer 0.6.7 on 12.0: CUDA 12.9, sm_120f): each SM12x cc's words (12.1:
    sm_121a, SM121), joined."""
    words = need.otherwise_for if otherwise else need.said_for
    versions = {t.project: t.where.version for t in r.targets}
    said = dict.fromkeys(words(cc, versions) for cc in r.machine.ccs() if cc.major == 12)
    return " and ".join(said) if said else need.otherwise if otherwise else need.says


def _machine_lines(effect: Effect, r: DoctorResult) -> list[str]:
    """What the fix needs of the machine, and what this machine gives."""
    m = r.machine
    lines: list[str] = []
    for need in effect.needs:
        if need.machine is MachineNeed.MULTICAST:
            why = said(no_multicast(m))
            if m.links is None and not why:
                lines.append(f"it needs {need.says}: how the GPUs are linked is not known (none measured); "
                             f"without multicast {need.otherwise}, and {need.then}")
            elif why:
                lines.append(f"{need.otherwise}: {why}; {need.then}")
            else:
                lines.append(f"it needs {need.says}: NVLink links these GPUs, but topo -m does not show NVSwitch; "
                             f"without multicast {need.otherwise}, and {need.then}")
        elif need.machine is MachineNeed.NVCC:
            n = r.nvcc
            lines.append(f"it needs {_for_gpus(need, r)}: " + (f"nvcc is {n.path} ({n.chosen_by})" if n.found
                                                                else f"{said(NoNvcc(n.path, n.chosen_by))}; {_for_gpus(need, r, True)}"))
    return lines


def _no_code(r: DoctorResult, maybe: bool = False) -> list[str]:
    """Each distribution loaded at every start with a file that has no code for the GPUs, and those files
    (``maybe``: each distribution not known to be, with such files)."""
    if r.code is None:
        return []
    found = r.code.maybe_no_code() if maybe else r.code.no_code()
    return [f"{d.label} ({', '.join(Path(f.shown).name for f in missing)})" for d, missing in found]


def _code_lines(r: DoctorResult) -> list[str]:
    """What doctor says of the compiled CUDA code installed for ``--python`` on these GPUs."""
    if r.code is None:
        return []
    ccs = r.machine.ccs()
    found = r.code.found
    cuda = [d for d in found if d.files or d.dist.cubins]
    if not found:
        lines = ["", f"compiled CUDA code: no distribution installed for {r.code.exe} carries any"]
    else:
        lines = ["", f"compiled CUDA code for {', '.join(map(_cc, ccs))} ({plural(len(cuda), 'distribution')} of {r.code.exe} "
                     f"{'carries' if len(cuda) == 1 else 'carry'} it):"]
    for d in found:
        lines += distribution_lines(d, ccs, listing=False)
    if r.code.jit:
        lines.append(jit.heading(r.code.jit))
        for j in r.code.jit:
            lines += jit.jit_lines(j)
    return lines


def _gpus(m: Machine) -> str:
    return " and ".join(f"{sum(g.sm() == sm for g in m.gpus)} x {sm}" for sm in dict.fromkeys(g.sm() for g in m.gpus))


def _action(project: str, version: str | None, exe: Path | None) -> str:
    """What to do about a project the speedup requires: upgrade it, or install it (``exe``: the
    --python that was looked in, which holds none of it; else PATH named the targets)."""
    dist = PROJECTS[project].distribution
    if version:
        return f"upgrade {dist} ({version} here)"
    if exe is not None:
        return f"install {dist} (not installed for {exe})"
    return f"install {dist} (not among the targets; `--python EXE` finds every project installed for EXE)"


def speedup_lines(s: SpeedupHere, m: Machine, exe: Path | None = None) -> list[str]:
    """What doctor says of a known speedup for machine ``m`` (``judge.speedups.SpeedupHere``);
    ``exe``: the --python whose projects are the targets, if given."""
    sp, installed = s.speedup, s.installed
    if m.gpus:
        lines = [f"all-reduce on these GPUs ({_gpus(m)}, linked through PCIe only: no NVLink, no multicast): {sp.what}"]
    else:  # a cc given: for a server on two or more such GPUs
        from patchkit.gpus.products import pcie_only

        ccs = ", ".join(cc.smi_text() for cc in m.given)
        why = pcie_only(m.given)
        assert why is not None, m.given  # judge.speedups.for_machine offers it for ccs given only where they are
        lines = [f"all-reduce on two or more GPUs of cc {ccs} (linked through PCIe only: {'; '.join(why)}): "
                 f"{sp.what}"]
    have = " and ".join(f"{PROJECTS[r.project].label} {installed[r.project]}" for r in sp.requires)
    needs = " and ".join(f"{PROJECTS[r.project].label} {r.since} or later" for r in sp.requires)
    if s.available:
        lines.append(f"  {have} have it: start the server with {sp.turn_on}")
    else:
        lines.append(f"  it needs {needs} ({sp.turn_on}): {', '.join(_action(r.project, installed[r.project], exe) for r in s.short)}")
        if len(s.short) == 1 and s.short[0].otherwise and installed[s.short[0].project]:
            r = s.short[0]
            lines.append(f"  with {PROJECTS[r.project].label} {installed[r.project]}, {sp.turn_on} only logs \"{r.otherwise}\"")
    lines.append(f"  it serves {sp.serves}")
    if not sp.measured:
        return [*lines, f"  no measurement: {sp.source} quotes none"]
    lines.append(f"  measured by {sp.measured_by} (the module docstring of {sp.source}):")
    return lines + [f"    {line}" for line in sp.measured]


def speedup_json(s: SpeedupHere) -> dict[str, object]:
    sp = s.speedup
    return dict(sp._asdict(), server=sp.server, measured=list(sp.measured), requires=[r._asdict() for r in sp.requires], available=s.available, upgrade=[PROJECTS[r.project].distribution for r in s.short],
                installed=dict(s.installed))
