"""Fetch a source archive from the package index that pip is configured with.

`pip download --no-binary :all:` prepares metadata by building the archive, and vLLM's
archive cannot be built without torch.  So the archive is fetched over the index's
simple API (PEP 503 HTML or PEP 691 JSON), from the addresses pip uses: PIP_INDEX_URL and
PIP_EXTRA_INDEX_URL, else pip's configuration (`pip config list`), else pip's own default,
taken from pip.  pip's certificate bundle (PIP_CERT, `cert`) and proxy (PIP_PROXY,
`proxy`) apply too.  No index address is written here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from typing import NamedTuple

from patchkit.errors import MirrorError

_ACCEPT = "application/vnd.pypi.simple.v1+json, text/html;q=0.1"
_SCOPES = ("download", "global")  # pip's sections, the most specific first


class PipSettings(NamedTuple):
    indexes: list  # index URL first, then the extra ones
    cert: str | None
    proxy: str | None


def _pip(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise MirrorError(f"pip {args[0]} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return done.stdout


def pip_settings() -> PipSettings:
    """Where pip would look, with pip's own precedence: environment, configuration, default."""
    config: dict[str, str] = {}
    for line in _pip("config", "list").splitlines():
        match = re.fullmatch(r"([\w:.-]+)\.([\w-]+)='(.*)'", line.strip())
        if match and match.group(1) in _SCOPES:
            config.setdefault(match.group(2), "")
            if match.group(1) == "download" or not config[match.group(2)]:
                config[match.group(2)] = match.group(3)

    def setting(name: str) -> str | None:
        return os.environ.get(f"PIP_{name.upper().replace('-', '_')}") or config.get(name) or None

    index = setting("index-url")
    if index is None:
        code = "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"
        index = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    extra = (setting("extra-index-url") or "").split()
    return PipSettings([index, *extra], setting("cert"), setting("proxy"))


class Listed(NamedTuple):
    """A file that an index's page of a project lists."""

    name: str
    url: str  # absolute, with its #sha256= fragment when the index gives one
    yanked: bool  # PEP 592: pip takes it only when pinned to its exact version


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, bool]] = []

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        href = attrs.get("href")
        if tag == "a" and href:
            self.links.append((href, "data-yanked" in attrs))


def _opener(settings: PipSettings) -> urllib.request.OpenerDirector:
    handlers: list = [urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=settings.cert))]
    if settings.proxy:
        handlers.append(urllib.request.ProxyHandler({"http": settings.proxy, "https": settings.proxy}))
    return urllib.request.build_opener(*handlers)


def listing(opener, index: str, project: str) -> list[Listed]:
    """Every file the index lists for ``project`` (the simple API: PEP 691 JSON or PEP 503 HTML).  A
    ``file://`` index is a folder of pages: a project's page is its folder's ``index.html``, as pip
    reads it.  A project the index does not have raises FileNotFoundError (HTTP 404 too)."""
    page = f"{index.rstrip('/')}/{re.sub(r'[-_.]+', '-', project).lower()}/"
    if urllib.parse.urlsplit(page).scheme == "file":
        page += "index.html"
    try:
        with opener.open(urllib.request.Request(page, headers={"Accept": _ACCEPT}), timeout=120) as response:
            body, kind = response.read(), response.headers.get("Content-Type", "")
            page = response.geturl()
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise FileNotFoundError(f"{page}: 404") from None
        raise
    except urllib.error.URLError as exc:
        raise (exc.reason if isinstance(exc.reason, FileNotFoundError) else exc) from None
    if "json" in kind:
        doc = json.loads(body)
        return [Listed(f["filename"], urllib.parse.urljoin(page, f["url"])
                       + (f"#sha256={f['hashes']['sha256']}" if "sha256" in f.get("hashes", {}) else ""), bool(f.get("yanked")))
                for f in doc.get("files", [])]
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    return [Listed(urllib.parse.unquote(urllib.parse.urlsplit(h).path.rsplit("/", 1)[-1]), urllib.parse.urljoin(page, h), yanked)
            for h, yanked in parser.links]


def _files(opener, index: str, project: str) -> dict[str, str]:
    """filename -> absolute URL (with its #sha256= fragment) of every file the index lists."""
    return {f.name: f.url for f in listing(opener, index, project)}


def fetch_sdist(project: str, version: str, folder: Path) -> Path:
    """Download ``project``'s ``version`` source archive into ``folder`` (checked against the
    index's sha256 when it gives one); the first index of pip's that has it wins."""
    settings = pip_settings()
    opener = _opener(settings)
    wanted = {f"{name}-{version}.tar.gz" for name in (project, project.replace("-", "_"))}
    problems = []
    for index in settings.indexes:
        try:
            files = _files(opener, index, project)
        except (OSError, ValueError) as exc:
            problems.append(f"{index}: {exc}")
            continue
        name = next((n for n in files if n in wanted), None)
        if name is None:
            continue
        url, _, fragment = files[name].partition("#")
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{name}.part"
        try:
            with opener.open(url, timeout=600) as response:
                data = response.read()
        except OSError as exc:
            raise MirrorError(f"cannot download {name} from {index}: {exc}") from None
        expected = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
        if expected and hashlib.sha256(data).hexdigest() != expected:
            raise MirrorError(f"{name} from {index}: sha256 differs from the index's")
        tmp.write_bytes(data)
        os.replace(tmp, folder / name)
        return folder / name
    where = "; ".join(problems) or ", ".join(settings.indexes)
    raise MirrorError(f"{project} {version}: no source archive on the package index ({where})")
