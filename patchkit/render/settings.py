"""What doctor and verify say of the settings (``judge.settings.SettingHere``): per setting the
line to set, shell-quoted, and why; and the line verify prints for one this environment lacks."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from patchkit.fixes.settings import Check, SettingKind
from patchkit.judge.settings import DeepGemmWhy, Need, exportable, ptxas_target

if TYPE_CHECKING:
    from collections.abc import Sequence

    from patchkit.commands.settings import SettingsToSet, SettingsVerified
    from patchkit.judge.settings import SettingHere
    from patchkit.kernels.jit import Compiler


def _cc(h: SettingHere) -> str:
    return h.cc.smi_text()


def _name(h: SettingHere) -> str:
    """What the setting sets: its variable, flag or package (known for every need but UNREAD: ``judge.settings``)."""
    assert h.spelling is not None, h
    return h.spelling.name


def set_line(h: SettingHere) -> str | None:
    """The line that sets it: ``export NAME=VALUE``; a name ``export`` cannot set (Triton 3.3's
    ``TRITON_PTXAS-BLACKWELL_PATH``) as ``env 'NAME=VALUE' <command>``; a flag as it is added to the
    server's command line; an upgrade as pip's command.  None: no value known (no ptxas found)."""
    sp = h.spelling
    if sp is None or h.value is None:
        return None
    kind = h.setting.kind
    if kind == SettingKind.FLAG:
        return f"{sp.name} {shlex.quote(h.value)}"
    if kind == SettingKind.UPGRADE:
        return f"pip install {shlex.quote(f'{sp.name}>={h.value}')}"
    if exportable(sp.name):
        return f"export {sp.name}={shlex.quote(h.value)}"
    return f"env {shlex.quote(f'{sp.name}={h.value}')} <command>"


def _what(h: SettingHere) -> str:
    s = h.setting
    if s.check is Check.PTXAS:
        c = h.asked
        said = f"{c.tool} {c.release or '?'} ({c.path})" if c is not None else "its ptxas"
        knows = "knows" if c is not None and c.knows(f"sm_{h.cc.sm()}a") else "does not know"
        read = f" (newer than patchkit's data: read in its {' and '.join(h.read_in)})" if h.read_in else ""
        return f"Triton {h.version}{read} calls {said}, which {knows} sm_{h.cc.sm()}a"
    if s.check is Check.DEEPGEMM:
        impls = f"include/deep_gemm/impls/sm{h.cc.major}0_*.cuh"
        if h.why == DeepGemmWhy.NOT_ADMITTED:
            return f"{s.project} {h.version}'s support_deep_gemm (vllm/platforms/cuda.py) does not admit {_cc(h)}"
        if h.why == DeepGemmWhy.HAS_IMPLS:
            return f"the DeepGEMM it loads ({h.found}) has {impls} ({len(h.impls)})"
        if h.why == DeepGemmWhy.PROBE_REFUSES:
            return f"SGLang's probe refuses the DeepGEMM it loads ({h.found}) by itself"
        return f"the DeepGEMM it loads ({h.found}) has no {impls}"
    if s.check is Check.NCCL:
        return f"{s.project} {h.version}"
    return f"{s.project} {h.version} has {h.spelling.name}" if h.spelling else f"{s.project} {h.version}"


def _answer(c: Compiler, target: str) -> str:
    knows = c.knows(target)
    if knows is None:
        return f"{c.tool} ({c.path}), which cannot be asked ({c.problem or 'its --help lists no --gpu-name values'})"
    return f"{c.tool} {c.release or '?'} ({c.path}), which {'knows' if knows else 'does not know'} {target}"


def unread(h: SettingHere) -> str:
    """Why a Triton newer than patchkit has read is not judged, and what the ptxas it bundles say."""
    target = f"sm_{h.cc.sm()}a"
    asked = "; ".join(_answer(c, target) for c in h.bundled) or "no ptxas"
    return (f"Triton {h.version} is newer than patchkit has read (its data ends before {h.setting.spellings[-1].before}): "
            f"its {' and '.join(h.read_in) or 'files'} do not hold what showed which ptxas the releases read call for "
            f"{_cc(h)} and which variable names it; it bundles {asked}")


def _install_ptxas(h: SettingHere) -> str:
    """What to install where no ptxas here would do for Triton."""
    sp = h.spelling
    return (f"install a ptxas of CUDA {sp.ptxas[0] if sp and sp.ptxas else '12.9'} or later "
            f"(nvidia-cuda-nvcc-cu12 12.9: nvidia/cuda_nvcc/bin/ptxas"
            f"{'' if sp and sp.ptxas and sp.ptxas[1] else '; nvidia-cuda-nvcc 13.x: nvidia/cu13/bin/ptxas'})")


def _caveat(h: SettingHere) -> list[str]:
    """doctor's line under a setting needed or set: what can still go wrong with it set."""
    return [f"    caveat: {h.setting.caveat}"] if h.setting.caveat else []


