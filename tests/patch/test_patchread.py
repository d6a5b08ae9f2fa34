"""Reading patches: what patchfile writes, patchread applies and reverses, byte for byte."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit.digest import blob_id
from patchkit.errors import PatchError
from patchkit.patch.read import apply, parse, reverse
from patchkit.patch.write import FileChange, format_patch

LINE = st.sampled_from([b"a\n", b"b\n", b"c\r\n", b"\xe9t\xe9\n", b"    x = 1\n", b"\n", b"-- \n", b"+\n"])


def _patch(old: bytes, new: bytes, path: str = "pkg/mod.py") -> bytes:
    change = FileChange(path, "100644", old, new, blob_id(old), blob_id(new))
    return format_patch(author="A <a@b>", date="Thu, 01 Jan 2026 00:00:00 +0000", message="Subject\n\nBody\n",
                        changes=[change], signature="test")


@settings(max_examples=300, deadline=None)
@given(st.lists(LINE, max_size=30), st.lists(LINE, max_size=30), st.booleans(), st.booleans())
def test_round_trip(a: list[bytes], b: list[bytes], cut_a: bool, cut_b: bool) -> None:
    old, new = b"x\n" + b"".join(a), b"".join(b)
    if cut_a:
        old = old.rstrip(b"\n")  # no newline at end of file
    if cut_b:
        new = new.rstrip(b"\n")
    if old == new:
        return
    (section,) = parse(_patch(old, new))
    assert section.path == "pkg/mod.py"
    assert apply(old, section) == new
    assert reverse(new, section) == old


def test_insertion_hunks() -> None:
    old = b"".join(b"line %d\n" % i for i in range(20))
    new = old.replace(b"line 3\n", b"line 3\nnew A\n").replace(b"line 15\n", b"line 15\nnew B\nnew C\n")
    (section,) = parse(_patch(old, new))
    assert len(section.hunks) == 2
    assert apply(old, section) == new
    assert reverse(new, section) == old


def test_apply_to_other_bytes_fails_clearly() -> None:
    old = b"x = {\n    10: 1,\n}\n"
    new = b"x = {\n    10: 1,\n    12: 1,\n}\n"
    (section,) = parse(_patch(old, new))
    with pytest.raises(PatchError) as info:
        apply(old.replace(b"10: 1", b"10: 2"), section, "p.patch")
    assert str(info.value) == "p.patch: cannot apply: hunk at line 1 of pkg/mod.py does not match"
    with pytest.raises(PatchError, match="cannot reverse"):
        reverse(old, section, "p.patch")


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda p: p[: p.index(b"+    12")], "p.patch: corrupt patch: "),
        (lambda p: b"", "p.patch: corrupt patch: no file sections"),
        (lambda p: b"\x00\xff junk \x89PNG", "p.patch: corrupt patch: no file sections"),
        (lambda p: p.replace(b"--- a/pkg/mod.py", b"--- /dev/null"), "p.patch: refused: the patch creates, deletes or renames pkg/mod.py"),
        (lambda p: p.replace(b"index ", b"new file mode 100644\nindex "), "p.patch: refused: the patch changes more than file contents ('new file mode 100644' for pkg/mod.py)"),
        (lambda p: p.replace(b"index ", b"rename from pkg/x.py\nindex "), "p.patch: refused: the patch changes more than file contents"),
        (lambda p: p.replace(b"diff --git a/pkg/mod.py b/pkg/mod.py", b"diff --git a/pkg/mod.py b/pkg/other.py"), "p.patch: refused: 'diff --git a/pkg/mod.py b/pkg/other.py' renames or names no file"),
        (lambda p: p.replace(b"+++ b/pkg/mod.py", b"+++ b/pkg/other.py"), "p.patch: refused: the patch creates, deletes or renames pkg/mod.py"),
    ],
)
def test_bad_patches(mangle, message: str) -> None:
    data = _patch(b"x = {\n    10: 1,\n}\n", b"x = {\n    10: 1,\n    12: 1,\n}\n")
    with pytest.raises(PatchError) as info:
        parse(mangle(data), "p.patch")
    assert str(info.value).startswith(message)
    assert info.value.exit_code == 2


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_give_a_patch_or_a_clean_error(data: bytes) -> None:
    try:
        parse(data)
    except PatchError:
        pass


def test_no_newline_marker_first_in_a_hunk_is_a_clean_error() -> None:
    # Found by the reliability suite's mutation property: this crashed with IndexError.
    data = _patch(b"x = {\n    10: 1,\n}\n", b"x = {\n    10: 1,\n    12: 1,\n}\n")
    head, _, rest = data.partition(b" @@\n")
    with pytest.raises(PatchError) as info:
        parse(head + b" @@\n\\ No newline at end of file\n" + rest, "p.patch")
    assert str(info.value) == "p.patch: corrupt patch: hunk at line 1 of pkg/mod.py starts with '\\ No newline'"
