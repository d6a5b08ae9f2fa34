"""``manifest.json``: what a patch is for and what it does, file by file."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


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
