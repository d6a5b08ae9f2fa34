"""What ``patchkit scan`` reports: a ``Finding``, and its kinds.

``table``       a dict literal keyed by capability (ints 7..13, or "X.Y" strings with
                major 7..13; two keys or more, among them 9 or 10) that has the
                ``from_cc`` key and lacks the ``cc`` key;
``membership``  ``X in (9, 10)`` / ``not in`` with a tuple, list or set literal of
                capability values;
``equality``    ``X == 10``, ``X != (10, 0)``;
``comparison``  ``X < 11``, ``(major, minor) >= (10, 0)``, ``9 <= major < 11``;

where X looks like a capability (see ``patchkit.scan.gate_visitor``);

``platform-flag``  a test of platform flags (``get_platform().is_sm100``,
                ``_is_sm90_supported or _is_sm100_supported``, ``not is_sm10x()``; see
                ``patchkit.scan.flags`` and ``patchkit.scan.flag_gates``); its values are the
                flags' names;
``preprocessor``  a C/C++/CUDA ``#if``/``#elif`` on ``__CUDA_ARCH__`` (``#if __CUDA_ARCH__ <
                1200``; see ``patchkit.scan.preprocessor``); its values are the numbers
                ``__CUDA_ARCH__`` is compared with.

A gate is reported only when evaluating it with the capability equal to ``from_cc`` and
equal to ``cc`` gives different results (``patchkit.rewrite.capability`` says how they
compare).
"""

from __future__ import annotations

from patchkit.types import StrEnum
from patchkit.values import Record


class FindingKind(StrEnum):
    """What a finding is: a table keyed by cc, or a gate of one of five shapes."""

    TABLE = "table"
    MEMBERSHIP = "membership"
    EQUALITY = "equality"
    COMPARISON = "comparison"
    PLATFORM_FLAG = "platform-flag"
    PREPROCESSOR = "preprocessor"


TABLE, MEMBERSHIP, EQUALITY, COMPARISON = FindingKind.TABLE, FindingKind.MEMBERSHIP, FindingKind.EQUALITY, FindingKind.COMPARISON
PLATFORM_FLAG, PREPROCESSOR = FindingKind.PLATFORM_FLAG, FindingKind.PREPROCESSOR
KINDS = tuple(FindingKind)

SNIPPET_MAX = 160
Written = int | float | str | tuple[int, int]  # a capability literal as the source writes it; a flag's name


class Finding(Record):
    path: str  # relative to the scanned root, "/"-separated
    line: int
    kind: FindingKind
    snippet: str  # the code on one line (comments dropped), cut at SNIPPET_MAX
    values: tuple[Written, ...]  # table: its keys; gates: the capability literals compared with
    name: str | None  # table: the assigned name (Scope.qualify: "Class.NAME"), None inline; gates: the subject's code
    patchable: bool  # a table patchkit's rewriter patches: a registry name at module or class level
    names_cc: bool = False  # its statement names the cc: a literal, an sm120 word (``patchkit.scan.classify``)


def short(text: str) -> str:
    """``text`` cut at SNIPPET_MAX characters."""
    return text if len(text) <= SNIPPET_MAX else text[: SNIPPET_MAX - 3] + "..."
