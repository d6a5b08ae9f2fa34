"""A wheel-installed SGLang whose METADATA says a local version (``0.5.9+cu128``: a build of
0.5.9 from another index).  Each wheel is the real PyPI wheel of the release (cached, see
support.mirror), rebuilt with that version (its dist-info renamed, METADATA's Version and RECORD
rewritten, every other file byte for byte the release's) and installed by pip, once a session into
a template virtualenv (support.prebuilt) that each test copies.

patchkit takes the shipped series of the public release (``patches/0.5.9/``) when the files are
its pre-image, and generates from the files when they are not; every release range takes the local
version as its public release (``torch-symm-mem``'s KeyError range ends at 0.5.13.post1)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import zipfile
from pathlib import Path

from patchkit.data import shipped
from support.cli import invoke
from support.mirror import default_cache, fetch_wheel
from support.prebuilt import Prebuilt
from support.venvs import copy_venv

DC = "sglang/srt/distributed/device_communicators"
DEEPGEMM = "0001-Keep-DeepGEMM-off-on-SM120-SM121-unless-it-has-their.patch"  # the DeepGEMM fix, on by default
SYMM = "0002-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"
EFFECT = ("effect: torch-symm-mem prevents \"KeyError: 12\" on SGLang {version}; it takes effect with multicast over NVLink "
          "(NVSwitch) between the GPUs, else the communicator will then turn itself off (\"torch symmetric memory "
          "multicast operations are not supported\"): the all-reduce stays on NCCL (`patchkit doctor` says what this "
          "machine has)")


def local_wheel(wheel: Path, label: str, dest: Path) -> Path:
    """``wheel`` rebuilt as ``<version>+<label>``: the dist-info folder renamed, METADATA's Version
    and RECORD rewritten (RECORD as pip reads it: csv rows of path, sha256, size), the rest unchanged.
    Its members are stored, not deflated: the files pip installs from it are the same bytes, and
    deflating 20 to 45 MB again took most of the rebuild's time."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        old = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
        dist, version = old[: -len(".dist-info")].rsplit("-", 1)
        new = f"{dist}-{version}+{label}.dist-info"
        files = {n.replace(old, new, 1) if n.startswith(f"{old}/") else n: zf.read(n) for n in names}
    meta = files[f"{new}/METADATA"].decode()
    assert f"\nVersion: {version}\n" in meta
    files[f"{new}/METADATA"] = meta.replace(f"\nVersion: {version}\n", f"\nVersion: {version}+{label}\n", 1).encode()
    record = io.StringIO()
    rows = csv.writer(record, lineterminator="\n")
    for name, data in files.items():
        if name != f"{new}/RECORD":
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.writerow([name, f"sha256={digest}", len(data)])
    rows.writerow([f"{new}/RECORD", "", ""])
    files[f"{new}/RECORD"] = record.getvalue().encode()
    target = dest / wheel.name.replace(f"-{version}-", f"-{version}+{label}-", 1)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return target


