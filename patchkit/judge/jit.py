"""Whether the libraries that compile their kernels at the first start (FlashInfer, DeepGEMM,
Triton) can build them for a GPU: what their installed sources admit for its compute capability,
and whether the compiler they would call knows the target (``kernels/jit.py`` reads both).
Values only, one ``JitFit`` per library and GPU, each with its reason code: ``render/kernels.py``
says them (``kernels`` and doctor's compiled-code section), and a caller can act on them (which
compiler lacks which target; which library has no sources for a major).

Per library:

- FlashInfer: the target ``CompilationContext`` builds for the cc with this nvcc (``sm_120f`` /
  ``sm_121a`` from 0.6.8, ``sm_120f`` for both in 0.6.7, ``sm_120a`` / ``sm_121a`` before; 0.7.4
  ``sm_120a`` for 12.0 with nvcc 12.8), then nvcc: present, of a release the form takes (else
  FlashInfer raises, "SM 12.x requires CUDA >= 12.9"), knowing the target; modules whose ``supported_major_versions`` leave the major
  out are named (``SOME``).
- DeepGEMM: kernel templates for the cc's major (``impls/sm120_*.cuh`` for 12.x), and an nvcc.
- Triton: ``sm_<cc>a`` (from 9.0 on) known to the ptxas it would call (``ptxas-blackwell`` from 10.0
  on in Triton 3.6+).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.cc import CC
from patchkit.kernels.jit import DEEPGEMM, Compiler, DeepGemmSources, FlashInferSources, JitInstall
from patchkit.types import StrEnum
from patchkit.values import Value

if TYPE_CHECKING:
    from collections.abc import Iterable


class JitVerdict(StrEnum):
    """What a library can do for a GPU (a member is its word in --json)."""

    BUILDS = "builds"  # its sources admit the cc and its compiler knows the target
    SOME = "some"  # FlashInfer: builds, but some of its modules leave the major out
    REFUSES = "refuses"  # its sources hold nothing for the cc
    COMPILER_LACKS = "compiler-lacks"  # its compiler does not know the target (or is too old for its sources)
    NO_COMPILER = "no-compiler"  # no compiler found where it looks
    UNKNOWN = "unknown"  # its sources are in no form patchkit knows, or its compiler could not be asked


class JitWhy(StrEnum):
    """Why a library gets its verdict (a JitFit's ``why``)."""

    NO_IMPLS = "no-impls"  # DeepGEMM: no impls/sm<major>0_*.cuh
    UNKNOWN_FORM = "unknown-form"  # FlashInfer: compilation_context.py in no form patchkit knows
    TOO_OLD = "too-old"  # FlashInfer: nvcc older than its form needs
    NOT_A_TARGET = "not-a-target"  # the compiler's --help does not list the target
    NOT_ASKED = "not-asked"  # the compiler could not be asked (Compiler.problem)
    MODULES_LEAVE_OUT = "modules-leave-out"  # FlashInfer: modules whose supported majors leave this one out


BUILDS, SOME, REFUSES, COMPILER_LACKS, NO_COMPILER, UNKNOWN = JitVerdict
NO_IMPLS, UNKNOWN_FORM, TOO_OLD, NOT_A_TARGET, NOT_ASKED, MODULES_LEAVE_OUT = JitWhy
FAILING = (REFUSES, COMPILER_LACKS, NO_COMPILER)


class JitFit(Value):
    """What one GPU of ``cc`` gets from a JIT library."""

    cc: CC
    verdict: JitVerdict
    target: str | None  # the sm_ target it would build ("sm_121a"); None: not known
    compiler: Compiler  # the compiler it would call for this cc
    why: JitWhy | None
    names: tuple[str, ...] = ()  # MODULES_LEAVE_OUT: the module generators; NO_IMPLS: the majors it has



class JitHere(Value):
    """A JIT library installed for ``--python``, judged for the GPUs."""

    install: JitInstall
    fits: tuple[JitFit, ...]

    @property
    def label(self) -> str:
        i = self.install
        return f"{i.distribution} {i.version}" if i.kind != DEEPGEMM or i.distribution in ("deep-gemm", "deep_gemm") \
            else f"DeepGEMM bundled in {i.distribution} {i.version}"

    def failing(self) -> list[JitFit]:
        return [f for f in self.fits if f.verdict in FAILING]



def worst(fits: Iterable[JitFit]) -> JitVerdict | None:
    order = (NO_COMPILER, REFUSES, COMPILER_LACKS, UNKNOWN, SOME, BUILDS)
    return min((f.verdict for f in fits), key=order.index, default=None)


def _release(text: str | None) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")) if text else ()


def _compiled(cc: CC, target: str, compiler: Compiler, done: JitVerdict = BUILDS, names: tuple[str, ...] = (),
              why: JitWhy | None = None) -> JitFit:
    """The compiler's part: found, asked, knowing ``target``."""
    if not compiler.found:
        return JitFit(cc, NO_COMPILER, target, compiler, None)
    if compiler.problem or compiler.targets is None:
        return JitFit(cc, UNKNOWN, target, compiler, NOT_ASKED)
    if not compiler.knows(target):
        return JitFit(cc, COMPILER_LACKS, target, compiler, NOT_A_TARGET)
    return JitFit(cc, done, target, compiler, why, names)


def flashinfer_fit(s: FlashInferSources, nvcc: Compiler, cc: CC) -> JitFit:
    if s.form is None:
        return JitFit(cc, UNKNOWN, None, nvcc, UNKNOWN_FORM)
    major, minor = cc.pair()
    if major != 12:
        return _compiled(cc, f"sm_{major}{minor}{'a' if major >= 9 else ''}", nvcc)
    if cc.pair() not in s.form.targets:  # a 12.x GPU other than 12.0 and 12.1
        return JitFit(cc, UNKNOWN, None, nvcc, UNKNOWN_FORM)
    options, raises = s.form.targets[cc.pair()]
    known = nvcc.found and nvcc.release
    target = next((t for needs, t in options if not (known and needs) or _release(nvcc.release) >= _release(needs)), None)
    if target is None:  # nvcc older than every target of this form needs: FlashInfer raises
        needs, oldest = options[-1]
        assert needs is not None and raises is not None  # an option needing no release is always taken; a form with a need raises
        return JitFit(cc, COMPILER_LACKS, oldest, nvcc, TOO_OLD, (needs, raises))
    if s.refusing:
        return _compiled(cc, target, nvcc, SOME, s.refusing, MODULES_LEAVE_OUT)
    return _compiled(cc, target, nvcc)


def deepgemm_fit(s: DeepGemmSources, nvcc: Compiler, cc: CC) -> JitFit:
    if cc.major not in s.impls:
        return JitFit(cc, REFUSES, None, nvcc, NO_IMPLS, tuple(f"sm{m}0" for m in sorted(s.impls)))
    if not nvcc.found:
        return JitFit(cc, NO_COMPILER, None, nvcc, None)
    return JitFit(cc, BUILDS, None, nvcc, None, tuple(s.impls[cc.major]))


def triton_fit(compilers: tuple[Compiler, ...], cc: CC) -> JitFit:
    arch = cc.sm()
    target = f"sm_{arch}{'a' if arch >= 90 else ''}"
    tools = {c.tool: c for c in compilers}
    ptxas = tools["ptxas-blackwell"] if arch >= 100 and "ptxas-blackwell" in tools else tools["ptxas"]
    return _compiled(cc, target, ptxas)


def _fit(install: JitInstall, cc: CC) -> JitFit:
    """What a GPU of ``cc`` gets from ``install``, judged by its kind of sources."""
    s, compilers = install.sources, install.compilers
    if isinstance(s, FlashInferSources):
        return flashinfer_fit(s, compilers[0], cc)
    if isinstance(s, DeepGemmSources):
        return deepgemm_fit(s, compilers[0], cc)
    return triton_fit(compilers, cc)


def jit_here(installs: list[JitInstall], ccs: list[CC]) -> list[JitHere]:
    return [JitHere(i, tuple(_fit(i, cc) for cc in ccs)) for i in installs]
