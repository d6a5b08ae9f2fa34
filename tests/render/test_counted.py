"""apply's "+N lines": counted from the lines shared at both ends where the change only adds or
only removes, from the diff otherwise; the fewest lines either way, as git counts them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from patchkit.render.apply import _counted, lines_changed

TABLE = b"SIZES = {\n    9: {\n        2: 64,\n    },\n    10: {\n        2: 64,\n    },\n}\n"
ADDED = TABLE.replace(b"}\n", b"    12: {\n        2: 64,\n    },\n}\n")


def _git_counts(tmp_path: Path, before: bytes, after: bytes) -> dict:
    (tmp_path / "a").write_bytes(before)
    (tmp_path / "b").write_bytes(after)
    out = subprocess.run(["git", "diff", "--no-index", "--numstat", "a", "b"], cwd=tmp_path, capture_output=True).stdout
    added, removed = out.split()[:2] if out else (b"0", b"0")
    return {"added": int(added), "removed": int(removed)}


@pytest.mark.parametrize(("before", "after"), [
    (TABLE, ADDED),  # a table's new key: lines added in one place
    (ADDED, TABLE),  # and taken away again (revert)
    (TABLE, TABLE.replace(b"10: {", b"10 : {")),  # a line changed: from the diff
    (b"a\nb", b"a\nb\nc\n"),  # the last line gains its newline: it is changed, not shared
    (b"", b"x\n"),
    (b"x\n", b"x\n"),
    (b"y\n}\ny\n}\ny\n", b"y\n}\nw\nx\ny\ny\ny\n}\ny\n"),  # repeated lines, where a diff can be longer
])
def test_counted_as_git_counts(tmp_path: Path, before: bytes, after: bytes) -> None:
    assert _counted(before, after) == _git_counts(tmp_path, before, after)


def test_in_words() -> None:
    assert lines_changed(TABLE, ADDED) == "+3 lines"
    assert lines_changed(ADDED, TABLE) == "-3 lines"
    assert lines_changed(TABLE, TABLE.replace(b"10: {", b"10 : {")) == "+1 -1 lines"
    assert lines_changed(b"a\n", b"a\nb\n") == "+1 line"


def test_a_shipped_patch_is_counted_from_its_hunks_without_a_diff(prebuilt, tmp_path: Path, monkeypatch) -> None:
    """apply of a shipped patch says each file's lines as its hunks count them, what ``git apply
    --numstat`` says of the patch, and makes no diff of the files (FlashInfer's headers are
    thousands of lines: a diff of each took most of apply --all-fixes's time)."""
    import json
    import shutil

    from patchkit.render import apply as render_apply
    from support.cli import invoke
    from support.repos import ROOT

    repo = tmp_path / "sglang"
    shutil.copytree(prebuilt.release("sglang", "0.5.9"), repo, symlinks=True)

    def no_diff(before: bytes, after: bytes) -> dict:
        raise AssertionError("a diff was made")

    monkeypatch.setattr(render_apply, "_counted", no_diff)
    done = invoke("apply", str(repo), "--json")
    assert done.returncode == 0, done.stderr
    [target] = json.loads(done.stdout)["targets"]
    patches = [str(ROOT / "patches/0.5.9" / name) for name in json.loads(done.stdout)["targets"][0]["source"].split("patches/0.5.9/")[1:]]
    numstat = subprocess.run(["git", "apply", "--numstat", *[p.rstrip(" +") for p in patches]], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    expected = sorted((line.split("\t")[2], int(line.split("\t")[0]), int(line.split("\t")[1])) for line in numstat)
    assert sorted((c["path"], c["added"], c["removed"]) for c in target["changes"]) == expected
