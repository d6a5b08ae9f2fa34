"""Why a fix stands as it does on this machine, as values: what ``here.py`` returns in place
of sentences.  Each reason carries its ``code`` (``types.Reason``); ``render/reasons.py``
says it, and --json gives the code beside the sentence."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from patchkit.cc import CC
from patchkit.types import Reason, StrEnum
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.fixes.effects import DefaultOn, Fails


class Lacks(Value):
    """The tables, lists or gates of the files that lack what the fix adds: (name, key) each; and
    the upstream changes it carries (a backport) that files lack: (name, those files, how many
    files the change has, None if not known) each."""

    code: ClassVar[Reason] = Reason.LACKS_KEY
    gaps: tuple[tuple[str, object], ...]
    backports: tuple[tuple[str, tuple[str, ...], int | None], ...] = ()


class NoTableIn(Value):
    """The release has nothing the fix looks for."""

    code: ClassVar[Reason] = Reason.NO_TABLE
    label: str  # the project, as people write it
    version: str | None


class CannotApplyHere(Value):
    """The release's manifest says a rule of the fix does not fit it, and why (its words)."""

    code: ClassVar[Reason] = Reason.CANNOT_APPLY
    says: str


class GatesLeft(Value):
    """The release's manifest says a gate on the feature's path still refuses the GPU (its words)."""

    code: ClassVar[Reason] = Reason.GATES_LEFT
    says: str


class InRelease(Value):
    """The fix is in effect and patchkit did not apply it: the release holds what it adds."""

    code: ClassVar[Reason] = Reason.IN_RELEASE


class Peers(StrEnum):
    """Why GPUs have no multicast."""

    ONE_GPU = "one-gpu"  # no peer to share multicast memory with
    PCIE_ONLY = "pcie-only"
    NO_PRODUCT = "no-product"  # GPUs given, not measured, of ccs no product of which has multicast (gpus.products)


class NoMulticast(Value):
    code: ClassVar[Reason] = Reason.NO_MULTICAST
    kind: Peers
    ccs: tuple[CC, ...] = ()  # NO_PRODUCT: the ccs given, none of whose products has it (gpus.products)


class NoNvcc(Value):
    """No nvcc where FlashInfer looks for it (``kernels.jit.find_nvcc``): ``path``, found by ``chosen_by``."""

    code: ClassVar[Reason] = Reason.NO_NVCC
    path: str
    chosen_by: str


class Unneeded(Value):
    """The fix is not needed on this machine: it ``lack``s what the fix needs, and ``label``
    ``version`` turns the feature off cleanly without it (``failing``: ``fixes.effects.Fails``);
    ``adds_without``: what the fix would add here instead."""

    code: ClassVar[Reason] = Reason.NOT_NEEDED_HERE
    lack: NoMulticast | NoNvcc
    label: str
    version: str | None
    failing: tuple[Fails, ...]
    adds_without: str


class Unread(Value):
    """Whether the fix is needed on this machine cannot be said: it ``lack``s what the fix needs, so
    the verdict hangs on what ``label`` ``version`` does without the fix, and that release is newer
    than every one patchkit has read (its data ends at ``until``), and its files (``shown``: each
    file with the lines that showed the newest outcome known) do not show it.  Never "needed"."""

    code: ClassVar[Reason] = Reason.NEWER_THAN_READ
    lack: NoMulticast | NoNvcc
    label: str
    version: str | None
    until: str
    shown: tuple[tuple[str, tuple[str, ...]], ...]  # (repository path, its lines) each


class CleanStartOnly(Value):
    """On a machine that ``lack``s what the fix needs, for a release it still helps: the feature
    (turned on ``asked_with``) cannot speed anything up here; the fix only turns the crashes it
    ``says`` into a clean start."""

    code: ClassVar[Reason] = Reason.CLEAN_START_ONLY
    asked_with: str
    lack: NoMulticast | NoNvcc
    crashes: tuple[str, ...]


class TurnedOn(Value):
    """Why an opt-in fix is needed although nobody asked for it: ``project`` ``version`` turns the
    feature on by itself on SM120 (``on``: ``fixes.effects.DefaultOn``), with a release ``other``
    of ``on.with_project`` that fails."""

    code: ClassVar[Reason] = Reason.TURNED_ON
    project: str
    version: str | None
    on: DefaultOn
    other: str
