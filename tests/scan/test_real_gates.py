"""``patchkit scan`` on real releases: the platform-flag and preprocessor gates of SGLang and
FlashInfer, in the site-packages pip installs from their PyPI wheels (cached: ``support.mirror``):
the session's virtualenv templates (``support.prebuilt``), which other tests hold too, only read.

What the wheels hold (checked here, not assumed): SGLang 0.5.23's ``_resolve_backend``
refuses the FlashInfer all-reduce fusion on anything but SM90 and SM100 (line 48 of
``sglang/srt/layers/flashinfer_comm_fusion.py``); FlashInfer 0.6.4's
``include/flashinfer/comm/trtllm_allreduce.cuh`` wraps its PDL calls in 13
``__CUDA_ARCH__ < 1200`` guards, which 0.6.17 no longer has.
"""

from __future__ import annotations

import json
import re
import zipfile
import zlib
from pathlib import Path

import pytest

from patchkit.fixes.registry import FIXES
from patchkit.rewrite.capability import pair
from patchkit.rewrite.rules import rewrite_file
from patchkit.scan.classify import classify
from patchkit.scan.source import scan_file
from patchkit.scan.tree import in_scan, source_files
from support.cli import invoke
from support.mirror import default_cache, fetch_wheel
from support.repos import make_repo
from support.venvs import site_packages

pytestmark = pytest.mark.network  # SGLang's and FlashInfer's real wheels, fetched once into the cache

FUSION = "sglang/srt/layers/flashinfer_comm_fusion.py"
GATE_48 = "not (get_platform().is_sm90 or get_platform().is_sm100)"
TRTLLM = "flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh"
GUARD = "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && (__CUDA_ARCH__ < 1200))"
GUARD_LINES = [417, 455, 485, 533, 711, 895, 950, 991, 1053, 1207, 1265, 1335, 1444]
SM120 = pair(10, 12)[1]


def _wheel(version: str, distribution: str = "sglang") -> Path:
    return fetch_wheel(version, default_cache(), distribution)


def _read(wheel: Path, name: str) -> bytes:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(name)


def _installed(prebuilt, wheel: Path) -> Path:
    """The site-packages of a virtualenv with only ``wheel`` installed by pip: every file of the
    wheel (none of these three has a ``.data`` folder), and its dist-info, which holds nothing
    ``patchkit scan`` reads (checked in test_the_trees_are_the_wheels)."""
    return site_packages(prebuilt.venv(wheel))


@pytest.fixture(scope="module")
def sglang_0523(prebuilt) -> Path:
    return _installed(prebuilt, _wheel("0.5.23"))


@pytest.fixture(scope="module")
def flashinfer(prebuilt) -> dict[str, Path]:
    return {v: _installed(prebuilt, _wheel(v, "flashinfer-python")) for v in ("0.6.4", "0.6.17")}


def test_the_trees_are_the_wheels(sglang_0523: Path, flashinfer: dict) -> None:
    """What scan reads in each tree is what the wheel holds, and nothing more: the same files, each
    with the size and CRC-32 the wheel's directory gives it."""
    for tree, wheel in [(sglang_0523, _wheel("0.5.23")), *((flashinfer[v], _wheel(v, "flashinfer-python")) for v in flashinfer)]:
        with zipfile.ZipFile(wheel) as zf:
            held = {i.filename: (i.file_size, i.CRC) for i in zf.infolist() if not i.is_dir() and in_scan(i.filename)}
        found = {}
        for full, rel in source_files(tree):
            data = Path(full).read_bytes()
            found[rel] = (len(data), zlib.crc32(data))
        assert found == held, wheel.name


def _json_scan(tree: Path) -> dict:
    done = invoke("scan", str(tree), "--cc", "12", "--json")
    assert done.returncode == 1, done.stderr  # gates found
    doc = json.loads(done.stdout)
    assert doc["skipped"] == []
    return doc


# --- SGLang: platform flags ------------------------------------------------------------------


def test_sglang_0523_resolve_backend_gate(sglang_0523: Path) -> None:
    source = (sglang_0523 / FUSION).read_bytes()
    assert source.splitlines()[47].strip() == f"if {GATE_48}:".encode()  # line 48 of the wheel
    doc = _json_scan(sglang_0523)
    at_48 = [f for f in doc["findings"] if f["path"] == FUSION and f["line"] == 48]
    assert at_48 == [
        {
            "path": FUSION,
            "line": 48,
            "kind": "platform-flag",
            "snippet": GATE_48,
            "values": ["is_sm90", "is_sm100"],
            "name": None,
            "patchable": False,
            "names_cc": False,
            "covered_by": None,
            "class": "unaware",
        }
    ]
    # The fusion's own gate in add_norm.py is the one allreduce-fusion's predicate rule patches.
    (add_norm,) = [f for f in doc["findings"] if f["path"].endswith("residual/add_norm.py")]
    assert (add_norm["line"], add_norm["snippet"], add_norm["class"], add_norm["covered_by"]) == (
        146, "(_is_sm90_supported or _is_sm100_supported)", "covered", "allreduce-fusion"
    )
    assert doc["counts"]["platform-flag"] == sum(f["kind"] == "platform-flag" for f in doc["findings"]) > 100
    assert doc["files_seen"] > doc["files_parsed"] > 0


