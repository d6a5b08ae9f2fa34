"""Change a target's files all or nothing: lock, journal, atomic writes, recovery.

Order of a transaction (a SIGKILL may land between any two steps):

1. the originals the new state names (a later revert restores them) go into the object
   store (each object's bytes fsynced, then the store's folder once);
2. the journal names every file with its before and after sha256, and the state to
   record once done; it carries each after-image the store does not hold (``carried``: its
   bytes as a Latin-1 string, so any bytes are one JSON string), so that recovery can write
   it, in the one file fsynced here.  A before-image nothing reads back (revert's: the
   patched bytes) is named by its sha256 only;
3. each file is replaced atomically (temp file, fsync, rename), and each folder of them is
   fsynced once the last is renamed;
4. the new state is written, the stale bytecode of the changed modules is dropped;
5. the journal is removed (the commit point), unneeded objects are pruned.  Its removal is
   not fsynced: a journal that a crash brings back is finished again, and finding every file
   at its after-image already, only writes the same state again.

Whoever finds a journal finishes the transaction (roll forward: every after-image
is in the store or in the journal) before doing anything else; a file that is neither its
before nor its after image is refused, never overwritten.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.digest import sha256
from patchkit.errors import BadInput, Interrupted, PatchkitError, Pending, Refused, UnsafePath
from patchkit.targets import bytecode
from patchkit.targets.atomic import make_dir, read_private, remove_temps, sync_folders, write_atomic
from patchkit.targets.locate import INSTALLED, Target
from patchkit.targets.state import LINK, Store, recorded, valid_files
from patchkit.types import Applied, Change
from patchkit.values import Value

if TYPE_CHECKING:  # for the annotations only
    from collections.abc import Iterable, Mapping

    from patchkit.plan.reasons import ReleaseChanged
    from patchkit.targets.state import Journal, JournalFile

# Test hook: PATCHKIT_FAULT=<point> makes this process SIGKILL itself at that point
# (objects, journal, file:1, file:2, ..., state, bytecode); PATCHKIT_FAULT=enospc@<point>
# makes the write just done there fail as a full disk would (OSError ENOSPC naming ``path``).
FAULT_ENV = "PATCHKIT_FAULT"
LOCK_TIMEOUT_ENV = "PATCHKIT_LOCK_TIMEOUT"


class Waited(Value):  # this run waited for another one to release the lock
    seconds: float
    pid: int | None  # the other run's, when its lock file said


class Finished(Value):  # an interrupted transaction, finished (rolled forward) before anything else
    op: str  # apply, revert
    files: int


class JournalSetAside(Value):
    """An interrupted transaction of another release, set aside, never finished on these files."""

    op: str
    name: str  # the project, as the target names it
    then: str  # the release it was made on
    now: str  # the release here now
    folder: Path


class LockTaken(Value):
    """What taking a target's lock did: whether this run waited, and what recovery did."""

    waited: Waited | None = None
    recovered: Finished | JournalSetAside | None = None


class SetAside(Value):
    """A recorded state of another release, set aside (``folder``; None: not yet, a dry run)."""

    folder: Path | None
    reason: ReleaseChanged  # why it belongs to another release (``plan.release_changed``)


def fault(point: str, path: Path | None = None) -> None:
    wanted = os.environ.get(FAULT_ENV)
    if wanted == point:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    if wanted == f"enospc@{point}":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), None if path is None else str(path))


class Lock:
    """An exclusive lock on a target (flock on ``<state dir>/lock``), removed on release."""

    def __init__(self, store: Store, target: Target, timeout: float | None = None, environment: bool = False) -> None:
        self.store = store
        self.target = target
        self.environment = environment  # the lock of a whole environment (``targets.environment_transaction``)
        self.timeout = float(os.environ.get(LOCK_TIMEOUT_ENV, "5")) if timeout is None else timeout
        self.fd: int | None = None
        self.waited_for: int | None = None  # the pid of who held the lock when we had to wait
        self.started: float | None = None  # when this run started to wait

    def waited(self) -> Waited | None:
        """How long this run waited for another one, and for which; None if it did not."""
        if self.started is None:
            return None
        return Waited(time.monotonic() - self.started, self.waited_for)

    def _holder(self) -> int | None:
        try:
            pid = (read_private(self.store.lock_file) or b"")[:32].decode("ascii", "replace").strip()
        except (OSError, PatchkitError):
            pid = ""
        return int(pid) if pid.isdigit() else None

    def _open(self) -> int | None:
        """The lock file, created if need be, never through a symlink; None if the state dir
        went away meanwhile (its last holder removed it)."""
        path = self.store.lock_file
        self.store.check()
        try:
            os.mkdir(self.store.root, 0o755)
        except FileExistsError:
            pass
        except OSError as exc:
            raise Refused(str(self.store.root), f"refused: cannot make patchkit's state dir ({exc.strerror}); nothing changed") from None
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(str(path), LINK) from None
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):  # as the state dir's own refusal: apply and revert alike
                raise Refused(str(path), f"refused: cannot take patchkit's lock ({exc.strerror}); nothing changed") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnsafePath(str(path), "refused: not a regular file")
        return fd

    def __enter__(self) -> Lock:
        import fcntl

        path = self.store.lock_file
        deadline = time.monotonic() + self.timeout
        while True:
            fd = self._open()
            if fd is None:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if self.started is None:
                    self.waited_for = self._holder()
                    self.started = time.monotonic()
                if time.monotonic() >= deadline:
                    place = self.store.root.parent if self.environment else self.target.root
                    raise Refused(str(place), self._held_message()) from None
                time.sleep(0.05)
                continue
            try:
                same = os.fstat(fd).st_ino == os.lstat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not a lock file that its last holder removed meanwhile
                break
            os.close(fd)
        try:
            self.store.check()  # again, now that no other run can change it
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:  # a full disk
            os.close(fd)
            raise Refused(str(path), f"{exc.strerror or exc}; patchkit could not take the lock: nothing changed") from None
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        return self

    def _held_message(self) -> str:
        what = "environment" if self.environment else "installed package" if self.target.kind is INSTALLED else "checkout"
        pid = self._holder()
        holder = f" (pid {pid})" if pid is not None else ""
        return f"another patchkit run{holder} is working on this {what}; gave up waiting after {self.timeout:g}s"

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            self.store.lock_file.unlink(missing_ok=True)
            for folder in (self.store.objects, self.store.root):
                try:
                    folder.rmdir()  # only if empty: leave no trace when nothing is recorded
                except OSError:
                    pass
            os.close(self.fd)
            self.fd = None


