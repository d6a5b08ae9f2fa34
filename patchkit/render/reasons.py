"""The one place a reason becomes its sentence: ``said``.

The judge and the planner return reasons as values (``judge.reasons``, ``plan.reasons``),
each with its ``code`` (``types.Reason``); ``said`` gives the sentence the text prints and
--json carries beside the code (``code``): the planner's from here, the judge's from
``render/judged.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, overload

from patchkit.fixes.kinds import RuleKind
from patchkit.plan import reasons as plan
from patchkit.render.source import source_words
from patchkit.rewrite.found import phrased

if TYPE_CHECKING:
    from patchkit.plan.plans import Note
    from patchkit.rewrite.found import Found


@overload
def said(reason: Note) -> str: ...
@overload
def said(reason: Note | None) -> str | None: ...
def said(reason: Note | None) -> str | None:
    """The reason's sentence (None for none).  The judge's reasons are said by ``render/judged.py``,
    imported by the first one said: apply, verify and revert judge nothing, and import no judge."""
    if reason is None:
        return None
    say = _SENTENCES.get(type(reason))
    if say is None:
        from patchkit.render.judged import SENTENCES

        say = SENTENCES[type(reason)]
    return say(reason)


def code(reason: Note | None) -> str | None:
    """The reason's code, as --json gives it (None for none)."""
    return None if reason is None else str(reason.code)


def _other_version(r: plan.OtherVersion) -> str:
    return f"{r.name} {r.recorded} was patched; {r.found} is {'installed' if r.installed else 'checked out'} now"


def _patched(r: plan.ReleaseChanged) -> str:
    return f"{r.name} {r.recorded or r.found or '(version unknown)'} was patched"


def _originals_again(r: plan.OriginalsAgain) -> str:
    again = "reinstalled" if r.installed else "restored"
    return f"{_patched(r)}; its files were {again} since (they are the originals again)"


def _key_differs(r: plan.KeyDiffers) -> str:
    differs = f"{r.name}[{r.key!r}] = {r.value!r} differs from {r.name}[{r.copies!r}] = {r.copied!r}"
    if r.ours:
        return f"{r.path}: {differs}"
    return f"{r.path}: {r.name} has a key {r.key!r} that patchkit did not add, left as it is: {differs}"


def _blocked(r: plan.Blocked) -> str:
    line = f"{r.fix} {r.status} on {r.label} {r.version}: {r.says}"
    return f"{r.fix} left out: {line}" if r.left_out else line


def _not_applied(r: plan.NotApplied) -> str:
    t = r.found
    return _LACKING.get(t.kind, _lacks)(r.path, t)


def _lacks(path: str, t: Found) -> str:
    return f"{path}: {t.name} lacks {t.added_key!r} (the {t.fix} patch is not applied)"


# What a file lacks, by the kind of rule that found it (a table, a list or a gate lacks its key,
# member or flag; a file lacks an upstream change).
_LACKING: dict[RuleKind | None, Callable[[str, Found], str]] = {RuleKind.BACKPORT: lambda path, t: f"{path}: lacks {t.name} ({phrased(t).added_key}; the {t.fix} patch is not applied)"}


def _stale_jit_build(r: plan.StaleJitBuild) -> str:
    b = r.build
    if b.droppable:
        return f"{b.path}: stale FlashInfer JIT build (built before the patched sources); `patchkit apply` drops it"
    return f"{b.library}: {b.kind}, loaded instead of the patched sources; {b.advice}"


def _replacing(r: plan.Replacing) -> str:
    (old_from, old_to), (new_from, new_to) = r.old_pair, r.new_pair
    parts = [f"{old_from} -> {old_to} becomes {new_from} -> {new_to}"] if r.old_pair != r.new_pair else []
    parts += [f"adds {', '.join(r.adds)}"] if r.adds else []
    parts += [f"takes away {', '.join(r.takes_away)}"] if r.takes_away else []
    parts += [f"was {source_words(r.old_source)}"] if r.old_source != r.new_source else []
    if not parts:
        parts.append(f"{old_from} -> {old_to}, the same fixes, from {source_words(r.old_source)}; other bytes for {', '.join(r.other_bytes)}")
    return f"replacing the applied patch ({'; '.join(parts)})"


def _for_other_gpus(r: plan.ForOtherGpus) -> str:
    held = f", and the release already holds key {r.key!r} ({', '.join(r.held)})" if r.held else ""
    return f"no fix for {r.label} is for GPUs of key {r.key!r}: {', '.join(r.fixes)} {'is' if len(r.fixes) == 1 else 'are'} for other GPUs{held}"


def _no_rule(r: plan.NoRule) -> str:
    from patchkit.fixes.registry import no_rule  # the words the errors that refuse it say too

    return no_rule(r.label, r.project, r.fixes)


_SENTENCES: dict[type, Callable[..., str]] = {
    plan.OtherVersion: _other_version,
    plan.OriginalsAgain: _originals_again,
    plan.Reinstalled: lambda r: f"{_patched(r)}; it was reinstalled since ({r.path} is as pip installed it)",
    plan.NoLongerApplies: lambda r: f"{said(r.changed)}: that state no longer applies (the next apply or revert sets it aside)",
    plan.RewriteFailed: lambda r: r.error,
    plan.PendingJournal: lambda r: (f"{r.journal}: an interrupted transaction is pending; "
                             "run `patchkit apply` or `patchkit revert` to finish it"),
    plan.NotADict: lambda r: f"{r.path}: {r.name} is not a dict",
    plan.NoKey: lambda r: f"{r.path}: {r.name} has no key {r.key!r} (the patch is not applied)",
    plan.KeyNotAdded: lambda r: f"{r.path}: {r.name} already has key {r.key!r}, not added by patchkit (equal to key {r.copies!r})",
    plan.KeyDiffers: _key_differs,
    plan.StaleBytecode: lambda r: f"{r.path}: stale bytecode ({r.why}); `patchkit apply` drops it",
    plan.Blocked: _blocked,
    plan.NotApplied: _not_applied,
    plan.FileMissing: lambda r: f"{r.path}: missing ({r.cite} changes it)",
    plan.JitNotChecked: lambda r: f"FlashInfer's JIT builds not checked: {r.error}",
    plan.StaleJitBuild: _stale_jit_build,
    plan.NoShippedPatch: plan.no_shipped_words,
    plan.LocalEdits: lambda r: f"files differ from the pre-image of {r.patch} (local edits?): {', '.join(r.paths)}",
    plan.OutsideShippedPatch: lambda r: f"{', '.join(r.paths)} (outside {r.patch}) would change too: generated from the files",
    plan.AlreadyPostImage: lambda r: "the files already hold the shipped patch's post-image",
    plan.NothingLookedFor: lambda r: "nothing the fixes look for in these files",
    plan.NoRule: _no_rule,
    plan.ForOtherGpus: _for_other_gpus,
    plan.LeftOut: lambda r: f"{r.fix} left out: {r.status} on {r.label} {r.version}: {r.says}",
    plan.Restoring: lambda r: "every table already has the key: restoring the originals",
    plan.Replacing: _replacing,
    plan.EditedAfterApply: lambda r: f"{r.path}: edited after apply; the edited copy is kept in the state dir (sha256 {r.sha256})",
    plan.NeitherImage: lambda r: f"{r.path} holds neither the pre- nor the post-image of {r.patch}",
    plan.NoState: lambda r: "no patchkit state, and no shipped patch for this version to recognise",
    plan.OriginalRelease: lambda r: "the files hold the original release",
}
