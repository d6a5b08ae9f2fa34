"""The fixes' data files parsed at build time (patchkit/_build.py writes ``patchkit/fixes/_parsed.marshal`` into
the wheel): the installed package reads its TOML files from there, the document tomllib makes of
each, and parses any other text when it reads it; reading the fixes imports no TOML parser."""

from __future__ import annotations

import marshal
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit._build_steps import parsed_docs, prebuilt_fixes
from patchkit.errors import BadInput
from patchkit.fixes import load, prebuilt

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def test_every_data_file_is_parsed_into_the_wheel_as_tomllib_parses_it() -> None:
    files = sorted(load.HERE.glob("*.toml"))
    assert len(files) == 9  # projects, the four fixes, known failures, speedups, kernels and settings
    expected = {p.read_text(encoding="utf-8"): tomllib.loads(p.read_text(encoding="utf-8")) for p in files}
    assert load._built() == expected
    assert marshal.loads(parsed_docs(load.HERE)) == expected  # what the build step writes


def test_a_data_file_is_read_from_the_build_and_another_text_is_parsed(tmp_path: Path) -> None:
    fix = load.HERE / "torch-symm-mem.toml"
    doc = load._read(fix)
    assert doc is load._built()[fix.read_text(encoding="utf-8")]
    changed = tmp_path / "torch-symm-mem.toml"
    changed.write_text(fix.read_text(encoding="utf-8").replace('default = true', 'default = false'), encoding="utf-8")
    assert (doc["default"], load._read(changed)["default"]) == (True, False)
    assert load.read_fix(changed).default is False


def test_reading_the_fixes_imports_no_toml_parser(tmp_path: Path) -> None:
    code = "import sys; from patchkit.fixes import registry; print(len(registry.FIXES), 'tomllib' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert done.stdout == "4 False\n"  # four fixes since fusion-self-enable


# -- the fixes themselves, made at build time (fixes/prebuilt.py) -------------------------------


def _stored_copy(tmp_path: Path) -> Path:
    """A copy of the installed fixes folder, ``_fixes.marshal`` included."""
    folder = tmp_path / "fixes"
    shutil.copytree(load.HERE, folder, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    assert (folder / prebuilt.STORED).is_file()
    return folder


def test_the_stored_fixes_are_those_the_files_make_class_for_class() -> None:
    stored = prebuilt.read()
    made = load.read_fixes()
    assert stored is not None and list(stored) == list(made)  # the default fixes first, then by name
    assert prebuilt.encode(tuple(stored.values())) == prebuilt.encode(tuple(made.values()))  # each record's class too
    assert stored == made
    assert (load.HERE / prebuilt.STORED).read_bytes() == prebuilt.stored(load.HERE)  # what the build step writes


def test_the_registry_takes_the_stored_fixes_without_checking_a_rule(tmp_path: Path) -> None:
    code = ("from patchkit.fixes import load\n"
            "def refused(*args, **kwargs): raise AssertionError('a rule was checked')\n"
            "load._rule = refused\n"
            "from patchkit.fixes import registry\n"
            "print(list(registry.FIXES))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"{list(load.read_fixes())}\n"


@pytest.mark.parametrize("change", ["a fix edited", "a diff edited", "a fix added", "a fix removed", "nothing stored"])
def test_fixes_whose_files_changed_are_read_from_the_files(tmp_path: Path, change: str) -> None:
    folder = _stored_copy(tmp_path)
    fix = folder / "torch-symm-mem.toml"
    diff = next((folder / "backports").glob("*.diff"))
    if change == "a fix edited":
        fix.write_text(fix.read_text(encoding="utf-8").replace("default = true", "default = false"), encoding="utf-8")
    elif change == "a diff edited":
        diff.write_bytes(diff.read_bytes() + b" \n")
    elif change == "a fix added":
        shutil.copy(fix, folder / "torch-symm-mem-again.toml")
    elif change == "a fix removed":
        (folder / "fusion-self-enable.toml").unlink()
    else:
        (folder / prebuilt.STORED).unlink()
    assert prebuilt.read(folder) is None
    made = load.read_fixes(folder)  # what the registry falls back to
    assert made["torch-symm-mem"].default is (change != "a fix edited")
    assert ("torch-symm-mem-again" in made, "fusion-self-enable" in made) == (change == "a fix added", change != "a fix removed")
    assert prebuilt.read(_stored_copy(tmp_path / "again")) == load.read_fixes()  # an untouched copy: stored


def test_fixes_that_do_not_read_are_not_stored(tmp_path: Path) -> None:
    folder = _stored_copy(tmp_path)
    (folder / prebuilt.STORED).unlink()
    (folder / "torch-symm-mem.toml").write_text("title = 'no rules'\n", encoding="utf-8")
    assert prebuilt_fixes(folder) is False and not (folder / prebuilt.STORED).exists()
    with pytest.raises(BadInput):  # said when a command reads them
        load.read_fixes(folder)
