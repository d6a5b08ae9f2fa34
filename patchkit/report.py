"""What a command returns, before it is rendered.

A command (``patchkit.commands``) returns a typed result and prints nothing; ``patchkit.render``
turns a result into lines (for a terminal, or piped) and one JSON document, and ``cli/boundary.py``
prints them and exits with the result's ``exit_code``.  Here are the shapes results share:
``Where`` (the target a result is about), ``Each`` (one command over several targets)
and ``Auto`` (``--to-cc auto``: the machine, and the ordinary command's results per target).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.errors import worst
from patchkit.types import TargetKind
from patchkit.values import Value

if TYPE_CHECKING:
    from collections.abc import Sequence

    from patchkit.cc import Key
    from patchkit.gpus.smi import Machine
    from patchkit.judge.reasons import Unneeded, Unread
    from patchkit.targets.environment import Environment
    from patchkit.targets.session import Session


if TYPE_CHECKING:  # a type for the annotations only (nothing is checked against it at run time)
    from typing import Protocol

    class Result(Protocol):
        """What every command's result has: its exit code."""

        @property
        def exit_code(self) -> int: ...


class Where(Value):
    """The target a result is about: where, what, which version and how it was found (its first
    line, as ``render/where.py`` says it) and what --json says of it."""

    shown: str  # the folder a report names: the package of an install, else the checkout
    label: str  # the project, as people write it
    kind: TargetKind
    path: str
    version: str | None
    version_from: str
    editable_of: str | None = None  # an editable install: the checkout it runs from

    @classmethod
    def of(cls, s: Session) -> Where:
        """The target of a ``targets.session.Session``."""
        return cls(**s.where_fields())

    def fields(self, **more: object) -> dict[str, object]:
        """The start of a target's part of a --json document: the target, its version, how it was found."""
        return {"path": self.path, "version": self.version, "version_from": self.version_from, **more}

    def data(self, command: str, **more: object) -> dict[str, object]:
        """``fields``, after the command's name (doctor's targets)."""
        return {"command": command, **self.fields(**more)}


class Each(Value):
    """One command run on several targets (the projects of one environment): rendered one after
    the other, their documents in ``targets``, the worst exit code.  ``env``: the environment
    ``--python`` read, when the text starts with what it holds (``not_installed`` in the
    document), so that what was judged is never mistaken for all."""

    command: str
    results: tuple[Result, ...]
    env: Environment | None = None

    @property
    def exit_code(self) -> int:
        return worst(r.exit_code for r in self.results)


def combine(command: str, results: Sequence[Result]) -> Result:
    """``results`` of one command as one result: the one alone, else ``Each``."""
    return results[0] if len(results) == 1 else Each(command, tuple(results))


class AutoTarget(Value):
    """What ``--to-cc auto`` made of one target: the ordinary command's results there (none:
    nothing to do), and the fixes it left out as not needed on this machine."""

    where: Where
    project: str
    label: str
    held: tuple[Key, ...]  # the machine's ccs as the project spells them
    spare: dict[str, Unneeded | Unread]  # fix -> why it is not needed here
    results: tuple[Result, ...]  # the command's results, one per key
    not_for: tuple[Key, ...] = ()  # of ``held``, with nothing to do: the keys no fix is for (the release holds the rest)
    ours: tuple[Key, ...] = ()  # of ``held``, with nothing to do: the keys patchkit applied (not the release's own)


class Auto(Value):
    """``apply`` or ``verify`` with ``--to-cc auto``: the machine's GPUs, then each target."""

    command: str
    machine: Machine
    targets: tuple[AutoTarget, ...]
    env: Environment | None = None  # verify --python: the environment read, said after the machine (as ``Each.env``)
    settings: Result | None = None  # verify --python: the settings judged for the machine (commands.settings)

    @property
    def exit_code(self) -> int:
        extra = (self.settings.exit_code,) if self.settings is not None else ()
        return worst((*(r.exit_code for t in self.targets for r in t.results), *extra))
