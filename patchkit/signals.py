"""Ctrl-C in the command line: SIGINT raises ``errors.Interrupted`` wherever patchkit is, through the
public ``signal`` module (docs/ARCHITECTURE.md, "Ctrl-C")."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

from patchkit.errors import Interrupted

if TYPE_CHECKING:
    from types import FrameType

_HELD = {"depth": 0, "pending": False, "late": False}  # Ctrl-C held back while a child starts; sent again (_unraisable)


def on_sigint(signum: int, frame: FrameType | None) -> None:
    """The SIGINT handler of the command line: Ctrl-C raises Interrupted wherever patchkit is,
    except while ``held_interrupts`` starts a child: then it is raised once the child is known."""
    if _HELD["depth"]:
        _HELD["pending"] = True
        return
    interrupt()


def catch_sigint() -> None:
    """Ctrl-C raises Interrupted from here on (``on_sigint``), also where Python cannot raise it: see
    ``_unraisable``."""
    signal.signal(signal.SIGINT, on_sigint)
    sys.unraisablehook = _unraisable


def _unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """Python's hook for an exception it cannot raise (``sys.unraisablehook``).  Ctrl-C that lands in
    a callback Python runs on its own (a weak reference's, as importlib's module locks have; a
    ``__del__``) raises Interrupted there, which Python would print as "Exception ignored in ..." with a
    traceback and then go on as if nothing was pressed.  It is raised again a millisecond later instead
    (SIGALRM, whose handler is ``on_sigint``), in patchkit's own code: a signal sent from here would be
    handled here, inside the hook.  Any other exception is Python's to print."""
    if isinstance(unraisable.exc_value, Interrupted):
        signal.signal(signal.SIGINT, on_sigint)  # interrupt() had set it aside, for the clean-up
        signal.signal(signal.SIGALRM, on_sigint)
        signal.setitimer(signal.ITIMER_REAL, 0.001)
        _HELD["late"] = True
        return
    sys.__unraisablehook__(unraisable)


def settle_interrupts() -> None:
    """At the end of the command: a Ctrl-C sent again by ``_unraisable`` that has not come yet is moot
    (the command has done its work), and must not end the process as a SIGALRM."""
    if _HELD.get("late"):
        signal.setitimer(signal.ITIMER_REAL, 0)


def interrupt() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
    raise Interrupted()


class held_interrupts:
    """``with held_interrupts() as held: proc = Popen(...)``, then, where the child's clean-up is
    in place, ``held.release()``: a Ctrl-C that came while Popen ran (which would leave a child
    nobody knows the pid of) is raised there."""

    def __enter__(self) -> held_interrupts:
        _HELD["depth"] += 1
        return self

    def __exit__(self, *exc: object) -> None:
        _HELD["depth"] -= 1

    def release(self) -> None:
        if not _HELD["depth"] and _HELD["pending"]:
            _HELD["pending"] = False
            interrupt()
