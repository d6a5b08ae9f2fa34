"""``patchkit generate``: one version-pinned patch and manifest per release tag.

Reads each release from git objects, rewrites the candidate files, and renders
``<out>/<version>/0001-*.patch`` and ``<out>/<version>/manifest.json``.
Deterministic: the same repository and patchkit give byte-identical output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from patchkit import __version__
from patchkit.target.atomic import write_atomic
from patchkit.digest import blob_id, sha256
from patchkit.errors import OK, PROBLEMS, REFUSED, PatchkitError
from patchkit.patch import message
from patchkit.patch.manifest import FileEntry, Manifest
from patchkit.patch.write import FileChange, format_patch, patch_filename
from patchkit.fixes.registry import Project
from patchkit.rewrite.dict_key import Key, Rewrite, rewrite
from patchkit.report import Report
from patchkit.text import plural
from patchkit.types import ALREADY_UPSTREAM, ERROR, NOTHING_TO_PATCH, PATCHED
from patchkit.git.objects import GitSource, SourceFile
from patchkit.versions import tag_to_version

PATCH_AUTHOR = "patchkit <patchkit@users.noreply.invalid>"
MANIFEST = "manifest.json"

# What a release needs, in the words the per-tag line and --json use.


@dataclass
class TagOutcome:
    tag: str
    version: str
    status: str
    outputs: dict[str, bytes] = field(default_factory=dict)  # file name -> bytes
    tables: list[dict] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict:
        return {
            "tag": self.tag,
            "version": self.version,
            "status": self.status,
            "files": sorted(self.outputs),
            "tables": self.tables,
            "error": self.error,
        }


@dataclass
class GenerateResult:
    outcomes: list[TagOutcome]
    differences: list[str] = field(default_factory=list)  # --check only

    @property
    def failed(self) -> bool:
        return any(o.status == ERROR for o in self.outcomes)

    def summary(self) -> dict:
        counts = {s: 0 for s in (PATCHED, NOTHING_TO_PATCH, ALREADY_UPSTREAM, ERROR)}
        for o in self.outcomes:
            counts[o.status] += 1
        return {"tags": len(self.outcomes), **counts}


def release_patch(
    source: GitSource,
    tag: str,
    project: Project,
    *,
    from_cc: Key,
    to_cc: Key,
    cache: dict[str, tuple[bytes, Rewrite | PatchkitError]],
    templates: Path | None = None,
    files: list[SourceFile] | None = None,
    blobs: dict[str, bytes] | None = None,
) -> TagOutcome:
    """Patch and manifest for one tag.

    ``cache`` maps blob ids to (bytes, rewrite), shared across tags; ``files`` and
    ``blobs`` are the tag's candidate files and their bytes when read in bulk.
    """
    release = source.release(tag)
    version = tag_to_version(tag)
    changes: list[FileChange] = []
    entries: list[FileEntry] = []
    upstream: list[dict] = []
    for file in source.files(tag, project.files) if files is None else files:
        cached = cache.get(file.blob)
        if cached is None:  # each distinct blob is read and rewritten once per run
            data = blobs[file.blob] if blobs and file.blob in blobs else source.read(file.blob)
            try:
                result = rewrite(data, project.tables, from_cc, to_cc, file.path)
            except PatchkitError as exc:
                result = exc
            cached = cache[file.blob] = (data, result)
        data, result = cached
        if isinstance(result, PatchkitError):
            return TagOutcome(tag, version, ERROR, error=str(result))
        upstream += [dict(t.to_json(), path=file.path) for t in result.tables if t.status == ALREADY_UPSTREAM]
        if not result.changed:
            continue
        new_blob = blob_id(result.source)
        changes.append(FileChange(file.path, file.mode, data, result.source, file.blob, new_blob))
        entries.append(
            FileEntry(
                path=file.path,
                mode=file.mode,
                pre_blob=file.blob,
                post_blob=new_blob,
                pre_sha256=sha256(data),
                post_sha256=sha256(result.source),
                tables=[t.to_json() for t in result.tables if t.status == PATCHED],
            )
        )
    if not changes:
        status = ALREADY_UPSTREAM if upstream else NOTHING_TO_PATCH
        return TagOutcome(tag, version, status, tables=upstream)

    release_fields = dict(project=project.name, version=version, tag=tag, commit=release.commit, from_cc=from_cc, to_cc=to_cc)
    ctx = message.context(
        **release_fields,
        files=[{"path": e.path, "tables": e.tables} for e in entries],
        already_upstream=upstream,
        last_update=release.day,
    )
    text = message.commit_message(ctx, templates)
    patch = format_patch(
        author=PATCH_AUTHOR,
        date=release.date,
        message=text,
        changes=changes,
        signature=f"patchkit {__version__}",
    )
    name = patch_filename(message.subject(text))
    manifest = Manifest(
        **release_fields, patch=name, patch_sha256=sha256(patch), files=entries, already_upstream=upstream, patchkit=__version__
    )
    tables = [dict(t, path=e.path) for e in entries for t in e.tables]
    return TagOutcome(tag, version, PATCHED, {name: patch, MANIFEST: manifest.to_bytes()}, tables)


def _ours(folder: Path) -> list[Path]:
    """The files generate writes in a version folder (and may therefore replace)."""
    return [p for p in folder.iterdir() if p.name == MANIFEST or p.suffix == ".patch"]


def differences(out: Path, outcomes: Iterable[TagOutcome]) -> list[str]:
    """How ``out`` differs from what these outcomes would write (for --check)."""
    found: list[str] = []
    for o in outcomes:
        if o.status == ERROR:
            continue
        folder = out / o.version
        existing = {p.name: p for p in _ours(folder)} if folder.is_dir() else {}
        for name, data in sorted(o.outputs.items()):
            path = folder / name
            if name not in existing:
                found.append(f"{path}: missing")
            elif existing[name].read_bytes() != data:
                found.append(f"{path}: differs from what generate writes")
        for name in sorted(set(existing) - set(o.outputs)):
            found.append(f"{folder / name}: not written by generate ({o.status})")
    return found


def write(out: Path, outcome: TagOutcome) -> None:
    """Make ``out/<version>/`` hold exactly what the outcome says (no folder if nothing)."""
    folder = out / outcome.version
    if outcome.status == ERROR:
        return
    if folder.is_dir():
        for stale in _ours(folder):
            if stale.name not in outcome.outputs:
                stale.unlink()
    if not outcome.outputs:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
        return
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in outcome.outputs.items():
        path = folder / name
        if not path.is_file() or path.read_bytes() != data:
            write_atomic(path, data, mode=0o644, durable=False)


def generate(
    repo: Path,
    tags: list[str],
    out: Path,
    project: Project,
    from_cc: Key,
    to_cc: Key,
    check: bool = False,
    templates: Path | None = None,
    progress: Callable[[str, bool], None] | None = None,
) -> Report:
    """Generate (or with ``check``, compare) the patches of ``tags`` (default: every release tag).

    ``progress`` gets each tag's line as soon as it is done (and whether it is an error)."""
    width = max(map(len, tags), default=14)  # the tags asked for; every release tag fits in 14
    source = GitSource(repo)
    tags = tags or source.release_tags()
    source.releases(tags)  # every named tag must exist before anything is written
    files = source.release_files(tags, project.files)
    blobs = source.read_many(sorted({f.blob for found in files.values() for f in found}))
    cache: dict[str, tuple[bytes, Rewrite | PatchkitError]] = {}
    outcomes = []
    for tag in tags:
        outcome = release_patch(source, tag, project, from_cc=from_cc, to_cc=to_cc, cache=cache, templates=templates,
                                files=files[tag], blobs=blobs)
        if not check:
            write(out, outcome)
        outcomes.append(outcome)
        if progress:
            progress(_line(outcome, width, out), outcome.status == ERROR)
    result = GenerateResult(outcomes)
    if check:
        result.differences = differences(out, outcomes)
    return _report(result, repo, out, from_cc, to_cc, check)


