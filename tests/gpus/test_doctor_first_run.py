"""What a new user meets first in doctor (issue 41).  D15: ``patchkit doctor`` with no argument, in a
folder with no project, shows the GPUs it saw and says what to give it (the Python the server runs
with), exit 2 with one line on stderr; a PATH named that holds no project stays one line.  D12: a
backport's lack names its files once; docs/REFERENCE.md's image-build example prints as shown."""

from __future__ import annotations

import json
from pathlib import Path

from standin import no_nvidia_smi, standin
from test_doctor import env_of
from test_doctor import venvs as venvs  # noqa: F401, F811 (the fixture)

from support.cli import invoke

NO_PROJECT = ("not an SGLang, vLLM or FlashInfer checkout or installed package (no python/sglang/, vllm/ or flashinfer/ folder, "
              "no package with a dist-info)")
TODO = ("to judge the server's environment, give its Python: patchkit doctor --python EXE (a virtualenv's bin/python, "
        "python3 in an image); or a checkout: patchkit doctor PATH")
BACKPORT_064 = ("  allreduce-fusion (opt-in): not applied: FlashInfer PR 3903 is missing from all 8 of its files (trtllm_allreduce.cu, "
                "aot.py, trtllm_ar.py, comm.py, trtllm_allreduce.cuh, trtllm_allreduce_fusion.cuh, trtllm_moe_allreduce_fusion.cuh, "
                "utils.cuh)")
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


def test_doctor_names_the_files_a_backport_lacks(tmp_path: Path, venvs) -> None:  # noqa: F811
    """FlashInfer 0.6.4 lacks FlashInfer PR 3903: the line names the change once and the files that lack it
    (it said "FlashInfer PR 3903 lacks '2 hunks'; FlashInfer PR 3903 lacks '1 hunk'; ..." with no file)."""
    _, python = env_of(tmp_path, venvs, "0.5.9", "0.6.4")
    lines = invoke("doctor", "--python", python, env=standin(tmp_path, "rtxpro6000-8pcie")).stdout.decode().splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith("flashinfer_python-0.6.4.dist-info"))
    assert lines[start + 1] == BACKPORT_064
    # A change of one file: that file.
    [deepgemm] = [line for line in lines if line.startswith("  deepgemm-sm12x")]
    assert deepgemm == ("  deepgemm-sm12x (on by default): needed here, not applied: SGLang 0.5.13's change is missing from configurer.py; "
                        "sm_version == 120 lacks 121")


def test_the_reference_image_build_example_prints_as_shown(tmp_path: Path, venvs) -> None:  # noqa: F811
    """docs/REFERENCE.md's doctor --to-cc 12 with no GPU (sglang 0.5.9 in V): every line it shows is printed, in
    its order ("..." stands for lines left out).  It said "how the GPUs are linked is not known (none measured)"
    where doctor names the products of the cc, which have no NVLink."""
    from support.repos import ROOT

    venv, _ = env_of(tmp_path, venvs, "0.5.9", None)
    text = (ROOT / "docs/REFERENCE.md").read_text()
    start = text.index("$ patchkit doctor --python V/bin/python --to-cc 12\n")
    shown = text[start:text.index("$ echo $?", start)].splitlines()[1:]
    done = invoke("doctor", "--python", "V/bin/python", "--to-cc", "12", env=no_nvidia_smi(tmp_path), cwd=tmp_path)
    printed = done.stdout.decode().replace(f"{venv}/", "V/").splitlines()
    assert done.returncode == 1
    at = 0
    for line in shown:
        if line != "...":
            assert line in printed[at:], (line, printed)
            at = printed.index(line, at) + 1
