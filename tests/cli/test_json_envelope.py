"""One envelope for every --json document: ``schema``, ``command``, ``ok`` and the ``exit_code`` the
process exits with, whatever the command (and on a failure, the error document); apply, verify,
revert and status hold their targets in a ``targets`` list, one target too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpus.standin import standin

from support.cli import invoke
from support.repos import make_repo
from support.venvs import copy_venv

LOG = Path(__file__).resolve().parent.parent / "logs" / "data" / "h200-sglang-0.5.9-flashinfer-0.6.4.log"
FATBIN = Path(__file__).resolve().parent.parent / "kernels" / "data" / "sm120a-only.so"

# The default fixes by name: vLLM and SGLang 0.5.16 only warn without torch-symm-mem, so a plain apply leaves it
# out (no SM12x GPU has multicast); these tests check how a cc is written, not that verdict.
DEFAULTS = ("--fix", "deepgemm-sm12x", "--fix", "fusion-self-enable", "--fix", "torch-symm-mem")



@pytest.fixture(scope="module")
def venv(sglang_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_venv(sglang_venv, tmp_path_factory.mktemp("envelope") / "V")


def _commands(venv: Path, repo: Path, tmp: Path) -> list[tuple[str, ...]]:
    python = str(venv / "bin" / "python")
    commands = [
        ("fixes",),
        ("scan", str(repo)),
        ("status", "--python", python),
        ("verify", "--python", python),
        ("apply", "--python", python, "--dry-run"),
        ("revert", "--python", python, "--dry-run"),
        ("generate", "--repo", str(repo), "--out", str(tmp / "out")),
        ("diagnose", str(LOG)),
        ("doctor", "--python", python),
    ]
    if FATBIN.is_file():
        commands.append(("kernels", str(FATBIN), "--to-cc", "12.1"))
    return commands


TARGETED = ("status", "verify", "apply", "revert")


def test_every_json_document_has_schema_command_ok_and_the_exit_code(venv: Path, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    env = standin(tmp_path, "rtxpro6000-8pcie")
    seen = set()
    for args in _commands(venv, repo, tmp_path):
        done = invoke(*args, "--json", env=env)
        doc = json.loads(done.stdout)
        assert list(doc)[:4] == ["schema", "command", "ok", "exit_code"], args
        assert (doc["schema"], doc["command"]) == (2, args[0]), args
        assert (doc["ok"], doc["exit_code"]) == (done.returncode == 0, done.returncode), args
        if args[0] in TARGETED:
            assert isinstance(doc["targets"], list) and doc["targets"], args
        seen.add(done.returncode)
    assert {0, 1} <= seen  # documents of success and of problems alike (verify before apply exits 1)


def test_one_target_is_a_list_and_the_envelope_keeps_what_each_target_says(tmp_path: Path) -> None:
    """A checkout is one target: ``targets`` holds it all the same.  verify's verdict on a target is its
    ``in_effect``, never overwritten by the envelope's ``ok`` (the process's)."""
    repo = make_repo(tmp_path / "repo")
    for command in TARGETED:
        done = invoke(command, str(repo), "--json")
        doc = json.loads(done.stdout)
        assert [t["path"] for t in doc["targets"]] == [str(repo)], command
        assert "ok" not in doc["targets"][0] and "command" not in doc["targets"][0], command
    verified = json.loads(invoke("verify", str(repo), "--json", *DEFAULTS).stdout)  # reverted above: not in effect
    assert (verified["ok"], verified["exit_code"], verified["targets"][0]["in_effect"]) == (False, 1, False)
    assert invoke("apply", str(repo), *DEFAULTS).returncode == 0
    verified = json.loads(invoke("verify", str(repo), "--json").stdout)
    assert (verified["ok"], verified["exit_code"], verified["targets"][0]["in_effect"]) == (True, 0, True)


def test_a_failure_is_the_same_envelope(tmp_path: Path) -> None:
    done = invoke("verify", str(tmp_path / "nowhere"), "--json")
    assert done.returncode == 2
    doc = json.loads(done.stdout)
    assert doc == {"schema": 2, "command": "verify", "ok": False, "exit_code": 2,
                   "error": f"{tmp_path / 'nowhere'}: no such file or directory",
                   "path": str(tmp_path / "nowhere")}
