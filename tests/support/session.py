"""What a run does once, before its test processes start (tests/conftest.py's hooks): the
order of the test files, and the test modules' rewritten bytecode.

- ``SLOW_FIRST``: the test files that take longest (their own time, set-up included), first.
  Under ``--dist loadfile`` each file runs whole in one process, in the order of the list the
  processes collect (make test passes ``--no-loadscope-reorder``: xdist would order the files
  by their number of tests).  A long file that starts last ends the run alone.
- ``rewrite_test_modules``: pytest rewrites each test module's asserts when it imports it, and
  caches the result beside it (``__pycache__/*-pytest-*.pyc``) unless PYTHONDONTWRITEBYTECODE
  is set, as CI sets it: then every process of the run rewrote every module again (3 s each).
  The run's first process writes them once, whatever the variable says; the others read them.
"""

from __future__ import annotations

import py_compile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

# Hand-kept, longest first: `make test` prints the slowest tests (docs/TESTING.md says how to
# measure a file's own time).  A file missing here runs after these, in collection order.
SLOW_FIRST = (
    "test_readme_recipes.py",  # one test of a minute: it must not start last
    "gpus/test_doctor.py",
    "test_real_releases.py",
    "reliability/test_failed_writes.py",
    "reliability/test_writes_stay_inside.py",
    "targets/test_editable_installs.py",
    "scan/test_real_gates.py",
    "test_rewriter_properties.py",
    "scan/test_compare.py",
    "scan/test_preprocessor.py",
    "releases/test_flashinfer_newest.py",
    "reliability/test_kills.py",
    "reliability/test_hostile_and_broken.py",
    "reliability/test_environment_transaction.py",
    "releases/test_newer_than_data.py",
    "fixes/test_fusion_self_enable_fix.py",
    "kernels/test_vllm_pcie_allreduce.py",
    "targets/test_crash_and_race.py",
    "targets/test_import_system.py",
    "test_packaging.py",
    "targets/test_local_version_wheels.py",
    "commands/test_installed_lifecycle.py",
    "reliability/test_races.py",
)


def slow_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: SLOW_FIRST's files first, in its order; the rest as collected."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}

    def key(item: pytest.Item) -> int:
        rel = Path(str(item.path)).relative_to(TESTS).as_posix() if Path(str(item.path)).is_relative_to(TESTS) else ""
        return rank.get(rel, len(SLOW_FIRST))

    items.sort(key=key)  # stable: the order within a file, and of the other files, stays


def rewrite_test_modules(config: pytest.Config) -> None:
    """Write the rewritten bytecode of every test module and conftest.py under tests/ where
    pytest looks for it, and compile tests/support/ (imported by every process, never
    rewritten).  Only time is at stake: anything unexpected (another pytest's internals)
    leaves it to each process, as before."""
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
        patterns = config.getini("python_files") or ["test_*.py"]
    except (ImportError, AttributeError, KeyError):
        return
    for fn in sorted(TESTS.rglob("*.py")):
        if "data" in fn.relative_to(TESTS).parts:
            continue
        if fn.parent.name == "support" and fn.parent.parent == TESTS:
            try:
                py_compile.compile(str(fn), doraise=True)
            except (OSError, py_compile.PyCompileError):
                pass
            continue
        if fn.name != "conftest.py" and not any(fn.match(p) for p in patterns):
            continue
        try:
            pyc = rewrite.get_cache_dir(fn) / (fn.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(fn, pyc) is not None or not rewrite.try_makedirs(pyc.parent):
                continue
            source_hash, co = rewrite._rewrite_test(fn, config)
            rewrite._write_pyc(state, co, source_hash, pyc)
        except (AttributeError, TypeError, OSError, SyntaxError):
            return
