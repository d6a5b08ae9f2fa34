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

A GPU runs a file when some entry the runtime loads runs on it: SASS of ``.nv_fatbin`` first
(the executable fat binary, the module the runtime registers), else its PTX after a JIT, else
the relocatable code of ``__nv_relfatbin`` after a JIT link: the runtime is handed those fat
binaries too (``crt/link.stub``: the ``__cudaPrelinkedFatbins`` of the wrapper it registers)
and links them at the first start when ``.nv_fatbin`` has nothing for the GPU.  On an H200 (9.0,
CUDA 13.0) a kernel whose ``.nv_fatbin`` held sm_80 alone ran from a relocatable sm_90 cubin and
from relocatable compute_80 or compute_90 PTX, and failed with sm_80 alone ("no kernel image is
available") and with sm_80 beside LTO IR alone ("named symbol not found"): NVVM IR (``lto_XY``)
is never counted (``near_misses`` names it).  The architecture number splits as cuobjdump and
nvcc spell it: ``sm_120`` is 12.0, ``sm_103`` 10.3, ``sm_121`` 12.1.

A verdict of no code can be unknowable: ``UNKNOWN`` with its reason (``NOT_REGISTERED``: the
file hands the runtime no fat binary, so its kernels are loaded another way; ``NO_KERNELS``: its
cubins hold no function), decided by ``judge/kernels.py`` from what the file shows.
"""

from __future__ import annotations

from collections.abc import Iterable

from patchkit.cc import CC
from patchkit.kernels.fatbin import ELF, NVVM_IR, PTX, RELOCATABLE, FatbinEntry
from patchkit.types import StrEnum
from patchkit.values import Record


class KernelVerdict(StrEnum):
    """What a GPU gets from a file (a member is its word in --json)."""

    SASS = "sass"  # its own code
    JIT = "jit"  # PTX after a JIT, or relocatable code linked at the first start
    NONE = "none"  # nothing
    UNKNOWN = "unknown"  # what cannot be known (its ``why``)


class KernelWhy(StrEnum):
    """Why a file gets its verdict (a Fit's ``why``)."""

    NOT_REGISTERED = "not-registered"  # UNKNOWN: no .nvFatBinSegment, the runtime is handed none of its fat binaries
    NO_KERNELS = "no-kernels"  # UNKNOWN: its cubins hold no function, a module no GPU can be missing a kernel of
    LINKED = "linked"  # JIT: relocatable code the runtime links at the first start


SASS, JIT, NONE, UNKNOWN = KernelVerdict
NOT_REGISTERED, NO_KERNELS, LINKED = KernelWhy


def cc_of(arch: int) -> CC:
    """``120`` -> CC(12, 0); ``103`` -> CC(10, 3)."""
    return CC(*divmod(arch, 10))


def runs_on(entry: FatbinEntry, cc: CC) -> bool:
    """Whether the code of ``entry`` (SASS as it is, PTX after a JIT) can run on a GPU of ``cc``,
    were it loaded (``FatbinEntry.loads`` says whether it is)."""
    if entry.kind not in (PTX, ELF):
        return False
    code = cc_of(entry.arch)
    if entry.suffix == "a":
        return cc.pair() == code.pair()
    if entry.suffix == "f" or entry.kind == ELF:
        return cc.major == code.major and cc.minor >= code.minor
    return entry.kind == PTX and cc.pair() >= code.pair()


class Fit(Record):
    """What one GPU of ``cc`` gets from a file."""

    cc: CC
    runs: KernelVerdict
    by: tuple[str, ...]  # the architectures that serve it (SASS ones for SASS, PTX ones for JIT)
    why: KernelWhy | None = None  # UNKNOWN's reason (NOT_REGISTERED); JIT's LINKED for relocatable code

    def cc_text(self) -> str:
        return self.cc.smi_text()



def fit(entries: Iterable[FatbinEntry], cc: CC) -> Fit:
    """What a GPU of ``cc`` runs of ``entries``: SASS, else PTX of ``.nv_fatbin``, else relocatable
    code (SASS or PTX) of ``__nv_relfatbin``, linked at the first start."""
    entries = list(entries)
    loaded = [e for e in entries if e.loads]
    relocatable = [e for e in entries if e.section == RELOCATABLE and e.kind in (PTX, ELF)]
    for pool, kinds, runs, why in ((loaded, (ELF,), SASS, None), (loaded, (PTX,), JIT, None), (relocatable, (ELF, PTX), JIT, LINKED)):
        by = sorted({(e.kind != ELF, e.arch, e.suffix): e.name for e in pool if e.kind in kinds and runs_on(e, cc)}.items())
        if by:
            return Fit(cc, runs, tuple(name for _, name in by), why)
    return Fit(cc, NONE, ())


def worst(fits: Iterable[Fit]) -> KernelVerdict:
    """The verdict of a file for several GPUs: the worst of them."""
    order = (NONE, UNKNOWN, JIT, SASS)
    return min((f.runs for f in fits), key=order.index, default=SASS)


class Miss(Record):
    """Code of a GPU's own major that does not run on it: ``name`` (``sm_120a``), its ``cc`` and
    ``why``: ``EXACT`` (runs on that cc only), ``LATER`` (needs that cc or later), ``LTO`` (LTO IR,
    which the runtime does not link)."""

    name: str
    cc: CC
    why: MissWhy


class MissWhy(StrEnum):
    """Why code of a GPU's own major does not run on it."""

    EXACT = "exact"  # built for that cc only (an ``a`` suffix)
    LATER = "later"  # needs that cc or a later one
    LTO = "lto"  # LTO IR, which the runtime does not link


EXACT, LATER, LTO = MissWhy.EXACT, MissWhy.LATER, MissWhy.LTO


def near_misses(entries: Iterable[FatbinEntry], cc: CC) -> list[Miss]:
    """Why the code of ``cc``'s own major does not run on it (``render.kernels.miss_words``: ``sm_120a
    runs on 12.0 only``, ``sm_121 needs 12.1 or later``, ``lto_120 is LTO IR, which the runtime does not link``)."""
    said: dict[str, Miss] = {}
    for e in entries:
        major, minor = cc_of(e.arch).pair()
        if major != cc.major:
            continue
        if e.kind == NVVM_IR and minor <= cc.minor:
            said.setdefault(e.name, Miss(e.name, CC(major, minor), LTO))
        elif e.kind in (PTX, ELF) and (e.loads or e.section == RELOCATABLE) and not runs_on(e, cc):
            said[e.name] = Miss(e.name, CC(major, minor), EXACT if e.suffix == "a" else LATER)
    return [said[name] for name in sorted(said)]
