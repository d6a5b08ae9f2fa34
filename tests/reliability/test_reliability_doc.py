"""docs/RELIABILITY.md tells what this suite runs: every count in its tables is computed
here from the suite itself, for ``make test`` and for ``make test-reliability``.

- kills: the kill plan of test_kills.py at its default size and at the size the
  Makefile's test-reliability target sets (read from the Makefile);
- cases: the number of test items each test function yields (its parametrize marks),
  times the commands it runs each on, for every test of test_hostile_and_broken.py (a
  test without a row fails here) and of tests/targets/test_crash_and_race.py;
- races, rounds, fault points, upstream's steps and fuzz examples: the modules' constants.

When the suite changes, this test fails and prints the rows the document must hold.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import re
import sys

import test_fuzz_properties as fuzz
import test_hostile_and_broken as hostile
import test_kills as kills
import test_races as races
from conftest import ROOT
from crash_helpers import KILLS_ENV, POINTS

DOC = ROOT / "docs" / "RELIABILITY.md"
MAKEFILE = ROOT / "Makefile"


def _crash_and_race():
    """tests/targets/test_crash_and_race.py (imported under its pytest name if pytest has not yet)."""
    if "test_crash_and_race" in sys.modules:
        return sys.modules["test_crash_and_race"]
    spec = importlib.util.spec_from_file_location("test_crash_and_race", ROOT / "tests/targets/test_crash_and_race.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


crash = _crash_and_race()


def make_target(name: str) -> str:
    """The recipe lines of a Makefile target."""
    match = re.search(rf"^{re.escape(name)}:.*\n((?:\t.*\n)+)", MAKEFILE.read_text(), re.M)
    assert match, f"no target {name} in the Makefile"
    return match.group(1)


def reliability_kills() -> int:
    """What ``make test-reliability`` sets PATCHKIT_KILLS to."""
    found = re.findall(rf"\b{KILLS_ENV}=(\d+)", make_target("test-reliability"))
    assert len(found) == 1, found
    return int(found[0])


def cases(test) -> int:
    """How many test items pytest makes of ``test``: the product of its parametrize marks."""
    marks = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
    return math.prod(len(m.args[1]) for m in marks)


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


# test_hostile_and_broken.py: row -> (test, how many commands each of its cases runs that the row counts)
HOSTILE_ROWS = {
    "hostile or broken patch files and manifests (`apply --patches`, then verify, status, revert)":
        (hostile.test_hostile_or_broken_patch_is_refused_before_any_write, 1),
    "symlinked folders and targets, every command": (hostile.test_symlinks_are_refused_by_every_command, len(hostile.EVERY_COMMAND)),
    "tampered journal or state.json, every command": (hostile.test_tampered_state_dir, len(hostile.EVERY_COMMAND)),
    "broken sources (verify, apply, verify, status, revert)": (hostile.test_broken_sources, 1),
    "broken checkouts (apply, verify, status, revert, upstream)": (hostile.test_broken_checkouts, 1),
    "a CRLF release through its shipped patch": (hostile.test_crlf_release_through_a_shipped_patch, 1),
    "a manifest whose pre-image hash is wrong: generated from the checkout instead":
        (hostile.test_manifest_pre_sha256_wrong_falls_back_to_the_checkouts_own_files, 1),
    "read-only target file: apply, verify, revert (as root, and as nobody)": (hostile.test_read_only_target_file_is_replaced_and_keeps_its_mode, 1),
    "unwritable or unreadable places, as nobody": (hostile.test_unwritable_places_are_refused_with_nothing_written, 1),
    "nothing to do on a read-only target: exit 0, no lock taken, as nobody": (hostile.test_nothing_to_do_on_a_read_only_target_is_exit_0, 1),
    "read-only `__pycache__`, as nobody": (hostile.test_read_only_pycache_never_leaves_a_transaction_stuck, 1),
}

CRASH_ROWS = {
    "apply or revert of the shipped patch killed at each fault point, then apply or revert":
        crash.test_kill_at_each_fault_point_then_finish,
    "killed inside an atomic write (before its rename), then apply or revert": crash.test_kill_inside_an_atomic_write_leaves_no_temp_file,
    "a kill inside the recovery, recovered too": crash.test_a_kill_during_recovery_is_recovered_too,
}


def hostile_count(test, commands: int) -> int:
    if test is hostile.test_read_only_target_file_is_replaced_and_keeps_its_mode:
        return len(hostile.ALL_USERS)  # the machine without setpriv runs it as itself, once
    return cases(test) * commands


def expected_rows() -> list[str]:
    small, big = kills.kill_plan(kills.DEFAULT_KILLS), kills.kill_plan(reliability_kills())
    rows = [_row("**all kills**", sum(small.values()), sum(big.values()))]
    rows += [_row(kind, small[kind], big[kind]) for kind in small]
    rows += [_row(f"`{transition}`", ", ".join(POINTS), len(POINTS)) for transition in kills.TRANSITIONS]
    rows += [_row(label, cases(test)) for label, test in CRASH_ROWS.items()]
    rows += [_row(" + ".join(race), crash.ROUNDS) for race in crash.RACES]
    rows += [_row(" + ".join(race), races.ROUNDS) for race in races.RACES]
    rows += [_row(label, hostile_count(test, commands)) for label, (test, commands) in HOSTILE_ROWS.items()]
    rows += [_row(name, count) for name, count in fuzz.EXAMPLES.items()]
    return rows


def test_the_document_holds_the_suites_counts() -> None:
    text = DOC.read_text()
    missing = [row for row in expected_rows() if row not in text]
    assert not missing, "docs/RELIABILITY.md lacks these rows (or holds other numbers):\n" + "\n".join(missing)
    assert f"`{KILLS_ENV}={reliability_kills()}`" in text
    assert f"(default {sum(kills.kill_plan(kills.DEFAULT_KILLS).values())} kills)" in text
    for step in kills.UPSTREAM_STEPS:
        assert f"`{step}`" in text, step


def test_make_test_runs_the_default_size() -> None:
    """``make test`` leaves PATCHKIT_KILLS alone: the document's default column is what it runs."""
    assert KILLS_ENV not in make_target("test")
    assert "reliability" in make_target("test-reliability")


def test_every_hostile_test_has_its_row() -> None:
    tests = {f for name, f in inspect.getmembers(hostile, inspect.isfunction) if name.startswith("test_")}
    assert tests == {test for test, _ in HOSTILE_ROWS.values()}


def test_the_counts_are_of_the_tests_themselves() -> None:
    """The helpers above count what pytest runs: a parametrized test, a plain one, a product."""
    assert cases(hostile.test_hostile_or_broken_patch_is_refused_before_any_write) == len(hostile.HOSTILE_PATCHES)
    assert cases(hostile.test_crlf_release_through_a_shipped_patch) == 1
    assert cases(crash.test_kill_at_each_fault_point_then_finish) == 2 * len(POINTS) * 2  # op, point, then
    assert sum(kills.kill_plan(kills.DEFAULT_KILLS).values()) == kills.DEFAULT_KILLS
