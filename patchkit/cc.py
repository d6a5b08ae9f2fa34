"""A compute capability: one type, parsed once where it comes in.

Every cc option of every command (``--to-cc``, ``--from-cc``, scan's ``--cc``) reads its value
with ``CC.parse``, whatever the user writes of:

- ``12``: a major alone, the GPUs of 12.0 (SGLang's and FlashInfer's tables key by it);
- ``12.0``, ``12.1``: as nvidia-smi's ``compute_cap`` prints it;
- ``sm_120``, ``sm_120a``, ``sm_121a``, ``sm_100f`` (also without the ``_``): as nvcc and
  cuobjdump name an architecture, its feature set (``a``: arch-specific, ``f``: family) kept.

A project's own spelling of a cc is the project's business, not the user's: ``key(style)``
gives it (``KeyStyle.MAJOR``: 12 for both 12.0 and 12.1; ``DOTTED``: "12.0", "12.1"), ``of`` reads one
back.  ``AUTO`` (``--to-cc auto``: this machine's GPUs, from nvidia-smi) is defined here once.

A cc that no NVIDIA GPU has (``13``, ``12.5``) is refused by the parser, in the one message
``NOT_ONE`` says, so each command refuses it in the same words.

Ground floor: the standard library only.
"""

from __future__ import annotations

import enum
import re

from patchkit.match import Pattern
from patchkit.values import Record

# The compute capabilities of the GPUs NVIDIA has shipped that CUDA 12 and 13 still build for, from
# the CUDA C++ Programming Guide ("Compute Capabilities", the per-capability feature and
# technical-specification tables) and developer.nvidia.com/cuda-gpus: Kepler 3.0 3.2 3.5 3.7,
# Maxwell 5.0 5.2 5.3, Pascal 6.0 6.1 6.2, Volta 7.0 7.2, Turing 7.5, Ampere 8.0 8.6 8.7 8.8,
# Ada 8.9, Hopper 9.0, Blackwell 10.0 (B200) 10.1 (Thor until CUDA 13 renamed it) 10.3 (B300)
# 11.0 (Thor) 12.0 (RTX PRO 6000, RTX 50) 12.1 (GB10, DGX Spark).
KNOWN: tuple[tuple[int, int], ...] = (
    (3, 0), (3, 2), (3, 5), (3, 7), (5, 0), (5, 2), (5, 3), (6, 0), (6, 1), (6, 2), (7, 0), (7, 2), (7, 5),
    (8, 0), (8, 6), (8, 7), (8, 8), (8, 9), (9, 0), (10, 0), (10, 1), (10, 3), (11, 0), (12, 0), (12, 1),
)



class KeyStyle(str, enum.Enum):
    """How a project keys its tables by cc (projects.toml's ``key_style``); a member is its word."""

    MAJOR = "major"  # by major: 12
    DOTTED = "major.minor"  # by "X.Y": "12.0", "12.1"

    def __str__(self) -> str:
        return self.value


MAJOR, DOTTED = KeyStyle.MAJOR, KeyStyle.DOTTED

Key = int | str  # a cc as a project's source writes it: 12 (KeyStyle.MAJOR) or "12.0" (KeyStyle.DOTTED)


class AutoCC(enum.Enum):
    """``--to-cc auto``: the ccs of this machine's GPUs, from nvidia-smi (``judge.auto``)."""

    AUTO = "auto"

    def __str__(self) -> str:
        return self.value


AUTO = AutoCC.AUTO

_WRITTEN = Pattern(r"([1-9][0-9]?)(?:\.([0-9]))?", re.ASCII)  # 12, 12.0, 12.1
_ARCH = Pattern(r"sm_?([1-9][0-9]?)([0-9])([af]?)", re.ASCII | re.IGNORECASE)  # sm_120, sm_121a, sm100, sm_100f


def not_one(shown: str) -> str:
    """The one message for a value that is no cc of an NVIDIA GPU (``shown``: as written)."""
    known = " ".join(f"{major}.{minor}" for major, minor in KNOWN)
    return f"{shown!r} is not the compute capability of an NVIDIA GPU: NVIDIA's are {known}, written like 12.1, 12 (for 12.0) or sm_121a"


def must_differ(from_cc: CC, to_cc: CC, to_opt: str = "--to-cc") -> str:
    """The one message for a pair that copies a cc onto itself."""
    return f"{to_opt} must differ from --from-cc (--from-cc {from_cc}, {to_opt} {to_cc})"


