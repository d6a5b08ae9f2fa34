"""What every target command gathers first: the target, its version, state and shipped patch."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from patchkit.bounded import read_file
from patchkit.data import shipped as shipped_dir
from patchkit.digest import sha256
from patchkit.errors import BadInput, PatchkitError, UnsafePath
from patchkit.fixes.registry import Project, fixes_for
from patchkit.patch.manifest import FixStatus, Manifest, Shipped, read_manifest
from patchkit.plan import release_changed
from patchkit.targets.locate import INSTALLED, Target, open_install, open_target
from patchkit.targets.safety import check_relative
from patchkit.targets.state import Store
from patchkit.types import CANNOT_APPLY, INCOMPLETE, Applied
from patchkit.versions import is_version, public

SOURCE_CAP = 64 << 20  # a candidate file: SGLang's and FlashInfer's largest are under 5 MiB


class Session:
    """A target with its state store, project and version (and how the version was found)."""

    def __init__(self, target: Target, store: Store, project: Project, version: str | None, how: str) -> None:
        self.target = target
        self.store = store
        self.project = project
        self.version = version
        self.how = how

    @classmethod
    def open(cls, path: Path, version: str | None = None, project: str | None = None, install=None) -> Session:
        """The target at ``path``, or the one that ``--python`` found (``install``, an ``environment.Install``)."""
        target = open_install(install) if install is not None else open_target(path, project)
        found, how = target.version(version)
        return cls(target, Store(target.state_dir), target.project, found, how)

    @property
    def series(self) -> str | None:
        """The release whose shipped series (``patches/<release>/``) is this version's: the
        version itself, or the public release of a local one (``0.5.9+cu128``: a build of 0.5.9
        from another index is 0.5.9's files; where they are not, they differ from the series'
        pre-images and the patch is generated from them).  None for a version unknown or not
        a release version in PEP 440's normal form."""
        release = public(self.version) if self.version else None
        return release if release and is_version(release) else None

    def data(self, command: str, **more) -> dict:
        """The start of every command's --json document: the command, the target, its version."""
        return {"command": command, "path": str(self.target.root), "version": self.version, "version_from": self.how, **more}

    def describe(self) -> str:
        """The first line of every report: where, what, which version and how it was found."""
        what = f"{self.project.label} {self.version or '(version unknown)'}"
        if self.target.install is not None:
            return f"{self.target.install.package}: {what} (editable install of {self.target.root}, {self.how})"
        if self.target.kind == INSTALLED:
            return f"{self.target.root / self.project.name}: {what} (installed), {self.how}"
        return f"{self.target.root}: {what}, {self.how}"

    def current(self, extra: tuple[str, ...] = ()) -> dict[str, bytes]:
        """The bytes of every candidate file (and of ``extra`` paths) that exists."""
        out = {}
        for rel in sorted(set(self.target.candidates()) | set(extra)):
            link = self.target.root / self.target.local(rel)
            if link.is_symlink():
                # Never written through; refused only if it holds a table we would patch.
                if any(name.encode() in read_file(link, SOURCE_CAP, "source file") for name in self.project.names):
                    raise UnsafePath(str(link), "refused: target is a symlink")
                continue
            path = self.target.path(rel, must_exist=False)
            if path.is_file():
                out[rel] = read_file(path, SOURCE_CAP, "source file")
        return out

    def reader(self):
        """The bytes of a file of the target by repository path, or None (a rule's helper)."""
        def read(rel: str) -> bytes | None:
            try:
                path = self.target.path(rel, must_exist=False)
            except PatchkitError:
                return None
            return read_file(path, SOURCE_CAP, "source file") if path.is_file() and not path.is_symlink() else None

        return read

    def applied(self) -> Applied | None:
        """What patchkit applied here; its paths must be target files of the project."""
        applied = self.store.applied()
        for f in applied.files if applied else ():
            if not isinstance(f.path, str) or not any(fnmatch.fnmatchcase(f.path, g) for g in self.project.files):
                raise BadInput(str(self.store.state_file), f"corrupt patchkit state: {f.path!r} is not a target file")
        return applied

    def state(self) -> tuple[Applied | None, str | None]:
        """(what patchkit applied here, why that state belongs to another release or None).

        A state of another release is never used: commands treat the target as fresh, and
        apply and revert set the old state aside (``Store.set_aside``).
        """
        applied = self.applied()
        if applied is None or self.store.journal() is not None:  # finishing the transaction comes first
            return applied, None
        current = self.current(tuple(f.path for f in applied.files))
        installed = self.installed_hashes(f.path for f in applied.files) if self.target.kind == INSTALLED else None
        return applied, release_changed(applied, current, self.version, installed, self.target.name)

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
        if self.project.name != "flashinfer" or not self.version:
            return []
        from patchkit.targets import jit_builds

        rels = list(rels)
        modules = jit_builds.modules_for(self.target.local(r) for r in rels)
        if not modules:
            return []
        sites = [self.target.root] if self.target.kind == INSTALLED else []
        package = self.target.root / self.target.local(self.project.name)
        builds = jit_builds.find(self.version, sites, os.environ, Path.home(), modules, package=package)
        newest = jit_builds.newest_mtime(self.target.root / self.target.local(r) for r in rels)
        return jit_builds.older_than(builds, newest) if newest is not None else []

    def drop_jit_builds(self, rels, when: str, dry_run: bool = False) -> tuple[list[str], list[str]]:
        """(lines, paths dropped) for the stale JIT builds of ``rels``: each build folder below
        FlashInfer's cache is removed (``jit_builds.drop``); a prebuilt one is named with what
        removes it.  ``when``: how the build came to be stale ("before the patch")."""
        lines, dropped = [], []
        try:
            builds = self.jit_builds(rels)
        except PatchkitError as exc:
            return [f"note: FlashInfer's JIT builds not checked: {exc}"], []
        if not builds:
            return lines, dropped
        from patchkit.targets import jit_builds  # (only FlashInfer has JIT builds)

        for b in builds:
            if not b.droppable:
                lines.append(f"note: {b.library} is {b.kind}: FlashInfer {self.version} loads it instead of building "
                             f"{b.module} from the patched sources; {b.advice}")
                continue
            if dry_run:
                lines.append(f"would drop stale FlashInfer JIT build {b.path} (built {when})")
                continue
            try:
                gone = jit_builds.drop(b)
            except PatchkitError as exc:
                lines.append(f"note: {exc}")
                continue
            if gone is not None:
                dropped.append(str(gone))
                lines.append(f"dropped stale FlashInfer JIT build {gone} (built {when})")
        return lines, dropped

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
        return processes.stale_processes(self.project.name, max(times), self.environment())

    def environment(self) -> Path | None:
        """For an installed package, the prefix of the environment it is installed in
        (``V`` for ``V/lib/python3.11/site-packages``) if that prefix has a Python; else None."""
        if self.target.kind != INSTALLED:
            return None
        prefix = self.target.root.parent.parent.parent
        if self.target.root.parent.name.startswith("python") and any((prefix / "bin").glob("python*")):
            return prefix
        return None

    def set_aside(self, applied: Applied, reason: str) -> str:
        """Set a state of another release aside (lock held); the line to report."""
        folder = self.store.set_aside(applied)
        return f"{reason}: the old state is set aside in {folder}"

    def stale_bytecode(self, current: dict[str, bytes]) -> list[Path]:
        """The stale cached bytecode of every target file that holds a table."""
        from patchkit.targets import bytecode

        return [
            pyc.path
            for rel, data in current.items()
            if any(name.encode() in data for name in self.project.names)
            for pyc in bytecode.check(self.target.path(rel), data)
            if pyc.status == "stale"
        ]

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
        what = f"{self.project.label} {self.version or '(version unknown)'}"
        if self.series and self.series != self.version:
            what += f" (release {self.series})"
        other = self.shipped(patches) if self.series else None
        if other is None:
            return f"no shipped patch for {what}"
        return (
            f"no shipped patch for {what} that copies key {from_cc!r} to key {to_cc!r} "
            f"(the shipped one copies key {other.from_cc!r} to key {other.to_cc!r})"
        )

    def originals(self, applied: Applied | None) -> dict[str, bytes | None]:
        return {f.path: self.store.get(f.pre_sha256) for f in applied.files} if applied else {}

    def manifest(self, patches: Path | None) -> Manifest | None:
        """The manifest of this version's shipped series (``patches``: the folder of series;
        a local version's is its public release's), or None when there is none."""
        if not self.series:
            return None
        path = (patches or shipped_dir("patches")) / self.project.patches / self.series / "manifest.json"
        return read_manifest(path) if path.is_file() else None

    def blocked(self, patches: Path | None, fixes) -> list[FixStatus]:
        """The fixes of ``fixes`` that the shipped manifest of this version says cannot apply
        here or are incomplete; [] without a manifest."""
        manifest = self.manifest(patches)
        return manifest.blocked(set(fixes_for(self.project.name, fixes))) if manifest else []

    def shipped(self, patches: Path | None, from_cc=None, to_cc=None, fixes=None) -> Shipped | None:
        """The shipped patches of this version for ``fixes`` (default: the whole series) and
        cc pair, checked and taken together; None if the series does not hold them all, or
        when two of them patch the same file (apply then generates from the files)."""
        if not self.series:
            return None
        root = patches or shipped_dir("patches")
        folder = root / self.project.patches / self.series
        manifest_path = folder / "manifest.json"
        if not manifest_path.is_file():
            return None
        manifest = read_manifest(manifest_path)
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
        names, data = [], b""
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
                if not any(fnmatch.fnmatchcase(f.path, g) for g in self.project.files):
                    raise UnsafePath(f.path, f"refused: {manifest_path} names a file outside patchkit's target files")
            names.append(str(patch_path) if patches else "/".join(x for x in ("patches", self.project.patches, self.series, name) if x))
            data += raw
        pair = (keyed[0].from_cc, keyed[0].to_cc) if keyed else (None, None)
        return Shipped(" + ".join(names), manifest.version, " + ".join(e.patch for e in entries), tuple(e.fix for e in entries),
                       pair[0], pair[1], tuple(f for e in entries for f in e.files), data)
