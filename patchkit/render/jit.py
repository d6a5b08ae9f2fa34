"""What ``kernels`` and doctor say of the libraries that compile their kernels at the first start
(``judge.jit.JitHere``): per library the compiler it would call, then per GPU what its sources
admit and whether that compiler knows the target."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.judge.jit import (
    BUILDS,
    COMPILER_LACKS,
    MODULES_LEAVE_OUT,
    NO_COMPILER,
    NO_IMPLS,
    NOT_A_TARGET,
    NOT_ASKED,
    REFUSES,
    SOME,
    TOO_OLD,
    UNKNOWN,
    UNKNOWN_FORM,
    worst,
)
from patchkit.kernels.jit import DEEPGEMM, FLASHINFER, TRITON, DeepGemmSources, FlashInferSources, TritonSources
from patchkit.text import plural

if TYPE_CHECKING:
    from collections.abc import Sequence

    from patchkit.judge.jit import JitFit, JitHere
    from patchkit.kernels.jit import Compiler

SHOWN = 4  # module names shown before "and N more"


def heading(jit: Sequence[JitHere]) -> str:
    return (f"compiled at the first start (JIT), by what their sources admit and the compiler they call "
            f"(used only where a server calls them; not counted in the exit code): {plural(len(jit), 'library', 'libraries')}")


def compiler_words(c: Compiler) -> str:
    """``nvcc 13.0 (/usr/local/cuda/bin/nvcc, $CUDA_HOME)``."""
    if not c.found:
        return f"{c.tool}, none at {c.path} ({c.chosen_by})"
    return f"{c.tool}{' ' + c.release if c.release else ''} ({c.path}, {c.chosen_by})"


def _names(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:SHOWN])
    return shown + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def fit_words(j: JitHere, f: JitFit) -> str:
    """What one GPU gets from a JIT library (``judge.jit.JitFit``), in words."""
    cc, kind, s = f.cc.smi_text(), j.install.kind, j.install.sources
    c = f.compiler
    if f.verdict == BUILDS and kind == DEEPGEMM:
        return f"{cc}: builds, from impls/sm{f.cc.major}0_*.cuh ({plural(len(f.names), 'kernel template')})"
    if f.verdict == BUILDS:
        return f"{cc}: builds {f.target}"
    if f.verdict == SOME and f.why == MODULES_LEAVE_OUT and isinstance(s, FlashInferSources):  # FlashInfer's alone
        return (f"{cc}: builds {f.target}, but {len(f.names)} of its {s.modules} modules leave major "
                f"{f.cc.major} out of supported_major_versions ({_names(f.names)})")
    if f.verdict == REFUSES and f.why == NO_IMPLS:
        return (f"{cc}: nothing to build: its kernel templates are for {', '.join(f.names) or 'no GPU'} only "
                f"(include/deep_gemm/impls), so its APIs assert \"Unsupported architecture\" on {cc}")
    if f.verdict == COMPILER_LACKS and f.why == TOO_OLD:
        return (f"{cc}: cannot build {f.target}: it needs nvcc {f.names[0]} or later (else FlashInfer raises "
                f"\"{f.names[1]}\"), and nvcc is {c.release}")
    if f.verdict == COMPILER_LACKS and f.why == NOT_A_TARGET:
        other = ""
        if kind == TRITON:
            other = f"; Triton calls the ptxas ${'TRITON_PTXAS_BLACKWELL_PATH' if c.tool == 'ptxas-blackwell' else 'TRITON_PTXAS_PATH'} names instead"
        return f"{cc}: cannot build {f.target}: {c.tool} {c.release or ''} ({c.path}) does not know it{other}".replace("  ", " ")
    if f.verdict == NO_COMPILER:
        return f"{cc}: cannot build: no {c.tool} at {c.path}"
    if f.verdict == UNKNOWN and f.why == UNKNOWN_FORM:
        return f"{cc}: cannot tell: flashinfer/compilation_context.py is in no form patchkit knows"
    if f.verdict == UNKNOWN and f.why == NOT_ASKED:
        return f"{cc}: cannot tell: {c.tool} could not be asked ({c.problem or 'its --help lists no targets'})"
    return f"{cc}: {f.verdict}"


def jit_lines(j: JitHere) -> list[str]:
    """A JIT library's lines: what it is and which compiler it calls, then one line per GPU."""
    i, s = j.install, j.install.sources
    what = {FLASHINFER: "FlashInfer", DEEPGEMM: "DeepGEMM", TRITON: "Triton"}[i.kind]
    tools = "; ".join(compiler_words(c) for c in i.compilers)
    note = ""
    if isinstance(s, FlashInferSources) and s.arch_list:
        note = f"; FLASHINFER_CUDA_ARCH_LIST={s.arch_list} is set here: it builds for that list instead of the GPU"
    if isinstance(s, TritonSources) and s.blackwell:
        note = "; ptxas-blackwell for 10.0 and later"
    lines = [f"  {j.label}: {what} JIT, compiles with {tools}{note}"]
    return lines + [f"    {fit_words(j, f)}" for f in j.fits]


def fit_json(f: JitFit) -> dict[str, object]:
    """What one GPU gets from a JIT library (``judge.jit.JitFit``) in a --json document."""
    c = f.compiler
    return {"cc": f.cc.smi_text(), "verdict": f.verdict, "target": f.target, "why": f.why,
            "names": list(f.names), "compiler":
            {"tool": c.tool, "path": c.path, "chosen_by": c.chosen_by, "release": c.release,
             "found": c.found, "knows_target": c.knows(f.target) if f.target else None, "problem": c.problem}}


def jit_json(j: JitHere) -> dict[str, object]:
    """A JIT library judged (``judge.jit.JitHere``) in a --json document."""
    i, s = j.install, j.install.sources
    sources: dict[str, object] = {"where": str(s.where)}
    if isinstance(s, FlashInferSources):
        sources |= {"form": s.form.release if s.form else None, "modules": s.modules, "refusing_12": list(s.refusing),
                    "arch_list": s.arch_list}
    elif isinstance(s, DeepGemmSources):
        sources |= {"impls": {f"sm{major}0": len(names) for major, names in sorted(s.impls.items())}}
    else:
        sources |= {"ptxas_blackwell": s.blackwell}
    return {"library": i.kind, "distribution": i.distribution, "version": i.version, "sources": sources,
            "verdict": worst(j.fits), "gpus": [fit_json(f) for f in j.fits]}
