"""``patchkit generate``: one version-pinned patch and manifest per release tag.

Reads each release from git objects, rewrites the candidate files, and renders
``<out>/<version>/0001-*.patch`` and ``<out>/<version>/manifest.json``.
Deterministic: the same repository and patchkit give byte-identical output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Iterable

from patchkit import __version__
from patchkit.targets.atomic import write_atomic
from patchkit.digest import blob_id, sha256
from patchkit.errors import OK, PROBLEMS, REFUSED, PatchkitError
from patchkit.patch import message
from patchkit.patch.manifest import SERIES, FileEntry, Manifest, SeriesEntry
from patchkit.patch.write import FileChange, format_patch, patch_filename
from patchkit.fixes.load import Rule
from patchkit.fixes.registry import FIXES, Project
from patchkit.rewrite.rules import rewrite_file
from patchkit.report import Report
from patchkit.text import plural
from patchkit.types import ALREADY_UPSTREAM, CANNOT_APPLY, ERROR, NOTHING_TO_PATCH, PATCHED
from patchkit.git.objects import GitSource, SourceFile
from patchkit.versions import tag_to_version

PATCH_AUTHOR = "patchkit <patchkit@users.noreply.invalid>"
MANIFEST = "manifest.json"
NOT_NEEDED_HERE = "not needed here"  # --to-cc auto: the machine lacks what the fix needs, the release turns off cleanly

# What a release needs, in the words the per-tag line and --json use.


@dataclass
class TagOutcome:
    tag: str
    version: str
    status: str
    outputs: dict[str, bytes] = field(default_factory=dict)  # file name -> bytes
    tables: list[dict] = field(default_factory=list)
    error: str | None = None
    fixes: list[dict] = field(default_factory=list)  # {"fix", "status", "reason"} of each fix

    def to_json(self) -> dict:
        return {
            "tag": self.tag,
            "version": self.version,
            "status": self.status,
            "files": sorted(self.outputs),
            "tables": self.tables,
            "fixes": self.fixes,
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


Cache = dict  # (fix, blob id) -> rules.FileRewrite or PatchkitError, shared across tags


def _fix_changes(current, fix_rules, read, root, cache, fix):
    """(changes, entries, already upstream, new bytes) of one fix over the files as they are."""
    changes, entries, upstream, new = [], [], [], {}
    for path, (file, data, blob) in sorted(current.items()):
        key = (fix, blob)
        if key not in cache:  # each distinct blob is rewritten once per fix and run
            try:
                cache[key] = rewrite_file(data, path, fix_rules, read, root)
            except PatchkitError as exc:
                cache[key] = exc
        result = cache[key]
        if isinstance(result, PatchkitError):
            raise result
        upstream += [dict(t, path=path) for t in result.found if t["status"] == ALREADY_UPSTREAM]
        if not result.changed:
            continue
        new_blob = blob_id(result.source)
        changes.append(FileChange(path, file.mode, data, result.source, blob, new_blob))
        entries.append(FileEntry(path=path, mode=file.mode, pre_blob=blob, post_blob=new_blob, pre_sha256=sha256(data),
                                 post_sha256=sha256(result.source), tables=[t for t in result.found if t["status"] == PATCHED]))
        new[path] = (file, result.source, new_blob)
    return changes, entries, upstream, new


def release_patch(
    source: GitSource,
    tag: str,
    project: Project,
    *,
    fixes: tuple[str, ...],
    rules: tuple[Rule, ...],
    cache: Cache,
    asked: tuple[str, ...] = (),
    templates: Path | None = None,
    files: list[SourceFile] | None = None,
    blobs: dict[str, bytes] | None = None,
    skip: Callable[[str, str], str | None] | None = None,
) -> TagOutcome:
    """The series (one patch per fix that changes something), its ``series`` file and
    manifest for one tag.  A fix that cannot apply is an error of the tag when it is
    ``asked`` for (named, or on by default), else a note.

    ``files`` and ``blobs`` are the tag's candidate files and their bytes when read in bulk.
    ``skip(fix, version)``: why a fix is not needed on this machine for the release (``--to-cc
    auto``), which leaves it out of the series; None to keep it.
    """
    release = source.release(tag)
    version = tag_to_version(tag)
    found = source.files(tag, project.files) if files is None else files
    current = {
        f.path: (f, blobs[f.blob] if blobs and f.blob in blobs else source.read(f.blob), f.blob) for f in found
    }
    read = partial(source.read_path, tag)
    series: list[SeriesEntry] = []
    outputs: dict[str, bytes] = {}
    statuses: list[dict] = []
    upstream_all: list[dict] = []
    for fix in fixes:
        fix_rules = tuple(r for r in rules if r.fix == fix)
        if not fix_rules:
            continue
        why = skip(fix, version) if skip else None
        if why:
            statuses.append({"fix": fix, "status": NOT_NEEDED_HERE, "reason": why})
            continue
        try:
            changes, entries, upstream, new = _fix_changes(current, fix_rules, read, project.source_root, cache, fix)
        except PatchkitError as exc:
            statuses.append({"fix": fix, "status": CANNOT_APPLY, "reason": str(exc)})
            continue
        upstream_all += upstream
        if not changes:
            statuses.append({"fix": fix, "status": ALREADY_UPSTREAM if upstream else NOTHING_TO_PATCH, "reason": None})
            continue
        statuses.append({"fix": fix, "status": PATCHED, "reason": None})
        current.update(new)
        name, patch, entry = _patch(release, tag, version, project, FIXES[fix], fix_rules, len(series) + 1, entries,
                                    changes, upstream, templates)
        outputs[name] = patch
        series.append(entry)
    errors = [f"{s['fix']} cannot apply: {s['reason']}" for s in statuses if s["status"] == CANNOT_APPLY and s["fix"] in asked]
    tables = [dict(t, path=e.path) for entry in series for e in entry.files for t in e.tables]
    if errors:
        return TagOutcome(tag, version, ERROR, error="; ".join(errors), fixes=statuses)
    if not series:
        status = ALREADY_UPSTREAM if upstream_all else NOTHING_TO_PATCH
        return TagOutcome(tag, version, status, tables=upstream_all, fixes=statuses)
    manifest = Manifest(project=project.name, version=version, tag=tag, commit=release.commit, fixes=statuses,
                        series=series, patchkit=__version__)
    outputs[SERIES] = "".join(f"{e.patch}\n" for e in series).encode()
    outputs[MANIFEST] = manifest.to_bytes()
    return TagOutcome(tag, version, PATCHED, outputs, tables, fixes=statuses)


def _patch(release, tag, version, project, fix, fix_rules, number, entries, changes, upstream, templates):
    """(file name, bytes, SeriesEntry) of one fix's patch."""
    keyed = next((r for r in fix_rules if r.kind != "predicate"), fix_rules[0])
    words = message.fix_fields(fix, fix_rules, project.name, version)
    rules = words["rules"]
    ctx = message.context(
        project=project.name, version=version, tag=tag, commit=release.commit, from_cc=keyed.from_cc, to_cc=keyed.to_cc,
        files=[{"path": e.path, "tables": e.tables} for e in entries], already_upstream=upstream,
        last_update=release.day, **words,
    )
    text = message.commit_message(ctx, templates)
    patch = format_patch(author=PATCH_AUTHOR, date=release.date, message=text, changes=changes, signature=f"patchkit {__version__}")
    name = patch_filename(message.subject(text), number)
    pair = (keyed.from_cc, keyed.to_cc) if keyed.kind != "predicate" else (None, None)
    entry = SeriesEntry(fix=fix.name, patch=name, patch_sha256=sha256(patch), from_cc=pair[0], to_cc=pair[1], rules=rules,
                        files=entries, already_upstream=upstream)
    return name, patch, entry


