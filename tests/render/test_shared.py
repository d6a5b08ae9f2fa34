"""patchkit.render: the shapes several commands share, rendered from values alone.

``report.Each`` (one command over the projects of one environment) and ``report.Auto``
(``--to-cc auto``: the machine, the targets with nothing to do, then each run with the fixes
left out said under its first line).  The members here are ``report.Report``s, rendered as
they are; the commands' own results go through the same functions in tests/commands/ and
tests/gpus/test_doctor.py, by the command line.
"""

from __future__ import annotations

from pathlib import Path

from patchkit.errors import PROBLEMS
from patchkit.gpus import parse
from patchkit.gpus.smi import Machine
from patchkit.render import document, text
from patchkit.report import Auto, AutoTarget, Each, Heading, Place, Report, Where
from patchkit.targets.environment import WHEEL, Environment, Install

DATA = Path(__file__).resolve().parent.parent / "gpus" / "data" / "rtxpro6000-8pcie"
SITE = Path("/v/lib/python3.11/site-packages")


def report(lines: list[str], data: dict, exit_code: int = 0) -> Report:
    r = Report()
    r.lines, r.data, r.exit_code = lines, data, exit_code
    return r


def install(project: str) -> Install:
    return Install(project, WHEEL, SITE, SITE / project, SITE / f"{project}-1.dist-info", SITE / f"{project}-1.dist-info")


def test_each_says_what_the_environment_holds_then_each_target() -> None:
    env = Environment(Path("/v/bin/python"), [SITE], [install("sglang"), install("flashinfer")], ["vllm"])
    sglang = report([f"{SITE}/sglang: SGLang 0.5.9", "verify: ok"], {"command": "verify", "path": str(SITE)})
    flashinfer = report([f"{SITE}/flashinfer: FlashInfer 0.6.4", "verify: 1 problem"], {"command": "verify"}, PROBLEMS)
    each = Each("verify", (sglang, flashinfer), env)
    assert text(each, terminal=False) == [
        "/v/bin/python: SGLang (wheel), FlashInfer (wheel); not installed: vLLM",
        f"{SITE}/sglang: SGLang 0.5.9", "verify: ok", "",
        f"{SITE}/flashinfer: FlashInfer 0.6.4", "verify: 1 problem",
    ]
    assert document(each) == {"command": "verify", "targets": [{"command": "verify", "path": str(SITE)}, {"command": "verify"}],
                              "not_installed": ["vllm"]}
    assert each.exit_code == PROBLEMS
    alone = Each("verify", (sglang,), env._replace(installs=[install("sglang")]))
    assert document(alone) == {"command": "verify", "path": str(SITE), "not_installed": ["vllm"]}


def test_each_member_renders_its_places_piped_as_path_line_text() -> None:
    places = report([Heading("unaware: 1 gate in 1 file"), Place("    3: equality: major == 10", "pkg/a.py", 3, "equality")], {})
    assert text(Each("scan", (places, places)), terminal=False) == ["pkg/a.py:3: equality", "", "pkg/a.py:3: equality"]
    assert text(Each("scan", (places,)), terminal=True) == ["unaware: 1 gate in 1 file", "    3: equality: major == 10"]


def test_auto_says_the_machine_then_idle_targets_then_runs_with_the_fixes_left_out() -> None:
    gpus = parse.gpus((DATA / "query.csv").read_text())
    machine = Machine("nvidia-smi", tuple(gpus), tuple(parse.links((DATA / "topo-m.txt").read_text(), len(gpus))))
    idle = AutoTarget(Where(f"{SITE}/flashinfer: FlashInfer 0.6.4 (installed)", str(SITE), "0.6.4", "METADATA"), "flashinfer",
                      "FlashInfer", (12,), {}, ())
    run = report([f"{SITE}/sglang: SGLang 0.5.9 (installed)", "applied shipped patch x.patch"], {"command": "apply"})
    busy = AutoTarget(Where(f"{SITE}/sglang: SGLang 0.5.9 (installed)", str(SITE), "0.5.9", "METADATA"), "sglang", "SGLang",
                      (12,), {"allreduce-fusion": "no multicast between PCIe GPUs"}, (run,))
    auto = Auto("apply", machine, (busy, idle))
    assert text(auto, terminal=False) == [
        "this machine: 8 x NVIDIA RTX PRO 6000 Blackwell Workstation Edition (cc 12.0)",
        f"{SITE}/flashinfer: FlashInfer 0.6.4 (installed)",
        "nothing to do: FlashInfer already holds key 12 for this machine's GPUs",
        f"{SITE}/sglang: SGLang 0.5.9 (installed)",
        "not needed here: allreduce-fusion: no multicast between PCIe GPUs (--fix allreduce-fusion applies it anyway)",
        "applied shipped patch x.patch",
    ]
    doc = document(auto)
    assert (doc["command"], doc["to_cc"], doc["nothing_to_do"], doc["targets"]) == ("apply", "auto", [str(SITE)], [{"command": "apply"}])
    assert doc["not_needed"] == [{"path": str(SITE), "project": "sglang", "fix": "allreduce-fusion",
                                  "why": "no multicast between PCIe GPUs"}]
    assert document(auto._replace(command="verify"))["ok"] is True


def test_an_idle_target_names_the_keys_no_fix_is_for_apart_from_those_the_release_holds() -> None:
    gpus = parse.gpus((DATA / "query.csv").read_text())
    machine = Machine("nvidia-smi", tuple(gpus), tuple(parse.links((DATA / "topo-m.txt").read_text(), len(gpus))))
    where = Where(f"{SITE}/sglang: SGLang 0.5.9 (installed)", str(SITE), "0.5.9", "METADATA")
    none = AutoTarget(where, "sglang", "SGLang", (8,), {}, (), (8,))
    some = AutoTarget(where, "sglang", "SGLang", (8, 9), {}, (), (8,))
    assert text(Auto("verify", machine, (none, some)), terminal=True)[1:] == [
        where.line, "nothing to do: no fix for SGLang is for this machine's GPUs (key 8)",
        where.line, "nothing to do: SGLang already holds key 9 for this machine's GPUs, and no fix for it is for those of key 8",
    ]
