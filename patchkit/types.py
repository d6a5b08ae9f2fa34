"""The values that travel between the stages: what a change is, and what is applied.

Ground floor: nothing here imports another patchkit module but errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from patchkit.cc import Key

FORMAT = 1  # of state.json and journal.json

# What became of a table, a release or a target: one name each, in lines and in --json.
PATCHED = "patched"
ALREADY_UPSTREAM = "already upstream"
NOTHING_TO_PATCH = "nothing to patch"
CANNOT_APPLY = "cannot apply"  # a rule of the fix does not fit this release (it says why)
INCOMPLETE = "incomplete"  # the rules apply, but a gate on the feature's path still refuses the GPU (named)
ALREADY_APPLIED = "already applied"
NOTHING_TO_REVERT = "nothing to revert"
ERROR = "error"


class Change(NamedTuple):
    """One file's bytes before and after a transaction."""

    path: str  # repository path
    before: bytes
    after: bytes


class AppliedFile(NamedTuple):
    path: str
    pre_sha256: str
    post_sha256: str
    tables: list = []  # never mutated


class Applied(NamedTuple):
    """The patch that is applied to a target."""

    version: str | None
    source: str  # "shipped patch patches/0.5.9/0001-...patch" or "generated from the checkout"
    patch_id: str  # sha256 over the post-images: two applies with the same id wrote the same bytes
    from_cc: Key  # the pair as the project keys it (12, "12.0"), as state.json has always written it
    to_cc: Key
    patchkit: str
    files: list[AppliedFile]

    def fixes(self) -> list[str]:
        """The fixes whose changes this records, in the order first recorded (a state written
        before series names none: its tables carry no fix)."""
        return list(dict.fromkeys(t["fix"] for f in self.files for t in f.tables if isinstance(t, dict) and t.get("fix")))

    def to_json(self) -> dict:
        doc = self._asdict()
        doc["files"] = [f._asdict() for f in self.files]
        return {"format": FORMAT, **doc}

    @classmethod
    def from_json(cls, doc: dict) -> Applied:
        files = [AppliedFile(**f) for f in doc["files"]]
        fields = {k: doc[k] for k in ("version", "source", "patch_id", "from_cc", "to_cc", "patchkit")}
        return cls(files=files, **fields)
