"""What a rule found (``rewrite.found.Found``), in its kind's own words: one entry of ``WORDS``
per kind of rule (``fixes.kinds.RuleKind``) — the line apply says of it, patched or already
there, and the noun generate counts it by.  A new kind of rule brings its entry here;
tests/render/test_kind_words.py fails for a kind without one."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from patchkit.fixes.kinds import RuleKind
from patchkit.rewrite.found import phrased
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.rewrite.found import Found


class Words(Value):
    """One kind's words: ``patched`` and ``left`` say after "name (scope): " (``backport`` and
    ``predicate``, after "name: ") what the rule did and why it did nothing; ``noun`` counts what it found."""

    noun: str  # generate's count: "2 tables in 1 file"
    patched: Callable[..., str]
    left: Callable[..., str]
    scoped: bool = True  # the line names what encloses it: "(def f)"


WORDS: dict[RuleKind, Words] = {
    RuleKind.DICT_KEY: Words("table", lambda t: f"key {t.added_key!r} = key {t.copied_from!r}",
                         lambda t: f"already has key {t.added_key!r}, left alone"),
    RuleKind.LIST_MEMBER: Words("list", lambda t: f"member {t.added_key!r} after {t.copied_from!r}",
                            lambda t: f"already has {t.added_key!r}, left alone"),
    RuleKind.PREDICATE: Words("gate", lambda t: f"{t.added_key} added", lambda t: f"already has {t.added_key}, left alone",
                          scoped=False),
    # a test of an SM int, widened: said as it reads now
    RuleKind.COMPARISON: Words("change", lambda t: f"now {t.value} ({t.added_key} admitted as {t.copied_from} is)",
                           lambda t: f"already admits {t.added_key}, left alone"),
    # an upstream change, said per file it changes (its values as phrases: found_line)
    RuleKind.BACKPORT: Words("change", lambda t: f"{t.added_key} applied {t.value}", lambda t: "already there, left alone",
                         scoped=False),
}


def words(t: Found) -> Words:
    """The words of ``t``'s kind (a manifest older than kinds holds dict keys)."""
    return WORDS[t.kind or RuleKind.DICT_KEY]


def found_line(t: Found) -> str:
    """One thing a rule found, as apply says it (a backport's values in their phrases, ``rewrite.backported``)."""
    t, w = phrased(t), words(t)
    if w.scoped:
        name = f"{t.name} ({t.scope})"
    else:
        name = f"{t.name} in {t.path}" if t.kind == RuleKind.BACKPORT and t.path else t.name
    return f"{name}: " + (w.patched(t) if t.patched else w.left(t))
