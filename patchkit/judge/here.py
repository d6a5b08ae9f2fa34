"""What this machine's GPUs need of a target: its compute capabilities spelled the way
the project keys them, and for each fix whether it is in effect for them.

Read only, from the target's files (the rewriter finds what each rule would add; nothing
is imported or run).  ``doctor`` reports it; ``--to-cc auto`` picks the keys from it.

A fix whose keys are missing can still be needed nowhere on this machine: when the GPUs lack
what it needs to take effect (multicast) and the release turns the feature off cleanly
without it (its ``[effect]``: ``helps_without`` of the need, ``outcome`` of the failure),
``unneeded`` says why.  A key the release lacks for GPUs of a major the fix is not for (an
A100's 8: the fixes copy SM100's keys for SM12x) is not missing: the fix is not for them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from patchkit.cc import CC, Key
from patchkit.digest import sha256
from patchkit.errors import PatchkitError, RewriteError, localized
from patchkit.fixes.effects import Effect, MachineNeed, Outcome
from patchkit.fixes.registry import FIXES, Project, fixes_for, rules_for
from patchkit.gpus.smi import Machine
from patchkit.judge.reasons import (
    CannotApplyHere,
    CleanStartOnly,
    GatesLeft,
    InRelease,
    Lacks,
    NoMulticast,
    NoNvcc,
    NoTableIn,
    Peers,
    Unneeded,
    Unread,
)
from patchkit.plan.reasons import RewriteFailed
from patchkit.rewrite.capability import cap, same
from patchkit.targets.session import Session
from patchkit.types import Status
from patchkit.values import Value

if TYPE_CHECKING:
    from collections.abc import Callable

    from patchkit.fixes.effects import Fails
    from patchkit.fixes.kinds import Rule, RuleKind

    Read = Callable[[str], bytes | None]  # a repository path to its bytes, or None
    Gap = tuple[str, object, str, RuleKind | None]  # what a file lacks: (name, key, path, kind of rule)


def spelled(project: Project, machine: Machine) -> list[Key]:
    """The distinct ccs of the machine's GPUs as ``project`` keys them (``Project.key``): 12
    (SGLang, FlashInfer: by major) or "12.0", "12.1" (vLLM)."""
    return sorted({project.key(cc) for cc in machine.ccs()}, key=lambda k: CC.of(k).pair())


def _major(rule_cc: Key) -> int:
    """The major of a rule's cc: 12 of a key (12, "12.0") or of a flag's name ("sm120")."""
    return CC.parse(str(rule_cc)).major


def _rules(project: Project, fix: str, cc: Key, gpus: tuple[CC, ...] = ()) -> tuple[Rule, ...]:
    """The rules of ``fix`` for ``project`` that add ``cc``, each for the GPUs it is for
    (``Rule.for_gpu``: a flag such as _is_sm120_supported for its major, a comparison that
    admits 121 for a GB10).  ``gpus``: the machine's own ccs, where the project's key (SGLang's
    major 12) does not tell a GB10 from an RTX PRO 6000; without them, the cc the key names."""
    mine = tuple(g for g in gpus if same(project.key(g), cc)) or (CC.of(cc),)
    return tuple(r for r in rules_for(project.name, (fix,), project.from_cc, cc) if any(r.for_gpu(g) for g in mine))


class FixHere(Value):
    fix: str
    status: Status  # MISSING, IN_EFFECT, NOTHING_TO_PATCH, CANNOT_APPLY, INCOMPLETE or NOT_FOR_THESE
    missing: tuple[Key, ...]  # the ccs whose keys, members or flags are missing
    held: tuple[Key, ...]  # the ccs the release already holds (or copies from)
    # what is missing, why it cannot apply, or that the release has it (judge.reasons); None
    reason: Lacks | RewriteFailed | CannotApplyHere | GatesLeft | NoTableIn | InRelease | None
    # where patchkit applied it, or not for these GPUs
    by_patchkit: bool  # in effect because patchkit applied it here


def _target_major(fix: str, project: Project) -> int | None:
    """The major the fix adds for ``project`` (12): a held key of another major (an H200's
    9) is the release's own, not the fix in effect."""
    for r in rules_for(project.name, (fix,)):
        return _major(r.to_cc)
    return None


def _shipped(s: Session, fix: str, cc: Key, current: dict[str, bytes]) -> tuple[bool, list[Gap]] | None:
    """(missing, what lacks it) from the shipped patch of this release when every file it
    patches is its pre-image (missing) or its post-image (in effect): no parsing.  None
    when there is no such patch or a file is neither."""
    if not same(cc, s.project.to_cc):
        return None
    try:
        shipped = s.shipped_series.shipped(None, s.project.from_cc, s.project.to_cc, (fix,))
    except PatchkitError:
        return None
    if shipped is None or shipped.fixes != (fix,):
        return None
    states = set()
    lacking: list[Gap] = []
    for f in shipped.files:
        data = current.get(f.path)
        digest = sha256(data) if data is not None else None
        states.add("pre" if digest == f.pre_sha256 else "post" if digest == f.post_sha256 else "other")
        lacking += [(t.name, t.added_key, f.path, t.kind) for t in f.tables if t.patched]
    if states == {"pre"}:
        return True, lacking
    if states == {"post"}:
        return False, []
    return None


