"""Which GPUs the code of a fat binary entry runs on: NVIDIA's compatibility rules, pure.

The rules, as NVIDIA documents them:

- a cubin (SASS) for ``sm_XY`` runs on every GPU of compute capability X.Z with Z >= Y, and on
  no other major ("binary compatibility is guaranteed from one minor revision to the next one,
  but not from one minor revision to the previous one or across major revisions": CUDA C++
  Programming Guide, "Binary Compatibility");
- an arch-specific cubin (``sm_XYa``, the architecture-specific feature set) runs on X.Y only;
  a family-specific one (``sm_XYf``) on the GPUs of family X at or above Y (``sm_100f``: 10.0
  and 10.3; ``sm_120f``: 12.0 and 12.1): CUDA Programming Guide, "Compute Capabilities",
  feature set compiler targets, and NVIDIA's "NVIDIA Blackwell and NVIDIA CUDA 12.9 Introduce
  Family-Specific Architecture Features" (developer.nvidia.com/blog, 2025);
- PTX for ``compute_XY`` is compiled by the driver (JIT, at the first load: a slower start,
  cached afterwards) for any GPU of compute capability X.Y or later, of any major ("PTX
  Compatibility"); arch-specific PTX (``compute_XYa``) only for X.Y, family PTX
  (``compute_XYf``) only for the family X at or above Y.

A GPU runs a file when some entry runs on it: SASS first, else PTX after a JIT.  The
architecture number splits as cuobjdump and nvcc spell it: ``sm_120`` is 12.0, ``sm_103``
10.3, ``sm_121`` 12.1.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from patchkit.kernels.fatbin import ELF, PTX, Entry

SASS, JIT, NONE = "sass", "jit", "none"  # what a GPU gets from a file: its own code, PTX after a JIT, nothing


def cc_of(arch: int) -> tuple[int, int]:
    """``120`` -> (12, 0); ``103`` -> (10, 3)."""
    return divmod(arch, 10)


def runs_on(entry: Entry, cc: tuple[int, int]) -> bool:
    """Whether the code of ``entry`` (SASS as it is, PTX after a JIT) can run on a GPU of ``cc``."""
    if entry.kind not in (PTX, ELF):
        return False
    major, minor = cc_of(entry.arch)
    if entry.suffix == "a":
        return cc == (major, minor)
    if entry.suffix == "f" or entry.kind == ELF:
        return cc[0] == major and cc[1] >= minor
    return entry.kind == PTX and cc >= (major, minor)


class Fit(NamedTuple):
    """What one GPU of ``cc`` gets from a file."""

    cc: tuple[int, int]
    runs: str  # SASS, JIT or NONE
    by: tuple[str, ...]  # the architectures that serve it (SASS ones for SASS, PTX ones for JIT)

    def cc_text(self) -> str:
        return f"{self.cc[0]}.{self.cc[1]}"

    def words(self) -> str:
        if self.runs == SASS:
            return f"runs on {self.cc_text()} ({', '.join(self.by)})"
        if self.runs == JIT:
            return f"runs on {self.cc_text()} after a JIT ({', '.join(self.by)}: the driver compiles it at the first start)"
        return f"no code for {self.cc_text()}"

    def to_json(self) -> dict:
        return {"cc": self.cc_text(), "runs": self.runs, "by": list(self.by)}


def fit(entries: Iterable[Entry], cc: tuple[int, int]) -> Fit:
    """What a GPU of ``cc`` runs of ``entries``."""
    entries = list(entries)
    for kind, runs in ((ELF, SASS), (PTX, JIT)):
        by = sorted({(e.arch, e.suffix): e.name for e in entries if e.kind == kind and runs_on(e, cc)}.items())
        if by:
            return Fit(cc, runs, tuple(name for _, name in by))
    return Fit(cc, NONE, ())


def worst(fits: Iterable[Fit]) -> str:
    """The verdict of a file for several GPUs: the worst of them."""
    order = (NONE, JIT, SASS)
    return min((f.runs for f in fits), key=order.index, default=SASS)


def near_misses(entries: Iterable[Entry], cc: tuple[int, int]) -> list[str]:
    """Why the code of ``cc``'s own major does not run on it: ``sm_120a runs on 12.0 only``,
    ``sm_121 needs 12.1 or later``."""
    said: dict[str, str] = {}
    for e in entries:
        major, minor = cc_of(e.arch)
        if e.kind not in (PTX, ELF) or major != cc[0] or runs_on(e, cc):
            continue
        said[e.name] = f"{e.name} runs on {major}.{minor} only" if e.suffix == "a" else f"{e.name} needs {major}.{minor} or later"
    return [said[name] for name in sorted(said)]
