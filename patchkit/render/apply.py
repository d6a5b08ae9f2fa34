"""What ``patchkit apply`` says (``commands.apply.ApplyResult``): the target, what the plan
writes or why nothing, each file and what a rule found there, what each fix prevents, the
bytecode and JIT builds dropped and the servers to restart; with ``dry_run`` the diff."""

from __future__ import annotations

from patchkit.patch.write import hunks, split_lines
from patchkit.plan import APPLY
from patchkit.render.servers import restart_json, restart_lines
from patchkit.text import plural


def transaction_lines(r, command: str) -> list[str]:
    """What apply or revert (``command``) says of the lock it took, or of what a real run would
    do without it: an interrupted transaction pending, a state of another release set aside."""
    if r.locked:
        return list(r.lock_notes) + ([r.set_aside] if r.set_aside else [])
    lines = ["an interrupted transaction is pending; a real run finishes it first"] if r.pending else []
    if r.old:
        lines.append(f"{r.old}: {'a real run sets' if r.dry_run else command + ' sets'} the old state aside")
    return lines

def to_text(r, terminal: bool) -> list[str]:
    plan, local = r.plan, r.local
    lines = [r.where.line]
    if r.kept:
        lines.append(f"note: keeps {', '.join(r.kept)}, applied before (`patchkit revert` takes the fixes away)")
    lines += transaction_lines(r, "apply")
    lines += [f"note: {note}" for note in plan.notes]
    if plan.action != APPLY:
        lines.append(f"{plan.action}" + (f" ({plan.source})" if plan.source else "") + ": nothing written")
        if r.stale:
            verb = "would drop" if r.dry_run else "dropped"
            lines.append(f"{verb} {plural(len(r.dropped if not r.dry_run else r.stale), 'stale bytecode file')}")
    else:
        verb = "would patch" if r.dry_run else "patched"
        lines.append(f"{'would apply' if r.dry_run else 'applied'} {plan.source}")
        lines += [f"  {verb} {local(c.path)} ({lines_changed(c.before, c.after)})" for c in plan.changes]
        lines += [f"  {found_line(t)}" for t in plan.tables]
        lines += [effect_line(name, effect, r.project, r.label, r.where.version) for name, effect in r.effects]
        if r.dry_run:
            for c in plan.changes:
                rel = local(c.path)
                lines.append(f"--- a/{rel}\n+++ b/{rel}\n" + hunks(c.before, c.after).decode("utf-8", "replace").rstrip("\n"))
        else:
            lines.append(f"dropped {plural(len(r.dropped), 'cached bytecode file')}")
    return lines + list(r.jit_lines) + restart_lines(list(r.restart))


def to_json(r) -> dict:
    plan, local = r.plan, r.local
    return r.where.data(
        "apply",
        fixes=list(r.fixes),
        **plan_fields(plan, r.dry_run, r.old),
        files=[local(c.path) for c in plan.changes],
        tables=[(t._replace(path=local(t.path)) if t.path else t).to_json() for t in plan.tables],
        bytecode_dropped=[str(p) for p in r.dropped],
        jit_builds_dropped=list(r.jit_dropped),
        restart=restart_json(r.restart),
    )


def plan_fields(plan, dry_run: bool, set_aside: str | None) -> dict:
    """What apply's and revert's --json say of their plan (a ``plan.Plan``)."""
    return {"action": plan.action, "dry_run": dry_run, "source": plan.source, "notes": list(plan.notes), "set_aside": set_aside}


def lines_changed(before: bytes, after: bytes) -> str:
    """How many lines the diff adds and removes: "+6 lines", "-2 lines", "+1 -1 lines"."""
    added = removed = 0
    for line in split_lines(hunks(before, after)):
        if line.startswith(b"+"):
            added += 1
        elif line.startswith(b"-"):
            removed += 1
    if added and removed:
        return f"+{added} -{removed} lines"
    return f"-{plural(removed, 'line')}" if removed else f"+{plural(added, 'line')}"


def found_line(t) -> str:
    """One thing a rule found (``rewrite.rules.Found``), as apply says it."""
    kind = t.kind or "dict-key"
    if kind == "backport":
        return f"{t.name}: " + (f"{t.added_key} applied {t.value}" if t.patched else "already there, left alone")
    if kind == "predicate":
        return f"{t.name}: " + (f"{t.added_key} added" if t.patched else f"already has {t.added_key}, left alone")
    if kind == "list-member":
        return f"{t.name} ({t.scope}): " + (
            f"member {t.added_key!r} after {t.copied_from!r}" if t.patched else f"already has {t.added_key!r}, left alone")
    if t.patched:
        return f"{t.name} ({t.scope}): key {t.added_key!r} = key {t.copied_from!r}"
    return f"{t.name} ({t.scope}): already has key {t.added_key!r}, left alone"


def effect_line(name: str, effect, project: str, label: str, version: str | None) -> str:
    """What a fix patched here prevents on this release, and what it needs of the machine."""
    prevents = "; ".join(f"\"{f.says}\"" for f in effect.failing(project, version) if f.outcome != "off")
    needs = "; ".join(f"it takes effect with {n.says}, else {n.otherwise}: {n.then}" for n in effect.needs)
    what = f"prevents {prevents} on {label} {version}" if prevents else effect.changes
    return f"effect: {name} {what}" + (f"; {needs}" if needs else "") + " (`patchkit doctor` says what this machine has)"