def _parsed(s: Session, fix: str, cc: Key, current: dict[str, bytes], gpus: tuple[CC, ...]) -> tuple[bool, list[Gap]]:
    """(whether the rules found anything, what they would add) in the files as they are, by LibCST."""
    from patchkit.rewrite.rules import rewrite_file  # LibCST, only when the shipped hashes do not tell

    rules = _rules(s.project, fix, cc, gpus)
    found, gaps = False, []
    for rel, data in current.items():
        if any(r.wants(rel, data) for r in rules):
            with localized(s.target.local):
                tables = rewrite_file(data, rel, rules, s.reader(), s.project.source_root, version=s.version).found
            found = found or bool(tables)
            gaps += [(t.name, t.added_key, rel, t.kind) for t in tables if t.patched]
    return found, gaps


def _lacks(project: Project, fix: str, lacking: list[Gap]) -> Lacks:
    """What the files lack, each once in the order found: (name, key, path, kind) of each gap; an
    upstream change carried whole (a backport) by the files that lack it, of how many it has."""
    from patchkit.fixes.kinds import BackportRule, RuleKind

    gaps = tuple({(n, repr(k)): (n, k) for n, k, _, kind in lacking if kind != RuleKind.BACKPORT}.values())
    files: dict[str, list[str]] = {}
    for n, _, path, kind in lacking:
        if kind == RuleKind.BACKPORT and path not in files.setdefault(n, []):
            files[n].append(path)
    sizes = {r.origin.cite(): len(r.files) for r in rules_for(project.name, (fix,)) if isinstance(r, BackportRule) and r.origin}
    return Lacks(gaps, tuple((n, tuple(paths), sizes.get(n)) for n, paths in files.items()))


def fix_here(s: Session, fix: str, ccs: list[Key], current: dict[str, bytes] | None = None,
             gpus: tuple[CC, ...] = ()) -> FixHere:
    """Whether ``fix`` is in effect at the target of ``s`` for each of ``ccs`` (project keys),
    on a machine whose GPUs are ``gpus`` (their ccs; none: those the keys name)."""
    current = s.current() if current is None else current
    target = _target_major(fix, s.project)
    missing: list[Key] = []
    held: list[Key] = []
    lacking: list[Gap] = []
    found_any, asked, ours_here = False, False, False
    for cc in ccs:
        if same(cc, s.project.from_cc) or not _rules(s.project, fix, cc, gpus):
            held += [cc] if same(cc, s.project.from_cc) else []
            continue
        asked = True
        fast = _shipped(s, fix, cc, current)
        if fast is not None:
            gap, lacks = fast
            found_any = True
        else:
            try:
                found, gaps = _parsed(s, fix, cc, current, gpus)
            except RewriteError as exc:
                return FixHere(fix, Status.CANNOT_APPLY, (), (), RewriteFailed(str(exc)), False)
            found_any = found_any or found
            gap, lacks = bool(gaps), gaps
            if not found:
                continue
        if gap and target is not None and cap(cc).major != target:
            continue  # a key the fix does not add (an A100's 8): it copies SM100's for its own GPUs only
        if gap:
            missing.append(cc)
            lacking += lacks
        else:
            held.append(cc)
            ours_here = ours_here or cap(cc).major == target
    if missing:
        blocked = [b for b in s.shipped_series.blocked(None, (fix,), s.target.local) if target is not None and any(cap(c).major == target for c in missing)]
        if blocked:  # the release's manifest: the fix cannot be applied whole here
            incomplete = blocked[0].status == Status.INCOMPLETE
            status, why = (Status.INCOMPLETE, GatesLeft) if incomplete else (Status.CANNOT_APPLY, CannotApplyHere)
            return FixHere(fix, status, tuple(missing), tuple(held), why(blocked[0].says() or ""), False)
        return FixHere(fix, Status.MISSING, tuple(missing), tuple(held), _lacks(s.project, fix, lacking), False)
    if asked and not found_any:
        return FixHere(fix, Status.NOTHING_TO_PATCH, (), tuple(held), NoTableIn(s.project.label, s.version), False)
    if not ours_here:
        return FixHere(fix, Status.NOT_FOR_THESE, (), tuple(held), None, False)
    # Applied by patchkit: a state of this release names it (one of another release no longer applies: the
    # release that replaced it holds the fix itself).
    applied, changed = s.state()
    by_patchkit = applied is not None and changed is None and fix in applied.fixes()
    return FixHere(fix, Status.IN_EFFECT, (), tuple(held), None if by_patchkit else InRelease(), by_patchkit)


