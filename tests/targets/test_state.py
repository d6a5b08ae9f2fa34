"""patchkit.targets.state.Store: the state dir of one target, on a temporary folder.

Objects are content-addressed and checked on the way out; state.json and journal.json
round-trip and refuse what they cannot read; leftovers of killed runs are cleared;
``tidy`` says when a run may skip the lock; a state of another release goes aside with
its originals.
"""

from __future__ import annotations

import json
import time
from hashlib import sha256
from pathlib import Path

import pytest

from patchkit.errors import BadInput
from patchkit.targets.state import Store
from patchkit.types import FORMAT, Applied, AppliedFile, source_from_json

OLD, NEW = b"X = 1\n", b"X = 2\n"
PATH = "python/sglang/srt/distributed/device_communicators/all_reduce_utils.py"


def sha(data: bytes) -> str:
    return sha256(data).hexdigest()


APPLIED = Applied("0.5.5", source_from_json("generated from the checkout's files"), "ab" * 32, 10, 12, "0.1.0",
                  [AppliedFile(PATH, sha(OLD), sha(NEW), [{"name": "X", "scope": "module"}])])


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "state")


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_objects_are_stored_by_their_sha256_and_checked_when_read(store: Store) -> None:
    store.ensure()
    digest = store.put(OLD)
    assert digest == sha(OLD)
    assert (store.objects / digest).read_bytes() == OLD
    assert store.get(digest) == OLD
    assert store.get(sha(NEW)) is None  # never stored
    (store.objects / digest).write_bytes(b"X = 3\n")  # damaged on disk
    assert store.get(digest) is None
    assert store.put(OLD) == digest  # a damaged object is written again
    assert store.get(digest) == OLD
    assert files(store.root) == ["objects", f"objects/{digest}"]  # no temp file left


def test_state_round_trips_as_sorted_json(store: Store) -> None:
    assert store.applied() is None
    store.ensure()
    store.set_applied(APPLIED)
    assert store.applied() == APPLIED
    text = store.state_file.read_text()
    assert text.endswith("}\n") and json.loads(text) == {"format": FORMAT, **APPLIED.to_json()}
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    store.set_applied(None)
    assert store.applied() is None and not store.state_file.exists()


def test_journal_round_trips_with_its_format(store: Store) -> None:
    assert store.journal() is None
    store.ensure()
    doc = {"op": "apply", "version": "0.5.5", "files": [{"path": PATH, "before": sha(OLD), "after": sha(NEW)}], "applied": None}
    store.set_journal(doc)
    assert store.journal() == {"format": FORMAT, **doc}
    store.set_journal(None)
    assert store.journal() is None and not store.journal_file.exists()


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"{not json", "corrupt patchkit state (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); remove it to start over"),
        (b"[1, 2]", "corrupt patchkit state (unknown format); remove it to start over"),
        (json.dumps({"format": FORMAT + 1}).encode(), "corrupt patchkit state (unknown format); remove it to start over"),
        (json.dumps({"format": FORMAT, "version": "0.5.5"}).encode(), "corrupt patchkit state (missing 'files'); remove it to start over"),
    ],
    ids=["not JSON", "a list", "another format", "a key missing"],
)
def test_a_state_file_it_cannot_read_is_bad_input(store: Store, data: bytes, reason: str) -> None:
    store.ensure()
    store.state_file.write_bytes(data)
    with pytest.raises(BadInput) as raised:
        store.applied()
    assert (raised.value.path, raised.value.reason) == (str(store.state_file), reason)
    assert store.state_file.read_bytes() == data  # left for the user to look at


def test_leftovers_of_killed_runs_are_cleared_and_nothing_else(store: Store) -> None:
    store.ensure()
    store.set_applied(APPLIED)
    store.put(OLD)
    (store.root / ".state.json.patchkit-tmp").write_bytes(b"half")
    scratch = store.root / "upstream-4242"
    scratch.mkdir()
    (scratch / "index.lock").write_bytes(b"DIRC")  # a git killed inside update-index leaves it
    killed = store.aside / "20260101T000000Z-0.5.4"  # a set-aside killed before its record moved
    (killed / "objects").mkdir(parents=True)
    kept = store.aside / "20260101T000000Z-0.5.3"
    kept.mkdir(parents=True)
    (kept / "state.json").write_bytes(b"{}")
    store.clean_leftovers()
    assert files(store.root) == sorted([
        "aside", "aside/20260101T000000Z-0.5.3", "aside/20260101T000000Z-0.5.3/state.json",
        "objects", f"objects/{sha(OLD)}", "state.json",
    ])


def test_tidy_is_true_only_when_a_run_needs_no_lock(store: Store) -> None:
    assert store.tidy(None)  # no state dir at all
    store.ensure()
    assert store.tidy(None)
    store.put(OLD)
    assert not store.tidy(None)  # an object nothing refers to
    assert store.tidy(APPLIED)  # the original the record keeps
    for leftover in (store.lock_file, store.journal_file, store.root / ".x.patchkit-tmp", store.root / "upstream-1"):
        leftover.mkdir() if leftover.name.startswith("upstream-") else leftover.write_bytes(b"")
        assert not store.tidy(APPLIED), leftover.name
        leftover.rmdir() if leftover.is_dir() else leftover.unlink()
    assert store.tidy(APPLIED)


def test_prune_keeps_exactly_what_it_is_told(store: Store) -> None:
    store.ensure()
    old, _ = store.put(OLD), store.put(NEW)
    store.prune({old})
    assert files(store.objects) == [old]
    store.prune(set())
    assert files(store.objects) == []
    Store(store.root / "missing").prune(set())  # no objects folder: nothing to do


def test_a_state_set_aside_keeps_its_originals(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    second = 1767323045 * 10**9  # 2026-01-02T03:04:05Z: every set-aside below falls in this one second
    clock = iter([second + 7, second + 7, second + 300, second + 4000])  # the first two: the same nanosecond
    monkeypatch.setattr(time, "time_ns", lambda: next(clock))
    store.ensure()
    store.put(OLD)
    store.put(NEW)
    store.set_applied(APPLIED)
    state = store.state_file.read_bytes()
    first = store.set_aside(APPLIED)
    assert first == store.aside / "20260102T030405.000000007Z-0.5.5"
    assert files(first) == ["objects", f"objects/{sha(OLD)}", "state.json"]
    assert (first / "state.json").read_bytes() == state and (first / "objects" / sha(OLD)).read_bytes() == OLD
    assert store.applied() is None
    store.set_applied(APPLIED)
    assert store.set_aside(APPLIED) == store.aside / "20260102T030405.000000007Z-0.5.5-2"  # the same instant: another name
    store.set_applied(APPLIED._replace(version="0.5.9/../x"))  # a version is never a path
    assert store.set_aside(APPLIED._replace(version="0.5.9/../x")) == store.aside / "20260102T030405.000000300Z-0.5.9_.._x"
    store.set_applied(APPLIED._replace(version="0.5.3"))
    store.set_aside(APPLIED._replace(version="0.5.3"))
    # Oldest first, whatever the versions (an upgrade and a downgrade within one second).
    assert [p.parent.name for p in store.set_aside_states()] == [
        "20260102T030405.000000007Z-0.5.5", "20260102T030405.000000007Z-0.5.5-2",
        "20260102T030405.000000300Z-0.5.9_.._x", "20260102T030405.000004000Z-0.5.3"]
