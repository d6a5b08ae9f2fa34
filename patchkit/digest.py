"""Content ids: sha256 (manifests, state) and git blob ids (patch index lines)."""

from __future__ import annotations

import hashlib

_SEEN: dict[bytes, str] = {}  # bytes -> their sha256: a command checks the same files several times
_KEPT = 16 << 20  # the most bytes kept as keys (files patchkit reads are capped; a run reads a few)
_HELD = [0]


def sha256(data: bytes) -> str:
    """The sha256 of ``data`` (hex).  Bytes hashed once are remembered (up to ``_KEPT`` of them):
    apply and revert check each file's digest several times, before and after, in the plan, the
    transaction and the state; equal bytes look their digest up (a memcmp), not hash it again."""
    if type(data) is not bytes:  # a bytearray or a view: not a key
        return hashlib.sha256(data).hexdigest()
    known = _SEEN.get(data)
    if known is None:
        known = hashlib.sha256(data).hexdigest()
        if _HELD[0] + len(data) <= _KEPT:
            _SEEN[data] = known
            _HELD[0] += len(data)
    return known


def blob_id(data: bytes) -> str:
    """The id git gives these bytes as a blob (``git hash-object``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
