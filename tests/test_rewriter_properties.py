"""Property tests for the rewriter: generated capability tables in many layouts.

The sources are built from drawn pieces (so every one is valid Python) and each
piece's position is recorded, which gives the exact expected result: the
properties below check the rewriter against that model, against ``difflib``,
against ``patchkit.rewrite.evaluate`` and against black.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field

import black
import hypothesis.strategies as st
from hypothesis import HealthCheck, assume, example, given, settings

from patchkit.errors import RewriteError
from patchkit.rewrite.dict_key import Rewrite, rewrite
from patchkit.rewrite.evaluate import tables as evaluate_tables
from patchkit.types import ALREADY_UPSTREAM, PATCHED
from support.crash import FULL_SIZE

NAMES = ("SIZES", "_WORLD_SIZES")
MAX_LINE = 88  # black's default line length

# Examples per property: make test, and make test-reliability (PATCHKIT_KILLS=400, FULL_SIZE), which
# runs this module too.  docs/RELIABILITY.md is checked against these.
EXAMPLES = {
    "generated tables: output, only the new entry, second run, evaluated, line endings (each)": (25, 50),
    "black-clean tables stay black-clean": (20, 40),
    "generated tables mutated, then rewritten": (40, 80),
    "junk: bytes, text, Python fragments (each)": (80, 80),
}


def _settings(name: str) -> settings:
    # No example database: `make test` runs pytest from tests/, where a .hypothesis/
    # directory would not be ignored by git.
    return settings(max_examples=EXAMPLES[name][FULL_SIZE], deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


FAST, SLOW, MUTATED, JUNK = (_settings(name) for name in EXAMPLES)  # in EXAMPLES' order


# --------------------------------------------------------------------------- model


@dataclass
class Table:
    """One known table in a generated source, and where its ``from_cc`` entry is."""

    name: str
    classes: tuple[str, ...]  # () at module level
    multiline: bool
    patched: bool  # has from_cc and lacks to_cc
    keys: list[int] = field(default_factory=list)
    # Only meaningful when patched (they describe the last from_cc entry):
    value: str = ""  # the value's source text, "\n"-separated when multi-line
    line: int = 0  # 0-based line holding the end of the value
    col: int = 0  # column right after the value on that line
    has_comma: bool = True  # a comma follows the entry
    indent: str = ""  # the entry's indentation (multi-line tables)

    @property
    def scope(self) -> str:
        return f"class {'.'.join(self.classes)}" if self.classes else "module"

    @property
    def eval_key(self) -> str:
        return ".".join(self.classes + (self.name,))


@dataclass
class Case:
    lines: list[str]  # the source, without line endings
    newline: str
    from_cc: int
    to_cc: int
    tables: list[Table]
    black_style: bool

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    @property
    def source(self) -> bytes:
        return self.text.replace("\n", self.newline).encode("utf-8")

    @property
    def patched(self) -> list[Table]:
        return [t for t in self.tables if t.patched]


def expected_lines(case: Case) -> tuple[list[str], list[str]]:
    """(original lines with the in-place edits applied, the full expected output lines).

    In-place edits: a one-line table gains ``, <to_cc>: <value>`` right after the
    from_cc value; a multi-line table whose from_cc entry had no comma gains one.
    The expected output additionally has the new entry's lines after the from_cc entry.
    """
    edited = list(case.lines)
    inserts: list[tuple[int, list[str]]] = []
    for t in case.patched:
        text = edited[t.line]
        if not t.multiline:
            edited[t.line] = text[: t.col] + f", {case.to_cc}: {t.value}" + text[t.col :]
            continue
        if not t.has_comma:
            edited[t.line] = text[: t.col] + "," + text[t.col :]
        value_lines = t.value.split("\n")
        new = [f"{t.indent}{case.to_cc}: {value_lines[0]}", *value_lines[1:]]
        new[-1] += "," if t.has_comma else ""
        inserts.append((t.line, new))
    full = list(edited)
    for line, new in sorted(inserts, reverse=True):
        full[line + 1 : line + 1] = new
    return edited, full


def one_line_case(lines: list[str], newline: str = "\n") -> Case:
    """A hand-written Case: ``SIZES = {10: 1}`` on the first line, from 10 to 12."""
    assert lines[0] == "SIZES = {10: 1}"
    table = Table("SIZES", (), multiline=False, patched=True, keys=[10], value="1", line=0, col=len("SIZES = {10: 1"))
    return Case(lines, newline, 10, 12, [table], black_style=False)


# Found by these properties (LibCST 1.9.0): when the file's last line ends with a
# comment ending in a backslash, LibCST's trailing-newline detection takes that final
# backslash + newline for a line continuation, so the rewritten file loses its final
# newline.  Kept as explicit examples so the failure shows on every run, not by chance.
COMMENT_BACKSLASH_AT_EOF = one_line_case(["SIZES = {10: 1}", "# \\"])
COMMENT_BACKSLASH_AT_EOF_CRLF = one_line_case(["SIZES = {10: 1}", "# \\"], "\r\n")


# ---------------------------------------------------------------------- strategies
#
# Every strategy is built once (functools.cache, or a module constant), never inside a draw:
# hypothesis validates each new strategy object on its first draw and keeps the ones it can
# in a small cache of its own (sampled_from's not at all), which cost more than the drawing.


@functools.cache
def one_of_these(*options: object) -> st.SearchStrategy:
    """``st.sampled_from(options)``, one strategy object per tuple of options."""
    return st.sampled_from(options)


@functools.cache
def up_to(n: int) -> st.SearchStrategy[int]:
    """``st.integers(0, n)``."""
    return st.integers(0, n)


@functools.cache
def orders(n: int) -> st.SearchStrategy[list[int]]:
    """``st.permutations(range(n))``."""
    return st.permutations(range(n))


@functools.cache
def words(black_style: bool) -> st.SearchStrategy[str]:
    alphabet = "abcxyz0189-" if black_style else "abcxyz0189-{}:,#'\"\\é€ \t"
    word = st.text(alphabet, min_size=1, max_size=6)
    return st.lists(word, min_size=1, max_size=3).map(" ".join)


@functools.cache
@st.composite
def trailing_comments(draw, black_style: bool) -> str:
    """What follows an entry on its line: nothing, a comment or (not black) stray spaces."""
    options = ("", "comment") if black_style else ("", "comment", "comment", "spaces")
    kind = draw(one_of_these(*options))
    if kind == "":
        return ""
    if kind == "spaces":
        return draw(one_of_these(" ", "   ", "\t"))
    prefix = "  # " if black_style else draw(one_of_these("  # ", " # ", "  #", "\t# "))
    return prefix + draw(words(black_style))


@functools.cache
@st.composite
def gap_lines(draw, indent: str, black_style: bool, max_size: int = 2) -> list[str]:
    """Comment lines and (not black) blank lines between entries."""
    kinds = ("comment",) if black_style else ("comment", "blank", "blank", "spaces")
    out = []
    for kind in draw(st.lists(one_of_these(*kinds), max_size=max_size)):
        if kind == "blank":
            out.append("")
        elif kind == "spaces":
            out.append(indent)
        else:
            where = indent if black_style else draw(one_of_these(indent, "", indent + "  "))
            out.append(f"{where}# {draw(words(black_style))}")
    return out


small_ints = st.integers(-8, 2**20).map(str)
mib = st.integers(1, 512).map(lambda n: f"{n} * MiB")
scalars = st.one_of(small_ints, mib)
int_lists = st.lists(st.integers(0, 64), max_size=4).map(lambda xs: "[" + ", ".join(map(str, xs)) + "]")


@functools.cache
@st.composite
def one_line_dicts(draw) -> str:
    keys = draw(st.lists(st.integers(1, 16), unique=True, max_size=3))
    return "{" + ", ".join(f"{k}: {draw(scalars)}" for k in keys) + "}"


@functools.cache
@st.composite
def multi_line_dicts(draw, indent: str, black_style: bool) -> str:
    """A nested dict over several lines; ``indent`` is the indentation of its key."""
    keys = draw(st.lists(st.integers(1, 16), unique=True, min_size=1, max_size=3))
    trailing_comma = True if black_style else draw(st.booleans())
    lines = ["{"]
    for i, k in enumerate(keys):
        lines += draw(gap_lines(indent + "    ", black_style, max_size=1))
        comma = "," if i < len(keys) - 1 or trailing_comma else ""
        lines.append(f"{indent}    {k}: {draw(scalars)}{comma}{draw(trailing_comments(black_style))}")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


@functools.cache
@st.composite
def multi_line_lists(draw, indent: str, black_style: bool) -> str:
    items = draw(st.lists(st.integers(0, 64), min_size=1, max_size=3))
    trailing_comma = True if black_style else draw(st.booleans())
    body = [f"{indent}    {x}{',' if i < len(items) - 1 or trailing_comma else ''}" for i, x in enumerate(items)]
    return "\n".join(["[", *body, f"{indent}]"])


@functools.cache
def values(indent: str | None, black_style: bool) -> st.SearchStrategy[str]:
    """A value's source text; ``indent`` is None where the value must fit on one line."""
    kinds = [scalars, int_lists, one_line_dicts()]
    if indent is not None:
        kinds += [multi_line_dicts(indent, black_style), multi_line_lists(indent, black_style)]
    return st.one_of(*kinds)


