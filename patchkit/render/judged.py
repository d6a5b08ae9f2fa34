"""The sentences of the judge's reasons (``judge.reasons``), which ``render.reasons.said`` says:
imported by the first one said (doctor, --to-cc auto), never by apply, verify or revert.  It imports
nothing of ``render``: a reason held by another (what the machine lacks) is one of the judge's, said here."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from patchkit.fixes.effects import Outcome
from patchkit.judge import reasons as judge
from patchkit.render.machine import no_multicast_said

if TYPE_CHECKING:
    from patchkit.fixes.effects import Fails
    from patchkit.plan.plans import Note


def said(reason: Note) -> str:
    """The sentence of a judge's reason that another holds (what the machine ``lack``s)."""
    return SENTENCES[type(reason)](reason)


def _clean(f: Fails, label: str, version: str | None) -> str:
    """How a release turns a feature off by itself (a ``fixes.effects.Fails``), and, for a release
    newer than the data, the file that shows it."""
    said = f'{label} {version} warns "{f.says}"' if f.outcome is Outcome.WARNING else f"{label} {version} {f.says}"
    return said + (f" (newer than patchkit's data: read in its {f.read_in})" if f.read_in else "")


def _unread(r: judge.Unread) -> str:
    looked = "; ".join(f"{path}: {' '.join(f'`{line}`' for line in lines)}" for path, lines in r.shown) or "none"
    return (f"{said(r.lack)}, and {r.label} {r.version} is newer than patchkit has read (its data ends at {r.until}): "
            f"its files do not hold what showed how {r.until} goes on without the fix ({looked}), so patchkit "
            "cannot say whether it is needed here")


def _unneeded(r: judge.Unneeded) -> str:
    clean = "; ".join(_clean(f, r.label, r.version) for f in r.failing)
    return f"{said(r.lack)}, and without it {clean}; {r.adds_without}"


def _clean_start_only(r: judge.CleanStartOnly) -> str:
    return (f"{r.asked_with} cannot speed anything up here ({said(r.lack)}): "
            f"the fix only turns {' and '.join(r.crashes)} into a clean start")


def _turned_on(r: judge.TurnedOn) -> str:
    from patchkit.fixes.registry import PROJECTS  # the projects' labels: read only when one is said

    until = f", until {r.on.prevented_by} is applied" if r.on.prevented_by else ""
    return (f"{PROJECTS[r.project].label} {r.version} turns it on by itself on SM120 for {', '.join(r.on.models)}, "
            f"with {PROJECTS[r.on.with_project].label} {r.other} (the fix is upstream from {r.on.fixed_in}){until}")


def _backport_lacks(gap: tuple[str, tuple[str, ...], int | None]) -> str:
    """An upstream change carried whole, by the files that lack it (named as in its diff, but for the folders)."""
    name, paths, size = gap
    names = ", ".join(p.rsplit("/", 1)[-1] for p in paths)
    if size == len(paths) == 1:
        return f"{name} is missing from {names}"
    if size == len(paths):
        return f"{name} is missing from all {size} of its files ({names})"
    return f"{name} is missing from {len(paths)}{f' of its {size}' if size else ''} files ({names})"


def _no_multicast(r: judge.NoMulticast) -> str:
    if r.kind != judge.Peers.NO_PRODUCT:
        return _NO_MULTICAST[r.kind]
    words = no_multicast_said(list(r.ccs))
    assert words is not None, r  # judge.here makes NO_PRODUCT only of ccs no product of which has multicast
    return words


_NO_MULTICAST = {judge.Peers.ONE_GPU: "one GPU, no peer to share multicast memory with",
                 judge.Peers.PCIE_ONLY: "no multicast between PCIe GPUs"}

SENTENCES: dict[type, Callable[..., str]] = {
    judge.Lacks: lambda r: "; ".join([*map(_backport_lacks, r.backports), *(f"{name} lacks {key!r}" for name, key in r.gaps)]),
    judge.NoTableIn: lambda r: f"no table, list or gate of it in {r.label} {r.version}",
    judge.CannotApplyHere: lambda r: r.says,
    judge.GatesLeft: lambda r: r.says,
    judge.InRelease: lambda r: "the release has it",
    judge.NoMulticast: _no_multicast,
    judge.NoNvcc: lambda r: f"no nvcc at {r.path} ({r.chosen_by})",
    judge.Unneeded: _unneeded,
    judge.Unread: _unread,
    judge.CleanStartOnly: _clean_start_only,
    judge.TurnedOn: _turned_on,
}