def _ours(folder: Path) -> list[Path]:
    """The files generate writes in a version folder (and may therefore replace)."""
    return [p for p in folder.iterdir() if p.name in (MANIFEST, SERIES) or p.suffix == ".patch"]


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
    fixes: tuple[str, ...],
    rules: tuple[Rule, ...],
    asked: tuple[str, ...] = (),
    check: bool = False,
    templates: Path | None = None,
    progress: Callable[[str, bool], None] | None = None,
    skip: Callable[[str, str], str | None] | None = None,
) -> Report:
    """Generate (or with ``check``, compare) the series of ``tags`` (default: every release tag).

    ``rules``: the rules of ``fixes`` for ``project``; ``asked``: the fixes whose failure to
    apply is an error.  ``progress`` gets each tag's line as soon as it is done (and
    whether it is an error)."""
    width = max(map(len, tags), default=14)  # the tags asked for; every release tag fits in 14
    source = GitSource(repo)
    tags = tags or source.release_tags()
    source.releases(tags)  # every named tag must exist before anything is written
    files = source.release_files(tags, tuple(dict.fromkeys(g for r in rules for g in r.files)))
    blobs = source.read_many(sorted({f.blob for found in files.values() for f in found}))
    cache: Cache = {}
    outcomes = []
    for tag in tags:
        outcome = release_patch(source, tag, project, fixes=fixes, rules=rules, cache=cache, asked=asked,
                                templates=templates, files=files[tag], blobs=blobs, skip=skip)
        if not check:
            write(out, outcome)
        outcomes.append(outcome)
        if progress:
            progress(_line(outcome, width, out), outcome.status == ERROR)
    result = GenerateResult(outcomes)
    if check:
        result.differences = differences(out, outcomes)
    return _report(result, repo, out, fixes, check)


_NOUNS = {"dict-key": "table", "list-member": "list", "predicate": "gate"}


def _line(outcome: TagOutcome, width: int, out: Path) -> str:
    line = f"{outcome.tag:<{width}}  {outcome.status}"
    if outcome.status == PATCHED:
        line += f" -> {out / outcome.version / SERIES}"
    parts = []
    for f in outcome.fixes:
        if f["status"] == PATCHED:
            found = [t for t in outcome.tables if t["fix"] == f["fix"]]
            files = {t["path"] for t in found}
            noun = _NOUNS.get(found[0]["kind"], "change") if found else "change"
            parts.append(f"{f['fix']} {plural(len(found), noun)} in {plural(len(files), 'file')}")
        elif f["status"] == CANNOT_APPLY and outcome.status != ERROR:
            parts.append(f"{f['fix']} cannot apply ({f['reason']})")
        elif f["status"] == NOT_NEEDED_HERE:
            parts.append(f"{f['fix']} not needed here ({f['reason']})")
        elif f["status"] != CANNOT_APPLY and outcome.status == PATCHED:
            parts.append(f"{f['fix']} {f['status']}")
    if outcome.error:
        parts.append(outcome.error)
    return line + (": " + "; ".join(parts) if parts else "")


def _report(result: GenerateResult, repo: Path, out: Path, fixes: tuple[str, ...], check: bool) -> Report:
    summary = result.summary()
    report = Report()
    report.data = {
        "repo": str(repo),
        "out": str(out),
        "fixes": list(fixes),
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
    # A tag whose asked-for fix could not be applied is a refusal; --check differences are problems.
    report.exit_code = REFUSED if result.failed else PROBLEMS if result.differences else OK
    return report
