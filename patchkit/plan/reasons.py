"""Why the planner decides as it does, as values (each carries its ``code``, ``types.Reason``;
``render/reasons.py`` says it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from patchkit.types import CANNOT_APPLY, Reason, Status


@dataclass(frozen=True)
class ReleaseChanged:
    """A recorded state belongs to another release than the one here now (``release_changed``):
    one subclass for each way to tell."""

    code: ClassVar[Reason]
    name: str  # how to call the project
    recorded: str | None  # the release the state was written for (None: neither it nor the target says)
    found: str | None  # the version here now
    installed: bool  # a pip-installed package (else a checkout)


@dataclass(frozen=True)
class OtherVersion(ReleaseChanged):
    """Another version is there now: an upgrade, a downgrade, another tag checked out."""

    code: ClassVar[Reason] = Reason.OTHER_VERSION


@dataclass(frozen=True)
class OriginalsAgain(ReleaseChanged):
    """Every patched file is its recorded original again: a reinstall of the same version, a
    ``git checkout -- .``."""

    code: ClassVar[Reason] = Reason.ORIGINALS_AGAIN


@dataclass(frozen=True)
class Reinstalled(ReleaseChanged):
    """A patched file is what pip installed, not what patchkit wrote: a reinstall from another build."""

    code: ClassVar[Reason] = Reason.REINSTALLED
    path: str = ""  # that file


@dataclass(frozen=True)
class NoLongerApplies:
    """verify: the recorded state is another release's (``changed``), so it is not used."""

    code: ClassVar[Reason] = Reason.STATE_NO_LONGER_APPLIES
    changed: ReleaseChanged


@dataclass(frozen=True)
class RewriteFailed:
    """A file cannot be rewritten or evaluated: the error's line."""

    code: ClassVar[Reason] = Reason.REWRITE_FAILED
    error: str


@dataclass(frozen=True)
class Pending:
    """An interrupted transaction is pending (its journal)."""

    code: ClassVar[Reason] = Reason.PENDING
    journal: str


@dataclass(frozen=True)
class NotADict:
    code: ClassVar[Reason] = Reason.NOT_A_DICT
    path: str
    name: str


@dataclass(frozen=True)
class NoKey:
    code: ClassVar[Reason] = Reason.NO_KEY
    path: str
    name: str
    key: object


@dataclass(frozen=True)
class KeyNotAdded:
    """The table has the key, equal to the one it copies (or without that one), not added by patchkit."""

    code: ClassVar[Reason] = Reason.KEY_NOT_ADDED
    path: str
    name: str
    key: object
    copies: object


@dataclass(frozen=True)
class KeyDiffers:
    """``name[key]`` is not ``name[copies]``: a problem where patchkit added the key (``ours``), else a note."""

    code: ClassVar[Reason] = Reason.KEY_DIFFERS
    path: str
    name: str
    key: object
    value: object
    copies: object
    copied: object
    ours: bool


@dataclass(frozen=True)
class StaleBytecode:
    code: ClassVar[Reason] = Reason.STALE_BYTECODE
    path: object  # the .pyc
    why: str  # targets.bytecode's reason: "source mtime 1 != 2"


@dataclass(frozen=True)
class Blocked:
    """The release's manifest says ``fix`` cannot be applied whole on ``label`` ``version``
    (``status``: cannot apply or incomplete; ``says``: why, in its words); ``left_out``: not
    asked for by name, so verify leaves it out (a note)."""

    fix: str
    status: Status
    label: str
    version: str | None
    says: str | None
    left_out: bool

    @property
    def code(self) -> Reason:
        return Reason.CANNOT_APPLY if self.status == CANNOT_APPLY else Reason.GATES_LEFT


@dataclass(frozen=True)
class NotApplied:
    """A list, gate or upstream change of a fix lacks what the fix adds (``found``: a
    ``rewrite.rules.Found`` that would patch), at ``path``."""

    code: ClassVar[Reason] = Reason.LACKS_KEY
    path: str
    found: object


