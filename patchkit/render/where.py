"""The first line of every report on a target (``report.Where``): where, what, which version and
how it was found."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.types import TargetKind

if TYPE_CHECKING:
    from patchkit.report import Where


def where_line(w: Where) -> str:
    what = f"{w.label} {w.version or '(version unknown)'}"
    if w.kind is TargetKind.EDITABLE:
        return f"{w.shown}: {what} (editable install of {w.editable_of}, {w.version_from})"
    if w.kind is TargetKind.INSTALLED:
        return f"{w.shown}: {what} (installed), {w.version_from}"
    return f"{w.shown}: {what}, {w.version_from}"
