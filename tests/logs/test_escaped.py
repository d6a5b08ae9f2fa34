"""escaped(): text from a log as it may be printed, its control characters as ``cat -v`` shows them."""

from __future__ import annotations

import pytest

from patchkit.text import escaped


@pytest.mark.parametrize(("text", "shown"), [
    ("KeyError: 12", "KeyError: 12"),
    ("KeyError: 12\x1b]52;c;aGVsbG8=\x07", "KeyError: 12^[]52;c;aGVsbG8=^G"),  # OSC 52: write the clipboard
    ("a\x00b\rc\bd\x7fe", "a^@b^Mc^Hd^?e"),
    ("\x9b2J \x85", "M-^[2J M-^E"),  # C1 controls: U+009B is a CSI to some terminals
    ("abc\u202edef \u200b", "abc\\u202edef \\u200b"),  # a bidirectional override, a zero-width space
    ("tab\tand\u00a0spaces, é, 日本", "tab\tand\u00a0spaces, é, 日本"),  # kept as they are
    ("^[ and \\u202e as written", "^[ and \\u202e as written"),
])
def test_escaped(text: str, shown: str) -> None:
    assert escaped(text) == shown
    assert escaped(shown) == shown  # what it prints has nothing left to escape