def _line(outcome: TagOutcome, width: int, out: Path) -> str:
    line = f"{outcome.tag:<{width}}  {outcome.status}"
    if outcome.status == PATCHED:
        patch = next(n for n in outcome.outputs if n.endswith(".patch"))
        files = {t["path"] for t in outcome.tables}
        line += f": {plural(len(outcome.tables), 'table')} in {plural(len(files), 'file')} -> {out / outcome.version / patch}"
    elif outcome.error:
        line += f": {outcome.error}"
    return line


def _report(result: GenerateResult, repo: Path, out: Path, from_cc: Key, to_cc: Key, check: bool) -> Report:
    summary = result.summary()
    report = Report()
    report.data = {
        "repo": str(repo),
        "out": str(out),
        "from_cc": from_cc,
        "to_cc": to_cc,
        "check": check,
        "tags": [o.to_json() for o in result.outcomes],
        "summary": summary,
        "differences": result.differences,
    }
    report.lines += result.differences
    report.add(
        f"{plural(summary['tags'], 'tag')}: {summary[PATCHED]} patched, {summary[NOTHING_TO_PATCH]} nothing to patch, "
        f"{summary[ALREADY_UPSTREAM]} already upstream, {plural(summary[ERROR], 'error')}"
        + (f"; {plural(len(result.differences), 'difference')} in {out}" if check else "")
    )
    # A tag whose tables could not be patched is a refusal; --check differences are problems.
    report.exit_code = REFUSED if result.failed else PROBLEMS if result.differences else OK
    return report
