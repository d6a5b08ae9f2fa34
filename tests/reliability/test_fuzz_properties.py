"""Hypothesis properties for reading patch files and for the table evaluator, and the
atheris harness of fuzz/fuzz_patchread.py run briefly.

tests/patch/test_patchread.py feeds parse random bytes (which almost never get past the first
line) and round-trips generated patches; tests/test_rewriter_properties.py covers the
rewriter.  Here:

- real patches mutated line by line and byte by byte: parse gives sections or a
  PatchError; what parses, applies and reverses consistently (or fails cleanly);
- any patch bytes through ``apply --patches`` (in process): the exact post-image or
  a clean refusal with nothing written;
- the evaluator verify uses, on junk sources: tables or a clean RewriteError;
- the rewriter on sources with a latin-1 coding cookie keeps every byte.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from test_rewriter_properties import FRAGMENTS, NAMES, cases

from patchkit.digest import blob_id
from patchkit.errors import PatchError, RewriteError
from patchkit.fixes.registry import SGLANG
from patchkit.patch.read import apply, parse, reverse
from patchkit.patch.write import FileChange, format_patch
from patchkit.rewrite.dict_key import rewrite
from patchkit.rewrite.evaluate import tables as evaluate_tables
from support.crash import COMM, PATCH_NAME, UTILS
from support.repos import UTILS_NEW, comm

# Examples per property (docs/RELIABILITY.md is checked against these).
EXAMPLES = {
    "mutated patch: parse, apply, reverse": 300,
    "patch file through apply (in process)": 100,
    "evaluator on junk sources": 200,
    "rewriter with a latin-1 coding cookie": 50,
}


def _settings(name: str) -> settings:
    return settings(max_examples=EXAMPLES[name], deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- a real patch: the two table files of the fixture release, as generate writes it ------------

PRE = {UTILS: UTILS_NEW, COMM: comm()}
POST = {path: rewrite(data, SGLANG.tables, 10, 12, path).source for path, data in PRE.items()}
PATCH = format_patch(
    author="patchkit <patchkit@users.noreply.invalid>",
    date="Sat, 03 Jan 2026 12:00:00 +0000",
    message="Add SM120 to the torch symm-mem all-reduce tables\n\nBody.\n",
    changes=[FileChange(p, "100644", PRE[p], POST[p], blob_id(PRE[p]), blob_id(POST[p])) for p in sorted(PRE)],
    signature="patchkit 0.1.0",
)
PATCH_LINES = PATCH.splitlines(keepends=True)
LINE_FRAGMENTS = [
    b"diff --git a/x.py b/x.py\n", f"diff --git a/{COMM} b/{COMM}\n".encode(), b"@@ -1,3 +1,4 @@\n", b"@@ -0,0 +1 @@\n",
    b"--- a/x.py\n", b"+++ b/x.py\n", b"--- /dev/null\n", b"+++ /dev/null\n", b"\\ No newline at end of file\n",
    b"new file mode 100644\n", b"deleted file mode 100644\n", b"rename from x\n", b"GIT binary patch\n",
    b"Binary files a/x and b/x differ\n", b"index 0000000..1111111 100644\n", b"+\n", b"-\n", b" \n", b"\n",
    b"+        12: [6, 8],\n", b"         10: [6, 8],\n", b"\r\n", b"\x00\n", b"\xff\xfe\n", b"-- \n",
]


@st.composite
def mutated_patches(draw) -> bytes:
    lines = list(PATCH_LINES)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "bytes", "truncate"]))
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        if kind == "delete" and lines:
            del lines[i : i + draw(st.integers(1, 3))]
        elif kind == "duplicate" and lines:
            lines.insert(i, lines[i])
        elif kind == "swap" and len(lines) > 1:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "insert":
            lines.insert(i, draw(st.sampled_from(LINE_FRAGMENTS) | st.binary(max_size=12)))
        elif kind == "bytes" and lines:
            line = lines[i]
            at = draw(st.integers(0, len(line)))
            lines[i] = line[:at] + draw(st.binary(max_size=4)) + line[at + draw(st.integers(0, 3)) :]
        elif kind == "truncate":
            data = b"".join(lines)
            return data[: draw(st.integers(0, len(data)))]
    return b"".join(lines)


def _check_sections(data: bytes) -> list:
    """parse: sections or a PatchError, nothing else; returns the sections ([] on PatchError)."""
    try:
        sections = parse(data, "m.patch")
    except PatchError as exc:
        assert exc.exit_code == 2 and str(exc).startswith("m.patch: ")
        return []
    assert sections
    for section in sections:
        assert isinstance(section.path, str) and section.path and section.hunks
        for hunk in section.hunks:
            assert all(isinstance(line, bytes) for line in hunk.old_lines + hunk.new_lines)
    return sections


@_settings("mutated patch: parse, apply, reverse")
@given(mutated_patches())
def test_mutated_patches_parse_apply_and_reverse_cleanly(data: bytes) -> None:
    for section in _check_sections(data):
        pre = PRE.get(section.path)
        if pre is None:
            continue
        try:
            post = apply(pre, section, "m.patch")
        except PatchError:
            continue
        assert isinstance(post, bytes)
        whole = all(line.endswith(b"\n") for h in section.hunks for line in h.old_lines + h.new_lines)
        if whole:
            assert reverse(post, section, "m.patch") == pre


# -- any patch file through apply, in process ------------------------------------------------------

RUNNER = CliRunner()


def _in_process(*args: str):
    from patchkit.cli import cli

    result = RUNNER.invoke(cli, list(args), catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        raise AssertionError("".join(traceback.format_exception(*result.exc_info)))
    return result


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("inproc") / "co"
    for rel, data in {"python/sglang/version.py": b'__version__ = "0.5.5"\n', **PRE}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _manifest(patch: bytes) -> dict:
    return {
        "version": "0.5.5", "from_cc": 10, "to_cc": 12, "patch": PATCH_NAME,
        "patch_sha256": hashlib.sha256(patch).hexdigest(),
        "files": [
            {"path": p, "pre_sha256": hashlib.sha256(PRE[p]).hexdigest(), "post_sha256": hashlib.sha256(POST[p]).hexdigest(),
             "tables": []}
            for p in sorted(PRE)
        ],
    }


@_settings("patch file through apply (in process)")
@given(mutated_patches() | st.binary(max_size=300) | st.just(PATCH))
def test_any_patch_file_gives_the_post_image_or_a_clean_refusal(template: Path, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(shutil.copytree(template, Path(tmp) / "co"))
        folder = Path(tmp) / "patches" / "0.5.5"
        folder.mkdir(parents=True)
        (folder / PATCH_NAME).write_bytes(data)
        (folder / "manifest.json").write_text(json.dumps(_manifest(data)))
        result = _in_process("apply", str(repo), "--patches", str(folder.parent), "--no-generate")
        now = {p: (repo / p).read_bytes() for p in PRE}
        if result.exit_code == 0:
            assert now == POST, result.output
        else:
            assert result.exit_code in (2, 3), (result.exit_code, result.output)
            err = result.stderr
            assert err.startswith("patchkit: ") and err.count("\n") == 1 and "\r" not in err, err
            assert now == PRE
            assert not (repo / ".patchkit").exists()


# -- the evaluator verify uses, and the rewriter, on awkward sources -------------------------------


def _evaluate_cleanly(source: bytes) -> None:
    try:
        found = evaluate_tables(source, NAMES, "junk.py")
    except RewriteError:
        return
    assert isinstance(found, dict)


JUNK_SOURCES = (
    st.binary(max_size=200)
    | st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(lambda parts: "".join(parts).encode("utf-8"))
    | st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(lambda parts: "".join(parts).encode("latin-1", "replace"))
)


@pytest.mark.filterwarnings("ignore::SyntaxWarning")  # junk such as "1a" makes Python's compiler warn; that is not a finding
def test_evaluator_gives_tables_or_a_clean_error() -> None:
    """verify evaluates every file whose bytes are not the recorded post-image: any source
    must give the tables or a RewriteError (one line, exit 3), never another exception.

    Failures are collected (the shortest input per exception type) rather than raised
    inside hypothesis, so that a known bug shows every kind of failure at once and leaves
    no example database or patch files behind."""
    failures: dict[str, tuple[bytes, str]] = {}

    @_settings("evaluator on junk sources")
    @given(JUNK_SOURCES)
    def run(source: bytes) -> None:
        try:
            _evaluate_cleanly(source)
        except Exception as exc:  # noqa: BLE001 - any other exception is the finding
            kind = type(exc).__name__
            if kind not in failures or len(source) < len(failures[kind][0]):
                failures[kind] = (source, str(exc)[:160])

    run()
    assert not failures, "evaluate.tables raised, instead of RewriteError:\n" + "\n".join(
        f"  {kind} on {source!r}: {message}" for kind, (source, message) in sorted(failures.items())
    )


COOKIE = "# -*- coding: latin-1 -*-\n"


@_settings("rewriter with a latin-1 coding cookie")
@given(cases())
def test_latin1_cookie_keeps_every_byte(case) -> None:
    """The same source, encoded as latin-1 under a coding cookie: the rewriter adds the
    same lines, and every other byte (the non-UTF-8 ones included) stays as it was."""
    text = COOKIE + case.text
    try:
        latin1 = text.replace("\n", case.newline).encode("latin-1")
    except UnicodeEncodeError:
        text = COOKIE + case.text.encode("latin-1", "replace").decode("latin-1")
        latin1 = text.replace("\n", case.newline).encode("latin-1")
    utf8 = text.replace("\n", case.newline).encode("utf-8")
    got = rewrite(latin1, NAMES, case.from_cc, case.to_cc, "gen.py")
    want = rewrite(utf8, NAMES, case.from_cc, case.to_cc, "gen.py")
    assert got.source == want.source.decode("utf-8").encode("latin-1")
    assert [(t.name, t.status) for t in got.tables] == [(t.name, t.status) for t in want.tables]
