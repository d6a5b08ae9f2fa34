"""Settings as fixes (``known-settings.toml``, ``judge/settings.py``, ``render/settings.py``): judged
from real release files.  Triton 3.5.1's and 3.6.0's dist-info, knobs.py and bundled ptxas binaries
come from their PyPI wheels (cached; extracted once beside them), the ptxas that would do from
nvidia-cuda-nvcc 13.5.37's wheel (``nvidia/cu13/bin/ptxas``): the real binaries are asked
``--version`` and ``--help`` (bounded), and the judgement flips when ``TRITON_PTXAS_PATH`` names
the 13.5 one.  (The setting itself was proved by compiling: issue 32's research §4c.)"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

from patchkit.cc import CC
from patchkit.fixes.settings import read_settings
from patchkit.fixes.signatures import read_known
from patchkit.gpus.smi import given
from patchkit.judge.settings import Need, settings_here
from patchkit.render.settings import set_line
from support.cli import invoke
from support.mirror import default_cache, fetch_wheel
from support.venvs import copy_venv, make_venv

TRITON_PLATFORM = "manylinux_2_27_x86_64"
NVCC = ("nvidia-cuda-nvcc", "13.5.37", "manylinux2014_x86_64")


def _extracted(wheel: Path, wanted) -> Path:
    """The members of ``wheel`` that ``wanted(name)`` picks, extracted once beside it (a folder per wheel)."""
    dest = wheel.parent / "extracted"
    if not (dest / ".done").exists():
        tmp = wheel.parent / f".extracting.{os.getpid()}"
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if wanted(info.filename):
                    zf.extract(info, tmp)
                    if "/bin/" in info.filename:
                        (tmp / info.filename).chmod(0o755)
        (tmp / ".done").touch()
        try:
            tmp.rename(dest)
        except OSError:  # another worker was first
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def triton_files(version: str) -> Path:
    wheel = fetch_wheel(version, default_cache(), "triton", platform=TRITON_PLATFORM)
    return _extracted(wheel, lambda n: ".dist-info/" in n or n == "triton/knobs.py" or n.startswith("triton/backends/nvidia/bin/ptxas"))


def nvcc13_files() -> Path:
    wheel = fetch_wheel(NVCC[1], default_cache(), NVCC[0], platform=NVCC[2])
    return _extracted(wheel, lambda n: ".dist-info/" in n or n == "nvidia/cu13/bin/ptxas")


def venv_with(tmp_path: Path, triton: str, nvcc: bool = False, prebuilt=None) -> tuple[Path, Path]:
    """A virtualenv whose site-packages link Triton ``triton``'s files (and nvidia-cuda-nvcc 13.5.37's ptxas;
    and, given ``prebuilt``, the session's SGLang 0.5.9 install: doctor and verify judge a known project)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    venv = make_venv(tmp_path / "V") if prebuilt is None else copy_venv(prebuilt.sglang_venv(), tmp_path / "V")
    site = next((venv / "lib").glob("python3*")) / "site-packages"
    sources = [triton_files(triton)] + ([nvcc13_files()] if nvcc else [])
    for source in sources:
        for entry in source.iterdir():
            if entry.name != ".done" and not (site / entry.name).exists():
                (site / entry.name).symlink_to(entry)
    return venv, site


def clean_env(**extra: str) -> dict:
    """This process's environment without a ptxas on PATH, a CUDA_HOME or a Triton variable."""
    keep = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "ptxas").exists()]
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH") and not k.startswith("TRITON_")}
    return env | {"PATH": os.pathsep.join(keep)} | extra


def triton_setting(found):
    return [h for h in found if h.setting.name == "triton-ptxas"]


def test_triton_351_needs_its_ptxas_path_on_a_gb10_only(tmp_path: Path) -> None:
    venv, site = venv_with(tmp_path, "3.5.1", nvcc=True)
    bundled = site / "triton" / "backends" / "nvidia" / "bin" / "ptxas"
    ptxas13 = site / "nvidia" / "cu13" / "bin" / "ptxas"
    [h] = triton_setting(settings_here([site], clean_env(), given(CC(12, 1))))
    assert (h.need, h.spelling.name, h.asked.path, h.asked.release) == (Need.NEEDED, "TRITON_PTXAS_PATH", str(bundled), "12.8")
    assert "sm_121a" not in h.asked.targets and "sm_120a" in h.asked.targets  # the real binary's --help
    assert (h.value, [w.release for w in h.would_do]) == (str(ptxas13), ["13.5"])
    assert set_line(h) == f"export TRITON_PTXAS_PATH={ptxas13}"
    # The judgement flips with the variable set to the 13.5 ptxas; set to the bundled 12.8 one it does not do.
    [h] = triton_setting(settings_here([site], clean_env(TRITON_PTXAS_PATH=str(ptxas13)), given(CC(12, 1))))
    assert (h.need, h.asked.release, "sm_121a" in h.asked.targets) == (Need.SET, "13.5", True)
    [h] = triton_setting(settings_here([site], clean_env(TRITON_PTXAS_PATH=str(bundled)), given(CC(12, 1))))
    assert h.need == Need.WRONG
    # 12.0: the bundled ptxas knows sm_120a: the setting is for 12.1 only, not judged there.
    assert triton_setting(settings_here([site], clean_env(), given(CC(12, 0)))) == []


