"""patchkit.plan: what apply and revert write, decided from bytes and records alone.

plan_apply and plan_revert are pure: the candidate files, the recorded state, the
original bytes and the shipped patch go in, a Plan (or the refusal a user reads) comes
out.  Each case here is one row: its inputs and the exact Plan.  The post-images are
written out by hand below (key 12 = key 10, key 11 = key 9, each right after the key it
copies), not taken from the rewriter.  The same decisions, through files and the command
line, are in tests/commands/ and tests/targets/test_crash_and_race.py.
"""

from __future__ import annotations

from hashlib import sha256

import pytest

from patchkit import __version__
from patchkit.digest import blob_id
from patchkit.errors import BadInput, Refused
from patchkit.fixes.registry import rules_for
from patchkit.patch.manifest import FileEntry, Shipped
from patchkit.patch.write import FileChange, format_patch
from patchkit.plan.plans import APPLY, REVERT, Plan
from patchkit.plan.reasons import NoShippedPatch
from patchkit.plan.write_apply import plan_apply
from patchkit.plan.write_revert import plan_revert
from patchkit.render.reasons import said
from patchkit.render.source import source_words
from patchkit.rewrite.found import Found
from patchkit.types import (
    ALREADY_APPLIED,
    ALREADY_UPSTREAM,
    NOTHING_TO_PATCH,
    NOTHING_TO_REVERT,
    Applied,
    AppliedFile,
    Change,
    source_from_json,
)
from support.repos import DC, UTILS_NEW, comm

UTILS = f"{DC}/all_reduce_utils.py"
COMM = f"{DC}/torch_symm_mem.py"
RULES = rules_for("sglang", ("torch-symm-mem",))
NAME = "patches/0.5.5/0001-Add-SM120-to-the-torch-symm-mem-all-reduce-tables.patch"
GENERATED = "generated from the checkout's files"
SHIPPED_SOURCE = f"shipped patch {NAME}"


def sha(data: bytes) -> str:
    return sha256(data).hexdigest()


def after(data: bytes, anchor: bytes, new: bytes) -> bytes:
    """``data`` with the lines ``new`` right after the (only) lines ``anchor``."""
    assert data.count(anchor) == 1, anchor
    return data.replace(anchor, anchor + new)


SM90_U = b"    9: {\n        2: 64 * MiB,  # 64 MB\n        8: 64 * MiB,  # 64 MB\n    },\n"
SM100_U = b"    10: {\n        2: 64 * MiB,  # 64 MB\n        8: 128 * MiB,  # 128 MB\n    },\n"
PRE = {UTILS: UTILS_NEW, COMM: comm()}
P12 = {  # key 12 = key 10
    UTILS: after(PRE[UTILS], SM100_U, SM100_U.replace(b"    10:", b"    12:")),
    COMM: after(PRE[COMM], b"        10: [6, 8],\n", b"        12: [6, 8],\n"),
}
P11 = {  # key 11 = key 9
    UTILS: after(PRE[UTILS], SM90_U, SM90_U.replace(b"    9:", b"    11:")),
    COMM: after(PRE[COMM], b"        9: [4, 6, 8],\n", b"        11: [4, 6, 8],\n"),
}
EDITED = PRE[COMM].replace(b"10: [6, 8]", b"10: [2, 4, 6, 8]")  # a local edit of the release
NO_TABLES = {UTILS: b"MiB = 1024 * 1024\n", COMM: b"import torch\n"}


def table(path: str, key: int, source: int, value: str, status: str = "patched") -> dict:
    name, scope = (("TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES", "module") if path == UTILS
                   else ("_WORLD_SIZES_MULTIMEM", "class TorchSymmMemCommunicator"))
    return {"name": name, "scope": scope, "status": status, "added_key": key, "copied_from": source, "value": value, "path": path,
            "fix": "torch-symm-mem", "kind": "dict-key"}


T12 = (table(UTILS, 12, 10, "{2: 64 * MiB, 8: 128 * MiB}"), table(COMM, 12, 10, "[6, 8]"))
T11 = (table(UTILS, 11, 9, "{2: 64 * MiB, 8: 64 * MiB}"), table(COMM, 11, 9, "[4, 6, 8]"))


