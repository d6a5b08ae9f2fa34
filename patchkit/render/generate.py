"""What ``patchkit generate`` says (``commands.generate.GenerateResult``): one line per tag as
it is done (``tag_line``), then the differences ``--check`` found and the summary."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.commands.generate import NoKeys
from patchkit.patch.manifest import SERIES
from patchkit.render.found import words
from patchkit.rewrite.found import phrased
from patchkit.text import plural
from patchkit.types import ALREADY_UPSTREAM, CANNOT_APPLY, ERROR, INCOMPLETE, NOT_NEEDED_HERE, NOTHING_TO_PATCH, PATCHED

if TYPE_CHECKING:
    from patchkit.commands.generate import GenerateResult, TagOutcome
    from patchkit.patch.manifest import FixStatus


def tag_line(outcome: TagOutcome, width: int, out: Path) -> str:
    """A tag's line: its status, where its series went, what each fix did there."""
    line = f"{outcome.tag:<{width}}  {outcome.status}"
    if outcome.status == PATCHED:
        line += f" -> {out / outcome.version / SERIES}"
    parts = []
    for f in outcome.fixes:
        if f.status == PATCHED:
            found = [t for t in outcome.tables if t.fix == f.fix]
            files = {t.path for t in found}
            noun = words(found[0]).noun if found else "change"
            parts.append(f"{f.fix} {plural(len(found), noun)} in {plural(len(files), 'file')}")
        elif f.status in (CANNOT_APPLY, INCOMPLETE) and outcome.status != ERROR:
            parts.append(f"{f.fix} {f.status} ({f.says()})")
        elif f.status == NOT_NEEDED_HERE:
            parts.append(f"{f.fix} not needed here ({why(f)})")
        elif f.status not in (CANNOT_APPLY, INCOMPLETE) and outcome.status == PATCHED:
            parts.append(f"{f.fix} {f.status}")
    if outcome.error:
        parts.append(outcome.error)
    return line + (": " + "; ".join(parts) if parts else "")


def to_text(r: GenerateResult | NoKeys, terminal: bool) -> list[str]:
    if isinstance(r, NoKeys):  # --to-cc auto, and the GPUs need no key
        from patchkit.render.auto import gpus_line

        return [gpus_line(r.machine), f"nothing to generate: {r.label} copies its keys from this machine's cc"]
    summary = r.summary()
    return [*r.differences,
        f"{plural(summary['tags'], 'tag')}: {summary[PATCHED]} patched, {summary[NOTHING_TO_PATCH]} nothing to patch, "
        f"{summary[ALREADY_UPSTREAM]} already upstream, {plural(summary[ERROR], 'error')}"
        + (f"; {plural(len(r.differences), 'difference')} in {r.out}" if r.check else ""),
    ]


def to_json(r: GenerateResult | NoKeys) -> dict[str, object]:
    if isinstance(r, NoKeys):
        return {"command": "generate", "to_cc": "auto", "nothing_to_do": True}
    return {
        "command": "generate",
        "repo": str(r.repo),
        "out": str(r.out),
        "fixes": list(r.fixes),
        "check": r.check,
        "tags": [_tag_json(o) for o in r.outcomes],
        "summary": r.summary(),
        "differences": list(r.differences),
    }


def why(f: FixStatus) -> str | None:
    """Why a fix stands as it does on the release, in words, from what the manifest keeps
    (``FixStatus.says``; a fix not needed here, the judge's reason said by ``render/reasons.py``)."""
    if f.status == NOT_NEEDED_HERE and f.unneeded is not None:
        from patchkit.render.reasons import said
        from patchkit.render.saved import read

        return said(read(f.unneeded)) or f.reason
    return f.says()


def _tag_json(outcome: TagOutcome) -> dict[str, object]:
    """A tag's part of the document: each fix with its reason in words (an incomplete fix's gates
    too), the values the manifest keeps for the words left out; what a backport found in its phrases."""
    fixes = [{"fix": f.fix, "status": f.status, "reason": why(f), **({} if f.gates is None else {"gates": f.gates})}
             for f in outcome.fixes]
    return {"tag": outcome.tag, "version": outcome.version, "status": outcome.status, "files": sorted(outcome.outputs),
            "tables": [phrased(t).to_json() for t in outcome.tables], "fixes": fixes, "error": outcome.error}
