"""A package index on 127.0.0.1 for the tests: the simple API's page of each project given (PEP 503
HTML, or PEP 691 JSON with ``json=True`` to a client that accepts it, as PyPI answers pip), and its files
served whole or in parts (HTTP Range: ``bytes=A-B``, ``bytes=A-``, ``bytes=-N``;
http.server's own handler serves whole files only).  It counts what it sends.

    with Index({"triton": [(wheel, False)]}) as index:   # (file, yanked)
        index.url        # the address to give pip: PIP_INDEX_URL
        index.sent       # file name -> bytes of it sent
        index.requests   # (path, its Range header or None), in order
"""

from __future__ import annotations

import html
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from json import dumps
from pathlib import Path

_CHUNK = 1 << 20


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args) -> None:  # quiet: the tests assert what was asked
        pass

    def do_GET(self) -> None:
        index = self.server.index
        index.requests.append((self.path, self.headers.get("Range")))
        match = re.fullmatch(r"/simple/([a-z0-9-]+)/", self.path)
        if match and match.group(1) in index.pages:
            json_page = index.json and "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
            body = index.pages[match.group(1)][json_page]
            self._head(200, len(body), "application/vnd.pypi.simple.v1+json" if json_page else "text/html")
            self.wfile.write(body)
            return
        match = re.fullmatch(r"/files/([^/]+)", self.path)
        path = index.files.get(match.group(1)) if match else None
        if path is None:
            self._head(404, 0)
            return
        size = path.stat().st_size
        start, end = 0, size - 1
        asked = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "")) if index.ranges else None
        if asked and asked.group(1):
            start, end = int(asked.group(1)), min(size - 1, int(asked.group(2) or size - 1))
        elif asked and asked.group(2):
            start = max(0, size - int(asked.group(2)))
        if start > end:
            self._head(416, 0, extra={"Content-Range": f"bytes */{size}"})
            return
        self._head(206 if asked else 200, end - start + 1, "application/octet-stream",
                   {"Content-Range": f"bytes {start}-{end}/{size}"} if asked else {})
        with path.open("rb") as f:
            f.seek(start)
            left = end - start + 1
            try:
                while left:
                    chunk = f.read(min(left, _CHUNK))
                    # Counted before it is written: a reader that has every byte finds them counted.
                    index.sent[path.name] = index.sent.get(path.name, 0) + len(chunk)
                    self.wfile.write(chunk)
                    left -= len(chunk)
            except (BrokenPipeError, ConnectionResetError):  # the reader stopped: a whole file it did not want
                pass

    def _head(self, status: int, length: int, kind: str = "text/plain", extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes" if self.server.index.ranges else "none")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    index: Index


class Index:
    """The index: ``projects`` maps a project's name to its files (path, yanked); ``ranges=False``
    answers every request with the whole file, as a server without Range support does."""

    def __init__(self, projects: dict[str, list[tuple[Path, bool]]], ranges: bool = True, json: bool = False) -> None:
        self.ranges, self.json = ranges, json
        self.files: dict[str, Path] = {}
        self.pages: dict[str, tuple[bytes, bytes]] = {}  # project -> (its HTML page, its JSON page)
        for project, files in projects.items():
            links = []
            for path, yanked in files:
                self.files[path.name] = Path(path)
                name = html.escape(path.name)
                flag = ' data-yanked=""' if yanked else ""
                links.append(f'<a href="../../files/{name}"{flag}>{name}</a>')
            listed = [{"filename": p.name, "url": f"../../files/{urllib.parse.quote(p.name)}", "hashes": {}, "yanked": y}
                      for p, y in files]
            self.pages[project] = (("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n").encode(),
                                   dumps({"meta": {"api-version": "1.0"}, "name": project, "files": listed}).encode())
        self.sent: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.index = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/simple/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Index:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
