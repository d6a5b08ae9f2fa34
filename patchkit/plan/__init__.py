"""Decide what apply and revert will write: pure, bytes and records in, a Plan out.

Nothing here reads or writes files; the commands gather the inputs and hand the Plan's changes to
the transaction.  ``plans`` (the ``Plan``), ``write_apply`` and ``write_revert`` (the planners),
``release`` (a state of another release); ``apply`` and ``verify`` decide at one target
(docs/ARCHITECTURE.md, "plan").  Each is imported from its own module: a command imports the
planner it runs, not the other's.
"""