def test_sglang_0523_piped(sglang_0523: Path) -> None:
    layers = sglang_0523 / "sglang/srt/layers"
    done = invoke("scan", str(layers))
    assert done.returncode == 1
    lines = done.stdout.decode().splitlines()
    assert f"{layers}/flashinfer_comm_fusion.py:48: unaware: platform-flag: {GATE_48}" in lines
    mine = [line for line in lines if line.startswith(f"{layers}/flashinfer_comm_fusion.py:")]
    assert mine == [
        f"{layers}/flashinfer_comm_fusion.py:{n}: unaware: platform-flag: {code}"
        for n, code in [
            (41, "get_platform().is_sm100"),  # _mnnvl_supported
            (48, GATE_48),
            (54, "not get_platform().is_sm100"),  # the cutedsl backend
            (63, "get_platform().is_sm100"),
            (69, "get_platform().is_sm100"),
        ]
    ]
    assert re.fullmatch(r"\d+ capability gates in \d+ files \(.*\); scanned \d+ files, parsed \d+", lines[-1])


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_blackwell_is_majors_10_11_12(version: str) -> None:
    """Why ``is_blackwell_supported`` never excludes SM120: its definition in the release."""
    common = _read(_wheel(version), "sglang/srt/utils/common.py").decode()
    assert (
        "is_blackwell_supported = is_blackwell = lru_cache(maxsize=1)(\n    partial(\n        _check_cuda_device_version,\n"
        "        device_capability_majors=[10, 11, 12],\n"
    ) in common
    assert "_check_cuda_device_version, device_capability_majors=[10], cuda_version=(12, 8)" in common  # is_sm100_supported


def test_sglang_059_blackwell_gates_are_not_findings() -> None:
    path = "sglang/srt/layers/quantization/fp8_utils.py"
    source = _read(_wheel("0.5.9"), path)
    lines = [n for n, text in enumerate(source.splitlines(), 1) if b"is_blackwell_supported()" in text]
    assert b"return is_sm90_supported() or is_blackwell_supported()" in source.splitlines()[lines[0] - 1]
    assert len(lines) >= 4
    assert [f for f in scan_file(source, path, 10, 12) if f.line in lines] == []
    # From 9 the same flags do tell the two apart: Hopper is no Blackwell.
    assert [f.line for f in scan_file(source, path, 9, 12) if f.kind == "platform-flag" and f.line in lines]


def test_sglang_059_fusion_gate_before_and_after_the_fix() -> None:
    """The check another stage makes after applying fixes: the gate is found on 0.5.9's
    communicator.py, and gone once allreduce-fusion's predicate rule has rewritten it."""
    wheel = _wheel("0.5.9")
    path = "sglang/srt/layers/communicator.py"
    before = _read(wheel, path)
    unaware = [f for f in scan_file(before, path, 10, 12) if f.kind == "platform-flag" and classify(f, SM120, None) == "unaware"]
    assert [(f.line, f.snippet) for f in unaware] == [(95, "(_is_sm90_supported or _is_sm100_supported)")]

    def read(repo_path: str) -> bytes | None:
        try:
            return _read(wheel, repo_path.removeprefix("python/"))
        except KeyError:
            return None

    rules = [r for r in FIXES["allreduce-fusion"].rules if r.project == "sglang"]
    after = rewrite_file(before, f"python/{path}", rules, read, root="python")
    assert after.changed
    assert b"(_is_sm90_supported or _is_sm100_supported or _is_sm120_supported)" in after.source
    left = [f for f in scan_file(after.source, path, 10, 12) if f.kind == "platform-flag"]
    assert [f for f in left if classify(f, SM120, None) == "unaware"] == []


# --- FlashInfer: preprocessor guards -----------------------------------------------------------


def test_flashinfer_064_lists_the_13_guards(flashinfer: dict) -> None:
    doc = _json_scan(flashinfer["0.6.4"])
    guards = [f for f in doc["findings"] if f["path"] == TRTLLM]
    assert [(f["line"], f["kind"], f["snippet"], f["values"], f["name"], f["class"]) for f in guards] == [
        (n, "preprocessor", GUARD, [900, 1200], "__CUDA_ARCH__", "unaware") for n in GUARD_LINES
    ]
    source = (flashinfer["0.6.4"] / TRTLLM).read_bytes().decode().splitlines()
    assert [n for n, text in enumerate(source, 1) if text == GUARD] == GUARD_LINES
    assert doc["counts"]["preprocessor"] == sum(f["kind"] == "preprocessor" for f in doc["findings"])


