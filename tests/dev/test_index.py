"""support.index: source archives come from the index pip is configured with.

A package index is served on localhost by the test (PEP 503 HTML and PEP 691 JSON);
pip's configuration points at it through PIP_INDEX_URL or a pip config file.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest

from patchkit.errors import MirrorError
from support.index import fetch_sdist, pip_settings

ARCHIVE = b"a source archive, as far as this test is concerned\n"


class Index(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    listed_sha: str = ""
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        Index.seen.append(self.path)
        if self.path == "/simple/fake-pkg/":
            if "json" in self.headers.get("Accept", "") and "json" in Index.files:
                body = json.dumps({"files": [{"filename": "fake_pkg-1.0.tar.gz", "url": "../../files/fake_pkg-1.0.tar.gz",
                                              "hashes": {"sha256": Index.listed_sha}}]}).encode()
                kind = "application/vnd.pypi.simple.v1+json"
            else:
                body = f'<a href="/files/fake_pkg-1.0.tar.gz#sha256={Index.listed_sha}">fake_pkg-1.0.tar.gz</a>'.encode()
                kind = "text/html"
        elif self.path == "/files/fake_pkg-1.0.tar.gz":
            body, kind = ARCHIVE, "application/gzip"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Index.seen, Index.files, Index.listed_sha = [], {}, hashlib.sha256(ARCHIVE).hexdigest()
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "pip.conf"))  # only the test's configuration
    monkeypatch.setenv("HTTP_PROXY", "")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()


@pytest.mark.parametrize("style", ["html", "json"])
def test_archive_comes_from_pip_index_url(index: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, style: str) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", index)
    if style == "json":
        Index.files = {"json": b""}
    got = fetch_sdist("fake-pkg", "1.0", tmp_path / "cache")
    assert got == tmp_path / "cache" / "fake_pkg-1.0.tar.gz" and got.read_bytes() == ARCHIVE
    assert Index.seen == ["/simple/fake-pkg/", "/files/fake_pkg-1.0.tar.gz"]
    assert list((tmp_path / "cache").iterdir()) == [got]  # no partial file left


def test_index_from_a_pip_config_file(index: str, tmp_path: Path) -> None:
    (tmp_path / "pip.conf").write_text(f"[global]\nindex-url = {index}\n")
    assert pip_settings().indexes == [index]
    assert fetch_sdist("fake-pkg", "1.0", tmp_path / "cache").read_bytes() == ARCHIVE


def test_an_archive_that_differs_from_the_listed_sha256_is_refused(index: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", index)
    Index.listed_sha = "0" * 64
    with pytest.raises(MirrorError, match="fake_pkg-1.0.tar.gz from .*: sha256 differs from the index's"):
        fetch_sdist("fake-pkg", "1.0", tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []


def test_a_version_the_index_does_not_have(index: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", index)
    with pytest.raises(MirrorError, match=r"fake-pkg 9\.9: no source archive on the package index"):
        fetch_sdist("fake-pkg", "9.9", tmp_path / "cache")
