"""What every rewrite kind shares: the result of one thing found, the new literal, the bytes out.

Pure helpers for ``dict_key``, ``list_member`` and ``predicate``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Generic, TypedDict, TypeVar

import libcst as cst

from patchkit.cc import Key
from patchkit.rewrite.unfit import Misfit, no_fit
from patchkit.types import PATCHED, Status
from patchkit.values import Value

LINE_LENGTH = 88  # black's default, and SGLang's: a longer new line is refused, never re-wrapped


class HitJson(TypedDict):
    """The shape every rewrite's findings share (``rewrite.rules`` makes each a ``Found`` of it)."""

    name: str
    scope: str
    status: Status
    added_key: object  # a key, a member, a flag
    copied_from: object
    value: str


class Hit(Value):
    """What happened to one thing a rewrite found (a table, a list, a gate): its name, where
    it is, PATCHED or ALREADY_UPSTREAM, what it copies and what it added, and its value on
    one line.  ``to_json`` is the one shape manifests, state and reports carry."""

    name: str
    scope: str
    status: Status
    from_cc: Key
    to_cc: Key
    value: str

    def to_json(self) -> HitJson:
        return {"name": self.name, "scope": self.scope, "status": self.status,
                "added_key": self.to_cc, "copied_from": self.from_cc, "value": self.value}


def changed(found: Iterable[Hit]) -> bool:
    """Whether a rewrite patched any of what it found."""
    return any(r.status == PATCHED for r in found)


_H = TypeVar("_H", bound=Hit)


class Rewritten(Value, Generic[_H]):
    """The rewritten source and what happened to each thing found in it (each kind gives
    ``found`` its own name too: ``tables``, ``lists``)."""

    source: bytes
    found: tuple[_H, ...]

    @property
    def changed(self) -> bool:
        return changed(self.found)


def new_literal(like: cst.BaseExpression, key: Key) -> cst.BaseExpression:
    """``key`` as a literal written like ``like``: ``12``, or ``"12.0"`` in the same quotes."""
    if isinstance(key, int):
        return cst.Integer(str(key))
    quote = like.quote if isinstance(like, cst.SimpleString) else '"'
    return cst.SimpleString(f"{quote}{key}{quote}")


def _width(line: str) -> int:
    """Columns as black counts them: East Asian wide characters take two, combining ones none."""
    if line.isascii():
        return len(line)
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def render(after: cst.Module, source: bytes, path: str, line_length: int | None = LINE_LENGTH) -> bytes:
    """The bytes of ``after``, the rewrite of the module parsed from ``source``.

    A line the rewrite made or changed that is wider than ``line_length`` is refused
    (RewriteError): black would re-wrap it, and patchkit does not.
    """
    code = after.code
    if line_length is not None:
        old = set(source.decode(after.encoding, errors="replace").splitlines())
        for line in code.splitlines():
            if line not in old and _width(line) > line_length:
                raise no_fit(path, Misfit.LINE_TOO_WIDE, width=_width(line), limit=line_length, line=line.strip())
    out = code.encode(after.encoding)
    # LibCST takes a final comment ending in a backslash for a line continuation and
    # drops the file's last newline (libcst 1.9): put the original ending back.
    if source.endswith(b"\n") and not out.endswith(b"\n"):
        out += b"\r\n" if source.endswith(b"\r\n") else b"\n"
    return out
