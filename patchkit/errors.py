"""Exit codes and the errors that map onto them.

Every command uses the same codes (README, "Exit codes"):
0 done or nothing to do; 1 check found problems; 2 bad input or usage (a file that cannot
be read or used, named); 3 refused to change anything; 4 a write failed part-way (a full
disk, an I/O error): a transaction is pending, its journal names it, and the next apply
or revert finishes it; 5 verify found every patch in effect and only settings missing
(apply cannot set a variable: ``doctor --format env`` prints them); 70 a failure patchkit
did not expect (a bug: please report it); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.text import printable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import TracebackType
    from typing import Literal

OK = 0
PROBLEMS = 1
BAD_INPUT = 2
REFUSED = 3
PENDING = 4  # a write failed part-way: the journal is pending; the next apply or revert finishes it
SETTINGS = 5  # verify: the patches are in effect, only a setting (a variable, an upgrade) is missing
SOFTWARE = 70  # EX_SOFTWARE (sysexits.h): an exception patchkit did not expect
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a job ended by Ctrl-C
TIMED_OUT = 124  # watch: no ready line or crash before --timeout, as timeout(1) exits


def worst(codes: Iterable[int]) -> int:
    """The exit code of several results: the highest, except that settings missing (5) rank
    below a patch not in effect (1), so that ``verify || apply`` still applies a missing patch."""
    return max(codes, key=lambda c: (c != OK, c != SETTINGS, c), default=OK)


class PatchkitError(Exception):
    """An error the user can act on: printed as one line, never as a traceback."""

    exit_code = BAD_INPUT

    def __init__(self, path: str | None, reason: str) -> None:
        path, reason = printable(path) if path else path, printable(reason)
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


class _Localized:
    """``localized``'s context manager."""

    def __init__(self, local: Callable[[str], str]) -> None:
        self.local = local

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> Literal[False]:
        if isinstance(exc, PatchkitError) and exc.path and self.local(exc.path) != exc.path:
            raise type(exc)(self.local(exc.path), exc.reason) from None
        return False


def localized(local: Callable[[str], str]) -> _Localized:
    """``with localized(target.local):`` an error that names a repository path names it as the
    target does (``sglang/...`` when installed); the one place this is done."""
    return _Localized(local)


class BadInput(PatchkitError):
    """A path, repository, tag or file that patchkit cannot use (exit 2)."""

    exit_code = BAD_INPUT


class NoProject(BadInput):
    """A folder that holds no project patchkit knows, nor lies inside one (exit 2)."""


class RewriteError(PatchkitError):
    """A source file whose tables cannot be patched (exit 3: nothing is written)."""

    exit_code = REFUSED


class Refused(PatchkitError):
    """A change patchkit will not make: a conflict, a file edited after apply, the lock held (exit 3)."""

    exit_code = REFUSED


class UnsafePath(PatchkitError):
    """A path that would leave the target tree or go through a symlink (exit 3)."""

    exit_code = REFUSED


class Pending(PatchkitError):
    """A write that failed after the journal was written: the target is part-way, and the
    next apply or revert finishes the transaction (exit 4)."""

    exit_code = PENDING


class Interrupted(BaseException):
    """SIGINT (Ctrl-C), raised by the handler ``patchkit.signals`` installs (``catch_sigint``).

    A BaseException, as KeyboardInterrupt is (``except Exception`` lets it through, ``finally``
    runs), but not one: click turns a KeyboardInterrupt into "Aborted!" and exit 1.  ``detail``:
    what was left part-way, if anything."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail)
        self.detail = detail


def interrupt_in(exc: BaseException) -> BaseException | None:
    """The Ctrl-C (``Interrupted``, ``KeyboardInterrupt``) behind ``exc``, if it was raised from one:
    Python 3.11 wraps one that comes while a class is made in a RuntimeError ("Error calling
    __set_name__ ..."), so a Ctrl-C at that instant of an import is an interrupt still (exit 130)."""
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        if isinstance(at, (Interrupted, KeyboardInterrupt)):
            return at
        seen.add(id(at))
        at = at.__cause__ or at.__context__
    return None


def unexpected(exc: BaseException) -> str:
    """The one line for an exception patchkit did not expect (exit 70): what, and where in patchkit."""
    where = ""
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if "/patchkit/" in name:
            where = f" at patchkit/{name.rsplit('/patchkit/', 1)[1]}:{tb.tb_lineno}"
        tb = tb.tb_next
    said = str(exc)
    what = type(exc).__name__ + (f": {said[:200]}{'...' if len(said) > 200 else ''}" if said else "")
    return printable(f"internal error ({what}{where}); this is a bug in patchkit: please report it with the command that gave it")


class PatchError(BadInput):
    """A patch file that is corrupt, truncated, or does something patchkit never does (exit 2)."""


class BranchError(PatchkitError):
    """A branch that upstream cannot create: taken, locked or badly named (exit 3)."""

    exit_code = REFUSED


class MirrorError(PatchkitError):
    """A release that cannot be downloaded or mirrored (exit 2)."""

    def __init__(self, reason: str) -> None:
        super().__init__(None, reason)
