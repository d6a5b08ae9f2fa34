"""Why the planner decides as it does, as values (each carries its ``code``, ``types.Reason``;
``render/reasons.py`` says it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from patchkit.types import CANNOT_APPLY, Reason, Status
from patchkit.values import Value

if TYPE_CHECKING:
    from pathlib import Path

    from patchkit.cc import Key
    from patchkit.rewrite.found import Found
    from patchkit.types import Source, StrEnum


class ReleaseChanged(Value):
    """A recorded state belongs to another release than the one here now (``release_changed``):
    one subclass for each way to tell."""

    code: ClassVar[Reason]
    name: str  # how to call the project
    recorded: str | None  # the release the state was written for (None: neither it nor the target says)
    found: str | None  # the version here now
    installed: bool  # a pip-installed package (else a checkout)


class OtherVersion(ReleaseChanged):
    """Another version is there now: an upgrade, a downgrade, another tag checked out."""

    code: ClassVar[Reason] = Reason.OTHER_VERSION


class OriginalsAgain(ReleaseChanged):
    """Every patched file is its recorded original again: a reinstall of the same version, a
    ``git checkout -- .``."""

    code: ClassVar[Reason] = Reason.ORIGINALS_AGAIN


class Reinstalled(ReleaseChanged):
    """A patched file is what pip installed, not what patchkit wrote: a reinstall from another build."""

    code: ClassVar[Reason] = Reason.REINSTALLED
    path: str = ""  # that file


class NoLongerApplies(Value):
    """verify: the recorded state is another release's (``changed``), so it is not used."""

    code: ClassVar[Reason] = Reason.STATE_NO_LONGER_APPLIES
    changed: ReleaseChanged


class RewriteFailed(Value):
    """A file cannot be rewritten or evaluated: the error's line."""

    code: ClassVar[Reason] = Reason.REWRITE_FAILED
    error: str


class PendingJournal(Value):
    """An interrupted transaction is pending (its journal)."""

    code: ClassVar[Reason] = Reason.PENDING
    journal: str


class NotADict(Value):
    code: ClassVar[Reason] = Reason.NOT_A_DICT
    path: str
    name: str


class NoKey(Value):
    code: ClassVar[Reason] = Reason.NO_KEY
    path: str
    name: str
    key: object


class KeyNotAdded(Value):
    """The table has the key, equal to the one it copies (or without that one), not added by patchkit."""

    code: ClassVar[Reason] = Reason.KEY_NOT_ADDED
    path: str
    name: str
    key: object
    copies: object


class KeyDiffers(Value):
    """``name[key]`` is not ``name[copies]``: a problem where patchkit added the key (``ours``), else a note."""

    code: ClassVar[Reason] = Reason.KEY_DIFFERS
    path: str
    name: str
    key: object
    value: object
    copies: object
    copied: object
    ours: bool


class StaleBytecode(Value):
    code: ClassVar[Reason] = Reason.STALE_BYTECODE
    path: object  # the .pyc
    why: str  # targets.bytecode's reason: "source mtime 1 != 2"


class Blocked(Value):
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


class NotApplied(Value):
    """A list, gate or upstream change of a fix lacks what the fix adds (``found``: a
    ``rewrite.found.Found`` that would patch), at ``path``."""

    code: ClassVar[Reason] = Reason.LACKS_KEY
    path: str
    found: Found


class FileMissing(Value):
    """A file an upstream change the fix carries changes (``cite``: the change) is not there."""

    code: ClassVar[Reason] = Reason.FILE_MISSING
    path: str
    cite: str


class JitNotChecked(Value):
    code: ClassVar[Reason] = Reason.JIT_NOT_CHECKED
    error: str


if TYPE_CHECKING:  # a type for the annotations only (nothing is checked against it at run time)
    from typing import Protocol

    class JitBuild(Protocol):
        """A FlashInfer JIT build as a reason reads it (``targets.jit_builds.Build``)."""

        @property
        def droppable(self) -> bool: ...
        @property
        def path(self) -> Path: ...
        @property
        def library(self) -> Path: ...
        @property
        def kind(self) -> StrEnum: ...  # a BuildKind
        @property
        def advice(self) -> str: ...


class StaleJitBuild(Value):
    """A FlashInfer JIT build (``targets.jit_builds.Build``) older than the patched sources:
    dropped by apply, or (not droppable) a prebuilt module loaded instead of them."""

    build: JitBuild

    @property
    def code(self) -> Reason:
        return Reason.STALE_JIT_BUILD if self.build.droppable else Reason.PREBUILT_JIT_BUILD


