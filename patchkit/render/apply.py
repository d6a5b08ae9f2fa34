"""What ``patchkit apply`` says (``commands.apply.ApplyResult``): the target, what the plan
writes or why nothing, each file and what a rule found there, what each fix prevents, the
bytecode and JIT builds dropped and the servers to restart; with ``dry_run`` the diff."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.fixes.effects import Outcome
from patchkit.fixes.kinds import RuleKind
from patchkit.patch.write import hunks, split_lines
from patchkit.plan.plans import APPLY
from patchkit.render.found import found_line
from patchkit.render.reasons import code, said
from patchkit.render.servers import restart_json, restart_lines
from patchkit.render.source import source_words
from patchkit.render.where import where_line
from patchkit.rewrite.found import phrased
from patchkit.text import plural
from patchkit.types import Reason

if TYPE_CHECKING:
    from collections.abc import Callable

    from patchkit.cc import Key
    from patchkit.commands.apply import ApplyResult
    from patchkit.commands.transact import Transacted
    from patchkit.fixes.effects import Effect
    from patchkit.plan.plans import Note, Plan
    from patchkit.targets.jit_builds import JitCheck
    from patchkit.targets.transaction import Finished, JournalSetAside, LockTaken, Waited
    from patchkit.types import Change

ONE_TARGET = True  # to_json renders one target: render.document puts it in a list, ``targets``


def transaction_lines(r: Transacted, command: str) -> list[str]:
    """What apply or revert (``command``) says of the lock it took, or of what a real run would
    do without it: an interrupted transaction pending, a state of another release set aside."""
    aside = r.set_aside
    if r.lock is not None:
        return lock_lines(r.lock) + ([f"{said(aside.reason)}: the old state is set aside in {aside.folder}"] if aside else [])
    lines = ["an interrupted transaction is pending; a real run finishes it first"] if r.pending else []
    if aside:
        lines.append(f"{said(aside.reason)}: {'a real run sets' if r.dry_run else command + ' sets'} the old state aside")
    return lines


def waited_line(waited: Waited) -> str:
    """That taking a lock waited (apply, revert, upstream): how long, and for which run when known."""
    holder = f" (pid {waited.pid})" if waited.pid is not None else ""
    return f"waited {waited.seconds:.1f}s for another patchkit run{holder} to finish"


def lock_lines(lock: LockTaken) -> list[str]:
    """What taking the lock did (``targets.transaction.LockTaken``): that this run waited, what recovery did."""
    from patchkit.targets.transaction import Finished

    lines = [] if lock.waited is None else [waited_line(lock.waited)]
    done = lock.recovered
    if isinstance(done, Finished):
        lines.append(f"finished an interrupted {done.op} ({done.files} files)")
    elif done is not None:
        lines.append(f"an interrupted {done.op} of {done.name} {done.then} is set aside in {done.folder}: {done.now} is here now")
    return lines


def jit_lines(jit: JitCheck | None, version: str | None, when: str) -> list[str]:
    """What became of FlashInfer's stale JIT builds (``targets.jit_builds.JitCheck``); ``when``:
    how a build came to be stale ("before the patch"); None: a project without JIT builds."""
    if jit is None:
        return []
    from patchkit.targets.jit_builds import Drop

    if jit.error is not None:
        return [f"note: FlashInfer's JIT builds not checked: {jit.error}"]
    lines: list[str] = []
    for d in jit.drops:
        b = d.build
        if d.outcome is Drop.PREBUILT:
            lines.append(f"note: {b.library} is {b.kind}: FlashInfer {version} loads it instead of building "
                         f"{b.module} from the patched sources; {b.advice}")
        elif d.outcome is Drop.WOULD_DROP:
            lines.append(f"would drop stale FlashInfer JIT build {d.path} (built {when})")
        elif d.outcome is Drop.DROPPED:
            lines.append(f"dropped stale FlashInfer JIT build {d.path} (built {when})")
        elif d.outcome is Drop.FAILED:
            lines.append(f"note: {d.error}")
    return lines


def to_text(r: ApplyResult, terminal: bool) -> list[str]:
    plan, local = r.plan, r.local
    lines = [where_line(r.where)]
    if r.kept:
        lines.append(f"note: keeps {', '.join(r.kept)}, applied before (`patchkit revert` takes the fixes away)")
    lines += transaction_lines(r, "apply")
    lines += [_not_needed(name, why, r.judged) for name, why in r.spare.items()]
    # --to-cc 9.0, where every fix asked for is for other GPUs: one line says so.
    other = plan.action != APPLY and [n.code for n in plan.notes] == [Reason.FOR_OTHER_GPUS]
    lines += [f"nothing to do: {said(plan.notes[0])}; nothing written"] if other else [f"note: {said(n)}" for n in plan.notes]
    if plan.action != APPLY:
        if r.spare and not plan.notes and not plan.tables:  # every fix left out: the lines above say why
            lines.append("nothing written")
        elif not other:
            lines.append(f"{plan.action}" + (f" ({source_words(plan.source)})" if plan.source else "") + ": nothing written")
        if r.stale:
            verb = "would drop" if r.dry_run else "dropped"
            lines.append(f"{verb} {plural(len(r.dropped if not r.dry_run else r.stale), 'stale bytecode file')}")
    else:
        verb = "would patch" if r.dry_run else "patched"
        lines.append(f"{'would apply' if r.dry_run else 'applied'} {source_words(plan.source)}")
        lines += [f"  {verb} {local(c.path)} ({lines_changed(c.before, c.after, _counts(plan, c))})" for c in plan.changes]
        lines += [f"  {found_line(t._replace(path=local(t.path)) if t.path else t)}" for t in plan.tables]
        lines += [effect_line(name, effect, r.project, r.label, r.where.version, _written_key(plan, name)) for name, effect in r.effects]
        if r.dry_run:
            lines += [_diff(c, local) for c in plan.changes]
        else:
            lines.append(f"dropped {plural(len(r.dropped), 'cached bytecode file')}")
    return lines + jit_lines(r.jit, r.where.version, "before the patch") + restart_lines(list(r.restart))


def _diff(c: Change, local: Callable[[str], str]) -> str:
    rel = local(c.path)
    return f"--- a/{rel}\n+++ b/{rel}\n" + hunks(c.before, c.after).decode("utf-8", "replace").rstrip("\n")


def to_json(r: ApplyResult) -> dict[str, object]:
    """One target's part of apply's document (``render.document`` puts it in ``targets``)."""
    plan, local = r.plan, r.local
    return r.where.fields(
        project=r.project,
        fixes=list(r.fixes),
        kept=list(r.kept),
        **plan_fields(r),
        files=[local(c.path) for c in plan.changes],
        changes=[dict(path=local(c.path), **_counts(plan, c), **({"diff": _diff(c, local)} if r.dry_run else {}))
                 for c in plan.changes],
        tables=[phrased(t._replace(path=local(t.path)) if t.path else t).to_json() for t in plan.tables],
        effects=[{"fix": name, "prevents": [f.says for f in effect.failing(r.project, r.where.version) if f.outcome is not Outcome.OFF],
                  "needs": [n.says for n in effect.needs]} for name, effect in r.effects],
        not_needed=[{"fix": name, "reason": code(why), "why": said(why), "judged": r.judged} for name, why in r.spare.items()],
        stale_bytecode=[str(p) for p in r.stale],
        bytecode_dropped=[str(p) for p in r.dropped],
        **jit_fields(r.jit),
        restart=restart_json(r.restart),
    )


def plan_fields(r: Transacted) -> dict[str, object]:
    """What apply's and revert's --json say of their plan (a ``plan.Plan``) and their transaction:
    whether one was pending, what taking the lock did, the state of another release set aside."""
    plan, aside, lock = r.plan, r.set_aside, r.lock
    return {
        "action": plan.action, "dry_run": r.dry_run, "source": source_words(plan.source), "notes": [said(n) for n in plan.notes],
        "note_reasons": [code(n) for n in plan.notes],
        "pending": r.pending,
        "lock": None if lock is None else {
            "waited_s": None if lock.waited is None else round(lock.waited.seconds, 1),
            "waited_for_pid": None if lock.waited is None else lock.waited.pid,
            "recovered": _recovered(lock.recovered),
        },
        "set_aside": None if aside is None else {
            "reason": said(aside.reason), "code": code(aside.reason), "folder": None if aside.folder is None else str(aside.folder)},
    }


def _recovered(done: Finished | JournalSetAside | None) -> dict[str, object] | None:
    """What recovery did under the lock, as --json says it: a transaction finished, or one of
    another release set aside."""
    from patchkit.targets.transaction import Finished

    if done is None:
        return None
    if isinstance(done, Finished):
        return {"op": done.op, "finished": True, "files": done.files}
    return {"op": done.op, "finished": False, "release": done.then, "set_aside": str(done.folder)}


def jit_fields(jit: JitCheck | None) -> dict[str, object]:
    """What apply's and revert's --json say of FlashInfer's stale JIT builds (``JitCheck``; None:
    a project without JIT builds, the same fields, empty)."""
    if jit is None:
        return {"jit_builds": [], "jit_builds_dropped": [], "jit_error": None}
    from patchkit.targets.jit_builds import Drop

    return {
        "jit_builds": [{"module": d.module, "path": str(d.path), "outcome": d.outcome.value, "kind": d.build.kind,
                        "error": None if d.error is None else str(d.error)} for d in jit.drops],
        "jit_builds_dropped": [str(d.path) for d in jit.drops if d.outcome is Drop.DROPPED],
        "jit_error": None if jit.error is None else str(jit.error),
    }


def _counted(before: bytes, after: bytes) -> dict[str, int]:
    """The lines the diff from ``before`` to ``after`` adds and removes.  A change that only adds
    or only removes lines in one place (a table's new key: most of what apply writes) is counted
    from the lines the two share at each end, without making the diff: the fewest lines, as
    ``git diff --stat`` counts them."""
    a, b = split_lines(before), split_lines(after)
    start, most = 0, min(len(a), len(b))
    while start < most and a[start] == b[start]:
        start += 1
    end = 0
    while end < most - start and a[-1 - end] == b[-1 - end]:
        end += 1
    if start + end == most:  # one side is all shared lines: the rest of the other is the change
        return {"added": len(b) - most, "removed": len(a) - most}
    added = removed = 0
    for line in split_lines(hunks(before, after)):
        if line.startswith(b"+"):
            added += 1
        elif line.startswith(b"-"):
            removed += 1
    return {"added": added, "removed": removed}


def _counts(plan: Plan, c: Change) -> dict[str, int]:
    """The lines a change adds and removes: as the shipped patch that made it counts them (its hunks:
    no diff made), else from its bytes (``_counted``)."""
    counted = next(((added, removed) for path, added, removed in plan.counted if path == c.path), None)
    return {"added": counted[0], "removed": counted[1]} if counted else _counted(c.before, c.after)


def lines_changed(before: bytes, after: bytes, counted: dict[str, int] | None = None) -> str:
    """How many lines the change adds and removes: "+6 lines", "-2 lines", "+1 -1 lines" (``counted``:
    as ``_counts`` found them, else counted from the bytes)."""
    counted = counted or _counted(before, after)
    added, removed = counted["added"], counted["removed"]
    if added and removed:
        return f"+{added} -{removed} lines"
    return f"-{plural(removed, 'line')}" if removed else f"+{plural(added, 'line')}"


def _written_key(plan: Plan, fix: str) -> Key | None:
    """The key apply wrote for ``fix`` (a table's), or None (a fix that adds no key)."""
    return next((t.added_key for t in plan.tables if t.fix == fix and t.patched and t.kind in (None, RuleKind.DICT_KEY)
                 and isinstance(t.added_key, int | str)), None)  # a table's added key is a key


def _not_needed(name: str, why: Note, judged: str) -> str:
    """A fix a plain apply left out: not needed on the GPUs ``judged`` for, or not to be judged there."""
    verb = "not judged" if why.code == Reason.NEWER_THAN_READ else "not needed"
    return f"{verb} {judged}: {name}: {said(why)} (--fix {name} applies it anyway)"


def effect_line(name: str, effect: Effect, project: str, label: str, version: str | None, key: Key | None = None) -> str:
    """What a fix patched here prevents on this release, and what it needs of the machine; ``key``:
    the key it wrote (a GB10's '12.1'), as the release would print it."""
    prevents = "; ".join(f"\"{f.says}\"" for f in effect.failing(project, version, key) if f.outcome is not Outcome.OFF)
    needs = "; ".join(f"it takes effect with {n.says}, else {n.otherwise}: {n.then}" for n in effect.needs)
    if prevents:
        what = f"prevents {prevents} on {label} {version}"
    elif key is not None:  # the data's words name its own key (12, vLLM "12.0"): name the one written
        what = (f"adds key {key!r} to each table above, copying its source key's entry; patchkit's data does not say "
                f"what {label} {version} does without it")
    else:
        what = effect.changes
    return f"effect: {name} {what}" + (f"; {needs}" if needs else "") + " (`patchkit doctor` says what this machine has)"
