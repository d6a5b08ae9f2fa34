"""patchkit.targets.transaction, in process on a temporary folder: commit, recover, the lock.

A transaction stopped at each of its points (the PATCHKIT_FAULT hook made to raise here
instead of killing the process) leaves what tests/targets/test_crash_and_race.py finds
after a real SIGKILL; ``recover`` finishes it, refuses a file changed meanwhile, and sets
aside a transaction of another release.
"""

from __future__ import annotations

import fcntl
import json
import os
import py_compile
from hashlib import sha256
from pathlib import Path

import pytest

from patchkit.errors import BadInput, Refused
from patchkit.render.apply import lock_lines
from patchkit.targets import transaction
from patchkit.targets.locate import DIRECTORY, Target, open_target
from patchkit.targets.state import Store
from patchkit.targets.transaction import Finished, JournalSetAside, Lock, LockTaken, commit, exclusive, recover
from patchkit.types import Applied, AppliedFile, Change, Files, Generated
from support.repos import DC

A, B = f"{DC}/all_reduce_utils.py", f"{DC}/torch_symm_mem.py"
BEFORE = {A: b"A = 1\n", B: b"B = 1\n"}
AFTER = {A: b"A = 2\n", B: b"B = 2\n"}
POINTS = ("objects", "journal", "file:1", "file:2", "state", "bytecode")


def sha(data: bytes) -> str:
    return sha256(data).hexdigest()


APPLIED = Applied("0.5.5", Generated(Files.CHECKOUT), "cd" * 32, 10, 12, "0.1.0",
                  [AppliedFile(p, sha(BEFORE[p]), sha(AFTER[p]), []) for p in (A, B)])
CHANGES = [Change(p, BEFORE[p], AFTER[p]) for p in (A, B)]


@pytest.fixture
def target(tmp_path: Path) -> Target:
    """A plain folder holding SGLang 0.5.5's two table modules (with bytecode) and its version."""
    root = tmp_path / "sglang"
    (root / DC).mkdir(parents=True)
    (root / "python/sglang/version.py").write_bytes(b'__version__ = "0.5.5"\n')
    for path, data in BEFORE.items():
        (root / path).write_bytes(data)
        py_compile.compile(str(root / path), doraise=True)
    found = open_target(root)
    assert (found.kind, found.state_dir) == (DIRECTORY, root / ".patchkit")
    return found


def on_disk(t: Target) -> dict[str, bytes]:
    return {p: (t.root / p).read_bytes() for p in (A, B)}


def pycs(t: Target) -> list[str]:
    return sorted(p.name for p in (t.root / DC / "__pycache__").glob("*.pyc"))


class Stop(Exception):
    """Raised at a fault point: the transaction stops there, as a SIGKILL stops it."""


def test_commit_writes_every_file_records_the_state_and_drops_the_bytecode(target: Target) -> None:
    os.chmod(target.root / B, 0o640)
    store = Store(target.state_dir)
    compiled = pycs(target)
    assert len(compiled) == 2
    dropped = commit(target, store, CHANGES, APPLIED, "apply", "0.5.5")
    assert on_disk(target) == AFTER
    assert sorted(p.name for p in dropped) == compiled and pycs(target) == []
    assert oct(os.stat(target.root / B).st_mode & 0o777) == oct(0o640)  # the file keeps its mode
    assert store.applied() == APPLIED
    assert store.journal() is None
    assert sorted(p.name for p in store.objects.iterdir()) == sorted(sha(BEFORE[p]) for p in (A, B))  # originals only
    assert sorted(p.name for p in store.root.iterdir()) == ["objects", "state.json"]


@pytest.mark.parametrize("op", ["apply", "revert"])
def test_the_store_gets_the_originals_and_the_journal_carries_the_other_after_images(
        target: Target, monkeypatch: pytest.MonkeyPatch, op: str) -> None:
    """What the store holds when the journal is written: the originals the new state names, and
    a revert's after-images (those originals, there already); the journal carries the rest of
    the after-images; a revert's before-images (the patched bytes) are named by sha256 only."""
    store = Store(target.state_dir)
    if op == "revert":
        commit(target, store, CHANGES, APPLIED, "apply", "0.5.5")
    changes = CHANGES if op == "apply" else [Change(p, AFTER[p], BEFORE[p]) for p in (A, B)]

    def fault(at: str, path=None) -> None:
        if at == "journal":
            raise Stop(at)

    monkeypatch.setattr(transaction, "fault", fault)
    with pytest.raises(Stop):
        commit(target, store, changes, APPLIED if op == "apply" else None, op, "0.5.5")
    stored = sorted(p.name for p in store.objects.iterdir())
    assert stored == sorted(sha(d) for d in BEFORE.values())  # the originals: apply's before-images, revert's after-images
    assert _journal_doc(store)["carried"] == ({sha(AFTER[p]): AFTER[p].decode() for p in (A, B)} if op == "apply" else {})
    assert [(f["before"], f["after"]) for f in store.journal()["files"]] == [(sha(c.before), sha(c.after)) for c in changes]
    monkeypatch.setattr(transaction, "fault", lambda at, path=None: None)
    assert recover(target, store, "0.5.5") == Finished(op, 2)
    assert on_disk(target) == (AFTER if op == "apply" else BEFORE)
    kept = sorted(sha(BEFORE[p]) for p in (A, B)) if op == "apply" else []  # the originals the state names
    assert sorted(p.name for p in store.objects.iterdir()) == kept


