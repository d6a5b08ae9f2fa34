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

import test_environment_transaction as environment
import test_failed_writes as failed
import test_fuzz_properties as fuzz
import test_hostile_and_broken as hostile
import test_kills as kills
import test_races as races
import test_rewriter_properties as rewriter
import test_writes_stay_inside as inside

from support.crash import FULL_KILLS, KILLS_ENV, POINTS
from support.repos import ROOT

DOC = ROOT / "docs" / "RELIABILITY.md"
MAKEFILE = ROOT / "Makefile"


def _load(rel: str):
    """A test module of another folder (imported under its pytest name if pytest has not yet)."""
    name = rel.rsplit("/", 1)[-1].removesuffix(".py")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / rel)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


crash = _load("targets/test_crash_and_race.py")
interrupt = _load("cli/test_interrupt_and_crash.py")
os_errors = _load("cli/test_os_errors.py")
log_output = _load("commands/test_log_output.py")
log_streams = _load("commands/test_log_streams.py")
watch_ready = _load("commands/test_watch_ready.py")


def make_target(name: str) -> str:
    """The recipe lines of a Makefile target."""
    match = re.search(rf"^{re.escape(name)}:.*\n((?:\t.*\n)+)", MAKEFILE.read_text(), re.M)
    assert match, f"no target {name} in the Makefile"
    return match.group(1)


def reliability_kills() -> int:
    """What ``make test-reliability`` sets PATCHKIT_KILLS to: the suite's full size (every sweep whole) or more."""
    found = re.findall(rf"\b{KILLS_ENV}=(\d+)", make_target("test-reliability"))
    assert len(found) == 1, found
    assert int(found[0]) >= FULL_KILLS, found
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
    "revert after apply on a read-only target: refused, nothing changed, as nobody":
        (hostile.test_revert_on_a_read_only_target_refuses_as_apply_does, 1),
}

CRASH_ROWS = {
    "apply or revert of the shipped patch killed at each fault point, then apply or revert":
        crash.test_kill_at_each_fault_point_then_finish,
    "killed inside an atomic write (before its rename), then apply or revert": crash.test_kill_inside_an_atomic_write_leaves_no_temp_file,
    "a kill inside the recovery, recovered too": crash.test_a_kill_during_recovery_is_recovered_too,
}


# Writes, failed writes and interrupts: row -> how many cases (commands, for the probes that run several).
WRITE_ROWS = {
    "a link committed at the old temp name (wheel, checkout): apply, verify, revert":
        cases(inside.test_a_committed_symlink_at_the_old_temp_name_is_never_followed),
    "a symlinked lock (wheel, checkout, plain folder): apply, revert":
        cases(inside.test_a_symlinked_lock_is_refused) * len(inside.LOCK_COMMANDS),
    "a symlinked state dir, to a folder, a file or nothing (wheel, checkout, plain folder): apply, verify, status, revert":
        cases(inside.test_a_symlinked_state_dir_is_refused) * len(inside.STATE_DIR_COMMANDS),
    "a link in the state dir (state.json, objects/, aside/, a temp name): revert, apply --all-fixes, apply":
        cases(inside.test_a_symlink_inside_the_state_dir_is_refused) * len(inside.INSIDE_COMMANDS),
    "every path opened for writing recorded (wheel, checkout): apply --all-fixes, status, verify, apply --fix, revert":
        cases(inside.test_nothing_outside_the_target_and_its_state_dir_is_opened_for_writing) * len(inside.RECORDED_COMMANDS),
    "generate into an --out whose version folder is a link": cases(inside.test_generate_refuses_a_symlinked_version_folder),
    "the write at each step of apply and revert fails as on a full disk (`PATCHKIT_FAULT=enospc@<point>`)":
        cases(failed.test_a_write_that_fails_at_each_step),
    "a file-size limit (RLIMIT_FSIZE) below an original: before the journal":
        cases(failed.test_a_file_size_limit_before_the_journal_changes_nothing),
    f"a real tmpfs filled up to its last k free pages, k from 0 to {failed.PAGES - 1}, apply and revert: every other k and "
    f"the last (`{KILLS_ENV}={FULL_KILLS}`: every k, {cases(failed.test_a_disk_that_fills_up_at_every_page) * failed.PAGES})":
        cases(failed.test_a_disk_that_fills_up_at_every_page) * len(failed.SAMPLED_PAGES),
    "Ctrl-C while importing, while nvidia-smi hangs (doctor, apply --to-cc auto), while the `--python` probe hangs, "
    "while waiting for the lock, while watch follows a log": sum(cases(t) for t in (
        interrupt.test_ctrl_c_while_the_command_line_is_imported, interrupt.test_ctrl_c_while_nvidia_smi_hangs,
        interrupt.test_ctrl_c_while_the_interpreter_probe_hangs, interrupt.test_ctrl_c_while_waiting_for_the_lock,
        interrupt.test_ctrl_c_while_watch_follows_a_log)),
    "Ctrl-C inside a callback Python runs on its own (a weak reference's), at the start and later: exit 130 or raised "
    "again in patchkit's code, no "
    "\"Exception ignored\"": cases(interrupt.test_ctrl_c_in_a_callback_python_runs_is_raised_in_patchkits_code)
    + cases(interrupt.test_ctrl_c_in_a_callback_while_patchkit_starts_ends_it),
    "Ctrl-C while a class statement runs (Python 3.11 wraps it in a RuntimeError), in a command and while click parses: "
    "exit 130, not an internal error": cases(interrupt.test_a_ctrl_c_python_wrapped_while_a_class_was_made_is_an_interrupt)
    + cases(interrupt.test_interrupt_in_finds_the_ctrl_c_behind_a_wrapped_error),
    "an exception patchkit did not expect (MemoryError, RecursionError, a bug), as lines and --json; one in click's parsing":
        cases(interrupt.test_an_unexpected_exception_is_one_line_and_exit_70) * 2
        + cases(interrupt.test_an_unexpected_exception_outside_a_command_is_exit_70),
    "an OSError: a log linked to /proc/self/mem (diagnose, watch), a log that becomes a folder (watch)": sum(
        cases(t) for name, t in inspect.getmembers(os_errors, inspect.isfunction) if name.startswith("test_")),
}


