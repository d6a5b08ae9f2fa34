"""What patchkit keeps in a target's state dir (``.git/patchkit/`` or ``.patchkit/``).

    state.json      what is applied: version, patch, cc pair, each file's pre/post sha256
    objects/<sha>   original (and pending) file bytes, content-addressed
    journal.json    a transaction in progress (see transaction.py; an environment's is in its
                    own state dir, ``<site-packages>/.patchkit-environment/``: env_transaction.py)
    lock            held while a command works on the target
    aside/<when>-<version>/
                    the state and original bytes of a release that is no longer there (the
                    package was upgraded, reinstalled or another tag checked out): kept, never
                    applied to another release's files
    edited/         with ``revert --force``, the copies of files edited after apply

Nothing in it is ever a symlink: the state dir, the folders and files in it are refused
(exit 3, ``check``) when one is, before anything is written, and read with O_NOFOLLOW.
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

from patchkit.bounded import load_json
from patchkit.digest import sha256
from patchkit.errors import BadInput, UnsafePath
from patchkit.targets.atomic import STATE_LINK, fsync_dir, make_dir, read_private, sync_folders, write_atomic
from patchkit.types import FORMAT, Applied

if TYPE_CHECKING:  # for the annotations only
    from collections.abc import Iterable, Mapping
    from typing import TypedDict

LINK = STATE_LINK

Doc = dict[str, object]  # a JSON object read back (state.json, a journal): each field checked where it is read

if TYPE_CHECKING:  # the JSON documents' shapes, for a type checker (each is a dict when made and read)

    class JournalFile(TypedDict):
        """One file of a journal's ``files``: its repository path, its sha256 before and after."""

        path: str
        before: str
        after: str

    class _Transaction(TypedDict):
        version: str | None  # the release the files belong to
        files: list[JournalFile]
        applied: dict[str, object] | None  # the state to record once done (``Applied.to_json``)
        carried: dict[str, str]  # sha256 -> each after-image the store does not hold, its bytes as Latin-1 text

    class Journal(_Transaction):
        """A target's journal.json as ``transaction.commit`` writes it (read back as a ``Doc``)."""

        op: str  # apply, revert

    class JournalPart(_Transaction):
        """One project's part of an environment's journal (``env_transaction.commit_all``)."""

        project: str
        root: str
        kind: str
        state_dir: str