def keep(applied: Applied | None) -> set[str]:
    return {f.pre_sha256 for f in applied.files} if applied else set()


def commit(target: Target, store: Store, changes: list[Change], applied: Applied | None, op: str, version: str | None = None) -> list[Path]:
    """Write ``changes`` and record ``applied`` as one transaction.  Returns the bytecode dropped.

    ``version``: the release the files belong to; a journal of another release is never
    finished on these files (see ``recover``)."""
    paths = writable(target, changes)
    with failed_writes(store, op):
        store.ensure()
        store.put_all(originals(changes, applied))
        fault("objects", store.objects)
        carried = {sha256(c.after): c.after.decode("latin-1") for c in changes if store.get(sha256(c.after)) is None}
        journal: Journal = {
            "op": op, "version": version, "applied": applied.to_json() if applied else None, "carried": carried,
            "files": [{"path": c.path, "before": sha256(c.before), "after": sha256(c.after)} for c in changes],
        }
        store.set_journal(journal)
        fault("journal", store.journal_file)
        folders: set[Path] = set()  # each file's bytes fsynced as it is written, its folder once below
        for i, (change, path) in enumerate(zip(changes, paths, strict=True), 1):
            write_atomic(path, change.after, mode=os.stat(path).st_mode & 0o7777, folders=folders)
            fault(f"file:{i}", path)
        sync_folders(folders)  # every new file durable before the state says so
        return finish(target, store, [c.path for c in changes], applied)


def writable(target: Target, changes: list[Change]) -> list[Path]:
    """Every check before the first write: paths inside the tree, no symlinks, writable.  The paths."""
    paths = [target.path(c.path) for c in changes]
    for path in paths:
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise Refused(str(path.parent), "refused: folder is not writable, so the file cannot be replaced")
        cache = path.parent / "__pycache__"
        if bytecode.cached_files(path) and cache.is_dir() and not os.access(cache, os.W_OK | os.X_OK):
            raise Refused(str(cache), "refused: folder is not writable, so the stale bytecode could not be dropped")
    return paths


def originals(changes: list[Change], applied: Applied | None) -> list[bytes]:
    """The bytes of ``changes`` that ``applied`` names as a file's original (a before- or an
    after-image: an apply that restores a file writes its original back)."""
    originals = {f.pre_sha256 for f in applied.files} if applied else set()
    return [data for c in changes for data in (c.before, c.after) if sha256(data) in originals]


@contextmanager
def failed_writes(store: Store, op: str, what: str = "target") -> Iterator[None]:
    """An OSError (a full disk, an I/O error) or Ctrl-C in a transaction, said as it is: before
    the journal, nothing changed (exit 3); after it, the transaction is pending and the next
    apply or revert finishes it (exit 4, or 130 for Ctrl-C), never "refused, nothing changed"."""
    try:
        yield
    except OSError as exc:
        where = str(exc.filename) if exc.filename is not None else None
        why = exc.strerror or str(exc)
        if not os.path.lexists(store.journal_file):
            raise Refused(where, f"{why}; the {op} stopped before its first change: nothing changed") from None
        raise Pending(where, f"{why}; {_part_way(store, op, what)}") from None
    except Interrupted as exc:
        if os.path.lexists(store.journal_file) and not exc.detail:
            raise Interrupted(_part_way(store, op, what)) from None
        raise


def _part_way(store: Store, op: str, what: str) -> str:
    return (f"the {op} stopped part-way and its journal {store.journal_file} is pending: the next `patchkit apply` "
            f"or `patchkit revert` of this {what} finishes it first (`patchkit verify` fails until then)")


