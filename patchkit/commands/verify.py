"""``patchkit verify``: prove the patch is in effect; exit 1 with one line per problem.

The command gathers what ``plan.verify.plan_verify`` decides from: the files, what was
applied and is pending, the release's manifest, the stale bytecode and FlashInfer's JIT
builds.  It returns a ``VerifyResult`` (``render/verify.py`` says it); ``--to-cc auto`` takes
its keys from ``judge.auto`` and runs the same verify for each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.cc import AUTO, CC, AutoCC, Key
from patchkit.commands.given import Given, Targets, each
from patchkit.commands.given import sessions as given_sessions
from patchkit.errors import OK, PROBLEMS, PatchkitError
from patchkit.fixes.kinds import DictKeyRule
from patchkit.fixes.registry import FIXES, default_fixes, fixes_for, rules_for
from patchkit.match import mentions
from patchkit.plan.verify import VerifyPlan, plan_verify
from patchkit.report import Auto, AutoTarget, Each, Where
from patchkit.targets import bytecode
from patchkit.targets.after_write import jit_builds
from patchkit.targets.session import Session
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.commands.settings import SettingsVerified
    from patchkit.gpus.smi import Machine
    from patchkit.report import Result
    from patchkit.targets.environment import Environment


class VerifyResult(Value, kw_only=True):
    """What verify found at one target, for one cc pair."""

    where: Where
    label: str
    from_cc: Key  # as the project keys it
    to_cc: Key
    plan: VerifyPlan
    not_checked: tuple[str, ...] = ()  # the fixes that patch the project but were not asked for (--all-fixes checks them)

    @property
    def exit_code(self) -> int:
        return PROBLEMS if self.plan.problems else OK


class VerifyRequest(Value, kw_only=True):
    """What the command line asked of verify, at every target.  ``fixes``: the fixes whose lists
    and gates must be in effect too (None: the fixes on by default and those recorded at apply).
    ``named``: those asked for by name (None: all); one the release cannot take whole is a
    problem when named, else a note.  ``from_cc``, ``to_cc``: the pair to prove, each side not
    given the one applied, else the project's own (what its fixes copy); ``to_cc`` ``AUTO``:
    each key this machine's GPUs need."""

    from_cc: CC | None = None
    to_cc: CC | AutoCC | None = None
    fixes: tuple[str, ...] | None = None
    named: tuple[str, ...] | None = None


def verify_targets(given: Targets, request: VerifyRequest) -> Result:
    """``patchkit verify`` at each target of ``given``: one result.  With no cc given and
    SM12x GPUs here (``sm12x_gpus``), or ``--to-cc auto``, each key the GPUs need is proved
    (``verify_auto``); with ``--python``, the settings its releases need are judged too."""
    m = None if request.to_cc is not None or request.from_cc is not None else sm12x_gpus()
    if request.to_cc is AUTO or m is not None:  # given auto, or SM12x GPUs here: proved for them
        return verify_auto(given, request.fixes, named=request.named or (), m=m, env=given.env)
    done = each("verify", given, lambda g: verify(g, request), judged=True)
    if given.env is None or not isinstance(done, Each):  # judged with --python's environment: an Each
        return done
    from patchkit.commands.settings import verify_settings  # --python: the settings its releases need, too

    settings = verify_settings(given.env, request.to_cc)
    return done._replace(results=done.results + (settings,)) if settings.judged else done


def verify(given: Given, request: VerifyRequest) -> VerifyResult:
    """``request`` at the target ``given``."""
    s = Session.open(given.path, project=given.project, install=given.install)
    fixes, to_cc = request.fixes, request.to_cc
    if to_cc is AUTO:  # verify_targets proves auto's keys through verify_auto, never here
        raise ValueError("verify takes a cc or none; --to-cc auto is verify_auto's")
    if fixes is None and request.named is None:
        fixes = _plain(s, to_cc)
    return verify_session(s, request.from_cc, to_cc, fixes, request.named)


def _plain(s: Session, to_cc: CC | None) -> tuple[str, ...] | None:
    """The fixes a plain verify proves at ``s``: the default ones and those applied, less those a plain
    apply leaves out as not needed on the GPUs judged for (``apply.plain_spare``: one verdict), unless
    patchkit applied them; None when it leaves none out."""
    from patchkit.commands.apply import plain_spare

    applied = s.applied()
    recorded = set(applied.fixes()) if applied else set()
    (spare,), _ = plain_spare([s], to_cc, default_fixes(), ())
    left = [n for n in spare if n not in recorded]
    return tuple(n for n in FIXES if (FIXES[n].default or n in recorded) and n not in left) if left else None