def test_flashinfer_0617_has_them_no_more(flashinfer: dict) -> None:
    source = (flashinfer["0.6.17"] / TRTLLM).read_bytes().decode().splitlines()
    opened = [n for n, text in enumerate(source, 1) if text == "#if (defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900))"]
    assert len(opened) == 13 and GUARD not in source  # the same guards, without "< 1200"
    doc = _json_scan(flashinfer["0.6.17"])
    assert [f for f in doc["findings"] if f["path"] == TRTLLM] == []
    assert [f for f in doc["findings"] if f["kind"] == "preprocessor" and f["class"] == "unaware"] == [
        {
            "path": "flashinfer/data/include/flashinfer/sampling.cuh",
            "line": 106,
            "kind": "preprocessor",
            "snippet": "#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 1070)",
            "values": [1070],
            "name": "__CUDA_ARCH__",
            "patchable": False,
            "names_cc": False,
            "covered_by": None,
            "class": "unaware",
        }
    ]


def test_flashinfer_064_piped(flashinfer: dict) -> None:
    comm = flashinfer["0.6.4"] / "flashinfer/data/include/flashinfer/comm"
    done = invoke("scan", str(comm))
    assert done.returncode == 1
    lines = done.stdout.decode().splitlines()
    assert [line for line in lines if "trtllm_allreduce.cuh:" in line] == [
        f"{comm}/trtllm_allreduce.cuh:{n}: unaware: preprocessor: {GUARD}" for n in GUARD_LINES
    ]


def test_flashinfer_releases_compared_from_git_objects(flashinfer: dict, tmp_path: Path) -> None:
    """``scan --repo``: the header in FlashInfer's repository layout (``include/`` at the root),
    one release per tag; the 13 guards disappear from 0.6.4 to 0.6.17."""
    releases = {
        f"v{v}": {"include/flashinfer/comm/trtllm_allreduce.cuh": (flashinfer[v] / TRTLLM).read_bytes()}
        for v in ("0.6.4", "0.6.17")
    }
    repo = make_repo(tmp_path / "flashinfer", releases)
    done = invoke("scan", "--repo", str(repo), "--tag", "v0.6.4", "--tag", "v0.6.17", "--json")
    assert done.returncode == 0, done.stderr  # nothing appeared
    doc = json.loads(done.stdout)
    assert doc["counts"] == {"appeared": 0, "appeared_unaware": 0, "disappeared": 13, "changed": 0, "unchanged": 0}
    assert [(f["line"], f["kind"], f["class"]) for f in doc["disappeared"]] == [
        (n, "preprocessor", "unaware") for n in GUARD_LINES
    ]
    assert doc["before"]["files_seen"] == doc["before"]["files_parsed"] == 1


# --- 12.1 after 12.0: what names 12.0 and not 12.1 ------------------------------------------------

def test_sglang_0523_gates_of_12_0_that_leave_12_1_out(sglang_0523: Path) -> None:
    """``scan --from-cc 12.0 --to-cc 12.1``: a comparison that names 12.0 alone (``== 120``,
    ``== (12, 0)``) is unaware of a GB10; one that names 12.1 (``== (12, 1)``, ``is_sm121()``) is aware.
    With ``--to-cc 12`` after 10 the same comparisons name the major, and are aware."""
    done = invoke("scan", str(sglang_0523), "--from-cc", "12.0", "--to-cc", "12.1")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.decode().splitlines()
    assert f"{sglang_0523}/sglang/srt/model_loader/utils.py:284: unaware: equality: get_device_sm() == 120" in lines
    assert f"{sglang_0523}/sglang/srt/utils/common.py:343: unaware: equality: torch.cuda.get_device_capability() == (12, 0)" in lines
    assert f"{sglang_0523}/sglang/srt/utils/common.py:350: aware: equality: torch.cuda.get_device_capability() == (12, 1)" in lines
    assert f"{sglang_0523}/sglang/srt/layers/attention/qwen_sparse_attn_backend.py:85: aware: platform-flag: is_sm121()" in lines
    assert lines[-1] == ("18 capability gates in 15 files (14 unaware, 4 aware, 0 covered; 0 patchable by patchkit); "
                         "scanned 5029 files, parsed 69")
    # --cc is the same option as --to-cc (asked of one folder: the whole tree is read above).
    utils = sglang_0523 / "sglang/srt/utils"
    in_utils = invoke("scan", str(utils), "--from-cc", "12.0", "--to-cc", "12.1").stdout
    assert f"{utils}/common.py:350: aware: equality: torch.cuda.get_device_capability() == (12, 1)".encode() in in_utils
    assert invoke("scan", str(utils), "--from-cc", "12.0", "--cc", "12.1").stdout == in_utils
    major = invoke("scan", str(sglang_0523 / "sglang/srt/model_loader"), "--to-cc", "12").stdout.decode().splitlines()
    assert f"{sglang_0523}/sglang/srt/model_loader/utils.py:284: aware: equality: get_device_sm() == 120" in major
