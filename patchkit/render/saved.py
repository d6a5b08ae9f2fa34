"""Why a fix is not needed here, as a manifest keeps it (``generate --to-cc auto``): the judge's
reason (``judge.reasons.Unneeded`` or ``Unread``) as its code and fields, and back, to be said by
``render/reasons.said`` when read (docs/ARCHITECTURE.md, "Saved values")."""

from __future__ import annotations

from typing import Any

from patchkit.cc import CC
from patchkit.fixes.effects import Fails, Outcome
from patchkit.judge import reasons as judge
from patchkit.types import Reason


def saved(reason: judge.Unneeded | judge.Unread | None) -> dict[str, object] | None:
    """The reason as the manifest keeps it (None for none)."""
    if reason is None:
        return None
    doc: dict[str, object] = {"code": str(reason.code), "lack": _lack(reason.lack), "label": reason.label, "version": reason.version}
    if isinstance(reason, judge.Unread):
        return dict(doc, until=reason.until, shown=[[path, list(lines)] for path, lines in reason.shown])
    return dict(doc, failing=[dict(f._asdict(), outcome=str(f.outcome), holds=list(f.holds)) for f in reason.failing],
                adds_without=reason.adds_without)


def _lack(lack: judge.NoMulticast | judge.NoNvcc) -> dict[str, object]:
    if isinstance(lack, judge.NoNvcc):
        return {"code": str(lack.code), "path": lack.path, "chosen_by": lack.chosen_by}
    return {"code": str(lack.code), "kind": str(lack.kind), "ccs": [list(cc) for cc in lack.ccs]}


def read(doc: dict[str, Any]) -> judge.Unneeded | judge.Unread | None:  # Any: a manifest's JSON, its fields checked here
    """The reason a manifest keeps; None when it is not one (a code or a field unknown)."""
    try:
        lack = _read_lack(doc["lack"])
        if doc["code"] == Reason.NEWER_THAN_READ:
            shown = tuple((path, tuple(lines)) for path, lines in doc["shown"])
            return judge.Unread(lack, doc["label"], doc["version"], doc["until"], shown)
        if doc["code"] != Reason.NOT_NEEDED_HERE:
            return None
        failing = tuple(Fails(**dict(f, outcome=Outcome(f["outcome"]), holds=tuple(f["holds"]))) for f in doc["failing"])
        return judge.Unneeded(lack, doc["label"], doc["version"], failing, doc["adds_without"])
    except (KeyError, TypeError, ValueError):
        return None


def _read_lack(doc: dict[str, Any]) -> judge.NoMulticast | judge.NoNvcc:  # Any: as read
    if doc["code"] == Reason.NO_NVCC:
        return judge.NoNvcc(doc["path"], doc["chosen_by"])
    if doc["code"] != Reason.NO_MULTICAST:
        raise ValueError(doc["code"])
    return judge.NoMulticast(judge.Peers(doc["kind"]), tuple(CC(*cc) for cc in doc["ccs"]))
