"""Platform flags: names that say which GPU generation a device is, and what each one holds for.

A *platform flag* is a name spelled ``is_<arch>[_or_<arch>...][_<suffix>]`` (leading
underscores allowed, any case), reached as a name (``_is_sm100_supported``), an attribute
(``get_platform().is_sm100``) or a call (``is_sm100_supported()``,
``is_sm100a_supported(device)``).  ``<suffix>`` is ``supported``, ``device``, ``gpu`` or
``with_cuda_X_Y``.  ``<arch>`` is one of:

``smNN0`` / ``smNN``   (``sm100``, ``sm_90``, ``sm100a``, ``sm100f``): a minor of 0 stands for the
                       whole major, as SGLang's ``is_sm100_supported`` / ``is_sm120_supported``
                       (``device_capability_majors=[10]`` / ``[12]``, 0.5.9 and 0.5.23) and the
                       ``get_platform().is_sm100`` / ``.is_sm120`` that 0.5.23 maps to them;
                       FlashInfer's ``is_sm100a_supported`` is ``major == 10`` too;
``smNNd``, d > 0       (``sm103``, ``sm121``): that capability exactly, (10, 3), (12, 1);
``smNNx``              (``sm10x``, ``sm12x``): the major;
``hopper``             major 9;
``blackwell``          majors 10, 11 and 12: SGLang's ``is_blackwell_supported = is_blackwell``
                       is ``device_capability_majors=[10, 11, 12]`` in 0.5.9 and in 0.5.23 (and
                       ``get_platform().is_blackwell`` maps to it), so a Blackwell flag holds
                       for SM120 as for SM100 and never excludes it.

Anything else is no flag: ranges (``is_sm100_or_newer``, ``is_sm90_plus``), kernels and
configurations (``is_sm100_kernel``, ``is_sm90_template``), build targets (FlashInfer's
``has_sm100``: what is compiled, not what runs), choices (``use_sm100_kernel``).  Two
known inexact readings, both only for an "X.Y" cc with a minor: SGLang 0.5.23's
``is_sm120()`` and FlashInfer's ``is_sm120a_supported`` are (12, 0) exactly, not major 12.
"""

from __future__ import annotations

import re
from functools import lru_cache

from patchkit.cc import CC
from patchkit.values import Record

_ARCH = r"(?:sm_?[0-9]{1,3}[afx]?|hopper|blackwell)"
_FLAG = re.compile(
    rf"_*is_(?P<archs>{_ARCH}(?:_or_{_ARCH})*)(?:_(?:supported|device|gpu|with_cuda_[0-9]+(?:_[0-9]+)?))?", re.I
)
_SM = re.compile(r"sm_?([0-9]{1,3})([afx]?)", re.I)
_BLACKWELL = frozenset({10, 11, 12})


class Flag(Record):
    name: str
    majors: frozenset[int]  # the majors it holds for
    exact: frozenset[tuple[int, int]]  # the (major, minor) it holds for

    def holds(self, c: CC) -> bool:
        return c.major in self.majors or (c.major, c.minor) in self.exact


def _arch(text: str) -> tuple[set[int], set[tuple[int, int]]] | None:
    text = text.lower()
    if text == "hopper":
        return {9}, set()
    if text == "blackwell":
        return set(_BLACKWELL), set()
    digits, suffix = _SM.fullmatch(text).groups()  # type: ignore[union-attr]  # _FLAG let only these through
    if suffix == "x":
        major = int(digits)
        return ({major}, set()) if 7 <= major <= 13 and len(digits) <= 2 else None
    if len(digits) < 2:
        return None
    major, minor = int(digits[:-1]), int(digits[-1])
    if not 7 <= major <= 13:
        return None
    return ({major}, set()) if minor == 0 else (set(), {(major, minor)})


@lru_cache(maxsize=4096)
def flag(name: str) -> Flag | None:
    """The platform flag ``name`` is (``is_sm100_supported``, ``_is_sm10x``), or None."""
    m = _FLAG.fullmatch(name)
    if m is None:
        return None
    majors: set[int] = set()
    exact: set[tuple[int, int]] = set()
    for part in re.split(r"_or_", m.group("archs"), flags=re.I):
        read = _arch(part)
        if read is None:
            return None
        majors |= read[0]
        exact |= read[1]
    return Flag(name, frozenset(majors), frozenset(exact))


def differs(name: str, a: CC, b: CC) -> bool:
    """Is ``name`` a flag that holds for one of the two capabilities and not the other?"""
    f = flag(name)
    return f is not None and f.holds(a) != f.holds(b)