def fixes_here(s: Session, machine: Machine) -> list[FixHere]:
    """Every fix that patches the project of ``s``, judged for this machine's GPUs."""
    ccs = spelled(s.project, machine)
    current = s.current()
    return [fix_here(s, name, ccs, current, gpus(machine)) for name in fixes_for(s.project.name) if name in FIXES]


def gpus(machine: Machine) -> tuple[CC, ...]:
    """The machine's distinct ccs (its GPUs', or those given)."""
    return tuple(machine.ccs())


def no_multicast(m: Machine) -> NoMulticast | None:
    """Why the GPUs have no multicast, or None when NVLink might give it, or when how they are
    linked is not known (a machine given, not measured: the fix may take effect there)."""
    if m.links is None:
        ccs = m.no_multicast_known()  # a cc given (--to-cc 12.x): what every product of it lacks is known
        return NoMulticast(Peers.NO_PRODUCT, ccs) if ccs else None
    if not m.links:
        return NoMulticast(Peers.ONE_GPU)
    if m.pcie_only():
        return NoMulticast(Peers.PCIE_ONLY)
    return None


def lacks(machine_need: MachineNeed, m: Machine) -> NoMulticast | NoNvcc | None:
    """Why this machine lacks what a fix needs (``[[effect.needs]]``' ``machine``), or None."""
    if machine_need is MachineNeed.MULTICAST:
        return no_multicast(m)
    from patchkit.kernels.jit import nvcc_at

    at = nvcc_at(dict(os.environ))
    return None if at.found else NoNvcc(at.path, at.chosen_by)


def said_key(project: Project, m: Machine) -> Key:
    """The key of the GPUs judged for, of the major the project's fixes are for, as the release
    prints it in its messages ("12.1" on a GB10 for vLLM; SGLang's 12): the project's own when
    they have none of that major."""
    major = CC.of(project.to_cc).major
    return next((k for k in spelled(project, m) if CC.of(k).major == major), project.to_cc)


def outcome(effect: Effect, project: Project, version: str | None, key: Key,
            read: Read | None = None) -> tuple[list[Fails], tuple[tuple[str, tuple[str, ...]], ...]]:
    """(what ``project`` ``version`` does without the fix on a GPU it keys ``key``, the files it
    could not be judged from): from the data's release ranges; for a release newer than all of
    them, from its own files (``read``: a repository path to bytes or None; ``Effect.read_newer``).
    A newer release whose files show no outcome known gives ([], the files and lines looked for)."""
    failing = effect.failing(project.name, version, key)
    if failing or not effect.newer(project.name, version):
        return failing, ()
    found = effect.read_newer(project.name, version, read, key) if read is not None else []
    return found, () if found else tuple((f.shown_in, f.holds) for f in effect.shown_by(project.name))


def unneeded(effect: Effect | None, project: Project, version: str | None, m: Machine,
             read: Read | None = None) -> Unneeded | Unread | None:
    """Why the fix is not needed on this machine for ``project`` ``version``: the machine lacks
    what the fix needs to take effect, and the release's outcome without the fix is not one the
    fix still helps there (it turns the feature off cleanly by itself).  On such a machine, a
    release newer than the data is judged from its files (``read``, ``outcome``); where they do
    not tell, ``Unread``: never needed on a guess.  None when it is needed, or when the data does
    not know how the release fails (an older release: nothing to patch there)."""
    if effect is None:
        return None
    failing, unread = outcome(effect, project, version, said_key(project, m), read)
    for need in effect.needs if failing or unread else ():
        why = lacks(need.machine, m) if need.decides_need() else None
        if why and unread:
            return Unread(why, project.label, version, effect.read_until(project.name) or "", unread)
        if why and not any(f.outcome in need.helps_without for f in failing):
            return Unneeded(why, project.label, version, tuple(failing), need.adds_without)
    return None


def clean_start_only(effect: Effect | None, project: Project, version: str | None, m: Machine,
                     read: Read | None = None) -> CleanStartOnly | None:
    """On a machine that lacks what the fix needs, for a release it still helps: that the
    feature cannot speed anything up here, and what the fix does instead.  None otherwise."""
    if effect is None:
        return None
    failing = outcome(effect, project, version, said_key(project, m), read)[0]
    for need in effect.needs if failing else ():
        why = lacks(need.machine, m) if need.decides_need() else None
        crashes = [f.says for f in failing if f.outcome is Outcome.CRASH and f.outcome in need.helps_without]
        if why and crashes:
            return CleanStartOnly(effect.asked_with, why, tuple(dict.fromkeys(crashes)))
    return None
