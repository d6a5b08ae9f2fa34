"""``patchkit fixes``: every fix, its rules, and the releases the shipped series cover."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from patchkit.commands import fixes as command
from patchkit.errors import BadInput
from patchkit.fixes.kinds import DictKeyRule, ListMemberRule, PredicateRule
from patchkit.fixes.load import Fix
from patchkit.fixes.registry import FIXES, PROJECTS
from patchkit.render import document, text

# Two fixes written for these tests: one on by default (a dict-key rule for SGLang and one
# for vLLM), one opt-in (a list-member rule for FlashInfer, a predicate rule for SGLang).
TABLES = Fix("tables", "Add SM120 to the tables", "Why.", True, (
    DictKeyRule("tables", "sglang", ("python/pkg/comm/*.py",), 10, 12, "not upstream; copied from SM100, untuned", "NVLink",
                tables=("MAX_SIZES", "_SIZES")),
    DictKeyRule("tables", "vllm", ("vllm/comm/*.py",), "10.0", "12.0", "not upstream; copied from SM100, untuned", "",
                tables=("MAX_SIZES",)),
))
FUSION = Fix("fusion", "Allow the fusion on SM120", "Why not.", False, (
    ListMemberRule("fusion", "flashinfer", ("flashinfer/jit/comm.py",), 10, 12, "upstream in 0.6.17",
                   "nvcc with sm_120", call="get_nvcc_flags_list", keyword="supported_major_versions", functions=("gen_module",)),
    PredicateRule("fusion", "sglang", ("python/pkg/a.py", "python/pkg/b.py"), "sm100", "sm120",
                  "not upstream", "the FlashInfer rule", functions=("f", "g"), flag="_is_sm100_supported"),
))


def manifest(version: str, statuses: dict[str, str]) -> dict:
    """A manifest in the shape generate writes: one patch in the series per patched fix."""
    series = [
        {
            "fix": fix, "patch": f"000{i}-{fix}.patch", "patch_sha256": "0" * 64, "from_cc": 10, "to_cc": 12,
            "rules": [], "already_upstream": [],
            "files": [{
                "path": "python/pkg/comm/utils.py", "mode": "100644", "pre_blob": "1" * 40, "post_blob": "2" * 40,
                "pre_sha256": "3" * 64, "post_sha256": "4" * 64,
                "tables": [{"name": "MAX_SIZES", "scope": "module", "status": "patched", "added_key": 12,
                            "copied_from": 10, "value": "{2: 1}"}],
            }],
        }
        for i, (fix, status) in enumerate(statuses.items(), 1) if status == "patched"
    ]
    return {
        "project": "sglang", "version": version, "tag": f"v{version}", "commit": "5" * 40, "patchkit": "0.1.0",
        "fixes": [{"fix": fix, "status": status, "reason": None} for fix, status in statuses.items()],
        "series": series,
    }


def write(folder: Path, doc: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps(doc, indent=2))


# SGLang: six releases (0.5.9 before 0.5.10, .post1 after its release); 0.5.4 lists no
# fusion (generated before it); 0.5.5 found nothing to patch for it.
SGLANG = {
    "0.5.3": {"tables": "patched", "fusion": "patched"},
    "0.5.4": {"tables": "patched"},
    "0.5.4.post1": {"tables": "patched", "fusion": "patched"},
    "0.5.5": {"tables": "patched", "fusion": "nothing to patch"},
    "0.5.9": {"tables": "already upstream", "fusion": "patched"},
    "0.5.10": {"tables": "already upstream", "fusion": "patched"},
}
FLASHINFER = {"0.6.15": {"fusion": "patched"}, "0.6.16": {"fusion": "patched"}}


@pytest.fixture
def patches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(command, "FIXES", {"tables": TABLES, "fusion": FUSION})
    root = tmp_path / "patches"
    for version, statuses in SGLANG.items():
        write(root / version, manifest(version, statuses))
    for version, statuses in FLASHINFER.items():
        write(root / "flashinfer" / version, manifest(version, statuses))
    (root / "0.5.6").mkdir()  # a release folder without its manifest yet: not shipped
    (root / "notes").mkdir()  # not a release
    (root / "README.md").write_text("the shipped patches\n")
    return root


LINES = [
    "tables: Add SM120 to the tables",
    "  default: on by default",
    "  rule 1: SGLang, dict-key",
    "    files:    python/pkg/comm/*.py",
    "    where:    MAX_SIZES, _SIZES",
    "    evidence: not upstream; copied from SM100, untuned",
    "    needs:    NVLink",
    "  rule 2: vLLM, dict-key",
    "    files:    vllm/comm/*.py",
    "    where:    MAX_SIZES",
    "    evidence: not upstream; copied from SM100, untuned",
    "  releases:",
    "    SGLang (6 shipped releases):",
    "      patched:          0.5.3 - 0.5.5 (4 releases)",
    "      already upstream: 0.5.9 - 0.5.10 (2 releases)",
    "    vLLM: no shipped series",
    "",
    "fusion: Allow the fusion on SM120",
    "  default: opt-in, with --fix fusion",
    "  rule 1: FlashInfer, list-member",
    "    files:    flashinfer/jit/comm.py",
    "    where:    get_nvcc_flags_list(supported_major_versions=[...]) in gen_module()",
    "    evidence: upstream in 0.6.17",
    "    needs:    nvcc with sm_120",
    "  rule 2: SGLang, predicate",
    "    files:    python/pkg/a.py, python/pkg/b.py",
    "    where:    _is_sm100_supported or-expressions in f / g()",
    "    evidence: not upstream",
    "    needs:    the FlashInfer rule",
    "  releases:",
    "    FlashInfer (2 shipped releases):",
    "      patched:          0.6.15 - 0.6.16 (2 releases)",
    "      already upstream: none",
    "    SGLang (6 shipped releases):",
    "      patched:             0.5.3, 0.5.4.post1, 0.5.9 - 0.5.10 (2 releases)",
    "      already upstream:    none",
    "      nothing to patch:    0.5.5",
    "      not in the manifest: 0.5.4",
]


def test_lines(patches: Path) -> None:
    report = command.fixes(patches)
    assert text(report, True) == LINES
    assert report.exit_code == 0


def test_json(patches: Path) -> None:
    doc = document(command.fixes(patches))
    assert json.loads(json.dumps(doc)) == doc
    assert doc == {
        "command": "fixes",
        "patches": str(patches),
        "fixes": [
            {
                "name": "tables", "title": "Add SM120 to the tables", "rationale": "Why.", "default": True,
                "enable": None,
                "rules": [
                    {"project": "sglang", "label": "SGLang", "kind": "dict-key", "files": ["python/pkg/comm/*.py"],
                     "where": "MAX_SIZES, _SIZES", "evidence": "not upstream; copied from SM100, untuned",
                     "needs": "NVLink"},
                    {"project": "vllm", "label": "vLLM", "kind": "dict-key", "files": ["vllm/comm/*.py"],
                     "where": "MAX_SIZES", "evidence": "not upstream; copied from SM100, untuned", "needs": ""},
                ],
                "releases": [
                    {"project": "sglang", "label": "SGLang", "shipped": True, "releases": 6,
                     "patched": ["0.5.3", "0.5.4", "0.5.4.post1", "0.5.5"],
                     "patched_ranges": ["0.5.3 - 0.5.5 (4 releases)"],
                     "already_upstream": ["0.5.9", "0.5.10"],
                     "already_upstream_ranges": ["0.5.9 - 0.5.10 (2 releases)"],
                     "other": {}, "not_listed": [], "not_listed_ranges": []},
                    {"project": "vllm", "label": "vLLM", "shipped": False},
                ],
                "effect": None,
            },
            {
                "name": "fusion", "title": "Allow the fusion on SM120", "rationale": "Why not.", "default": False,
                "enable": "--fix fusion",
                "rules": [
                    {"project": "flashinfer", "label": "FlashInfer", "kind": "list-member",
                     "files": ["flashinfer/jit/comm.py"],
                     "where": "get_nvcc_flags_list(supported_major_versions=[...]) in gen_module()",
                     "evidence": "upstream in 0.6.17", "needs": "nvcc with sm_120"},
                    {"project": "sglang", "label": "SGLang", "kind": "predicate",
                     "files": ["python/pkg/a.py", "python/pkg/b.py"],
                     "where": "_is_sm100_supported or-expressions in f / g()", "evidence": "not upstream",
                     "needs": "the FlashInfer rule"},
                ],
                "releases": [
                    {"project": "flashinfer", "label": "FlashInfer", "shipped": True, "releases": 2,
                     "patched": ["0.6.15", "0.6.16"], "patched_ranges": ["0.6.15 - 0.6.16 (2 releases)"],
                     "already_upstream": [], "already_upstream_ranges": [],
                     "other": {}, "not_listed": [], "not_listed_ranges": []},
                    {"project": "sglang", "label": "SGLang", "shipped": True, "releases": 6,
                     "patched": ["0.5.3", "0.5.4.post1", "0.5.9", "0.5.10"],
                     "patched_ranges": ["0.5.3", "0.5.4.post1", "0.5.9 - 0.5.10 (2 releases)"],
                     "already_upstream": [], "already_upstream_ranges": [],
                     "other": {"nothing to patch": {"versions": ["0.5.5"], "ranges": ["0.5.5"]}},
                     "not_listed": ["0.5.4"], "not_listed_ranges": ["0.5.4"]},
                ],
                "effect": None,
            },
        ],
    }


def test_no_patches_folder_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(command, "FIXES", {"fusion": FUSION})
    lines = text(command.fixes(tmp_path / "missing"), True)
    assert lines[-3:] == ["  releases:", "    FlashInfer: no shipped series", "    SGLang: no shipped series"]


@pytest.mark.parametrize("content", [b"{not json", b'{"version": "0.5.9"}', b"[]"])
def test_a_corrupt_manifest_is_bad_input(patches: Path, content: bytes) -> None:
    (patches / "0.5.9" / "manifest.json").write_bytes(content)
    with pytest.raises(BadInput) as exc:
        command.fixes(patches)
    assert exc.value.path == str(patches / "0.5.9" / "manifest.json")
    assert "corrupt manifest" in exc.value.reason


@pytest.mark.parametrize(
    "chosen, expected",
    [
        ([], []),
        (["b"], ["b"]),
        (["a", "b", "c", "d", "e"], ["a - e (5 releases)"]),
        (["a", "c", "d"], ["a", "c - d (2 releases)"]),
        (["e", "a", "b"], ["a - b (2 releases)", "e"]),  # in the releases' order, whatever the order given
        (["x"], []),  # not a shipped release
    ],
)
def test_ranges(chosen: list[str], expected: list[str]) -> None:
    assert command.ranges(chosen, ["a", "b", "c", "d", "e"]) == expected


def test_the_shipped_patches() -> None:
    """Only what stays true as releases are added: the fixes, their defaults, kinds and projects."""
    report = command.fixes()
    doc = document(report)
    assert report.exit_code == 0
    assert doc["command"] == "fixes"
    assert [f["name"] for f in doc["fixes"]] == ["deepgemm-sm12x", "fusion-self-enable", "torch-symm-mem", "allreduce-fusion"] == list(FIXES)
    _deepgemm, self_enable, symm, fusion = doc["fixes"]
    # SGLang 0.5.8's narrowing of the fusion it turns on by itself: on by default, patched up to 0.5.7, upstream from 0.5.8.
    assert (self_enable["default"], self_enable["enable"]) == (True, None)
    assert [(r["project"], r["kind"]) for r in self_enable["rules"]] == [("sglang", "backport")] * 3
    shipped = next(r for r in self_enable["releases"] if r["project"] == "sglang")
    assert {"0.5.4.post2", "0.5.7"} <= set(shipped["patched"]) and {"0.5.8", "0.5.23"} <= set(shipped["already_upstream"])
    assert not {"0.5.4.post1", "0.5.8"} & set(shipped["patched"])
    assert (symm["default"], symm["enable"]) == (True, None)
    assert (fusion["default"], fusion["enable"]) == (False, "--fix allreduce-fusion")
    assert [(r["project"], r["kind"]) for r in symm["rules"]] == [("sglang", "dict-key"), ("vllm", "dict-key")]
    assert [(r["project"], r["kind"]) for r in fusion["rules"]] == [("flashinfer", "backport"), ("sglang", "predicate")]
    sglang = next(r for r in symm["releases"] if r["project"] == "sglang")
    assert sglang["shipped"] and "0.5.9" in sglang["patched"]
    assert sglang["patched"] == sorted(sglang["patched"], key=lambda v: command.version_key(v))
    assert "  default: on by default" in text(report, True)
    assert "  default: opt-in, with --fix allreduce-fusion" in text(report, True)
    assert set(PROJECTS) == {"sglang", "vllm", "flashinfer"}


def test_each_fix_says_what_it_does_and_when() -> None:
    """The real fixes' [effect]: what fails without them, per release range, and what they need."""
    lines = text(command.fixes(), True)
    start = lines.index("  effect:   adds key 12 (vLLM: \"12.0\") to each table, copying SM100's entry, so the communicator gets past its table look-up on SM120")
    assert lines[start + 2:start + 8] == [
        "  without it (with --enable-torch-symm-mem):",
        "    SGLang 0.5.3 - 0.5.4.post2 crashes with KeyError: 12 (SymmMemCommunicator.__init__ (symm_mem.py))",
        "    SGLang 0.5.4.post3 - 0.5.13.post1 crashes with KeyError: 12 (TorchSymmMemCommunicator.__init__ (torch_symm_mem.py))",
        "    SGLang 0.5.14 - 0.5.23 warns TorchSymmMemCommunicator: Device capability 12 not supported, communicator is not available. "
        "(TorchSymmMemCommunicator.__init__ (torch_symm_mem.py); the communicator stays off)",
        "    vLLM 0.10.2 - 0.33.0 warns SymmMemCommunicator: Device capability 12.0 not supported, communicator is not available. "
        "(SymmMemCommunicator.__init__ (symm_mem.py); the communicator stays off)",
        "  needs:    multicast over NVLink (NVSwitch) between the GPUs; without it the communicator will then turn itself off "
        "(\"torch symmetric memory multicast operations are not supported\"): the all-reduce stays on NCCL",
    ]
    # Since fusion-self-enable (on by default), the releases that turn the fusion on by themselves name the fix that stops them.
    assert ("  on by itself: SGLang 0.5.7 turns it on by itself on SM120 for DeepseekV3ForCausalLM, GptOssForCausalLM, "
            "Glm4MoeForCausalLM, Qwen3MoeForCausalLM, with FlashInfer below 0.6.17; fusion-self-enable keeps it off") in lines
    doc = {f["name"]: f for f in document(command.fixes())["fixes"]}
    assert doc["allreduce-fusion"]["effect"]["default_on"][0] == {
        "project": "sglang", "since": "0.5.4.post2", "until": "0.5.6.post2", "models": ["GptOssForCausalLM"],
        "with_project": "flashinfer", "fixed_in": "0.6.17", "prevented_by": "fusion-self-enable"}
    start = lines.index("  upstream: SGLang 0.5.8 turns it on by itself on SM90 and SM100 only (SGLang PR 16283, for SGLang issue 15650)")
    assert lines[start + 1:start + 3] == [
        "  without it (with enable_flashinfer_allreduce_fusion, which server_args.py sets by itself):",
        "    SGLang 0.5.4.post2 - 0.5.6.post2 crashes with No supported CUDA architectures found for major versions [9, 10]. "
        "(CUDA graph capture (\"Capture cuda graph failed\", SGLang issue 15650), in FlashInfer's JIT build of the TRT-LLM comm "
        "module (FlashInfer below 0.6.17): server_args.py turns the fusion on by itself for GptOssForCausalLM under "
        "is_blackwell_supported())"]
