"""What a backport rule found in one file, as values (docs/ARCHITECTURE.md, "Saved values"): the
hunks it carries (an int, a ``Found``'s ``added_key``), the upstream change's commit and release
(``Upstream``, its ``copied_from``) and how the hunks went in (``Carried``, its ``value``).
``phrases`` (and ``found.phrased``) give these as the phrases an earlier patchkit saved ("1 hunk",
"at an offset of -7 lines", "in 0.5.13"): apply's line, ``--json`` and the commit message say
them; a phrase read from an older manifest or state.json is said as it is."""

from __future__ import annotations

from typing import Any

from patchkit.fixes.kinds import RuleKind
from patchkit.text import plural
from patchkit.types import StrEnum
from patchkit.values import Value


class HowCarried(StrEnum):
    """How a backport's hunks went into the file (saved in manifest.json and state.json)."""

    EXACTLY = "exactly"  # every hunk at its line
    OFFSET = "offset"  # at the nearest place that holds it
    MERGED = "merged"  # a three-way merge against the release the change was made on
    THERE = "there"  # every hunk's post-image is there already
    LANDED = "landed"  # the release has the change (counted, not read)


class Refreshed(Value):
    """A refresh of the diff the file took (``fixes.kinds.Refresh``, as the fix's data says it)."""

    since: str | None
    until: str | None
    drop: tuple[str, ...]  # the added lines left out
    why: str  # the fix's own words for it

    def to_json(self) -> dict[str, object]:
        return {"since": self.since, "until": self.until, "drop": list(self.drop), "why": self.why}


class Carried(Value):
    """How the hunks went in: the way, the offsets it moved them by (OFFSET), the refreshes taken."""

    how: HowCarried
    offsets: tuple[int, ...] = ()  # distinct, ascending
    refreshed: tuple[Refreshed, ...] = ()

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"how": str(self.how)}
        if self.offsets:
            doc["offsets"] = list(self.offsets)
        if self.refreshed:
            doc["refreshed"] = [r.to_json() for r in self.refreshed]
        return doc


class Upstream(Value):
    """The upstream change a backport carries: its commit (None: not known) and the release it landed in."""

    commit: str | None
    landed_in: str

    def to_json(self) -> dict[str, object]:
        return {"commit": self.commit, "landed_in": self.landed_in}


def read_fields(added_key: object, copied_from: object, value: object) -> tuple[object, object, object]:
    """A recorded backport's ``added_key``, ``copied_from`` and ``value`` as values; a phrase an
    earlier patchkit saved stays as it is.  ValueError for a field that is neither."""
    doc: Any  # a manifest's or a state's JSON, checked here
    if isinstance(copied_from, dict):
        doc = copied_from
        if not isinstance(doc.get("landed_in"), str) or not isinstance(doc.get("commit"), (str, type(None))):
            raise ValueError(f"a backport's copied_from {copied_from!r} is no upstream change")
        copied_from = Upstream(doc["commit"], doc["landed_in"])
    if isinstance(value, dict):
        doc = value
        offsets, refreshed = doc.get("offsets", []), doc.get("refreshed", [])
        if (doc.get("how") not in tuple(HowCarried) or not isinstance(offsets, list)
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets) or not isinstance(refreshed, list)):
            raise ValueError(f"a backport's value {value!r} is not how it was carried")
        value = Carried(HowCarried(doc["how"]), tuple(offsets), tuple(_refreshed(r) for r in refreshed))
    if isinstance(added_key, bool) or not isinstance(added_key, (int, str)):
        raise ValueError(f"a backport's added_key {added_key!r} is no count of hunks")
    return added_key, copied_from, value


def _refreshed(doc: object) -> Refreshed:
    fields: Any = doc
    if (not isinstance(fields, dict) or not isinstance(fields.get("why"), str) or not isinstance(fields.get("drop"), list)
            or not all(isinstance(fields.get(k), (str, type(None))) for k in ("since", "until"))):
        raise ValueError(f"a backport's refresh {doc!r} is not one")
    return Refreshed(fields["since"], fields["until"], tuple(str(d) for d in fields["drop"]), fields["why"])


def _how(value: Carried, upstream: object) -> str:
    """How it applied, as an earlier patchkit saved it: "at an offset of -7 lines", "by a three-way
    merge, refreshed: ...", "upstream since 0.5.13"."""
    if value.how == HowCarried.LANDED:
        landed = upstream.landed_in if isinstance(upstream, Upstream) else "?"
        return f"upstream since {landed}"
    words = {HowCarried.EXACTLY: "exactly", HowCarried.MERGED: "by a three-way merge", HowCarried.THERE: "already there",
             HowCarried.OFFSET: f"at an offset of {', '.join(f'{o:+d}' for o in value.offsets)} lines"}[value.how]
    return words + "".join(f", refreshed: {r.why}" for r in value.refreshed)


def phrases(added_key: object, copied_from: object, value: object) -> tuple[object, object, object]:
    """A backport's ``added_key``, ``copied_from`` and ``value`` as the phrases an earlier patchkit
    saved ("1 hunk", "in 0.5.13", "at an offset of -7 lines"); a phrase read back as it is."""
    if isinstance(added_key, int) and not isinstance(added_key, bool):
        added_key = plural(added_key, "hunk")
    if isinstance(value, Carried):
        value = _how(value, copied_from)
    if isinstance(copied_from, Upstream):
        copied_from = (copied_from.commit or f"in {copied_from.landed_in}")[:12]
    return added_key, copied_from, value


def phrased_json(doc: dict[str, object]) -> dict[str, object]:
    """A found table's JSON as state.json keeps it, a backport's values as their phrases (``phrases``),
    its keys in their order; any other, or one that is no backport's values, as it is."""
    if doc.get("kind") != RuleKind.BACKPORT:
        return doc
    try:
        fields = read_fields(doc.get("added_key"), doc.get("copied_from"), doc.get("value"))
    except ValueError:
        return doc
    words = zip(("added_key", "copied_from", "value"), phrases(*fields), strict=True)
    return dict(doc, **{k: v for k, v in words if k in doc})
