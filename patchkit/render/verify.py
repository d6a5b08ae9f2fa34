"""What ``patchkit verify`` says (``commands.verify.VerifyResult``): the target, each file
checked and how, the notes, one line per problem, and the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.fixes.kinds import BackportRule
from patchkit.render.reasons import code, said
from patchkit.render.where import where_line
from patchkit.text import plural

if TYPE_CHECKING:
    from patchkit.commands.verify import VerifyResult

ONE_TARGET = True  # to_json renders one target: render.document puts it in a list, ``targets``


def to_text(r: VerifyResult, terminal: bool) -> list[str]:
    plan = r.plan
    lines = [where_line(r.where)]
    lines += [f"checked {c.path}: {', '.join(c.tables)} ({c.how})" for c in plan.checked]
    lines += [f"note: {said(n)}" for n in plan.notes]
    lines += map(said, plan.problems)
    return lines + [verdict(r)]


def verdict(r: VerifyResult) -> str:
    """The last line: how many problems, or what was proved."""
    plan = r.plan
    if plan.problems:
        return f"verify: {plural(len(plan.problems), 'problem')}"
    if not plan.checked:
        release = f"{r.label} {r.where.version or '(version unknown)'}"
        judged = f"{', '.join(plan.fixes)} {'changes' if len(plan.fixes) == 1 else 'change'} nothing in {release}" if plan.fixes \
            else f"no fix checked in {release}"
        others = f"; not checked: {', '.join(r.not_checked)} (--all-fixes)" if r.not_checked else ""
        return f"verify: ok, nothing to patch: {judged}{others}"
    if not plan.names:
        carried = [rule.origin.cite() if rule.origin is not None else "the upstream change"  # one made without its origin
                   for rule in plan.rules if isinstance(rule, BackportRule)]
        what = f"{', '.join(carried)} in every file it changes" if carried and len(carried) == len(plan.rules) else \
            f"{r.to_cc!r} in every list and gate of {', '.join(plan.fixes)}"
        return f"verify: ok ({what})"
    if plan.notes:
        return f"verify: ok (key {r.to_cc!r} = key {r.from_cc!r} in every table patchkit added)"
    return f"verify: ok (key {r.to_cc!r} = key {r.from_cc!r} in every table)"


def to_json(r: VerifyResult) -> dict[str, object]:
    """One target's part of verify's document: ``in_effect`` is this target's verdict (the
    envelope's ``ok`` is the whole command's)."""
    plan = r.plan
    return r.where.fields(fixes=list(plan.fixes), not_checked=list(r.not_checked), from_cc=r.from_cc, to_cc=r.to_cc, in_effect=not plan.problems,
                          checked=[{"path": c.path, "how": c.how, "tables": list(c.tables)} for c in plan.checked], notes=[said(n) for n in plan.notes],
                          note_reasons=[code(n) for n in plan.notes], problems=[said(p) for p in plan.problems],
                          problem_reasons=[code(p) for p in plan.problems])
