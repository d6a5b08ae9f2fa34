"""``patchkit kernels [PATH... | --python EXE] [--to-cc CC|auto]``: what compiled CUDA code the
shared objects carry, and which GPUs can run it.

Each file's fat binaries are read from their headers (``patchkit.kernels.fatbin``): its SASS
architectures and PTX versions, counted once each as ``cuobjdump --list-elf`` / ``--list-ptx``
name them.  With GPUs (``--to-cc``, or the GPUs ``nvidia-smi`` reports, as doctor reads them)
each file gets a verdict by NVIDIA's rules (``kernels.compat``): runs (SASS for the GPU),
runs after a JIT (PTX only), no code for these GPUs, or cannot tell (and why).  With ``--python``
the files are those of every installed distribution whose RECORD lists a shared object with CUDA
code (``kernels.installed``), judged with ``known-kernels.toml`` (when each is loaded), and the
libraries that compile their kernels at the first start (FlashInfer, DeepGEMM, Triton) are judged
from their sources and the compiler they would call (``judge.jit``).  doctor and diagnose use
the same judgement (``judge.kernels.installed_code``).  Nothing is loaded or run but a
compiler's ``--version`` and ``--help``.

Exit 0 when every file was read and (with GPUs) runs on them or cannot be told, 1 when a file
has no code for a GPU or cannot be read, 2 for bad input; what a JIT library can build is said,
not counted.
Returns a ``KernelsResult`` (``render/kernels.py`` says it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.cc import AUTO, CC, AutoCC
from patchkit.errors import OK, PROBLEMS, BadInput
from patchkit.judge.kernels import DistributionHere, FileHere, installed_code, judge
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.judge.jit import JitHere

MAX_FILES = 100_000  # shared objects under one PATH folder


def _gpus(to_cc: list[CC | AutoCC], note: list[str]) -> tuple[list[CC], str | None]:
    """The compute capabilities to judge for: ``--to-cc`` values, or ``auto`` / nothing: the GPUs
    of nvidia-smi (nothing: only when it is on PATH and answers; else no verdict, said in ``note``)."""
    given = [c.gpu() for c in to_cc or () if c is not AUTO]
    if given:
        return sorted(set(given), key=CC.pair), "--to-cc"
    from patchkit.gpus.smi import machine

    if not to_cc and shutil.which("nvidia-smi") is None:
        note.append("no verdict: nvidia-smi is not on PATH (give --to-cc 12.0 to judge for a GPU)")
        return [], None
    try:
        m = machine()
    except BadInput as exc:
        if to_cc:
            raise
        note.append(f"no verdict: {exc}")
        return [], None
    names: dict[str, int] = {}
    for g in m.gpus:
        names[g.name] = names.get(g.name, 0) + 1
    return m.ccs(), f"nvidia-smi: {', '.join(f'{n} x {name}' for name, n in names.items())}"


def _paths(given: list[Path]) -> list[tuple[str, str]]:
    """(path to read, path to show) of each PATH: a file as it is, a folder's shared objects
    (``*.so``, ``*.so.N``; symlinks not followed), sorted."""
    from patchkit.kernels.installed import SHARED

    found: list[tuple[str, str]] = []
    for path in given:
        if path.is_dir():
            inside = []
            for root, dirs, names in os.walk(path):
                dirs.sort()
                inside += [os.path.join(root, n) for n in names if SHARED.search(n) and not os.path.islink(os.path.join(root, n))]
                if len(inside) > MAX_FILES:
                    raise BadInput(str(path), f"more than {MAX_FILES} shared objects below it: name a smaller folder")
            found += [(p, p) for p in sorted(inside)]
        elif os.path.lexists(path):
            found.append((str(path), str(path)))
        else:
            raise BadInput(str(path), "no such file or directory")
    return found


class KernelsResult(Value):
    """The shared objects read and, with GPUs, judged for them."""

    ccs: tuple[CC, ...]  # the GPUs' compute capabilities, lowest first (none: no verdict)
    source: str | None  # where they come from: "--to-cc", "nvidia-smi: 8 x ..."
    note: tuple[str, ...]  # why there is no verdict
    exe: Path | None  # --python: the interpreter whose distributions were read
    found: tuple[DistributionHere, ...]  # --python: one per distribution with CUDA code
    files: tuple[FileHere, ...]  # PATH: one per file
    jit: tuple[JitHere, ...] = ()  # --python: one per JIT library installed

    @property
    def failing(self) -> int:
        """The files that have no code for a GPU they are loaded on, or cannot be read.  A JIT library
        that cannot build for a GPU is said, not counted: whether a server calls it there is its
        caller's business (vLLM 0.20.2 bundles a DeepGEMM without SM12x kernels and calls it on 9.0 and
        10.x only), which this command does not judge."""
        if self.exe is not None:
            return sum(len(d.failing()) for d in self.found)
        return sum(bool(f.missing or f.binary.problem) for f in self.files)

    @property
    def exit_code(self) -> int:
        return PROBLEMS if self.failing else OK


def kernels(paths: list[Path], python: str | None, to_cc: list[CC | AutoCC]) -> KernelsResult:
    """``paths`` (files or folders) or, with ``python``, every distribution installed for it."""
    note: list[str] = []
    ccs, source = _gpus(to_cc, note)
    if python is not None:
        from patchkit.judge.jit import jit_here
        from patchkit.kernels.jit import jit_installs
        from patchkit.targets.interpreter import interpreter, site_packages_of

        exe = interpreter(python)
        sites = site_packages_of(exe)
        jit = jit_here(jit_installs(sites, dict(os.environ)), ccs)
        return KernelsResult(tuple(ccs), source, tuple(note), exe, tuple(installed_code(sites, ccs)), (), tuple(jit))
    return KernelsResult(tuple(ccs), source, tuple(note), None, (), tuple(judge(p, shown, ccs) for p, shown in _paths(paths)))
