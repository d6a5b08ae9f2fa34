"""docs/RELIABILITY.md tells what this suite runs: every count in its tables is computed
here from the suite's own constants, for the default size and for ``make test-reliability``.

When a constant changes, this test fails and prints the rows the document must hold.
"""

from __future__ import annotations

import test_fuzz_properties as fuzz
import test_hostile_and_broken as hostile
import test_kills as kills
import test_races as races
from conftest import ROOT
from crash_helpers import POINTS

DOC = ROOT / "docs" / "RELIABILITY.md"
RELIABILITY_KILLS = 400  # what `make test-reliability` sets PATCHKIT_KILLS to
COMMANDS = 4  # apply, verify, status, revert: each hostile tree and tampered state dir runs them all


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def expected_rows() -> list[str]:
    small, big = kills.kill_plan(kills.DEFAULT_KILLS), kills.kill_plan(RELIABILITY_KILLS)
    rows = [
        _row("**all kills**", sum(small.values()), sum(big.values())),
    ]
    for kind in small:
        rows.append(_row(kind, small[kind], big[kind]))
    for transition in kills.TRANSITIONS:
        rows.append(_row(f"`{transition}`", ", ".join(POINTS), len(POINTS)))
    for race in races.RACES:
        rows.append(_row(" + ".join(race), races.ROUNDS))
    rows += [
        _row("hostile or broken patch files and manifests (`apply --patches`, then verify, status, revert)", len(hostile.HOSTILE_PATCHES)),
        _row("symlinked folders and targets, every command", len(hostile.HOSTILE_TREES) * COMMANDS),
        _row("tampered journal or state.json, every command", len(hostile.TAMPERED_STATE) * COMMANDS),
        _row("broken sources (verify, apply, verify, status, revert)", len(hostile.BROKEN_SOURCES)),
        _row("broken checkouts (apply, verify, status, revert, upstream)", len(hostile.BROKEN_CHECKOUTS)),
        _row("a CRLF release through its shipped patch", 1),
        _row("a manifest whose pre-image hash is wrong: generated from the checkout instead", 1),
        _row("read-only target file: apply, verify, revert (as root, and as nobody)", 2),
        _row("unwritable or unreadable places, as nobody", len(hostile.UNWRITABLE)),
        _row("read-only `__pycache__`, as nobody", 1),
    ]
    for name, count in fuzz.EXAMPLES.items():
        rows.append(_row(name, count))
    return rows


def test_the_document_holds_the_suites_counts() -> None:
    text = DOC.read_text()
    missing = [row for row in expected_rows() if row not in text]
    assert not missing, "docs/RELIABILITY.md lacks these rows (or holds other numbers):\n" + "\n".join(missing)
    assert f"PATCHKIT_KILLS={RELIABILITY_KILLS}" in text
    assert f"default {kills.DEFAULT_KILLS}" in text
    for step in kills.UPSTREAM_STEPS:
        assert f"`{step}`" in text, step
