"""The fixes' data files parsed at build time (patchkit/_build.py writes ``patchkit/fixes/_parsed.marshal`` into
the wheel): the installed package reads its TOML files from there, the document tomllib makes of
each, and parses any other text when it reads it; reading the fixes imports no TOML parser."""

from __future__ import annotations

import marshal
import subprocess
import sys
from pathlib import Path

from patchkit._build_steps import parsed_docs
from patchkit.fixes import load

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
