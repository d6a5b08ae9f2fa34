"""``patchkit kernels [PATH... | --python EXE] [--to-cc CC|auto]``: what compiled CUDA code the
shared objects carry, and which GPUs can run it.

Each file's fat binaries are read from their headers (``patchkit.kernels.fatbin``): its SASS
architectures and PTX versions, counted once each as ``cuobjdump --list-elf`` / ``--list-ptx``
name them.  With GPUs (``--to-cc``, or the GPUs ``nvidia-smi`` reports, as doctor reads them)
each file gets a verdict by NVIDIA's rules (``kernels.compat``): runs (SASS for the GPU),
runs after a JIT (PTX only), or no code for these GPUs.  With ``--python`` the files are those
of every installed distribution whose RECORD lists a shared object with CUDA code
(``kernels.installed``), judged with ``known-kernels.toml`` (when each is loaded).  doctor and
diagnose use the same judgement (``installed_code``).  Nothing is loaded or run.

Exit 0 when every file was read and (with GPUs) runs on them, 1 when a file has no code for
a GPU or cannot be read, 2 for bad input.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NamedTuple

from patchkit.errors import OK, PROBLEMS, BadInput
from patchkit.fixes.kernels import KnownDistribution, KnownFile, known_kernels
from patchkit.kernels.compat import NONE, Fit, fit, near_misses, worst
from patchkit.kernels.fatbin import Binary, read_binary
from patchkit.kernels.installed import Distribution, distributions
from patchkit.report import Report
from patchkit.text import plural

MAX_FILES = 100_000  # shared objects under one PATH folder
AUTO = "auto"  # --to-cc auto: the GPUs of nvidia-smi


class FileHere(NamedTuple):
    """One shared object, read and judged for the GPUs ``ccs``."""

    shown: str  # relative to site-packages for an installed file, else as given
    binary: Binary
    known: KnownFile | None
    fits: tuple[Fit, ...]  # one per GPU compute capability, lowest first

    @property
    def loaded(self) -> bool:
        """Whether it is loaded on any of these GPUs (``only_on`` / ``not_on``)."""
        return self.known is None or not self.fits or any(self.known.loaded_on(f.cc) for f in self.fits)

    @property
    def missing(self) -> tuple[Fit, ...]:
        """The GPUs it is loaded on and has no code for."""
        if self.binary.problem or not self.binary.cuda:
            return ()
        return tuple(f for f in self.fits if f.runs == NONE and (self.known is None or self.known.loaded_on(f.cc)))

    def carries(self) -> str:
        b = self.binary
        sass, ptx = b.sass(), b.ptx()
        words = ", ".join(sass) if sass else "no SASS"
        return words + (f", PTX {', '.join(ptx)}" if ptx else "")

    def verdict(self) -> str:
        """The file's code against the GPUs, in words (or why it was not judged)."""
        b = self.binary
        if b.problem:
            return f"unreadable: {b.problem}" if b.elf else b.problem
        if not b.cuda:
            return "no CUDA code"
        words = [f.words() + (f" ({'; '.join(near_misses(b.entries, f.cc))})" if f.runs == NONE and near_misses(b.entries, f.cc) else "")
                 for f in self.fits]
        return self.carries() + (": " + "; ".join(words) if words else "")

    def to_json(self, dist: Distribution | None) -> dict:
        b = self.binary
        return {"path": self.shown, "file": b.path, "distribution": dist.name if dist else None,
                "version": dist.version if dist else None, "sass": b.sass(), "ptx": b.ptx(), "compressed": b.compressed(),
                "entries": len(b.entries), "cuda": b.cuda, "problem": b.problem,
                "what": self.known.what if self.known else None, "loaded": self.loaded if self.fits else None,
                "verdict": (None if b.problem or not b.cuda or not self.fits else worst(self.fits)),
                "gpus": [f.to_json() for f in self.fits]}


def judge(path: str, shown: str, ccs: list[tuple[int, int]], known: KnownFile | None = None) -> FileHere:
    binary = read_binary(path)
    return FileHere(shown, binary, known, tuple(fit(binary.entries, cc) for cc in ccs))


class DistributionHere(NamedTuple):
    """An installed distribution whose shared objects carry CUDA code, judged."""

    dist: Distribution
    known: KnownDistribution
    files: tuple[FileHere, ...]  # those with CUDA code, or unreadable
    without: int  # its shared objects without CUDA code

    @property
    def label(self) -> str:
        return f"{self.dist.name} {self.dist.version}"

    def failing(self) -> list[FileHere]:
        return [f for f in self.files if f.missing or f.binary.problem]


