"""The settings (``fixes/settings.py``) judged from what is installed for ``--python`` and the
environment given: values only, one ``SettingHere`` per setting whose project is installed and
whose GPUs are among those judged for; ``render/settings.py`` says them.

- Triton's ptxas: the installed Triton's release (its dist-info) picks the spelling; the ptxas that
  release calls for the GPU (the variable's, else the bundled one: ``ptxas-blackwell`` for 10.0 and
  later in 3.3.x and 3.6+, ``ptxas`` in 3.4/3.5) is asked ``--help`` (bounded, ``kernels/jit.ask``)
  whether it knows ``sm_<cc>a``, and the verdict is its answer; a ptxas that would do is looked for
  in the environment (``nvidia/cu13/bin/ptxas``, ``nvidia/cuda_nvcc/bin/ptxas``), ``$CUDA_HOME/bin``,
  PATH, and the bundled one.  A release newer than every spelling is read: the newest spelling whose
  ``marks`` its ``knobs.py`` and ``compiler.py`` hold is its own (``read_in``); where none is held,
  which ptxas it calls and which variable names it are not known: ``UNREAD``, with every ptxas it
  bundles asked, never "not needed" by assumption (docs/RELEASES.md).
- DeepGEMM: the ``deep_gemm`` the project loads (vLLM: the top-level one, else its bundled copy)
  without ``include/deep_gemm/impls/sm120_*.cuh``; SGLang only from the release whose probe the
  three APIs fool (0.5.21), vLLM only where ``support_deep_gemm`` admits the 12.x family.
- NCCL: ``nvidia-nccl-cu12``'s version against the first one without the PCIe fault, for GPUs
  linked by PCIe only (links not known: ``MAYBE``).
- vLLM's GB10 options: the installed release must hold each (its ``marks``); a flag is never
  "set" here (the server's command line is not seen).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.cc import CC
from patchkit.fixes.settings import Check, Setting, SettingKind, Spelling, read_settings
from patchkit.kernels.jit import Compiler, ask
from patchkit.types import StrEnum
from patchkit.values import Value
from patchkit.versions import at_least, version_key

if TYPE_CHECKING:
    from patchkit.gpus.smi import Machine


class Need(StrEnum):
    """A setting at this environment, for these GPUs."""

    NEEDED = "needed"  # not set, and the release fails without it
    SET = "set"  # set in the environment judged, and it does what it should
    WRONG = "set wrongly"  # set, but to what does not help (a ptxas that does not know the target)
    MAYBE = "needed if"  # needed under a condition the files cannot tell (how the GPUs are linked)
    NOT_NEEDED = "not needed"  # the release does it by itself, or its installed parts serve these GPUs
    ABSENT = "not in this release"  # the release has no such variable or flag
    UNREAD = "newer than patchkit has read"  # the release's files do not show how it is spelled: not judged


class DeepGemmWhy(StrEnum):
    """Why a DeepGEMM setting stands as it does (a ``SettingHere``'s ``why``)."""

    NOT_ADMITTED = "not-admitted"  # the release's support_deep_gemm does not admit the 12.x family
    HAS_IMPLS = "has-impls"  # the DeepGEMM it loads has include/deep_gemm/impls/sm<major>0_*.cuh
    PROBE_REFUSES = "probe-refuses"  # SGLang's probe refuses that DeepGEMM by itself
    NO_IMPLS = "no-impls"  # it has none


SDIRS = ("nvidia/cu13/bin/ptxas", "nvidia/cuda_nvcc/bin/ptxas")  # where nvidia-cuda-nvcc 13.x / -cu12 12.x put ptxas


class SettingHere(Value):
    setting: Setting
    version: str  # the installed release of setting.project
    cc: CC  # the GPU it is judged for
    need: Need
    spelling: Spelling | None
    value: str | None  # what to set: the value, or the path of a ptxas that would do
    asked: Compiler | None = None  # Triton: the ptxas it calls, asked
    would_do: tuple[Compiler, ...] = ()  # Triton: ptxas found that would do
    found: str | None = None  # what was found: the DeepGEMM folder; the variable's value as set
    why: DeepGemmWhy | None = None  # DeepGEMM: why it is needed or not
    impls: tuple[str, ...] = ()  # DeepGEMM: its kernel templates for the GPU's major
    read_in: tuple[str, ...] = ()  # a release newer than the data: the files its spelling was read in
    bundled: tuple[Compiler, ...] = ()  # UNREAD Triton: every ptxas it bundles, asked
    set_to: str | None = None  # DeepGEMM: the variable's value as set (``found`` is the DeepGEMM folder there)

    def as_set(self) -> str | None:
        """The variable's value in the environment judged."""
        return self.set_to if self.setting.check == Check.DEEPGEMM else self.found


def _holds(path: Path | None, *marks: str) -> bool:
    """Whether the file at ``path`` (read bounded) holds every one of ``marks``."""
    from patchkit.kernels.jit import _read

    text = _read(path) if path is not None else None
    return text is not None and all(m in text for m in marks)


def _first(sites: list[Path], rel: str) -> Path | None:
    return next((s / rel for s in sites if (s / rel).exists()), None)


def _ptxas_fits(c: Compiler, target: str, sp: Spelling) -> bool:
    low, high = sp.ptxas or ("0", None)
    r = c.release
    return bool(c.knows(target)) and bool(r) and at_least(r, low) and (high is None or not at_least(r, high))


def _candidates(sites: list[Path], env: Mapping[str, str], bundled: str) -> list[tuple[str, str]]:
    found = [(str(s / rel), "installed " + rel) for s in sites for rel in SDIRS if (s / rel).is_file()]
    if env.get("CUDA_HOME") and os.path.isfile(os.path.join(env["CUDA_HOME"], "bin", "ptxas")):
        found.append((os.path.join(env["CUDA_HOME"], "bin", "ptxas"), "$CUDA_HOME"))
    on_path = shutil.which("ptxas", path=env.get("PATH", ""))
    if on_path:
        found.append((on_path, "PATH"))
    found.append((bundled, "bundled with Triton"))
    return list(dict(found[::-1]).items())[::-1]  # one per path, the first kept


def ptxas_target(cc: CC) -> str:
    arch = cc.sm()
    return f"sm_{arch}{'a' if arch >= 90 else ''}"


def _read_spelling(s: Setting, version: str, sites: list[Path]) -> tuple[Spelling | None, tuple[str, ...]]:
    """A release newer than every spelling: the newest spelling whose marks its files hold, and those files."""
    for sp in sorted((sp for sp in s.spellings if sp.marks), key=lambda sp: version_key(sp.since), reverse=True):
        if all(_holds(_first(sites, rel), mark) for rel, mark in sp.marks):
            return sp, tuple(dict.fromkeys(rel for rel, _ in sp.marks))
    return None, tuple(dict.fromkeys(rel for sp in s.spellings for rel, _ in sp.marks))


def _triton(s: Setting, version: str, sites: list[Path], env: Mapping[str, str], cc: CC) -> SettingHere | None:
    sp = s.spelling(version)
    read_in: tuple[str, ...] = ()
    if sp is None and not all(at_least(version, x.since) for x in s.spellings):
        return None  # older than every release read: not said
    target = ptxas_target(cc)
    package = _first(sites, "triton")
    if package is None:
        return None
    bin_dir = package / "backends" / "nvidia" / "bin"
    if sp is None:
        sp, read_in = _read_spelling(s, version, sites)
        if sp is None:
            tools = sorted(n for n in ("ptxas", "ptxas-blackwell") if (bin_dir / n).is_file())
            bundled = tuple(ask(n, str(bin_dir / n), "bundled with Triton", "--gpu-name") for n in tools)
            return SettingHere(s, version, cc, Need.UNREAD, None, None, read_in=read_in, bundled=bundled)
    blackwell = (bin_dir / "ptxas-blackwell").is_file() and cc.major >= 10 and "BLACKWELL" in sp.name
    tool = "ptxas-blackwell" if blackwell else "ptxas"
    chosen, how = env.get(sp.name), f"${sp.name}"
    if not chosen:
        chosen, how = str(bin_dir / tool), "bundled with Triton"
    asked = ask(tool, chosen, how, "--gpu-name")
    knows = asked.knows(target)
    if how == "bundled with Triton" and (knows or (knows is None and not sp.needed and not read_in)):
        return SettingHere(s, version, cc, Need.NOT_NEEDED, sp, None, asked, read_in=read_in)
    would = tuple(c for c in (ask("ptxas", p, by, "--gpu-name") for p, by in _candidates(sites, env, str(bin_dir / tool)))
                  if _ptxas_fits(c, target, sp))
    value = would[0].path if would else None
    if how != "bundled with Triton":
        need = Need.SET if _ptxas_fits(asked, target, sp) else Need.WRONG
        return SettingHere(s, version, cc, need, sp, value, asked, would, env.get(sp.name), read_in=read_in)
    return SettingHere(s, version, cc, Need.NEEDED, sp, value, asked, would, read_in=read_in)


def _deepgemm(s: Setting, version: str, sites: list[Path], env: Mapping[str, str], cc: CC) -> SettingHere | None:
    sp = s.spelling(version)
    if sp is None:
        return None
    package = next((p for rel in s.loads_from for p in [_first(sites, rel)] if p is not None), None)
    if package is None:
        return None
    if s.admitted_by is not None and not _holds(_first(sites, s.admitted_by[0]), s.admitted_by[1]):
        return SettingHere(s, version, cc, Need.NOT_NEEDED, sp, sp.value, found=str(package), why=DeepGemmWhy.NOT_ADMITTED)
    impls = package / "include" / "deep_gemm" / "impls"
    names = tuple(sorted(n for n in os.listdir(impls) if n.startswith(f"sm{cc.major}0_") and n.endswith(".cuh"))) if impls.is_dir() else ()
    if names:
        return SettingHere(s, version, cc, Need.NOT_NEEDED, sp, sp.value, found=str(package), why=DeepGemmWhy.HAS_IMPLS, impls=names)
    if s.probe and not _holds(package / "__init__.py", *s.probe):
        return SettingHere(s, version, cc, Need.NOT_NEEDED, sp, sp.value, found=str(package), why=DeepGemmWhy.PROBE_REFUSES)
    current = env.get(sp.name)
    off = current is not None and current.strip().lower() in ("0", "false", "no", "n")
    return SettingHere(s, version, cc, Need.SET if off else Need.NEEDED, sp, sp.value, found=str(package), why=DeepGemmWhy.NO_IMPLS,
                       set_to=current)


def _nccl(s: Setting, version: str, machine: Machine, cc: CC) -> SettingHere | None:
    sp = s.spelling(version)
    if sp is None or sp.value is None:
        return None
    if at_least(version, sp.value):
        need = Need.NOT_NEEDED
    elif machine.links is None:
        need = Need.MAYBE
    else:
        need = Need.NEEDED if machine.pcie_only() else Need.NOT_NEEDED
    return SettingHere(s, version, cc, need, sp, sp.value)


def _release_has(s: Setting, version: str, sites: list[Path], env: Mapping[str, str], cc: CC) -> SettingHere | None:
    sp = s.spelling(version)
    if sp is None:
        return None
    for rel, mark in sp.marks:
        if not _holds(_first(sites, rel), mark):
            return SettingHere(s, version, cc, Need.ABSENT, sp, sp.value)
    if s.kind == SettingKind.ENV and env.get(sp.name) == sp.value:
        return SettingHere(s, version, cc, Need.SET, sp, sp.value, found=env.get(sp.name))
    return SettingHere(s, version, cc, Need.NEEDED, sp, sp.value, found=env.get(sp.name))


def settings_here(sites: list[Path], env: Mapping[str, str], machine: Machine, settings: tuple[Setting, ...] | None = None) -> list[SettingHere]:
    """Each setting for each GPU of ``machine`` it is for, whose project is installed in ``sites``;
    judged with the variables of ``env`` (the environment the server starts from).  Wrong output
    (rank 1) first, then the rest in the data's order."""
    from packaging.utils import canonicalize_name as canonical

    from patchkit.targets.dist_info import installed_versions  # packaging.utils: only when settings are judged

    versions = installed_versions(sites)
    found: list[SettingHere] = []
    for s in settings if settings is not None else read_settings():
        version = versions.get(canonical(s.project))
        if version is None or s.check == Check.LOG_ONLY:
            continue
        for cc in machine.ccs():
            if cc not in s.ccs:
                continue
            if s.check == Check.PTXAS:
                here = _triton(s, version, sites, env, cc)
            elif s.check == Check.DEEPGEMM:
                here = _deepgemm(s, version, sites, env, cc)
            elif s.check == Check.NCCL:
                here = _nccl(s, version, machine, cc)
            else:
                here = _release_has(s, version, sites, env, cc)
            if here is not None:
                found.append(here)
    return sorted(found, key=lambda h: h.setting.rank)


def exportable(name: str) -> bool:
    """Whether a POSIX shell's ``export`` can set the variable ``name`` (Triton 3.3's
    ``TRITON_PTXAS-BLACKWELL_PATH`` it cannot: only ``env`` passes it on)."""
    return name.replace("_", "a").isalnum() and name.isascii() and not name[0].isdigit()


def missing(found: list[SettingHere]) -> list[SettingHere]:
    """The settings this environment lacks: needed and not set, or set wrongly (flags aside:
    the server's command line is not seen)."""
    return [h for h in found if h.need in (Need.NEEDED, Need.WRONG) and h.setting.kind != SettingKind.FLAG]