@functools.cache
@st.composite
def tables(draw, name: str, classes: tuple[str, ...], from_cc: int, to_cc: int, black_style: bool):
    """(lines, Table) for one known table; Table.line is relative to the first line."""
    indent = "    " * len(classes)
    entry = indent + "    "
    others = draw(st.lists(one_of_these(*(k for k in range(7, 12) if k != from_cc)), unique=True, max_size=4))
    upstream = draw(up_to(3)) == 0
    keys = list(others)
    if not upstream or draw(st.booleans()):
        keys.insert(draw(up_to(len(keys))), from_cc)
        if draw(up_to(9)) == 0:  # a duplicate source key: the last one counts
            keys.insert(draw(up_to(len(keys))), from_cc)
    if upstream:
        keys.insert(draw(up_to(len(keys))), to_cc)
    table = Table(name, classes, multiline=draw(st.booleans()), patched=not upstream, keys=keys)
    key_text = [f"0x{k:X}" if draw(up_to(7)) == 0 else str(k) for k in keys]
    lhs = draw(one_of_these(name, name, f"{name}: dict[int, object]", f"ALIAS = {name}"))
    head = f"{indent}{lhs} = {{"
    trailing_comma = table.multiline if black_style else draw(st.booleans())
    last_source = max(i for i, k in enumerate(keys) if k == from_cc) if not upstream else -1

    if not table.multiline:
        pad = "" if black_style else draw(one_of_these("", "", " "))
        vals = [draw(values(None, black_style)) for _ in keys]
        line = head + pad
        for i, (k, v) in enumerate(zip(key_text, vals, strict=True)):
            line += f"{k}: {v}"
            if i == last_source:
                table.value, table.col = v, len(line)
            if i < len(keys) - 1:
                line += ", "
        line += ("," if trailing_comma else "") + pad + "}" + draw(trailing_comments(black_style))
        added = len(f", {to_cc}: {table.value}") if not upstream else 0
        if len(line) + added < MAX_LINE:
            return [line], table
        table.multiline = True  # too long for one line: lay it out over several
        trailing_comma = True if black_style else trailing_comma

    lines = [head + draw(trailing_comments(black_style))]
    for i, k in enumerate(key_text):
        lines += draw(gap_lines(entry, black_style))
        value = draw(values(entry, black_style))
        first, *rest = value.split("\n")
        lines += [f"{entry}{k}: {first}", *rest]
        table.line, table.col = len(lines) - 1, len(lines[-1])
        comma = "," if i < len(keys) - 1 or trailing_comma else ""
        lines[-1] += comma + draw(trailing_comments(black_style))
        if i == last_source:
            table.value, table.has_comma, table.indent = value, bool(comma), entry
            source_line, source_col = table.line, table.col
    lines += draw(gap_lines(entry, black_style))
    lines.append(indent + "}" + draw(trailing_comments(black_style)))
    if not upstream:
        table.line, table.col = source_line, source_col
    return lines, table


