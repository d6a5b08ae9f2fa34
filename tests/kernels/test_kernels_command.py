"""``patchkit kernels PATH...`` on the real nvcc 13.0 builds: lines, --json, verdicts for --to-cc
and for the GPUs of a stand-in nvidia-smi, exit codes, and bad input."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from oracle import FIXTURES

from support.cli import invoke

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "gpus"))
from standin import no_nvidia_smi, standin  # noqa: E402

LISTED = [
    "fat-compressed.so: sm_80, sm_90, sm_100, sm_120, sm_121a, PTX compute_120",
    "hopper-blackwell-dc.so: sm_90a, sm_100a",
    "ptx-only-80.so: no SASS, PTX compute_80",
    "sm120-plus-ptx.so: sm_120, PTX compute_120",
    "sm120a-only.so: sm_120a",
    "sm120f.so: sm_120f",
]


def fixtures(tmp_path: Path) -> Path:
    folder = tmp_path / "libs"
    folder.mkdir()
    for so in sorted(FIXTURES.glob("*.so")):
        shutil.copyfile(so, folder / so.name)
    (folder / "README.md").write_bytes((FIXTURES / "README.md").read_bytes())  # not a shared object: not read
    os.symlink("sm120f.so", folder / "libalias.so")  # a link in a folder is not read twice
    return folder


def test_a_folder_without_gpus(tmp_path: Path) -> None:
    folder = fixtures(tmp_path)
    done = invoke("kernels", str(folder), env=no_nvidia_smi(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines() == ["6 files", *(f"{folder}/{line}" for line in LISTED),
                                                 "no verdict: nvidia-smi is not on PATH (give --to-cc 12.0 to judge for a GPU)"]


def test_verdicts_for_two_ccs(tmp_path: Path) -> None:
    folder = fixtures(tmp_path)
    done = invoke("kernels", str(folder / "sm120a-only.so"), str(folder / "sm120-plus-ptx.so"), str(folder / "ptx-only-80.so"),
                  "--to-cc", "12.0", "--to-cc", "12.1")
    assert done.returncode == 1
    assert done.stdout.decode().splitlines() == [
        "3 files for 12.0, 12.1 (--to-cc)",
        f"{folder}/sm120a-only.so: sm_120a: runs on 12.0 (sm_120a); no code for 12.1 (sm_120a runs on 12.0 only)",
        f"{folder}/sm120-plus-ptx.so: sm_120, PTX compute_120: runs on 12.0 (sm_120); runs on 12.1 (sm_120)",
        f"{folder}/ptx-only-80.so: no SASS, PTX compute_80: runs on 12.0 after a JIT (compute_80: the driver compiles it at "
        "the first start); runs on 12.1 after a JIT (compute_80: the driver compiles it at the first start)",
    ]
    ok = invoke("kernels", str(folder / "sm120-plus-ptx.so"), "--to-cc", "12")
    assert ok.returncode == 0 and ok.stdout.decode().splitlines()[0] == "1 file for 12.0 (--to-cc)"


def test_the_gpus_of_nvidia_smi(tmp_path: Path) -> None:
    folder = fixtures(tmp_path)
    done = invoke("kernels", str(folder / "sm120f.so"), str(folder / "sm120a-only.so"), env=standin(tmp_path, "gb10"))
    assert done.returncode == 1
    assert done.stdout.decode().splitlines() == [
        "2 files for 12.1 (nvidia-smi: 1 x NVIDIA GB10)",
        f"{folder}/sm120f.so: sm_120f: runs on 12.1 (sm_120f)",
        f"{folder}/sm120a-only.so: sm_120a: no code for 12.1 (sm_120a runs on 12.0 only)",
    ]
    pcie = invoke("kernels", str(folder / "sm120a-only.so"), env=standin(tmp_path / "rtx", "rtxpro6000-8pcie"))
    assert pcie.returncode == 0
    assert pcie.stdout.decode().splitlines()[0] == "1 file for 12.0 (nvidia-smi: 8 x NVIDIA RTX PRO 6000 Blackwell Workstation Edition)"


def test_json(tmp_path: Path) -> None:
    folder = fixtures(tmp_path)
    done = invoke("kernels", str(folder / "fat-compressed.so"), str(folder / "sm120f.so"), "--to-cc", "12.1", "--json")
    doc = json.loads(done.stdout)
    assert (doc["command"], doc["ok"], doc["exit_code"], doc["gpus"], doc["gpus_from"]) == ("kernels", True, 0, ["12.1"], "--to-cc")
    fat, family = doc["files"]
    assert fat == {"path": f"{folder}/fat-compressed.so", "file": f"{folder}/fat-compressed.so", "distribution": None,
                   "version": None, "sass": ["sm_80", "sm_90", "sm_100", "sm_120", "sm_121a"], "ptx": ["compute_120"],
                   "compressed": True, "relocatable": [], "lto": [], "other": [], "registered": True,
                   "names": [{"name": n, "cuobjdump": c, "kind": k, "section": ".nv_fatbin", "loads": True, "entries": e}
                             for n, c, k, e in (("sm_80", "sm_80", "sass", 2), ("sm_90", "sm_90", "sass", 2),
                                                ("sm_100", "sm_100", "sass", 2), ("sm_120", "sm_120", "sass", 2),
                                                ("sm_121a", "sm_121a", "sass", 2), ("compute_120", "sm_120", "ptx", 1))],
                   "entries": 11, "cuda": True, "problem": None, "what": None, "loaded": True, "verdict": "sass",
                   "elsewhere": None, "imported_by": None, "gpus": [{"cc": "12.1", "runs": "sass", "by": ["sm_120", "sm_121a"], "why": None}]}
    assert (family["sass"], family["compressed"], family["verdict"]) == (["sm_120f"], False, "sass")
    # patchkit's name beside cuobjdump's: --list-elf names the family cubin's file x.sm_120.cubin (data/sm120f.cuobjdump.txt).
    assert [(n["name"], n["cuobjdump"]) for n in family["names"]] == [("sm_120f", "sm_120")]
    assert doc["jit"] == []


def test_broken_and_other_files_get_a_verdict_line(tmp_path: Path) -> None:
    cut = tmp_path / "cut.so"
    cut.write_bytes((FIXTURES / "sm120f.so").read_bytes()[:9000])
    plain = tmp_path / "libplain.so.1"
    plain.write_bytes((FIXTURES / "sm120f.so").read_bytes()[:4])  # \x7fELF and nothing more
    done = invoke("kernels", str(cut), str(plain), str(FIXTURES / "README.md"), "--to-cc", "12.0")
    assert done.returncode == 1 and done.stderr == b""
    assert done.stdout.decode().splitlines() == [
        "3 files for 12.0 (--to-cc)",
        f"{cut}: unreadable: truncated: 34 section headers at byte 24664 end past the end of the file (byte 9000)",
        f"{plain}: unreadable: truncated: the ELF header needs 52 bytes or more, the file has 4",
        f"{FIXTURES}/README.md: not an ELF file (no \\x7fELF at its start)",
    ]


def test_bad_input(tmp_path: Path) -> None:
    missing = invoke("kernels", str(tmp_path / "gone.so"))
    assert (missing.returncode, missing.stderr.decode()) == (2, f"patchkit: {tmp_path}/gone.so: no such file or directory\n")
    both = invoke("kernels", str(tmp_path), "--python", sys.executable)
    assert both.returncode == 2 and both.stderr.decode().startswith("patchkit: give PATH or --python, not both")
    cc = invoke("kernels", str(tmp_path), "--to-cc", "12.x")
    assert cc.returncode == 2 and cc.stderr.decode().startswith(
        "patchkit: --to-cc '12.x' is not the compute capability of an NVIDIA GPU: NVIDIA's are 3.0 ")  # one line, every command's
    auto = invoke("kernels", str(tmp_path), "--to-cc", "auto", "--json", env=standin(tmp_path, "garbled"))
    assert auto.returncode == 2 and json.loads(auto.stdout)["error"].startswith(f"{tmp_path}/bin/nvidia-smi: `nvidia-smi --query-gpu")
    garbled = invoke("kernels", str(FIXTURES / "sm120f.so"), env=standin(tmp_path, "garbled"))
    assert garbled.returncode == 0
    assert garbled.stdout.decode().splitlines()[-1].startswith(f"no verdict: {tmp_path}/bin/nvidia-smi: `nvidia-smi --query-gpu")