def sm12x_gpus() -> Machine | None:
    """This machine (``gpus.smi.Machine``) when nvidia-smi shows an SM12x GPU, the GPUs the fixes
    are for: a plain ``verify`` then proves for them (a GB10's 12.1, not the 12.0 applied) as
    ``--to-cc auto`` does.  None without nvidia-smi, when it fails, or for other GPUs (a build
    machine's H100 says nothing of the GPUs the patch was applied for)."""
    import os

    # On PATH at all (shutil.which's import costs verify as much as the look): machine() finds it again.
    if not any(os.access(os.path.join(d, "nvidia-smi"), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep) if d):
        return None
    from patchkit.errors import PatchkitError
    from patchkit.judge import auto

    try:
        m = auto.read_machine()
    except PatchkitError:
        return None
    return m if any(g.cc.major == 12 for g in m.gpus) else None


def verify_auto(given: Targets, fixes: tuple[str, ...] | None, named: tuple[str, ...] = (), m: Machine | None = None,
                env: Environment | None = None) -> Auto:
    """``verify --to-cc auto``: each key this machine's GPUs need at each target (``judge.auto``),
    proved as ``verify`` proves a key given; ``named``: the fixes --fix named; ``m``: the machine,
    read already; ``env``: the environment ``--python`` read, whose settings are judged for the
    machine too (``commands.settings``: said when one is for these GPUs)."""
    from patchkit.judge import auto

    m = auto.read_machine() if m is None else m
    sessions = given_sessions(given)
    keys = auto.for_verify(sessions, m, fixes, default_fixes(), named)
    settings: SettingsVerified | None = None
    if env is not None:
        from patchkit.commands.settings import verify_settings

        settings = verify_settings(env, m=m)
    return Auto("verify", m, tuple(
        AutoTarget(Where.of(k.session), k.session.project.name, k.session.project.label, k.held, k.spare,
                   tuple(verify_session(k.session, f, t, k.fixes) for f, t in k.pairs), k.not_for) for k in keys),
        env, settings if settings is not None and settings.judged else None)


def verify_session(s: Session, from_cc: CC | None = None, to_cc: CC | None = None, fixes: tuple[str, ...] | None = None,
                   named: tuple[str, ...] | None = None) -> VerifyResult:
    """``verify`` on the session ``s``."""
    journal, journal_file = s.journal()  # its own, or its part of its environment's
    read: dict[str, bytes] = {}
    applied, changed = s.state(read)
    if changed:
        applied = None
    from_key, to_key = s.project.cc_pair(from_cc, to_cc, (applied.from_cc, applied.to_cc) if applied else None)
    ours = applied if applied and applied.from_cc == from_key and applied.to_cc == to_key else None
    recorded = [f.path for f in ours.files] if ours else []
    # The files the state was told by are the ones to check, when it is ours: read once (none
    # were read while a transaction is pending).
    current = read if ours and read else s.current(tuple(recorded))
    # The tables to check: every dict-key table of the project, or those of the fixes asked for.
    names = s.project.tables if fixes is None else tuple(
        dict.fromkeys(n for r in rules_for(s.project.name, fixes) if isinstance(r, DictKeyRule) for n in r.tables))
    if fixes is None:
        recorded_fixes = set(ours.fixes()) if ours else set()
        fixes = tuple(n for n in FIXES if FIXES[n].default or n in recorded_fixes)
    stale = {rel: [p for p in bytecode.check(s.target.path(rel), data) if p.status is bytecode.STALE]
             for rel, data in current.items() if rel in recorded or mentions(data, names)}
    try:
        builds, jit_error = (jit_builds(s.target, s.version, recorded) if ours else []), None
    except PatchkitError as exc:
        builds, jit_error = [], str(exc)
    plan = plan_verify(
        current, ours, names=names, fixes=fixes, rules=tuple(r for r in rules_for(s.project.name, fixes) if not isinstance(r, DictKeyRule)),
        blocked=tuple(s.shipped_series.blocked(None, fixes, s.target.local)), named=named, from_cc=from_key, to_cc=to_key, version=s.version,
        label=s.project.label, journal=journal, journal_file=str(journal_file), changed=changed, stale=stale,
        jit_builds=tuple(builds), jit_error=jit_error, read=s.reader(), root=s.project.source_root, local=s.target.local,
    )
    return VerifyResult(where=Where.of(s), label=s.project.label, from_cc=from_key, to_cc=to_key, plan=plan,
                        not_checked=tuple(f for f in fixes_for(s.project.name) if f not in plan.fixes))