def test_triton_360_needs_nothing_on_a_gb10(tmp_path: Path) -> None:
    venv, site = venv_with(tmp_path, "3.6.0")
    [h] = triton_setting(settings_here([site], clean_env(), given(CC(12, 1))))
    assert (h.need, h.asked.tool, h.asked.release, "sm_121a" in h.asked.targets) == (Need.NOT_NEEDED, "ptxas-blackwell", "12.9", True)


def test_doctor_names_the_line_for_12_1_with_triton_351_and_not_otherwise(tmp_path: Path, prebuilt) -> None:
    venv, site = venv_with(tmp_path, "3.5.1", nvcc=True, prebuilt=prebuilt)
    python = str(venv / "bin" / "python")
    ptxas13 = site / "nvidia" / "cu13" / "bin" / "ptxas"
    done = invoke("doctor", "--python", python, "--to-cc", "12.1", env=clean_env())
    out = done.stdout.decode()
    assert f"    export TRITON_PTXAS_PATH={ptxas13}\n" in out, out
    assert "  triton-ptxas: needed for 12.1 (Triton 3.5.1 calls ptxas 12.8 (" in out
    doc = json.loads(invoke("doctor", "--python", python, "--to-cc", "12.1", "--json", env=clean_env()).stdout)
    [s] = [s for s in doc["settings"] if s["setting"] == "triton-ptxas"]
    assert (s["need"], s["name"], s["value"], s["set_line"]) == ("needed", "TRITON_PTXAS_PATH", str(ptxas13),
                                                                 f"export TRITON_PTXAS_PATH={ptxas13}")
    out12 = invoke("doctor", "--python", python, "--to-cc", "12.0", env=clean_env()).stdout.decode()
    assert "TRITON_PTXAS" not in out12 and "triton-ptxas" not in out12
    for entry in triton_files("3.5.1").iterdir():  # the same environment with Triton 3.6.0 instead
        (site / entry.name).unlink(missing_ok=True)
    for entry in triton_files("3.6.0").iterdir():
        if entry.name != ".done":
            (site / entry.name).symlink_to(entry)
    out36 = invoke("doctor", "--python", python, "--to-cc", "12.1", env=clean_env()).stdout.decode()
    assert "export TRITON" not in out36 and "  triton-ptxas: not needed for 12.1 (Triton 3.6.0 calls ptxas-blackwell 12.9 (" in out36


def test_doctor_judges_an_environment_of_triton_alone(tmp_path: Path) -> None:
    """Triton 3.5.1 without SGLang, vLLM or FlashInfer (torch.compile on a GB10): doctor judges it all the same,
    its JIT, the setting and the failure mode, with no project to patch (exit 5: a setting is missing);
    --format env prints the line.  apply, verify and revert refuse it: they have nothing to patch."""
    venv, site = venv_with(tmp_path, "3.5.1", nvcc=True)
    python = str(venv / "bin" / "python")
    ptxas13 = site / "nvidia" / "cu13" / "bin" / "ptxas"
    done = invoke("doctor", "--python", python, "--to-cc", "12.1", env=clean_env())
    out = done.stdout.decode()
    assert done.returncode == 5, out + done.stderr.decode()
    assert f"    export TRITON_PTXAS_PATH={ptxas13}\n" in out
    assert "  triton-ptxas-sm121a: exposed: Triton's bundled ptxas does not know sm_121a (crash; triton 3.5.1; 12.1)\n" in out
    assert out.splitlines()[-1] == ("no patch GPUs of cc 12.1 need is missing, but a setting is: triton-ptxas (above; "
                                    "`--format env` prints the export lines)")
    doc = json.loads(invoke("doctor", "--python", python, "--to-cc", "12.1", "--json", env=clean_env()).stdout)
    assert (doc["exit_code"], doc["targets"], doc["modes_failing"]) == (5, [], [])
    env = invoke("doctor", "--python", python, "--to-cc", "12.1", "--format", "env", env=clean_env())
    assert (env.returncode, env.stdout.decode()) == (0, f"export TRITON_PTXAS_PATH={ptxas13}\n")
    refused = f"patchkit: {python}: sglang or vllm or flashinfer is not installed for this interpreter (looked in {site})\n"
    for command in ("apply", "verify", "revert"):
        done = invoke(command, "--python", python, env=clean_env())
        assert (done.returncode, done.stderr.decode()) == (2, refused), command
    done = invoke("doctor", "--python", python, "--project", "sglang", env=clean_env())  # a project named: it must be there
    assert (done.returncode, done.stderr.decode()) == (2, refused.replace("sglang or vllm or flashinfer", "sglang"))
    # Nothing patchkit knows installed (a wrong --python, most likely): doctor refuses it, --format env too.
    empty = make_venv(tmp_path / "E")
    site = next((empty / "lib").glob("python3*")) / "site-packages"
    for fmt in ("text", "env"):
        done = invoke("doctor", "--python", str(empty / "bin" / "python"), "--to-cc", "12.1", "--format", fmt, env=clean_env())
        assert (done.returncode, done.stdout, done.stderr.decode()) == (2, b"", f"patchkit: {empty / 'bin' / 'python'}: sglang or "
                                                                        f"vllm or flashinfer is not installed for this interpreter "
                                                                        f"(looked in {site})\n"), fmt