def finish(target: Target, store: Store, paths: list[str], applied: Applied | None) -> list[Path]:
    store.set_applied(applied)
    fault("state", store.state_file)
    dropped = bytecode.drop(target.path(p) for p in paths)
    fault("bytecode")
    store.set_journal(None)
    store.prune(keep(applied))
    return dropped


@contextmanager
def exclusive(target: Target, store: Store, version: str | None = None) -> Iterator[LockTaken]:
    """Hold the target's lock and finish any interrupted transaction first.

    Yields what that did (``LockTaken``: that this run waited, what recovery did).
    ``version``: the release the target holds now.
    """
    with Lock(store, target) as lock:
        waited = lock.waited()
        home = target.environment_dir  # an installed package: its environment's transaction goes first
        if home is not None and os.path.lexists(home / "journal.json"):
            raise Refused(str(home / "journal.json"), "an interrupted transaction of this environment is pending: "
                          "`patchkit apply --python EXE` or `patchkit revert --python EXE` finishes it; nothing changed")
        yield LockTaken(waited, recover(target, store, version))


def set_aside(store: Store, applied: Applied, reason: ReleaseChanged) -> SetAside:
    return SetAside(store.set_aside(applied), reason)  # a state of another release (lock held), and why


def keep_edits(store: Store, changes: Iterable[Change], applied: Applied | None) -> list[Path]:
    """``revert --force`` (lock held): a copy of each file of ``changes`` edited after apply (its
    bytes are not what ``applied`` recorded) in the state dir's ``edited/``, before it is replaced."""
    posts = {f.path: f.post_sha256 for f in applied.files} if applied else {}
    kept: list[Path] = []
    for change in changes:
        if change.path in posts and sha256(change.before) != posts[change.path]:
            folder = store.root / "edited"
            make_dir(folder)  # never through a symlink (the state dir was checked under the lock)
            copy = folder / f"{Path(change.path).name}.{sha256(change.before)[:12]}"
            write_atomic(copy, change.before)
            kept.append(copy)
    return kept


def recover(target: Target, store: Store, version: str | None = None) -> Finished | JournalSetAside | None:
    """Finish a transaction that a kill interrupted.  Returns what was done, or None.

    Called with the lock held, so every temp file and unreferenced object in the
    state dir is a leftover of a killed run and can go.  A transaction of another
    release than ``version`` (the package was upgraded since the kill) is set aside,
    never finished: its bytes belong to the other release.
    """
    store.clean_leftovers()
    journal = store.journal()
    if journal is None:
        store.prune(keep(store.applied()))
        return None
    op = journal.get("op", "transaction")
    op = op if isinstance(op, str) else "transaction"  # a corrupt journal's op: not text to say
    then = journal.get("version")
    if isinstance(then, str) and version and then != version:
        folder = store.set_aside_journal(journal)
        store.prune(keep(store.applied()))
        return JournalSetAside(op, target.name, then, version, folder)
    files = journal.get("files")
    if not valid_files(files) or not isinstance(journal.get("applied"), (dict, type(None))):
        raise BadInput(str(store.journal_file), "corrupt patchkit journal; restore the files by hand (e.g. `git checkout`) and remove it")
    with failed_writes(store, op):
        return _roll_forward(target, store, journal, files, op)


def _carried(journal: Mapping[str, object], digest: str) -> bytes | None:
    """The after-image ``digest`` as the journal carries it, if it does and its bytes are those."""
    carried = journal.get("carried")
    text = carried.get(digest) if isinstance(carried, dict) else None
    data = text.encode("latin-1") if isinstance(text, str) and max(text, default="\0") <= "\xff" else None
    return data if data is not None and sha256(data) == digest else None


def _roll_forward(target: Target, store: Store, journal: Mapping[str, object], files: list[JournalFile], op: str) -> Finished:
    pending = to_write(target, store, journal, files, op, store.journal_file)
    for path, data in pending:
        write_atomic(path, data, mode=os.stat(path).st_mode & 0o7777)
    finish(target, store, [e["path"] for e in files], recorded(journal, store.journal_file))
    return Finished(op, len(files))


def to_write(target: Target, store: Store, journal: Mapping[str, object], files: list[JournalFile], op: str,
             journal_file: Path) -> list[tuple[Path, bytes]]:
    """The files of ``files`` (a journal's entries) not yet at their after-image, with its bytes (from
    ``journal``'s carried bytes or ``store``); a file that is neither image is refused."""
    pending: list[tuple[Path, bytes]] = []
    for entry in files:
        path = target.path(entry["path"])
        remove_temps(path)
        current = sha256(path.read_bytes())
        if current == entry["after"]:
            continue
        if current != entry["before"]:
            raise Refused(
                str(path),
                f"changed during an interrupted {op}; patchkit will not overwrite it "
                f"(the journal is {journal_file})",
            )
        data = _carried(journal, entry["after"]) or store.get(entry["after"])
        if data is None:
            raise Refused(str(path), f"cannot finish the interrupted {op}: its new content is neither in the journal nor in {store.objects}")
        pending.append((path, data))
    return pending
