"""What a planner returns: a ``Plan`` and its ``Action`` (docs/ARCHITECTURE.md, "plan")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from patchkit.types import Applied, Change, Reason, Source, Status, StrEnum
from patchkit.values import Value

if TYPE_CHECKING:  # for the annotations only (nothing is checked against Note at run time)
    from typing import Protocol

    from patchkit.rewrite.found import Found

    class Note(Protocol):
        """What a plan notes on the way (``plan.reasons``): a value with its reason's code."""

        @property
        def code(self) -> Reason: ...


class Action(StrEnum):
    """What a plan writes, when it writes anything (else its ``Status`` says why not)."""

    APPLY = "apply"
    REVERT = "revert"


APPLY, REVERT = Action.APPLY, Action.REVERT


class Plan(Value):
    action: Action | Status
    source: Source | None = None  # where the patch comes from (None: nothing is)
    changes: Sequence[Change] = ()  # a list or a tuple
    applied: Applied | None = None
    notes: Sequence[Note] = ()  # plan.reasons: what the plan notes on the way
    tables: Sequence[Found] = ()  # each at its path
    # (path, lines added, lines removed) of each change that is the shipped patch's, as its hunks count them
    counted: tuple[tuple[str, int, int], ...] = ()