def test_verify_says_whether_the_environment_has_it(tmp_path: Path, prebuilt) -> None:
    venv, site = venv_with(tmp_path, "3.5.1", nvcc=True, prebuilt=prebuilt)
    python = str(venv / "bin" / "python")
    ptxas13 = site / "nvidia" / "cu13" / "bin" / "ptxas"
    done = invoke("verify", "--python", python, "--to-cc", "12.1", env=clean_env())
    lines = done.stdout.decode().splitlines()
    missing = (f"setting triton-ptxas: missing for 12.1 (Triton 3.5.1 calls ptxas 12.8 "
               f"({site}/triton/backends/nvidia/bin/ptxas), which does not know sm_121a); "
               f"set it: export TRITON_PTXAS_PATH={ptxas13}")
    assert done.returncode == 1 and lines[-3:] == [f"settings of {python} for 12.1, with this shell's variables:", missing,
                                                   "verify: 1 setting missing"]

    def settings_part(env: dict) -> dict:
        doc = json.loads(invoke("verify", "--python", python, "--to-cc", "12.1", "--json", env=env).stdout)
        return next(t for t in doc["targets"] if "settings_of" in t)

    part = settings_part(clean_env())
    assert (part["in_effect"], part["problems"], [s["need"] for s in part["settings"]]) == (False, [missing], ["needed"])
    # Set in the shell verify runs in (the server's): in effect.  The SGLang 0.5.9 target, unpatched, still fails.
    part = settings_part(clean_env(TRITON_PTXAS_PATH=str(ptxas13)))
    assert (part["in_effect"], part["problems"], [s["need"] for s in part["settings"]]) == (True, [], ["set"])
    done = invoke("verify", "--python", python, "--to-cc", "12.1", env=clean_env(TRITON_PTXAS_PATH=str(ptxas13)))
    assert done.stdout.decode().splitlines()[-1] == "verify: ok (1 setting judged, none missing)"
    done = invoke("verify", "--python", python, "--to-cc", "12.0", env=clean_env())
    assert "setting" not in done.stdout.decode()  # no setting for 12.0 among these releases: nothing said of settings


def test_each_release_spells_it_as_its_files_read_it() -> None:
    """Triton 3.3.x reads TRITON_PTXAS-BLACKWELL_PATH (compiler.py:34-54), which export cannot set."""
    from patchkit.judge.settings import SettingHere

    [s] = [s for s in read_settings() if s.name == "triton-ptxas"]
    read = ("3.3.1", "3.4.0", "3.5.1", "3.6.0", "3.7.0", "3.7.1", "3.8.0", "3.9.0")
    spelled = {v: (s.spelling(v).name, s.spelling(v).needed, s.spelling(v).ptxas) for v in read}
    blackwell = ("TRITON_PTXAS_BLACKWELL_PATH", False, ("12.9", None))
    assert spelled == {"3.3.1": ("TRITON_PTXAS-BLACKWELL_PATH", True, ("12.9", "13.0")),
                       "3.4.0": ("TRITON_PTXAS_PATH", True, ("12.9", "13.0")), "3.5.1": ("TRITON_PTXAS_PATH", True, ("12.9", None)),
                       "3.6.0": blackwell, "3.7.0": blackwell, "3.7.1": blackwell, "3.8.0": blackwell, "3.9.0": blackwell}
    # The reading ends at 3.9.0, the newest on the index: a later release is read from its files (test_triton_newest.py).
    assert (s.spelling("3.9.1"), s.spelling("3.10.0"), s.spellings[-1].before) == (None, None, "3.9.1")
    here = SettingHere(s, "3.3.1", CC(12, 1), Need.NEEDED, s.spelling("3.3.1"), "/opt/cuda 12.9/bin/ptxas")
    assert set_line(here) == "env 'TRITON_PTXAS-BLACKWELL_PATH=/opt/cuda 12.9/bin/ptxas' <command>"


