"""--to-cc and --from-cc mean the same in every command, tried as a user would on real releases:
SGLang 0.5.9 (its session checkout and its PyPI wheel) and vLLM 0.11.0 (its PyPI source archive).

Before: `verify CO --to-cc 12` answered "give both --from-cc and --to-cc, or neither" (exit 2);
`apply CO --to-cc 12.1` "not how SGLang writes a compute capability: write it like 12"; vLLM the
other way round; in a virtualenv with both every spelling exited 2; `status --to-cc` and
`revert --to-cc` were "No such option"; `--to-cc banana` was said three ways and `--to-cc 13`
wrote key 13.  Now the user writes 12, 12.0, 12.1, sm_120a or sm_121a and each project gets its
own key: SGLang 12 (it keys by major), vLLM "12.0" or "12.1".
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from base64 import urlsafe_b64encode
from hashlib import sha256
from pathlib import Path

import pytest

from patchkit.data import shipped
from patchkit.fixes.registry import PROJECTS, SGLANG
from patchkit.rewrite.evaluate import tables
from support.cli import invoke
from support.mirror import default_cache, fetch_sdist
from support.venvs import copy_venv

VLLM = PROJECTS["vllm"]
pytestmark = pytest.mark.network  # the real releases the session builds (and vLLM's source archive), once

SG_UTILS = "python/sglang/srt/distributed/device_communicators/all_reduce_utils.py"
SG_DEEPGEMM = "python/sglang/srt/layers/deep_gemm_wrapper/configurer.py"
VL_UTILS = "vllm/distributed/device_communicators/all_reduce_utils.py"
NOT_NVIDIA = ("is not the compute capability of an NVIDIA GPU: NVIDIA's are 3.0 3.2 3.5 3.7 5.0 5.2 5.3 6.0 6.1 6.2 7.0 7.2 "
              "7.5 8.0 8.6 8.7 8.8 8.9 9.0 10.0 10.1 10.3 11.0 12.0 12.1, written like 12.1, 12 (for 12.0) or sm_121a")

# The default fixes by name: vLLM and SGLang 0.5.16 only warn without torch-symm-mem, so a plain apply leaves it
# out (no SM12x GPU has multicast); these tests check how a cc is written, not that verdict.
DEFAULTS = ("--fix", "deepgemm-sm12x", "--fix", "fusion-self-enable", "--fix", "torch-symm-mem")



def clone(source: Path, dest: Path, tag: str | None = None) -> Path:
    subprocess.run(["git", "clone", "-q", *(["--branch", tag] if tag else []), str(source), str(dest)], check=True,
                   capture_output=True)
    return dest


def dirty(checkout: Path) -> str:
    return subprocess.run(["git", "-C", str(checkout), "status", "--porcelain"], capture_output=True, text=True).stdout


def keys(path: Path, names) -> set:
    """Every key of the named tables in the file at ``path``."""
    return {k for table in tables(path.read_bytes(), names, str(path)).values() for k in table}


def lines(done: subprocess.CompletedProcess) -> list[str]:
    return done.stdout.decode().splitlines()


@pytest.fixture()
def sglang(prebuilt, tmp_path: Path) -> Path:
    return clone(prebuilt.release("sglang", "0.5.9"), tmp_path / "sglang")


@pytest.fixture()
def vllm(prebuilt, tmp_path: Path) -> Path:
    return clone(prebuilt.mirror("vllm"), tmp_path / "vllm", "v0.11.0")


def test_verify_takes_to_cc_alone_and_apply_takes_12_1_on_sglang(sglang: Path) -> None:
    done = invoke("verify", str(sglang), "--to-cc", "12")  # was: "give both --from-cc and --to-cc, or neither", exit 2
    assert (done.returncode, done.stderr) == (1, b""), done.stderr.decode()
    assert lines(done)[-5:] == [
        f"{SG_UTILS}: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES has no key 12 (the patch is not applied)",
        "python/sglang/srt/distributed/device_communicators/torch_symm_mem.py: TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM "
        "has no key 12 (the patch is not applied)",
        # The DeepGEMM fix (on by default) is for 0.5.9 too.
        f"{SG_DEEPGEMM}: lacks SGLang 0.5.13's change (1 hunk; the deepgemm-sm12x patch is not applied)",
        f"{SG_DEEPGEMM}: sm_version == 120 lacks 121 (the deepgemm-sm12x patch is not applied)",
        "verify: 4 problems"]

    done = invoke("apply", str(sglang), "--to-cc", "12.1", *DEFAULTS)  # was: "not how SGLang writes a compute capability: write it like 12"
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    assert "  TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (module): key 12 = key 10" in lines(done)
    table = tables((sglang / SG_UTILS).read_bytes(), SGLANG.tables, SG_UTILS)["TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"]
    assert table[12] == table[10] and "12.1" not in table and 121 not in table  # SGLang keys by major

    for written in ("12", "12.0", "12.1", "sm_120a", "sm_121a", "sm120"):
        done = invoke("verify", str(sglang), "--to-cc", written)
        assert (done.returncode, lines(done)[-1]) == (0, "verify: ok (key 12 = key 10 in every table)"), (written, done.stdout)
    done = invoke("verify", str(sglang), "--from-cc", "10.0", "--to-cc", "12.1", "--json")
    doc = json.loads(done.stdout)
    [target] = doc["targets"]
    assert (done.returncode, target["from_cc"], target["to_cc"], target["in_effect"], doc["ok"]) == (0, 10, 12, True, True)


def test_status_and_revert_take_to_cc(sglang: Path) -> None:
    done = invoke("status", str(sglang), "--to-cc", "12.1")  # was: "No such option '--to-cc'"
    assert done.returncode == 0 and lines(done)[3:5] == ["applied:  nothing recorded by patchkit",
                                                        "to-cc:    12.1: not applied (key 12; nothing applied)"]
    assert invoke("apply", str(sglang), "--to-cc", "12", *DEFAULTS).returncode == 0
    done = invoke("status", str(sglang), "--to-cc", "sm_121a")
    assert done.returncode == 0 and lines(done)[4] == "to-cc:    sm_121a: applied (key 12)"
    [doc] = json.loads(invoke("status", str(sglang), "--to-cc", "12.1", "--json").stdout)["targets"]
    assert doc["to_cc"] == {"cc": "12.1", "key": 12, "applied": True} and doc["applied"]["to_cc"] == 12
    assert "to_cc" not in json.loads(invoke("status", str(sglang), "--json").stdout)["targets"][0]
    state = json.loads((sglang / ".git/patchkit/state.json").read_bytes())  # the format older patchkits wrote and read
    assert (state["format"], state["from_cc"], state["to_cc"]) == (1, 10, 12)

    done = invoke("revert", str(sglang), "--to-cc", "12.1")  # was: "No such option '--to-cc'"
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    assert lines(done)[1].startswith("reverted shipped patch patches/0.5.9/0001-") and dirty(sglang) == ""


def test_vllm_gets_its_own_spelling(vllm: Path) -> None:
    """vLLM keys "12.0": `--to-cc 12` (was: "write it like 12.0") and 12.1 is its own key."""
    done = invoke("apply", str(vllm), "--to-cc", "12", *DEFAULTS)
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    assert "  CUSTOM_ALL_REDUCE_MAX_SIZES (module): key '12.0' = key '10.0'" in lines(done)
    assert {"12.0", "10.0"} <= keys(vllm / VL_UTILS, VLLM.tables) and "12.1" not in keys(vllm / VL_UTILS, VLLM.tables)
    assert lines(invoke("verify", str(vllm), "--to-cc", "sm_120a"))[-1] == "verify: ok (key '12.0' = key '10.0' in every table)"
    done = invoke("verify", str(vllm), "--to-cc", "12.1")
    assert done.returncode == 1 and lines(done)[-1].startswith("verify: ") and "has no key '12.1'" in done.stdout.decode()
    done = invoke("status", str(vllm), "--to-cc", "12.1")
    assert lines(done)[4] == "to-cc:    12.1: not applied (key '12.1'; patchkit applied key '12.0')"

    # revert --to-cc of another key than the one applied: one line, exit 3, nothing written
    before = (vllm / VL_UTILS).read_bytes()
    done = invoke("revert", str(vllm), "--to-cc", "12.1")
    state = vllm / ".git/patchkit/state.json"
    assert (done.returncode, done.stdout, done.stderr.decode()) == (
        3, b"", f"patchkit: {state}: what patchkit applied adds vLLM key '12.0', not key '12.1' (--to-cc 12.1); nothing "
                "reverted (`patchkit revert` without --to-cc reverts it)\n")
    assert (vllm / VL_UTILS).read_bytes() == before
    assert (json.loads(state.read_bytes())["from_cc"], json.loads(state.read_bytes())["to_cc"]) == ("10.0", "12.0")

    done = invoke("apply", str(vllm), "--to-cc", "12.1", *DEFAULTS)  # a GB10: the key "12.1", replacing "12.0"
    assert done.returncode == 0, done.stderr.decode()
    assert "12.1" in keys(vllm / VL_UTILS, VLLM.tables) and "12.0" not in keys(vllm / VL_UTILS, VLLM.tables)
    assert invoke("revert", str(vllm), "--to-cc", "12.1").returncode == 0 and dirty(vllm) == ""


@pytest.fixture(scope="module")
def both(prebuilt, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with SGLang 0.5.9 (its PyPI wheel, installed by pip) and vLLM 0.11.0, installed
    from its PyPI source archive as pip lays out a wheel: its vllm/*.py files in site-packages, its
    PKG-INFO as the dist-info's METADATA, a RECORD of what was written.  (vLLM's wheel is 400 MB
    of compiled code for the same .py files.)"""
    venv = copy_venv(prebuilt.sglang_venv("0.5.9"), tmp_path_factory.mktemp("both") / "V")
    site = next(venv.glob("lib/python3*/site-packages"))
    info = site / "vllm-0.11.0.dist-info"
    info.mkdir()
    record = []
    with tarfile.open(fetch_sdist("vllm", "0.11.0", default_cache())) as sdist:
        for member in sdist:
            top, _, rel = member.name.partition("/")
            if rel == "PKG-INFO":
                (info / "METADATA").write_bytes(sdist.extractfile(member).read())
            elif member.isfile() and rel.startswith("vllm/") and rel.endswith(".py"):
                data = sdist.extractfile(member).read()
                (site / rel).parent.mkdir(parents=True, exist_ok=True)
                (site / rel).write_bytes(data)
                digest = urlsafe_b64encode(sha256(data).digest()).rstrip(b"=").decode()
                record.append(f"{rel},sha256={digest},{len(data)}")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("\n".join([*record, "vllm-0.11.0.dist-info/METADATA,,", "vllm-0.11.0.dist-info/INSTALLER,,",
                                            "vllm-0.11.0.dist-info/RECORD,,"]) + "\n")
    return venv


