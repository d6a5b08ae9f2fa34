"""Content ids: sha256 (manifests, state) and git blob ids (patch index lines)."""

from __future__ import annotations

try:  # CPython's built-in sha256: no OpenSSL to load at start-up (hashlib costs ~2.5 ms more)
    from _sha256 import sha256 as _new_sha256  # Python <= 3.11
except ImportError:  # pragma: no cover - depends on the interpreter
    try:
        from _sha2 import sha256 as _new_sha256  # Python >= 3.12
    except ImportError:
        from hashlib import sha256 as _new_sha256


def sha256(data: bytes) -> str:
    return _new_sha256(data).hexdigest()


def blob_id(data: bytes) -> str:
    """The id git gives these bytes as a blob (``git hash-object``)."""
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
