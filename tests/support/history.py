"""Write a git history of releases with ``git fast-import``: one root commit and one tag each.

Each release is a root commit of its own, so a tag's commit id depends on that release's
files, message, identity and time alone: the same releases give the same commit ids, in a
history of a few releases or of all of them.  The maintainers' mirror (``support.mirror``)
builds the test, demo and bench histories with it (test tooling, not shipped).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from patchkit.errors import MirrorError

_LOCATION = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY")


class Release(NamedTuple):
    tag: str  # e.g. "v0.5.9"
    message: str
    files: list  # of (path, bytes), sorted
    when: int  # seconds since the epoch, UTC: author and committer time


def _env(name: str, email: str) -> dict[str, str]:
    """The caller's environment without repository overrides, with a fixed identity."""
    env = {k: v for k, v in os.environ.items() if k not in _LOCATION}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email)
    env.update(GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email)
    return env


def _git(repo: Path, env: dict[str, str], *args: str) -> None:
    config = [f"user.name={env['GIT_AUTHOR_NAME']}", f"user.email={env['GIT_AUTHOR_EMAIL']}", "core.autocrlf=false"]
    cmd = ["git", *(x for c in config for x in ("-c", c)), "-C", str(repo), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"]
        raise MirrorError(f"git {args[0]} failed: {lines[-1]}")


def _quote(path: str) -> bytes:
    escaped = path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return b'"' + escaped.encode() + b'"'


def _commands(mark: int, release: Release, ident: bytes) -> bytes:
    """The fast-import commands for one release: a root commit on main and its tag."""
    message = release.message.encode()
    out = [
        b"reset refs/heads/main\n",  # no parent: the commit id depends on this release only
        b"commit refs/heads/main\nmark :%d\n" % mark,
        b"author " + ident + b" %d +0000\n" % release.when,
        b"committer " + ident + b" %d +0000\n" % release.when,
        b"data %d\n" % len(message),
        message,
        b"deleteall\n",
    ]
    for path, data in release.files:
        out += [b"M 100644 inline " + _quote(path) + b"\n", b"data %d\n" % len(data), data, b"\n"]
    out.append(f"\nreset refs/tags/{release.tag}\nfrom :{mark}\n\n".encode())
    return b"".join(out)


def write_history(dest: Path, releases: Iterable[Release], name: str, email: str) -> list[str]:
    """Create a repository at ``dest`` holding ``releases`` (oldest first), the newest checked
    out.  It is built beside ``dest`` and moved in at the end: a failure leaves nothing."""
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise MirrorError(f"{dest} exists and is not empty; remove it to rebuild the mirror")
    dest.parent.mkdir(parents=True, exist_ok=True)
    env = _env(name, email)
    ident = f"{name} <{email}>".encode()
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        _git(work, env, "init", "-q", "-b", "main")
        done = []
        with tempfile.TemporaryFile() as errors:
            proc = subprocess.Popen(["git", "-C", str(work), "fast-import", "--quiet", "--done"], stdin=subprocess.PIPE, stderr=errors, env=env)
            try:
                for mark, release in enumerate(releases, 1):
                    proc.stdin.write(_commands(mark, release, ident))
                    done.append(release.tag)
                proc.stdin.write(b"done\n")
            except BrokenPipeError:
                pass  # fast-import died; its own message is reported below
            finally:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
                proc.wait()
            if proc.returncode != 0:
                errors.seek(0)
                lines = errors.read().decode(errors="replace").strip().splitlines()
                raise MirrorError(f"git fast-import failed: {lines[0] if lines else proc.returncode}")
        _git(work, env, "reset", "-q", "--hard")
        if dest.exists():
            dest.rmdir()
        work.rename(dest)
        return done
    finally:
        shutil.rmtree(work, ignore_errors=True)


def tag_names(repo: Path) -> set[str] | None:
    """The tags of the repository at ``repo`` (its top level), or None if it is not one."""
    if not (repo / ".git").exists():
        return None
    proc = subprocess.run(["git", "--git-dir", str(repo / ".git"), "tag", "--list"], env=_env("", ""), capture_output=True, text=True)
    return set(proc.stdout.split()) if proc.returncode == 0 else None
