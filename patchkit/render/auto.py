"""``apply`` and ``verify`` with ``--to-cc auto`` (``report.Auto``): the machine's GPUs, the
targets with nothing to do, then the command's own lines per target, each fix left out as not
needed here said under its target's first line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.render.machine import machine_json
from patchkit.render.reasons import code, said
from patchkit.render.where import where_line
from patchkit.report import Auto, AutoTarget

if TYPE_CHECKING:
    from collections.abc import Mapping

    from patchkit.gpus.smi import Machine
    from patchkit.plan.plans import Note


def gpus_line(m: Machine) -> str:
    """This machine's GPUs, by kind: "this machine: 8 x NVIDIA RTX PRO 6000 ... (cc 12.0)"."""
    kinds: dict[tuple[str, str], int] = {}
    for g in m.gpus:
        kinds[(g.name, g.cc_text())] = kinds.get((g.name, g.cc_text()), 0) + 1
    return "this machine: " + ", ".join(f"{n} x {name} (cc {cc})" for (name, cc), n in kinds.items())


def spare_lines(spare: Mapping[str, Note]) -> list[str]:
    """One line per fix left out: why it is not needed here (``judge.reasons.Unneeded``), and how
    to apply it anyway."""
    return [f"not needed here: {name}: {said(why)} (--fix {name} applies it anyway)" for name, why in spare.items()]


def _idle(t: AutoTarget, command: str) -> list[str]:
    if t.spare:  # every fix left out: the target's verdict after why
        verdict = "verify: ok" if command == "verify" else "nothing to do"
        return [where_line(t.where), *spare_lines(t.spare),
                f"{verdict}: {t.label} lacks nothing this machine's GPUs need"]
    has = ", ".join(repr(cc) for cc in t.held if cc not in t.not_for and cc not in t.ours)
    other = ", ".join(map(repr, t.not_for))
    said = f"{t.label} already holds key {has} for this machine's GPUs" if has else ""
    if t.ours:  # patchkit put it there: never the release's own
        mine = (f"key {', '.join(map(repr, t.ours))} is patchkit's own, applied by an earlier `patchkit apply` "
                "(`patchkit doctor` says whether it helps here; `patchkit revert` takes it off)")
        said = f"{said}; {mine}" if said else mine
    if other:
        said += (f", and no fix for it is for those of key {other}" if has
                 else f"no fix for {t.label} is for this machine's GPUs (key {other})")
    return [where_line(t.where), f"nothing to do: {said}"]


def to_text(auto: Auto, terminal: bool) -> list[str]:
    from patchkit.render import environment_line, text

    lines = [gpus_line(auto.machine)] + ([environment_line(auto.env)] if auto.env is not None else [])
    for t in auto.targets:
        if not t.results:
            lines += _idle(t, auto.command)
    runs = [(t, r, i == 0) for t in auto.targets for i, r in enumerate(t.results)]
    for n, (t, r, first) in enumerate(runs):
        part = text(r, terminal)
        if first and t.spare:
            part = part[:1] + spare_lines(t.spare) + part[1:]
        lines += ([""] if n else []) + part
    if auto.settings is not None:  # verify --python: the settings these GPUs need, after the projects
        lines += ([""] if runs else []) + text(auto.settings, terminal)
    return lines


def to_json(auto: Auto) -> dict[str, object]:
    from patchkit.render import environment, target_document

    machine = machine_json(auto.machine)
    not_needed = [{"path": t.where.path, "project": t.project, "fix": name, "reason": code(why), "why": said(why)}
                  for t in auto.targets for name, why in t.spare.items()]
    targets = [target_document(r) for t in auto.targets for r in t.results]
    targets += [target_document(auto.settings)] if auto.settings is not None else []
    if auto.command == "apply":
        idle = [t.where.path for t in auto.targets if not t.results]
        return {"to_cc": "auto", "machine": machine, "nothing_to_do": idle, "not_needed": not_needed, "targets": targets}
    env: dict[str, object] = {} if auto.env is None else environment(auto.env)
    return {"to_cc": "auto", "machine": machine, **env, "not_needed": not_needed, "targets": targets}