def shipped(**file_changes) -> Shipped:
    """The shipped patch of 0.5.5 (PRE -> P12) as the reader hands it over; ``file_changes``
    (path -> manifest fields) makes a manifest that does not fit its patch."""
    data = format_patch(
        author="patchkit <patchkit@users.noreply.invalid>",
        date="Sat, 03 Jan 2026 12:00:00 +0000",
        message="Add SM120 to the torch symm-mem all-reduce tables\n",
        changes=[FileChange(p, "100644", PRE[p], P12[p], blob_id(PRE[p]), blob_id(P12[p])) for p in sorted(PRE)],
        signature="patchkit 0.1.0",
    )
    files = tuple(
        FileEntry(p, "100644", blob_id(PRE[p]), blob_id(P12[p]), sha(PRE[p]), sha(P12[p]),
                  [Found.from_json({k: v for k, v in t.items() if k != "path"}) for t in T12 if t["path"] == p])
        ._replace(**file_changes.get(p, {}))
        for p in sorted(PRE)
    )
    return Shipped(NAME, "0.5.5", NAME.rsplit("/", 1)[1], ("torch-symm-mem",), 10, 12, files, ((NAME, sha(data), data),))


SHIPPED = shipped()


def applied(source: str, pre: dict, post: dict, tables: tuple, pair=(10, 12), version="0.5.5") -> Applied:
    """What state.json records (patch_id: see test_patch_id_names_the_bytes_written)."""
    files = [AppliedFile(p, sha(pre[p]), sha(post[p]), [t for t in tables if t["path"] == p]) for p in sorted(post)]
    return Applied(version, source_from_json(source), "", pair[0], pair[1], __version__, files)


def apply_(current, state=None, originals=None, shipped_=SHIPPED, pair=(10, 12), version="0.5.5", **options) -> Plan:
    return plan_apply(current, state, originals or {}, shipped_, rules=rules_for("sglang", ("torch-symm-mem",), *pair), from_cc=pair[0], to_cc=pair[1],
                      version=version, **options)


def revert_(current, state=None, originals=None, shipped_=SHIPPED, force=False) -> Plan:
    return plan_revert(current, state, originals or {}, shipped_, force)


def changes(before: dict, after_: dict) -> tuple:
    return tuple(Change(p, before[p], after_[p]) for p in sorted(before) if before[p] != after_[p])


def plan(action, source="", changes_=(), applied_=None, notes=(), tables=()) -> Plan:
    return Plan(action, source, tuple(changes_), applied_, tuple(notes), tuple(tables))


def same(got: Plan) -> Plan:
    """``got`` with tuples for lists, its source and notes as apply and revert say them (``render``),
    what the rules found as recorded (``Found.to_json``) and no patch_id (compared on its own below)."""
    state = got.applied._replace(patch_id="") if got.applied else None
    return Plan(got.action, source_words(got.source), tuple(got.changes), state, tuple(map(said, got.notes)), tuple(t.to_json() for t in got.tables))


S12 = applied(SHIPPED_SOURCE, PRE, P12, T12)
S11 = applied(GENERATED, PRE, P11, T11, (9, 11))
P12_EDITED = {UTILS: P12[UTILS], COMM: P12[COMM] + b"# mine\n"}
EDITED_12 = after(EDITED, b"        10: [2, 4, 6, 8],\n", b"        12: [2, 4, 6, 8],\n")
# A release that has key 12 upstream, with 9 -> 11 applied on top.
P12_11 = {UTILS: after(P12[UTILS], SM90_U, SM90_U.replace(b"    9:", b"    11:")),
          COMM: after(P12[COMM], b"        9: [4, 6, 8],\n", b"        11: [4, 6, 8],\n")}
UPSTREAM = tuple(dict(t, status=ALREADY_UPSTREAM) for t in T12)

