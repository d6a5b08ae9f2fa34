"""make demo shows verify failing before the patch: that step checks for exactly exit 1 (the Makefile's
``expect``), so make prints no "Error 1 (ignored)" for it, and any other exit stops the demo."""

from __future__ import annotations

import re
import subprocess

from support.repos import ROOT


def _make(recipe: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "--no-print-directory", "-C", str(ROOT), "--eval", f"x-expect: ; {recipe}",
                           "x-expect"], capture_output=True, text=True, timeout=60)


def test_the_expected_failure_is_no_make_error() -> None:
    done = _make('$(call expect,1,sh -c "echo verify said so; exit 1")')
    assert (done.returncode, done.stdout, done.stderr) == (0, "verify said so\n", "")


def test_any_other_exit_stops_the_recipe() -> None:
    for code in (0, 2):
        done = _make(f'$(call expect,1,sh -c "exit {code}")')
        assert done.returncode == 2 and done.stderr.startswith(f"expected exit 1, got {code}: sh -c exit {code}\n"), done


def test_the_demo_ignores_no_error() -> None:
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert "$(call expect,1,$(PK) verify $(DEMO)/sglang)" in recipe
    assert not [line for line in recipe.splitlines() if line.startswith("\t-")]
