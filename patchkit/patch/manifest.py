"""``manifest.json``: what a patch is for and what it does, file by file."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

from patchkit.errors import BadInput

# What a reader needs of a manifest (written by ``Manifest``, checked by ``read_manifest``).
MANIFEST_KEYS = ("version", "from_cc", "to_cc", "patch", "patch_sha256", "files")
FILE_KEYS = ("path", "pre_sha256", "post_sha256", "tables")
TABLE_KEYS = ("name", "scope", "status", "added_key", "copied_from")


@dataclass(frozen=True)
class FileEntry:
    path: str
    mode: str
    pre_blob: str
    post_blob: str
    pre_sha256: str
    post_sha256: str
    tables: list = field(default_factory=list)  # TableResult.to_json() of the patched tables


@dataclass(frozen=True)
class Manifest:
    project: str
    version: str
    tag: str
    commit: str
    from_cc: object
    to_cc: object
    patch: str  # file name of the patch beside the manifest
    patch_sha256: str
    files: list  # of FileEntry
    already_upstream: list  # TableResult.to_json() of tables that had to_cc already
    patchkit: str

    def to_bytes(self) -> bytes:
        return (json.dumps(asdict(self), indent=2, sort_keys=True) + "\n").encode()


def read_manifest(path: Path) -> dict:
    """The manifest at ``path``, checked for the keys and types readers use; BadInput if it is not one."""
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise BadInput(str(path), f"corrupt manifest: {exc}") from None
    if not isinstance(doc, dict) or any(k not in doc for k in MANIFEST_KEYS):
        raise BadInput(str(path), f"corrupt manifest: needs the keys {', '.join(MANIFEST_KEYS)}")
    files = doc["files"]
    if not isinstance(files, list) or not files or any(
        not isinstance(f, dict) or any(k not in f for k in FILE_KEYS) for f in files
    ):
        raise BadInput(str(path), f"corrupt manifest: each file needs {', '.join(FILE_KEYS)}")
    texts = [doc["version"], doc["patch"], doc["patch_sha256"]] + [f[k] for f in files for k in FILE_KEYS[:3]]
    tables = [t for f in files for t in (f["tables"] if isinstance(f["tables"], list) else [None])]
    if (
        not all(isinstance(t, str) for t in texts)
        or not all(isinstance(c, (int, str)) and not isinstance(c, bool) for c in (doc["from_cc"], doc["to_cc"]))
        or not all(isinstance(t, dict) and all(k in t for k in TABLE_KEYS) for t in tables)
    ):
        raise BadInput(str(path), "corrupt manifest: a field has the wrong type")
    return doc


class Shipped(NamedTuple):
    """A shipped patch for one version: its manifest and its bytes (sha256 already checked)."""

    name: str  # e.g. "patches/0.5.9/0001-...patch"
    manifest: dict
    data: bytes

    def sections(self) -> dict:
        """path -> patchread.FilePatch; parsed only when hunks are needed (not for hash checks)."""
        from patchkit.patch import read as patchread

        sections = {s.path: s for s in patchread.parse(self.data, self.name)}
        if sorted(sections) != sorted(f["path"] for f in self.manifest["files"]):
            raise BadInput(self.name, "names other files than manifest.json")
        return sections
