"""Every failure mode's logs as users posted them (tests/logs/data/modes/NN-name/*.log, each with its
thread in that folder's SOURCES.toml): diagnose names that mode, and no other, in each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib

from patchkit.fixes.modes import modes
from support.cli import invoke

DATA = Path(__file__).resolve().parent / "data" / "modes"
LOGS = sorted(DATA.glob("*/*.log"))


def test_each_folder_is_a_mode_and_each_log_has_its_thread() -> None:
    names = {f"{m.survey:02d}-{m.name}" for m in modes()}
    for folder in [p for p in DATA.iterdir() if p.is_dir()] if DATA.is_dir() else []:
        assert folder.name in names, folder
        sources = tomllib.loads((folder / "SOURCES.toml").read_text())["logs"]
        assert sorted(s["file"] for s in sources) == sorted(p.name for p in folder.glob("*.log")), folder
        assert all(s["thread"] and s["url"] for s in sources), folder


@pytest.mark.parametrize("log", LOGS, ids=[f"{p.parent.name}/{p.name}" for p in LOGS])
def test_diagnose_names_the_mode_and_no_other(log: Path) -> None:
    mode = log.parent.name.split("-", 1)[1]
    done = invoke("diagnose", str(log), "--json")
    doc = json.loads(done.stdout)
    findings = [f for entry in doc["logs"] for f in entry["findings"]]
    assert done.returncode == 1, (log, findings)
    assert {f["mode"] for f in findings if f["kind"] != "effect"} == {mode}, [(f["name"], f["mode"]) for f in findings]
