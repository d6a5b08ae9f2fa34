"""What ``patchkit revert`` says (``commands.revert.RevertResult``): the target, what the plan
restores or why nothing, each file and its original's sha256, the copies of edited files kept,
the bytecode and JIT builds dropped and the servers to restart."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.digest import sha256
from patchkit.plan.plans import REVERT
from patchkit.render.apply import jit_fields, jit_lines, plan_fields, transaction_lines
from patchkit.render.reasons import said
from patchkit.render.servers import restart_json, restart_lines
from patchkit.render.source import source_words
from patchkit.render.where import where_line
from patchkit.text import plural

if TYPE_CHECKING:
    from patchkit.commands.revert import ForceRefused, RevertResult
    from patchkit.errors import Refused

ONE_TARGET = True  # to_json renders one target: render.document puts it in a list, ``targets``


def refused(exc: ForceRefused) -> Refused:
    """``commands.revert.ForceRefused`` as its one line says it: how the state is another release's first."""
    from patchkit.errors import Refused

    return Refused(exc.path, f"{said(exc.changed)}: {exc.reason}")


def to_text(r: RevertResult, terminal: bool) -> list[str]:
    plan = r.plan
    lines = [where_line(r.where)]
    lines += transaction_lines(r, "revert")
    lines += [f"note: {said(note)}" for note in plan.notes]
    lines += [f"kept your edited copy in {path}" for path in r.kept]
    if plan.action != REVERT:
        lines.append(f"{plan.action}: nothing written")
    else:
        verb = "would restore" if r.dry_run else "restored"
        lines.append(f"{'would revert' if r.dry_run else 'reverted'} {source_words(plan.source)}")
        lines += [f"  {verb} {r.local(c.path)} (sha256 {sha256(c.after)[:12]})" for c in plan.changes]
        if not r.dry_run:
            lines.append(f"dropped {plural(len(r.dropped), 'cached bytecode file')}")
    return lines + jit_lines(r.jit, r.where.version, "from the patched sources") + restart_lines(list(r.restart))


def to_json(r: RevertResult) -> dict[str, object]:
    """One target's part of revert's document (``render.document`` puts it in ``targets``)."""
    return r.where.fields(
        **plan_fields(r),
        files=[r.local(c.path) for c in r.plan.changes],
        changes=[{"path": r.local(c.path), "sha256": sha256(c.after)} for c in r.plan.changes],
        kept_edits=[str(p) for p in r.kept],
        bytecode_dropped=[str(p) for p in r.dropped],
        **jit_fields(r.jit),
        restart=restart_json(r.restart),
    )
