"""What ``patchkit status`` says (``commands.status.StatusResult``): the target and its
project, the version, what is applied and shipped, each file and its bytecode, stale JIT
builds, pending work and the servers to restart."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.render.reasons import code, said
from patchkit.render.servers import restart_json, restart_lines
from patchkit.render.source import applied_json, source_words
from patchkit.text import plural

if TYPE_CHECKING:
    from patchkit.commands.status import StatusResult

ONE_TARGET = True  # to_json renders one target: render.document puts it in a list, ``targets``


def to_text(r: StatusResult, terminal: bool) -> list[str]:
    editable = f", editable install of {r.editable}" if r.editable is not None else ""
    lines = [f"target:   {r.root} ({r.kind}{editable}; state in {r.state_dir})",
             f"project:  {r.label}",
             f"version:  {r.where.version or 'unknown'} ({r.how})"]
    if r.changed:
        lines.append(f"applied:  nothing for this release; {said(r.changed)}: that state no longer applies "
                     "(the next apply or revert sets it aside)")
    elif r.applied:
        a = r.applied
        lines.append(f"applied:  {source_words(a.source)}, key {a.to_cc!r} copied from {a.from_cc!r} (patchkit {a.patchkit})")
    else:
        lines.append("applied:  nothing recorded by patchkit")
    if r.for_cc is not None:
        c = r.for_cc
        had = "nothing applied" if c.applied is None else f"patchkit applied key {c.applied!r}"
        lines.append(f"to-cc:    {c.cc}: applied (key {c.key!r})" if c.in_effect
                     else f"to-cc:    {c.cc}: not applied (key {c.key!r}; {had})")
    if r.aside:
        lines.append(f"set aside: {plural(len(r.aside), 'state')} of earlier releases in {r.aside_dir}")
    lines.append(f"shipped:  {r.shipped.name}" if r.shipped
                 else f"shipped:  {said(r.no_shipped)}; apply generates the change from the files")
    for f in r.files:
        stale = f", {f.stale} stale" if f.stale else ""
        pycs = f"; {plural(f.bytecode, 'cached bytecode file')}{stale}" if f.path.endswith(".py") else ""
        lines.append(f"  {f.path}: {f.state}{pycs}")
    if r.jit_error is not None:
        lines.append(f"note: FlashInfer's JIT builds not checked: {r.jit_error}")
    for b in r.builds:
        lines.append(f"  {b.path}: stale FlashInfer JIT build ({b.kind}), older than the patched sources; "
                     + ("`patchkit apply` drops it" if b.droppable else b.advice))
    pending = f"an interrupted {r.pending.get('op', 'transaction')} (the next apply or revert finishes it)" if r.pending else "no interrupted transaction"
    lines.append(f"pending:  {pending}")
    return lines + restart_lines(list(r.running))


def to_json(r: StatusResult) -> dict[str, object]:
    """One target's part of status's document (``render.document`` puts it in ``targets``)."""
    return r.where.fields(
        project=r.project,
        label=r.label,
        kind=r.kind,
        editable=r.editable,
        state_dir=str(r.state_dir),
        applied=applied_json(r.applied) if r.applied else None,
        shipped_patch=r.shipped.patch if r.shipped else None,
        shipped=r.shipped.name if r.shipped else None,
        no_shipped=said(r.no_shipped),
        files=[{"path": f.path, "state": f.state, "bytecode": f.bytecode, "stale_bytecode": f.stale} for f in r.files],
        pending=r.pending,
        set_aside_reason=said(r.changed),
        set_aside_code=code(r.changed),
        set_aside=[str(p.parent) for p in r.aside],
        restart=restart_json(r.running),
        stale_jit_builds=[str(b.path) for b in r.builds],
        jit_builds=[{"module": b.module, "path": str(b.path), "kind": b.kind, "droppable": b.droppable,
                     "advice": b.advice or None} for b in r.builds],
        jit_error=None if r.jit_error is None else str(r.jit_error),
        **({"to_cc": {"cc": str(r.for_cc.cc), "key": r.for_cc.key, "applied": r.for_cc.in_effect}} if r.for_cc is not None else {}),
    )
