"""patchkit.gpus: nvidia-smi's query and topo -m, read strictly, run with a time limit.

The outputs are real (an H200) or follow outputs posted in public threads (data/README.md);
the programs are stand-ins first on PATH (standin.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from standin import DATA, no_nvidia_smi, standin

from patchkit.cc import CC
from patchkit.errors import BadInput
from patchkit.gpus import parse
from patchkit.gpus.smi import machine
from patchkit.render.machine import link_summary


def read(machine_name: str, name: str) -> str:
    return (DATA / machine_name / name).read_text()


def test_the_real_h200_query_and_matrix() -> None:
    (gpu,) = parse.gpus(read("h200-1gpu", "query.csv"))
    assert gpu == parse.GPU(0, "NVIDIA H200", CC(9, 0), "00000000:00:06.0")
    assert gpu.sm() == "SM90"
    assert "\x1b[4m" in read("h200-1gpu", "topo-m.txt")  # the real header is underlined
    assert parse.links(read("h200-1gpu", "topo-m.txt"), 1) == []


def test_the_query_with_its_header_is_refused() -> None:
    with pytest.raises(ValueError, match=r"line 1 is not index, name, compute_cap, pci.bus_id: 'index, name, compute_cap, pci.bus_id'"):
        parse.gpus(read("h200-1gpu", "query-with-header.csv"))


def test_eight_pcie_gpus() -> None:
    gpus = parse.gpus(read("rtxpro6000-8pcie", "query.csv"))
    assert [g.cc for g in gpus] == [CC(12, 0)] * 8
    assert gpus[0].name == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    links = parse.links(read("rtxpro6000-8pcie", "topo-m.txt"), 8)
    assert len(links) == 28 and not any(link.nvlink for link in links)
    assert {link.kind for link in links} == {"PIX", "NODE", "SYS"}
    assert parse.Link(0, 1, "PIX") in links and parse.Link(3, 4, "SYS") in links
    assert links[0].words() == "PCIe (PIX)"


def test_nvlink_pairs() -> None:
    (link,) = parse.links(read("h100-2nvlink", "topo-m.txt"), 2)
    assert link == parse.Link(0, 1, "NV18") and link.nvlink
    assert link.words() == "NVLink (NV18: 18 bonded NVLinks)"


@pytest.mark.parametrize("text, why", [
    ("0, NVIDIA H200, 9.0\n", "line 1 is not index, name, compute_cap, pci.bus_id: '0, NVIDIA H200, 9.0'"),
    ("0, NVIDIA H200, [N/A], 00000000:00:06.0\n", "line 1 is not index"),
    ("1, NVIDIA H200, 9.0, 00000000:00:06.0\n", "the GPU indices are not 0..0: 1"),
    ("\n", "it listed no GPU"),
])
def test_unreadable_queries(text: str, why: str) -> None:
    with pytest.raises(ValueError, match="^" + why.replace("[", r"\[").replace(".", r"\.")):
        parse.gpus(text)


def test_unreadable_matrices() -> None:
    eight = read("rtxpro6000-8pcie", "topo-m.txt")
    with pytest.raises(ValueError, match="the header names GPU0, GPU1, GPU2, GPU3, GPU4, GPU5, GPU6, GPU7, not the 2 GPUs"):
        parse.links(eight, 2)
    with pytest.raises(ValueError, match="GPU0 to GPU1 is 'QPI'"):
        parse.links(eight.replace("PIX", "QPI", 1), 8)
    with pytest.raises(ValueError, match="GPU0 to GPU1 is NODE but GPU1 to GPU0 is PIX"):
        parse.links(eight.replace("PIX", "NODE", 1), 8)
    with pytest.raises(ValueError, match="no header line starting with GPU0"):
        parse.links("Legend:\n", 1)


@pytest.mark.parametrize("name, summary", [
    ("rtxpro6000-8pcie", "every pair through PCIe (NODE 8, PIX 4, SYS 16): no NVLink, so no multicast between these GPUs"),
    ("h100-2nvlink", "every pair through NVLink (NV18 1): multicast needs NVSwitch (or the NVLink fabric) as well; topo -m does not say whether this machine has it"),
    ("gb10", "one GPU: no peer to link to, no multicast"),
])
def test_machines_through_standins(tmp_path: Path, monkeypatch, name: str, summary: str) -> None:
    monkeypatch.setenv("PATH", standin(tmp_path, name)["PATH"])
    m = machine()
    assert m.nvidia_smi == str(tmp_path / "bin" / "nvidia-smi")
    assert link_summary(m) == summary


def test_no_nvidia_smi(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", no_nvidia_smi(tmp_path)["PATH"])
    with pytest.raises(BadInput, match="^nvidia-smi is not on PATH: no NVIDIA driver here, or its tools are not on PATH$"):
        machine()


@pytest.mark.parametrize("name, why", [
    ("none", "`nvidia-smi --query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader`: No devices were found (the driver sees no NVIDIA GPU)"),
    ("failing", "`nvidia-smi --query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader` failed (exit 18): NVML library version: 580.95"),
    ("garbled", "`nvidia-smi --query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader` printed what patchkit cannot read: line 1 is not index, name, compute_cap, pci.bus_id: '\\x1b[1mGPU 0: ??? 0x1f'"),
])
def test_broken_drivers(tmp_path: Path, monkeypatch, name: str, why: str) -> None:
    monkeypatch.setenv("PATH", standin(tmp_path, name)["PATH"])
    with pytest.raises(BadInput) as caught:
        machine()
    assert str(caught.value) == f"{tmp_path / 'bin' / 'nvidia-smi'}: {why}"


def test_a_hung_driver_is_killed(tmp_path: Path, monkeypatch) -> None:
    """The stand-in's shell waits on a sleep that holds the pipes: both die at the limit."""
    monkeypatch.setenv("PATH", standin(tmp_path, "hung")["PATH"])
    with pytest.raises(BadInput) as caught:
        machine(limit=0.5)
    assert str(caught.value).endswith(
        "`nvidia-smi --query-gpu=index,name,compute_cap,pci.bus_id --format=csv,noheader` did not answer within 0.5 s (a hung driver?); killed it")


def test_the_limit_from_the_environment(monkeypatch) -> None:
    from patchkit.gpus.smi import timeout

    monkeypatch.setenv("PATCHKIT_NVIDIA_SMI_TIMEOUT", "2.5")
    assert timeout() == 2.5
    monkeypatch.setenv("PATCHKIT_NVIDIA_SMI_TIMEOUT", "soon")
    with pytest.raises(BadInput, match="PATCHKIT_NVIDIA_SMI_TIMEOUT='soon' is not a number of seconds above 0"):
        timeout()
