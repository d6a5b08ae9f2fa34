"""``manifest.json``: what a patch is for and what it does, file by file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from patchkit.errors import BadInput

# What a reader needs of a manifest (written by ``Manifest``, checked by ``read_manifest``):
# the release, the fixes considered, and the series, one patch per fix that changed something.
MANIFEST_KEYS = ("version", "fixes", "series")
PATCH_KEYS = ("fix", "patch", "patch_sha256", "from_cc", "to_cc", "files")
FILE_KEYS = ("path", "pre_sha256", "post_sha256", "tables")
TABLE_KEYS = ("name", "scope", "status", "added_key", "copied_from")
SERIES = "series"  # quilt's list of the patches, in order


class FileEntry(NamedTuple):
    path: str
    mode: str
    pre_blob: str
    post_blob: str
    pre_sha256: str
    post_sha256: str
    tables: list  # what the rules patched here (rewrite.rules.Found)


class SeriesEntry(NamedTuple):
    """One patch of the series: the fix it carries, its rules and what it does, file by file.
    A file's pre-image is what the patches before it in the series leave."""

    fix: str
    patch: str  # file name of the patch beside the manifest
    patch_sha256: str
    from_cc: object  # the pair its keyed rules copy (None: only predicate rules)
    to_cc: object
    rules: list  # {"kind", "where", "evidence", "needs"} of each rule
    files: list  # of FileEntry
    already_upstream: list  # what the fix found already there


class Manifest(NamedTuple):
    project: str
    version: str
    tag: str
    commit: str
    fixes: list  # {"fix", "status", "reason"} of every fix considered, in series order
    series: list  # of SeriesEntry
    patchkit: str

    def to_bytes(self) -> bytes:
        return (json.dumps(_plain(self), indent=2, sort_keys=True) + "\n").encode()


def _plain(value):
    """Records (and lists of them) as JSON's dicts and lists; a value with its own JSON
    shape (``rewrite.rules.Found``) in that shape."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def _upgrade(doc: dict) -> dict:
    """A manifest of patchkit before series (one patch, torch-symm-mem) as a one-patch series."""
    if "series" in doc or "patch" not in doc:
        return doc
    entry = {k: doc.get(k) for k in ("patch", "patch_sha256", "from_cc", "to_cc", "files", "already_upstream")}
    entry.update(fix="torch-symm-mem", rules=[])
    return dict(doc, fixes=[{"fix": "torch-symm-mem", "status": "patched", "reason": None}], series=[entry])


def read_manifest(path: Path) -> dict:
    """The manifest at ``path``, checked for the keys and types readers use; BadInput if it is not one."""
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise BadInput(str(path), f"corrupt manifest: {exc}") from None
    if isinstance(doc, dict):
        doc = _upgrade(doc)
    if not isinstance(doc, dict) or any(k not in doc for k in MANIFEST_KEYS):
        raise BadInput(str(path), f"corrupt manifest: needs the keys {', '.join(MANIFEST_KEYS)}")
    series, fixes = doc["series"], doc["fixes"]
    if (
        not isinstance(series, list) or not isinstance(fixes, list)
        or any(not isinstance(e, dict) or any(k not in e for k in PATCH_KEYS) for e in series)
        or any(not isinstance(f, dict) or not isinstance(f.get("fix"), str) or not isinstance(f.get("status"), str) for f in fixes)
    ):
        raise BadInput(str(path), f"corrupt manifest: each patch of the series needs {', '.join(PATCH_KEYS)}")
    # An empty series says why: a release where no fix patched anything keeps a manifest only
    # for the fixes that cannot apply there (or are incomplete, or not needed on this machine).
    if not series and not any(f["status"] in ("cannot apply", "incomplete", "not needed here") for f in fixes):
        raise BadInput(str(path), f"corrupt manifest: each patch of the series needs {', '.join(PATCH_KEYS)}")
    for entry in series:
        files = entry["files"]
        if not isinstance(files, list) or not files or any(
            not isinstance(f, dict) or any(k not in f for k in FILE_KEYS) for f in files
        ):
            raise BadInput(str(path), f"corrupt manifest: each file needs {', '.join(FILE_KEYS)}")
        texts = [doc["version"], entry["fix"], entry["patch"], entry["patch_sha256"]] + [f[k] for f in files for k in FILE_KEYS[:3]]
        tables = [t for f in files for t in (f["tables"] if isinstance(f["tables"], list) else [None])]
        if (
            not all(isinstance(t, str) for t in texts)
            or not all(c is None or isinstance(c, (int, str)) and not isinstance(c, bool) for c in (entry["from_cc"], entry["to_cc"]))
            or not all(isinstance(t, dict) and all(k in t for k in TABLE_KEYS) for t in tables)
        ):
            raise BadInput(str(path), "corrupt manifest: a field has the wrong type")
    return doc


class Shipped(NamedTuple):
    """The shipped patches of one version for the fixes chosen, taken together: ``manifest``
    holds their ``files`` (each file in one patch only), ``fixes`` and cc pair; ``data``
    their bytes, one after the other (each sha256 already checked)."""

    name: str  # e.g. "patches/0.5.9/0001-...patch", or several joined by " + "
    manifest: dict
    data: bytes

    def sections(self) -> dict:
        """path -> patchread.FilePatch; parsed only when hunks are needed (not for hash checks)."""
        from patchkit.patch import read as patchread

        sections = {s.path: s for s in patchread.parse(self.data, self.name)}
        if sorted(sections) != sorted(f["path"] for f in self.manifest["files"]):
            raise BadInput(self.name, "names other files than manifest.json")
        return sections