class CC(Record):
    """A GPU's compute capability: ``CC(12, 1)``.  Two are equal when major and minor are: 12,
    12.0 and sm_120a are one cc, written three ways."""

    major: int
    minor: int = 0
    suffix: str = ""  # sm_120a's "a", sm_100f's "f": the code's feature set, not another GPU
    dotted: bool = True  # the minor was written (12.0, sm_120); False for 12

    def __eq__(self, other: object) -> bool:
        return self.pair() == other.pair() if isinstance(other, CC) else NotImplemented

    def __ne__(self, other: object) -> bool:
        return self.pair() != other.pair() if isinstance(other, CC) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.pair())

    @classmethod
    def parse(cls, text: str) -> CC:
        """``12`` -> CC(12, 0) (a major alone), ``12.1`` -> CC(12, 1), ``sm_121a`` -> CC(12, 1, "a").
        ValueError, in ``not_one``'s words, for anything else, a cc no NVIDIA GPU has included."""
        shown = text if len(text) <= 40 else text[:40] + "..."
        written = text.strip()
        m = _WRITTEN.fullmatch(written)
        if m is not None:
            cc = cls(int(m.group(1)), int(m.group(2) or 0), dotted=m.group(2) is not None)
        else:
            m = _ARCH.fullmatch(written)
            if m is None:
                raise ValueError(not_one(shown))
            cc = cls(int(m.group(1)), int(m.group(2)), m.group(3).lower())
        if not cc.known():
            raise ValueError(not_one(shown))
        return cc

    @classmethod
    def of(cls, key: Key) -> CC:
        """A cc as a project's source or patchkit's own records write it (a table key, a
        state's pair): 12 -> CC(12, 0) (a major alone), ``"12.1"`` -> CC(12, 1).  Read back, not
        checked against ``KNOWN``: what a release names is its business.  ValueError for
        anything else (``sm120``, ``12a``, True)."""
        m = _WRITTEN.fullmatch(key.strip()) if isinstance(key, str) else None
        if m is not None:
            return cls(int(m.group(1)), int(m.group(2) or 0), dotted=m.group(2) is not None)
        if isinstance(key, int) and not isinstance(key, bool) and key >= 0:
            return cls(key, 0, dotted=False)
        raise ValueError(f"{key!r} is not a compute capability such as 12 or 12.0")

    def known(self) -> bool:
        """Whether an NVIDIA GPU has it (``KNOWN``); a major alone, when one of that major does."""
        return self.pair() in KNOWN if self.dotted else any(major == self.major for major, _ in KNOWN)

    def pair(self) -> tuple[int, int]:
        """``(12, 1)``: as nvidia-smi's GPUs and NVIDIA's compatibility rules compare them."""
        return self.major, self.minor

    def key(self, style: KeyStyle) -> Key:
        """The cc as a project of ``style`` keys it: 12 (``MAJOR``: 12.0 and 12.1 alike) or
        ``"12.1"`` (``DOTTED``)."""
        if style is KeyStyle.MAJOR:
            return self.major
        if style is KeyStyle.DOTTED:
            return f"{self.major}.{self.minor}"
        raise ValueError(f"{style!r} is not a key style ({', '.join(KeyStyle)})")

    def smi_text(self) -> str:
        """``12.1``, ``12.0``: as nvidia-smi's ``compute_cap`` prints it, the minor always written."""
        return f"{self.major}.{self.minor}"

    def gpu(self) -> CC:
        """The GPU's cc alone: ``sm_121a`` and ``12`` as ``12.1`` and ``12.0`` (no feature set, the minor written)."""
        return CC(self.major, self.minor)

    def sm(self) -> int:
        """``120``: the architecture number, as in ``get_device_sm() == 120`` and ``sm_120``."""
        return self.major * 10 + self.minor

    def arch(self) -> str:
        """``sm_121a``: as nvcc and cuobjdump name it."""
        return f"sm_{self.sm()}{self.suffix}"

    def __str__(self) -> str:
        """As the user wrote it, tidied: ``12``, ``12.1`` or ``sm_121a``."""
        if self.suffix:
            return self.arch()
        return f"{self.major}.{self.minor}" if self.dotted else str(self.major)


SM12X = tuple(CC(major, minor) for major, minor in KNOWN if major == 12)  # the GPUs the fixes are for: 12.0, 12.1
