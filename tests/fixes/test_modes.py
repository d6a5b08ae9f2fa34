"""The failure modes as data (patchkit/fixes/modes/*.toml, read by patchkit/fixes/modes.py), judged for
an install (judge/modes.py) and a launch line (judge/launch.py), said by doctor and the generated
docs/FAILURE-MODES.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpus.standin import standin

from patchkit.cc import CC
from patchkit.errors import BadInput
from patchkit.fixes.modes import FOLDER, Condition, Cost, modes, read_mode
from patchkit.judge.launch import read_launch
from patchkit.judge.modes import Exposed, modes_here
from patchkit.render.modes import atlas
from support.cli import invoke
from support.mirror import default_cache, fetch_wheel
from support.repos import ROOT

TRITON_FIX = "return knobs.nvidia.ptxas_blackwell if arch >= 100 else knobs.nvidia.ptxas"


def test_every_mode_reads_and_is_named_for_its_file() -> None:
    found = modes()
    assert [m.survey for m in found] == sorted(m.survey for m in found)
    for m in found:
        assert m.path.name == f"{m.survey:02d}-{m.name}.toml"
        assert m.ways_out, m.name
        assert m.cost == min(m.costs, key=lambda c: c.rank)
        assert all(e.proofs or e.quoted for e in m.exposed), m.name


def test_the_docs_are_generated_from_the_data() -> None:
    """docs/FAILURE-MODES.md is `make failure-modes`'s output for the data as it is."""
    assert (ROOT / "docs" / "FAILURE-MODES.md").read_text().splitlines() == atlas()