def installed_code(sites: list[Path], ccs: list[tuple[int, int]], only: str | None = None) -> list[DistributionHere]:
    """Every distribution in ``sites`` (or the one that installed the package folder ``only``)
    with CUDA code in its shared objects, or bare cubins, each file judged for ``ccs``."""
    kernels = known_kernels()
    found = []
    for dist in distributions(sites):
        if only is not None and not any(p.startswith(f"{only}/") for p in dist.shared):
            continue
        known = kernels.of(dist.name)
        files, without = [], 0
        for rel in dist.shared:
            here = judge(str(dist.site / rel), rel, ccs, known.file(rel))
            if here.binary.cuda or here.binary.problem and here.binary.elf:
                files.append(here)
            else:
                without += 1
        if files or dist.cubins or dist.problem:
            found.append(DistributionHere(dist, known, tuple(files), without))
    return found


def _gpus(to_cc, note: list[str]) -> tuple[list[tuple[int, int]], str | None]:
    """The compute capabilities to judge for: ``--to-cc`` values, or ``auto`` / nothing: the GPUs
    of nvidia-smi (nothing: only when it is on PATH and answers; else no verdict, said in ``note``)."""
    given = [c for c in to_cc or () if c != AUTO]
    if given:
        return sorted(set(given)), "--to-cc"
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


def kernels(paths: list[Path], python: str | None, to_cc) -> Report:
    """``paths`` (files or folders) or, with ``python``, every distribution installed for it."""
    note: list[str] = []
    ccs, source = _gpus(to_cc, note)
    report = Report()
    for_gpus = f" for {', '.join(f'{a}.{b}' for a, b in ccs)} ({source})" if ccs else ""
    documents: list[dict] = []
    failing = 0
    if python is not None:
        from patchkit.targets.environment import interpreter, site_packages_of

        exe = interpreter(python)
        found = installed_code(site_packages_of(exe), ccs)
        cuda = [d for d in found if d.files]
        report.add(f"{exe}: {plural(len(cuda), 'distribution')} with CUDA code{for_gpus}")
        for d in found:
            report.lines += distribution_lines(d, ccs, listing=True)
            documents += [f.to_json(d.dist) for f in d.files]
            failing += len(d.failing())
    else:
        files = [judge(p, shown, ccs) for p, shown in _paths(paths)]
        report.add(f"{plural(len(files), 'file')}{for_gpus}")
        for f in files:
            report.add(f"{f.shown}: {f.verdict()}")
        documents = [f.to_json(None) for f in files]
        failing = sum(bool(f.missing or f.binary.problem) for f in files)
    report.lines += note
    report.exit_code = PROBLEMS if failing else OK
    report.data = {"command": "kernels", "ok": not failing, "exit_code": report.exit_code,
                   "gpus": [f"{a}.{b}" for a, b in ccs] or None, "gpus_from": source, "note": note or None, "files": documents}
    return report


def distribution_lines(d: DistributionHere, ccs: list[tuple[int, int]], listing: bool) -> list[str]:
    """What kernels (``listing``: every file) and doctor (the files with no code for these GPUs,
    and what to do) say of one distribution."""
    lines = []
    counts = plural(len(d.files), "file") + " with CUDA code" + (f", {d.without} without" if d.without else "")
    cubins = f"; {plural(d.dist.cubins, 'bare .cubin file')}, not read (patchkit reads the fat binaries of shared objects)" if d.dist.cubins else ""
    failing = d.failing()
    if d.dist.problem:
        lines.append(f"  {d.label}: {d.dist.problem}")
    elif listing or not ccs:
        lines.append(f"  {d.label}: {counts}{cubins}")
    elif failing:
        lines.append(f"  {d.label}: {len(failing)} of {counts} cannot run here" + (f"; {d.known.always}" if d.known.always else "") + cubins)
    else:
        lines.append(f"  {d.label}: every file with CUDA code runs on {', '.join(f'{a}.{b}' for a, b in ccs)} ({counts}){cubins}")
    shown = d.files if listing else failing
    dos: list[str] = []
    for f in shown:
        what = f" ({f.known.what})" if f.known else ""
        lines.append(f"    {f.shown}: {f.verdict()}{what}" + ("" if f.loaded else " (not loaded on these GPUs)"))
        if not listing and f.missing:
            cc = f.missing[0].cc
            do = (f.known.do if f.known and f.known.do else d.known.do).format(cc=f"{cc[0]}.{cc[1]}", sm=f"sm_{cc[0]}{cc[1]}")
            if do not in dos:
                dos.append(do)
    lines += [f"    do: {do}" for do in dos]
    return lines