@pytest.mark.parametrize("written, sglang_key, vllm_key", [("12", 12, "12.0"), ("sm_121a", 12, "12.1")])  # the rest: test_cc.py
def test_a_venv_with_sglang_and_vllm_takes_every_spelling(both: Path, tmp_path: Path, written: str, sglang_key: int,
                                                         vllm_key: str) -> None:
    """Every spelling exited 2 here (one of the two projects refused it): each now gets its own key."""
    venv = copy_venv(both, tmp_path / "V")
    python = str(venv / "bin" / "python")
    site = next(venv.glob("lib/python3*/site-packages"))
    before = {p: p.read_bytes() for p in (site / "sglang/srt/distributed/device_communicators/all_reduce_utils.py", site / VL_UTILS)}
    done = invoke("apply", "--python", python, "--to-cc", written, *DEFAULTS)
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    assert f"  TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (module): key {sglang_key!r} = key 10" in lines(done)
    assert f"  CUSTOM_ALL_REDUCE_MAX_SIZES (module): key {vllm_key!r} = key '10.0'" in lines(done)
    sg, vl = before
    assert sglang_key in keys(sg, SGLANG.tables) and vllm_key in keys(vl, VLLM.tables)
    # vLLM 0.11.0 has VLLM_USE_FLASHINFER_MOE_FP4, but FlashInfer's FP4 MoE is opt-in there (0 does nothing):
    # no setting of it is missing on 12.1 without it (known-settings.toml says it for 0.16.0 - 0.23.0 only).
    done = invoke("verify", "--python", python, "--to-cc", written, "--json",
                  env={k: v for k, v in os.environ.items() if k != "VLLM_USE_FLASHINFER_MOE_FP4"})
    assert done.returncode == 0, done.stdout.decode()
    said = [s["setting"] for t in json.loads(done.stdout)["targets"] if "settings_of" in t for s in t["settings"]]
    assert "vllm-fp4-moe-gb10" not in said
    doc = json.loads(invoke("status", "--python", python, "--to-cc", written, "--json").stdout)
    assert [t["to_cc"] for t in doc["targets"]] == [{"cc": written, "key": sglang_key, "applied": True},
                                                   {"cc": written, "key": vllm_key, "applied": True}]
    done = invoke("revert", "--python", python, "--to-cc", written)
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    assert {p: p.read_bytes() for p in before} == before


