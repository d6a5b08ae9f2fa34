"""patchkit.plan.verify: whether the patch is in effect, decided from bytes and records alone.

plan_verify is pure: the candidate files, what was applied or is pending, the release's
manifest verdicts, the stale bytecode and JIT builds go in; the files checked, the notes and
one reason per problem come out (said here by ``render.reasons``, as verify prints them).  The post-images are written out by hand (key 12 = key 10
right after key 10), not taken from the rewriter.  The same decisions through files and the
command line are in tests/commands/test_apply_cycle.py and tests/commands/test_new_user.py.
"""

from __future__ import annotations

from hashlib import sha256
from pathlib import Path

from patchkit.fixes.kinds import BackportRule
from patchkit.fixes.registry import PROJECTS
from patchkit.patch.manifest import FixStatus
from patchkit.plan.reasons import OtherVersion
from patchkit.plan.verify import Checked, plan_verify
from patchkit.render.reasons import said
from patchkit.targets.bytecode import Pyc
from patchkit.targets.jit_builds import CACHED, Build
from patchkit.types import Applied, AppliedFile, source_from_json
from support.repos import DC, UTILS_NEW, comm

UTILS = f"{DC}/all_reduce_utils.py"
COMM = f"{DC}/torch_symm_mem.py"
NAMES = PROJECTS["sglang"].tables
SM100_U = b"    10: {\n        2: 64 * MiB,  # 64 MB\n        8: 128 * MiB,  # 128 MB\n    },\n"
PRE = {UTILS: UTILS_NEW, COMM: comm()}
P12 = {UTILS: PRE[UTILS].replace(SM100_U, SM100_U + SM100_U.replace(b"    10:", b"    12:")),
       COMM: PRE[COMM].replace(b"        10: [6, 8],\n", b"        10: [6, 8],\n        12: [6, 8],\n")}
TABLES = {UTILS: ("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES", "module"), COMM: ("_WORLD_SIZES_MULTIMEM", "class TorchSymmMemCommunicator")}
EVALUATED = (Checked(UTILS, "tables evaluated from source", ("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES",)),
             Checked(COMM, "tables evaluated from source", ("TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM",)))


def sha(data: bytes) -> str:
    return sha256(data).hexdigest()


def ours(files=P12) -> Applied:
    """What state.json records after apply wrote ``files`` over PRE."""
    return Applied("0.5.9", source_from_json("generated from the checkout's files"), "", 10, 12, "0.1.0", [
        AppliedFile(p, sha(PRE[p]), sha(files[p]), [{"name": TABLES[p][0], "scope": TABLES[p][1], "path": p}]) for p in sorted(files)])


def verify(current, applied=None, **more):
    """The plan, its problems and notes as verify says them."""
    options = dict(names=NAMES, fixes=("torch-symm-mem",), rules=(), from_cc=10, to_cc=12, version="0.5.9", label="SGLang")
    plan = plan_verify(current, applied, **{**options, **more})
    return plan._replace(problems=tuple(map(said, plan.problems)), notes=tuple(map(said, plan.notes)))


def test_the_release_as_shipped_lacks_key_12_in_each_table() -> None:
    plan = verify(PRE)
    assert plan.checked == EVALUATED
    assert plan.problems == (
        f"{UTILS}: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES has no key 12 (the patch is not applied)",
        f"{COMM}: TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM has no key 12 (the patch is not applied)",
    )
    assert plan.notes == ()


def test_what_apply_wrote_is_proved_by_its_recorded_hash() -> None:
    plan = verify(P12, ours())
    assert plan.checked == (Checked(UTILS, "post-image hash recorded at apply", ("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES",)),
                            Checked(COMM, "post-image hash recorded at apply", ("_WORLD_SIZES_MULTIMEM",)))
    assert (plan.problems, plan.notes) == ((), ())