class NoShippedPatch(Value):
    """No shipped patch of ``label`` ``version`` (its ``series``) fits: none, or ``pair`` (the cc pair the
    shipped one copies) is not the pair ``from_cc``, ``to_cc`` asked for.  No ``label``: none for ``version``."""

    code: ClassVar[Reason] = Reason.NO_SHIPPED_PATCH
    version: str | None
    label: str | None = None
    series: str | None = None
    pair: tuple[Key, Key] | None = None
    from_cc: Key | None = None
    to_cc: Key | None = None


def no_shipped_words(r: NoShippedPatch) -> str:
    """The sentence of ``r``: the words of --no-generate's refusal, raised in plan, and of the note."""
    if r.label is None:
        return f"no shipped patch for version {r.version or 'unknown'}"
    what = f"{r.label} {r.version or '(version unknown)'}"
    if r.series and r.series != r.version:
        what += f" (release {r.series})"
    if r.pair is None:
        return f"no shipped patch for {what}"
    return (f"no shipped patch for {what} that copies key {r.from_cc!r} to key {r.to_cc!r} "
            f"(the shipped one copies key {r.pair[0]!r} to key {r.pair[1]!r})")


class LocalEdits(Value):
    """Files (``paths``, as the target names them) differ from the pre-image of the shipped ``patch``."""

    code: ClassVar[Reason] = Reason.LOCAL_EDITS
    patch: str
    paths: tuple[str, ...]


class OutsideShippedPatch(Value):
    """Files the shipped ``patch`` leaves alone (``paths``) would change too."""

    code: ClassVar[Reason] = Reason.OUTSIDE_SHIPPED_PATCH
    patch: str
    paths: tuple[str, ...]


class AlreadyPostImage(Value):
    code: ClassVar[Reason] = Reason.ALREADY_POST_IMAGE


class NothingLookedFor(Value):
    code: ClassVar[Reason] = Reason.NOTHING_LOOKED_FOR


class NoRule(Value):
    """No rule of ``fixes`` patches the project (``label``, ``project``): the words of
    ``fixes.registry.no_rule``, which the errors that refuse it say too."""

    code: ClassVar[Reason] = Reason.NO_RULE
    label: str
    project: str
    fixes: tuple[str, ...]


class ForOtherGpus(Value):
    """apply --to-cc: the fixes of ``fixes`` are for GPUs of another cc than the one ``key`` names
    (the DeepGEMM refusal of SM12x for --to-cc 9.0): none of their rules is applied; ``held``:
    the fixes whose tables the release already holds ``key`` in."""

    code: ClassVar[Reason] = Reason.FOR_OTHER_GPUS
    label: str
    key: object
    fixes: tuple[str, ...]
    held: tuple[str, ...]


class LeftOut(Value):
    """apply: ``fix`` is left out, its ``status`` on ``label`` ``version`` (the release's manifest says why: ``says``)."""

    code: ClassVar[Reason] = Reason.LEFT_OUT
    fix: str
    status: Status
    label: str
    version: str | None
    says: str | None


class Restoring(Value):
    code: ClassVar[Reason] = Reason.RESTORING


class Replacing(Value):
    """The applied patch is replaced: its cc pair and the new one, the fixes the new one ``adds``
    and ``takes_away``, the sources, and the files whose bytes differ (``other_bytes``)."""

    code: ClassVar[Reason] = Reason.REPLACING
    old_pair: tuple[Key, Key]
    new_pair: tuple[Key, Key]
    adds: tuple[str, ...]
    takes_away: tuple[str, ...]
    old_source: Source
    new_source: Source
    other_bytes: tuple[str, ...]


class EditedAfterApply(Value):
    """revert --force: ``path`` was edited after apply; the edited copy (``sha256``) is kept."""

    code: ClassVar[Reason] = Reason.EDITED_AFTER_APPLY
    path: str
    sha256: str


class NeitherImage(Value):
    code: ClassVar[Reason] = Reason.NEITHER_IMAGE
    path: str
    patch: str


class NoState(Value):
    code: ClassVar[Reason] = Reason.NO_STATE


class OriginalRelease(Value):
    code: ClassVar[Reason] = Reason.ORIGINAL_RELEASE
