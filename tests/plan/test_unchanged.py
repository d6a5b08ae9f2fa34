"""``plan.apply.unchanged``: apply looks again under the lock only where what it read changed
(SGLang 0.5.9 from PyPI, read twice through ``Session.snapshot`` as apply reads it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from patchkit.cc import CC
from patchkit.plan.apply import ApplyRequest, look, unchanged
from patchkit.targets.session import Session

GATE = "python/sglang/srt/utils/common.py"  # a file no table is in: read through ``read`` only
TABLE = "python/sglang/srt/distributed/device_communicators/all_reduce_utils.py"


@pytest.fixture
def checkout(prebuilt, tmp_path: Path) -> Path:
    repo = tmp_path / "sglang"
    shutil.copytree(prebuilt.release("sglang", "0.5.9"), repo, symlinks=True)
    return repo


def _read(s: Session):
    """Read as apply reads, once without the lock and once under it: one session, two snapshots."""
    from_cc, to_cc = CC.of(s.project.from_cc), CC.of(s.project.to_cc)
    request = ApplyRequest(fixes=None, named=None, from_cc=from_cc, to_cc=to_cc, patches=None, no_generate=True,
                           dry_run=False)
    assert request.keys(s.project) == s.project.cc_pair()  # the project's own pair, as it keys it
    return request, s.snapshot(None, ("torch-symm-mem",), *request.keys(s.project))


def test_two_reads_of_an_untouched_target_are_one(checkout: Path) -> None:
    s = Session.open(checkout)
    request, first = _read(s)
    found = look(request, first)
    assert first.read(GATE) == (checkout / GATE).read_bytes()  # as a rule's helper reads it
    _, again = _read(s)
    assert unchanged(first, again)
    assert look(request, again) == found


def test_a_file_the_look_read_changed_is_a_change(checkout: Path) -> None:
    s = Session.open(checkout)
    _, first = _read(s)
    first.read(GATE)
    (checkout / GATE).write_bytes((checkout / GATE).read_bytes() + b"\n# edited\n")
    _, again = _read(s)
    assert not unchanged(first, again)


def test_a_file_read_as_missing_that_appeared_is_a_change(checkout: Path) -> None:
    s = Session.open(checkout)
    _, first = _read(s)
    assert first.read("python/sglang/not_there.py") is None
    (checkout / "python/sglang/not_there.py").write_bytes(b"x = 1\n")
    _, again = _read(s)
    assert not unchanged(first, again)


def test_a_table_file_changed_is_a_change(checkout: Path) -> None:
    s = Session.open(checkout)
    _, first = _read(s)
    (checkout / TABLE).write_bytes((checkout / TABLE).read_bytes().replace(b"10: {", b"10 : {", 1))
    _, again = _read(s)
    assert first.current[TABLE] != again.current[TABLE]
    assert not unchanged(first, again)


def test_another_sessions_snapshot_is_not_this_ones(checkout: Path) -> None:
    _, first = _read(Session.open(checkout))
    _, again = _read(Session.open(checkout))
    assert not unchanged(first, again)  # (how it names its files is its own)


def test_a_snapshot_without_what_it_read_is_never_the_same(checkout: Path) -> None:
    s = Session.open(checkout)
    _, first = _read(s)
    _, again = _read(s)
    assert not unchanged(first._replace(read=lambda rel: None), again)


def test_the_lock_itself_is_no_change(checkout: Path) -> None:
    """Under the lock the state dir holds the lock's file, so ``tidy`` reads False there: the
    lock's business, not the look's."""
    s = Session.open(checkout)
    _, first = _read(s)
    _, again = _read(s)
    assert first.tidy and unchanged(first, again._replace(tidy=False))
    assert not unchanged(first, again._replace(pending=True))
