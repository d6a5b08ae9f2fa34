"""Decide what apply and revert will write: pure, bytes and records in, a Plan out.

Nothing here reads or writes files; the commands gather the inputs and hand the
Plan's changes to the transaction.  This package only re-exports: ``plans`` (the ``Plan``),
``write_apply`` and ``write_revert`` (the planners), ``release`` (a state of another release);
``apply`` and ``verify`` decide at one target (docs/ARCHITECTURE.md, "plan").
"""

from __future__ import annotations

from patchkit.plan.plans import APPLY, REVERT, Action, Plan
from patchkit.plan.release import release_changed
from patchkit.plan.write_apply import from_shipped, generated, plan_apply
from patchkit.plan.write_revert import plan_revert

__all__ = ["APPLY", "REVERT", "Action", "Plan", "from_shipped", "generated", "plan_apply", "plan_revert", "release_changed"]
