"""An environment (``--python``) as one transaction: one lock and one journal for every project in it.

The environment's state dir is ``<site-packages>/.patchkit-environment/`` (``home``), in the
site-packages folder where the environment's first project was found: in a venv, its own.  It
holds ``lock`` while a run works on the environment and ``journal.json`` while a transaction is
in progress; it is removed when it holds neither.  Each project keeps its own state dir
(``state.json``, ``objects/``: ``targets/state.py``).

A run takes the environment's lock, then the lock of each project (``exclusive_all``), finishes
the environment's interrupted transaction and each project's own, reads and plans every project,
and only then writes (``commit_all``), in the order of ``transaction.py``:

1. the originals of every project into its object store;
2. one journal (the commit point) naming every project (its target, state dir, release) with each
   file's before and after sha256, the state to record and the after-images not in its store;
3. the files of every project, each replaced atomically;
4. each project's state, its stale bytecode dropped;
5. the journal removed, each store's unneeded objects pruned.

Interrupted anywhere (SIGKILL, Ctrl-C, a full disk), the environment is as before, done, or has
the journal pending; whoever takes the environment's lock next finishes it for every project
before anything else.  A run on one installed package of the environment (a PATH) refuses while
the environment's journal is pending (``transaction.exclusive``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.digest import sha256
from patchkit.errors import BadInput, PatchkitError, Refused
from patchkit.targets import bytecode
from patchkit.targets.atomic import sync_folders, write_atomic
from patchkit.targets.locate import Target, open_target
from patchkit.targets.state import Store, recorded, valid_files
from patchkit.targets.transaction import (
    Finished,
    JournalSetAside,
    Lock,
    LockTaken,
    failed_writes,
    fault,
    keep,
    originals,
    recover,
    to_write,
    writable,
)
from patchkit.types import Applied, Change
from patchkit.values import Value

if TYPE_CHECKING:  # for the annotations only
    from patchkit.targets.state import Doc, JournalFile, JournalPart

    Found = tuple[Target, Store, str | None, Doc, list[JournalFile]]  # a journal's part: its target, store, release now, JSON, files


class Part(Value):
    """One project's share of an environment's transaction."""

    target: Target
    store: Store
    version: str | None
    changes: list[Change]
    applied: Applied | None  # the state to record once done (None: nothing applied)


def home_of(target: Target) -> Store | None:
    """The state dir of the environment ``target`` was found in (``Target.environment_dir``)."""
    folder = target.environment_dir
    return None if folder is None else Store(folder)


@contextmanager
def exclusive_all(home: Store, targets: list[tuple[Target, Store, str | None]]) -> Iterator[list[LockTaken]]:
    """Hold the environment's lock and the lock of each of ``targets`` (target, store, release),
    the environment's interrupted transaction and each project's finished first.  Yields what
    that did for each (``LockTaken``: the wait for the environment's lock is the first's)."""
    with ExitStack() as stack:
        env_lock = stack.enter_context(Lock(home, targets[0][0], environment=True))
        journal = _journal(home)
        parts = _parts(home, journal, targets) if journal is not None else []
        known = {str(store.root) for _, store, _ in targets}
        extra = [(t, st, v) for t, st, v, _, _ in parts if str(st.root) not in known]  # projects not named this time
        locks = [(target, store, version, stack.enter_context(Lock(store, target))) for target, store, version in [*targets, *extra]]
        # A project's own journal (a run on it alone, or the previous patchkit's) is older than the
        # environment's: finished first.  Then the environment's; then each store's leftovers
        # (objects no state names) go, once its state is the one the environment's journal recorded.
        done = {str(store.root): recover(target, store, version) for target, store, version, _ in locks
                if os.path.lexists(store.journal_file)}
        if journal is not None:
            done.update(_roll_forward(home, journal, parts))
        for target, store, version, _ in locks:
            recover(target, store, version)
        taken = {str(store.root): LockTaken(lock.waited(), done.get(str(store.root))) for _, store, _, lock in locks}
        first = str(targets[0][1].root)
        if env_lock.waited() is not None:
            taken[first] = taken[first]._replace(waited=env_lock.waited())
        yield [taken[str(store.root)] for _, store, _ in targets]


def _journal(home: Store) -> Doc | None:
    home.clean_leftovers()
    return home.journal()


def _corrupt(home: Store) -> BadInput:
    return BadInput(str(home.journal_file), "corrupt patchkit journal; restore the files by hand (reinstall the packages) "
                                            "and remove it")


def _parts(home: Store, journal: Doc, targets: list[tuple[Target, Store, str | None]]) -> list[Found]:
    """Each part of an environment's journal: (its target, store, release now, the part, its files).  A part is
    a project installed where it says (found again there, never taken on trust), or refused."""
    parts = journal.get("parts")
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise _corrupt(home)
    by_root = {str(store.root): (target, store, version) for target, store, version in targets}
    out: list[Found] = []
    for part in parts:
        root, state_dir, project, files = part.get("root"), part.get("state_dir"), part.get("project"), part.get("files")
        if not isinstance(root, str) or not isinstance(state_dir, str) or not isinstance(project, str) \
                or not valid_files(files) or not isinstance(part.get("applied"), (dict, type(None))):
            raise _corrupt(home)
        if state_dir in by_root:
            target, store, version = by_root[state_dir]
        else:
            try:
                target = open_target(Path(root), project)
            except (PatchkitError, ValueError):
                raise Refused(str(home.journal_file), f"the pending transaction names {project} at {root}, which is not "
                                                      "there now; restore the files by hand and remove it") from None
            store, version = Store(target.state_dir), target.version()[0]
        if str(target.state_dir) != state_dir or str(target.root) != root:
            raise _corrupt(home)
        out.append((target, store, version, part, files))
    return out


def _roll_forward(home: Store, journal: Doc, parts: list[Found]) -> dict[str, Finished | JournalSetAside]:
    """Finish the environment's interrupted transaction: every check first, then every write.  A
    part of another release than the one there now is set aside in its project's state dir, never
    finished on these files (as ``transaction.recover`` does)."""
    op = journal.get("op")
    op = op if op == "apply" or op == "revert" else "transaction"
    done: dict[str, Finished | JournalSetAside] = {}
    with failed_writes(home, op, "environment"):
        todo: list[tuple[Target, Store, Doc, list[JournalFile], list[tuple[Path, bytes]]]] = []
        for target, store, version, part, files in parts:
            then = part.get("version")
            if isinstance(then, str) and version and then != version:
                store.ensure()
                store.set_journal({"op": op, **part})  # as the project's own journal, then aside with its objects
                folder = store.set_aside_journal(store.journal() or {})
                done[str(store.root)] = JournalSetAside(op, target.name, then, version, folder)
                continue
            todo.append((target, store, part, files, to_write(target, store, part, files, op, home.journal_file)))
        for _, _, _, _, writes in todo:
            for path, data in writes:
                write_atomic(path, data, mode=os.stat(path).st_mode & 0o7777)
        _finish_all(home, [(t, s, [e["path"] for e in f], recorded(p, home.journal_file)) for t, s, p, f, _ in todo])
        for _, store, _, files, _ in todo:
            done[str(store.root)] = Finished(op, len(files))
    return done


def commit_all(home: Store, parts: list[Part], op: str) -> list[list[Path]]:
    """Write every part's changes and record its state as one transaction (the environment's
    lock and each project's held).  Returns the bytecode dropped, per part."""
    paths = [writable(p.target, p.changes) for p in parts]
    with failed_writes(home, op, "environment"):
        for p in parts:
            p.store.ensure()
            p.store.put_all(originals(p.changes, p.applied))
        fault("objects")
        home.set_journal({"op": op, "parts": [_part(p) for p in parts]})
        fault("journal", home.journal_file)
        folders: set[Path] = set()
        n = 0
        for p, files in zip(parts, paths, strict=True):
            for change, path in zip(p.changes, files, strict=True):
                write_atomic(path, change.after, mode=os.stat(path).st_mode & 0o7777, folders=folders)
                n += 1
                fault(f"file:{n}", path)
        sync_folders(folders)
        return _finish_all(home, [(p.target, p.store, [c.path for c in p.changes], p.applied) for p in parts])


def _part(p: Part) -> JournalPart:
    return {
        "project": p.target.project.name, "root": str(p.target.root), "kind": str(p.target.kind),
        "state_dir": str(p.store.root), "version": p.version,
        "files": [{"path": c.path, "before": sha256(c.before), "after": sha256(c.after)} for c in p.changes],
        "applied": p.applied.to_json() if p.applied else None,
        "carried": {sha256(c.after): c.after.decode("latin-1") for c in p.changes if p.store.get(sha256(c.after)) is None},
    }


def _finish_all(home: Store, parts: list[tuple[Target, Store, list[str], Applied | None]]) -> list[list[Path]]:
    for _, store, _, applied in parts:
        store.ensure()
        store.set_applied(applied)
    fault("state")
    dropped = [bytecode.drop(target.path(p) for p in paths) for target, _, paths, _ in parts]
    fault("bytecode")
    home.set_journal(None)
    for _, store, _, applied in parts:
        store.prune(keep(applied))
    return dropped