def lines(found: Sequence[SettingHere]) -> list[str]:
    """doctor's settings section: each setting that helps these GPUs, then the rest in one line each."""
    if not found:
        return []
    out = ["settings (a variable, a flag or an upgrade instead of a patch):"]
    for h in found:
        s, cc = h.setting, _cc(h)
        wrong = "wrong output without it, silently; " if s.rank == 1 else ""
        if h.need in (Need.NEEDED, Need.MAYBE, Need.WRONG):
            condition = " if its GPUs are linked by PCIe only" if h.need == Need.MAYBE else ""
            where = "set, but to a ptxas that does not do" if h.need == Need.WRONG else "needed"
            out.append(f"  {s.name}: {where} for {cc}{condition} ({wrong}{_what(h)}): {s.does}")
            line = set_line(h)
            if line is not None:
                out.append(f"    {line}")
            else:
                out.append(f"    no {_name(h)} value found here: {_install_ptxas(h)}")
            for w in h.would_do[1:]:
                out.append(f"    (also would do: ptxas {w.release} at {w.path})")
            out += _caveat(h)
        elif h.need == Need.SET:
            out.append(f"  {s.name}: set for {cc} ({_name(h)}={h.as_set()})")
            out += _caveat(h)
        elif h.need == Need.UNREAD:
            out.append(f"  {s.name}: not judged for {cc} ({unread(h)})")
        elif h.need == Need.ABSENT:
            out.append(f"  {s.name}: {s.project} {h.version} has no {_name(h)}: nothing to set")
        else:
            out.append(f"  {s.name}: not needed for {cc} ({_what(h)})")
    return out


def missing_line(h: SettingHere) -> str:
    """verify's line for a setting this environment lacks."""
    s = h.setting
    if h.need == Need.WRONG:
        return f"setting {s.name}: {_name(h)}={h.found} does not do for {_cc(h)} ({_what(h)})"
    line = set_line(h)
    todo = f"set it: {line}" if line else f"set {_name(h)} to a ptxas of CUDA 12.9 or later"
    caveat = f"; caveat: {s.caveat}" if s.caveat else ""
    return f"setting {s.name}: missing for {_cc(h)} ({_what(h)}); {todo}{caveat}"


ONE_TARGET = True  # verify's settings part is one entry of its document's ``targets``


