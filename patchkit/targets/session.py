"""What every target command gathers first: the target, its version, state and shipped series
(``targets.shipped``); what may still run its old code after a write is ``targets.after_write``."""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.bounded import read_file
from patchkit.errors import BadInput, PatchkitError, UnsafePath
from patchkit.fixes.registry import Project, rules_for
from patchkit.match import mentions
from patchkit.plan.release import release_changed
from patchkit.targets.after_write import stale_bytecode
from patchkit.targets.locate import INSTALLED, Target, open_install, open_target
from patchkit.targets.safety import read_plain
from patchkit.targets.shipped import Series
from patchkit.targets.state import Store, busy, pending
from patchkit.types import Applied, TargetKind
from patchkit.versions import is_version, public

if TYPE_CHECKING:  # for the annotations only
    from collections.abc import Iterable
    from typing import NotRequired, TypedDict

    from patchkit.cc import Key
    from patchkit.patch.manifest import FixStatus, Shipped
    from patchkit.plan.apply import Snapshot
    from patchkit.plan.reasons import ReleaseChanged
    from patchkit.targets.environment import Install
    from patchkit.targets.state import Doc

    class WhereFields(TypedDict):
        """``report.Where``'s fields, as a session knows them."""

        label: str
        path: str
        version: str | None
        version_from: str
        shown: str
        kind: TargetKind
        editable_of: NotRequired[str]


SOURCE_CAP = 64 << 20  # a candidate file: SGLang's and FlashInfer's largest are under 5 MiB


