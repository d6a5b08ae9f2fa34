"""What a finding asks of its reader: its class, one of *unaware*, *aware*, *covered*.

``covered``  a rule of one of patchkit's fixes patches it (``covered_by`` names the fix);
``aware``    not covered, and the gate names the ``cc`` itself:

             - its statement compares a capability with a literal of ``cc``'s major
               (for ``--cc 12``: ``12``, ``120``..``129``, ``"12.0"``, ``(12, 1)``,
               ``12.0``), in the same gate or in another one of the statement
               (``major == 10 or major == 12``, ``major <= 12``); for an
               ``if``/``elif`` chain, the statement is the tests of all its branches
               (``elif major == 10: ... elif major == 12:``);
             - or a name or a string in that statement says ``sm120``, ``sm_120``,
               ``SM12x``, ``sm121`` (``is_sm120()``, ``_SM120_BLOCK``, ``"SM120
               kernel"``), and for 12 also ``rtx_pro``, ``geforce``, ``gb10``,
               ``consumer_blackwell`` style names;
             - or a folder or file of its path says so (``fa4_sm120/``, ``*_sm120.py``);

             comments are not looked at, nor other statements of the same function;
``unaware``  the rest: ``cc`` takes another path than ``from_cc`` there and nothing in
             the gate says the author had ``cc`` in mind (``major == 10`` alone,
             ``major >= 9``, ``arch // 10 in [10, 11]``).

The statement is judged while the gate visitor has it parsed (``Finding.names_cc``);
this module holds the words and the decision, and nothing here parses a file again.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

from patchkit.cc import CC
from patchkit.rewrite.capability import Literal, LiteralForm

if TYPE_CHECKING:
    from patchkit.scan.finding import Finding

UNAWARE = "unaware"
AWARE = "aware"
COVERED = "covered"
CLASSES = (UNAWARE, AWARE, COVERED)  # the order of the text output


def literal_major(lit: Literal) -> int | None:
    """The major a capability literal stands for: 12, 121 -> 12; "12.0", (12, 1), 12.0 -> 12."""
    value = lit.value
    if lit.kind == LiteralForm.MAJOR:
        major: int = value
        return major
    if lit.kind == LiteralForm.SM:
        sm: int = value
        return sm // 10
    if lit.kind in (LiteralForm.TUPLE, LiteralForm.DOTTED):
        cc: tuple[int, int] = value
        return cc[0]
    if lit.kind == LiteralForm.FLOAT:
        return int(value)
    return None


def literal_cc(lit: Literal) -> tuple[int, int] | None:
    """The (major, minor) a capability literal stands for: 121, (12, 1), "12.1", 12.1 -> (12, 1);
    None for a major alone (12)."""
    if lit.kind == LiteralForm.SM:
        sm: int = lit.value
        return divmod(sm, 10)
    if lit.kind in (LiteralForm.TUPLE, LiteralForm.DOTTED):
        major, minor = lit.value
        return major, minor
    if lit.kind == LiteralForm.FLOAT:
        return int(lit.value), round((lit.value - int(lit.value)) * 10)
    return None


def literal_names(lit: Literal, c: CC, exact: bool) -> bool:
    """Whether a literal names the cc ``c``: its major (``--cc 12`` after 10), or, ``exact``
    (a cc of the same major as the one it should behave like: 12.1 after 12.0), the cc itself:
    ``== 120`` names 12.0, not 12.1."""
    return literal_cc(lit) == (c.major, c.minor) if exact else literal_major(lit) == c.major


# Names of the SM12x family that say "consumer / workstation Blackwell" without its number.
_ALIASES_12 = r"|rtx_?pro|rtx_?50[0-9]0|geforce|gb10(?![0-9])|(?:consumer|workstation|client)_?blackwell|blackwell_?(?:consumer|workstation|client|geforce|rtx)"


@lru_cache(maxsize=8)
def words(major: int, minor: int | None = None) -> re.Pattern[str]:
    """What names ``major`` in a name, a string or a path: ``sm120``, ``sm_120``,
    ``SM12x``, ``sm121``, ``Sm12`` (not ``sm1200``, ``sm_12345``); case-insensitive.  With
    ``minor``, that cc alone: ``sm121``, ``sm_121a``, and ``gb10`` for 12.1."""
    if minor is not None:
        return re.compile(rf"sm_?{major}{minor}(?![0-9])" + ("|gb10(?![0-9])" if (major, minor) == (12, 1) else ""), re.I)
    aliases = _ALIASES_12 if major == 12 else ""
    return re.compile(rf"sm_?{major}(?:[0-9x](?![0-9])|(?![0-9])){aliases}", re.I)


def path_names(path: str, c: CC, exact: bool = False) -> bool:
    """Does a folder or the file name of ``path`` name the capability (``exact``: see ``literal_names``)?"""
    return words(c.major, c.minor if exact else None).search(path) is not None


def classify(finding: Finding, c: CC, fix: str | None, exact: bool = False) -> str:
    """The class of ``finding`` for the capability ``c``; ``fix``: the fix that covers it, or None;
    ``exact``: ``c`` has the major of the cc it should behave like (see ``literal_names``)."""
    if fix:
        return COVERED
    if finding.names_cc or path_names(finding.path, c, exact):
        return AWARE
    return UNAWARE