class Store:
    """The state dir of one target."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.objects = root / "objects"
        self.state_file = root / "state.json"
        self.journal_file = root / "journal.json"
        self.lock_file = root / "lock"
        self.aside = root / "aside"

    def check(self) -> None:
        """Refuse (UnsafePath) a state dir that is a symlink or not a folder, one that holds a
        symlink, or its folders as something else: nothing is ever written through a link."""
        try:
            info = os.lstat(self.root)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(info.st_mode):
            raise UnsafePath(str(self.root), LINK)
        if not stat.S_ISDIR(info.st_mode):
            raise UnsafePath(str(self.root), "refused: the patchkit state dir is not a folder")
        try:
            entries = os.scandir(self.root)
        except FileNotFoundError:  # another run's lock released and removed it since: nothing to check
            return
        with entries:
            for entry in entries:
                if entry.is_symlink():
                    raise UnsafePath(entry.path, LINK)
                if entry.name in ("objects", "aside", "edited") and not entry.is_dir(follow_symlinks=False):
                    raise UnsafePath(entry.path, "refused: not a folder")

    def _checked_root(self) -> None:
        """Reads refuse a symlinked state dir too (its files are opened with O_NOFOLLOW)."""
        if self.root.is_symlink():
            raise UnsafePath(str(self.root), LINK)

    def ensure(self) -> None:
        if not os.path.lexists(self.root):
            self.root.mkdir(parents=True, exist_ok=True)
        self.check()
        make_dir(self.objects)

    # -- objects -------------------------------------------------------------
    def put(self, data: bytes, folders: set[Path] | None = None) -> str:
        """``data`` into the object store (its sha256); ``folders``: of a batch (``put_all``)."""
        digest = sha256(data)
        if self.get(digest) is None:
            write_atomic(self.objects / digest, data, folders=folders)
        return digest

    def put_all(self, datas: Iterable[bytes]) -> list[str]:
        """Each of ``datas`` into the object store, durable when this returns: each object's bytes
        fsynced, then the objects' folder once for all their names."""
        folders: set[Path] = set()
        digests = [self.put(data, folders) for data in datas]
        sync_folders(folders)
        return digests

    def get(self, digest: str) -> bytes | None:
        self._checked_root()
        try:
            data = read_private(self.objects / digest)
        except NotADirectoryError:
            return None
        return data if data is not None and sha256(data) == digest else None

    def clean_leftovers(self) -> None:
        """Remove what killed runs left: temp files of atomic writes, upstream scratch folders.

        Only called with the lock held, so no other run is using them.
        """
        if self.root.is_dir():
            self.check()
            for path in _listed(self.root, ".*.patchkit-tmp"):
                if not path.is_symlink():
                    path.unlink(missing_ok=True)
            for scratch in _listed(self.root, "upstream-*"):
                _remove_tree(scratch)
            for folder in _listed(self.aside, "*"):
                if folder.is_dir() and not folder.is_symlink() and not any(
                        (folder / n).is_file() for n in ("state.json", "journal.json")):  # killed
                    _remove_tree(folder)

    def tidy(self, applied: Applied | None) -> bool:
        """True when nothing here needs the lock: no run holds it or was killed holding it,
        no transaction is pending, no temp file or unreferenced object is left over."""
        if not self.root.is_dir():
            return True
        if self.lock_file.exists() or self.journal_file.exists():
            return False
        if _listed(self.root, ".*.patchkit-tmp") or _listed(self.root, "upstream-*"):
            return False
        keep = {f.pre_sha256 for f in applied.files} if applied else set()
        return not (self.objects.is_dir() and any(p.name not in keep for p in self.objects.iterdir()))

    def prune(self, keep: set[str]) -> None:
        if not self.objects.is_dir():
            return
        for path in self.objects.iterdir():
            if path.name not in keep:
                path.unlink(missing_ok=True)

    # -- state and journal --------------------------------------------------------
    def _read_json(self, path: Path) -> Doc | None:
        self._checked_root()
        try:
            data = read_private(path)
        except NotADirectoryError:
            return None
        if data is None:
            return None
        try:
            doc = load_json(data)  # its nesting checked first: a deep one is corrupt, not a RecursionError
            if not isinstance(doc, dict) or doc.get("format") != FORMAT:
                raise ValueError("unknown format")
            return doc
        except ValueError as exc:
            raise BadInput(str(path), f"corrupt patchkit state ({exc}); remove it to start over") from None

    def applied(self) -> Applied | None:
        doc = self._read_json(self.state_file)
        if doc is None:
            return None
        try:
            return Applied.from_json(doc)
        except (KeyError, TypeError) as exc:
            raise BadInput(str(self.state_file), f"corrupt patchkit state (missing {exc}); remove it to start over") from None

    def set_applied(self, applied: Applied | None) -> None:
        if applied is None:
            self.state_file.unlink(missing_ok=True)
            fsync_dir(self.root)
        else:
            write_atomic(self.state_file, _dumps(applied.to_json()))

    def set_aside(self, applied: Applied) -> Path:
        """Move the recorded state and its original bytes into ``aside/<when>-<version>/``."""
        return self._move_aside(self.state_file, applied.version, [f.pre_sha256 for f in applied.files])

    def set_aside_journal(self, journal: Mapping[str, object]) -> Path:
        """Move an interrupted transaction of another release, and every object it names, aside."""
        files = journal.get("files")
        digests = [e[k] for e in files if isinstance(e, dict) for k in ("before", "after")
                   if isinstance(e.get(k), str)] if isinstance(files, list) else []
        return self._move_aside(self.journal_file, journal.get("version"), digests)

    def _move_aside(self, record: Path, version: object, digests: list[str]) -> Path:
        """Called with the lock held.  The objects are copied first; moving ``record``
        (state.json or journal.json) is the commit point, so a kill leaves either the record
        in place or the record set aside with its objects, never a record without them."""
        now = time.time_ns()  # to the nanosecond: two set-asides in one second still sort oldest first
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now // 10**9)) + f".{now % 10**9:09d}Z"
        label = "".join(c if c.isalnum() or c in ".-_" else "_" for c in str(version or "unknown"))
        folder = self.aside / f"{stamp}-{label}"
        n = 1
        while folder.exists():
            n += 1
            folder = self.aside / f"{stamp}-{label}-{n}"
        objects = folder / "objects"
        make_dir(self.aside)
        os.mkdir(folder)
        make_dir(objects)
        for digest in dict.fromkeys(digests):
            data = self.get(digest)
            if data is not None:
                write_atomic(objects / digest, data)
        fsync_dir(objects)
        os.replace(record, folder / record.name)
        fsync_dir(folder)
        fsync_dir(self.root)
        return folder

    def set_aside_states(self) -> list[Path]:
        """The folders of states set aside, oldest first."""
        return [f / "state.json" for f in _listed(self.aside, "*") if f.is_dir() and (f / "state.json").exists()]

    def journal(self) -> Doc | None:
        return self._read_json(self.journal_file)

    def set_journal(self, doc: Mapping[str, object] | None) -> None:
        if doc is None:  # not fsynced: a journal back after a crash is finished again (transaction.py)
            self.journal_file.unlink(missing_ok=True)
        else:
            write_atomic(self.journal_file, _dumps({"format": FORMAT, **doc}))