@st.composite
def cases(draw, black_style: bool = False) -> Case:
    from_cc = draw(st.integers(7, 11))
    to_cc = draw(one_of_these(12, 13, 120))
    blocks: list[tuple[str, list[str], list[Table]]] = []  # (kind, lines, tables)

    def add_table(name: str, classes: tuple[str, ...]) -> tuple[list[str], Table]:
        return draw(tables(name, classes, from_cc, to_cc, black_style))

    # Module-level tables: each name at most once per scope.
    for name in draw(st.lists(one_of_these(*NAMES), unique=True, max_size=2)):
        lines, table = add_table(name, ())
        blocks.append(("table", lines, [table]))
    # Classes (possibly nested one level) holding one or two tables.
    for c in range(draw(up_to(2))):
        classes = (f"C{c}",) + (("Inner",) if draw(up_to(3)) == 0 else ())
        lines = [f"{'    ' * i}class {cls}:" for i, cls in enumerate(classes)]
        body_indent = "    " * len(classes)
        found = []
        if draw(st.booleans()):
            lines.append(f'{body_indent}kind = "comm"')
        for i, name in enumerate(draw(st.lists(one_of_these(*NAMES), unique=True, min_size=1, max_size=2))):
            if i and draw(st.booleans()):
                lines.append("")
            table_lines, table = add_table(name, classes)
            table.line += len(lines)
            lines += table_lines
            found.append(table)
        if draw(st.booleans()):
            lines += ["", f"{body_indent}def size(self, cc):", f"{body_indent}    return self.{found[0].name}[cc]"]
        blocks.append(("class", lines, found))
    assume(any(table for _, _, ts in blocks for table in ts))
    # Unrelated code: functions with a local table, dicts under other names, uses.
    for i in range(draw(up_to(3))):
        kind = draw(one_of_these("function", "other", "attribute", "use"))
        if kind == "function":
            lines = [f"def helper{i}(x):", f"    SIZES = {{{from_cc}: x}}", "    return SIZES"]
        elif kind == "other":
            lines = [f"OTHER_SIZES_{i} = {{", f"    {from_cc}: [1, 2],", "}"]
        elif kind == "attribute":
            lines = [f"config.SIZES = {{{from_cc}: 1}}"]
        else:
            lines = [f"size_{i} = len(_WORLD_SIZES)"]
        blocks.append(("class" if kind == "function" else "code", lines, []))
    order = draw(orders(len(blocks)))
    blocks = [blocks[i] for i in order]

    head: list[tuple[str, list[str], list[Table]]] = []
    imports = draw(st.lists(one_of_these("import os", "import sys", "from typing import Any"), unique=True))
    if imports:
        head.append(("import", imports, []))
    if any("MiB" in line for _, lines, _ in blocks for line in lines) or draw(st.booleans()):
        head.append(("code", ["MiB = 1024 * 1024"], []))
    blocks = head + blocks
    lines: list[str] = []
    tables_found = []
    for n, (kind, block, found) in enumerate(blocks):
        if n:
            prev_kind = blocks[n - 1][0]
            if not black_style:
                blank = draw(up_to(2))
            elif "class" in (kind, prev_kind):
                blank = 2
            else:
                blank = draw(st.integers(1 if prev_kind == "import" else 0, 2))
            lines += [""] * blank
        for table in found:
            table.line += len(lines)
        lines += block
        tables_found += found
    while lines and lines[-1] == "":
        lines.pop()
    newline = draw(one_of_these("\n", "\r\n"))
    return Case(lines, newline, from_cc, to_cc, tables_found, black_style)


