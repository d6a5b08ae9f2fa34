"""A version's shipped series: its manifest, the fixes it blocks, its patches checked and taken
together (docs/ARCHITECTURE.md, "targets")."""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.data import shipped as shipped_dir
from patchkit.digest import sha256
from patchkit.errors import BadInput, UnsafePath
from patchkit.fixes.registry import Project, fixes_for
from patchkit.patch.manifest import FixStatus, Manifest, Shipped, read_manifest
from patchkit.plan.reasons import NoShippedPatch
from patchkit.targets.safety import check_relative
from patchkit.types import CANNOT_APPLY, INCOMPLETE, Status

if TYPE_CHECKING:  # for the annotations only
    from collections.abc import Callable, Iterable

    from patchkit.cc import Key


class Series:
    """The shipped series of ``project``'s release ``series`` (None: none), each folder's manifest
    read once: apply's second look, under the lock, reads the target again, not this."""

    def __init__(self, project: Project, series: str | None) -> None:
        self.project = project
        self.series = series
        self._manifests: dict[Path | None, tuple[Path, Manifest] | None] = {}  # patches folder -> ``manifest``'s answer

    def manifest(self, patches: Path | None) -> tuple[Path, Manifest] | None:
        """(the path, the manifest) of the series in ``patches`` (the folder of series; None: the
        ones installed with patchkit), or None when there is none."""
        if not self.series:
            return None
        if patches not in self._manifests:  # patchkit's own files (or --patches), not the target's: read once
            path = (patches or shipped_dir("patches")) / self.project.patches / self.series / "manifest.json"
            self._manifests[patches] = (path, read_manifest(path)) if path.is_file() else None
        return self._manifests[patches]

    def status(self, fix: str) -> Status | None:
        """What the shipped manifest says of ``fix`` (patched, already upstream, nothing to patch,
        cannot apply, incomplete); None without a manifest or where it names none."""
        found = self.manifest(None)
        return next((f.status for f in found[1].fixes if f.fix == fix), None) if found else None

    def blocked(self, patches: Path | None, fixes: Iterable[str], local: Callable[[str], str]) -> list[FixStatus]:
        """The fixes of ``fixes`` that the manifest says cannot apply here or are incomplete, their
        gates' repository paths as the target names them (``local``: ``sglang/...`` when installed);
        [] without a manifest."""
        found = self.manifest(patches)
        return [f.localized(local) for f in found[1].blocked(set(fixes_for(self.project.name, fixes)))] if found else []

    def no_shipped(self, patches: Path | None, version: str | None, from_cc: Key, to_cc: Key) -> NoShippedPatch:
        """Why no shipped patch fits: none for this version, or one for another cc pair."""
        other = self.shipped(patches) if self.series else None
        pair = (other.from_cc, other.to_cc) if other and other.from_cc is not None and other.to_cc is not None else None
        return NoShippedPatch(version, self.project.label, self.series, pair, from_cc, to_cc)

    def shipped(self, patches: Path | None, from_cc: Key | None = None, to_cc: Key | None = None,
                fixes: Iterable[str] | None = None) -> Shipped | None:
        """The shipped patches for ``fixes`` (default: the whole series) and cc pair, checked and
        taken together; None if the series does not hold them all, or when two of them patch the
        same file (apply then generates from the files)."""
        found = self.manifest(patches)
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
                if not any(fnmatchcase(f.path, g) for g in self.project.files):
                    raise UnsafePath(f.path, f"refused: {manifest_path} names a file outside patchkit's target files")
            names.append(str(patch_path) if patches else "/".join(x for x in ("patches", self.project.patches, self.series, name) if x))
            parts.append((names[-1], entry.patch_sha256, raw))
        pair = (keyed[0].from_cc, keyed[0].to_cc) if keyed else (None, None)
        return Shipped(" + ".join(names), manifest.version, " + ".join(e.patch for e in entries), tuple(e.fix for e in entries),
                       pair[0], pair[1], tuple(f for e in entries for f in e.files), tuple(parts))
