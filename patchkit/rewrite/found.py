"""What one rule found in one file, as the manifests, the states and the reports keep it
(``rewrite.rules`` makes it from a rewrite's result, ``output.Hit``); in a module of its own,
so that reading a manifest imports no rewriter."""

from __future__ import annotations

from typing import Any

from patchkit.fixes.kinds import RuleKind
from patchkit.rewrite.backported import Carried, Upstream, phrases, read_fields
from patchkit.types import ALREADY_UPSTREAM, PATCHED, Status
from patchkit.values import Record


class Found(Record):
    """What one rule found in one file: a table, a list, a gate or an upstream change."""

    fix: str | None  # None in a manifest older than series (its tables name neither fix nor kind)
    kind: RuleKind | None  # the rule's kind (None: dict-key, as above)
    name: str  # "MAX_SIZES", "_is_sm100_supported in fusion_applies()", "upstream commit abc (#1)"
    scope: str  # what encloses it: "module", "class A", "def f"; a backport's "the upstream change"
    status: Status  # PATCHED or ALREADY_UPSTREAM
    added_key: object  # what was added: a key, a member, a flag, a backport's count of hunks
    copied_from: object  # what it copies: a key, a member, a flag, a backport's ``backported.Upstream``
    value: object  # as it reads now, on one line (a backport: how it applied, ``backported.Carried``)
    added: tuple[str, ...] | None = None  # a predicate's module lines added (its definition, an import)
    path: str | None = None  # the repository path of the file, once one is named

    @property
    def patched(self) -> bool:
        return self.status == PATCHED

    def at(self, path: str) -> Found:
        return self._replace(path=path)

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {"name": self.name, "scope": self.scope, "status": self.status, "added_key": self.added_key,
               "copied_from": _json(self.copied_from), "value": _json(self.value)}
        if self.added is not None:
            doc["added"] = list(self.added)
        doc.update({k: v for k, v in (("fix", self.fix), ("kind", self.kind)) if v is not None})
        return doc if self.path is None else dict(doc, path=self.path)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Found:  # Any: a manifest's JSON, its fields checked where it is read
        """A recorded one (a manifest's: checked by its reader, which a kind or status that is
        none makes a ValueError)."""
        added = doc.get("added")
        kind, status = doc.get("kind"), Status.parse(doc["status"])
        if kind is not None and kind not in tuple(RuleKind):
            raise ValueError(f"a table's kind {kind!r} is no kind of rule ({', '.join(RuleKind)})")
        if status not in (PATCHED, ALREADY_UPSTREAM):
            raise ValueError(f"a table's status {doc['status']!r} is not {PATCHED} or {ALREADY_UPSTREAM}")
        fields = doc["added_key"], doc["copied_from"], doc.get("value")
        if kind == RuleKind.BACKPORT:  # its values; a phrase an earlier patchkit saved stays one
            fields = read_fields(*fields)
        return cls(doc.get("fix"), None if kind is None else RuleKind(kind), doc["name"], doc["scope"], status,
                   *fields, None if added is None else tuple(added), doc.get("path"))


def _json(value: object) -> object:
    """A field as saved: a backport's value (``backported.Upstream``, ``Carried``) as its JSON."""
    return value.to_json() if isinstance(value, (Upstream, Carried)) else value


def phrased(t: Found) -> Found:
    """``t`` with a backport's values as their phrases (``backported.phrases``); any other finding as it is."""
    if t.kind != RuleKind.BACKPORT:
        return t
    added_key, copied_from, value = phrases(t.added_key, t.copied_from, t.value)
    return t._replace(added_key=added_key, copied_from=copied_from, value=value)
