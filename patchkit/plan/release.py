"""Whether a recorded state belongs to another release than the one here now: pure."""

from __future__ import annotations

from patchkit.digest import sha256
from patchkit.plan.reasons import OriginalsAgain, OtherVersion, Reinstalled, ReleaseChanged
from patchkit.types import Applied


def release_changed(
    applied: Applied, current: dict[str, bytes], version: str | None, installed: dict[str, str] | None, name: str
) -> ReleaseChanged | None:
    """How the recorded state is seen to belong to another release than the one here now, or None.

    ``installed``: for a pip-installed package, the sha256 of each file as its dist-info
    RECORD lists it (None for a checkout); ``name``: how to call the project.  The state
    is another release's when the version changed (an upgrade, a downgrade, another tag
    checked out), when every patched file is its recorded original again (a reinstall of
    the same version, a `git checkout -- .`), or when a patched file is what pip installed
    and not what patchkit wrote (a reinstall from another build).
    """
    seen = (name, applied.version, version, installed is not None)
    if applied.version and version and applied.version != version:
        return OtherVersion(*seen)
    files = applied.files
    if files and all(f.path in current and sha256(current[f.path]) == f.pre_sha256 for f in files):
        return OriginalsAgain(*seen)
    for f in files:
        digest = sha256(current[f.path]) if f.path in current else None
        if installed and digest is not None and digest != f.post_sha256 and installed.get(f.path) == digest:
            return Reinstalled(*seen, path=f.path)
    return None
