"""Which release tags point at HEAD, read from the git directory itself.

No GitPython and, in the common cases, no ``git`` process: apply, verify and
status start fast.  Loose and packed refs are read as files; an annotated tag is
peeled through ``packed-refs`` or its loose object.  Anything else (a tag object
that is only in a pack, a SHA-256 or reftable repository) falls back to plain ``git``; a
SHA-256 or reftable repository whose tags git cannot list either (a git older than its
format) is one line saying so, never a checkout with no tags.
"""

from __future__ import annotations

import os
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.versions import is_release_tag, version_key


def git_dir(root: Path) -> Path | None:
    """The git directory of a checkout at ``root`` (``.git``, or where a ``.git`` file points)."""
    dot = root / ".git"
    if dot.is_dir() and not dot.is_symlink():
        return dot
    if dot.is_file():
        text = dot.read_text(errors="replace").strip()
        if text.startswith("gitdir:"):
            target = Path(text[len("gitdir:") :].strip())
            target = target if target.is_absolute() else root / target
            return target if target.is_dir() else None
    return None


def _common_dir(gdir: Path) -> Path:
    """Where refs live: a linked worktree's git dir names its common dir."""
    try:
        common = (gdir / "commondir").read_text().strip()
    except OSError:
        return gdir
    path = Path(common)
    return path if path.is_absolute() else (gdir / path).resolve()


def _resolve(gdir: Path, common: Path, ref: str, packed: dict[str, str], depth: int = 0) -> str | None:
    for base in (gdir, common):
        try:
            text = (base / ref).read_text().strip()
        except OSError:
            continue
        if text.startswith("ref: ") and depth < 5:
            return _resolve(gdir, common, text[5:], packed, depth + 1)
        return text
    return packed.get(ref)


def _packed(common: Path) -> tuple[dict[str, str], dict[str, str], bool]:
    """(ref -> id, ref -> peeled commit id, whether every tag is peeled) from packed-refs.

    With the "peeled" or "fully-peeled" trait in the header, git wrote a ``^`` line
    for every annotated tag: a packed tag without one points at its commit itself.
    """
    refs: dict[str, str] = {}
    peeled: dict[str, str] = {}
    try:
        lines = (common / "packed-refs").read_text().splitlines()
    except OSError:
        return refs, peeled, False
    traits = lines[0].split() if lines and lines[0].startswith("# pack-refs with:") else []
    all_peeled = "peeled" in traits or "fully-peeled" in traits
    last = None
    for line in lines:
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith("^") and last:
            peeled[last] = line[1:].strip()
            continue
        sha, _, name = line.partition(" ")
        refs[name.strip()] = sha
        last = name.strip()
    return refs, peeled, all_peeled


def _peel_loose(common: Path, sha: str) -> str | None:
    """The object an annotated tag points to, if the tag object is loose; else None."""
    import zlib

    try:
        raw = zlib.decompress((common / "objects" / sha[:2] / sha[2:]).read_bytes())
    except (OSError, zlib.error):
        return None
    header, _, body = raw.partition(b"\0")
    if header.startswith(b"commit "):
        return sha
    if header.startswith(b"tag ") and body.startswith(b"object "):
        return body[7:].split(b"\n", 1)[0].decode("ascii", "replace")  # 40 hex digits, or 64 for SHA-256
    return None


def repo_format(common: Path) -> tuple[str, str]:
    """(object format, ref storage) of a repository from its config: ("sha1", "files") unless
    ``extensions.objectFormat`` / ``extensions.refStorage`` say otherwise (a SHA-256 or a
    reftable repository, where object ids are 32 bytes or refs are no files to read)."""
    fmt, storage, section = "sha1", "files", ""
    try:
        with open(common / "config", "rb") as f:
            text = f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return fmt, storage
    for line in text.splitlines():
        line = line.split("#", 1)[0].split(";", 1)[0].strip()
        if line.startswith("["):
            section = line.strip("[]").strip().lower()
        elif section == "extensions" and "=" in line:
            key, _, value = (s.strip() for s in line.partition("="))
            if key.lower() == "objectformat":
                fmt = value.lower()
            elif key.lower() == "refstorage":
                storage = value.lower()
    return fmt, storage


def release_tags_at_head(root: Path) -> list[str]:
    """The ``v*`` release tags pointing at HEAD of the checkout at ``root``, newest first.
    A SHA-256 or reftable repository is asked with ``git`` (its refs or ids are not what the
    file reading below knows)."""
    gdir = git_dir(root)
    if gdir is None:
        return []
    common = _common_dir(gdir)
    fmt = repo_format(common)
    if fmt != ("sha1", "files"):
        return _tags_at_head_with_git(root, fmt)
    packed, peeled, all_peeled = _packed(common)
    head = _resolve(gdir, common, "HEAD", packed)
    if not head:
        return []
    tags: dict[str, str] = {name[10:]: sha for name, sha in packed.items() if name.startswith("refs/tags/")}
    from_pack = set(tags) if all_peeled else set()
    tag_dir = common / "refs" / "tags"
    if tag_dir.is_dir():
        for dirpath, _, files in os.walk(tag_dir):
            for name in files:
                path = Path(dirpath) / name
                rel = path.relative_to(tag_dir).as_posix()
                tags[rel] = path.read_text().strip()
                from_pack.discard(rel)  # a loose ref overrides the packed one
    found = []
    for tag, sha in tags.items():
        if not is_release_tag(tag):
            continue
        if sha == head or peeled.get(f"refs/tags/{tag}") == head:
            found.append(tag)
            continue
        if f"refs/tags/{tag}" in peeled or tag in from_pack:
            continue  # peeled to another commit, or a packed tag that is not annotated
        target = _peel_loose(common, sha)
        if target is None:  # a tag object only in a pack: ask git
            return _tags_at_head_with_git(root)
        if target == head:
            found.append(tag)
    return _newest_first(found)


def _tags_at_head_with_git(root: Path, fmt: tuple[str, str] | None = None) -> list[str]:
    """The release tags at HEAD as ``git tag --points-at`` lists them; [] when git cannot say,
    unless the repository's format ``fmt`` is one the file reading does not know: BadInput then."""
    import subprocess

    done: subprocess.CompletedProcess[bytes] | None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "-c", "core.fsmonitor=false", "tag", "--points-at", "HEAD", "--list", "v*"],
            capture_output=True,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        done, why = None, f"{exc.strerror or exc}" if isinstance(exc, OSError) else "no answer within 30 s"
    else:
        why = " ".join(done.stderr.decode("utf-8", "replace").split())[:200] or f"exit {done.returncode}"
    if done is None or done.returncode != 0:
        if fmt is None:
            return []
        raise BadInput(str(root), f"a repository with object format {fmt[0]} and ref storage {fmt[1]}, whose tags git "
                                  f"cannot list ({why}): patchkit cannot tell its release; give --version")
    tags = [t for t in done.stdout.decode(errors="replace").split() if is_release_tag(t)]
    return _newest_first(tags)


def _newest_first(tags: list[str]) -> list[str]:
    """The release tags, the newest first; one tag (a checkout at a release) is not ordered, so
    that the commands' start does not import ``packaging`` for it."""
    return sorted(tags, key=version_key, reverse=True) if len(tags) > 1 else tags