def pending(store: Store, home: Store | None) -> tuple[Doc | None, Path]:
    """(the pending transaction of the target of ``store``, its journal file): its own journal, or
    its part of the journal of its environment (``home``, ``targets/env_transaction.py``) with
    that journal's op; (None, its own journal file) when there is none."""
    own = store.journal()
    if own is not None or home is None or not os.path.lexists(home.journal_file):
        return own, store.journal_file
    env = home.journal() or {}
    parts = env.get("parts")
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, dict) and part.get("state_dir") == str(store.root):
            return {**part, "op": env.get("op")}, home.journal_file
    return None, store.journal_file


def busy(home: Store | None) -> bool:
    """Whether an environment's lock is held (or a killed run's left) or its journal is pending."""
    return home is not None and (os.path.lexists(home.lock_file) or os.path.lexists(home.journal_file))


def valid_files(files: object) -> TypeGuard[list[JournalFile]]:  # a journal's ``files``: each a path, a before and an after sha256
    return isinstance(files, list) and all(
        isinstance(e, dict) and all(isinstance(e.get(k), str) for k in ("path", "before", "after")) for e in files)


def recorded(journal: Mapping[str, object], journal_file: Path) -> Applied | None:  # the state a journal records once done
    doc = journal.get("applied")
    if not doc:
        return None
    try:
        if isinstance(doc, dict):
            return Applied.from_json(doc)
    except (KeyError, TypeError):
        pass
    raise BadInput(str(journal_file), "corrupt patchkit journal (the state to record)")


def _dumps(doc: Mapping[str, object]) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def _remove_tree(folder: Path) -> None:
    """``shutil.rmtree``, imported only when a killed run left a folder (shutil imports the
    compression modules: a run with nothing to clean does without)."""
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def _listed(folder: Path, pattern: str) -> list[Path]:
    """The entries of ``folder`` that ``pattern`` matches, sorted; [] where it is gone (another run's
    lock removed it since it was looked at) or no folder to read."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [folder / n for n in sorted(fnmatch.filter(names, pattern))]