def run(source: bytes, case: Case) -> Rewrite:
    return rewrite(source, NAMES, case.from_cc, case.to_cc, "gen.py")


def lines_of(source: bytes) -> list[str]:
    return source.decode("utf-8").replace("\r\n", "\n").split("\n")[:-1]


def black_clean(source: bytes) -> bool:
    """Whether ``black --check`` passes the file, as black reads it from disk.

    black.format_file_contents on a raw CRLF string always reports a change (it
    formats to "\\n"); black itself first decodes the bytes with universal newlines
    (decode_bytes) and writes the original newline back.  Line endings are
    checked separately (test_line_endings_are_preserved).
    """
    contents, _, _ = black.decode_bytes(source)
    try:
        black.format_file_contents(contents, fast=True, mode=black.Mode())
    except black.NothingChanged:
        return True
    return False


# ---------------------------------------------------------------------- properties


@FAST
@given(cases())
def test_output_parses_and_patches_exactly_the_tables_with_the_source_key(case: Case) -> None:
    result = run(case.source, case)
    compile(result.source.decode("utf-8"), "gen.py", "exec")
    got = sorted((t.scope, t.name, t.status) for t in result.tables)
    want = sorted((t.scope, t.name, PATCHED if t.patched else ALREADY_UPSTREAM) for t in case.tables)
    assert got == want
    assert result.changed == bool(case.patched)
    assert all((t.from_cc, t.to_cc) == (case.from_cc, case.to_cc) for t in result.tables)