def to_text(r: SettingsVerified | SettingsToSet, terminal: bool) -> list[str]:
    """verify's settings part (``commands.settings.SettingsVerified``); ``doctor --format env``'s
    lines (``commands.settings.SettingsToSet``): one ``export NAME=VALUE`` each, shell-quoted."""
    from patchkit.commands.settings import SettingsToSet

    if isinstance(r, SettingsToSet):
        return [f"export {name}={shlex.quote(value)}" for name, value in r.to_set]
    if r.unseen is not None:
        return [f"settings of {r.exe}: not judged: no GPU seen ({r.unseen}) and no --to-cc"]
    ccs = ", ".join(cc.smi_text() for cc in r.ccs)
    lines = [f"settings of {r.exe} for {ccs}, with this shell's variables:"]
    lines += [missing_line(h) for h in r.missing]
    # A setting in place whose caveat still holds: said, as doctor says it (no problem: the exit stays).
    lines += [f"setting {h.setting.name}: set for {_cc(h)} ({_name(h)}={h.as_set()}); caveat: {h.setting.caveat}"
              for h in r.judged if h.need == Need.SET and h.setting.caveat]
    if r.missing:
        return lines + [f"verify: {len(r.missing)} setting{'s' if len(r.missing) != 1 else ''} missing"]
    judged = [h for h in r.judged if h.need in (Need.SET, Need.NOT_NEEDED)]
    unjudged = [h for h in r.judged if h.need == Need.UNREAD]
    if unjudged:
        return lines + [f"setting {h.setting.name}: not judged for {_cc(h)} ({unread(h)})" for h in unjudged] + [
            f"verify: none missing of {len(judged)} setting{'s' if len(judged) != 1 else ''} judged; not judged: "
            f"{', '.join(dict.fromkeys(h.setting.name for h in unjudged))} (newer than patchkit has read)"]
    return lines + [f"verify: ok ({len(judged)} setting{'s' if len(judged) != 1 else ''} judged, none missing)"]


def to_json(r: SettingsVerified) -> dict[str, object]:
    return {"settings_of": r.exe, "ccs": [cc.smi_text() for cc in r.ccs], "in_effect": not r.missing, "not_judged": r.unseen,
            "settings": [setting_json(h) | {"set_line": set_line(h)} for h in r.judged],
            "problems": [missing_line(h) for h in r.missing]}


def failure(r: SettingsVerified | SettingsToSet) -> str | None:
    """``doctor --format env``: why a variable these GPUs need is not among the lines (no value
    found here, or a name ``export`` cannot set), or why nothing was judged (no GPU seen)."""
    from patchkit.commands.settings import SettingsToSet

    if not isinstance(r, SettingsToSet):
        return None
    if r.unseen is not None:
        return (f"no GPU seen, so doctor cannot say what this machine needs ({r.unseen}); "
                "give --to-cc with the cc of the GPUs the server will run on")
    said = []
    for h in r.unset:
        name = _name(h)
        if not exportable(name) and h.value is not None:
            said.append(f"{h.setting.name}: {name} is needed for {_cc(h)} and export cannot set it: start the server "
                        f"with {set_line(h)}")
        elif h.setting.check is Check.PTXAS:
            said.append(f"{h.setting.name}: {name} is needed for {_cc(h)} and no ptxas here would do: {_install_ptxas(h)}")
        else:
            said.append(f"{h.setting.name}: {name} is needed for {_cc(h)} and no value is known here")
    return "; ".join(said) or None


def setting_json(h: SettingHere) -> dict[str, object]:
    """A setting judged (``judge.settings.SettingHere``) in a --json document."""
    s, sp = h.setting, h.spelling
    c = h.asked
    return {"setting": s.name, "kind": s.kind.value, "project": s.project, "version": h.version,
            "cc": h.cc.smi_text(), "need": h.need.value, "rank": s.rank,
            "name": sp.name if sp else None, "value": h.value, "found": h.found,
            "ptxas": None if c is None else {"path": c.path, "release": c.release, "targets": list(c.targets or ()),
                                             "problem": c.problem},
            "would_do": [{"path": w.path, "release": w.release} for w in h.would_do],
            "read_in": list(h.read_in),
            "bundled": [{"tool": b.tool, "path": b.path, "release": b.release, "knows": b.knows(ptxas_target(h.cc))}
                        for b in h.bundled],
            "caveat": s.caveat, "evidence": s.evidence, "measured": s.measured}
