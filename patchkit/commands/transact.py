"""The one transaction sequence of apply and revert: read, look, lock, read again, look again, set
aside, commit, after the write (FlashInfer's JIT builds dropped, the servers to restart named); at one
target (``transact``) or at every project of an environment (``transact_all``).  Each command
brings its steps (a ``Job``).  docs/ARCHITECTURE.md, "The data flow of ``patchkit apply``", steps 3 to 6.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from patchkit.errors import PatchkitError
from patchkit.plan.apply import Look, Snapshot
from patchkit.plan.plans import Plan
from patchkit.report import Where
from patchkit.targets.after_write import drop_jit_builds, old_processes
from patchkit.targets.transaction import LockTaken, SetAside, commit, exclusive, set_aside
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.targets.jit_builds import JitCheck
    from patchkit.targets.processes import Process
    from patchkit.targets.session import Session
    from patchkit.targets.state import Store
    from patchkit.types import Applied, Change

    # What to commit: the changes, and the state to record (None: none).
    Part_ = tuple[Sequence[Change], Applied | None]


class Transacted(Value, kw_only=True):
    """What apply and revert share of what they did (or, with ``dry_run``, would do) at one target."""

    where: Where
    dry_run: bool
    pending: bool  # an interrupted transaction was pending (said when nothing is written)
    lock: LockTaken | None  # what taking the lock did (None: none taken, nothing to write)
    set_aside: SetAside | None  # a state of another release set aside (its folder None: a real run would)
    plan: Plan
    dropped: tuple[Path, ...]  # bytecode files dropped
    jit: JitCheck | None  # FlashInfer's stale JIT builds of the files written: dropped, or named (None: not FlashInfer, or nothing written)
    restart: tuple[Process, ...]  # the processes that started before the change
    local: Callable[[str], str]  # how the target names a repository path


class Done(Value, kw_only=True):
    """What the sequence did at one target, for its ``Job`` to make its result of."""

    before: Snapshot  # read without the lock
    snap: Snapshot  # read under the lock (``before`` when none was taken)
    look: Look
    lock: LockTaken | None
    aside: SetAside | None
    prepared: list[Path] | None  # what ``Job.prepare`` kept under the lock, revert's copies of edited files (None: no lock taken)
    dropped: tuple[Path, ...]


R = TypeVar("R", bound=Transacted)


class Job(Generic[R]):
    """One command's steps at one target, which ``transact`` takes in order."""

    verb = ""  # the journal's word for it: "apply", "revert"
    final: tuple[type[PatchkitError], ...] = ()  # refusals raised at once, never read again first

    def __init__(self, session: Session, dry_run: bool) -> None:
        self.session, self.dry_run = session, dry_run

    def read(self) -> Snapshot:
        raise NotImplementedError

    def look(self, snap: Snapshot) -> Look:
        """What to write, from ``snap`` alone (pure), or a refusal."""
        raise NotImplementedError

    def writes(self, look: Look) -> bool:
        """Whether the lock must be taken: to write, or to set a state aside."""
        raise NotImplementedError

    def same(self, first: Snapshot, again: Snapshot) -> bool:
        """Whether the look at ``first`` is the look at ``again``."""
        raise NotImplementedError

    def prepare(self, snap: Snapshot, look: Look) -> list[Path] | None:
        """Under the lock, before the commit."""
        return None

    def part(self, snap: Snapshot, look: Look) -> Part_ | None:
        """(changes, the state to record) to commit; None: nothing."""
        raise NotImplementedError

    def drop(self, look: Look, wrote: list[Path]) -> tuple[Path, ...]:
        """The bytecode dropped, after the commit dropped ``wrote``."""
        return tuple(wrote)

    def written(self, plan: Plan) -> list[str] | None:
        """The files whose JIT builds and running servers are stale (None: nothing written)."""
        raise NotImplementedError

    def result(self, done: Done) -> R:
        raise NotImplementedError


def shared(job: Job[R], done: Done) -> Transacted:
    """What apply and revert share of ``done``, with what comes after the write: FlashInfer's JIT builds
    of the files written dropped (or named by a dry run), the servers that started before.  A command's
    result takes these fields (``Transacted._asdict()``) and adds its own."""
    s, plan = job.session, done.look.plan
    written = job.written(plan)
    return Transacted(
        where=Where.of(s), dry_run=job.dry_run, pending=done.before.pending, lock=done.lock, set_aside=done.aside,
        plan=plan, dropped=done.dropped,
        jit=drop_jit_builds(s.target, s.version, written, job.dry_run) if written is not None else None,
        restart=tuple(old_processes(s.target, written)) if written is not None and not job.dry_run else (), local=s.target.local,
    )


