"""The follower: new whole lines per poll, a file that appears late, partial lines, a restart
that truncates or replaces the log."""

from __future__ import annotations

import os
from pathlib import Path

from patchkit.logs.follow import Follower
from patchkit.logs.read import MAX_LINE


def test_late_partial_and_appended(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    follow = Follower(log)
    assert follow.poll() == ([], False) and not follow.exists
    log.write_bytes(b"one\ntw")
    assert follow.poll() == ([(1, "one")], False) and follow.exists
    with open(log, "ab") as f:
        f.write(b"o\nthree\n")
    assert follow.poll() == ([(2, "two"), (3, "three")], False)
    assert follow.poll() == ([], False)
    follow.close()


def test_truncated_by_a_restart(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"first start\nline 2\n")
    follow = Follower(log)
    assert follow.poll()[0] == [(1, "first start"), (2, "line 2")]
    log.write_bytes(b"again\n")  # "> server.log": the same inode, shorter
    assert follow.poll() == ([(1, "again")], True)
    log.write_bytes(b"a third start, longer than the second one\n")  # the first bytes changed
    assert follow.poll() == ([(1, "a third start, longer than the second one")], True)
    assert follow.restarts == 2
    follow.close()


def test_replaced_by_another_file(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"old\n")
    follow = Follower(log)
    follow.poll()
    new = tmp_path / "new.log"
    new.write_bytes(b"old\nnew\n")  # same first bytes, another inode (a rotation, rm and create)
    os.replace(new, log)
    assert follow.poll() == ([(1, "old"), (2, "new")], True)
    follow.close()


def test_a_line_longer_than_the_cap(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"y" * (MAX_LINE + 10))
    follow = Follower(log)
    assert follow.poll() == ([(1, "y" * MAX_LINE)], False)
    with open(log, "ab") as f:
        f.write(b"yyy\nnext\n")
    assert follow.poll() == ([(2, "next")], False)
    follow.close()
