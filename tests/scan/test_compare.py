"""``patchkit scan --repo R --tag A --tag B``: two releases read from git objects, compared.

The repositories are built here (``support.repos.make_repo``) from snippets written for these
tests.  The last tests run over real releases: SGLang 0.5.9 and 0.5.23 from PyPI, or the
full mirror ($PATCHKIT_REAL_MIRROR).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from patchkit.commands.scan import covered_by, scan
from patchkit.errors import BAD_INPUT, OK, PROBLEMS, BadInput
from patchkit.render import document, text
from patchkit.rewrite.capability import literal, pair
from patchkit.scan.classify import UNAWARE, classify, literal_major, words
from patchkit.scan.compare import releases
from support.cli import invoke
from support.repos import make_repo

P = "python/pkg"
RELEASES = {
    "v1.0": {
        f"{P}/attn.py": b"def pick(major):\n    if major == 9:\n        return 1\n    elif major == 10:\n        return 2\n",
        f"{P}/moe.py": b"ok = major in (9, 10)\n",
        f"{P}/gemm.py": b"def g(cap):\n    return cap[0] == 10\n",
        f"{P}/same.py": b"x = 1\n\n\nok = major != 10\n",
    },
    "v2.0": {
        # the chain learned SM120: became aware, at a new line
        f"{P}/attn.py": b"import os\n\n\ndef pick(major):\n    if major == 9:\n        return 1\n"
        b"    elif major == 10:\n        return 2\n    elif major == 12:\n        return 3\n",
        f"{P}/moe.py": b"ok = major in (9, 10, 12)\n",  # no gate any more: disappeared
        f"{P}/gemm.py": b"def g(cap):\n    return cap[0] == 10\n\n\nnew = cap[0] >= 12\n",  # one aware gate appeared
        f"{P}/same.py": b"x = 1\n\n\nok = major != 10\n",
        f"{P}/new.py": b"ok = major == 10\n",  # an unaware gate appeared
        ".github/tool.py": b"ok = major == 10\n",  # hidden folders are not scanned
    },
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "proj", RELEASES)


def test_text(repo: Path) -> None:
    report = scan(None, 12, repo=repo, tags=("v1.0", "v2.0"))
    assert report.exit_code == PROBLEMS  # an unaware gate appeared
    assert text(report, True) == [
        "appeared in v2.0: 3 gates",
        "  unaware: 1 gate in 1 file",
        "    python/pkg/new.py",
        "      1: equality: major == 10",
        "  aware: 2 gates in 2 files",
        "    python/pkg/attn.py",
        "      9: equality: major == 12",
        "    python/pkg/gemm.py",
        "      5: comparison: cap[0] >= 12",
        "disappeared after v1.0: 1 gate",
        "  unaware: 1 gate in 1 file",
        "    python/pkg/moe.py",
        "      1: membership: major in (9, 10)",
        "became aware: 1 gate in 1 file",
        "  python/pkg/attn.py",
        "    4 -> 7: equality: major == 10 (was unaware)",
        "v1.0 -> v2.0: 3 appeared (1 unaware), 1 disappeared, 1 became aware (were unaware), 2 unchanged;"
        " v1.0: 4 gates (4 unaware, 0 aware, 0 covered); v2.0: 6 gates (3 unaware, 3 aware, 0 covered)",
    ]


def test_text_piped(repo: Path) -> None:
    """Piped, each gate is one line that names the release, as git grep does: tag:path:line: what."""
    lines = invoke("scan", "--repo", str(repo), "--tag", "v1.0", "--tag", "v2.0").stdout.decode().splitlines()
    assert lines == [
        "v2.0:python/pkg/new.py:1: appeared: unaware: equality: major == 10",
        "v2.0:python/pkg/attn.py:9: appeared: aware: equality: major == 12",
        "v2.0:python/pkg/gemm.py:5: appeared: aware: comparison: cap[0] >= 12",
        "v1.0:python/pkg/moe.py:1: disappeared: unaware: membership: major in (9, 10)",
        "v2.0:python/pkg/attn.py:7: became aware: equality: major == 10 (was unaware)",
        "v1.0 -> v2.0: 3 appeared (1 unaware), 1 disappeared, 1 became aware (were unaware), 2 unchanged;"
        " v1.0: 4 gates (4 unaware, 0 aware, 0 covered); v2.0: 6 gates (3 unaware, 3 aware, 0 covered)",
    ]


def test_unaware_only(repo: Path) -> None:
    report = scan(None, 12, repo=repo, tags=("v1.0", "v2.0"), unaware_only=True)
    assert report.exit_code == PROBLEMS
    assert text(report, True)[:4] == [
        "appeared in v2.0: 1 gate",
        "  unaware: 1 gate in 1 file",
        "    python/pkg/new.py",
        "      1: equality: major == 10",
    ]
    assert len(text(report, True)) == 5  # and the summary


def test_nothing_new_unaware_is_exit_0(repo: Path) -> None:
    report = scan(None, 12, repo=repo, tags=("v2.0", "v2.0"))
    assert report.exit_code == OK
    assert text(report, True) == [
        "v2.0 -> v2.0: 0 appeared (0 unaware), 0 disappeared, 6 unchanged;"
        " v2.0: 6 gates (3 unaware, 3 aware, 0 covered); v2.0: 6 gates (3 unaware, 3 aware, 0 covered)"
    ]
    # backwards: what v1.0 lacks of v2.0 (the gate that became aware is unaware again)
    assert scan(None, 12, repo=repo, tags=("v2.0", "v1.0")).exit_code == PROBLEMS


def test_json(repo: Path) -> None:
    data = document(scan(None, 12, repo=repo, tags=("v1.0", "v2.0"), fmt="json"))
    json.dumps(data)
    assert data["before"] == {
        "tag": "v1.0",
        "gates": 4,
        "classes": {"unaware": 4, "aware": 0, "covered": 0},
        "files_seen": 4,
        "files_parsed": 4,
    }
    assert data["after"]["classes"] == {"unaware": 3, "aware": 3, "covered": 0}
    assert data["after"]["files_seen"] == 5
    assert data["counts"] == {"appeared": 3, "appeared_unaware": 1, "disappeared": 1, "changed": 1, "unchanged": 2}
    assert [(f["path"], f["line"], f["class"]) for f in data["appeared"]] == [
        ("python/pkg/attn.py", 9, "aware"),
        ("python/pkg/gemm.py", 5, "aware"),
        ("python/pkg/new.py", 1, "unaware"),
    ]
    assert [(f["path"], f["class"]) for f in data["disappeared"]] == [("python/pkg/moe.py", "unaware")]
    (changed,) = data["changed"]
    assert (changed["before"]["line"], changed["before"]["class"]) == (4, "unaware")
    assert (changed["after"]["line"], changed["after"]["class"]) == (7, "aware")


def test_markdown(repo: Path) -> None:
    lines = text(scan(None, 12, repo=repo, tags=("v1.0", "v2.0"), fmt="markdown"), True)
    assert [line for line in lines if line.startswith("###")] == [
        "### appeared in v2.0: 3 gates",
        "### disappeared after v1.0: 1 gate",
        "### became aware: 1 gate",
    ]
    assert "| python/pkg/attn.py | 7 | equality | `major == 10` | 10 |  | unaware -> aware |" in lines


def test_same_code_twice_in_a_file_pairs_in_order(tmp_path: Path) -> None:
    gate = b"ok = arch in (10, 11)\n"
    repo = make_repo(tmp_path / "r", {"v1": {"m.py": gate * 2}, "v2": {"m.py": b"\n" + gate * 3}})
    data = document(scan(None, 12, repo=repo, tags=("v1", "v2"), fmt="json"))
    assert data["counts"]["unchanged"] == 2
    assert [f["line"] for f in data["appeared"]] == [4]


def test_never_checks_out(repo: Path) -> None:
    before = sorted(p.name for p in repo.iterdir())
    scan(None, 12, repo=repo, tags=("v1.0", "v2.0"))
    assert sorted(p.name for p in repo.iterdir()) == before


# --- bad input: one line, exit 2 --------------------------------------------------------


@pytest.mark.parametrize(
    "args, error",
    [
        (["--tag", "v1.0", "--tag", "v2.0"], "patchkit: --tag needs --repo\n"),
        (["--repo", "{repo}"], "patchkit: --repo needs exactly two --tag (the releases to compare), not 0\n"),
        (["--repo", "{repo}", "--tag", "v1.0"], "patchkit: --repo needs exactly two --tag (the releases to compare), not 1\n"),
        (
            ["--repo", "{repo}", "--tag", "v1.0", "--tag", "v2.0", "--tag", "v2.0"],
            "patchkit: --repo needs exactly two --tag (the releases to compare), not 3\n",
        ),
        (["{repo}", "--repo", "{repo}", "--tag", "v1.0", "--tag", "v2.0"], "patchkit: give PATH or --repo with two --tag, not both\n"),
        (["--repo", "{repo}", "--tag", "v1.0", "--tag", "v9"], "patchkit: {repo}: no tag 'v9' in this repository\n"),
        (["--repo", "{repo}/python", "--tag", "v1.0", "--tag", "v2.0"], "patchkit: {repo}/python: not a git repository\n"),
        (["--repo", "{repo}/gone", "--tag", "v1.0", "--tag", "v2.0"], "patchkit: {repo}/gone: no such repository (set --repo or $PATCHKIT_SGLANG_REPO)\n"),
    ],
)
def test_bad_input(repo: Path, args: list[str], error: str) -> None:
    done = invoke("scan", *(a.format(repo=repo) for a in args))
    assert done.returncode == BAD_INPUT
    assert done.stdout == b""
    assert done.stderr.decode() == error.format(repo=repo)


def test_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="not a git repository"):
        scan(None, 12, repo=tmp_path, tags=("v1", "v2"))


def test_cli_json_exit_code(repo: Path) -> None:
    done = invoke("scan", "--repo", str(repo), "--tag", "v1.0", "--tag", "v2.0", "--json", "--unaware-only")
    assert done.returncode == PROBLEMS
    data = json.loads(done.stdout)
    assert [f["path"] for f in data["appeared"]] == ["python/pkg/new.py"]
    assert data["disappeared"] == [] and data["changed"] == []


# --- real releases ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mirror(prebuilt) -> Path:
    """The full SGLang mirror ($PATCHKIT_REAL_MIRROR), or one of 0.5.9 and 0.5.23 built from PyPI."""
    return prebuilt.mirror("sglang")


def _names_12(f) -> bool:
    lits = [literal(tuple(v) if isinstance(v, list) else v) for v in f.values]
    return (
        any(lit is not None and literal_major(lit) == 12 for lit in lits)
        or re.search(r"(?<![0-9.])12[01]?(?![0-9])", f.snippet) is not None  # 12, 120, 121, (12, 0), "12.0"
        or words(12).search(f.snippet + f.path) is not None
    )


def test_real_unaware_gates_do_not_name_12(mirror: Path) -> None:
    from patchkit.git.objects import GitSource

    source = GitSource(mirror)
    target = pair(10, 12)[1]
    (rel,) = releases(source, ["v0.5.23"], 10, 12, (), lambda f: classify(f, target, covered_by(f)), [])
    unaware = [f for f, c in zip(rel.findings, rel.classes, strict=True) if c == UNAWARE]
    assert unaware and len(unaware) < len(rel.findings)
    assert [f for f in unaware if _names_12(f)] == []
    # ... and every finding that names 12 is sorted out of the unaware ones
    assert all(c != UNAWARE for f, c in zip(rel.findings, rel.classes, strict=True) if _names_12(f))


def test_real_compare(mirror: Path) -> None:
    report = scan(None, 12, repo=mirror, tags=("v0.5.9", "v0.5.23"), fmt="json")
    data = document(report)
    assert data["before"]["gates"] > 0 and data["after"]["gates"] > data["before"]["gates"]
    assert report.exit_code == (PROBLEMS if data["counts"]["appeared_unaware"] else OK)
    unaware = [f for f in data["appeared"] if f["class"] == UNAWARE]
    assert len(unaware) == data["counts"]["appeared_unaware"]