@pytest.mark.parametrize("point", POINTS)
def test_stopped_at_each_point_then_recovered(target: Target, monkeypatch: pytest.MonkeyPatch, point: str) -> None:
    store = Store(target.state_dir)

    def fault(at: str, path=None) -> None:
        if at == point:
            raise Stop(at)

    monkeypatch.setattr(transaction, "fault", fault)
    with pytest.raises(Stop):
        commit(target, store, CHANGES, APPLIED, "apply", "0.5.5")
    written = {"objects": 0, "journal": 0, "file:1": 1}.get(point, 2)
    assert on_disk(target) == {p: (AFTER if i < written else BEFORE)[p] for i, p in enumerate((A, B))}
    assert (store.journal() is not None) == (point != "objects")
    assert (store.applied() == APPLIED) == (point in ("state", "bytecode"))
    assert len(pycs(target)) == (0 if point == "bytecode" else 2)

    monkeypatch.setattr(transaction, "fault", lambda at, path=None: None)
    said = recover(target, store, "0.5.5")
    if point == "objects":  # no journal yet: never begun, the objects it wrote are pruned
        assert said is None and on_disk(target) == BEFORE and store.applied() is None
        assert not store.objects.exists() or list(store.objects.iterdir()) == []
    else:  # rolled forward
        assert said == Finished("apply", 2)
        assert lock_lines(LockTaken(recovered=said)) == ["finished an interrupted apply (2 files)"]
        assert on_disk(target) == AFTER and store.applied() == APPLIED and pycs(target) == []
        assert sorted(p.name for p in store.objects.iterdir()) == sorted(sha(BEFORE[p]) for p in (A, B))
    assert store.journal() is None
    assert recover(target, store, "0.5.5") is None  # nothing left to finish