def test_a_key_12_patchkit_did_not_add_is_a_note_not_a_problem() -> None:
    plan = verify(P12)
    assert plan.checked == EVALUATED and plan.problems == ()
    assert plan.notes == (
        f"{UTILS}: TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES already has key 12, not added by patchkit (equal to key 10)",
        f"{COMM}: TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM already has key 12, not added by patchkit (equal to key 10)",
    )


def test_a_key_12_that_differs_from_key_10_is_a_problem_where_patchkit_added_it() -> None:
    edited = dict(P12, **{COMM: P12[COMM].replace(b"        12: [6, 8],\n", b"        12: [8],\n")})
    plan = verify(edited, ours())
    assert plan.problems == (
        f"{COMM}: TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM[12] = [8] differs from "
        "TorchSymmMemCommunicator._WORLD_SIZES_MULTIMEM[10] = [6, 8]",)
    assert [c.how for c in plan.checked] == ["post-image hash recorded at apply", "tables evaluated from source"]


def test_a_pending_transaction_a_state_of_another_release_and_paths_as_the_target_names_them() -> None:
    installed = {rel: rel.removeprefix("python/") for rel in PRE}
    plan = verify(P12, journal={"op": "apply"}, journal_file="/s/.patchkit-sglang/journal.json",
                  changed=OtherVersion("SGLang", "0.5.8", "0.5.9", True), local=installed.__getitem__)
    assert plan.problems == ("/s/.patchkit-sglang/journal.json: an interrupted transaction is pending; "
                             "run `patchkit apply` or `patchkit revert` to finish it",)
    assert plan.notes[0] == ("SGLang 0.5.8 was patched; 0.5.9 is installed now: that state no longer applies "
                             "(the next apply or revert sets it aside)")
    assert [c.path for c in plan.checked] == ["sglang/srt/distributed/device_communicators/all_reduce_utils.py",
                                              "sglang/srt/distributed/device_communicators/torch_symm_mem.py"]


def test_stale_bytecode_and_jit_builds_of_the_checked_files_are_problems() -> None:
    pyc = Pyc(Path(f"/s/{DC}/__pycache__/torch_symm_mem.cpython-311.pyc"), "stale", "source mtime 1 != 2")
    folder = Path("/root/.cache/flashinfer/0.6.4/120a/cached_ops/trtllm_comm")
    build = Build("trtllm_comm", CACHED, folder, folder / "trtllm_comm.so", 1.0, "120a", True, "", "", folder.parents[2])
    plan = verify(P12, ours(), stale={COMM: [pyc]}, jit_builds=(build,))
    assert plan.problems == (
        f"{pyc.path}: stale bytecode (source mtime 1 != 2); `patchkit apply` drops it",
        f"{build.path}: stale FlashInfer JIT build (built before the patched sources); `patchkit apply` drops it",
    )
    assert verify(P12, ours(), jit_error="no home").notes == ("FlashInfer's JIT builds not checked: no home",)


def test_a_fix_the_release_cannot_take_whole_is_a_problem_when_named_else_a_note() -> None:
    blocked = (FixStatus("torch-symm-mem", "cannot apply", "python/x.py: no table"),)
    line = "torch-symm-mem cannot apply on SGLang 0.5.9: python/x.py: no table"
    named = verify(P12, ours(), blocked=blocked)
    assert (named.problems, named.fixes) == ((line,), ())
    left_out = verify(P12, ours(), blocked=blocked, named=())
    assert (left_out.problems, left_out.notes, left_out.fixes) == ((), (f"torch-symm-mem left out: {line}",), ())


def test_a_backport_made_without_its_origin_still_says_the_file_it_misses() -> None:
    """``BackportRule.origin`` may be None (the class allows it; the fixes' loader asks for one): a
    file it changes that is not there is a problem named all the same, never an AttributeError."""
    gone = f"{DC}/gone.py"
    rule = BackportRule(fix="torch-symm-mem", project="sglang", files=(UTILS, gone), from_cc=10, to_cc=12,
                        evidence="", needs="")
    plan = verify(P12, ours(), rules=(rule,))
    assert plan.problems == (f"{gone}: missing (the upstream change changes it)",)
