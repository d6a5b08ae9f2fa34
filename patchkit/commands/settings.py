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

from patchkit.errors import OK, SETTINGS, BadInput
from patchkit.values import Record


class SettingsVerified(Record):
    exe: str
    ccs: tuple  # the GPUs judged for; () when none
    judged: tuple  # judge.settings.SettingHere
    missing: tuple  # of judged: those this environment lacks
    unseen: str | None = None  # why nothing was judged

    @property
    def exit_code(self) -> int:
        return SETTINGS if self.missing else OK


def verify_settings(env, to_cc=None, m=None) -> SettingsVerified:
    """``m``: the machine, read already (a plain verify that found SM12x GPUs, ``--to-cc auto``)."""
    from patchkit.gpus.smi import given, machine, timeout
    from patchkit.judge.settings import missing, settings_here

    if m is None and to_cc is not None and hasattr(to_cc, "pair"):
        m = given(to_cc.pair())
    elif m is None:
        try:
            m = machine(timeout())
        except BadInput as exc:
            return SettingsVerified(str(env.exe), (), (), (), exc.reason)
    found = settings_here(list(env.sites), dict(os.environ), m)
    return SettingsVerified(str(env.exe), tuple(m.ccs()), tuple(found), tuple(missing(found)))
