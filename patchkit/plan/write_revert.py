"""What ``revert`` writes: the exact original bytes back; pure, a ``Plan`` out."""

from __future__ import annotations

from patchkit.digest import sha256
from patchkit.errors import BadInput, Refused
from patchkit.patch.manifest import Shipped
from patchkit.plan.plans import REVERT, Plan
from patchkit.plan.reasons import EditedAfterApply, NeitherImage, NoState, OriginalRelease
from patchkit.types import NOTHING_TO_REVERT, Applied, Change, Recognised


def plan_revert(
    current: dict[str, bytes],
    applied: Applied | None,
    originals: dict[str, bytes | None],
    shipped: Shipped | None,
    force: bool,
) -> Plan:
    """What ``revert`` writes: the exact original bytes back."""
    from patchkit.patch import read as patchread

    if applied:
        changes, notes = [], []
        for f in applied.files:
            data = current.get(f.path)
            if data is None:
                raise Refused(f.path, "was patched by patchkit and is now missing")
            if sha256(data) not in (f.post_sha256, f.pre_sha256):
                if not force:
                    raise Refused(f.path, "was edited after apply; `patchkit revert --force` restores the original anyway")
                notes.append(EditedAfterApply(f.path, sha256(data)))
            original = originals.get(f.path)
            if original is None:
                raise Refused(f.path, "its original bytes are missing from the state dir; cannot restore them")
            if original != data:
                changes.append(Change(f.path, data, original))
        return Plan(REVERT, applied.source, changes, None, notes)

    if shipped is None:
        return Plan(NOTHING_TO_REVERT, notes=(NoState(),))
    changes = []
    sections = None
    for entry in shipped.files:
        data = current.get(entry.path)
        digest = sha256(data) if data is not None else None
        if digest == entry.pre_sha256:
            continue
        if data is None or digest != entry.post_sha256:
            return Plan(NOTHING_TO_REVERT, notes=(NeitherImage(entry.path, shipped.name),))
        sections = sections or shipped.sections()
        original = patchread.reverse(data, sections[entry.path], shipped.name)
        if sha256(original) != entry.pre_sha256:
            raise BadInput(shipped.name, f"corrupt patch: reversing it on {entry.path} does not give the pre-image")
        changes.append(Change(entry.path, data, original))
    if not changes:
        return Plan(NOTHING_TO_REVERT, notes=(OriginalRelease(),))
    return Plan(REVERT, Recognised(shipped.name), changes, None)
