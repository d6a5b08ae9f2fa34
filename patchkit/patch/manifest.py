"""``manifest.json``: what a patch is for and what it does, file by file.

Written as a ``Manifest`` (``to_bytes``) and read back as one (``read_manifest``, which
checks the shape readers use as it builds the values: a file that is not one is one
BadInput line naming it); the patches of one release taken together are a ``Shipped``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import BadInput
from patchkit.rewrite.found import Found
from patchkit.types import CANNOT_APPLY, INCOMPLETE, NOT_NEEDED_HERE, PATCHED, Status
from patchkit.values import Value

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from patchkit.cc import Key
    from patchkit.patch.read import FilePatch
    from patchkit.rewrite.unfit import Unfit

# What a reader needs of a manifest (written by ``Manifest``, checked by ``read_manifest``):
# the release, the fixes considered, and the series, one patch per fix that changed something.
MANIFEST_KEYS = ("version", "fixes", "series")
PATCH_KEYS = ("fix", "patch", "patch_sha256", "from_cc", "to_cc", "files")
FILE_KEYS = ("path", "pre_sha256", "post_sha256", "tables")
TABLE_KEYS = ("name", "scope", "status", "added_key", "copied_from")
SERIES = "series"  # quilt's list of the patches, in order
# The statuses that explain an empty series: a release where no fix patched anything keeps a
# manifest only for the fixes that cannot apply there (or are incomplete, or not needed here).
EXPLAINS_NO_PATCH = (CANNOT_APPLY, INCOMPLETE, NOT_NEEDED_HERE)


class Corrupt(ValueError):
    """What is wrong with a manifest's shape, in the words after "corrupt manifest: "."""


_NEEDS_KEYS = f"needs the keys {', '.join(MANIFEST_KEYS)}"
_PATCH_NEEDS = f"each patch of the series needs {', '.join(PATCH_KEYS)}"
_FILE_NEEDS = f"each file needs {', '.join(FILE_KEYS)}"
_WRONG_TYPE = "a field has the wrong type"


def _record(value: object, keys: tuple[str, ...], why: str) -> dict[str, object]:
    """``value`` if it is an object with ``keys``; else Corrupt(``why``)."""
    if not isinstance(value, dict) or any(k not in value for k in keys):
        raise Corrupt(why)
    return value


def _items(value: object, why: str, empty: bool = True) -> list[object]:
    if not isinstance(value, list) or not (empty or value):
        raise Corrupt(why)
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise Corrupt(_WRONG_TYPE)
    return value