# Logs: row -> the tests it counts (LOG_ROWS names every test of the three modules that reads a log).
LOG_ROWS = {
    "control characters in a log (an OSC 52, ESC, BEL, NUL, a C1 CSI): diagnose piped, on a terminal, --json; "
    "watch piped, on a terminal": (
        log_output.test_diagnose_escapes_what_the_log_says_piped, log_output.test_diagnose_escapes_what_the_log_says_on_a_terminal,
        log_output.test_diagnose_json_keeps_the_text, log_output.test_watch_escapes_the_last_lines_and_the_crash,
        log_output.test_watch_escapes_on_a_terminal),
    "frame paths that need quoting (a space, `;`, `$(...)`, a quote), and `--python` at a path with a space": (
        log_output.test_run_commands_are_shell_quoted, log_output.test_python_commands_are_shell_quoted),
    "a FIFO with no writer or a silent one, /dev/zero as a log and as standard input: diagnose, watch": (
        log_streams.test_watch_a_fifo_that_nothing_writes_to_times_out, log_streams.test_watch_a_fifo_a_server_writes_to,
        log_streams.test_diagnose_a_fifo_that_nothing_writes_to, log_streams.test_diagnose_reads_a_fifo_to_its_end,
        log_streams.test_diagnose_dev_zero_stops, log_streams.test_diagnose_standard_input_from_dev_zero_stops,
        log_streams.test_watch_dev_zero_until_the_time_out),
    "a `--timeout` that is no finite number above 0 (nan, inf, -inf, -1, 0, soon), as a line and as --json": (
        log_streams.test_a_timeout_that_is_no_finite_positive_number,),
    "the ready line of the project: SGLang's warm-up crash after uvicorn's line, SGLang's and vLLM's ready lines": (
        watch_ready.test_an_sglang_warm_up_that_crashes_after_uvicorns_startup_line, watch_ready.test_sglang_is_ready_at_its_own_line,
        watch_ready.test_vllm_is_ready_at_uvicorns_line),
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
    rows += [_row(" + ".join(race), *races.RACE_ROUNDS) for race in races.RACES]
    rows += [_row(label, small, big) for label, (small, big) in environment.ROWS.items()]
    rows += [_row(label, hostile_count(test, commands)) for label, (test, commands) in HOSTILE_ROWS.items()]
    rows += [_row(name, count) for name, count in fuzz.EXAMPLES.items()]
    rows += [_row(name, *counts) for name, counts in rewriter.EXAMPLES.items()]
    rows += [_row(label, count) for label, count in WRITE_ROWS.items()]
    rows += [_row(label, sum(cases(t) for t in tests)) for label, tests in LOG_ROWS.items()]
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
    """``make test`` leaves PATCHKIT_KILLS alone: the document's default column is what it runs;
    ``make test-reliability`` runs the suite, and the rewriter's properties at their full count."""
    assert KILLS_ENV not in make_target("test")
    assert "tests/reliability " in make_target("test-reliability")
    assert "tests/test_rewriter_properties.py" in make_target("test-reliability")


def test_every_hostile_test_has_its_row() -> None:
    tests = {f for name, f in inspect.getmembers(hostile, inspect.isfunction) if name.startswith("test_")}
    assert tests == {test for test, _ in HOSTILE_ROWS.values()}


def test_every_write_and_interrupt_test_is_counted() -> None:
    """A new test of writes, failed writes or interrupts gets a row (WRITE_ROWS names every one)."""
    source = inspect.getsource(sys.modules[__name__])
    for module in (inside, failed, interrupt, os_errors):
        for name, _ in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("test_") and module is not os_errors:
                assert f".{name}" in source, f"{module.__name__}.{name} has no row in WRITE_ROWS"


def test_every_log_test_is_counted() -> None:
    """A new test of hostile logs gets a row (the record-format checks of test_watch_ready.py aside)."""
    counted = {t for tests in LOG_ROWS.values() for t in tests}
    for module in (log_output, log_streams, watch_ready):
        for name, test in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("test_") and name not in ("test_sglangs_records", "test_what_is_no_sglang_record"):
                assert test in counted, f"{module.__name__}.{name} has no row in LOG_ROWS"


def test_the_counts_are_of_the_tests_themselves() -> None:
    """The helpers above count what pytest runs: a parametrized test, a plain one, a product."""
    assert cases(hostile.test_hostile_or_broken_patch_is_refused_before_any_write) == len(hostile.HOSTILE_PATCHES)
    assert cases(hostile.test_crlf_release_through_a_shipped_patch) == 1
    assert cases(crash.test_kill_at_each_fault_point_then_finish) == 2 * len(POINTS) * 2  # op, point, then
    assert sum(kills.kill_plan(kills.DEFAULT_KILLS).values()) == kills.DEFAULT_KILLS