APPLY_CASES = [
    pytest.param(
        lambda: apply_(PRE),
        plan(APPLY, SHIPPED_SOURCE, changes(PRE, P12), S12, (), T12),
        id="a fresh release: the shipped patch"),
    pytest.param(
        lambda: apply_(P12, S12, PRE),
        plan(ALREADY_APPLIED, SHIPPED_SOURCE, (), S12, (), T12),
        id="applied, as recorded: nothing to write"),
    pytest.param(
        lambda: apply_(P12),
        plan(ALREADY_APPLIED, SHIPPED_SOURCE, notes=["the files already hold the shipped patch's post-image"]),
        id="the shipped post-image, no record"),
    pytest.param(
        lambda: apply_({UTILS: PRE[UTILS], COMM: EDITED}, no_generate=True),
        Refused(COMM, f"differs from the pre-image of {NAME} (a local edit?); --no-generate refuses to generate a patch"),
        id="a local edit, --no-generate"),
    pytest.param(
        lambda: apply_({UTILS: PRE[UTILS], COMM: EDITED}),
        plan(APPLY, GENERATED, changes({UTILS: PRE[UTILS], COMM: EDITED}, {UTILS: P12[UTILS], COMM: EDITED_12}),
             applied(GENERATED, {UTILS: PRE[UTILS], COMM: EDITED}, {UTILS: P12[UTILS], COMM: EDITED_12},
                     (T12[0], table(COMM, 12, 10, "[2, 4, 6, 8]"))),
             [f"files differ from the pre-image of {NAME} (local edits?): {COMM}"],
             (T12[0], table(COMM, 12, 10, "[2, 4, 6, 8]"))),
        id="a local edit: generated from the files"),
    pytest.param(
        lambda: apply_(PRE, shipped_=None, version="0.5.99", no_generate=True),
        Refused(None, "no shipped patch for version 0.5.99; --no-generate refuses to generate one"),
        id="no shipped patch, --no-generate"),
    pytest.param(
        lambda: apply_(PRE, shipped_=None, version="0.5.99", no_generate=True, no_shipped=NoShippedPatch("0.5.99", "SGLang")),
        Refused(None, "no shipped patch for SGLang 0.5.99; --no-generate refuses to generate one"),
        id="no shipped patch, --no-generate, the reason given"),
    pytest.param(
        lambda: apply_(PRE, shipped_=None, version="0.5.99"),
        plan(APPLY, GENERATED, changes(PRE, P12), applied(GENERATED, PRE, P12, T12, version="0.5.99"),
             ["no shipped patch for version 0.5.99"], T12),
        id="no shipped patch: generated"),
    pytest.param(
        lambda: apply_(PRE, shipped_=None, pair=(9, 11)),
        plan(APPLY, GENERATED, changes(PRE, P11), S11, ["no shipped patch for version 0.5.5"], T11),
        id="another cc pair: generated"),
    pytest.param(
        lambda: apply_(NO_TABLES, shipped_=None),
        plan(NOTHING_TO_PATCH, GENERATED, notes=["no shipped patch for version 0.5.5", "nothing the fixes look for in these files"]),
        id="no tables in the files"),
    pytest.param(
        lambda: apply_(P12, shipped_=None),
        plan(ALREADY_UPSTREAM, GENERATED, notes=["no shipped patch for version 0.5.5"], tables=UPSTREAM),
        id="key 12 = key 10 already, no record: upstream"),
    pytest.param(
        lambda: apply_(P11, S11, PRE),
        plan(APPLY, SHIPPED_SOURCE, changes(P11, P12), S12, [f"replacing the applied patch (9 -> 11 becomes 10 -> 12; was {GENERATED})"], T12),
        id="9 -> 11 applied: replaced by the shipped patch"),
    pytest.param(
        lambda: apply_(P12_EDITED, S12, PRE),
        Refused(COMM, "was edited after patchkit applied its patch; `patchkit revert --force` restores the original "
                      "and keeps your edited copy in the state dir"),
        id="a file edited after apply"),
    pytest.param(
        lambda: apply_({UTILS: P12[UTILS]}, S12, PRE),
        Refused(COMM, "was patched by patchkit and is now missing; restore it or run `patchkit revert --force`"),
        id="a patched file missing"),
    pytest.param(
        lambda: apply_(PRE, shipped_=shipped(**{COMM: {"post_sha256": "0" * 64}})),
        BadInput(NAME, f"corrupt patch: applying it to {COMM} does not give the manifest's post-image"),
        id="a manifest whose post-image the patch does not give"),
    pytest.param(
        lambda: apply_(P12_11, applied(GENERATED, P12, P12_11, T11, (9, 11)), P12, shipped_=None),
        plan(APPLY, GENERATED, changes(P12_11, P12), None,
             ["no shipped patch for version 0.5.5", "every table already has the key: restoring the originals"], UPSTREAM),
        id="key 12 upstream under an applied 9 -> 11: the originals back"),
]