def test_revert_to_cc_checks_every_target_before_writing_any(both: Path, tmp_path: Path) -> None:
    """SGLang's key 12 is 12.1's too, vLLM's "12.0" is not: refused, and SGLang's files stay patched."""
    venv = copy_venv(both, tmp_path / "V")
    python = str(venv / "bin" / "python")
    assert invoke("apply", "--python", python, "--to-cc", "12", *DEFAULTS).returncode == 0
    site = next(venv.glob("lib/python3*/site-packages"))
    patched = {p: p.read_bytes() for p in site.glob("*/srt/distributed/device_communicators/*.py")}
    done = invoke("revert", "--python", python, "--to-cc", "12.1")
    assert done.returncode == 3 and done.stdout == b"" and len(done.stderr.splitlines()) == 1
    assert "what patchkit applied adds vLLM key '12.0', not key '12.1' (--to-cc 12.1)" in done.stderr.decode()
    assert {p: p.read_bytes() for p in patched} == patched


BAD = ["banana", "13", "12.5"]
COMMANDS = [
    ["apply", "{co}", "--to-cc"], ["verify", "{co}", "--to-cc"], ["status", "{co}", "--to-cc"], ["revert", "{co}", "--to-cc"],
    ["doctor", "{co}", "--to-cc"], ["kernels", "{co}", "--to-cc"], ["upstream", "{co}", "--out", "{out}", "--to-cc"],
    ["generate", "--repo", "{co}", "--out", "{out}", "--to-cc"], ["apply", "{co}", "--from-cc"], ["verify", "{co}", "--from-cc"],
    ["generate", "--repo", "{co}", "--out", "{out}", "--from-cc"], ["upstream", "{co}", "--out", "{out}", "--from-cc"],
]


