"""patchkit.render: the shapes several commands share, rendered from values alone.

``report.Each`` (one command over the projects of one environment) and ``report.Auto``
(``--to-cc auto``: the machine, the targets with nothing to do, then each run with the fixes
left out said under its first line).  The members here are the commands' own typed results
(``VerifyResult``, ``TreeScan``, ``ApplyResult``) built from values, rendered by their own
render modules; the commands make them in tests/commands/ and tests/gpus/test_doctor.py, by
the command line.
"""

from __future__ import annotations

from pathlib import Path

from patchkit.cli.boundary import envelope
from patchkit.commands.apply import ApplyResult
from patchkit.commands.scan import TreeScan
from patchkit.commands.verify import VerifyResult
from patchkit.errors import PROBLEMS
from patchkit.fixes.kinds import RuleKind
from patchkit.gpus import parse
from patchkit.gpus.smi import Machine
from patchkit.judge.reasons import NoMulticast, Peers
from patchkit.plan.plans import APPLY, Plan
from patchkit.plan.reasons import NotApplied
from patchkit.plan.verify import VerifyPlan
from patchkit.render import document, target_document, text
from patchkit.render.where import where_line
from patchkit.report import Auto, AutoTarget, Each, Where
from patchkit.rewrite.found import Found
from patchkit.scan.classify import UNAWARE
from patchkit.scan.finding import EQUALITY, Finding
from patchkit.targets.environment import WHEEL, Environment, Install
from patchkit.targets.jit_builds import JitCheck
from patchkit.targets.transaction import LockTaken
from patchkit.types import PATCHED, TargetKind, source_from_json

DATA = Path(__file__).resolve().parent.parent / "gpus" / "data" / "rtxpro6000-8pcie"
SITE = Path("/v/lib/python3.11/site-packages")
PATCH = "shipped patch patches/0.5.9/0001-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"
# What verify says of FlashInfer 0.6.4 as released with --all-fixes (tests/test_real_releases.py), and
# what it found there.
LACKS = ("flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh: lacks FlashInfer PR 3903 (14 hunks; the "
         "allreduce-fusion patch is not applied)")
NOT_APPLIED = NotApplied("flashinfer/data/include/flashinfer/comm/trtllm_allreduce.cuh", Found(
    "allreduce-fusion", RuleKind.BACKPORT, "FlashInfer PR 3903", "the upstream change", PATCHED, "14 hunks", "0123456789ab", "exactly"))


def where(project: str, label: str, version: str) -> Where:
    return Where(f"{SITE}/{project}", label, TargetKind.INSTALLED, str(SITE), version, f"from {project}-{version}.dist-info")


def verified(project: str, label: str, version: str, problems: tuple = ()) -> VerifyResult:
    """verify of an installed ``project``: nothing checked (no capability tables), or ``problems``."""
    return VerifyResult(where=where(project, label, version), label=label, from_cc=10, to_cc=12,
                        plan=VerifyPlan((), (), problems, (), (), ()))


def applied(project: str, label: str, version: str) -> ApplyResult:
    """apply of ``PATCH`` that changed no file and dropped no bytecode."""
    return ApplyResult(where=where(project, label, version), project=project, label=label, fixes=("torch-symm-mem",), kept=(),
                       dry_run=False, pending=False, lock=LockTaken(), set_aside=None, plan=Plan(APPLY, source_from_json(PATCH)), stale=(),
                       dropped=(), effects=(), jit=JitCheck(), restart=(), local=str)


def install(project: str) -> Install:
    return Install(project, WHEEL, SITE, SITE / project, SITE / f"{project}-1.dist-info", SITE / f"{project}-1.dist-info")


def test_each_says_what_the_environment_holds_then_each_target() -> None:
    env = Environment(Path("/v/bin/python"), [SITE], [install("sglang"), install("flashinfer")], ["vllm"])
    sglang = verified("sglang", "SGLang", "0.5.9")
    flashinfer = verified("flashinfer", "FlashInfer", "0.6.4", (NOT_APPLIED,))
    each = Each("verify", (sglang, flashinfer), env)
    assert text(each, terminal=False) == [
        "/v/bin/python: SGLang (wheel), FlashInfer (wheel); not installed: vLLM",
        f"{SITE}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info", "verify: ok, nothing to patch: no fix checked in SGLang 0.5.9", "",
        f"{SITE}/flashinfer: FlashInfer 0.6.4 (installed), from flashinfer-0.6.4.dist-info", LACKS, "verify: 1 problem",
    ]
    doc = document(each)
    assert doc == {"python": "/v/bin/python", "installed": [{"project": "sglang", "how": WHEEL}, {"project": "flashinfer", "how": WHEEL}],
                   "not_installed": ["vllm"], "targets": [target_document(sglang), target_document(flashinfer)]}
    assert [(t["path"], t["version"], t["in_effect"], t["problems"]) for t in doc["targets"]] == [
        (str(SITE), "0.5.9", True, []), (str(SITE), "0.6.4", False, [LACKS])]
    assert each.exit_code == PROBLEMS
    alone = Each("verify", (sglang,), env._replace(installs=[install("sglang")]))
    assert document(alone) == {"python": "/v/bin/python", "installed": [{"project": "sglang", "how": WHEEL}],
                               "not_installed": ["vllm"], "targets": [target_document(sglang)]}
    assert document(sglang) == {"targets": [target_document(sglang)]}  # one target: a list too
    assert envelope("verify", each) == {"schema": 2, "command": "verify", "ok": False, "exit_code": PROBLEMS, **doc}


