"""The fixes' data in its built form (patchkit/fixes/build.py): each data folder's TOML files, parsed,
in one data.json beside them; what every command reads.  It is held to the TOML files here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.fixes import build
from patchkit.fixes.load import BUILT, FOLDERS, HERE, data_files, read_fix, read_fixes
from patchkit.fixes.modes import modes

ROOT = Path(__file__).resolve().parents[2]
SOURCE = (ROOT / "patchkit/fixes", ROOT / "patchkit/fixes/modes")
BROKEN = "a broken install (reinstall patchkit; in a source tree, `make fix-data`)"


@pytest.mark.parametrize("folder", SOURCE, ids=["fixes", "modes"])
def test_the_built_data_is_the_toml_files_parsed(folder: Path) -> None:
    """data.json in the source tree is what `make fix-data` writes from the TOML files beside it."""
    assert (folder / BUILT).read_bytes() == build.built(folder), f"{folder / BUILT} is stale: run make fix-data"
    doc = json.loads((folder / BUILT).read_bytes())
    assert list(doc["files"]) == sorted(p.name for p in folder.glob("*.toml"))
    assert doc["note"] == "Built from the TOML files beside this file by `make fix-data`: edit those, not this."


def test_the_installed_package_has_its_built_data() -> None:
    """The wheel holds data.json beside the TOML files, as the source tree does: a command reads it there."""
    for installed, source in zip(FOLDERS, SOURCE, strict=True):
        assert (installed / BUILT).read_bytes() == (source / BUILT).read_bytes()
        assert data_files(installed) == sorted(installed.glob("*.toml"))


def test_a_folder_nobody_built_is_read_from_its_toml_files(tmp_path: Path) -> None:
    """The same fixes, read from a copy of the TOML files without data.json (as a test's folder is)."""
    for name in [p.name for p in HERE.glob("*.toml")] + ["backports"]:
        (shutil.copytree if name == "backports" else shutil.copy)(HERE / name, tmp_path / name)
    assert not (tmp_path / BUILT).exists()
    assert read_fixes(tmp_path) == read_fixes()
    modes_copy = shutil.copytree(FOLDERS[1], tmp_path / "modes", ignore=shutil.ignore_patterns(BUILT))
    assert [m._replace(path=None) for m in modes(modes_copy)] == [m._replace(path=None) for m in modes()]


def test_a_file_its_folder_built_form_lacks_is_named(tmp_path: Path) -> None:
    (tmp_path / "my-fix.toml").write_text('title = "A fix"\n')
    (tmp_path / BUILT).write_text(json.dumps({"note": "", "files": {}}))
    with pytest.raises(BadInput) as caught:
        read_fix(tmp_path / "my-fix.toml")
    assert str(caught.value) == f"{tmp_path / 'my-fix.toml'}: not in {tmp_path / BUILT}, or not a table there: {BROKEN}"
    assert data_files(tmp_path) == []  # the built form lists what it holds


@pytest.mark.parametrize("text, why", [
    ("{", "not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
    ('{"note": ""}', "not the fixes' built data (no 'files' table)"),
    ('{"files": []}', "not the fixes' built data (no 'files' table)"),
    ("[]", "not the fixes' built data (no 'files' table)"),
])
def test_a_broken_built_form_is_one_line_naming_it(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / BUILT).write_text(text)
    with pytest.raises(BadInput) as caught:
        data_files(tmp_path)
    assert str(caught.value) == f"{tmp_path / BUILT}: {why}: {BROKEN}"


def test_building_a_folder_with_a_broken_toml_file_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('title = "A"\n')
    (tmp_path / "b.toml").write_text("title = \n")
    done = subprocess.run([sys.executable, "-m", "patchkit.fixes.build", str(tmp_path)], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"patchkit.fixes.build: {tmp_path / 'b.toml'}: not a readable TOML file (Invalid value "
                           "(at line 1, column 9))\n")
    assert not (tmp_path / BUILT).exists()
    (tmp_path / "b.toml").write_text('title = "B"\n')
    done = subprocess.run([sys.executable, "-m", "patchkit.fixes.build", str(tmp_path)], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert json.loads((tmp_path / BUILT).read_bytes())["files"] == {"a.toml": {"title": "A"}, "b.toml": {"title": "B"}}


def test_a_broken_install_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """The command with its package's data.json broken (a copy of the installed package): the line, no
    traceback and no "internal error", before the command line is read."""
    package = Path(build.__file__).resolve().parents[1]
    shutil.copytree(package, tmp_path / "patchkit", ignore=shutil.ignore_patterns("__pycache__"))
    broken = tmp_path / "patchkit/fixes" / BUILT
    broken.write_text('{"files": ')
    done = subprocess.run([sys.executable, "-m", "patchkit", "verify", str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"patchkit: {broken}: not JSON (Expecting value: line 1 column 11 (char 10)): {BROKEN}\n"