@pytest.mark.parametrize("value", BAD)
def test_a_cc_no_gpu_has_is_one_identical_line_in_every_command(sglang: Path, tmp_path: Path, value: str) -> None:
    """`doctor --to-cc 12.5` judged for it and `apply --to-cc 13` wrote key 13 (then verify said ok);
    banana was one line in doctor, click's usage block in apply and a third wording in kernels."""
    said = set()
    for command in COMMANDS:
        args = [a.format(co=sglang, out=tmp_path / "out") for a in command]
        done = invoke(*args, value)
        assert (done.returncode, done.stdout) == (2, b""), (args, done.stdout.decode())
        said.add(done.stderr.decode().replace("--from-cc", "--to-cc"))
    assert said == {f"patchkit: --to-cc {value!r} {NOT_NVIDIA}\n"}
    assert dirty(sglang) == "" and not (tmp_path / "out").exists() and not (sglang / ".git/patchkit").exists()


@pytest.mark.parametrize("cc", [["--from-cc", "10", "--to-cc", "12"], ["--to-cc", "12.0"], ["--to-cc", "sm_120a"], []])
def test_generate_from_cc_10_to_cc_12_writes_the_shipped_series(prebuilt, tmp_path: Path, cc: list[str]) -> None:
    """The form the README and the upstream PRs use: byte for byte the shipped series of 0.5.9."""
    out = tmp_path / "out"
    done = invoke("generate", "--repo", str(prebuilt.release("sglang", "0.5.9")), "--out", str(out), *cc)
    assert (done.returncode, done.stderr) == (0, b""), done.stderr.decode()
    # As intended: the DeepGEMM fix carries 0.5.13's refusal to 0.5.9, and 0.5.9 has the self-enabled fusion's narrowing (0.5.8's).
    assert lines(done) == [f"v0.5.9          patched -> {out}/0.5.9/series: deepgemm-sm12x 2 changes in 1 file; fusion-self-enable already upstream; "
                           "torch-symm-mem 2 tables in 2 files; allreduce-fusion 1 gate in 1 file",
                           "1 tag: 1 patched, 0 nothing to patch, 0 already upstream, 0 errors"]
    ours = shipped("patches") / "0.5.9"
    assert sorted(p.name for p in (out / "0.5.9").iterdir()) == sorted(p.name for p in ours.iterdir())
    for p in ours.iterdir():
        assert (out / "0.5.9" / p.name).read_bytes() == p.read_bytes(), p.name