@pytest.mark.parametrize("edit, message", [
    (("costs = [\"crash\"]", "costs = [\"boom\"]"), "10-triton-ptxas-sm121a: 'costs': 'boom' is not one of silent-wrong, crash, hang, slowdown"),
    (("gpus = [\"12.1\"]", "gpus = [\"12.7\"]"), "10-triton-ptxas-sm121a: 'gpus': '12.7' is not the compute capability"),
    (("survey = 10", "survey = 11"), "the file of mode 'triton-ptxas-sm121a' (survey 11) is named 11-triton-ptxas-sm121a.toml"),
    (("fixed_in = \"3.6.0\"", "fixed_in = \"three\""), "exposed 1: 'fixed_in': 'three' is not a release version"),
    (("holds = \"return", "both = \"return"), "exposed 1, proofs 2: a proof names 'holds' or 'lacks', one of them"),
    (("holds = \"return", "machine = \"arm64\"\nholds = \"return"),
     "exposed 1, proofs 2: 'machine': 'arm64' is not aarch64 or x86_64 (a wheel's machine)"),
])
def test_a_wrong_mode_file_is_one_line_naming_it(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    path = tmp_path / "10-triton-ptxas-sm121a.toml"
    text = (FOLDER / path.name).read_text()
    assert edit[0] in text
    path.write_text(text.replace(edit[0], edit[1], 1))
    with pytest.raises(BadInput) as caught:
        read_mode(path)
    assert caught.value.path == str(path) and message in str(caught.value)


def _site(tmp_path: Path, version: str, compiler: str | None) -> Path:
    """A site-packages with Triton ``version``'s dist-info and, where given, its compiler.py's text."""
    site = tmp_path / f"site-{version}"
    (site / f"triton-{version}.dist-info").mkdir(parents=True)
    if compiler is not None:
        (site / "triton/backends/nvidia").mkdir(parents=True)
        (site / "triton/backends/nvidia/compiler.py").write_text(compiler)
    return site


def test_triton_is_judged_per_release_and_gpu(tmp_path: Path) -> None:
    site = _site(tmp_path, "3.5.1", "def get_ptxas(arch): return knobs.nvidia.ptxas\n")

    def judged(version: str, cc: CC, compiler: str | None = None) -> list:
        here = _site(tmp_path / f"{version}-{len(list(tmp_path.iterdir()))}", version, compiler) if compiler is not None else site
        return [(h.mode.name, h.verdict) for h in modes_here({"triton": version}, [cc], [here])]

    assert judged("3.5.1", CC(12, 1)) == [("triton-ptxas-sm121a", Exposed.EXPOSED)]
    assert judged("3.5.1", CC(12, 0)) == []  # its bundled ptxas knows sm_120a
    assert judged("3.6.0", CC(12, 1)) == []
    assert judged("3.2.0", CC(12, 1)) == []  # before the range read
    # Newer than read (3.9.0): its own files say. The first fixed release's text is there: not exposed.
    assert judged("3.10.0", CC(12, 1), f"    {TRITON_FIX}\n") == []
    # Not there (refactored, or regressed): not judged, never assumed like 3.9.0.
    assert judged("3.10.0", CC(12, 1), "def get_ptxas(arch): ...\n") == [("triton-ptxas-sm121a", Exposed.UNREAD)]
    # A way out in effect averts it.
    [h] = modes_here({"triton": "3.5.1"}, [CC(12, 1)], [site], in_effect=frozenset({"triton-ptxas"}))
    assert (h.verdict, h.averted_by.what) == (Exposed.AVERTED, "triton-ptxas")


def test_a_launch_line_states_and_rules_out_conditions(tmp_path: Path) -> None:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["DeepseekV32ForCausalLM"], "n_routed_experts": 256,
        "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}))
    launch = read_launch(("python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "8",
                          "--kv-cache-dtype", "fp8_e4m3", "--enable-flashinfer-allreduce-fusion"), tmp_path)
    assert {c: launch.holds(c) for c in (Condition.TENSOR_PARALLEL, Condition.FP8_KV, Condition.FP4_MOE, Condition.SPARSE_MLA,
                                         Condition.ALLREDUCE_FUSION, Condition.MXFP4, Condition.CUSTOM_ALL_REDUCE)} == {
        Condition.TENSOR_PARALLEL: True, Condition.FP8_KV: True, Condition.FP4_MOE: True, Condition.SPARSE_MLA: True,
        Condition.ALLREDUCE_FUSION: True, Condition.MXFP4: False, Condition.CUSTOM_ALL_REDUCE: None}
    plain = read_launch(("vllm", "serve", "org/model", "--disable-custom-all-reduce"), tmp_path)
    assert (plain.model, plain.holds(Condition.TENSOR_PARALLEL), plain.holds(Condition.FP4_MOE),
            plain.holds(Condition.CUSTOM_ALL_REDUCE)) == ("org/model", False, None, False)
    (model / "config.json").write_text("[1, 2")
    with pytest.raises(BadInput) as caught:
        read_launch(("vllm", "serve", "m"), tmp_path)
    assert caught.value.path == str(model / "config.json") and "not JSON" in str(caught.value)


def test_doctor_lists_the_modes_and_narrows_them_by_the_launch_line(tmp_path: Path, prebuilt) -> None:
    """A stand-in GB10 with FlashInfer 0.6.4's wheel installed: the fusion's arch list is a mode it is
    exposed to only if the fusion runs; a launch line that asks for the fusion makes it exposed, and
    the fix patchkit carries (its verdict decides the exit) comes before the upgrade."""
    venv = prebuilt.venv(fetch_wheel("0.6.4", default_cache(), "flashinfer-python"))
    env = standin(tmp_path / "gb10", "gb10")
    done = invoke("doctor", "--python", str(venv / "bin/python"), "--json", env=env)
    doc = json.loads(done.stdout)
    assert done.returncode == 0, doc
    by = {m["mode"]: m for m in doc["failure_modes"]}
    assert (by["flashinfer-jit-arch-list"]["verdict"], by["flashinfer-jit-arch-list"]["unstated"]) == ("exposed if", ["allreduce-fusion"])
    # No condition is stated: every mode of FlashInfer 0.6.4 on a GB10 is one "if", none fails doctor; silent wrong output first.
    assert {m["verdict"] for m in doc["failure_modes"]} == {"exposed if"} and doc["modes_failing"] == []
    ranks = [[c.value for c in Cost].index(m["cost"]) for m in doc["failure_modes"]]
    assert ranks == sorted(ranks) and {m["version"] for m in doc["failure_modes"]} == {"0.6.4"}
    text = invoke("doctor", "--python", str(venv / "bin/python"), env=env).stdout.decode().splitlines()
    [at] = [i for i, line in enumerate(text) if line.startswith("failure modes of the releases installed, on these GPUs "
                                                                  "(docs/FAILURE-MODES.md; read to ")]
    assert "flashinfer-python 0.7.4" in text[at]
    assert ("  flashinfer-jit-arch-list: exposed if allreduce-fusion: A FlashInfer JIT module's architecture "
            "list leaves out SM12x (crash; flashinfer-python 0.6.4; 12.1)") in text[at + 1:]
    asked = invoke("doctor", "--python", str(venv / "bin/python"), "--json", "--", "python3", "-m", "sglang.launch_server",
                   "--enable-flashinfer-allreduce-fusion", env=env)
    doc = json.loads(asked.stdout)
    assert doc["launch"] == ["python3", "-m", "sglang.launch_server", "--enable-flashinfer-allreduce-fusion"]
    by = {m["mode"]: m for m in doc["failure_modes"]}
    assert by["flashinfer-jit-arch-list"]["verdict"] == "exposed"
    assert [(w["kind"], w["what"]) for w in by["flashinfer-jit-arch-list"]["ways_out"]] == [
        ("patch", "allreduce-fusion"), ("upgrade", "0.6.7"), ("upgrade", "0.6.17")]
    refused = invoke("doctor", "--", "vllm", "serve", "m", env=env)
    assert refused.returncode == 2 and b"give --python EXE" in refused.stderr


def test_costs_rank_silent_wrong_output_first() -> None:
    assert [c.rank for c in (Cost.SILENT_WRONG, Cost.CRASH, Cost.HANG, Cost.SLOWDOWN)] == [1, 2, 3, 4]


def test_the_launch_lines_flags_are_checked_against_the_release(tmp_path: Path) -> None:
    """A flag a way out names is read from its first release on: vLLM 0.15.1 has no --no-enable-flashinfer-autotune
    (0.16.0 is the first read with it); SGLang's --disable-flashinfer-autotune is read in two ranges."""
    from patchkit.judge.modes import flags_here

    launch = read_launch(("vllm", "serve", "m", "--no-enable-flashinfer-autotune", "--attention-backend", "TRITON_ATTN"), tmp_path)
    found = {(f.flag, f.version, f.known) for f in flags_here(launch, {"vllm": "0.15.1"})}
    assert found == {("--no-enable-flashinfer-autotune", "0.15.1", False), ("--attention-backend", "0.15.1", True)}
    assert {(f.flag, f.known) for f in flags_here(launch, {"vllm": "0.34.0"})} == {
        ("--no-enable-flashinfer-autotune", True), ("--attention-backend", True)}
    sglang = read_launch(("python3", "-m", "sglang.launch_server", "--disable-flashinfer-autotune"), tmp_path)
    [f] = flags_here(sglang, {"sglang": "0.5.16"})
    assert (f.known, f.read_in) == (False, (("0.5.7", "0.5.14"), ("0.5.20", None)))
    assert flags_here(sglang, {"vllm": "0.34.0"}) == []  # not a flag of a project installed
