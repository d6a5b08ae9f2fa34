"""``--to-cc auto``: the keys this machine's GPUs need, per target, for the ordinary commands.

The GPUs come from ``nvidia-smi`` (``patchkit.gpus``); their ccs are spelled the way each
project keys them (12 for SGLang, "12.0" or "12.1" for vLLM: ``here.spelled``).  A cc a
release already holds (an H200's 9), or the one it copies from, needs nothing, nor does a cc
no fix is for (an A100's 8: the fixes copy SM100's keys for SM12x; its key is never added):
the target gets no key, and the command says so (``Keys.not_for``) and exits 0.  So does a
fix that is not needed on this machine (``here.unneeded``: the GPUs lack what it needs, and the release turns the feature off
cleanly without it): it is left out, with why, unless ``--fix`` names it.  Nothing here
writes or prints: apply, verify and generate run as they do with the keys given.
No nvidia-smi or no GPU is one BadInput line (exit 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.cc import CC, SM12X, Key
from patchkit.errors import BadInput
from patchkit.fixes.effects import read_effects
from patchkit.fixes.registry import FIXES, Project, fixes_for
from patchkit.gpus.smi import Machine, machine
from patchkit.judge.here import fix_here, fixes_here, gpus, spelled, unneeded
from patchkit.rewrite.capability import same
from patchkit.targets.session import Session
from patchkit.types import Status
from patchkit.values import Value

if TYPE_CHECKING:
    from collections.abc import Callable

    from patchkit.judge.reasons import Unneeded, Unread
    from patchkit.types import Applied

    Spare = dict[str, Unneeded | Unread]  # the fixes left out: name -> why

read_machine = machine  # the machine apply and verify read: a test replaces it here


class Keys(Value):
    """What ``--to-cc auto`` gives the command on one target."""

    session: Session
    pairs: tuple[tuple[CC | None, CC | None], ...]  # (from_cc, to_cc) of each run there, None for the project's own; (): nothing to do
    fixes: tuple[str, ...] | None  # the fixes there (None: as the command line gave them)
    spare: Spare  # the fixes left out: name -> why they are not needed on this machine (or cannot be said to be)
    held: tuple[Key, ...]  # the machine's ccs as the project spells them
    not_for: tuple[Key, ...] = ()  # of ``held``, with nothing to do: the keys no fix is for (the release holds the rest)
    ours: tuple[Key, ...] = ()  # of ``held``, with nothing to do: the keys patchkit applied there (not the release's own)


def wanted(project: Project, m: Machine, from_cc: CC | None = None) -> list[Key]:
    """The machine's ccs as ``project`` keys them, less the one its rules copy from (``from_cc``,
    else the project's own)."""
    source = project.from_cc if from_cc is None else project.key(from_cc)
    return [cc for cc in spelled(project, m) if not same(cc, source)]


def _missing(s: Session, ccs: list[Key], fixes: tuple[str, ...], m: Machine, named: tuple[str, ...] = ()) -> tuple[list[Key], Spare]:
    """(those of ``ccs`` that some fix of ``fixes`` lacks at the target of ``s``, the fixes
    left out: name -> why they are not needed on this machine).  A fix ``named`` by --fix is
    never left out."""
    current = s.current()
    effects = read_effects()
    found: list[Key] = []
    spare: Spare = {}
    for name in fixes_for(s.project.name, fixes):
        h = fix_here(s, name, ccs, current, gpus(m))
        why = unneeded(effects.get(name), s.project, s.version, m, s.reader()) if h.status == Status.MISSING and name not in named else None
        if why:
            spare[name] = why
        else:
            found += h.missing
    return [cc for cc in ccs if cc in found], spare


def _not_for(s: Session, m: Machine, held: tuple[Key, ...]) -> tuple[Key, ...]:
    """Of ``held``, the keys no fix for the project of ``s`` is for (an A100's 8:
    ``Status.NOT_FOR_THESE``), where the release holds none of it for itself (an H200's 9)."""
    holds = {cc for h in fixes_here(s, m) for cc in h.held}
    return tuple(cc for cc in held if cc not in holds)


# SM12X: the GPUs the fixes are for; a plain apply with none of them seen judges for their products


def plain_machine(to_cc: CC | None) -> tuple[Machine, str]:
    """The GPUs a plain apply judges for, and how its lines name them: a cc given (``--to-cc 12.0``:
    GPUs of it, linked as its products can be); else the SM12x GPUs nvidia-smi shows; else (no GPU
    seen, as in an image build, or none of SM12x) the SM12x products, 12.0 and 12.1."""
    from patchkit.gpus.smi import given

    if to_cc is not None:
        return given(to_cc), f"for cc {to_cc.major}.{to_cc.minor}"
    try:
        m = read_machine()
    except BadInput:
        m = None
    if m is not None and any(cc.major == 12 for cc in m.ccs()):
        return m, "here"
    seen = "no SM12x GPU seen" if m is not None else "no GPU seen"
    return given(*SM12X), f"for the SM12x GPUs, 12.0 and 12.1 ({seen})"


