"""The bytes pre-filter: the offsets in a file's source near which a finding may be.

A superset, found without parsing: a ``from_cc`` dict key, or a capability literal next
to a comparison operator within a few hundred bytes of a capability-ish word.  Plain-int
gates are evaluated right here and marked only when they tell the two capabilities apart
(``major >= 9`` is never marked).  A platform flag is marked where it holds for one of the
two capabilities and not the other (``is_sm100`` from 10 to 12; never ``is_sm90`` or
``is_blackwell``).  A file without marks is not parsed at all.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from functools import lru_cache

from patchkit.cc import CC
from patchkit.scan import flags

# A superset of where gate_visitor.CAPABILITY matches: what follows a word is in the regex, what
# precedes it (no letter or digit before sm, cc, arch) is checked by hand.
_WORDS = [
    (False, re.compile(rb"capab")),
    (False, re.compile(rb"major")),
    (True, re.compile(rb"sm(?:_?ver|(?![a-z0-9]))")),
    (True, re.compile(rb"cc(?![a-z0-9])")),
    (True, re.compile(rb"cap(?![a-z0-9])")),
    (True, re.compile(rb"arch")),
]
_OPLIT = re.compile(rb"(==|!=|<=|>=|<|>)[\s\\(\[]*([\"']?)([0-9]+)(\.[0-9]+|[\s\\]*,[\s\\]*[0-9]+)?")
_REVLIT = re.compile(rb"([0-9]+)(\.[0-9]+[\"']?|[\s\\]*,[\s\\]*[0-9]+[\s\\]*,?[\s\\]*\))?[\s\\)]*(==|!=|<=|>=|<|>)")
_CONTAINER = re.compile(rb"\bin[\s\\]*[(\[{]")
_DIGITS = re.compile(rb"[0-9]+")
_BYTE_OPS: dict[bytes, Callable[[int, int], bool]] = {
    b"==": operator.eq,
    b"!=": operator.ne,
    b"<": operator.lt,
    b"<=": operator.le,
    b">": operator.gt,
    b">=": operator.ge,
}
_BEFORE = 150  # a gate's literal is looked for this far before a capability word
_AFTER = 250  # ... and this far after it


# A platform flag's start in lower-cased source (``flags.flag`` reads the whole name).
_FLAG_START = re.compile(rb"is_(?:sm|hopper|blackwell)")
_IDENT_END = re.compile(rb"[a-z0-9_]*")

_ALNUM = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_IDENT = _ALNUM | frozenset(b"_.")


def _word_spans(low: bytes) -> list[tuple[int, int]]:
    """Where ``CAPABILITY`` can match in lower-cased source (a superset), sorted."""
    out = []
    for check_before, rx in _WORDS:
        for m in rx.finditer(low):
            s = m.start()
            if check_before and s and low[s - 1] in _ALNUM:
                continue
            out.append(m.span())
    out.sort()
    return out


@lru_cache(maxsize=16)
def _key_patterns(c: CC) -> tuple[re.Pattern[bytes], ...]:
    # int keys (10:) and "X.Y" keys (the quote before "10.0" is checked by hand)
    return re.compile(rb"%d[ \t]*:" % c.major), re.compile(rb"%d\.[0-9]+[\"'][ \t]*:" % c.major)


def marks(src: bytes, a: CC, b: CC) -> list[int]:
    """Offsets in ``src`` near which a finding may be (a superset), sorted."""
    out: set[int] = set()
    for quoted, rx in zip((False, True), _key_patterns(a), strict=True):
        for m in rx.finditer(src):
            i = m.start() - 1
            if quoted:
                if i < 0 or src[i] not in b"\"'":
                    continue
                i -= 1
            elif i >= 0 and src[i] in _IDENT:
                continue
            while i >= 0 and src[i] in b" \t":
                i -= 1
            if i < 0 or src[i] in b"{,\n\r":
                out.add(m.start())
    low = src.lower()
    for m in _FLAG_START.finditer(low):
        s = m.start()
        while s and low[s - 1] == 95:  # "_"
            s -= 1
        if s and low[s - 1] in _ALNUM:
            continue
        name = low[s : _IDENT_END.match(low, m.end()).end()].decode("ascii")  # type: ignore[union-attr]  # [a-z0-9_]* matches anywhere
        if flags.differs(name, a, b):
            out.add(s)
    spans = _word_spans(low)
    if not spans:
        return sorted(out)
    lo, hi = min(a.major, b.major), max(a.major, b.major)
    scaled = (a.major * 10 + a.minor, b.major * 10 + b.minor)

    def near(v: int) -> bool:  # could equal, or sit between, the two capabilities
        m = v if 7 <= v <= 13 else v // 10 if 70 <= v <= 139 else 0
        return lo <= m <= hi

    def differs(op: bytes, v: int, reverse: bool) -> bool:  # a plain int, evaluated
        if 7 <= v <= 13:
            x, y = a.major, b.major
        elif 70 <= v <= 139:
            x, y = scaled
        else:
            return False
        fn = _BYTE_OPS[op]
        return fn(v, x) != fn(v, y) if reverse else fn(x, v) != fn(y, v)

    windows: list[list[int]] = []
    for s, e in spans:
        s, e = max(0, s - _BEFORE), e + _AFTER
        if windows and s <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], e)
        else:
            windows.append([s, e])
    for s, e in windows:
        for m in _OPLIT.finditer(src, s, e):
            v = int(m.group(3))
            if near(v) if (m.group(2) or m.group(4)) else differs(m.group(1), v, False):
                out.add(m.start())
        for m in _REVLIT.finditer(src, s, e):
            v = int(m.group(1))
            if near(v) if m.group(2) else differs(m.group(3), v, True):
                out.add(m.start())
        for m in _CONTAINER.finditer(src, s, e):
            if any(near(int(d)) for d in _DIGITS.findall(src, m.end(), m.end() + 400)):
                out.add(m.start())
    return sorted(out)