def _maybe_text(value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise Corrupt(_WRONG_TYPE)
    return value


def _cc(value: object) -> Key | None:
    """A key as tables spell it (12, "12.0"), or None (a series entry of predicate rules only)."""
    if value is not None and (not isinstance(value, (int, str)) or isinstance(value, bool)):
        raise Corrupt(_WRONG_TYPE)
    return value


class FixStatus(Value):
    """What became of one fix on the release: patched, already upstream, cannot apply (why)...
    Why is kept as values, never a sentence: an incomplete fix's gates, a cannot-apply fix's
    ``Unfit``, a fix not needed here the judge's reason (its JSON, said by ``render/generate.py``);
    ``says`` makes the line when read.  A manifest written before kept the sentence in ``reason``,
    read and said as it is (docs/ARCHITECTURE.md, "Saved values")."""

    fix: str
    status: Status
    reason: str | None = None  # a manifest written before: the sentence
    gates: list[object] | None = None  # incomplete: the gates left on its feature path (``scan.finding``'s JSON)
    unfit: Unfit | None = None  # cannot apply: how the rule does not fit
    unneeded: dict[str, object] | None = None  # not needed here: the judge's reason, as ``render/saved.py`` keeps it

    def says(self) -> str | None:
        """Why, in one line: an incomplete fix's gates left, with file and line (``gates_words``), a
        cannot-apply fix's error; else ``reason`` (a fix not needed here is said by ``render/``)."""
        gates = [g for g in self.gates or () if isinstance(g, dict) and isinstance(g.get("path"), str)]
        if self.status == INCOMPLETE and gates and len(gates) == len(self.gates or ()):
            return gates_words(gates)
        if self.status == CANNOT_APPLY and self.unfit is not None:
            return self.unfit.words()
        return self.reason

    def localized(self, local: Callable[[str], str]) -> FixStatus:
        """With its gates' repository paths as the target names them (``local``: ``sglang/...`` in an
        installed package, not ``python/sglang/...``)."""
        gates = [dict(g, path=local(g["path"])) for g in self.gates or () if isinstance(g, dict) and isinstance(g.get("path"), str)]
        return self._replace(gates=gates if self.gates is not None else None)

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"fix": self.fix, "status": self.status, "reason": self.reason}
        if self.gates is not None:
            doc["gates"] = self.gates
        if self.unfit is not None:
            doc["unfit"] = self.unfit.to_json()
        if self.unneeded is not None:
            doc["unneeded"] = self.unneeded
        return doc

    @classmethod
    def from_json(cls, doc: object) -> FixStatus:
        status = Status.parse(doc.get("status")) if isinstance(doc, dict) else None
        if status is None or not isinstance(doc, dict) or not isinstance(fix := doc.get("fix"), str):
            raise Corrupt(_PATCH_NEEDS)
        unfit = doc.get("unfit")
        if unfit is not None:  # a fix that cannot apply (a few manifests): how its rule does not fit
            from patchkit.rewrite.unfit import Unfit

            if (unfit := Unfit.from_json(unfit)) is None:
                raise Corrupt(_WRONG_TYPE)
        unneeded = doc.get("unneeded")
        if unneeded is not None and not isinstance(unneeded, dict):
            raise Corrupt(_WRONG_TYPE)
        return cls(fix, status, _maybe_text(doc.get("reason")), _gates(doc.get("gates")), unfit, unneeded)


def _gates(value: object) -> list[object] | None:
    if value is not None and not isinstance(value, list):
        raise Corrupt(_WRONG_TYPE)
    return value


def gates_words(gates: list[dict[str, object]]) -> str:
    """Why a fix is incomplete, in one line: the gates left (at most three), with file and line."""
    more = f" (and {len(gates) - 3} more)" if len(gates) > 3 else ""
    said = [f"{g['path']}:{g.get('line')}" + (f" in {g['function']}()" if g.get("function") else "") + f": {g.get('snippet')}"
            for g in gates[:3]]
    return "the feature's path still refuses the GPU at " + "; ".join(said) + more


class FileEntry(Value):
    path: str
    mode: str | None  # (None: a manifest older than series does not say)
    pre_blob: str | None
    post_blob: str | None
    pre_sha256: str
    post_sha256: str
    tables: list[Found]  # what the rules patched here

    @classmethod
    def from_json(cls, value: object) -> FileEntry:
        doc = _record(value, FILE_KEYS, _FILE_NEEDS)
        tables = [Found.from_json(_record(t, TABLE_KEYS, _WRONG_TYPE)) for t in _items(doc["tables"], _WRONG_TYPE)]
        return cls(_text(doc["path"]), _maybe_text(doc.get("mode")), _maybe_text(doc.get("pre_blob")), _maybe_text(doc.get("post_blob")), _text(doc["pre_sha256"]),
                   _text(doc["post_sha256"]), tables)


class SeriesEntry(Value):
    """One patch of the series: the fix it carries, its rules and what it does, file by file.
    A file's pre-image is what the patches before it in the series leave."""

    fix: str
    patch: str  # file name of the patch beside the manifest
    patch_sha256: str
    from_cc: Key | None  # the pair its keyed rules copy (None: only predicate rules)
    to_cc: Key | None
    rules: list[object]  # {"kind", "where", "evidence", "needs"} of each rule
    files: list[FileEntry]
    already_upstream: list[Found]  # what the fix found already there

    @classmethod
    def from_json(cls, value: object) -> SeriesEntry:
        doc = _record(value, PATCH_KEYS, _PATCH_NEEDS)
        files = [FileEntry.from_json(f) for f in _items(doc["files"], _FILE_NEEDS, empty=False)]
        upstream = [Found.from_json(t) for t in _items(doc.get("already_upstream") or [], _WRONG_TYPE) if isinstance(t, dict)]
        return cls(_text(doc["fix"]), _text(doc["patch"]), _text(doc["patch_sha256"]), _cc(doc["from_cc"]), _cc(doc["to_cc"]),
                   _items(doc.get("rules") or [], _WRONG_TYPE), files, upstream)