def for_plain(s: Session, m: Machine, to_cc: CC | None, fixes: tuple[str, ...], named: tuple[str, ...] = ()) -> Spare:
    """The fixes of ``fixes`` a plain apply leaves out at ``s``: name -> why they are not needed on
    ``m`` (``here.unneeded``, as doctor judges), where their keys are missing; never one ``named``."""
    key = s.project.key(to_cc) if to_cc is not None else s.project.to_cc
    effects = read_effects()
    spare: Spare = {}
    for name in fixes_for(s.project.name, fixes):
        why = None if name in named else unneeded(effects.get(name), s.project, s.version, m, s.reader())
        if why is not None and fix_here(s, name, [key], None, gpus(m)).status == Status.MISSING:
            spare[name] = why
    return spare


def _one(label: str, ccs: list[Key], what: str) -> CC:
    """The one key of ``ccs``, as the cc the command adds (``CC.of``: the project keys it so again)."""
    if len(ccs) > 1:
        given = " or ".join(f"--to-cc {cc}" for cc in ccs)
        raise BadInput(None, f"this machine's GPUs need {label} keys {', '.join(map(repr, ccs))}; "
                             f"{what} adds one at a time: give {given}")
    return CC.of(ccs[0])


def for_apply(sessions: list[Session], m: Machine, from_cc: CC | None, fixes: tuple[str, ...],
              named: tuple[str, ...] = ()) -> list[Keys]:
    """The key apply adds at each target (one at most: two is one BadInput line naming both),
    and the fixes there.  ``named``: the fixes --fix named, applied even where not needed."""
    out = []
    for s in sessions:
        held = tuple(spelled(s.project, m))
        if not fixes_for(s.project.name, fixes):  # apply says which fix would patch it
            out.append(Keys(s, ((from_cc, None),), None, {}, held))
            continue
        missing, spare = _missing(s, wanted(s.project, m, from_cc), fixes, m, named)
        there = tuple(n for n in fixes if n not in spare) if spare else None
        pairs = ((from_cc, _one(s.project.label, missing, "apply")),) if missing else ()
        idle = not pairs and not spare
        out.append(Keys(s, pairs, there, spare, held, _not_for(s, m, held) if idle else (), _ours(s, held) if idle else ()))
    return out


def _ours(s: Session, held: tuple[Key, ...]) -> tuple[Key, ...]:
    """Of ``held``, the keys patchkit's own apply put at the target of ``s`` (its recorded to_cc)."""
    applied = s.applied()
    return tuple(cc for cc in held if applied is not None and same(cc, applied.to_cc))


def _less(fixes: tuple[str, ...] | None, applied: Applied | None, spare: Spare) -> tuple[str, ...]:
    """The fixes verify proves (``fixes``, else the default ones and those applied), less
    those not needed here."""
    recorded = set(applied.fixes()) if applied else set()
    base = fixes if fixes is not None else tuple(n for n in FIXES if FIXES[n].default or n in recorded)
    return tuple(n for n in base if n not in spare)


def for_verify(sessions: list[Session], m: Machine, fixes: tuple[str, ...] | None, defaults: tuple[str, ...],
               named: tuple[str, ...] = ()) -> list[Keys]:
    """Each key verify proves at each target: those a fix lacks, or that patchkit added; a key
    the release holds by itself, or one only a fix not needed here lacks, needs no proof.
    ``fixes``: those asked for (None: ``defaults`` and those applied)."""
    out = []
    for s in sessions:
        held = tuple(spelled(s.project, m))
        if not fixes_for(s.project.name, fixes or defaults):
            out.append(Keys(s, ((None, None),), fixes, {}, held))
            continue
        applied = s.applied()
        ccs = wanted(s.project, m)
        missing, spare = _missing(s, ccs, fixes or defaults, m, named)
        check = [cc for cc in ccs if cc in missing or applied is not None and same(cc, applied.to_cc)]
        asked = fixes if not spare else _less(fixes, applied, spare)
        out.append(Keys(s, tuple((CC.of(s.project.from_cc), CC.of(cc)) for cc in check), asked, spare, held,
                        () if check or spare else _not_for(s, m, held)))
    return out


def generate_cc(project: Project, from_cc: CC | None) -> tuple[CC | None, Machine]:
    """The one cc generate writes for this machine (None when the GPUs need none), and the machine."""
    m = read_machine()
    ccs = wanted(project, m, from_cc)
    return (_one(project.label, ccs, "generate") if ccs else None), m


def generate_skip(project: Project, m: Machine, named: tuple[str, ...] = ()) -> Callable[[str, str], Unneeded | Unread | None]:
    """generate's ``skip(fix, version)`` for this machine: why a fix not ``named`` by --fix is
    not needed here for that release, or None."""
    effects = read_effects()

    def skip(fix: str, version: str) -> Unneeded | Unread | None:
        return None if fix in named else unneeded(effects.get(fix), project, version, m)

    return skip
