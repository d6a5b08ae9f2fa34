"""The first line of every report (``render.where``): the target's kind is one typed value
(``types.TargetKind``) from the session that opened it to the line that says it."""

from __future__ import annotations

from pathlib import Path

from patchkit.render.where import where_line
from patchkit.report import Where
from patchkit.targets.session import Session
from patchkit.types import TargetKind
from support.repos import make_repo

SITE = "/v/lib/python3.11/site-packages"


def test_each_kind_of_target_has_its_first_line() -> None:
    def where(kind: TargetKind, shown: str, path: str, how: str, editable_of: str | None = None) -> str:
        return where_line(Where(shown, "SGLang", kind, path, "0.5.9", how, editable_of))

    assert where(TargetKind.CHECKOUT, "/src/sglang", "/src/sglang", "tag v0.5.9 at HEAD") == (
        "/src/sglang: SGLang 0.5.9, tag v0.5.9 at HEAD")
    assert where(TargetKind.INSTALLED, f"{SITE}/sglang", SITE, "from sglang-0.5.9.dist-info") == (
        f"{SITE}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info")
    assert where(TargetKind.EDITABLE, "/src/sglang/python/sglang", "/src/sglang", "tag v0.5.9 at HEAD", "/src/sglang") == (
        "/src/sglang/python/sglang: SGLang 0.5.9 (editable install of /src/sglang, tag v0.5.9 at HEAD)")
    # A member is its word, as --json and the lines print it.
    assert [str(k) for k in TargetKind] == ["checkout", "installed", "editable"]


def test_a_session_gives_its_target_kind_as_the_enum(tmp_path: Path) -> None:
    checkout = make_repo(tmp_path / "sglang")
    where = Where.of(Session.open(checkout))
    assert where.kind is TargetKind.CHECKOUT
    assert where_line(where) == f"{checkout}: SGLang 0.5.16, tag v0.5.16 at HEAD"

    site = tmp_path / "site-packages"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang/__init__.py").write_bytes(b"")
    (site / "sglang-0.5.9.dist-info").mkdir()
    (site / "sglang-0.5.9.dist-info/METADATA").write_bytes(b"Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n")
    where = Where.of(Session.open(site))
    assert where.kind is TargetKind.INSTALLED
    assert where_line(where) == f"{site}/sglang: SGLang 0.5.9 (installed), from sglang-0.5.9.dist-info"
