"""The values that travel between the stages: what a change is, and what is applied.

Ground floor: nothing here imports another patchkit module but errors.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import TYPE_CHECKING, Any

from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.cc import Key

if sys.version_info >= (3, 11):
    from enum import StrEnum as StrEnum  # re-exported: the modules that name a StrEnum import it from here
else:  # pragma: no cover - Python 3.10

    class StrEnum(str, Enum):
        """A str whose value is what it prints (Python 3.11's enum.StrEnum)."""

        def __str__(self) -> str:
            return self.value

        __format__ = str.__format__

FORMAT = 1  # of state.json and journal.json


class Status(StrEnum):
    """What became of a table, a fix, a release or a target: one name each, in lines, in
    --json and in the manifests (a member is its word: it prints and compares as it).  Why a
    fix stands so is a ``Reason``, whose code --json gives beside it (``CANNOT_APPLY``'s is
    ``cannot-apply``); a bytecode file's freshness is ``targets.bytecode.Freshness``."""

    PATCHED = "patched"
    ALREADY_UPSTREAM = "already upstream"
    NOTHING_TO_PATCH = "nothing to patch"
    CANNOT_APPLY = "cannot apply"  # a rule of the fix does not fit this release (it says why)
    INCOMPLETE = "incomplete"  # the rules apply, but a gate on the feature's path still refuses the GPU (named)
    NOT_NEEDED_HERE = "not needed here"  # --to-cc auto: the machine lacks what the fix needs, the release turns off cleanly
    ALREADY_APPLIED = "already applied"
    NOTHING_TO_REVERT = "nothing to revert"
    ERROR = "error"
    # A fix at a target, judged for this machine's GPUs (doctor, --to-cc auto)
    MISSING = "missing"  # its keys, members or flags are missing
    IN_EFFECT = "in effect"
    NOT_FOR_THESE = "not for these GPUs"  # no fix for the GPUs' major: the fixes copy SM100's keys for SM12x

    @classmethod
    def parse(cls, word: object) -> Status | None:
        """The status a document spells (a manifest's, a state's), or None if it is none."""
        if not isinstance(word, str):  # what cls(word) refuses too
            return None
        try:
            return cls(word)
        except (ValueError, TypeError):
            return None


# The names the stages import (each is the Status member, not a second definition).
PATCHED, ALREADY_UPSTREAM, NOTHING_TO_PATCH = Status.PATCHED, Status.ALREADY_UPSTREAM, Status.NOTHING_TO_PATCH
CANNOT_APPLY, INCOMPLETE, NOT_NEEDED_HERE = Status.CANNOT_APPLY, Status.INCOMPLETE, Status.NOT_NEEDED_HERE
ALREADY_APPLIED, NOTHING_TO_REVERT, ERROR = Status.ALREADY_APPLIED, Status.NOTHING_TO_REVERT, Status.ERROR


class TargetKind(StrEnum):
    """What a report says its target is (``report.Where``, the first line of every report):
    a checkout (a git checkout or a plain folder of the source), an installed package (a
    wheel's files in site-packages), or an editable install (a checkout that an environment
    imports).  Made by ``targets.session`` from the target's ``targets.locate.Layout`` (how it lies
    on disk) and how it was found, said by ``render.where``."""

    CHECKOUT = "checkout"
    INSTALLED = "installed"
    EDITABLE = "editable"


class Reason(StrEnum):
    """Why a fix, a target or a recorded state stands as it does: one code per kind of reason.
    The judge and the planner return reasons as values (each carries its ``code``); ``render``
    says them, and every --json judgement gives the code beside the sentence.  docs/REFERENCE.md
    lists them all."""

    # A fix at a target, judged for the GPUs (judge.here: doctor, --to-cc auto)
    LACKS_KEY = "lacks-key"  # tables, lists or gates lack the key, member or flag the fix adds
    NO_TABLE = "no-table"  # the release has no table, list or gate the fix looks for
    REWRITE_FAILED = "rewrite-failed"  # a file the fix patches cannot be rewritten (it says why)
    CANNOT_APPLY = "cannot-apply"  # the release's manifest: a rule of the fix does not fit it
    GATES_LEFT = "gates-left"  # the release's manifest: a gate on the feature's path still refuses the GPU
    IN_RELEASE = "in-release"  # in effect: the release holds what the fix adds (not patchkit)
    # What this machine lacks, and what follows for a fix
    NO_MULTICAST = "no-multicast"  # one GPU, or GPUs linked by PCIe only
    NO_NVCC = "no-nvcc"
    NOT_NEEDED_HERE = "not-needed-here"  # the machine lacks what the fix needs, and the release turns off cleanly
    NEWER_THAN_READ = "newer-than-read"  # the machine lacks what the fix needs, and the release is newer than patchkit has read
    CLEAN_START_ONLY = "clean-start-only"  # the fix only turns a crash into a clean start here
    TURNED_ON = "turned-on"  # an opt-in fix is needed: the release turns the feature on by itself
    # A recorded state of another release (plan.release_changed)
    OTHER_VERSION = "other-version"  # another version is there now
    ORIGINALS_AGAIN = "originals-again"  # the patched files are the originals again
    REINSTALLED = "reinstalled"  # a patched file is what pip installed
    STATE_NO_LONGER_APPLIES = "state-no-longer-applies"  # verify: so the recorded state is not used
    # What verify finds at a target (plan.verify)
    PENDING = "pending"  # an interrupted transaction waits to be finished
    NOT_A_DICT = "not-a-dict"  # a table the fix patches is not a dict
    NO_KEY = "no-key"  # a table lacks the key (the patch is not applied)
    KEY_NOT_ADDED = "key-not-added"  # a table has the key, equal to the one it copies, not added by patchkit
    KEY_DIFFERS = "key-differs"  # a table's key differs from the one it copies
    STALE_BYTECODE = "stale-bytecode"
    FILE_MISSING = "file-missing"  # a file an upstream change the fix carries changes is not there
    JIT_NOT_CHECKED = "jit-not-checked"  # FlashInfer's JIT builds could not be checked
    STALE_JIT_BUILD = "stale-jit-build"  # built before the patched sources
    PREBUILT_JIT_BUILD = "prebuilt-jit-build"  # a prebuilt module loaded instead of the patched sources
    # What apply and revert plan (plan.plan_apply, plan_revert): their notes
    NO_SHIPPED_PATCH = "no-shipped-patch"  # none for this release or this cc pair: generated from the files
    LOCAL_EDITS = "local-edits"  # files differ from the shipped patch's pre-image: generated from the files
    OUTSIDE_SHIPPED_PATCH = "outside-shipped-patch"  # files it leaves alone would change too: generated from the files
    ALREADY_POST_IMAGE = "already-post-image"  # the files already hold the shipped patch's post-image
    NOTHING_LOOKED_FOR = "nothing-looked-for"  # nothing the fixes look for in the files
    NO_RULE = "no-rule"  # no rule of the fixes asked for patches the project
    FOR_OTHER_GPUS = "for-other-gpus"  # apply --to-cc: the fixes asked for are for GPUs of another cc (not applied)
    LEFT_OUT = "left-out"  # a fix the release's manifest says cannot apply whole, not named: left out
    RESTORING = "restoring"  # every table already has the key: the originals are restored
    REPLACING = "replacing"  # the applied patch is replaced (what differs)
    EDITED_AFTER_APPLY = "edited-after-apply"  # revert --force: the edited copy is kept in the state dir
    NEITHER_IMAGE = "neither-image"  # revert: a file holds neither the pre- nor the post-image of the shipped patch
    NO_STATE = "no-state"  # revert: no state, and no shipped patch to recognise the files by
    ORIGINAL_RELEASE = "original-release"  # revert: the files hold the original release


class Change(Value):
    """One file's bytes before and after a transaction."""

    path: str  # repository path
    before: bytes
    after: bytes


class AppliedFile(Value):
    path: str
    pre_sha256: str
    post_sha256: str
    tables: list[dict[str, object]] = []  # never mutated; each a found table's JSON


class Applied(Value):
    """The patch that is applied to a target."""

    version: str | None
    source: Source  # where the patch came from (``FromShipped``, ``Generated``; ``Recorded``: a state's own words)
    patch_id: str  # sha256 over the post-images: two applies with the same id wrote the same bytes
    from_cc: Key  # the pair as the project keys it (12, "12.0"), as state.json has always written it
    to_cc: Key
    patchkit: str
    files: list[AppliedFile]

    def fixes(self) -> list[str]:
        """The fixes whose changes this records, in the order first recorded (a state written
        before series names none: its tables carry no fix)."""
        return list(dict.fromkeys(fix for f in self.files for t in f.tables if isinstance(t, dict)
                                  for fix in (t.get("fix"),) if isinstance(fix, str) and fix))

    def to_json(self) -> dict[str, object]:
        doc = self._asdict()
        doc["files"] = [f._asdict() for f in self.files]
        doc["source"] = self.source.to_json()
        return {"format": FORMAT, **doc}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Applied:  # Any: a state's JSON, its fields checked where it is read
        files = [AppliedFile(**f) for f in doc["files"]]
        fields = {k: doc[k] for k in ("version", "patch_id", "from_cc", "to_cc", "patchkit")}
        return cls(files=files, source=source_from_json(doc["source"]), **fields)


class Files(StrEnum):
    """What a generated patch was made from: a checkout's files or an installed package's."""

    CHECKOUT = "checkout"
    INSTALLED = "installed"


class FromShipped(Value):
    """The shipped patches ``name`` (their paths, `` + `` between two)."""

    name: str

    def to_json(self) -> dict[str, str]:
        return {"shipped": self.name}


class Generated(Value):
    """Generated by the rules from the target's files (``from_``)."""

    from_: Files

    def to_json(self) -> dict[str, str]:
        return {"generated": self.from_.value}


class Recognised(Value):
    """revert without a state: the files hold the post-image of the shipped patches ``name``."""

    name: str

    def to_json(self) -> dict[str, str]:
        return {"recognised": self.name}


class Recorded(Value):
    """A state.json's source that is none of the forms above (``text``, as it was written): kept as it is."""

    text: object

    def to_json(self) -> object:
        return self.text


Source = FromShipped | Generated | Recognised | Recorded

# How patchkit 0.1.0 before sources were values wrote them in state.json (docs/ARCHITECTURE.md, "Saved values").
_OLD_SHIPPED = "shipped patch "
_OLD_GENERATED = {"generated from the checkout's files": Files.CHECKOUT, "generated from the installed files": Files.INSTALLED}


def source_from_json(doc: object) -> Source:
    """A state's source, as this patchkit writes it (``{"shipped": NAME}``, ``{"generated": FILES}``) or as
    the earlier one did (its words: ``"shipped patch NAME"``, ``"generated from the checkout's files"``)."""
    if isinstance(doc, dict) and len(doc) == 1:
        (kind, value), = doc.items()
        if kind == "shipped" and isinstance(value, str):
            return FromShipped(value)
        if kind == "generated" and value in {f.value for f in Files}:
            return Generated(Files(value))
    if isinstance(doc, str) and doc.startswith(_OLD_SHIPPED) and doc != _OLD_SHIPPED:
        return FromShipped(doc[len(_OLD_SHIPPED):])
    if isinstance(doc, str) and doc in _OLD_GENERATED:
        return Generated(_OLD_GENERATED[doc])
    return Recorded(doc)
