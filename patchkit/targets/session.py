"""What every target command gathers first: the target, its version, state and shipped patch."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.bounded import read_file
from patchkit.data import shipped as shipped_dir
from patchkit.digest import sha256
from patchkit.errors import BadInput, PatchkitError, UnsafePath
from patchkit.fixes.registry import Project, fixes_for, rules_for
from patchkit.patch.manifest import FixStatus, Manifest, Shipped, read_manifest
from patchkit.plan import release_changed
from patchkit.targets.locate import INSTALLED, Target, open_install, open_target
from patchkit.targets.safety import check_relative
from patchkit.targets.state import Store, busy, pending
from patchkit.text import mentions, wildcard
from patchkit.types import CANNOT_APPLY, INCOMPLETE, STALE, Applied, Status, TargetKind
from patchkit.versions import is_version, public

if TYPE_CHECKING:  # for the annotations only
    from patchkit.plan.apply import Snapshot
    from patchkit.plan.reasons import ReleaseChanged
    from patchkit.targets.jit_builds import JitCheck

SOURCE_CAP = 64 << 20  # a candidate file: SGLang's and FlashInfer's largest are under 5 MiB


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
        self._manifests: dict = {}  # patches folder -> ``_manifest``'s answer: read once a command
        self._bytes: dict[str, bytes] = {}  # repository path -> the bytes last read (``_read``)

    @classmethod
    def open(cls, path: Path, version: str | None = None, project: str | None = None, install=None) -> Session:
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

    def where_fields(self) -> dict:
        """Where the target is, what, which version and how it was found (``report.Where``'s fields)."""
        fields = {"label": self.project.label, "path": str(self.target.root), "version": self.version,
                  "version_from": self.how}
        if self.target.install is not None:
            return dict(fields, shown=str(self.target.install.package), kind=TargetKind.EDITABLE, editable_of=str(self.target.root))
        if self.target.kind is INSTALLED:
            return dict(fields, shown=str(self.target.root / self.project.name), kind=TargetKind.INSTALLED)
        return dict(fields, shown=str(self.target.root), kind=TargetKind.CHECKOUT)

    def current(self, extra: tuple[str, ...] = ()) -> dict[str, bytes]:
        """The bytes of every candidate file (and of ``extra`` paths) that exists."""
        return self._read(set(self.target.candidates()) | set(extra))

    def _read(self, rels) -> dict[str, bytes]:
        """The bytes of each of ``rels`` that exists, each checked (``Target.path``) then read."""
        out = {}
        for rel in sorted(rels):
            try:
                path = self.target.path(rel, must_exist=False)
            except UnsafePath:
                link = self.target.root / self.target.local(rel)
                if not link.is_symlink():
                    raise
                # Never written through; refused only if it holds a table we would patch.
                if mentions(read_file(link, SOURCE_CAP, "source file"), self.project.names):
                    raise UnsafePath(str(link), "refused: target is a symlink") from None
                continue
            try:
                data = read_file(path, SOURCE_CAP, "source file")
            except FileNotFoundError:
                continue
            # The same bytes read again (apply and revert read before the lock and under it): the
            # first copy is kept, the second freed at once, and what was found in it stands.
            seen = self._bytes.get(rel)
            out[rel] = self._bytes[rel] = seen if seen == data else data
        return out

    def reader(self):
        """The bytes of a file of the target by repository path, or None (a rule's helper); what it
        read is in its ``seen`` (``plan.apply.unchanged`` compares it with a second look)."""
        seen: dict[str, bytes | None] = {}

        def read(rel: str) -> bytes | None:
            try:
                path = self.target.path(rel, must_exist=False)
            except PatchkitError:
                data = None
            else:
                data = read_file(path, SOURCE_CAP, "source file") if path.is_file() and not path.is_symlink() else None
            seen[rel] = data
            return data

        read.seen = seen
        return read

    def home(self) -> Store | None:
        """The state dir of the environment this target was found in (``targets/env_transaction.py``):
        that of an installed package, or of a project ``--python`` found; else None."""
        folder = self.target.environment_dir
        return None if folder is None else Store(folder)

    def journal(self) -> tuple[dict | None, Path]:
        """(the pending transaction of this target, its journal file): ``state.pending``."""
        return pending(self.store, self.home())

    def applied(self) -> Applied | None:
        """What patchkit applied here; its paths must be target files of the project."""
        applied = self.store.applied()
        for f in applied.files if applied else ():
            if not isinstance(f.path, str) or not any(wildcard(f.path, g) for g in self.project.files):
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

    def _changed(self, applied: Applied, current: dict[str, bytes]):
        installed = self.installed_hashes(f.path for f in applied.files) if self.target.kind is INSTALLED else None
        return release_changed(applied, current, self.version, installed, self.target.name)

    def snapshot(self, patches: Path | None, fixes: tuple[str, ...] | None = None, from_cc=None, to_cc=None) -> Snapshot:
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
        old = Old(recorded, reason) if reason else None
        applied = None if old else recorded
        current = {rel: data for rel, data in read.items() if rel in candidates} if old else read
        asked, kept = with_applied(fixes, applied, old is not None) if fixes is not None else ((), ())
        blocked, shipped, pair = (), None, None
        if fixes is not None:
            blocked = tuple(self.blocked(patches, asked))
            usable = tuple(f for f in asked if f not in {b.fix for b in blocked})
            if rules_for(self.project.name, usable, from_cc, to_cc):
                shipped = self.shipped(patches, from_cc, to_cc, usable)
                # The pair of the shipped patches of these fixes, where only the pair is why none fits
                # (not the whole series': its pair is no reason where it holds none of these fixes).
                whole = self.shipped(patches, fixes=usable) if shipped is None and self.series else None
                pair = (whole.from_cc, whole.to_cc) if whole else None
        elif applied is None:
            shipped = self.shipped(patches)
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
            stale=self._stale(current) if fixes is not None else {},
            read=self.reader(),
        )

    def installed_hashes(self, rels) -> dict[str, str]:
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
                path = str(row)
                if path in wanted and row.hash is not None and row.hash.mode == "sha256":
                    try:
                        raw = base64.urlsafe_b64decode(row.hash.value + "=" * (-len(row.hash.value) % 4))
                    except ValueError:
                        continue
                    out[wanted[path]] = raw.hex()
        return out

    def jit_builds(self, rels) -> list:
        """FlashInfer's JIT builds of the modules compiled from the files ``rels`` that are older
        than those files (``jit_builds.Build``): FlashInfer would load them instead of compiling
        what the files hold now.  [] for another project."""
        if not self.project.jit_builds or not self.version:
            return []
        from patchkit.targets import jit_builds

        rels = list(rels)
        modules = jit_builds.modules_for(self.target.local(r) for r in rels)
        if not modules:
            return []
        sites = [self.target.root] if self.target.kind is INSTALLED else []
        package = self.target.root / self.target.local(self.project.name)
        builds = jit_builds.find(self.version, sites, os.environ, Path.home(), modules, package=package)
        newest = jit_builds.newest_mtime(self.target.root / self.target.local(r) for r in rels)
        return jit_builds.older_than(builds, newest) if newest is not None else []

    def drop_jit_builds(self, rels, dry_run: bool = False) -> JitCheck | None:
        """The stale JIT builds of ``rels``, and what became of each: a build folder below
        FlashInfer's cache is removed (``jit_builds.drop``; with ``dry_run`` it would be), a
        prebuilt one is left alone (``Build.advice`` says what removes it).  None for a project
        that has no JIT builds (all but FlashInfer): nothing to look for, nothing imported."""
        if not self.project.jit_builds:
            return None
        from patchkit.targets import jit_builds
        from patchkit.targets.jit_builds import Drop, JitCheck, JitDrop

        try:
            builds = self.jit_builds(rels)
        except PatchkitError as exc:
            return JitCheck(error=exc)
        drops = []
        for b in builds:
            if not b.droppable or dry_run:
                drops.append(JitDrop(b.module, b.path, Drop.WOULD_DROP if b.droppable else Drop.PREBUILT, b))
                continue
            try:
                gone = jit_builds.drop(b)
            except PatchkitError as exc:
                drops.append(JitDrop(b.module, b.path, Drop.FAILED, b, exc))
                continue
            drops.append(JitDrop(b.module, b.path, Drop.GONE, b) if gone is None else JitDrop(b.module, gone, Drop.DROPPED, b))
        return JitCheck(tuple(drops))

    def old_processes(self, rels) -> list:
        """The running processes of the project that started before the files ``rels`` were
        last written: they may still run the old code (``processes.Process``)."""
        from patchkit.targets import processes

        times = []
        for rel in rels:
            try:
                times.append(os.stat(self.target.path(rel, must_exist=False)).st_mtime_ns)
            except OSError:
                continue
        if not times:
            return []
        package = self.target.root / self.target.local(self.project.repo_path(self.project.name))
        return processes.stale_processes(self.project.name, max(times), processes.Package(package, self.environment()))

    def environment(self) -> Path | None:
        """For an installed package, the prefix of the environment it is installed in
        (``V`` for ``V/lib/python3.11/site-packages``) if that prefix has a Python; else None."""
        if self.target.kind is not INSTALLED:
            return None
        prefix = self.target.root.parent.parent.parent
        if self.target.root.parent.name.startswith("python") and any((prefix / "bin").glob("python*")):
            return prefix
        return None

    def _stale(self, current: dict[str, bytes]) -> dict[str, tuple[Path, ...]]:
        """The stale cached bytecode of every target file that holds a table."""
        from patchkit.targets import bytecode

        stale = {rel: tuple(pyc.path for pyc in bytecode.check(self.target.path(rel), data) if pyc.status == STALE)
                 for rel, data in current.items() if mentions(data, self.project.names)}
        return {rel: paths for rel, paths in stale.items() if paths}

    @contextmanager
    def local_errors(self) -> Iterator[None]:
        """Errors that name a repository path name it as it is here (``sglang/...`` when installed)."""
        try:
            yield
        except PatchkitError as exc:
            if exc.path and self.target.local(exc.path) != exc.path:
                raise type(exc)(self.target.local(exc.path), exc.reason) from None
            raise

    def why_no_shipped(self, patches: Path | None, from_cc, to_cc) -> str:
        """Why no shipped patch fits: none for this version, or one for another cc pair."""
        from patchkit.plan.apply import why_no_shipped

        other = self.shipped(patches) if self.series else None
        pair = (other.from_cc, other.to_cc) if other else None
        return why_no_shipped(self.project.label, self.version, self.series, pair, from_cc, to_cc)

    def originals(self, applied: Applied | None) -> dict[str, bytes | None]:
        return {f.path: self.store.get(f.pre_sha256) for f in applied.files} if applied else {}

    def _manifest(self, patches: Path | None) -> tuple[Path, Manifest] | None:
        """(the path, the manifest) of this version's shipped series (``patches``: the folder of
        series; a local version's is its public release's), or None when there is none.  Read
        once per session: apply's second look, under the lock, reads the target again, not this."""
        if not self.series:
            return None
        if patches not in self._manifests:  # patchkit's own files (or --patches), not the target's: read once
            path = (patches or shipped_dir("patches")) / self.project.patches / self.series / "manifest.json"
            self._manifests[patches] = (path, read_manifest(path)) if path.is_file() else None
        return self._manifests[patches]

    def shipped_status(self, fix: str) -> Status | None:
        """What the shipped manifest of this version says of ``fix`` (patched, already upstream,
        nothing to patch, cannot apply, incomplete); None without a manifest or where it names none."""
        found = self._manifest(None)
        return next((f.status for f in found[1].fixes if f.fix == fix), None) if found else None

    def blocked(self, patches: Path | None, fixes) -> list[FixStatus]:
        """The fixes of ``fixes`` that the shipped manifest of this version says cannot apply
        here or are incomplete; [] without a manifest."""
        found = self._manifest(patches)
        return [self._here(f) for f in found[1].blocked(set(fixes_for(self.project.name, fixes)))] if found else []

    def _here(self, f: FixStatus) -> FixStatus:
        """A manifest's status with its gates' repository paths as they are here (``sglang/...``
        in an installed package, not ``python/sglang/...``)."""
        gates = [g for g in f.gates or () if isinstance(g, dict) and isinstance(g.get("path"), str)]
        reason = f.reason
        for path in {g["path"] for g in gates}:
            reason = reason.replace(f"{path}:", f"{self.target.local(path)}:") if reason else reason
        local = [dict(g, path=self.target.local(g["path"])) for g in gates]
        return f._replace(reason=reason, gates=local if f.gates is not None else None)

    def shipped(self, patches: Path | None, from_cc=None, to_cc=None, fixes=None) -> Shipped | None:
        """The shipped patches of this version for ``fixes`` (default: the whole series) and
        cc pair, checked and taken together; None if the series does not hold them all, or
        when two of them patch the same file (apply then generates from the files)."""
        found = self._manifest(patches)
        if found is None:
            return None
        manifest_path, manifest = found
        folder = manifest_path.parent
        considered = {f.fix: f.status for f in manifest.fixes}
        if fixes is not None:
            fixes = fixes_for(self.project.name, fixes)
            if any(considered.get(name) in (None, CANNOT_APPLY, INCOMPLETE) for name in fixes):
                return None
        entries = [e for e in manifest.series if fixes is None or e.fix in fixes]
        keyed = [e for e in entries if e.from_cc is not None]
        if not entries or from_cc is not None and any((e.from_cc, e.to_cc) != (from_cc, to_cc) for e in keyed):
            return None
        paths = [f.path for e in entries for f in e.files]
        if len(paths) != len(set(paths)):
            return None
        names, parts = [], []
        for entry in entries:
            name = entry.patch
            if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
                raise UnsafePath(str(manifest_path), f"refused: patch name {name!r} is not a plain file name")
            patch_path = folder / name
            try:
                raw = patch_path.read_bytes()
            except OSError as exc:
                raise BadInput(str(patch_path), f"cannot read the patch named by {manifest_path.name}: {exc.strerror}") from None
            if sha256(raw) != entry.patch_sha256:
                raise BadInput(str(patch_path), "does not match the sha256 in manifest.json (edited after generation?)")
            for f in entry.files:
                check_relative(f.path)
                if not any(wildcard(f.path, g) for g in self.project.files):
                    raise UnsafePath(f.path, f"refused: {manifest_path} names a file outside patchkit's target files")
            names.append(str(patch_path) if patches else "/".join(x for x in ("patches", self.project.patches, self.series, name) if x))
            parts.append((names[-1], entry.patch_sha256, raw))
        pair = (keyed[0].from_cc, keyed[0].to_cc) if keyed else (None, None)
        return Shipped(" + ".join(names), manifest.version, " + ".join(e.patch for e in entries), tuple(e.fix for e in entries),
                       pair[0], pair[1], tuple(f for e in entries for f in e.files), tuple(parts))