@dataclass(frozen=True)
class FileMissing:
    """A file an upstream change the fix carries changes (``cite``: the change) is not there."""

    code: ClassVar[Reason] = Reason.FILE_MISSING
    path: str
    cite: str


@dataclass(frozen=True)
class JitNotChecked:
    code: ClassVar[Reason] = Reason.JIT_NOT_CHECKED
    error: str


@dataclass(frozen=True)
class StaleJitBuild:
    """A FlashInfer JIT build (``targets.jit_builds.Build``) older than the patched sources:
    dropped by apply, or (not droppable) a prebuilt module loaded instead of them."""

    build: object

    @property
    def code(self) -> Reason:
        return Reason.STALE_JIT_BUILD if self.build.droppable else Reason.PREBUILT_JIT_BUILD


@dataclass(frozen=True)
class NoShippedPatch:
    """No shipped patch fits: ``why`` in the target's words (``targets.session``), else none for ``version``."""

    code: ClassVar[Reason] = Reason.NO_SHIPPED_PATCH
    version: str | None
    why: str = ""


@dataclass(frozen=True)
class LocalEdits:
    """Files (``paths``, as the target names them) differ from the pre-image of the shipped ``patch``."""

    code: ClassVar[Reason] = Reason.LOCAL_EDITS
    patch: str
    paths: tuple[str, ...]


@dataclass(frozen=True)
class OutsideShippedPatch:
    """Files the shipped ``patch`` leaves alone (``paths``) would change too."""

    code: ClassVar[Reason] = Reason.OUTSIDE_SHIPPED_PATCH
    patch: str
    paths: tuple[str, ...]


@dataclass(frozen=True)
class AlreadyPostImage:
    code: ClassVar[Reason] = Reason.ALREADY_POST_IMAGE


@dataclass(frozen=True)
class NothingLookedFor:
    code: ClassVar[Reason] = Reason.NOTHING_LOOKED_FOR


@dataclass(frozen=True)
class NoRule:
    """No rule of ``fixes`` patches the project (``label``, ``project``): the words of
    ``fixes.registry.no_rule``, which the errors that refuse it say too."""

    code: ClassVar[Reason] = Reason.NO_RULE
    label: str
    project: str
    fixes: tuple[str, ...]


@dataclass(frozen=True)
class LeftOut:
    """apply: ``fix`` is left out, its ``status`` on ``label`` ``version`` (the release's manifest says why: ``says``)."""

    code: ClassVar[Reason] = Reason.LEFT_OUT
    fix: str
    status: Status
    label: str
    version: str | None
    says: str | None


@dataclass(frozen=True)
class Restoring:
    code: ClassVar[Reason] = Reason.RESTORING


@dataclass(frozen=True)
class Replacing:
    """The applied patch is replaced: its cc pair and the new one, the fixes the new one ``adds``
    and ``takes_away``, the sources, and the files whose bytes differ (``other_bytes``)."""

    code: ClassVar[Reason] = Reason.REPLACING
    old_pair: tuple
    new_pair: tuple
    adds: tuple[str, ...]
    takes_away: tuple[str, ...]
    old_source: str
    new_source: str
    other_bytes: tuple[str, ...]


@dataclass(frozen=True)
class EditedAfterApply:
    """revert --force: ``path`` was edited after apply; the edited copy (``sha256``) is kept."""

    code: ClassVar[Reason] = Reason.EDITED_AFTER_APPLY
    path: str
    sha256: str


@dataclass(frozen=True)
class NeitherImage:
    code: ClassVar[Reason] = Reason.NEITHER_IMAGE
    path: str
    patch: str


@dataclass(frozen=True)
class NoState:
    code: ClassVar[Reason] = Reason.NO_STATE


@dataclass(frozen=True)
class OriginalRelease:
    code: ClassVar[Reason] = Reason.ORIGINAL_RELEASE