class Reader:
    """The bytes of a file of ``target`` by repository path, or None (a rule's helper); what it read
    is in its ``seen`` (``plan.apply.unchanged`` compares it with a second look)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.seen: dict[str, bytes | None] = {}

    def __call__(self, rel: str) -> bytes | None:
        try:
            path = self.target.path(rel, must_exist=False)
        except PatchkitError:
            data = None
        else:
            data = read_file(path, SOURCE_CAP, "source file") if path.is_file() and not path.is_symlink() else None
        self.seen[rel] = data
        return data


class Session:
    """A target with its state store, project and version (and how the version was found)."""

    def __init__(self, target: Target, store: Store, project: Project, version: str | None, how: str,
                 whole: bool = False) -> None:
        self.target = target
        self.whole = whole  # found by --python: a project of an environment, changed with the others as one
        self.store = store
        self.project = project
        self.version = version
        self.how = how
        self.shipped_series = Series(project, self.series)  # this version's shipped series (``targets.shipped``)
        self._bytes: dict[str, bytes] = {}  # repository path -> the bytes last read (``_read``)

    @classmethod
    def open(cls, path: Path, version: str | None = None, project: str | None = None, install: Install | None = None) -> Session:
        """The target at ``path``, or the one that ``--python`` found (``install``, an ``environment.Install``)."""
        target = open_install(install) if install is not None else open_target(path, project)
        found, how = target.version(version)
        return cls(target, Store(target.state_dir), target.project, found, how, install is not None)

    @property
    def series(self) -> str | None:
        """The release whose shipped series (``patches/<release>/``) is this version's: the
        version itself, or the public release of a local one (``0.5.9+cu128``: a build of 0.5.9
        from another index is 0.5.9's files; where they are not, they differ from the series'
        pre-images and the patch is generated from them).  None for a version unknown or not
        a release version in PEP 440's normal form."""
        release = public(self.version) if self.version else None
        return release if release and is_version(release) else None

    def where_fields(self) -> WhereFields:
        """Where the target is, what, which version and how it was found (``report.Where``'s fields)."""
        fields: WhereFields = {"label": self.project.label, "path": str(self.target.root), "version": self.version,
                               "version_from": self.how, "shown": str(self.target.root), "kind": TargetKind.CHECKOUT}
        if self.target.install is not None:
            fields["shown"], fields["kind"] = str(self.target.install.package), TargetKind.EDITABLE
            fields["editable_of"] = str(self.target.root)
        elif self.target.kind is INSTALLED:
            fields["shown"], fields["kind"] = str(self.target.root / self.project.name), TargetKind.INSTALLED
        return fields

    def current(self, extra: tuple[str, ...] = ()) -> dict[str, bytes]:
        """The bytes of every candidate file (and of ``extra`` paths) that exists."""
        return self._read(set(self.target.candidates()) | set(extra))

    def _read(self, rels: Iterable[str]) -> dict[str, bytes]:
        """The bytes of each of ``rels`` that exists: a plain file read through the descriptor that
        checked it (``safety.read_plain``), anything else checked (``Target.path``), then read."""
        out: dict[str, bytes] = {}
        for rel in sorted(rels):
            data = read_plain(self.target.root, self.target.local(rel), SOURCE_CAP)
            if data is None:
                data = self._checked(rel)
                if data is None:
                    continue
            # The same bytes read again (apply and revert read before the lock and under it): the
            # first copy is kept, the second freed at once, and what was found in it stands.
            seen = self._bytes.get(rel)
            out[rel] = self._bytes[rel] = seen if seen == data else data
        return out

    def _checked(self, rel: str) -> bytes | None:
        """The bytes of ``rel`` that is no plain file, or why not (UnsafePath, BadInput); None where it
        does not exist, or is a link to leave alone."""
        try:
            path = self.target.path(rel, must_exist=False)
        except UnsafePath:
            link = self.target.root / self.target.local(rel)
            if not link.is_symlink():
                raise
            # Never written through; refused only if it holds a table we would patch.
            if mentions(read_file(link, SOURCE_CAP, "source file"), self.project.names):
                raise UnsafePath(str(link), "refused: target is a symlink") from None
            return None
        try:
            return read_file(path, SOURCE_CAP, "source file")
        except FileNotFoundError:
            return None

    def reader(self) -> Reader:
        """A reader of the target's files (``Reader``), its ``seen`` empty."""
        return Reader(self.target)

    def home(self) -> Store | None:
        """The state dir of the environment this target was found in (``targets/env_transaction.py``):
        that of an installed package, or of a project ``--python`` found; else None."""
        folder = self.target.environment_dir
        return None if folder is None else Store(folder)

    def journal(self) -> tuple[Doc | None, Path]:
        """(the pending transaction of this target, its journal file): ``state.pending``."""
        return pending(self.store, self.home())

    def applied(self) -> Applied | None:
        """What patchkit applied here; its paths must be target files of the project."""
        applied = self.store.applied()
        for f in applied.files if applied else ():
            if not isinstance(f.path, str) or not any(fnmatchcase(f.path, g) for g in self.project.files):
                raise BadInput(str(self.store.state_file), f"corrupt patchkit state: {f.path!r} is not a target file")
        return applied

    def state(self, read: dict[str, bytes] | None = None) -> tuple[Applied | None, ReleaseChanged | None]:
        """(what patchkit applied here, why that state belongs to another release or None).

        A state of another release is never used: commands treat the target as fresh, and
        apply and revert set the old state aside (``Store.set_aside``).  ``read``, when given,
        gets the files read to tell (``current`` of the state's files; none when there is no
        state or a transaction is pending): verify and status check the same bytes.
        """
        applied = self.applied()
        if applied is None or self.journal()[0] is not None:  # finishing the transaction comes first
            return applied, None
        current = self.current(tuple(f.path for f in applied.files))
        if read is not None:
            read.update(current)
        return applied, self._changed(applied, current)

    def _changed(self, applied: Applied, current: dict[str, bytes]) -> ReleaseChanged | None:
        installed = self.installed_hashes(f.path for f in applied.files) if self.target.kind is INSTALLED else None
        return release_changed(applied, current, self.version, installed, self.target.name)

    def snapshot(self, patches: Path | None, fixes: tuple[str, ...] | None = None, from_cc: Key | None = None,
                 to_cc: Key | None = None) -> Snapshot:
        """What apply (``fixes``, the cc pair) or revert (no ``fixes``) decides from, read once: the
        state and its originals, the files, the shipped patches (for apply: of ``fixes`` and the
        fixes kept, but those the series' manifest says cannot be applied whole; for revert: the
        whole series, when nothing is recorded), for apply the stale bytecode (``plan.apply.Snapshot``)."""
        from patchkit.plan.apply import Old, Snapshot, with_applied  # apply's and revert's, not verify's

        pending = self.journal()[0] is not None
        recorded = self.applied()
        candidates = set(self.target.candidates())
        read = self._read(candidates | {f.path for f in recorded.files} if recorded else candidates)
        reason = self._changed(recorded, read) if recorded is not None and not pending else None
        old = Old(recorded, reason) if recorded is not None and reason else None
        applied = None if old else recorded
        current = {rel: data for rel, data in read.items() if rel in candidates} if old else read
        asked, kept = with_applied(fixes, applied, old is not None) if fixes is not None else ((), ())
        blocked: tuple[FixStatus, ...] = ()
        shipped: Shipped | None = None
        pair: tuple[Key, Key] | None = None
        if fixes is not None:
            blocked = tuple(self.shipped_series.blocked(patches, asked, self.target.local))
            usable = tuple(f for f in asked if f not in {b.fix for b in blocked})
            if rules_for(self.project.name, usable, from_cc, to_cc):
                shipped = self.shipped_series.shipped(patches, from_cc, to_cc, usable)
                # The pair of the shipped patches of these fixes, where only the pair is why none fits
                # (not the whole series': its pair is no reason where it holds none of these fixes).
                whole = self.shipped_series.shipped(patches, fixes=usable) if shipped is None and self.series else None
                pair = (whole.from_cc, whole.to_cc) if whole and whole.from_cc is not None and whole.to_cc is not None else None
        elif applied is None:
            shipped = self.shipped_series.shipped(patches)
        originals = self.originals(applied)
        # Read without the lock, originals missing here most likely belong to a state that a run holding
        # the lock ended meanwhile (a revert prunes them after the state was read): not tidy, so apply and
        # revert look again under the lock, where missing originals are a refusal.
        tidy = self.store.tidy(recorded) and None not in originals.values() and not busy(self.home())
        return Snapshot(
            project=self.project, version=self.version, installed=self.target.kind is INSTALLED, local=self.target.local,
            state_file=self.store.state_file, objects=self.store.objects, pending=pending, tidy=tidy,
            applied=applied, old=old, fixes=asked, kept=kept, originals=originals, current=current,
            shipped=shipped, series_pair=pair, series=self.series, blocked=blocked,
            stale=stale_bytecode(self.target, current) if fixes is not None else {},
            read=self.reader(),
        )

    def installed_hashes(self, rels: Iterable[str]) -> dict[str, str]:
        """repository path -> sha256 (hex) of each of the files ``rels`` as the dist-info
        RECORD lists it (a RECORD holds every file of the package: only their rows are parsed)."""
        import base64

        from patchkit.targets import dist_info

        wanted = {self.target.local(rel): rel for rel in rels}
        out: dict[str, str] = {}
        for record in sorted(self.target.root.glob(f"{self.project.dist_info()}/RECORD")):
            try:
                rows = dist_info.record(record.parent, wanted) or []
            except dist_info.MalformedRecord:
                continue  # rows that are not path,hash,size: no hash to trust
            for row in rows:
                path = row.path
                if path in wanted and row.hash is not None and row.hash.mode == "sha256":
                    try:
                        raw = base64.urlsafe_b64decode(row.hash.value + "=" * (-len(row.hash.value) % 4))
                    except ValueError:
                        continue
                    out[wanted[path]] = raw.hex()
        return out

    def originals(self, applied: Applied | None) -> dict[str, bytes | None]:
        return {f.path: self.store.get(f.pre_sha256) for f in applied.files} if applied else {}
