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


# How a sign's text names the SM12x GPU, and the same text of another GPU (an H100/H200, a T4, a B200).
OTHER_GPU = ((b"sm_121a", b"sm_100a"), (b"sm_120a", b"sm_90a"), (b"sm_121", b"sm_100"), (b"sm_120", b"sm_90"),
             (b"capability: 120", b"capability: 75"), (b"capability 12.0", b"capability 9.0"), (b"SM120", b"SM90"),
             (b"SM121", b"SM100"))


def test_a_healthy_log_names_no_mode(tmp_path: Path) -> None:
    """A start that reached its ready line and served (SGLang's and vLLM's real lines, tests/logs/real_text.py),
    and a crash of another cause: nothing of any mode."""
    from logs import real_text as r

    healthy = tmp_path / "healthy.log"
    healthy.write_bytes(r.log(*r.START, *r.LOAD, *r.CAPTURE, *r.CAPTURED, *r.READY, r.ACCESS, r.DECODE, *r.VLLM_SERVE,
                              *r.UNRELATED))
    done = invoke("diagnose", str(healthy), "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 0 and [f for entry in doc["logs"] for f in entry["findings"]] == []


def test_the_same_texts_of_other_gpus_name_no_mode(tmp_path: Path) -> None:
    """Each sign whose text names the SM12x GPU, as another GPU's log says it (a ptxas refusing sm_100a,
    a kernel missing for capability 75): no finding of that mode, in a traceback or on a line of its own."""
    swapped = []
    for mode in modes():
        for sign in mode.signs:
            text = sign.text.encode()
            for ours, theirs in OTHER_GPU:
                if ours in text:
                    swapped.append((mode.name, text.replace(ours, theirs)))
                    break
    assert swapped, "no sign names the SM12x GPU: this test would hold nothing"
    for mode, text in swapped:
        log = tmp_path / "other.log"
        log.write_bytes(b"Traceback (most recent call last):\n  File \"/x/y.py\", line 1, in f\nRuntimeError: " + text
                        + b"\nINFO: " + text + b"\n")
        doc = json.loads(invoke("diagnose", str(log), "--json").stdout)
        assert [f["mode"] for entry in doc["logs"] for f in entry["findings"] if f["mode"] == mode] == [], (mode, text)


def test_with_python_the_ways_out_are_those_of_the_releases_installed(prebuilt) -> None:
    """diagnose --python: a failure mode's ways out are those that fit the releases that environment has installed
    (as doctor offers them): FlashInfer 0.6.4 gets the patch and the upgrades past it, not 0.7.4's way for 0.6.7 to
    0.7.3; FlashInfer 0.7.4, past every one, gets none; without --python, every way out is said.  watch says the same."""
    from support.mirror import default_cache, fetch_wheel

    log = Path(__file__).parent / "data/modes/22-flashinfer-jit-arch-list/sglang-13342.log"

    def ways(*python: str, command: str = "diagnose") -> list[str]:
        done = invoke(command, str(log), *python, *(("--timeout", "1") if command == "watch" else ()))
        assert done.returncode == (1 if command == "diagnose" else 124), done.stderr  # watch: no ready line in it
        said = [line.split("way out: ", 1)[1] for line in done.stdout.decode().splitlines() if "way out: " in line]
        return [": ".join(way.split(": ")[:2]) for way in said]  # the kind and what it names

    every = ["patch: patchkit apply --fix allreduce-fusion", "upgrade: flashinfer-python 0.6.7 or later",
             "upgrade: flashinfer-python 0.6.17 or later", "upgrade: flashinfer-python 0.7.4 or later"]
    assert ways() == every
    old = prebuilt.venv(fetch_wheel("0.6.4", default_cache(), "flashinfer-python"))
    assert ways("--python", str(old / "bin/python")) == every[:3]
    new = prebuilt.venv(fetch_wheel("0.7.4", default_cache(), "flashinfer-python"))
    assert ways("--python", str(new / "bin/python")) == ["none known for the releases installed"]
    assert ways("--python", str(new / "bin/python"), command="watch") == ["none known for the releases installed"]
    assert ways("--python", str(old / "bin/python"), command="watch") == every[:3]