class Manifest(Value):
    project: str | None  # (None: a manifest older than series does not say)
    version: str
    tag: str | None
    commit: str | None
    fixes: list[FixStatus]  # every fix considered, in series order
    series: list[SeriesEntry]
    patchkit: str | None

    def to_bytes(self) -> bytes:
        return (json.dumps(_plain(self), indent=2, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, value: object) -> Manifest:
        """The manifest a document holds (one of patchkit before series as a one-patch series);
        Corrupt when it lacks what readers use or a field has the wrong type."""
        doc = _record(_upgrade(value) if isinstance(value, dict) else value, MANIFEST_KEYS, _NEEDS_KEYS)
        fixes = [FixStatus.from_json(f) for f in _items(doc["fixes"], _PATCH_NEEDS)]
        entries = _items(doc["series"], _PATCH_NEEDS)
        for entry in entries:  # every patch has its keys before any is read further
            _record(entry, PATCH_KEYS, _PATCH_NEEDS)
        if not entries and not any(f.status in EXPLAINS_NO_PATCH for f in fixes):
            raise Corrupt(_PATCH_NEEDS)
        series = [SeriesEntry.from_json(e) for e in entries]
        return cls(_maybe_text(doc.get("project")), _text(doc["version"]), _maybe_text(doc.get("tag")), _maybe_text(doc.get("commit")),
                   fixes, series, _maybe_text(doc.get("patchkit")))

    def blocked(self, fixes: Collection[str]) -> list[FixStatus]:
        """Those of ``fixes`` that cannot apply on this release or are incomplete."""
        return [f for f in self.fixes if f.fix in fixes and f.status in (CANNOT_APPLY, INCOMPLETE)]


def _plain(value: object) -> object:
    """Records (and lists of them) as JSON's dicts and lists; a value with its own JSON
    shape (``rewrite.found.Found``) in that shape."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def _upgrade(doc: dict[str, object]) -> dict[str, object]:
    """A manifest of patchkit before series (one patch, torch-symm-mem) as a one-patch series."""
    if "series" in doc or "patch" not in doc:
        return doc
    entry = {k: doc.get(k) for k in ("patch", "patch_sha256", "from_cc", "to_cc", "files", "already_upstream")}
    entry.update(fix="torch-symm-mem", rules=[])
    return dict(doc, fixes=[{"fix": "torch-symm-mem", "status": PATCHED, "reason": None}], series=[entry])


def read_manifest(path: Path) -> Manifest:
    """The manifest at ``path``; BadInput naming it if it is not one."""
    try:
        return Manifest.from_json(json.loads(path.read_bytes()))
    except (OSError, ValueError) as exc:  # Corrupt is a ValueError, as JSON's own errors are
        raise BadInput(str(path), f"corrupt manifest: {exc}") from None


class Shipped(Value):
    """The shipped patches of one version for the fixes chosen, taken together: their
    ``files`` (each file in one patch only), ``fixes`` and cc pair; ``parts`` each patch's
    (name, sha256, bytes), the sha256 checked against the manifest already."""

    name: str  # e.g. "patches/0.5.9/0001-...patch", or several joined by " + "
    version: str
    patch: str  # the patches' file names, joined by " + "
    fixes: tuple[str, ...]
    from_cc: Key | None  # the pair their keyed rules copy (None: predicate rules only)
    to_cc: Key | None
    files: tuple[FileEntry, ...]
    parts: tuple[tuple[str, str, bytes], ...]

    def sections(self) -> dict[str, FilePatch]:
        """path -> patchread.FilePatch; parsed only when hunks are needed (not for hash checks)."""
        from patchkit.patch import read as patchread

        found: list[FilePatch] = []
        for name, _, raw in self.parts:
            found += patchread.parse(raw, name)
        sections = {s.path: s for s in found}
        if sorted(sections) != sorted(f.path for f in self.files):
            raise BadInput(self.name, "names other files than manifest.json")
        return sections