def transact(job: Job[R]) -> R:
    """``job`` at its target: read and look without the lock (a target with nothing to do is never
    written, so a read-only one answers too; a killed run's leftovers need the lock, recovery, first);
    when there is something to write, the same again under the lock, then the commit."""
    before = job.read()
    found = job.look(before) if job.dry_run or before.tidy else None
    snap = before
    lock: LockTaken | None = None
    aside: SetAside | None = None
    prepared: list[Path] | None = None
    dropped: tuple[Path, ...] = ()
    if found is None or not job.dry_run and job.writes(found):
        s = job.session
        with exclusive(s.target, s.store, s.version) as lock:
            snap = job.read()
            if found is None or not job.same(before, snap):  # else the look without the lock is this one's
                found = job.look(snap)
            aside = set_aside(s.store, found.old.applied, found.old.reason) if found.old else None
            prepared = job.prepare(snap, found)
            part = job.part(snap, found)
            wrote = commit(s.target, s.store, list(part[0]), part[1], job.verb, s.version) if part is not None else []
            dropped = job.drop(found, wrote)
    elif found.old:
        aside = SetAside(None, found.old.reason)
    return job.result(Done(before=before, snap=snap, look=found, lock=lock, aside=aside, prepared=prepared, dropped=dropped))


def transact_all(home: Store, jobs: Sequence[Job[R]]) -> list[R]:
    """``jobs``, the projects of one environment, as one transaction (``targets.env_transaction``):
    read and looked at without the lock first (nothing to write: no lock taken); else, under the
    environment's lock and each project's, every project read and looked at again, every refusal
    raised, before the first write; then one commit for all."""
    if not jobs:
        return []
    dry_run = jobs[0].dry_run
    befores = [j.read() for j in jobs]
    firsts = _first_looks(jobs, befores) if dry_run or all(b.tidy for b in befores) else None
    if firsts is not None and (dry_run or not any(j.writes(f) for j, f in zip(jobs, firsts, strict=True))):
        return [j.result(Done(before=b, snap=b, look=f, lock=None, aside=SetAside(None, f.old.reason) if f.old else None,
                              prepared=None, dropped=())) for j, b, f in zip(jobs, befores, firsts, strict=True)]
    from patchkit.targets.env_transaction import Part, commit_all, exclusive_all  # an environment's only

    verb = jobs[0].verb
    with exclusive_all(home, [(j.session.target, j.session.store, j.session.version) for j in jobs]) as taken:
        snaps = [j.read() for j in jobs]
        looks = [firsts[i] if firsts is not None and j.same(befores[i], snap) else j.look(snap)
                 for i, (j, snap) in enumerate(zip(jobs, snaps, strict=True))]
        asides = [set_aside(j.session.store, f.old.applied, f.old.reason) if f.old else None for j, f in zip(jobs, looks, strict=True)]
        prepared = [j.prepare(snap, f) for j, snap, f in zip(jobs, snaps, looks, strict=True)]
        parts = [j.part(snap, f) for j, snap, f in zip(jobs, snaps, looks, strict=True)]
        committing = [(i, p) for i, p in enumerate(parts) if p is not None]
        wrote = dict(zip([i for i, _ in committing], commit_all(home, [
            Part(jobs[i].session.target, jobs[i].session.store, jobs[i].session.version, list(p[0]), p[1]) for i, p in committing], verb),
            strict=True))
        dropped = [j.drop(f, wrote.get(i, [])) for i, (j, f) in enumerate(zip(jobs, looks, strict=True))]
    return [j.result(Done(before=b, snap=snap, look=f, lock=lock, aside=aside, prepared=p, dropped=d))
            for j, b, snap, f, lock, aside, p, d in zip(jobs, befores, snaps, looks, taken, asides, prepared, dropped, strict=True)]


def _first_looks(jobs: Sequence[Job[R]], befores: list[Snapshot]) -> list[Look] | None:
    """The looks at what was read without the lock; None where one refused and the targets read
    again differ (another run was writing meanwhile: the read was of a moment between its steps,
    so its refusal is not trusted, and the lock is taken to look again)."""
    try:
        return [j.look(b) for j, b in zip(jobs, befores, strict=True)]
    except PatchkitError as exc:
        if isinstance(exc, jobs[0].final) or all(j.same(b, j.read()) for j, b in zip(jobs, befores, strict=True)):
            raise  # a refusal of what is there
        return None