def installed(prebuilt: Prebuilt, tmp_path: Path, version: str, label: str = "cu128") -> tuple[Path, Path]:
    """(python, site-packages) of a copy of a virtualenv with SGLang ``version+label`` installed by
    pip: the wheel is rebuilt and installed once a session (``Prebuilt.venv``), each test writes in its copy."""

    def build(dest: Path) -> None:
        dest.mkdir()
        local_wheel(fetch_wheel(version, default_cache()), label, dest)

    (wheel,) = prebuilt.get(f"wheel-sglang-{version}+{label}", build).glob("*.whl")
    venv = copy_venv(prebuilt.venv(wheel), tmp_path / "V")
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert (site / f"sglang-{version}+{label}.dist-info" / "METADATA").is_file()
    return venv / "bin" / "python", site


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_local_build_of_0_5_9_takes_0_5_9s_shipped_series(prebuilt: Prebuilt, tmp_path: Path) -> None:
    python, site = installed(prebuilt, tmp_path, "0.5.9")
    manifest = json.loads((shipped("patches") / "0.5.9" / "manifest.json").read_bytes())
    (symm,) = [e for e in manifest["series"] if e["fix"] == "torch-symm-mem"]
    files = {f["path"].removeprefix("python/"): f for f in symm["files"]}
    assert {rel: sha(site / rel) for rel in files} == {rel: f["pre_sha256"] for rel, f in files.items()}
    first = f"{site}/sglang: SGLang 0.5.9+cu128 (installed), from sglang-0.5.9+cu128.dist-info"

    status = invoke("status", "--python", str(python))
    assert status.returncode == 0, status.stderr
    assert status.stdout.decode().splitlines()[4] == (  # target, project, version, applied, shipped
        f"shipped:  patches/0.5.9/{DEEPGEMM} + patches/0.5.9/{SYMM} + patches/0.5.9/0003-Allow-the-FlashInfer-all-reduce-fusion-on-SM120.patch")

    done = invoke("apply", "--python", str(python))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines() == [
        first,
        f"applied shipped patch patches/0.5.9/{DEEPGEMM} + patches/0.5.9/{SYMM}",
        f"  patched {DC}/all_reduce_utils.py (+6 lines)",
        f"  patched {DC}/torch_symm_mem.py (+1 line)",
        "  patched sglang/srt/layers/deep_gemm_wrapper/configurer.py (+3 lines)",
        "  SGLang 0.5.13's change in sglang/srt/layers/deep_gemm_wrapper/configurer.py: 1 hunk applied exactly",
        "  sm_version == 120 (def _compute_enable_deep_gemm): now sm_version in (120, 121) (121 admitted as 120 is)",
        "  TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (module): key 12 = key 10",
        "  _WORLD_SIZES_MULTIMEM (class TorchSymmMemCommunicator): key 12 = key 10",
        'effect: deepgemm-sm12x prevents "RuntimeError: Assertion error (.../csrc/apis/attention.hpp:219): Unsupported '
        'architecture" on SGLang 0.5.9+cu128 (`patchkit doctor` says what this machine has)',
        EFFECT.format(version="0.5.9+cu128"),
        "dropped 0 cached bytecode files",
    ]
    assert {rel: sha(site / rel) for rel in files} == {rel: f["post_sha256"] for rel, f in files.items()}
    verified = invoke("verify", "--python", str(python))
    assert verified.returncode == 0 and verified.stdout.decode().splitlines()[-1] == "verify: ok (key 12 = key 10 in every table)"
    reverted = invoke("revert", "--python", str(python))
    assert reverted.returncode == 0, reverted.stderr
    assert reverted.stdout.decode().splitlines()[:2] == [first, f"reverted shipped patch patches/0.5.9/{DEEPGEMM} + patches/0.5.9/{SYMM}"]
    assert {rel: sha(site / rel) for rel in files} == {rel: f["pre_sha256"] for rel, f in files.items()}


def test_a_local_build_whose_files_are_not_the_releases_is_generated_from_them(prebuilt: Prebuilt, tmp_path: Path) -> None:
    """The series of 0.5.9 fits only 0.5.9's bytes: a build that changed a file gets the change
    generated from its files, and the note names the file; --no-generate refuses (exit 3)."""
    python, site = installed(prebuilt, tmp_path, "0.5.9")
    with open(site / DC / "torch_symm_mem.py", "ab") as f:
        f.write(b"# built for CUDA 12.8\n")
    refused = invoke("apply", "--python", str(python), "--no-generate")
    assert refused.returncode == 3 and refused.stderr.decode() == (
        f"patchkit: {DC}/torch_symm_mem.py: differs from the pre-image of patches/0.5.9/{DEEPGEMM} + patches/0.5.9/{SYMM} "
        "(a local edit?); "
        "--no-generate refuses to generate a patch\n")
    done = invoke("apply", "--python", str(python))
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().splitlines()[1:3] == [
        f"note: files differ from the pre-image of patches/0.5.9/{DEEPGEMM} + patches/0.5.9/{SYMM} (local edits?): "
        f"{DC}/torch_symm_mem.py",
        "applied generated from the installed files",
    ]
    assert (site / DC / "torch_symm_mem.py").read_bytes().endswith(b"# built for CUDA 12.8\n")


def test_no_series_names_the_release_it_looked_for(prebuilt: Prebuilt, tmp_path: Path) -> None:
    python, _ = installed(prebuilt, tmp_path, "0.5.9")
    (tmp_path / "empty").mkdir()
    status = invoke("status", "--python", str(python), "--patches", str(tmp_path / "empty"))
    assert status.returncode == 0, status.stderr
    assert status.stdout.decode().splitlines()[4] == (  # target, project, version, applied, shipped
        "shipped:  no shipped patch for SGLang 0.5.9+cu128 (release 0.5.9); apply generates the change from the files")


def test_the_last_release_of_a_failure_range_with_a_local_label(prebuilt: Prebuilt, tmp_path: Path) -> None:
    """torch-symm-mem's KeyError range is 0.5.4.post3 - 0.5.13.post1: a build 0.5.13.post1+cu129 is in
    it (as its apply says), and takes 0.5.13.post1's series."""
    python, site = installed(prebuilt, tmp_path, "0.5.13.post1", "cu129")
    done = invoke("apply", "--python", str(python))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[:2] == [f"{site}/sglang: SGLang 0.5.13.post1+cu129 (installed), from sglang-0.5.13.post1+cu129.dist-info",
                         f"applied shipped patch patches/0.5.13.post1/{DEEPGEMM} + patches/0.5.13.post1/{SYMM}"]
    assert EFFECT.format(version="0.5.13.post1+cu129") in lines
