"""Exit codes and the errors that map onto them.

Every command uses the same codes (README, "Exit codes"):
0 done or nothing to do; 1 check found problems; 2 bad input or usage;
3 refused to change anything.
"""

from __future__ import annotations

from patchkit.text import printable

OK = 0
PROBLEMS = 1
BAD_INPUT = 2
REFUSED = 3
TIMED_OUT = 124  # watch: no ready line or crash before --timeout, as timeout(1) exits


class PatchkitError(Exception):
    """An error the user can act on: printed as one line, never as a traceback."""

    exit_code = BAD_INPUT

    def __init__(self, path: str | None, reason: str) -> None:
        path, reason = printable(path) if path else path, printable(reason)
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


class BadInput(PatchkitError):
    """A path, repository, tag or file that patchkit cannot use (exit 2)."""

    exit_code = BAD_INPUT


class RewriteError(PatchkitError):
    """A source file whose tables cannot be patched (exit 3: nothing is written)."""

    exit_code = REFUSED


class Refused(PatchkitError):
    """A change patchkit will not make: a conflict, a file edited after apply, the lock held (exit 3)."""

    exit_code = REFUSED


class UnsafePath(PatchkitError):
    """A path that would leave the target tree or go through a symlink (exit 3)."""

    exit_code = REFUSED


class PatchError(BadInput):
    """A patch file that is corrupt, truncated, or does something patchkit never does (exit 2)."""


class BranchError(PatchkitError):
    """A branch that upstream cannot create: taken, locked or badly named (exit 3)."""

    exit_code = REFUSED


class MirrorError(PatchkitError):
    """A release that cannot be downloaded or mirrored (exit 2)."""

    def __init__(self, reason: str) -> None:
        super().__init__(None, reason)
