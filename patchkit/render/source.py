"""Where a patch came from, in words (``types.Source``): what apply, revert and status say of it,
and what their --json carries (the words earlier patchkits saved in state.json)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from patchkit.rewrite.backported import phrased_json
from patchkit.types import Files, FromShipped, Generated, Recognised, Recorded

if TYPE_CHECKING:
    from patchkit.types import Applied, Source

_FILES = {Files.CHECKOUT: "the checkout's files", Files.INSTALLED: "the installed files"}


def source_words(source: Source | None) -> object:
    """The words of ``source``; "" for none; a state's own source (``Recorded``) as it was written
    (whatever JSON value it was: text for its words, that value again in --json)."""
    if source is None:
        return ""
    if isinstance(source, FromShipped):
        return f"shipped patch {source.name}"
    if isinstance(source, Generated):
        return f"generated from {_FILES[source.from_]}"
    if isinstance(source, Recognised):
        return f"shipped patch {source.name} (recognised from the files; no patchkit state)"
    assert isinstance(source, Recorded)
    return source.text


def applied_json(applied: Applied) -> dict[str, object]:
    """A recorded state (``types.Applied``) as --json shows it: as state.json holds it, its source in words
    and what a backport found in its phrases (``rewrite.backported.phrased_json``)."""
    files = [dict(f._asdict(), tables=[phrased_json(t) if isinstance(t, dict) else t for t in f.tables]) for f in applied.files]
    return dict(applied.to_json(), source=source_words(applied.source), files=files)
