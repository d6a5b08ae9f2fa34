"""The first ``patchkit doctor`` a new user types (issue 41, D15): no argument, in a folder with no
project.  doctor shows the GPUs it saw and says what to give it (the Python the server runs with),
exit 2 with one line on stderr; a PATH named that holds no project stays one line."""

from __future__ import annotations

import json
from pathlib import Path

from standin import no_nvidia_smi, standin

from support.cli import invoke

NO_PROJECT = ("not an SGLang, vLLM or FlashInfer checkout or installed package (no python/sglang/, vllm/ or flashinfer/ folder, "
              "no package with a dist-info)")
TODO = ("to judge the server's environment, give its Python: patchkit doctor --python EXE (a virtualenv's bin/python, "
        "python3 in an image); or a checkout: patchkit doctor PATH")
FAILS = f"patchkit: .: {NO_PROJECT}; give --python EXE, the Python the server runs with"


def test_no_argument_in_an_empty_folder_shows_the_gpus_and_what_to_do(tmp_path: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    done = invoke("doctor", env=standin(tmp_path, "rtxpro6000-8pcie"), cwd=folder)
    lines = done.stdout.decode().splitlines()
    assert done.returncode == 2, done.stderr
    assert lines[0] == f"GPUs ({tmp_path}/bin/nvidia-smi):"
    assert lines[1] == "  GPU0  NVIDIA RTX PRO 6000 Blackwell Workstation Edition  cc 12.0 (SM120)  00000000:01:00.0"
    assert lines[9].startswith("links: every pair through PCIe")
    assert lines[10:] == ["", f"no project here: .: {NO_PROJECT}", TODO]
    assert done.stderr.decode().splitlines() == [FAILS]
    doc = json.loads(invoke("doctor", "--json", env=standin(tmp_path, "rtxpro6000-8pcie"), cwd=folder).stdout)
    assert (doc["exit_code"], doc["ok"], len(doc["machine"]["gpus"]), doc["targets"]) == (2, False, 8, [])
    assert doc["error"] == FAILS.removeprefix("patchkit: ")


def test_no_argument_and_no_gpu(tmp_path: Path) -> None:
    done = invoke("doctor", env=no_nvidia_smi(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout.decode().splitlines() == [
        "no GPU seen: nvidia-smi is not on PATH: no NVIDIA driver here, or its tools are not on PATH", "",
        f"no project here: .: {NO_PROJECT}", TODO]
    assert done.stderr.decode().splitlines() == [FAILS]


def test_a_path_named_that_holds_no_project_is_one_line(tmp_path: Path) -> None:
    done = invoke("doctor", str(tmp_path), env=standin(tmp_path / "smi", "gb10"))
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode().splitlines() == [f"patchkit: {tmp_path}: {NO_PROJECT}"]