def _stopped_after_file_1(target: Target, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def fault(at: str, path=None) -> None:
        if at == "file:1":
            raise Stop(at)

    monkeypatch.setattr(transaction, "fault", fault)
    with pytest.raises(Stop):
        commit(target, store, CHANGES, APPLIED, "apply", "0.5.5")
    monkeypatch.setattr(transaction, "fault", lambda at, path=None: None)


def test_recovery_never_overwrites_a_file_changed_meanwhile(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(target.state_dir)
    _stopped_after_file_1(target, store, monkeypatch)
    (target.root / B).write_bytes(b"B = 3  # edited\n")
    journal = store.journal_file.read_bytes()
    with pytest.raises(Refused) as raised:
        recover(target, store, "0.5.5")
    assert str(raised.value) == (f"{target.root / B}: changed during an interrupted apply; patchkit will not overwrite it "
                                 f"(the journal is {store.journal_file})")
    assert on_disk(target) == {A: AFTER[A], B: b"B = 3  # edited\n"}
    assert store.journal_file.read_bytes() == journal


def _journal_doc(store: Store) -> dict:
    return json.loads(store.journal_file.read_bytes())


def test_the_journal_carries_the_after_images_the_store_lacks(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(target.state_dir)
    _stopped_after_file_1(target, store, monkeypatch)
    assert _journal_doc(store)["carried"] == {sha(AFTER[p]): AFTER[p].decode() for p in (A, B)}
    assert sorted(p.name for p in store.objects.iterdir()) == sorted(sha(BEFORE[p]) for p in (A, B))


def test_bytes_that_are_no_text_are_carried_as_they_are(target: Target) -> None:
    store = Store(target.state_dir)
    after = bytes(range(256)) * 2
    (target.root / B).write_bytes(after)  # the file already holds its after-image: only carried, never written

    def fault(at: str, path=None) -> None:
        if at == "journal":
            raise Stop(at)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(transaction, "fault", fault)
        with pytest.raises(Stop):
            commit(target, store, [Change(A, BEFORE[A], after)], None, "apply", "0.5.5")
    assert transaction._carried(_journal_doc(store), sha(after)) == after
    assert recover(target, store, "0.5.5") == Finished("apply", 1)
    assert (target.root / A).read_bytes() == after


def test_a_journal_whose_after_images_are_in_the_store_is_finished(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    """As patchkit wrote its journals before they carried anything: the after-images in the store."""
    store = Store(target.state_dir)
    _stopped_after_file_1(target, store, monkeypatch)
    doc = _journal_doc(store)
    del doc["carried"]
    store.put_all(AFTER.values())
    store.journal_file.write_text(json.dumps(doc))
    assert recover(target, store, "0.5.5") == Finished("apply", 2)
    assert on_disk(target) == AFTER and store.applied() == APPLIED


def test_recovery_without_the_new_content_refuses(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    """The journal's carried after-image damaged (its bytes are not those its sha256 names), none in the store."""
    store = Store(target.state_dir)
    _stopped_after_file_1(target, store, monkeypatch)
    doc = _journal_doc(store)
    doc["carried"][sha(AFTER[B])] = "B = 3\n"
    store.journal_file.write_text(json.dumps(doc))
    with pytest.raises(Refused) as raised:
        recover(target, store, "0.5.5")
    assert str(raised.value) == (f"{target.root / B}: cannot finish the interrupted apply: its new content is neither "
                                 f"in the journal nor in {store.objects}")
    assert on_disk(target) == {A: AFTER[A], B: BEFORE[B]}  # nothing written: every file is checked first


def test_an_interrupted_transaction_of_another_release_is_set_aside(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(target.state_dir)
    _stopped_after_file_1(target, store, monkeypatch)
    journal = store.journal_file.read_bytes()
    said = recover(target, store, "0.5.9")  # upgraded since the kill
    (folder,) = store.aside.iterdir()
    assert said == JournalSetAside("apply", "SGLang", "0.5.5", "0.5.9", folder)
    assert lock_lines(LockTaken(recovered=said)) == [f"an interrupted apply of SGLang 0.5.5 is set aside in {folder}: 0.5.9 is here now"]
    assert (folder / "journal.json").read_bytes() == journal
    assert sorted(p.name for p in (folder / "objects").iterdir()) == sorted(sha(d) for d in BEFORE.values())  # the after-images: in the journal
    assert on_disk(target) == {A: AFTER[A], B: BEFORE[B]}  # not finished on the other release's files
    assert store.journal() is None


@pytest.mark.parametrize(
    "journal, reason",
    [
        ({"op": "apply", "files": "x", "applied": None}, "corrupt patchkit journal; restore the files by hand (e.g. `git checkout`) and remove it"),
        ({"op": "apply", "files": [{"path": A}], "applied": None}, "corrupt patchkit journal; restore the files by hand (e.g. `git checkout`) and remove it"),
        ({"op": "apply", "files": [], "applied": "x"}, "corrupt patchkit journal; restore the files by hand (e.g. `git checkout`) and remove it"),
    ],
    ids=["files not a list", "an entry without hashes", "applied not a record"],
)
def test_a_corrupt_journal_is_bad_input(target: Target, journal: dict, reason: str) -> None:
    store = Store(target.state_dir)
    store.ensure()
    store.journal_file.write_text(json.dumps({"format": 1, **journal}))
    with pytest.raises(BadInput) as raised:
        recover(target, store, "0.5.5")
    assert (raised.value.path, raised.value.reason) == (str(store.journal_file), reason)
    assert on_disk(target) == BEFORE


def test_the_lock_refuses_a_second_holder_and_leaves_no_trace(target: Target) -> None:
    store = Store(target.state_dir)
    with Lock(store, target) as held:
        assert held.waited() is None
        assert store.lock_file.read_text() == f"{os.getpid()}\n"
        with pytest.raises(Refused) as raised:
            with Lock(store, target, timeout=0.2):
                pass
        assert str(raised.value) == (f"{target.root}: another patchkit run (pid {os.getpid()}) is working on this "
                                     "checkout; gave up waiting after 0.2s")
    assert not target.state_dir.exists()  # lock file and empty state dir removed


def test_a_lock_file_left_by_a_killed_holder_does_not_block(target: Target) -> None:
    store = Store(target.state_dir)
    store.ensure()
    store.lock_file.write_text("999999\n")  # its holder died: the file is there, nobody holds the flock
    with exclusive(target, store, "0.5.5") as said:
        assert said == LockTaken(None, None) and lock_lines(said) == []
        fd = os.open(store.lock_file, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held now, by this run
        finally:
            os.close(fd)
    assert not store.lock_file.exists()
