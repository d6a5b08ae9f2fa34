"""The settings part of ``patchkit verify --python EXE``: whether the environment the server starts
from has each setting (a variable) that the releases installed for EXE need on these GPUs
(``judge/settings.py``).  The variables are those of the environment verify runs in: run it from
the shell (or with the ``env``) the server is started from.  A setting not needed there is not
judged; a flag of the server's command line is not seen, so never a problem here (doctor names it).
Judged for ``--to-cc``'s cc, else the GPUs nvidia-smi shows; with neither, or with no setting for
these GPUs among the releases installed, verify says nothing of settings.  One line per setting
missing, and exit 5 (``SETTINGS``): a patch not in effect (exit 1) outranks it, as apply can fix that
and cannot set a variable (``doctor --format env`` prints the lines that do)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import BAD_INPUT, OK, PROBLEMS, SETTINGS, BadInput
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.cc import CC
    from patchkit.gpus.smi import Machine
    from patchkit.judge.settings import SettingHere
    from patchkit.targets.environment import Environment


class SettingsVerified(Value):
    exe: str
    ccs: tuple[CC, ...]  # the GPUs judged for; () when none
    judged: tuple[SettingHere, ...]
    missing: tuple[SettingHere, ...]  # of judged: those this environment lacks
    unseen: str | None = None  # why nothing was judged

    @property
    def exit_code(self) -> int:
        return SETTINGS if self.missing else OK


def verify_settings(env: Environment, to_cc: CC | None = None, m: Machine | None = None) -> SettingsVerified:
    """``m``: the machine, read already (a plain verify that found SM12x GPUs, ``--to-cc auto``)."""
    from patchkit.gpus.smi import given, machine, timeout
    from patchkit.judge.settings import missing, settings_here

    if m is None and to_cc is not None and hasattr(to_cc, "pair"):
        m = given(to_cc)
    elif m is None:
        try:
            m = machine(timeout())
        except BadInput as exc:
            return SettingsVerified(str(env.exe), (), (), (), exc.reason)
    found = settings_here(list(env.sites), dict(os.environ), m)
    return SettingsVerified(str(env.exe), tuple(m.ccs()), tuple(found), tuple(missing(found)))


class SettingsToSet(Value):
    """``doctor --python EXE --format env``: the variables the GPUs judged for need (``judge/settings.py``,
    as doctor's settings section), with the value to set: needed, set wrongly (the value that would
    do), or set already (what is set).  Flags and upgrades are not variables: doctor names them."""

    exe: str
    ccs: tuple[CC, ...]
    to_set: tuple[tuple[str, str], ...]  # (name, value)
    unset: tuple[SettingHere, ...]  # needed, with no value found here or a name export cannot set
    unseen: str | None = None  # why no GPU was judged for (no --to-cc)

    @property
    def exit_code(self) -> int:
        return BAD_INPUT if self.unseen is not None else PROBLEMS if self.unset else OK


def settings_to_set(exe: Path, found: Iterable[SettingHere], ccs: Iterable[CC]) -> SettingsToSet:
    """Of ``found`` (``judge.settings.SettingHere``), the variables to set and those that cannot be."""
    from patchkit.fixes.settings import Check, SettingKind
    from patchkit.judge.settings import Need, exportable

    to_set: dict[str, str] = {}
    unset = []
    for h in found:
        sp = h.spelling  # None only for an UNREAD setting, never one of these needs
        if h.setting.kind != SettingKind.ENV or h.need not in (Need.NEEDED, Need.WRONG, Need.SET) or sp is None or sp.name in to_set:
            continue
        value = h.found if h.need == Need.SET and h.setting.check == Check.PTXAS else h.value
        if value is None or not exportable(sp.name):
            unset.append(h)
        else:
            to_set[sp.name] = value
    return SettingsToSet(str(exe), tuple(ccs), tuple(to_set.items()), tuple(unset))
