"""The settings on the GPUs nvidia-smi shows (issue 41, D5): a plain ``verify --python`` on a GB10
judges them as ``--to-cc 12.1`` does, and says "only a setting is missing" with its own exit code (5);
``doctor --format env`` prints the ``export`` lines a launch script evals.

The environment: vLLM 0.33.0's real files (a sparse copy, from the session's release of its source
archive: the files its fixes and settings read, and a dist-info) beside Triton 3.5.1's or 3.6.0's wheel
files and nvidia-cuda-nvcc 13.5.37's ptxas (``test_settings.venv_with``: the wheels cached once, their
real ptxas binaries asked ``--help``).  One GB10 (a stand-in nvidia-smi, tests/gpus/data/gb10): one GPU,
so torch-symm-mem is not needed there and nothing is patched; only the setting can be missing."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gpus.standin import no_nvidia_smi, standin
from settings.test_settings import clean_env, venv_with

from support.cli import invoke

VLLM_FILES = ("vllm/__init__.py", "vllm/envs.py", "vllm/platforms/cuda.py", "vllm/engine/arg_utils.py",
              "vllm/config/kernel.py", "vllm/v1/attention/backends/registry.py")
GB10 = "this machine: 1 x NVIDIA GB10 (cc 12.1)"


def with_vllm(site: Path, prebuilt) -> Path:
    """vLLM 0.33.0 installed as a wheel installs it, sparse: the files patchkit reads, and its dist-info."""
    release = prebuilt.release("vllm", "0.33.0")
    rels = [*VLLM_FILES, *(str(p.relative_to(release)) for p in (release / "vllm/distributed/device_communicators").glob("*.py"))]
    for rel in rels:
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(release / rel, site / rel)
    info = site / "vllm-0.33.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0\n")
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in [*rels, "vllm-0.33.0.dist-info/METADATA"]))
    return site / "vllm"


def gb10(tmp_path: Path, **variables: str) -> dict:
    """The stand-in GB10 first on PATH, no other ptxas on it, no CUDA_HOME or Triton variable but ``variables``."""
    path = [p for p in standin(tmp_path / "gb10", "gb10")["PATH"].split(os.pathsep) if not (Path(p) / "ptxas").exists()]
    return clean_env(PATH=os.pathsep.join(path), **variables)


def environment(tmp_path: Path, prebuilt, triton: str, nvcc: bool = True) -> tuple[str, Path]:
    venv, site = venv_with(tmp_path, triton, nvcc=nvcc)
    with_vllm(site, prebuilt)
    return str(venv / "bin" / "python"), site


def lines(done) -> list[str]:
    return done.stdout.decode().splitlines()


def test_plain_verify_on_a_gb10_fails_on_triton_351_without_its_ptxas(tmp_path: Path, prebuilt) -> None:
    python, site = environment(tmp_path, prebuilt, "3.5.1")
    bundled = site / "triton/backends/nvidia/bin/ptxas"
    ptxas13 = site / "nvidia/cu13/bin/ptxas"
    calls = f"Triton 3.5.1 calls ptxas 12.8 ({bundled}), which does not know sm_121a"
    done = invoke("verify", "--python", python, env=gb10(tmp_path))
    assert (done.returncode, done.stderr) == (5, b""), done.stdout.decode()
    said = lines(done)
    assert said[:3] == [GB10, f"{python}: vLLM (wheel); not installed: SGLang, FlashInfer", f"{site / 'vllm'}: vLLM 0.33.0 (installed), "
                        "from vllm-0.33.0.dist-info"]
    assert said[3].startswith("not needed here: torch-symm-mem: one GPU, no peer")
    assert said[-3:] == [f"settings of {python} for 12.1, with this shell's variables:",
                         f"setting triton-ptxas: missing for 12.1 ({calls}); set it: export TRITON_PTXAS_PATH={ptxas13}",
                         "verify: 1 setting missing"]
    # Pointing at Triton's own bundled ptxas is no better.
    done = invoke("verify", "--python", python, env=gb10(tmp_path, TRITON_PTXAS_PATH=str(bundled)))
    assert done.returncode == 5 and lines(done)[-2:] == [
        f"setting triton-ptxas: TRITON_PTXAS_PATH={bundled} does not do for 12.1 (Triton 3.5.1 calls ptxas 12.8 ({bundled}), "
        "which does not know sm_121a)", "verify: 1 setting missing"]
    # --to-cc auto says the same; --json has the code and the settings as one more entry of targets.
    assert invoke("verify", "--python", python, "--to-cc", "auto", env=gb10(tmp_path)).returncode == 5
    done = invoke("verify", "--python", python, "--json", env=gb10(tmp_path))
    doc = json.loads(done.stdout)
    assert (done.returncode, doc["ok"], doc["exit_code"], doc["python"], doc["not_installed"]) == (5, False, 5, python, ["sglang", "flashinfer"])
    [part] = [t for t in doc["targets"] if "settings_of" in t]
    needs = {s["setting"]: s["need"] for s in part["settings"]}
    assert (part["in_effect"], part["ccs"], needs["triton-ptxas"], len(part["problems"])) == (False, ["12.1"], "needed", 1)
    assert needs["vllm-attention-gb10"] == "needed" and needs["vllm-moe-marlin-gb10"] == "needed"  # flags: doctor's
    # vLLM 0.33.0 has no VLLM_USE_FLASHINFER_MOE_FP4 (gone from 0.24.0): the setting is said for 0.16.0 - 0.23.0 only.
    assert "vllm-fp4-moe-gb10" not in needs and needs["vllm-memory-gb10"] == "needed"
    # Set to the 13.5 ptxas: in effect.
    done = invoke("verify", "--python", python, env=gb10(tmp_path, TRITON_PTXAS_PATH=str(ptxas13)))
    assert (done.returncode, lines(done)[-1]) == (0, "verify: ok (1 setting judged, none missing)"), done.stdout.decode()
    # doctor shares the verdict: the same exit 5 and a last line that names the setting (it said "nothing this
    # machine needs is missing", exit 0, above its own "triton-ptxas: needed for 12.1"); set, exit 0.
    done = invoke("doctor", "--python", python, env=gb10(tmp_path))
    assert (done.returncode, lines(done)[-1]) == (5, "no patch this machine needs is missing, but a setting is: triton-ptxas "
                                                     "(above; `--format env` prints the export lines)"), done.stdout.decode()
    done = invoke("doctor", "--python", python, env=gb10(tmp_path, TRITON_PTXAS_PATH=str(ptxas13)))
    assert (done.returncode, lines(done)[-1]) == (0, "nothing this machine needs is missing"), done.stdout.decode()


def test_a_patch_missing_outranks_a_setting_missing(tmp_path: Path, prebuilt) -> None:
    """torch-symm-mem asked for by name is not applied (exit 1: apply fixes that), the setting missing too."""
    python, _ = environment(tmp_path, prebuilt, "3.5.1")
    done = invoke("verify", "--python", python, "--fix", "torch-symm-mem", env=gb10(tmp_path))
    assert done.returncode == 1 and "verify: 1 setting missing" in lines(done), done.stdout.decode()
    assert invoke("verify", "--python", python, "--fix", "torch-symm-mem", "--json", env=gb10(tmp_path)).returncode == 1


def test_plain_verify_on_a_gb10_passes_with_triton_360(tmp_path: Path, prebuilt) -> None:
    python, _ = environment(tmp_path, prebuilt, "3.6.0", nvcc=False)
    done = invoke("verify", "--python", python, env=gb10(tmp_path))
    assert (done.returncode, lines(done)[0], lines(done)[-1]) == (0, GB10, "verify: ok (1 setting judged, none missing)"), \
        done.stdout.decode()
    assert "triton-ptxas" not in done.stdout.decode()


def test_doctor_format_env_prints_what_the_launch_script_evals(tmp_path: Path, prebuilt) -> None:
    python, site = environment(tmp_path, prebuilt, "3.5.1")
    ptxas13 = site / "nvidia/cu13/bin/ptxas"
    env = gb10(tmp_path)
    done = invoke("doctor", "--python", python, "--format", "env", env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"export TRITON_PTXAS_PATH={ptxas13}\n".encode(), b"")
    # The launch script: eval, then verify passes (a separate shell, as the server's is).
    patchkit = f"{shlex.quote(sys.executable)} -m patchkit"
    script = f'eval "$({patchkit} doctor --python {python} --format env)" && {patchkit} verify --python {python}'
    ran = subprocess.run(["sh", "-c", script], env=dict(env, PYTHONPATH=str(Path(__file__).resolve().parents[2])), capture_output=True)
    assert ran.returncode == 0 and ran.stdout.decode().splitlines()[-1] == "verify: ok (1 setting judged, none missing)", \
        ran.stdout.decode() + ran.stderr.decode()
    # Set already: the same line again (what this machine needs, whatever the shell has).
    assert invoke("doctor", "--python", python, "--format", "env", env=dict(env, TRITON_PTXAS_PATH=str(ptxas13))).stdout == done.stdout
    # A value with a space is shell-quoted.
    spaced = tmp_path / "cuda 13" / "ptxas"
    spaced.parent.mkdir()
    spaced.symlink_to(ptxas13)
    done = invoke("doctor", "--python", python, "--format", "env", env=dict(env, TRITON_PTXAS_PATH=str(spaced)))
    assert done.stdout == f"export TRITON_PTXAS_PATH='{spaced}'\n".encode()


def test_doctor_format_env_when_nothing_or_no_value(tmp_path: Path, prebuilt) -> None:
    python, _ = environment(tmp_path, prebuilt, "3.5.1", nvcc=False)
    # No ptxas here that would do: nothing to print for it, one line naming it, exit 1.
    done = invoke("doctor", "--python", python, "--format", "env", env=gb10(tmp_path))
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr.decode().splitlines() == [
        "patchkit: triton-ptxas: TRITON_PTXAS_PATH is needed for 12.1 and no ptxas here would do: install a ptxas of CUDA "
        "12.9 or later (nvidia-cuda-nvcc-cu12 12.9: nvidia/cuda_nvcc/bin/ptxas; nvidia-cuda-nvcc 13.x: nvidia/cu13/bin/ptxas)"]
    # No GPU seen and no --to-cc: nothing on stdout, one line, exit 2; --to-cc judges without GPUs.
    done = invoke("doctor", "--python", python, "--format", "env", env=clean_env(**no_nvidia_smi(tmp_path)))
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode().startswith("patchkit: no GPU seen, so doctor cannot say what this machine needs"), done.stderr
    python36, _ = environment(tmp_path / "36", prebuilt, "3.6.0", nvcc=False)
    done = invoke("doctor", "--python", python36, "--format", "env", "--to-cc", "12.1", env=clean_env(**no_nvidia_smi(tmp_path)))
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


@pytest.mark.parametrize("args", [(), (".",)])
def test_doctor_format_env_needs_an_environment(tmp_path: Path, args: tuple) -> None:
    done = invoke("doctor", *args, "--format", "env", env=gb10(tmp_path), cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode().splitlines() == [
        "patchkit: --format env judges the settings from what an environment has installed: give --python EXE "
        "(the Python the server runs with)"]