def test_every_failure_names_a_setting_that_exists() -> None:
    names = {s.name for s in read_settings()}
    named = [f.setting for f in read_known().failures if f.setting]
    by_package = [(f.name, p.name, p.setting) for f in read_known().failures for p in f.packages if p.setting]
    assert named and set(named) <= names and {s for _, _, s in by_package} <= names
    # DeepGEMM's failure: the setting of the project whose frames ran it (issue 42).
    assert by_package == [("deepgemm-unsupported-architecture", "vllm", "vllm-deepgemm-off"),
                          ("deepgemm-unsupported-architecture", "sglang", "sglang-deepgemm-off")]
    # No setting rests on wrong output any more: the FP4 MoE ones are crashes (issue 42, test_gb10_settings.py).
    assert [s.name for s in read_settings() if s.rank == 1] == []


@pytest.mark.parametrize(("line", "name", "advice"), [
    ("ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'", "triton-ptxas-sm121a", "TRITON_PTXAS_PATH"),
    ("[rank1] node:1:2 [1] NCCL WARN Cuda failure 'an illegal memory access was encountered'", "nccl-illegal-address",
     "nvidia-nccl-cu12>=2.31.2"),
])
def test_diagnose_names_the_setting(tmp_path: Path, line: str, name: str, advice: str) -> None:
    log = tmp_path / "server.log"
    log.write_text(f"INFO starting\n{line}\n")
    done = invoke("diagnose", str(log), "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 1
    [f] = doc["logs"][0]["findings"]
    assert (f["name"], f["line"]) == (name, 2) and advice in f["advice"]


def test_diagnose_names_deepgemm_and_the_project_that_ran_it(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("Traceback (most recent call last):\n"
                   '  File "/venv/lib/python3.12/site-packages/vllm/model_executor/layers/fp8.py", line 10, in forward\n'
                   "    out = fp8_gemm(a, b)\n"
                   "RuntimeError: Assertion error (/workspace/.deps/deepgemm-src/csrc/apis/gemm.hpp:120): Unsupported architecture\n")
    doc = json.loads(invoke("diagnose", str(log), "--json").stdout)
    [f] = doc["logs"][0]["findings"]
    assert f["name"] == "deepgemm-unsupported-architecture" and "vllm turned it on" in f["cause"]
    # vLLM's advice only: its variable and its release with the kernels, nothing of SGLang's (issue 42).
    [vllm] = [p for p in read_known().failures if p.name == f["name"]][0].packages[:1]
    assert f["advice"] == vllm.advice and f["commands"] == []
    assert f["advice"].startswith("turn vLLM's DeepGEMM off: VLLM_USE_DEEP_GEMM=0 (vLLM 0.24.0 - 0.27.1 ")
    assert "or upgrade to vLLM 0.28.0, whose bundled DeepGEMM has SM120 kernels" in f["advice"]
    assert "SGLANG" not in f["advice"] and "patchkit apply" not in f["advice"]


DEEPGEMM_236 = Path(__file__).resolve().parents[1] / "logs/data/modes/06-deepgemm-no-sm12x-kernels/deepgemm-236.log"


def test_diagnose_names_no_project_where_no_frame_shows_one(tmp_path: Path) -> None:
    """DeepGEMM#236's line, posted alone from a GB10 under vLLM: the text names no project, so neither
    SGLang's fix (as it once did: "run: patchkit apply for the SGLang that wrote this log") nor one
    project's advice; failure mode 6, with the ways out of both.  A traceback with DeepGEMM's frames only
    is the known failure with the advice for both."""
    done = invoke("diagnose", str(DEEPGEMM_236), "--json")
    [f] = json.loads(done.stdout)["logs"][0]["findings"]
    assert (done.returncode, f["kind"], f["name"], f["project"], f["commands"]) == (
        1, "failure-mode", "deepgemm-no-sm12x-kernels", "deep-gemm", [])
    said = invoke("diagnose", str(DEEPGEMM_236)).stdout.decode()
    assert "fix: deepgemm-sm12x" not in said and "run: patchkit apply" not in said
    assert ": way out: patch: patchkit apply --fix deepgemm-sm12x: " in said and "(sglang 0.5.4 to before 0.5.21)" in said
    assert ": way out: upgrade: vllm 0.28.0 or later: " in said and ": way out: setting: vllm-deepgemm-off: " in said
    log = tmp_path / "server.log"
    log.write_text("Traceback (most recent call last):\n"
                   '  File "/venv/lib/python3.12/site-packages/deep_gemm/__init__.py", line 10, in fp8_gemm_nt\n'
                   "    return _C.fp8_gemm_nt(a, b)\n" + DEEPGEMM_236.read_text())
    [f] = json.loads(invoke("diagnose", str(log), "--json").stdout)["logs"][0]["findings"]
    assert (f["name"], f["commands"]) == ("deepgemm-unsupported-architecture", [])
    assert f["advice"].startswith("the traceback shows no frame of vLLM or SGLang, so which one called DeepGEMM is not known: "
                                  "under vLLM, VLLM_USE_DEEP_GEMM=0")
    assert "under SGLang, patchkit apply (the fix deepgemm-sm12x, SGLang 0.5.4 - 0.5.20) or SGLANG_ENABLE_JIT_DEEPGEMM=0" in f["advice"]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_diagnose_offers_the_deepgemm_fix_only_to_a_release_it_patches(prebuilt, tmp_path: Path, version: str) -> None:
    """The same traceback, its frames in a real venv of SGLang on this machine: 0.5.9's shipped manifest
    patches deepgemm-sm12x, so the fix and its apply are named; 0.5.23 has the change upstream
    (manifest: already upstream), so apply would change nothing there: the failure and its setting are
    named instead (SGLANG_ENABLE_JIT_DEEPGEMM=0), with no apply."""
    venv = prebuilt.sglang_venv(version)
    site = next((venv / "lib").glob("python3*/site-packages"))
    entrypoint = site / "sglang/srt/layers/deep_gemm_wrapper/entrypoint.py"
    assert entrypoint.is_file()
    log = tmp_path / "server.log"
    log.write_text("Traceback (most recent call last):\n"
                   f'  File "{entrypoint}", line 98, in gemm_nt_f8f8bf16\n'
                   "    deep_gemm.fp8_gemm_nt(\n"
                   "RuntimeError: Assertion error (/workspace/.deps/deepgemm-src/csrc/apis/gemm.hpp:120): Unsupported architecture\n")
    done = invoke("diagnose", str(log), "--json")
    assert done.returncode == 1
    [f] = json.loads(done.stdout)["logs"][0]["findings"]
    if version == "0.5.9":
        assert (f["name"], f["project"], f["commands"]) == ("deepgemm-sm12x", "sglang", [f"patchkit apply --python {venv}/bin/python"])
    else:
        assert (f["name"], f["commands"]) == ("deepgemm-unsupported-architecture", [])
        assert "sglang turned it on" in f["cause"] and "SGLANG_ENABLE_JIT_DEEPGEMM=0" in f["advice"]
        assert f["advice"].startswith("turn SGLang's JIT DeepGEMM off: ") and "VLLM_USE_DEEP_GEMM" not in f["advice"]
        # DeepGEMM's JIT lacks the kernels, not a shared object of SGLang's: none is judged, no "files:" line
        assert f["kernels"] is None and "files:" not in invoke("diagnose", str(log)).stdout.decode()


def test_diagnose_names_the_deepgemm_fix_where_sglang_ran_it(tmp_path: Path) -> None:
    """The same assertion raised under SGLang (its wrapper's call, entrypoint.py:98 in the 0.5.9 wheel) is
    the gate the DeepGEMM fix closes; under vLLM (above) it is not."""
    log = tmp_path / "server.log"
    log.write_text("Traceback (most recent call last):\n"
                   '  File "/venv/lib/python3.12/site-packages/sglang/srt/layers/deep_gemm_wrapper/entrypoint.py", line 98, '
                   "in gemm_nt_f8f8bf16\n"
                   "    deep_gemm.fp8_gemm_nt(\n"
                   "RuntimeError: Assertion error (/workspace/.deps/deepgemm-src/csrc/apis/gemm.hpp:120): Unsupported architecture\n")
    doc = json.loads(invoke("diagnose", str(log), "--json").stdout)
    [f] = doc["logs"][0]["findings"]
    assert (f["name"], f["project"]) == ("deepgemm-sm12x", "sglang")
    assert f["commands"] == ["patchkit apply --python /venv/bin/python"]