@pytest.mark.parametrize("call, expected", APPLY_CASES)
def test_plan_apply(call, expected) -> None:
    if isinstance(expected, Exception):
        with pytest.raises(type(expected)) as raised:
            call()
        assert (str(raised.value), raised.value.path) == (str(expected), expected.path)
    else:
        assert same(call()) == expected


REVERT_CASES = [
    pytest.param(
        lambda: revert_(P12, S12, PRE),
        plan(REVERT, SHIPPED_SOURCE, changes(P12, PRE), None, []),
        id="applied: the originals back"),
    pytest.param(
        lambda: revert_({UTILS: PRE[UTILS], COMM: P12[COMM]}, S12, PRE),
        plan(REVERT, SHIPPED_SOURCE, [Change(COMM, P12[COMM], PRE[COMM])], None, []),
        id="one file restored meanwhile: the other one back"),
    pytest.param(
        lambda: revert_(P12_EDITED, S12, PRE),
        Refused(COMM, "was edited after apply; `patchkit revert --force` restores the original anyway"),
        id="edited after apply"),
    pytest.param(
        lambda: revert_(P12_EDITED, S12, PRE, force=True),
        plan(REVERT, SHIPPED_SOURCE, changes(P12_EDITED, PRE), None,
             [f"{COMM}: edited after apply; the edited copy is kept in the state dir (sha256 {sha(P12_EDITED[COMM])})"]),
        id="edited after apply, --force"),
    pytest.param(
        lambda: revert_(P12, S12, {UTILS: PRE[UTILS]}),
        Refused(COMM, "its original bytes are missing from the state dir; cannot restore them"),
        id="an original missing from the state dir"),
    pytest.param(
        lambda: revert_({UTILS: P12[UTILS]}, S12, PRE),
        Refused(COMM, "was patched by patchkit and is now missing"),
        id="a patched file missing"),
    pytest.param(
        lambda: revert_(P12, shipped_=None),
        plan(NOTHING_TO_REVERT, notes=["no patchkit state, and no shipped patch for this version to recognise"]),
        id="no record, no shipped patch"),
    pytest.param(
        lambda: revert_(P12),
        plan(REVERT, f"{SHIPPED_SOURCE} (recognised from the files; no patchkit state)", changes(P12, PRE)),
        id="no record: the shipped post-image recognised"),
    pytest.param(
        lambda: revert_(PRE),
        plan(NOTHING_TO_REVERT, notes=["the files hold the original release"]),
        id="no record: the original release"),
    pytest.param(
        lambda: revert_({UTILS: P12[UTILS], COMM: EDITED}),
        plan(NOTHING_TO_REVERT, notes=[f"{COMM} holds neither the pre- nor the post-image of {NAME}"]),
        id="no record: a file neither pre- nor post-image"),
    pytest.param(
        lambda: revert_(P12, shipped_=shipped(**{COMM: {"pre_sha256": "0" * 64}})),
        BadInput(NAME, f"corrupt patch: reversing it on {COMM} does not give the pre-image"),
        id="a manifest whose pre-image the patch does not give back"),
]


@pytest.mark.parametrize("call, expected", REVERT_CASES)
def test_plan_revert(call, expected) -> None:
    if isinstance(expected, Exception):
        with pytest.raises(type(expected)) as raised:
            call()
        assert (str(raised.value), raised.value.path) == (str(expected), expected.path)
    else:
        assert same(call()) == expected


def test_patch_id_names_the_bytes_written() -> None:
    """Two plans that write the same post-images carry the same patch_id, whatever their source."""
    shipped_ = apply_(PRE).applied
    generated = apply_(PRE, shipped_=None).applied
    other = apply_(PRE, shipped_=None, pair=(9, 11)).applied
    edited = apply_({UTILS: PRE[UTILS], COMM: EDITED}).applied
    assert (source_words(shipped_.source), source_words(generated.source)) == (SHIPPED_SOURCE, GENERATED)
    assert shipped_.patch_id == generated.patch_id
    assert len({shipped_.patch_id, other.patch_id, edited.patch_id}) == 3
    assert all(len(p) == 64 and int(p, 16) >= 0 for p in (shipped_.patch_id, other.patch_id))


def test_the_inputs_are_not_changed() -> None:
    """Pure: the dicts handed in are the same afterwards (the commands reuse them)."""
    current, originals = dict(P11), dict(PRE)
    apply_(current, S11, originals)
    revert_(current, S11, originals, force=True)
    assert (current, originals) == (P11, PRE)