def test_each_member_renders_its_places_piped_as_path_line_text() -> None:
    gate = Finding("pkg/a.py", 3, EQUALITY, "major == 10", (10,), "major", False)
    places = TreeScan(Path("/src"), 12, 10, False, False, 1, 1, (gate,), (UNAWARE,), ((gate, UNAWARE, None),), ())
    summary = "1 capability gate in 1 file (1 unaware, 0 aware, 0 covered; 0 patchable by patchkit); scanned 1 files, parsed 1"
    assert text(Each("scan", (places, places)), terminal=False) == [
        "/src/pkg/a.py:3: unaware: equality: major == 10", summary, "", "/src/pkg/a.py:3: unaware: equality: major == 10", summary]
    assert text(Each("scan", (places,)), terminal=True) == [
        "unaware: 1 gate in 1 file", "  pkg/a.py", "    3: equality: major == 10", summary]


def test_auto_says_the_machine_then_idle_targets_then_runs_with_the_fixes_left_out() -> None:
    gpus = parse.gpus((DATA / "query.csv").read_text())
    machine = Machine("nvidia-smi", tuple(gpus), tuple(parse.links((DATA / "topo-m.txt").read_text(), len(gpus))))
    idle = AutoTarget(where("flashinfer", "FlashInfer", "0.6.4"), "flashinfer",
                      "FlashInfer", (12,), {}, ())
    run = applied("sglang", "SGLang", "0.5.9")
    busy = AutoTarget(where("sglang", "SGLang", "0.5.9"), "sglang", "SGLang",
                      (12,), {"allreduce-fusion": NoMulticast(Peers.PCIE_ONLY)}, (run,))
    auto = Auto("apply", machine, (busy, idle))
    assert text(auto, terminal=False) == [
        "this machine: 8 x NVIDIA RTX PRO 6000 Blackwell Workstation Edition (cc 12.0)",
        f"{SITE}/flashinfer: FlashInfer 0.6.4 (installed), from flashinfer-0.6.4.dist-info",
        "nothing to do: FlashInfer already holds key 12 for this machine's GPUs",
        f"{SITE}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info",
        "not needed here: allreduce-fusion: no multicast between PCIe GPUs (--fix allreduce-fusion applies it anyway)",
        f"applied {PATCH}",
        "dropped 0 cached bytecode files",
    ]
    doc = envelope("apply", auto)
    assert (doc["command"], doc["to_cc"], doc["nothing_to_do"], doc["targets"]) == ("apply", "auto", [str(SITE)],
                                                                                    [target_document(run)])
    assert doc["targets"][0]["fixes"] == ["torch-symm-mem"] and "command" not in doc["targets"][0]
    assert doc["not_needed"] == [{"path": str(SITE), "project": "sglang", "fix": "allreduce-fusion", "reason": "no-multicast",
                                  "why": "no multicast between PCIe GPUs"}]
    assert envelope("verify", auto._replace(command="verify"))["ok"] is True


def test_an_idle_target_names_the_keys_no_fix_is_for_apart_from_those_the_release_holds() -> None:
    gpus = parse.gpus((DATA / "query.csv").read_text())
    machine = Machine("nvidia-smi", tuple(gpus), tuple(parse.links((DATA / "topo-m.txt").read_text(), len(gpus))))
    at = where("sglang", "SGLang", "0.5.9")
    none = AutoTarget(at, "sglang", "SGLang", (8,), {}, (), (8,))
    some = AutoTarget(at, "sglang", "SGLang", (8, 9), {}, (), (8,))
    assert text(Auto("verify", machine, (none, some)), terminal=True)[1:] == [
        where_line(at), "nothing to do: no fix for SGLang is for this machine's GPUs (key 8)",
        where_line(at), "nothing to do: SGLang already holds key 9 for this machine's GPUs, and no fix for it is for those of key 8",
    ]