@FAST
@given(cases())
@example(COMMENT_BACKSLASH_AT_EOF)
def test_only_the_new_entry_is_added(case: Case) -> None:
    before = case.lines
    after = lines_of(run(case.source, case).source)
    edited, expected = expected_lines(case)
    in_place = {t.line for t in case.patched if not t.multiline or not t.has_comma}

    # Raw diff: nothing deleted; only the allowed lines (one-line tables, a source
    # entry that gains its comma) are changed, each into itself plus inserted lines.
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        assert op in ("equal", "insert", "replace"), (op, before[i1:i2])
        if op == "replace":
            assert set(range(i1, i2)) <= in_place, (before[i1:i2], after[j1:j2])
            assert j2 - j1 >= i2 - i1
    for t in case.patched:
        if not t.multiline:
            # The one changed line, minus the inserted ", <to_cc>: <value>", is the original.
            inserted = f", {case.to_cc}: {t.value}"
            new = edited[t.line]
            assert new in after
            assert new[: t.col] + new[t.col + len(inserted) :] == before[t.line]
            assert new[t.col : t.col + len(inserted)] == inserted

    # With the in-place edits applied, the diff is pure insertion of the new entries,
    # as many lines as each copied value has.
    ops = difflib.SequenceMatcher(None, edited, after, autojunk=False).get_opcodes()
    assert {op for op, *_ in ops} <= {"equal", "insert"}, [o for o in ops if o[0] != "equal"]
    inserted_lines = sum(j2 - j1 for op, _, _, j1, j2 in ops if op == "insert")
    assert inserted_lines == sum(len(t.value.split("\n")) for t in case.patched if t.multiline)
    # And the inserted lines are the new entry: "<indent><to_cc>: <value>" after the source entry.
    assert after == expected


@FAST
@given(cases())
def test_second_run_is_a_no_op(case: Case) -> None:
    once = run(case.source, case)
    twice = run(once.source, case)
    assert twice.source == once.source
    assert not twice.changed
    assert {t.status for t in twice.tables} == {ALREADY_UPSTREAM}
    assert len(twice.tables) == len(case.tables)


@FAST
@given(cases())
def test_evaluated_tables_gain_a_copy_of_the_source_entry(case: Case) -> None:
    before = evaluate_tables(case.source, NAMES)
    after = evaluate_tables(run(case.source, case).source, NAMES)
    assert set(before) == set(after) == {t.eval_key for t in case.tables}
    for t in case.tables:
        old, new = before[t.eval_key], after[t.eval_key]
        if t.patched:
            assert case.to_cc not in old
            assert new[case.to_cc] == new[case.from_cc] == old[case.from_cc]
            assert {k: v for k, v in new.items() if k != case.to_cc} == old
        else:
            assert new == old


@FAST
@given(cases())
@example(COMMENT_BACKSLASH_AT_EOF_CRLF)
def test_line_endings_are_preserved(case: Case) -> None:
    out = run(case.source, case).source
    if case.newline == "\r\n":
        assert out.endswith(b"\r\n"), out
        assert out.count(b"\n") == out.count(b"\r\n"), out
        assert out.count(b"\r") == out.count(b"\r\n"), out
    else:
        assert b"\r" not in out, out


@SLOW
@given(cases(black_style=True))
def test_black_clean_stays_black_clean(case: Case) -> None:
    assume(black_clean(case.source))
    assert black_clean(run(case.source, case).source)


# ----------------------------------------------------------------------------- junk

FRAGMENTS = [
    "SIZES", "_WORLD_SIZES", " = ", ": ", ", ", ",", "{", "}", "[", "]", "(", ")", "10", "12", "0xA",
    "'10'", "**x", "*", " ", "    ", "\t", "\n", "\r\n", "\r", "\\\n", "#", "# c\n", "class A:\n",
    "def f():\n", "lambda: ", "int", " if 1 else ", "\"\"\"", "'", "\x00", "\xa0", "é", "\ufeff",
    "# -*- coding: latin-1 -*-\n", "# coding: nope\n", "MiB", " * ", ";", ":=", "await ",
]


def check_junk(source: bytes, from_cc: int = 10, to_cc: int = 12) -> None:
    try:
        result = rewrite(source, NAMES, from_cc, to_cc, "junk.py")
    except RewriteError:
        return
    assert isinstance(result, Rewrite)


@JUNK
@given(st.binary())
def test_junk_bytes(source: bytes) -> None:
    check_junk(source)


@JUNK
@given(st.text())
def test_junk_text(source: str) -> None:
    check_junk(source.encode("utf-8"))


@JUNK
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join))
def test_junk_python_fragments(source: str) -> None:
    # Plain binary almost never names a table, so the parser is never reached:
    # these mention the table names and Python's punctuation.
    check_junk(source.encode("utf-8"))


PATCHES = st.binary(max_size=8) | st.sampled_from([f.encode("utf-8") for f in FRAGMENTS])


@MUTATED
@given(cases(), st.data())
def test_mutated_tables(case: Case, data: st.DataObject) -> None:
    source = case.source
    start = data.draw(st.integers(0, len(source)))
    end = data.draw(st.integers(start, min(len(source), start + 8)))
    patch = data.draw(PATCHES)
    check_junk(source[:start] + patch + source[end:], case.from_cc, case.to_cc)
