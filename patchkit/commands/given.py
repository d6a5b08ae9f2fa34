"""The targets a command line names (PATH, or every project ``--python`` found installed) and the
one loop over them that status, verify and revert share; docs/ARCHITECTURE.md, "The data flow of
``patchkit apply``", step 2."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from patchkit.errors import BadInput
from patchkit.report import Each, combine
from patchkit.values import Value

if TYPE_CHECKING:
    from patchkit.report import Result
    from patchkit.targets.environment import Environment, Install
    from patchkit.targets.session import Session


class Given(Value):
    """One target: the folder to open, the project it holds (None: recognised from the folder) and,
    for ``--python``, the install found there (None for a PATH)."""

    path: Path
    project: str | None
    install: Install | None

    def open(self, version: str | None = None) -> Session:
        from patchkit.targets.session import Session

        return Session.open(self.path, version, self.project, self.install)


class Targets(Value):
    """What the command line names: each target, and the environment ``--python`` read (None for a PATH)."""

    found: tuple[Given, ...]
    env: Environment | None


def find(path: Path | None, python: str | None, project: str | None, none: bool = False) -> Targets:
    """The targets of PATH (default: here), or of every project patchkit knows (or ``project``)
    installed for ``--python``, wheels and editable installs alike (``targets.environment``);
    ``none``: an environment without any of them is no error (doctor), its targets are none."""
    if python is None:
        return Targets((Given(Path(".") if path is None else path, project, None),), None)
    if path is not None:
        raise BadInput(None, f"give PATH or --python, not both (PATH {path}, --python {python})")
    from patchkit.targets.environment import read_environment

    env = read_environment(python, project, none)
    return Targets(tuple(Given(i.path, i.project, i) for i in env.installs), env)


def sessions(given: Targets, version: str | None = None) -> list[Session]:
    """Each target of ``given`` opened (``version``: the release to treat each as)."""
    return [g.open(version) for g in given.found]


def each(command: str, given: Targets, run: Callable[[Given], Result], judged: bool = False) -> Result:
    """``run`` on each target of ``given``, one after the other; one result.  ``judged``: it starts
    with what ``--python`` found and which known projects it did not find, so that what was
    judged is never mistaken for the whole environment."""
    results = [run(g) for g in given.found]
    return Each(command, tuple(results), given.env) if judged and given.env is not None else combine(command, results)
