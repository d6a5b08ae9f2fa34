"""Each command's --help says what it does: ``--python`` of verify, status, revert and doctor
said "Patch the package installed for this interpreter"; ``generate --repo`` said "SGLang git
repository" whatever ``--project``; ``--project`` said "sglang with --python", where every
installed project is the target."""

from __future__ import annotations

import re

import pytest

from support.cli import invoke


def _option_help(command: str, option: str) -> str:
    """The help text of ``option`` in ``patchkit COMMAND --help``, its lines joined."""
    text = invoke(command, "--help").stdout.decode()
    match = re.search(rf"^  {re.escape(option)}(?: [^\n]*)?\n(?:^ {{20,}}[^\n]*\n)*", text, re.M)
    assert match, (command, option, text)
    return " ".join(match.group(0).split())


@pytest.mark.parametrize("command,verb", [
    ("apply", "Patch"), ("verify", "Verify"), ("status", "Show"), ("revert", "Revert"), ("doctor", "Judge the fixes for"),
])
def test_python_says_what_the_command_does(command: str, verb: str) -> None:
    assert _option_help(command, "--python EXE") == (
        f"--python EXE {verb} every project patchkit knows that is installed for this interpreter (instead of PATH).")


@pytest.mark.parametrize("command", ["apply", "verify", "status", "revert", "doctor"])
def test_project_says_what_python_finds(command: str) -> None:
    said = _option_help(command, "--project [flashinfer|sglang|vllm]")
    assert said.endswith("[default: recognised from PATH; with --python, every project installed there].")


def test_generate_repo_is_the_repository_of_the_project() -> None:
    said = _option_help("generate", "--repo PATH")
    assert said == ("--repo PATH The git repository of the --project, with a tag per release [default: "
                    "$PATCHKIT_SGLANG_REPO, else ~/sglang, for any --project].")


def test_doctor_to_cc_takes_a_compute_capability() -> None:
    """doctor's --to-cc took only ``auto``: a host without GPUs (an image build) could not be judged."""
    assert _option_help("doctor", "--to-cc CC|auto") == (
        "--to-cc CC|auto The GPUs to judge for: auto (those nvidia-smi shows), or a compute capability (12, 12.0, 12.1) "
        "judged as given, with no GPU needed (an image build has none). [default: auto]")
    text = " ".join(invoke("doctor", "--help").stdout.decode().split())
    assert "with no GPU seen and no --to-cc, the projects and fixes are still shown, and the exit is 2." in text


def test_patchkit_help_says_what_patchkit_is() -> None:
    """It patches SGLang, FlashInfer and vLLM (not SGLang alone), for the Blackwell workstation and edge GPUs."""
    done = invoke("--help")
    assert done.returncode == 0
    text = done.stdout.decode()
    about = " ".join(text[text.index("\n\n") + 2:text.index("\n\nOptions:")].split())
    assert about == ("The source patches SGLang, FlashInfer and vLLM need on Blackwell workstation and edge GPUs (RTX PRO 6000:"
                     " compute capability 12.0; GB10: 12.1): what this machine needs (doctor), a crash named from its log"
                     " (diagnose, watch), the fixes applied, verified and reverted as one transaction, and sent upstream.")
